"""The ``amb`` command: parses, configures and calls the library; no logic of its own.

Heavy libraries (DSPy, torch, FAISS, sentence-transformers) are imported inside commands, so that
``amb --help`` answers at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(help="amb-dspy: an Agentic Memory Bank on DSPy.", no_args_is_help=True, add_completion=False)


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input or configuration: reported in one line, without a traceback."""
    from amb_dspy.adapter import InputError
    from amb_dspy.retrieval.embedding import EmbeddingError
    from amb_dspy.storage.bank_file import BankFileError

    errors: list[type[BaseException]] = [InputError, BankFileError, EmbeddingError, FileNotFoundError]
    for module, name in (("amb_dspy.compiled", "CompiledError"), ("amb_dspy.lm", "LMConfigError"),
                         ("amb_dspy.tools.corpus", "CorpusError")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


@app.command()
def version() -> None:
    """Print the amb-dspy version."""
    from amb_dspy import __version__

    typer.echo(f"amb-dspy {__version__}")


@app.command()
def run(
    task: str = typer.Argument(..., help="what the agent should do or answer"),
    context_file: Optional[Path] = typer.Option(None, "--context-file", help="long text given with the task"),
    image: list[Path] = typer.Option([], "--image", help="an image attached to the task (repeatable)"),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="local search corpus: a folder or a JSONL of passages"),
    lm: Optional[str] = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    compiled: Optional[Path] = typer.Option(None, "--compiled", help="directory written by `amb optimize`"),
    export: Optional[Path] = typer.Option(None, "--export", help="write the bank (JSON) here at the end"),
    max_loops: Optional[int] = typer.Option(None, "--max-loops", min=1, help="execution-loop cap"),
) -> None:
    """Answer a task with the memory bank; the answer is printed last."""
    from rich.console import Console

    from amb_dspy.config import AmbConfig

    console = Console(stderr=True)
    overrides = {k: v for k, v in {"lm": lm, "corpus": corpus, "max_loops": max_loops}.items() if v is not None}
    try:
        config = AmbConfig(**overrides)
        from amb_dspy.bank import MemoryBank, read_context_file

        context = read_context_file(context_file, config.max_context_bytes) if context_file else ""
        with console.status("loading the memory bank...") as status:

            def show(event) -> None:
                line = (f"{event.phase} | loop {event.loop} | nodes {event.nodes} edges {event.edges} "
                        f"conflicts {event.conflicts} | LM calls {event.lm_calls} tokens {event.tokens}"
                        + (f" | {event.message[:60]}" if event.message else ""))
                if console.is_terminal:
                    status.update(line)
                else:  # a log file or CI: one plain line per step
                    console.print(line, highlight=False, soft_wrap=True)

            bank = MemoryBank(config, compiled=compiled, progress=show)
            if bank.notice:
                console.print(f"[yellow]{bank.notice}[/]")
            result = bank.run(task, context=context, images=list(image))
    except _expected_errors() as exc:
        _fail(_one_line(exc))
    except Exception as exc:  # noqa: BLE001 - the user gets one line; AMB_DEBUG=1 shows the traceback
        if os.environ.get("AMB_DEBUG"):
            raise
        _fail(f"{type(exc).__name__}: {_one_line(exc)} (set AMB_DEBUG=1 for the traceback)")
    if export:
        bank.export(export)
        console.print(f"bank exported to {export}")
    for agent, usage in result.usage.items():
        console.print(f"  {agent:<15} calls {usage['calls']:>4}  prompt {usage['prompt_tokens']:>7}  "
                      f"completion {usage['completion_tokens']:>6}")
    console.print(f"termination: {result.termination}; loops {result.loops}; "
                  f"nodes {len(result.query_graph['nodes'])}; {result.seconds:.1f} s")
    for error in result.errors:
        console.print(f"[dim]note: {error}[/]")
    typer.echo(result.answer or "(no answer)")


def _run_command(call) -> None:
    """Run a command body; known errors and anything unexpected end in one line and a non-zero exit."""
    from optimize.commands import expected_errors

    try:
        call()
    except (*_expected_errors(), *expected_errors()) as exc:
        _fail(_one_line(exc))
    except Exception as exc:  # noqa: BLE001 - the user gets one line; AMB_DEBUG=1 shows the traceback
        if os.environ.get("AMB_DEBUG"):
            raise
        _fail(f"{type(exc).__name__}: {_one_line(exc)} (set AMB_DEBUG=1 for the traceback)")


@app.command()
def optimize(
    agent: str = typer.Option(..., "--agent", help="classification, structure, analysis, integration, planning, or all"),
    train: str = typer.Option("hotpotqa", "--train", help="hotpotqa (Hugging Face) or hotpotqa:PATH (official JSON/JSONL file)"),
    optimizer: str = typer.Option("bootstrap", "--optimizer", help="bootstrap (BootstrapFewShot), mipro (MIPROv2 light), gepa (GEPA light)"),
    n: Optional[int] = typer.Option(None, "--n", min=2, help="HotpotQA items to use, training and held-out together (default: all)"),
    out: Path = typer.Option(Path("compiled"), "--out", help="directory for <agent>.json and manifest.json"),
    lm: Optional[str] = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    teacher_lm: Optional[str] = typer.Option(None, "--teacher-lm", help="LM for bootstrap traces, proposed instructions and GEPA reflection (default: --lm)"),
) -> None:
    """Compile an agent's prompts on HotpotQA, score them before and after on held-out questions, and save them."""
    from amb_dspy.config import AmbConfig
    from optimize.commands import optimize_command

    _run_command(lambda: optimize_command(agent=agent, train=train, optimizer=optimizer, n=n, out=out, lm=lm,
                                          teacher_lm=teacher_lm, config=AmbConfig(**({"lm": lm} if lm else {}))))


@app.command("eval")
def evaluate(
    dataset: str = typer.Option("hotpotqa", "--dataset", help="hotpotqa (Hugging Face validation split) or hotpotqa:PATH"),
    n: int = typer.Option(20, "--n", min=1, help="questions to answer: the first N"),
    compiled: Optional[Path] = typer.Option(None, "--compiled", help="directory written by `amb optimize` (bank mode)"),
    mode: str = typer.Option("bank", "--mode", help="bank (the memory bank), react (plain dspy.ReAct, no memory), context (one long-context call)"),
    corpus: bool = typer.Option(False, "--corpus", help="search a local corpus of all the questions' paragraphs instead of giving each its own"),
    lm: Optional[str] = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
) -> None:
    """Answer HotpotQA questions and print per-question and mean EM, F1, LM calls, tokens and seconds; the last line is JSON."""
    from amb_dspy.config import AmbConfig
    from optimize.commands import eval_command

    _run_command(lambda: eval_command(dataset=dataset, n=n, mode=mode, compiled=compiled, corpus=corpus, lm=lm,
                                      config=AmbConfig(**({"lm": lm} if lm else {})), echo=typer.echo))


# --- amb memory: long-term memory across tasks ----------------------------------------------------------
memory_app = typer.Typer(help="Long-term memory kept across tasks (AMB_LONGTERM_BACKEND=sqlite|chroma, "
                              "AMB_LONGTERM_URL for a Chroma server).", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
_NAMESPACE = typer.Option("default", "--namespace", help="whose memory: a user, an agent, a task type")
_KIND = typer.Option(None, "--kind", help="conclusion, fact, trajectory or preference")


def _memory(command: str, **arguments) -> None:
    """Call ``amb_dspy.longterm.commands.<command>`` with the configuration and print its lines."""
    from amb_dspy.config import AmbConfig
    from amb_dspy.longterm import LongTermError, commands

    try:
        lines = getattr(commands, command)(AmbConfig(), **arguments)
    except (LongTermError, *_expected_errors()) as exc:
        _fail(_one_line(exc))
    for line in lines:
        typer.echo(line)


@memory_app.command("list")
def memory_list(namespace: str = _NAMESPACE, kind: Optional[str] = _KIND,
                limit: int = typer.Option(50, "--limit", min=1, help="items to show")) -> None:
    """List a namespace's items, most recently updated first."""
    _memory("list_items", namespace=namespace, kind=kind, limit=limit)


@memory_app.command("search")
def memory_search(query: str = typer.Argument(..., help="what to look for"), namespace: str = _NAMESPACE,
                  kind: Optional[str] = _KIND, k: int = typer.Option(5, "--k", min=1, help="results")) -> None:
    """Find the items that best match a query, with their scores."""
    _memory("search_items", namespace=namespace, query=query, k=k, kind=kind)


@memory_app.command("show")
def memory_show(item_id: str = typer.Argument(..., help="the item's id"), namespace: str = _NAMESPACE) -> None:
    """Print one item as JSON with its audit rows."""
    _memory("show_item", namespace=namespace, item_id=item_id)


@memory_app.command("delete")
def memory_delete(item_id: str = typer.Argument(..., help="the item's id"), namespace: str = _NAMESPACE,
                  reason: str = typer.Option("", "--reason", help="kept in the audit row")) -> None:
    """Delete an item; it leaves search at once and an audit row stays."""
    _memory("delete_item", namespace=namespace, item_id=item_id, reason=reason)


@memory_app.command("prune")
def memory_prune(older_than: float = typer.Option(..., "--older-than", min=0, help="days since the last update"),
                 namespace: str = _NAMESPACE, kind: Optional[str] = _KIND) -> None:
    """Delete the items not updated for a number of days (one audit row each)."""
    _memory("prune_items", namespace=namespace, older_than_days=older_than, kind=kind)


@memory_app.command("export")
def memory_export(namespace: str = _NAMESPACE,
                  out: Optional[Path] = typer.Option(None, "--out", help="write the JSON here instead of printing it")) -> None:
    """Export a namespace's items and audit rows as one JSON object."""
    _memory("export_items", namespace=namespace, out=out)


if __name__ == "__main__":
    app()

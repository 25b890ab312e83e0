"""The ``amb`` command: parses, configures and calls the library; no logic of its own.

Heavy libraries (DSPy, torch, FAISS, sentence-transformers) are imported inside commands, so that
``amb --help`` answers at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import typer

from amb_dspy.config.environment import debug_enabled
from amb_dspy.errors import UserError, one_line
from amb_dspy.serve.command import DATABASE_HELP, EMBEDDER_HELP, serve_command  # typer only: the server loads later
from amb_dspy.serve.keys_command import keys_app

app = typer.Typer(help="amb-dspy: an Agentic Memory Bank on DSPy.", no_args_is_help=True, add_completion=False)
app.command("serve")(serve_command)
app.add_typer(keys_app, name="keys")


def _fail(message: str, code: int = 1) -> None:
    """``error: MESSAGE`` on stderr (control characters escaped: it may quote a file name), and exit ``code``."""
    from amb_dspy.text import printable

    typer.echo(f"error: {printable(message)}", err=True)
    raise typer.Exit(code)


def _settings(**overrides):
    """The command's configuration (its flags over ``AMB_*`` settings), or exit 2 in one line before any work
    (see :func:`amb_dspy.lm.specs.checked_config`)."""
    from amb_dspy.errors import ConfigError
    from amb_dspy.lm.specs import checked_config

    try:
        return checked_config(**overrides)
    except ConfigError as exc:
        _fail(one_line(exc), code=2)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a service manager's stop, a CI timeout) ends the block as Ctrl-C does, so the
    command can say what memory it kept and write it; the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command()
def version() -> None:
    """Print the amb-dspy version."""
    from amb_dspy import __version__

    typer.echo(f"amb-dspy {__version__}")


@app.command()
def run(
    task: str | None = typer.Argument(None, help="what the agent should do or answer (not with --resume)"),
    context_file: Path | None = typer.Option(None, "--context-file", help="long text given with the task"),
    image: list[Path] = typer.Option([], "--image", help="an image attached to the task (repeatable)"),
    corpus: Path | None = typer.Option(None, "--corpus", help="local search corpus: a folder or a JSONL of passages"),
    lm: str | None = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    compiled: Path | None = typer.Option(None, "--compiled", help="directory written by `amb optimize`"),
    export: Path | None = typer.Option(None, "--export", help="write the bank (JSON) here at the end"),
    max_loops: int | None = typer.Option(None, "--max-loops", min=1, help="execution-loop cap"),
    bank_file: Path | None = typer.Option(None, "--bank", help="start from this bank: a file, or a name from `amb ingest --bank NAME`; it is not changed"),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="checkpoint folder (default: STORAGE_DIR/checkpoints/<time>)"),
    resume: Path | None = typer.Option(None, "--resume", help="continue the killed run whose checkpoint folder this is"),
    policy: str | None = typer.Option(None, "--policy", help="lm, heuristic (no LM for the memory agents), or auto: LM, then the deterministic policy when its answer is unusable (default)"),
    remember: bool = typer.Option(False, "--remember", help="write the task's conclusion and trajectory to long-term memory"),
    recall: bool | None = typer.Option(None, "--recall/--no-recall", help="show earlier tasks' items in <memory> (default: when a long-term store exists)"),
    redact: bool = typer.Option(False, "--redact", help="remove e-mails, phone numbers and secrets before remembering"),
    namespace: str | None = typer.Option(None, "--namespace", help="long-term memory namespace (default: 'default')"),
    trace: Path | None = typer.Option(None, "--trace", help="write one JSON line per phase event here (read it with `amb show --trace`)"),
    no_fast: bool = typer.Option(False, "--no-fast", help="do not answer from memory first (AMB_FAST_PATH=0): always plan and execute"),
    strategy: str | None = typer.Option(None, "--strategy", help="auto (default): direct for a tiny LM such as the embedded SmolLM2-135M, else loop; loop: plan, search and answer; direct: the memory agents' policies, a search for what memory lacks, one answer call (AMB_STRATEGY)"),
    embedder: str | None = typer.Option(None, "--embedder", help=EMBEDDER_HELP),
    database: str | None = typer.Option(None, "--database", "--database-url", help=DATABASE_HELP),
) -> None:
    """Answer a task with the memory bank; the answer is printed last."""
    from rich.console import Console
    console = Console(stderr=True)
    config = _settings(lm=lm, corpus=corpus, max_loops=max_loops, policy=policy, recall=recall, namespace=namespace,
                       remember=remember or None, redact=redact or None, fast_path=False if no_fast else None,
                       strategy=strategy, embedder=embedder, database_url=database)
    if resume is None:  # every new run checkpoints, so that `amb run --resume` can continue it
        config = config.model_copy(update={"checkpoint_dir": checkpoint or _new_checkpoint_folder(config)})
    result = None

    def call() -> None:
        nonlocal result
        result = _run_task(console, config, task=task or "", context_file=context_file, images=list(image),
                           bank_file=bank_file, resume=resume, compiled=compiled, trace=trace)

    try:
        with _sigterm_as_interrupt():
            _run_command(call)
    except KeyboardInterrupt as interrupt:  # amb_dspy.task.result.RunInterrupted once the task started: its store
        _fail(_interrupted(getattr(interrupt, "store", None), export), code=130)
    _ran(console, result, export)


def _run_task(console, config, *, task: str, context_file: Path | None, images: list[Path], bank_file: Path | None,
              resume: Path | None, compiled: Path | None, trace: Path | None):
    """``amb run``'s call: the bank's run of ``task`` (or its resume of a checkpoint), its progress on the console
    and, with ``trace``, in a trace file."""
    from amb_dspy.bank import MemoryBank, read_context_file
    from amb_dspy.view.progress import progress_display
    from amb_dspy.view.trace import TraceWriter, fan_out

    trace_writer = TraceWriter(trace) if trace else None
    context = read_context_file(context_file, config.limits.max_context_bytes) if context_file else ""
    with console.status("loading the memory bank...") as status:
        bank = MemoryBank(config, compiled=compiled, progress=fan_out(progress_display(console, status), trace_writer))
        if bank.notice:
            console.print(f"[yellow]{bank.notice}[/]")
        if resume is not None:
            return bank.resume(resume)
        return bank.run(task, context=context, images=images, bank=bank_file)


def _ran(console, result, export: Path | None) -> None:
    """The end of ``amb run``: its lines and answer, the bank saved with ``--export``; exit 1 without an answer."""
    from amb_dspy.view.progress import run_summary

    run_summary(console, result)
    typer.echo(("[extractive] " if result.extractive else "") + (result.answer or "(no answer)"))
    if export:
        console.print(f"bank exported to {_export(result.store, export)}")
    if not result.answer:
        _fail(f"no answer ({result.termination})" + (f": {result.errors[-1]}" if result.errors else ""))


def _new_checkpoint_folder(config) -> Path:
    return config.paths.storage_dir / "checkpoints" / time.strftime("%Y%m%d-%H%M%S")


@app.command()
def ingest(
    paths: list[str] = typer.Argument(None, help="files, folders (read recursively: .txt .md .html, .jsonl passages, "
                                      ".json LoCoMo conversations) and globs to add, each document its own entry"),
    bank_name: str | None = typer.Option(None, "--bank", help="the bank to add to, created when missing; a name without "
                                         "a folder is the bank database STORAGE_DIR/banks/NAME.sqlite, "
                                         "where amb serve's memory_start_task(bank='NAME') finds it"),
    context_file: Path | None = typer.Option(None, "--context-file", help="one more document to remember"),
    export: Path | None = typer.Option(None, "--export", help="write the bank (JSON) here (with --bank: a copy)"),
    lm: str | None = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    compiled: Path | None = typer.Option(None, "--compiled", help="directory written by `amb optimize`"),
    policy: str | None = typer.Option(None, "--policy", help="lm, heuristic (no LM needed at all) or auto (default)"),
    embedder: str | None = typer.Option(None, "--embedder", help=EMBEDDER_HELP),
    database: str | None = typer.Option(None, "--database", "--database-url", help=DATABASE_HELP),
) -> None:
    """Add documents to a bank (no planning, no executor); then ask it many questions with `amb run --bank`.

    A document added again unchanged is skipped; a changed one (same path, new text) is added and its old
    version's nodes are marked superseded (<memory> shows the new one). A file that cannot be read is one
    line and is skipped: the others are added, and the exit code is 1."""
    from rich.console import Console

    from amb_dspy.storage.bank_names import bank_place

    console = Console(stderr=True)
    config = _settings(lm=lm, policy=policy, embedder=embedder, database_url=database)
    sources = [*(paths or []), *([str(context_file)] if context_file else [])]
    if not sources or (bank_name is None and export is None):
        _fail("say what to add (PATH... or --context-file) and where (--bank BANK or --export FILE)", code=2)
    target = bank_place(bank_name, config.paths.storage_dir, config.paths.database_url) if bank_name else None
    ingest = result = None

    def call() -> None:
        nonlocal ingest, result
        from amb_dspy.bank import MemoryBank
        from amb_dspy.view.progress import ingest_display

        with ingest_display(console) as show:
            bank = MemoryBank(config, compiled=compiled, progress=show)
            if bank.notice and bank.task_config().models.policy != "heuristic":  # no LM call at ingest then
                console.print(f"[yellow]{bank.notice}[/]")
            ingest = bank.ingester()
            result = ingest.add(sources, into=target, export=export)

    try:
        with _sigterm_as_interrupt():
            _run_command(call)
    except KeyboardInterrupt:
        store, added = (ingest.store, ingest.added) if ingest is not None else (None, None)
        _fail(_interrupted(store, target or export, added=added), code=130)
    _ingested(result)


def _ingested(result) -> None:
    """The last lines of ``amb ingest``: the errors noted, then :meth:`~amb_dspy.memory.documents.AddResult.summary`;
    exit 1 when a document was skipped (the others are in the bank)."""
    from amb_dspy.text import printable

    for error in result.errors:
        typer.echo(f"note: {printable(error)}", err=True)
    typer.echo(printable(result.summary()))
    if result.skipped:
        _fail(f"{len(result.skipped)} of the documents could not be added (see the lines above)")


def _export(store, path: Path) -> Path:
    """Save ``store`` (a task's memory), or fail in one line (the answer is already printed); returns the file
    written, another name than ``path`` when a larger bank is there (see :func:`amb_dspy.storage.bank_file.dump_bank`)."""
    from amb_dspy.storage.bank_file import BankFileError

    try:
        return store.save(path)
    except (OSError, BankFileError) as exc:
        _fail(f"cannot export the bank to {path}: {one_line(exc)}")


def _interrupted(store, export: Path | None, added=None) -> str:
    """What an interrupted run or ingest kept: the memory built so far (``store``), exported when --export was
    given; an ingest into a bank database (``added``: its add as it grew): every document committed before the
    interrupt (the same command adds the rest)."""
    from amb_dspy.storage.bank_place import bank_at

    if added is not None and export is not None and bank_at(export).grows:
        committed = added.done - len(added.unchanged)
        return f"interrupted: {committed} documents committed to {export}; the same command adds the rest"
    if store is None:
        return "interrupted before the run started: nothing was kept"
    kept = f"interrupted: memory kept {len(store.graph)} nodes and {len(store.tree)} entries"
    if export is None:
        return kept + " (not written: no --export)"
    return f"{kept}, exported to {_export(store, export)}"


@app.command("show")
def show_bank(
    bank: Path | None = typer.Argument(None, help="a bank file written by `amb run --export`, or a bank's name (`amb ingest --bank NAME`)"),
    node: str | None = typer.Option(None, "--node", help="show one node in full (its id, or the first characters of it)"),
    html: Path | None = typer.Option(None, "--html", help="write a self-contained HTML view of the bank here"),
    trace: Path | None = typer.Option(None, "--trace", help="print a trace written by `amb run --trace` as a table"),
    database: str | None = typer.Option(None, "--database", "--database-url", help=DATABASE_HELP),
) -> None:
    """See a bank: its Insight Doc, nodes and merges (or one node with --node), an offline HTML view, or a run's trace."""
    from rich.console import Console

    from amb_dspy.storage.bank_names import bank_place
    from amb_dspy.view import show

    paths = _settings(database_url=database).paths
    try:  # not _run_command: looking at a bank must not load DSPy to learn its error classes
        bank = bank_place(bank, paths.storage_dir, paths.database_url) if bank is not None else None
        show(Console(), bank=bank, node=node, html=html, trace=trace)
    except (UserError, OSError) as exc:
        _fail(one_line(exc))


def _run_command(call) -> None:
    """Run a command body; known errors and anything unexpected end in one line and a non-zero exit."""
    try:
        call()
    except UserError as exc:
        _fail(one_line(exc))
    except Exception as exc:  # noqa: BLE001 - the user gets one line; AMB_DEBUG=1 shows the traceback
        if debug_enabled():
            raise
        _fail(f"{type(exc).__name__}: {one_line(exc)} (set AMB_DEBUG=1 for the traceback)")


@app.command()
def optimize(
    agent: str = typer.Option(..., "--agent", help="classification, structure, analysis, integration, planning, answer, or all"),
    train: str = typer.Option("hotpotqa", "--train", help="hotpotqa (Hugging Face) or hotpotqa:PATH (official JSON/JSONL file)"),
    optimizer: str = typer.Option("bootstrap", "--optimizer", help="bootstrap (BootstrapFewShot), mipro (MIPROv2 light), gepa (GEPA light)"),
    n: int | None = typer.Option(None, "--n", min=2, help="HotpotQA items to use, training and held-out together (default: all)"),
    out: Path = typer.Option(Path("compiled"), "--out", help="directory for <agent>.json and manifest.json"),
    lm: str | None = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    teacher_lm: str | None = typer.Option(None, "--teacher-lm", help="LM for bootstrap traces, proposed instructions and GEPA reflection (default: --lm)"),
    num_threads: int = typer.Option(1, "--num-threads", min=1, help="examples scored at once, and MIPROv2's and GEPA's threads (hosted LMs)"),
) -> None:
    """Compile an agent's prompts on HotpotQA, score them before and after on held-out questions, and save them."""
    from optimize.commands import optimize_command

    config = _settings(lm=lm)
    _run_command(lambda: optimize_command(agent=agent, train=train, optimizer=optimizer, n=n, out=out, lm=lm,
                                          teacher_lm=teacher_lm, num_threads=num_threads, config=config))


@app.command("eval")
def evaluate(
    dataset: str = typer.Option("hotpotqa", "--dataset", help="hotpotqa (Hugging Face validation split), hotpotqa:PATH, or locomo:PATH (a LoCoMo conversation JSON or a folder of them)"),
    n: int = typer.Option(20, "--n", min=1, help="questions to answer: the first N"),
    compiled: Path | None = typer.Option(None, "--compiled", help="directory written by `amb optimize` (bank mode)"),
    mode: str = typer.Option("bank", "--mode", help="bank (the memory bank), react (plain dspy.ReAct, no memory), context (one long-context call), rag (flat hybrid retrieval into the same <memory> budget, one answer call)"),
    corpus: bool = typer.Option(False, "--corpus", help="search a local corpus of all the questions' paragraphs instead of giving each its own"),
    lm: str | None = typer.Option(None, "--lm", help="dspy model string, 'local', or 'gguf:PATH'"),
    judge_lm: str | None = typer.Option(None, "--judge-lm", help="LoCoMo: an LM that judges each answer correct or not against the gold one (Mem0's J)"),
    num_threads: int = typer.Option(1, "--num-threads", min=1, help="questions answered at once (hosted LMs; the embedded model serialises its calls)"),
    policy: str | None = typer.Option(None, "--policy", help="lm, heuristic or auto (the memory agents' policy, bank mode)"),
    strategy: str | None = typer.Option(None, "--strategy", help="auto (default): direct for a tiny LM such as the embedded SmolLM2-135M, else loop; loop: plan, search and answer; direct: the memory agents' policies, a search for what memory lacks, one answer call (AMB_STRATEGY); bank mode"),
    embedder: str | None = typer.Option(None, "--embedder", help=EMBEDDER_HELP),
) -> None:
    """Answer HotpotQA or LoCoMo questions and print per-question and mean scores, LM calls, tokens and seconds; the last line is JSON."""
    from optimize.commands import eval_command

    config = _settings(lm=lm, policy=policy, strategy=strategy, embedder=embedder)
    _run_command(lambda: eval_command(dataset=dataset, n=n, mode=mode, compiled=compiled, corpus=corpus, lm=lm,
                                      judge_lm=judge_lm, num_threads=num_threads, config=config, echo=typer.echo))


# --- amb memory: long-term memory across tasks ----------------------------------------------------------
memory_app = typer.Typer(help="Long-term memory kept across tasks (AMB_LONGTERM_BACKEND=sqlite|chroma|qdrant, "
                              "AMB_LONGTERM_URL for a Chroma or Qdrant server).", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
_NAMESPACE = typer.Option("default", "--namespace", help="whose memory: a user, an agent, a task type")
_KIND = typer.Option(None, "--kind", help="conclusion, fact, trajectory, preference or tool_effect")


def _memory(command: str, **arguments) -> None:
    """Call ``amb_dspy.longterm.commands.<command>`` with the configuration and print its lines."""
    from amb_dspy.longterm import commands

    config = _settings()  # bad settings: one line and exit 2, as for every other command
    try:
        lines = getattr(commands, command)(config, **arguments)
    except UserError as exc:
        _fail(one_line(exc))
    for line in lines:
        typer.echo(line)


@memory_app.command("list")
def memory_list(namespace: str = _NAMESPACE, kind: str | None = _KIND,
                limit: int = typer.Option(50, "--limit", min=1, help="items to show")) -> None:
    """List a namespace's items, most recently updated first."""
    _memory("list_items", namespace=namespace, kind=kind, limit=limit)


@memory_app.command("search")
def memory_search(query: str = typer.Argument(..., help="what to look for"), namespace: str = _NAMESPACE,
                  kind: str | None = _KIND, k: int = typer.Option(5, "--k", min=1, help="results")) -> None:
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
                 namespace: str = _NAMESPACE, kind: str | None = _KIND) -> None:
    """Delete the items not updated for a number of days (one audit row each)."""
    _memory("prune_items", namespace=namespace, older_than_days=older_than, kind=kind)


@memory_app.command("export")
def memory_export(namespace: str = _NAMESPACE,
                  out: Path | None = typer.Option(None, "--out", help="write the JSON here instead of printing it")) -> None:
    """Export a namespace's items and audit rows as one JSON object."""
    _memory("export_items", namespace=namespace, out=out)


@memory_app.command("route")
def memory_route(message: str = typer.Argument(..., help="a task or a user's message"), namespace: str = _NAMESPACE,
                 answer: str = typer.Option("", "--answer", help="route as after a task that answered this")) -> None:
    """Say whether a message reads and writes long-term memory, where, what, and why."""
    _memory("route_message", namespace=namespace, message=message, answer=answer)


if __name__ == "__main__":
    app()

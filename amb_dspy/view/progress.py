"""How ``amb run`` and ``amb ingest`` show a task's progress events (:class:`~amb_dspy.task.state.ProgressEvent`).

What an event carries from outside (a document's name, a notice quoting a file) is shown through
:func:`~amb_dspy.text.printable` and never read as console markup: a name cannot clear the screen or style the line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.text import Text

from amb_dspy.text import printable


def progress_display(console, status):
    """The display of a run's or an ingest's progress events on stderr: the status line on a terminal,
    one plain line per step in a log file or CI; notices and checkpoints are always printed. An add's document
    count (``done`` of ``total``) is shown with the rate of its documents' tokens and an estimate of the time left."""
    clock = _Clock()
    terminal = console.is_terminal  # asked once: each ask is system calls, and events come several a document

    def show(event) -> None:
        if event.phase == "notice":  # said once, whatever the display
            console.print(Text(printable(event.message), style="yellow"), highlight=False, soft_wrap=True)
            return
        if event.phase == "checkpoint":
            console.print(Text(f"checkpoint: {printable(event.message)} (amb run --resume {printable(event.message)} "
                               "continues this run if it stops)"), highlight=False, soft_wrap=True)
            return
        if event.total:
            seconds = clock.elapsed()
            line = (f"{event.phase} {event.done}/{event.total}{_rate(event.text_tokens, seconds)}"
                    f"{_left(event.done, event.total, seconds)}: "
                    f"{_tail(printable(event.message), 80)}")
        else:
            clock.start()
            line = (f"{event.phase} | loop {event.loop} | nodes {event.nodes} edges {event.edges} "
                    f"conflicts {event.conflicts} | LM calls {event.lm_calls} tokens {event.tokens}"
                    + (f" | {printable(event.message)[:60]}" if event.message else ""))
        if terminal:
            status.update(Text(line))
        else:  # what console.print writes for a plain line, without its rendering (a line or more per document)
            console.file.write(line + "\n")
            console.file.flush()

    return show


@contextmanager
def ingest_display(console) -> Iterator[Callable]:
    """The display of an add of documents: on a terminal a rich progress bar (documents done of those expected,
    the time left) under the status line of :func:`progress_display`; elsewhere its plain lines. Yields the
    callback that takes the events."""
    if not console.is_terminal:
        yield progress_display(console, None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("loading the memory bank...", total=None)
        shown = progress_display(console, _BarLine(bar, task))

        def show(event) -> None:
            if event.total:
                bar.update(task, completed=event.done, total=event.total)
            shown(event)

        yield show


def _tail(name: str, limit: int) -> str:
    """The end of a long name (a path's end tells one file from another), cut to ``limit`` characters."""
    return name if len(name) <= limit else "..." + name[len(name) - limit + 3:]


class _BarLine:
    """The status line of :func:`progress_display` as a progress bar's description."""

    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def update(self, line: Text) -> None:
        self.bar.update(self.task, description=line.plain[:100])


class _Clock:
    """When the work began: the first step shown."""

    def __init__(self):
        self.began: float | None = None

    def start(self) -> None:
        if self.began is None:
            self.began = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the work began (it begins now if it had not)."""
        self.start()
        return time.monotonic() - self.began


def _rate(text_tokens: int, seconds: float) -> str:
    """``, 5,473 tokens/s``: the documents' tokens done per second so far (nothing in the first second)."""
    return f", {text_tokens / seconds:,.0f} tokens/s" if text_tokens and seconds >= 1 else ""


def _left(done: int, total: int, seconds: float) -> str:
    """``, about 2 min left`` at the rate so far (nothing before the first document is done, or after the last)."""
    if not done or done >= total:
        return ""
    left = seconds / done * (total - done)
    return f", about {max(1, round(left))} s left" if left < 90 else \
        f", about {left / 60:.0f} min left" if left < 5400 else f", about {left / 3600:.1f} h left"


def run_summary(console, result) -> None:
    """A run's last lines on stderr (before ``amb run`` prints the answer alone on stdout): usage per agent, how it
    ended, its tools, notes, citations, and whether the answer is quoted from memory (extractive)."""
    from amb_dspy.storage import Hop, hop_summary

    for agent in sorted({*result.usage, *result.fallbacks}):
        usage = result.usage.get(agent, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        console.print(f"  {agent:<15} calls {usage['calls']:>4}  prompt {usage['prompt_tokens']:>7}  "
                      f"completion {usage['completion_tokens']:>6}  fallbacks {result.fallbacks.get(agent, 0):>3}")
    console.print(f"termination: {result.termination}; loops {result.loops}; "
                  f"nodes {len(result.query_graph['nodes'])}; {result.seconds:.1f} s")
    tools = hop_summary([Hop.model_validate(hop) for hop in result.hops])
    console.print(f"tools: searches {tools['searches']} (unique {tools['unique_searches']}), "
                  f"repeats avoided {tools['repeats_avoided']}, visits {tools['visits']}, hops {tools['hops']}")
    for error in result.errors:
        console.print(f"[dim]note: {error}[/]")
    for notice in result.notices:
        if notice.startswith("not remembered"):
            console.print(f"[yellow]{notice}[/]", highlight=False)
    for cited in result.citations:
        console.print(f"cited {cited['node_id'][:8]}: {cited['topic']} -- \"{cited['source']}\"", highlight=False)
    if result.extractive:  # exit 0, but scripts can tell: no LM answered, memory's best line is quoted
        console.print("answer: extractive (quoted from memory: no LM answer was given or accepted; see the notes)",
                      highlight=False)

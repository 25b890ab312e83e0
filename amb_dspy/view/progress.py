"""How ``amb run`` and ``amb ingest`` show a task's progress events (:class:`~amb_dspy.task.state.ProgressEvent`)."""

from __future__ import annotations


def progress_display(console, status):
    """The display of a run's or an ingest's progress events on stderr: the status line on a terminal,
    one plain line per step in a log file or CI; notices and checkpoints are always printed."""

    def show(event) -> None:
        if event.phase == "notice":  # said once, whatever the display
            console.print(f"[yellow]{event.message}[/]", highlight=False, soft_wrap=True)
            return
        if event.phase == "checkpoint":
            console.print(f"checkpoint: {event.message} (amb run --resume {event.message} continues "
                          "this run if it stops)", highlight=False, soft_wrap=True)
            return
        line = (f"{event.phase} | loop {event.loop} | nodes {event.nodes} edges {event.edges} "
                f"conflicts {event.conflicts} | LM calls {event.lm_calls} tokens {event.tokens}"
                + (f" | {event.message[:60]}" if event.message else ""))
        if console.is_terminal:
            status.update(line)
        else:
            console.print(line, highlight=False, soft_wrap=True)

    return show

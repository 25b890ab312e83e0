"""What the memory writer takes and gives back, as plain values: no task, no run state.

* :class:`ToolResponse` -- what one tool call returned, as memory conversion reads it (the task's executor
  records richer calls; the task hands the writer these);
* :class:`Conflict` -- nodes analysis found contradicting each other, waiting for a cross-validation;
* :class:`Conversion` -- what became of one text: its nodes, a failure reason and the entry that holds it;
* :class:`Written` -- what one call of :class:`~amb_dspy.memory.writer.MemoryWriter` did: its conversions,
  and the errors, conflicts and notices the task takes into its run state (``TaskMemory.take`` in
  :mod:`amb_dspy.task.memory`), so the writer never holds or changes a task's state.

Nothing heavy is imported here, so the run state (:mod:`amb_dspy.task.state`) can hold these and stay light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from amb_dspy.lm import LMCallCapReached
    from amb_dspy.storage import InteractionEntry, QueryGraphNode

__all__ = ["Conflict", "Conversion", "ToolResponse", "Written", "knowledge_text"]


@dataclass(frozen=True)
class ToolResponse:
    """One tool call's response as memory conversion reads it: which tool (named in notices) and its text."""

    name: str
    observation: str


def knowledge_text(responses: Sequence[ToolResponse]) -> str:
    """What tool responses say, as one text for memory conversion."""
    return "\n\n".join(response.observation for response in responses)


@dataclass
class Conflict:
    """Nodes that analysis found contradicting each other, to be checked by a cross-validation and merged;
    ``round``: how many merges led to it (a later one stops at ``max_merge_rounds``)."""

    node_ids: list[str]
    description: str
    round: int = 0


class Conversion(NamedTuple):
    """What became of one text: the new nodes, a failure reason ("" on success; a failed analysis leaves
    the nodes in place) and the entry that holds the text (None when there was nothing to keep)."""

    nodes: list[QueryGraphNode]
    failure: str
    entry: InteractionEntry | None

    @property
    def remembered(self) -> InteractionEntry | None:
        """The entry, when the text became memory rather than being kept raw after a failure."""
        return self.entry if self.entry is not None and "conversion_failed" not in self.entry.metadata else None


@dataclass
class Written:
    """What one call of the writer did, besides the store it changed: a conversion per text (None for a
    document the store already held), the errors and conflicts it found and the notices it gave, in the order
    they came. ``stopped``: the LM call cap, when it ended the call part way; the task raises it once it has
    taken in what came before."""

    conversions: list[Conversion | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    stopped: LMCallCapReached | None = None

    @property
    def conversion(self) -> Conversion:
        """The conversion of a call that writes one text (``convert``, ``convert_calls``, ``resolve_conflict``)."""
        return self.conversions[0]

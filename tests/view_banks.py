"""Small real banks for the view tests, built with the real MemoryStore (real embeddings, real merge).

The story: the user's notes give three nodes (a festival date in July, the harbour city, a hostile
"poster" whose summary is markup and script), a search adds an August date that conflicts with July,
and cross-validation merges the two dates into one node. Entries are recorded after the nodes they
made, as MemoryBank records them, so creation steps come out 0, 1, 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft
from amb_dspy.storage import (
    CompletedTask,
    InsightDoc,
    InteractionEntry,
    TaskKind,
    TaskStatus,
)

GOAL = "Which river flows through the festival city, and when is the Tidewater Lantern Festival?"
JULY = "The Tidewater Lantern Festival is held on the second Saturday of July."
AUGUST = "A travel blog claims the lantern festival takes place in late August."
CITY = "Port Merrow is a harbour city; the river Calder flows through it into the bay."
MERGED = "The festival is in July; the August date in a blog was wrong."
MERGE_WHY = "Merged two festival dates; the official page supports July."
NOTES = f"{JULY}\n\n{CITY}\n\nPoster text follows."
SEARCH = f"Search result: {AUGUST}"
VALIDATION = "Validation answer: July, per the official festival page."


def hostile_summary(url: str = "http://127.0.0.1:9/pwned") -> str:
    """Text that would run script, load an image and style the console if any layer treated it as markup."""
    return (f'<script>window.__pwned = 1; fetch("{url}/script")</script>'
            f'<img src="{url}/img" onerror="window.__pwned = 2"> [bold red]not markup[/] </script><!--')


@dataclass
class Built:
    path: Path
    store: MemoryStore
    july: str
    august: str
    city: str
    poster: str
    merged: str
    notes_entry: str
    search_entry: str
    validation_entry: str


def build_bank(path: Path, embedder, hostile: str | None = None) -> Built:
    doc = InsightDoc(task_goal=GOAL)
    store = MemoryStore(embedder, doc)
    july, city, poster = store.add_nodes([
        NodeDraft(JULY, "The Tidewater Lantern Festival date", ["festival", "July"]),
        NodeDraft(CITY, "Port Merrow, the festival city", ["Port Merrow", "Calder"]),
        NodeDraft(hostile or hostile_summary(), "A festival poster", ["poster", "<b>bold</b>"]),
    ])
    notes = store.record_entry(InteractionEntry(text=NOTES, metadata={"source": "user_context"}),
                               [july.id, city.id, poster.id])
    store.add_edge(july.id, city.id)
    (august,) = store.add_nodes([NodeDraft(AUGUST, "Another festival date", ["festival", "August"])])
    search = store.record_entry(InteractionEntry(text=SEARCH, metadata={"source": "executor", "task": "Check the date"}),
                                [august.id])
    store.add_edge(august.id, poster.id)
    merged, _event = store.merge_nodes([july.id, august.id], NodeDraft(MERGED, "The festival date, verified", ["festival", "July"]),
                                       description=MERGE_WHY)
    validation = store.record_entry(InteractionEntry(text=VALIDATION, metadata={"source": "cross_validation"}), [merged.id])
    store.set_insight_doc(InsightDoc(doc_id=doc.doc_id, task_goal=GOAL, completed_tasks=[
        CompletedTask(description="Find the festival date", status=TaskStatus.SUCCESS, context="July, or August per a blog"),
        CompletedTask(type=TaskKind.CROSS_VALIDATE, description="Check July against August", status=TaskStatus.SUCCESS,
                      context="July is right"),
        CompletedTask(description="Find the poster's printer", status=TaskStatus.FAILURE, context="nothing found"),
    ], pending_tasks=["Name the river through Port Merrow"]))
    store.check()
    store.export(path)
    return Built(path, store, july.id, august.id, city.id, poster.id, merged.id, notes.entry_id, search.entry_id,
                 validation.entry_id)

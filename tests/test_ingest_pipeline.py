"""Ingest as a pipeline (issue 41): the next documents are read and prepared while one is committed.

The bank a pipelined ``add_documents`` makes is the one the serial path makes (each document committed by
``BankWriter.commit`` of ``bank.ingest``, nothing ahead): same nodes, edges, entries, node and line vectors.
A file that cannot be read is one line and the rest is committed in order; a converter that fails stops the
pipeline with every document before it committed and no thread left behind; the reading stays a few documents
ahead. Real embedding model, real bank databases, heuristic policy (no LM)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from amb_dspy.agents.prepared import PreparedAnswers
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.bank_writer import BankWriter
from amb_dspy.memory.documents import read_documents, turn_line
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.ingest_ahead import AHEAD_DOCUMENTS, GIL_SWITCH_S, PREPARERS, ReadAhead
from amb_dspy.task.ingest import DocumentIngest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"


def heuristic_bank(tmp_path: Path, embedder, events: list | None = None) -> MemoryBank:
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp")
    return MemoryBank(config, embedder=embedder, progress=events.append if events is not None else None)


@pytest.fixture
def folder(tmp_path) -> Path:
    """The demo notes and a dialogue of three dated sessions (split into a document each)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for path in sorted(DEMO.glob("*.md"))[:6]:
        (notes / path.name).write_text(path.read_text())
    dates = ["1:56 pm on 8 May, 2023", "10:31 am on 12 May, 2023", "4:02 pm on 20 May, 2023"]
    sessions = ["\n".join(turn_line(date, speaker, f"{speaker} talks about the lantern festival on {date}, and the "
                                                   f"ferry to Kestrel Bay that leaves at {n + 6} every morning.")
                          for speaker in ("Ana", "Ben")) for n, date in enumerate(dates)]
    (notes / "chat.txt").write_text("\n\n".join(sessions) + "\n")
    return notes


def bank_contents(path: Path, embedder) -> tuple:
    """What a bank holds, free of ids and clocks: its nodes (texts, sources by document, vector bytes), its
    edges (by node text), its entries and its line vectors."""
    store = MemoryStore.load(path, embedder)
    entries = store.tree.entries
    text = {node.id: node.embedding_text for node in store.graph.nodes_dict.values()}
    nodes = sorted((node.embedding_text, node.summary, node.context, tuple(node.keywords), node.embedding.tobytes(),
                    tuple((entries[s.entry_id].metadata.get("name"), repr(s.spans)) for s in node.sources))
                   for node in store.graph.nodes_dict.values())
    edges = sorted(tuple(sorted((text[node.id], text[other]))) for node in store.graph.nodes_dict.values()
                   for other in node.links)
    keys, vectors = store.line_vectors.unsaved(everything=True)
    lines = sorted(zip(keys, (row.tobytes() for row in vectors)))
    return nodes, edges, sorted((e.metadata.get("name"), e.text) for e in entries.values()), lines


def test_pipelined_bank_is_the_serial_bank(tmp_path, embedder, folder, monkeypatch):
    taken = []
    take = PreparedAnswers.take
    monkeypatch.setattr(PreparedAnswers, "take", lambda self, agent, inputs: taken.append(
        answer := take(self, agent, inputs)) or answer)
    bank = heuristic_bank(tmp_path, embedder)

    embedder._cache.clear()  # each path embeds from nothing
    pipelined = bank.add_documents([folder], into=tmp_path / "pipelined.sqlite")
    embedder._cache.clear()
    with BankWriter(tmp_path / "serial.sqlite", embedder) as writer:
        for document in read_documents([folder], bank.config.limits.max_context_bytes, lambda line: None):
            writer.commit(lambda store, d=document: bank.ingest(d.text, d.name, into=store, date=d.date))

    assert len(pipelined.added) == 7  # six notes and the dialogue (three sessions: nine conversions)
    assert sum(answer is not None for answer in taken) == 2 * 9  # each one's classification and structure, prepared
    serial, piped = bank_contents(tmp_path / "serial.sqlite", embedder), bank_contents(tmp_path / "pipelined.sqlite", embedder)
    assert [len(part) for part in piped] == [len(part) for part in serial] and len(piped[1]) > 0
    assert piped == serial


def test_a_file_that_cannot_be_read_is_one_line_and_the_rest_is_committed_in_order(tmp_path, embedder, folder):
    (folder / "b-broken.json").write_text('{"conversation": ')
    (folder / "c-photo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)))
    events = []
    result = heuristic_bank(tmp_path, embedder, events).add_documents([folder], into=tmp_path / "b.sqlite")

    assert len(result.added) == 7
    assert [line.split(":")[0] for line in result.skipped] == [f"skipped {folder.as_posix()}/b-broken.json",
                                                               f"skipped {folder.as_posix()}/c-photo.md"]
    said = [(e.phase, e.message) for e in events if e.phase in ("committed", "notice")]
    order = [message.split("/")[-1].split(":")[0] for _, message in said]
    assert order == sorted(order, key=lambda name: name.split("#")[0])  # reading order: the skips in their place
    assert said[-1][0] == "committed" and events[-1].done == events[-1].total == 7


def test_a_failing_conversion_stops_the_pipeline_with_the_documents_before_it_committed(tmp_path, embedder, folder,
                                                                                      monkeypatch):
    ingest, seen = DocumentIngest.ingest, []

    def failing(self, context, name="context", **kwargs):
        seen.append(name)
        if len(seen) == 3:
            raise RuntimeError("the converter broke")
        return ingest(self, context, name, **kwargs)

    monkeypatch.setattr(DocumentIngest, "ingest", failing)  # the ingest owner's, which an add calls per document
    with pytest.raises(RuntimeError, match="the converter broke"):
        heuristic_bank(tmp_path, embedder).add_documents([folder], into=tmp_path / "c.sqlite")

    names = {e.metadata["name"].split("#")[0] for e in MemoryStore.load(tmp_path / "c.sqlite", embedder).tree.entries.values()}
    assert names == set(seen[:2])  # a dialogue's sessions are named after it
    assert not [t for t in threading.enumerate() if t.name == "amb-ingest-ahead"]


def test_the_reading_stays_a_few_documents_ahead(tmp_path):
    for n in range(30):
        (tmp_path / f"note-{n:02d}.md").write_text(f"Note {n}: the ferry leaves at {n} o'clock.\n")
    prepared, lead = [], []
    with ReadAhead([tmp_path], 1_000_000, lambda document: prepared.append(document.name) or []) as reading:
        for n, _step in enumerate(reading):
            lead.append(len(prepared) - n)
            threading.Event().wait(0.01)  # a commit takes a while: the reading fills the queue
    assert len(prepared) == 30 and max(lead) <= AHEAD_DOCUMENTS + PREPARERS + 1 and max(lead) >= 2


def test_two_documents_are_prepared_at_once_and_handed_over_in_reading_order(tmp_path):
    """Each preparation waits for a second one to start (it would wait forever, and fail, were they made one after
    another); the first of each pair takes longer, and the steps still come in reading order, a skipped file in its
    place."""
    for n in range(6):
        (tmp_path / f"note-{n}.md").write_text(f"Note {n}: the ferry leaves at {n} o'clock.\n")
    (tmp_path / "note-2b.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00" + bytes(range(256)))
    both = threading.Barrier(PREPARERS)

    def prepare(document):
        both.wait(timeout=10)
        if document.name.endswith(("0.md", "2.md", "4.md")):
            threading.Event().wait(0.05)
        return [document.name]

    with ReadAhead([tmp_path], 1_000_000, prepare) as reading:
        steps = list(reading)
    order = [step.prepared[0].split("/")[-1] if step.document else "skipped " + step.skipped.split(":")[0].split("/")[-1]
             for step in steps]
    assert PREPARERS == 2
    assert order == ["note-0.md", "note-1.md", "note-2.md", "skipped note-2b.md", "note-3.md", "note-4.md", "note-5.md"]
    assert all(step.document.name == step.prepared[0] for step in steps if step.document)


def test_the_gil_changes_hands_quickly_while_a_pipeline_runs_and_as_before_after(tmp_path):
    """The embedding thread takes the GIL back after every model run: inside a pipeline (two at once included) the
    switch interval is GIL_SWITCH_S, and the interval of before is back once the last pipeline ends, a failed one too."""
    (tmp_path / "note.md").write_text("The ferry leaves at noon.\n")
    before, seen = sys.getswitchinterval(), []

    def prepare(document) -> list:
        seen.append(sys.getswitchinterval())
        return []

    with ReadAhead([tmp_path], 1_000_000, prepare) as outer:
        list(outer)
        with ReadAhead([tmp_path], 1_000_000, prepare) as inner:
            list(inner)
        seen.append(sys.getswitchinterval())  # the outer pipeline still runs
    assert seen == [GIL_SWITCH_S] * 3 and GIL_SWITCH_S < before and sys.getswitchinterval() == before
    with pytest.raises(RuntimeError), ReadAhead([tmp_path], 1_000_000, prepare):
        raise RuntimeError("a commit failed")
    assert sys.getswitchinterval() == before


def test_the_progress_counts_the_documents_tokens_and_shows_their_rate(tmp_path, embedder, folder, monkeypatch):
    from io import StringIO

    from rich.console import Console

    from amb_dspy.text import estimate_tokens
    from amb_dspy.view import progress

    events = []
    result = heuristic_bank(tmp_path, embedder, events).add_documents([folder], into=tmp_path / "b.sqlite")
    tokens = sum(estimate_tokens(d.text) for d in read_documents([folder], 10**9, lambda line: None))
    committed = [e for e in events if e.phase == "committed"]
    assert [e.done for e in committed] == list(range(1, 8)) and committed[-1].text_tokens == result.text_tokens == tokens
    assert 0 < committed[0].text_tokens < committed[1].text_tokens
    assert f"s ({tokens / result.seconds:,.0f} document tokens/s); bank written" in result.summary()

    clock = iter([100.0, 102.0])  # the first document shown at 100 s, the first commit at 102
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    out = StringIO()
    show = progress.progress_display(Console(file=out, width=200), None)
    show(events[0])
    show(committed[0])
    rate = committed[0].text_tokens / 2
    assert f"committed 1/7, {rate:,.0f} tokens/s, about 12 s left: " in out.getvalue()

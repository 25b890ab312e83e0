"""TaskSession: one task's memory worked step by step from outside the bank's loop.

The real embedding model, FAISS, agents' policies and storage run; only the LM's words are scripted.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from cli_lm import make_lm
from scripted_lm import ScriptedLM

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import TaskStatus

FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
CITY = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."
CHOIR = "The Gull Coast choir rehearses in a lighthouse and sings only in winter, never at the festival."
GOAL = "Which river flows through the city where the Tidewater Lantern Festival is held?"


@pytest.fixture
def bank(tmp_path: Path, embedder) -> MemoryBank:
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                       recall=False)
    return MemoryBank(config, lm=make_lm(), embedder=embedder)


def test_observe_converts_a_result_keeps_its_raw_text_and_answers_a_repeat_from_memory(bank):
    session = bank.start_session(GOAL)
    first = session.observe("search", {"query": "Tidewater Lantern Festival"}, FESTIVAL)
    assert not first.repeat and first.node_ids and first.entry_id in session.store.tree.entries
    assert session.store.tree.entries[first.entry_id].text == FESTIVAL  # the raw text, whole
    assert all(first.entry_id in session.store.tree.node_to_entries[n] for n in first.node_ids)
    nodes = len(session.store.graph)

    again = session.observe("search", {"query": "lantern festival TIDEWATER"}, FESTIVAL)  # words reordered
    assert again.repeat and again.entry_id == first.entry_id and set(again.node_ids) == set(first.node_ids)
    assert "Repeat" in again.message and len(session.store.graph) == nodes and len(session.store.tree) == 1

    changed = session.observe("search", {"query": "Tidewater Lantern Festival"}, CITY)  # same call, new text
    assert not changed.repeat and len(session.store.tree) == 2
    other = session.observe("read_file", {"path": "notes.md"}, CHOIR)  # any tool, keyed by its exact arguments
    assert not other.repeat and session.observe("read_file", {"path": "notes.md"}, CHOIR).repeat
    assert session.state.fallbacks["classification"] == 3  # the heuristic policy converted each new result
    session.store.check()


def test_context_is_the_adapters_task_and_memory_blocks_with_what_was_fetched(bank):
    session = bank.start_session(GOAL)
    session.observe("search", {"query": "Port Merrow river"}, CITY)
    session.observe("visit", {"url": "https://example.org/festival"}, FESTIVAL)
    text = session.context()
    assert text.startswith("<task>\nTask goal: " + GOAL) and "<memory>" in text
    assert "Calder" in text and "search 'Port Merrow river'" in text and "visit https://example.org/festival" in text
    assert text.index("- visit https://example.org/festival") < text.index("- search 'Port Merrow river'")  # newest first
    small = session.context(budget=50)
    assert len(small) <= len(text)
    with pytest.raises(InputError, match="budget"):
        session.context(budget=3)


def test_deep_retrieval_plan_complete_export_and_close(bank, tmp_path):
    session = bank.start_session(GOAL)
    observed = session.observe("search", {"query": "festival"}, FESTIVAL)
    record = json.loads(session.deep_retrieval(observed.node_ids[0]))
    assert record["node_id"] == observed.node_ids[0] and record["entries"][0]["text"] == FESTIVAL
    with pytest.raises(InputError, match="no memory node"):
        session.deep_retrieval("ffffffffffff")

    doc = session.plan()  # heuristic planning: first, answer the goal from memory
    assert doc.pending_tasks and "Answer the task goal from memory" in doc.pending_tasks[0]
    doc = session.complete("", "success", f"The Calder [node {observed.node_ids[0][:8]}]")
    assert not doc.pending_tasks and doc.completed_tasks[-1].status is TaskStatus.SUCCESS
    assert session.state.answer == "The Calder" and session.state.citations == [observed.node_ids[0]]
    with pytest.raises(InputError, match="status"):
        session.complete("x", "done", "y")

    path = session.export(tmp_path / "task.json")
    loaded = MemoryStore.load(path, bank.embedder)
    assert loaded.same_content(session.store) and loaded.insight_doc.completed_tasks == doc.completed_tasks
    summary = session.close(remember=False)
    assert summary["answer"] == "The Calder" and summary["nodes"] == len(session.store.graph)
    with pytest.raises(InputError, match="closed"):
        session.context()


def test_a_session_starts_from_a_bank_file_without_changing_it(bank, tmp_path):
    first = bank.start_session("Where is the festival?")
    first.observe("search", {"query": "festival"}, FESTIVAL)
    path = first.export(tmp_path / "base.json")
    before = path.read_bytes()
    second = bank.start_session(GOAL, bank=path)
    assert len(second.store.graph) == len(first.store.graph) and second.store.insight_doc.task_goal == GOAL
    second.observe("search", {"query": "city river"}, CITY)
    assert path.read_bytes() == before and len(first.store.graph) < len(second.store.graph)


def test_bad_input_is_one_line_and_changes_nothing(bank):
    session = bank.start_session(GOAL)
    with pytest.raises(InputError, match="empty"):
        bank.start_session("   ")
    for args in [("", {}, "text"), ("search", ["not", "a", "dict"], "text"), ("search", {}, ""),
                 ("search", {}, "x" * (bank.config.max_context_bytes + 1)), ("search", {}, 42)]:
        with pytest.raises(InputError) as error:
            session.observe(*args)
        assert "\n" not in str(error.value)
    assert len(session.store.tree) == 0 and len(session.store.graph) == 0


def test_the_lm_policy_plans_through_the_planning_agent(tmp_path, embedder):
    lm = ScriptedLM(planning=[{"executed_status": "success", "executed_context": "", "next_task": "Search the river"}])
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", policy="lm", recall=False)
    session = MemoryBank(config, lm=lm, embedder=embedder).start_session(GOAL)
    assert session.plan().pending_tasks == ["Search the river"]
    assert session.meter.usage()["planning"]["calls"] == 1 and not session.state.fallbacks


def test_sessions_share_the_agents_but_never_each_others_nodes(bank):
    sessions = [bank.start_session(f"Task {i}: what is true of the Gull Coast?") for i in range(4)]
    texts = [FESTIVAL, CITY, CHOIR, FESTIVAL + " " + CHOIR]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(3):
                sessions[i].observe("search", {"query": f"task {i} query {j}"}, f"{texts[i]} (result {j} of task {i})")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for i, session in enumerate(sessions):
        entries = list(session.store.tree.entries.values())
        assert len(entries) == 3 and all(f"of task {i})" in e.text for e in entries)
        session.store.check()
        for other in sessions[:i]:
            assert not set(session.store.graph.nodes_dict) & set(other.store.graph.nodes_dict)


def test_observe_without_waiting_is_memory_before_the_next_request(bank):
    session = bank.start_session(GOAL)
    queued = [session.observe("search", {"query": f"q{i}"}, text, wait=False)
              for i, text in enumerate([FESTIVAL, CITY, CHOIR])]
    assert all(o.entry_id is None and not o.node_ids for o in queued)
    text = session.context()  # runs after the three conversions, in order
    assert "Calder" in text and "- search 'q2'" in text
    assert [e.text for e in session.store.tree.entries.values()] == [FESTIVAL, CITY, CHOIR]
    assert session.observe("search", {"query": "q1"}, CITY).repeat and not session.busy
    session.close(remember=False)
    with pytest.raises(InputError, match="closed"):
        session.observe("search", {"query": "q9"}, CITY, wait=False)


def test_the_banks_ingest_is_a_session_and_the_bank_keeps_none(bank):
    result = bank.ingest(FESTIVAL + "\n\n" + CITY)
    assert result.nodes == len(result.store.graph) and not hasattr(bank, "session")
    for part in ("store", "memory", "memory_adapter", "tool_cache", "meter", "_run"):  # the bank holds no task
        assert part not in vars(bank) and not hasattr(type(bank), part)


def test_a_closed_task_is_remembered_and_recalled_by_the_next_one_in_its_namespace(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic")
    bank = MemoryBank(config, lm=make_lm(), embedder=embedder)
    first = bank.start_session(GOAL, namespace="alice")
    first.observe("search", {"query": "Port Merrow river"}, CITY)
    first.complete(GOAL, "success", "The river Calder flows through Port Merrow.")
    summary = first.close(remember=True)
    assert "remembered in namespace 'alice'" in summary["notices"]

    again = bank.start_session("Which river flows through Port Merrow?", namespace="alice")
    assert "From earlier tasks:" in again.context() and "river Calder flows through Port Merrow" in again.context()
    stranger = bank.start_session("Which river flows through Port Merrow?", namespace="bob")
    assert "From earlier tasks:" not in stranger.context()

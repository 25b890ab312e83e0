"""MemoryWriter says what it did rather than changing a task's state: each call returns a Written (the
conversion of its text, with the new nodes, the failure and the entry holding the text, so callers never look
the entry up again; and the errors, conflicts and notices it found), and the task takes that into its run
state (TaskMemory.take). Only the agents' words are scripted."""

from __future__ import annotations

import pytest
from scripted_lm import ScriptedLM
from test_bank import compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.lm import LMCallCapReached
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.written import Conflict, ToolResponse
from amb_dspy.storage import InsightDoc
from amb_dspy.task.session import TaskSession

TEXT = "Kilauea erupted in 2018.\n\nThe USGS watches Hawaiian volcanoes."


def session_for(tmp_path, embedder, lm, **settings) -> TaskSession:
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", policy="lm", **settings)
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    return TaskSession(MemoryStore(embedder, InsightDoc(task_goal="When did Kilauea erupt?")), config=config,
                       agents=bank.agents, embedder=embedder, lms=bank.lms)


def converted(tmp_path, embedder, lm, text=TEXT, repeat=1):
    session = session_for(tmp_path, embedder, lm)
    with session.meter.counting():
        results = [session.memory.writer.convert(text, {"source": "test", "n": n}).conversion for n in range(repeat)]
    return session.store, results


def test_convert_returns_the_entry_it_recorded_with_its_nodes(tmp_path, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated)
    store, (first, second) = converted(tmp_path, embedder, lm, repeat=2)  # the same text twice: two entries

    for n, result in enumerate((first, second)):
        assert result.failure == "" and len(result.nodes) == 2
        assert result.remembered is result.entry and store.tree.entries[result.entry.entry_id] is result.entry
        assert result.entry.text == TEXT and result.entry.metadata == {"source": "test", "n": n}
        assert all(result.entry.entry_id in [s.entry_id for s in store.graph.node(node.id).sources] for node in result.nodes)
    assert first.entry.entry_id != second.entry.entry_id


def test_a_failed_conversion_returns_the_raw_entry_and_nothing_remembered(tmp_path, embedder):
    lm = ScriptedLM(classification=["not the expected format at all"] * 10)
    store, (result,) = converted(tmp_path, embedder, lm)

    assert result.nodes == [] and result.failure and result.remembered is None
    assert result.entry.metadata["conversion_failed"] == result.failure
    assert list(store.tree.entries.values()) == [result.entry] and len(store.graph) == 0


def conflicting(call):
    """Analysis that finds every candidate contradicting the new node."""
    return {"relationships": [{"candidate": c["number"], "relationship": "conflict", "reasoning": "two claims",
                               "conflict_description": "the eruption versus the watch"}
                              for c in call.input_json("candidates")]}


def test_the_writer_returns_the_conflicts_and_errors_it_found_and_the_task_takes_them(tmp_path, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=conflicting)
    session = session_for(tmp_path, embedder, lm)
    with session.meter.counting():
        written = session.memory.writer.convert(TEXT, {"source": "test"})
    first, second = written.conversion.nodes
    assert written.conflicts == [Conflict([second.id, first.id], "the eruption versus the watch", 0)]
    assert session.state.conflicts == [] and session.state.errors == []  # the writer changed no run state

    assert session.memory.take(written) is written
    assert session.state.conflicts == written.conflicts and session.state.errors == []

    failing = session_for(tmp_path / "failing", embedder, ScriptedLM(classification=["no format at all"] * 10))
    with failing.meter.counting():
        written = failing.memory.writer.convert(TEXT, {"source": "test"})
    assert written.errors == [written.conversion.failure] and failing.state.errors == []
    failing.memory.take(written)
    assert failing.state.errors == [written.conversion.failure]


def test_the_lm_call_cap_comes_back_with_what_came_before_and_the_task_raises_it_once_taken(tmp_path, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated)
    session = session_for(tmp_path, embedder, lm, max_convert_chars=200, max_lm_calls=1)
    response = ToolResponse("search", " ".join(["Kilauea erupted in 2018 on the Big Island of Hawaii."] * 12))
    with session.meter.counting():
        written = session.memory.writer.convert_calls([response], {"source": "test"})  # classification, then the cap
    assert isinstance(written.stopped, LMCallCapReached) and written.conversions == []
    assert len(written.notices) == 1 and written.notices[0].startswith("search: ")  # read in part: said before the cap
    assert session.state.notices == []
    assert [e.text for e in session.store.tree.entries.values()][0] == response.observation  # nothing is lost

    with pytest.raises(LMCallCapReached):
        session.memory.take(written)
    assert session.state.notices == written.notices

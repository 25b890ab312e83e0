"""MemoryWriter.convert says what it recorded: the new nodes, the failure and the entry holding the text,
so callers never look the entry up again. Only the agents' words are scripted."""

from __future__ import annotations

from scripted_lm import ScriptedLM
from test_bank import compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc
from amb_dspy.task.session import TaskSession

TEXT = "Kilauea erupted in 2018.\n\nThe USGS watches Hawaiian volcanoes."


def converted(tmp_path, embedder, lm, text=TEXT, repeat=1):
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", policy="lm")
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    session = TaskSession(MemoryStore(embedder, InsightDoc(task_goal="When did Kilauea erupt?")), config=config,
                          agents=bank.agents, embedder=embedder, lms=bank.lms)
    with session.meter.counting():
        results = [session.memory.convert(session.state, text, {"source": "test", "n": n}) for n in range(repeat)]
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

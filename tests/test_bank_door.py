"""One door to a task, and results that hold their own memory: the bank keeps no "latest task".

Two runs on one bank from two threads each save their own bank through their result, whichever ends last;
``MemoryBank.export`` still saves this thread's latest run for one release, with a DeprecationWarning. The
LM's words are scripted; the embedding model, FAISS, the corpus, the executor and the bank files are real.
"""

from __future__ import annotations

import threading

import dspy
import pytest
from test_bank import corpus  # noqa: F401  (a fixture)
from test_concurrent_tasks import TASKS, scripted_lm

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError
from amb_dspy.memory.graph_ops import MemoryStore


@pytest.fixture
def config(tmp_path, corpus):  # noqa: F811
    return AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=4,
                     policy="lm", fast_path=False)


def test_two_runs_at_once_each_export_their_own_bank(config, embedder, tmp_path):
    bank = MemoryBank(config, lm=scripted_lm(), embedder=embedder)
    results, failures = {}, []
    start = threading.Barrier(len(TASKS))

    def run(goal: str, context: str) -> None:
        try:
            start.wait()
            with dspy.context():
                results[goal] = bank.run(goal, context=context)
        except BaseException as exc:  # noqa: BLE001 - reported below, on the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(goal, context)) for goal, (_, context, _) in TASKS.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for number, (goal, result) in enumerate(results.items()):
        saved = MemoryStore.load(result.export(tmp_path / f"task-{number}.json"), embedder)
        assert saved.insight_doc.task_goal == goal and saved.insight_doc.doc_id == result.insight_doc["doc_id"]
        assert sorted(n.summary for n in saved.graph.nodes_dict.values()) == \
            sorted(n["summary"] for n in result.query_graph["nodes"])
        assert TASKS[goal][1] in [entry.text for entry in saved.tree.entries.values()]  # its own context, not the other's


def test_bank_export_is_deprecated_and_saves_this_threads_latest_run(config, embedder, tmp_path):
    bank = MemoryBank(config, lm=scripted_lm(), embedder=embedder)
    with pytest.warns(DeprecationWarning, match="result.export"), pytest.raises(InputError, match="no task in this thread"):
        bank.export(tmp_path / "none.json")
    goal, (_, context, _) = next(iter(TASKS.items()))
    result = bank.run(goal, context=context)
    elsewhere = threading.Thread(target=lambda: bank.ingest("Another text, ingested on another thread.", "other"))
    elsewhere.start()
    elsewhere.join()
    with pytest.warns(DeprecationWarning, match="MemoryBank.export is deprecated"):
        path = bank.export(tmp_path / "bank.json")
    assert MemoryStore.load(path, embedder).same_content(result.store)  # this thread's run, not the later ingest

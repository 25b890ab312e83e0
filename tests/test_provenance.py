"""Issue 10: every node knows where it came from, answers cite memory, a bank built once answers many
questions, and a killed run resumes. Only LMs' words are scripted; all else runs for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_lm import ScriptedLM
from test_bank import CITY, EXTRACT, FESTIVAL, FINISH, REACT, compress, one_cluster_per_segment, plans, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.tools import DeepRetrievalTool

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = f"{FESTIVAL}\n\n{CITY}\n\nThe harbour of Port Merrow freezes in some winters."


@pytest.fixture
def config(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (corpus / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    return AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=3)


def scripted(answer="July", **routes):
    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                      planning=lambda call: plans("")[0],
                      **{REACT: lambda call: FINISH, EXTRACT: lambda call: {"reasoning": "r", "answer": answer}, **routes})


def test_every_node_records_the_spans_it_was_built_from(config, embedder, tmp_path):
    bank = MemoryBank(config, lm=scripted(), embedder=embedder)
    result = bank.run("When is the festival?", context=DOCUMENT)
    store = result.store
    assert len(store.graph) == 3
    for node in store.graph.nodes_dict.values():
        [source] = node.sources
        entry = store.tree.entries[source.entry_id]
        assert [entry.text[a:b] for a, b in source.spans] == [node.summary]  # short paragraphs kept verbatim
    result.export(tmp_path / "bank.json")
    loaded = MemoryStore.load(tmp_path / "bank.json", embedder)
    loaded.check()  # spans inside their entries is one of the checked invariants
    assert all(n.sources for n in loaded.graph.nodes_dict.values())
    assert json.loads((tmp_path / "bank.json").read_text())["embedding_model"] == embedder.model_name


def test_a_merged_node_holds_the_union_of_its_parents_sources(config, embedder):
    bank = MemoryBank(config, lm=scripted(), embedder=embedder)
    result = bank.run("When is the festival?", context=DOCUMENT)
    store = result.store
    a, b = list(store.graph.nodes_dict)[:2]
    parents = {(s.entry_id, span) for n in (a, b) for s in store.graph.node(n).sources for span in s.spans}
    merged, _ = store.merge_nodes([a, b], store.graph.node(a).model_copy(), "test merge")
    assert {(s.entry_id, span) for s in merged.sources for span in s.spans} == parents
    store.check()


def test_deep_retrieval_can_return_just_the_source_spans(config, embedder):
    bank = MemoryBank(config, lm=scripted(), embedder=embedder)
    store = bank.run("When is the festival?", context=DOCUMENT).store
    node = next(n for n in store.graph.nodes_dict.values() if "Calder" in n.summary)
    out = json.loads(DeepRetrievalTool(store, config.storage_dir)(node.id, sources_only=True))
    assert [s["text"] for s in out["sources"]] == [CITY]
    assert "entries" not in out


def test_a_bank_file_of_schema_version_1_still_loads_without_sources(embedder):
    notices: list[str] = []
    store = MemoryStore.load(ROOT / "tests" / "data" / "bank_v1.json", embedder, notices=notices)
    store.check()
    assert len(store.graph) == 2 and all(n.sources == [] for n in store.graph.nodes_dict.values())
    assert notices and "embedded again" in notices[0]  # version 1 did not name its model


def test_the_final_answer_cites_memory_nodes_with_their_first_source(config, embedder):
    def answer(call):
        node_id = next(line.split("(node ")[1].rstrip("):") for line in call.inputs["enhanced_prompt"].splitlines()
                       if line.startswith("Memory ") and "Calder" in call.inputs["enhanced_prompt"])
        return {"reasoning": "r", "answer": f"The Calder [node {node_id[:8]}]"}

    bank = MemoryBank(config, lm=scripted(**{EXTRACT: answer}), embedder=embedder)
    result = bank.run("Which river flows through Port Merrow?", context=DOCUMENT)
    assert result.answer == "The Calder"  # the marker is read, not shown
    [cited] = result.citations
    assert cited["node_id"] in result.store.graph and cited["source"] in DOCUMENT


def test_ingest_once_then_ask_twice_without_converting_the_text_again(config, embedder, tmp_path):
    lm = scripted()
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    ingested = bank.ingest(DOCUMENT, name="notes.md")
    assert ingested.nodes == 3 and lm.calls_for("classification") and not lm.calls_for("planning")
    path = tmp_path / "bank.json"
    ingested.export(path)
    before = path.read_bytes()
    for question in ("When is the festival?", "Which river flows through Port Merrow?"):
        asked = scripted()
        result = MemoryBank(config, lm=asked, embedder=embedder).run(question, bank=path)
        assert result.answer == "July"
        assert not asked.calls_for("classification") and not asked.calls_for("structure")
        assert len(result.query_graph["nodes"]) == 3 and result.insight_doc["task_goal"] == question
    assert path.read_bytes() == before  # the bank file itself is never modified


def _canonical(bank_file: Path) -> dict:
    """A bank with ids and times left out, so two runs can be compared."""
    data = json.loads(bank_file.read_text())
    nodes = {n["id"]: (n["summary"], n["context"], tuple(n["keywords"])) for n in data["query_graph"]["nodes"]}
    entries = sorted((e["text"], json.dumps(e["metadata"], sort_keys=True)) for e in data["interaction_tree"]["entries"])
    edges = sorted(tuple(sorted((nodes[a], nodes[b]))) for a in nodes for b in
                   next(n["links"] for n in data["query_graph"]["nodes"] if n["id"] == a) if a < b)
    doc = data["insight_doc"]
    return {"nodes": sorted(nodes.values()), "edges": edges, "entries": entries, "goal": doc["task_goal"],
            "completed": [(t["description"], t["status"], t["context"]) for t in doc["completed_tasks"]],
            "pending": doc["pending_tasks"]}


def _amb(args, tmp_path, extra_env=None):
    corpus = tmp_path / "corpus"  # cli_lm's world: its answer rests on these notes (amb_dspy.task.grounding)
    corpus.mkdir(exist_ok=True)
    (corpus / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (corpus / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}", "AMB_STORAGE_DIR": str(tmp_path / "storage"),
           "AMB_TEMP_DIR": str(tmp_path / "temp"), "AMB_CORPUS": str(corpus),
           "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-c", "from cli import app; app()", "run", *args, "--lm",
                             "python:cli_lm:make_lm"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_run_killed_after_loop_1_resumes_to_the_same_bank(tmp_path):
    task = "When is the Tidewater Lantern Festival?"
    whole = _amb([task, "--checkpoint", str(tmp_path / "whole"), "--export", str(tmp_path / "whole.json")], tmp_path)
    assert whole.wait(timeout=300) == 0, whole.stderr.read()

    killed_dir = tmp_path / "killed"
    killed = _amb([task, "--checkpoint", str(killed_dir)], tmp_path, {"AMB_TEST_PAUSE_IN_LOOP": "2"})
    checkpoint = killed_dir / "checkpoint.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if checkpoint.is_file() and json.loads(checkpoint.read_text())["run"]["loops"] == 1:
            break
        assert killed.poll() is None, killed.stderr.read()
        time.sleep(0.2)
    else:
        pytest.fail("no checkpoint after loop 1")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)

    resumed = _amb(["--resume", str(killed_dir), "--export", str(tmp_path / "resumed.json")], tmp_path)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert out.strip().endswith("July, on the Calder")
    whole_bank = _canonical(tmp_path / "whole.json")
    assert [task for task, status, _ in whole_bank["completed"]] == ["Search the festival", "Search the city"]
    assert _canonical(tmp_path / "resumed.json") == whole_bank

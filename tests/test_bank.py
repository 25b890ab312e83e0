"""Whole MemoryBank runs driven by a scripted LM, through every branch of the loop.

Only the LM's words are scripted; retrieval (real model, real FAISS), storage, the agents' code, the
ReAct executor, the tools and the local corpus all run for real.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path

import pytest
from scripted_lm import ScriptedLM

from amb_dspy.bank import MemoryBank, read_context_file
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import TaskKind, TaskStatus
from amb_dspy.task.adapter import InputError

REACT = "next_thought,next_tool_name,next_tool_args"
EXTRACT = "reasoning,answer"

FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
CITY = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."
WRONG_DATE = "A travel blog claims the Tidewater Lantern Festival takes place in late August."


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (folder / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    (folder / "blog.md").write_text(f"# Gull Coast travel blog\n\n{WRONG_DATE}\n")
    return folder


@pytest.fixture
def config(tmp_path: Path, corpus: Path) -> AmbConfig:
    # The LM path alone: these tests drive its every branch (tests/test_chaos.py covers policy="auto"). They
    # are about the loop: answering from memory first has its own tests (tests/test_answer_paths.py).
    return AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=6,
                     policy="lm", fast_path=False)


def one_cluster_per_segment(call):
    count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
    return {"should_cluster": count > 1,
            "clusters": [{"context": f"topic {i}", "keywords": [f"kw{i}"], "segments": [i]} for i in range(1, count + 1)]}


def compress(call):
    content = call.inputs["content"]
    return {"summary": content[: max(1, len(content) * 2 // 5)]}


def unrelated(call):
    return {"relationships": [{"candidate": c["number"], "relationship": "unrelated", "reasoning": "different topic"}
                              for c in call.input_json("candidates")]}


def plans(*next_tasks: str, status: str = "success"):
    """A planning script: the next tasks in order, each earlier task judged ``status``."""
    return [{"executed_status": status, "executed_context": f"done: {t or 'answer'}", "next_task": t} for t in next_tasks]


def search_then_finish(query: str):
    return [
        {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": query}},
        {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}},
    ]


FINISH = {"next_thought": "answer from memory", "next_tool_name": "finish", "next_tool_args": {}}


def answers(*texts: str):
    return [{"reasoning": "from the evidence", "answer": t} for t in texts]


def test_related_nodes_get_an_edge_and_the_run_meets_its_goal(config, embedder):
    def related_to_first(call):
        return {"relationships": [{
            "candidate": 1, "relationship": "related", "reasoning": "the festival happens in the city",
            "context_update_new": "Port Merrow, host of the lantern festival",
            "context_update_existing": "The lantern festival, held in Port Merrow",
            "keywords_update_new": ["Port Merrow", "Calder"], "keywords_update_existing": ["festival", "Port Merrow"],
        }]}

    def analysis(call):  # the first analysis (city vs festival) finds them related; later ones find nothing
        return related_to_first(call) if len(lm.calls_for("analysis")) == 0 else unrelated(call)

    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=analysis,
        planning=plans("Find which river flows through Port Merrow", ""),
        **{REACT: search_then_finish("river Port Merrow") + [FINISH], EXTRACT: answers("The Calder", "The river Calder, in July")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("Which river flows through the festival city, and when is the festival?",
                      context=f"{FESTIVAL}\n\n{CITY}")

    store = result.store
    store.check()
    assert result.termination == "goal_met"
    assert result.answer == "The river Calder, in July"
    # two context paragraphs -> two nodes, related -> one edge with both contexts updated
    context_nodes = [n for n in store.graph.nodes_dict.values() if n.context in
                     ("Port Merrow, host of the lantern festival", "The lantern festival, held in Port Merrow")]
    assert len(context_nodes) == 2
    a, b = context_nodes
    assert b.id in a.links and a.id in b.links
    assert {tuple(a.keywords), tuple(b.keywords)} == {("Port Merrow", "Calder"), ("festival", "Port Merrow")}
    # the search response became memory too: one more node, one more entry
    assert len(store.graph) >= 3
    sources = sorted(e.metadata["source"] for e in store.tree.entries.values())
    assert sources == ["executor", "user_context"]
    executor_entry = next(e for e in store.tree.entries.values() if e.metadata["source"] == "executor")
    assert "Calder" in executor_entry.text and executor_entry.metadata["tool_calls"][0]["name"] == "search"
    doc = store.insight_doc
    assert doc.pending_tasks == []
    assert [(t.type, t.status) for t in doc.completed_tasks] == [(TaskKind.NORMAL, TaskStatus.SUCCESS)]
    assert result.usage["planning"]["calls"] == 2 and result.usage["executor"]["calls"] >= 3
    assert result.insight_doc["task_goal"].startswith("Which river")


def test_conflict_is_cross_validated_merged_and_reanalysed(config, embedder):
    seen_analysis = []

    def analysis(call):
        candidates = call.input_json("candidates")
        new = call.input_json("new_node")
        seen_analysis.append((new["summary"], [c["summary"] for c in candidates]))
        verdicts = []
        for c in candidates:
            if "August" in new["summary"] and "July" in c["summary"]:
                verdicts.append({"candidate": c["number"], "relationship": "conflict", "reasoning": "two dates",
                                 "conflict_description": "July versus August"})
            elif "Calder" in c["summary"] and "July" in new["summary"]:
                verdicts.append({"candidate": c["number"], "relationship": "related", "reasoning": "same city",
                                 "context_update_new": "festival (linked to the city)",
                                 "context_update_existing": "city (linked to the festival)",
                                 "keywords_update_new": ["festival"], "keywords_update_existing": ["Calder"]})
            else:
                verdicts.append({"candidate": c["number"], "relationship": "unrelated", "reasoning": "-"})
        return {"relationships": verdicts}

    integration = [{
        "merged_summary": "The festival is held in July (an August date in a blog was wrong).",
        "merged_context": "The Tidewater Lantern Festival date, verified",
        "merged_keywords": ["festival", "July"],
        "neighbor_updates": [{"neighbor": 1, "context": "city of the verified festival", "keywords": ["Calder", "festival"]}],
        "merge_description": "Merged two dates; validation supports July.",
    }]
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=analysis, integration=integration,
        planning=plans("Check the festival date", "", ""),
        **{REACT: search_then_finish("festival date August") + search_then_finish("festival date official") + [FINISH],
           EXTRACT: answers("Some say August", "The official page says July", "July, on the Calder")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    # City first, then festival: the festival node is analysed against the city node and relates to it.
    result = bank.run("When is the festival?", context=f"{CITY}\n\n{FESTIVAL}")
    store = result.store
    store.check()

    assert result.termination == "goal_met", result.errors
    merges = store.tree.merge_events
    assert len(merges) == 1
    event = merges[0]
    assert len(event.merged_node_ids) == 2
    assert event.description == "Merged two dates; validation supports July."
    merged = store.graph.node(event.new_node_id)
    assert merged.context == "The Tidewater Lantern Festival date, verified"
    for old in event.merged_node_ids:  # the old nodes left the graph and both indexes
        assert old not in store.graph and old not in store.index
    # the merged node inherited the festival node's edge to the city node, which was re-described
    city = next(n for n in store.graph.nodes_dict.values() if "Calder" in n.summary and n.id != merged.id)
    assert merged.links == [city.id] and city.links.count(merged.id) == 1
    assert city.context == "city of the verified festival" and city.keywords == ["Calder", "festival"]
    # every entry of the merged nodes is reachable from the new node, plus the validation record
    reachable = {e.metadata["source"] for e in store.tree.entries_for(merged.id)}
    assert reachable == {"user_context", "executor", "cross_validation"}
    # user context, the first search, and the cross-validation (its search is recorded there, once)
    assert sorted(e.metadata["source"] for e in store.tree.entries.values()) == ["cross_validation", "executor", "user_context"]
    doc = store.insight_doc
    assert [t.type for t in doc.completed_tasks] == [TaskKind.NORMAL, TaskKind.CROSS_VALIDATE]
    assert all(t.status is TaskStatus.SUCCESS for t in doc.completed_tasks)
    assert event.merged_node_ids[0] in doc.completed_tasks[1].description
    assert result.answer == "July, on the Calder"


def _png(path: Path) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"\x00\xff\x00\x00"  # one red pixel
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


def test_image_waits_in_temp_storage_until_recognised_then_becomes_an_attachment(config, embedder, tmp_path):
    image = _png(tmp_path / "poster.png")
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
        planning=plans("", ""),
        **{REACT: [FINISH, FINISH], EXTRACT: answers("A red lantern poster for July 11", "July 11")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("What date does the poster show?", images=[image])
    store = result.store
    store.check()

    assert result.termination == "goal_met"
    entries = list(store.tree.entries.values())
    assert len(entries) == 1 and entries[0].metadata["source"] == "image_recognition"
    attachment = entries[0].attachments[0]
    assert attachment.type.value == "image"
    stored = Path(attachment.content)
    assert stored.is_file() and stored.read_bytes() == image.read_bytes()
    assert Path(config.storage_dir).resolve() in stored.parents
    assert not (Path(config.temp_dir) / store.insight_doc.doc_id).exists()  # temporary copy removed
    assert image.exists()  # the user's file is left alone
    # the recognition prompt carried the image; the node it produced links back to the entry
    image_calls = [c for c in lm.calls_for(REACT) if "[image: image/png]" in c.inputs.get("images", "")]
    assert len(image_calls) == 1
    assert len(store.graph) >= 1
    for node in store.graph.nodes_dict.values():
        assert [e.entry_id for e in store.tree.entries_for(node.id)] == [entries[0].entry_id]
    assert store.insight_doc.completed_tasks[0].description.startswith("Recognise the attached image")


def test_agent_failure_fails_the_task_keeps_the_raw_text_and_the_run_goes_on(config, embedder):
    classification_calls = []

    def classification(call):
        classification_calls.append(call)
        if len(classification_calls) <= 2:  # ChatAdapter, then DSPy's JSONAdapter fallback: both garbage
            return "this is not what the adapter asked for"
        return one_cluster_per_segment(call)

    lm = ScriptedLM(
        classification=classification, structure=compress, analysis=unrelated,
        planning=[{"executed_status": "success", "executed_context": "", "next_task": "Search the festival"},
                  {"executed_status": "success", "executed_context": "", "next_task": ""},  # after the failure
                  {"executed_status": "success", "executed_context": "found it", "next_task": ""}],  # after the retry
        **{REACT: search_then_finish("festival") + search_then_finish("festival") + [FINISH],
           EXTRACT: answers("the festival, first try", "the festival, second try", "the festival, final")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?")
    store = result.store
    store.check()

    failed = [t for t in store.insight_doc.completed_tasks if t.status is TaskStatus.FAILURE]
    assert len(failed) == 1 and "classification agent" in failed[0].context
    assert any("classification agent" in e for e in result.errors)
    # the failed conversion added no node but kept the raw search response
    kept = [e for e in store.tree.entries.values() if "conversion_failed" in e.metadata]
    assert len(kept) == 1 and "Tidewater" in kept[0].text
    assert not any(kept[0].entry_id in ids for ids in store.tree.node_to_entries.values())
    # the failed task was retried once, and that retry converted its search into memory
    assert store.insight_doc.completed_tasks[-1].status is TaskStatus.SUCCESS
    assert len(store.graph) == 1
    assert result.termination == "finished_with_failures"
    assert result.answer == "the festival, final"


def test_loop_cap_stops_a_run_that_never_finishes(config, embedder):
    cfg = config.model_copy(update={"max_loops": 2})
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
        planning=lambda call: {"executed_status": "success", "executed_context": "more", "next_task": "Keep searching"},
        **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers("not yet")[0]},
    )
    bank = MemoryBank(cfg, lm=lm, embedder=embedder)
    result = bank.run("An endless question")
    assert result.termination == "loop_cap"
    assert result.loops == 2
    assert result.store.insight_doc.pending_tasks == ["Keep searching"]
    assert len(result.store.insight_doc.completed_tasks) == 2


def test_lm_call_cap_stops_the_run_and_leaves_memory_consistent(config, embedder):
    cfg = config.model_copy(update={"max_lm_calls": 4})
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
        planning=lambda call: {"executed_status": "success", "executed_context": "", "next_task": "Search more"},
        **{REACT: lambda call: search_then_finish("festival")[0], EXTRACT: lambda call: answers("x")[0]},
    )
    bank = MemoryBank(cfg, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?", context=f"{FESTIVAL}\n\n{CITY}")
    assert result.termination == "lm_call_cap"
    assert sum(u["calls"] for u in result.usage.values()) == 4
    assert any("LM call cap" in e for e in result.errors)
    result.store.check()


def test_executor_failure_marks_the_task_failed(config, embedder):
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
        planning=plans("Search the festival", ""),
        **{REACT: [FINISH, FINISH, FINISH], EXTRACT: ["garbage", "garbage", *answers("retried", "final")]},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?")
    assert any(e.startswith("executor failed") for e in result.errors)
    first = result.store.insight_doc.completed_tasks[0]
    assert first.status is TaskStatus.FAILURE and first.context.startswith("executor failed")


def test_bad_input_is_refused_in_one_line_and_memory_is_kept(config, embedder, tmp_path):
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated, planning=plans(""),
        **{REACT: [FINISH], EXTRACT: answers("ok")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?", context=FESTIVAL)
    before = result.store
    assert len(before.graph) == 1

    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("plain text")
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01\x02binary")
    huge = "x" * (config.max_context_bytes + 1)
    for call, expected in [
        (lambda: bank.run("   "), "the task is empty"),
        (lambda: bank.run("q", context=huge), "over the"),
        (lambda: bank.run("q", images=[tmp_path / "missing.png"]), "no such file"),
        (lambda: bank.run("q", images=[not_an_image]), "not a PNG"),
        (lambda: read_context_file(tmp_path / "missing.txt", 1000), "no such file"),
        (lambda: read_context_file(binary, 1000), "binary data"),
        (lambda: MemoryBank(config.model_copy(update={"corpus": tmp_path / "nowhere"}), lm=lm, embedder=embedder), "no such file"),
    ]:
        with pytest.raises(InputError) as info:
            call()
        message = str(info.value)
        assert expected in message and "\n" not in message
    assert result.store is before and len(result.store.graph) == 1  # the earlier run's memory is untouched
    assert not any(Path(config.temp_dir).glob("*/*"))  # nothing was staged


def test_exported_bank_has_the_three_layers_and_imports_equal(config, embedder, tmp_path):
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated, planning=plans(""),
        **{REACT: [FINISH], EXTRACT: answers("ok")},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?", context=f"{FESTIVAL}\n\n{CITY}")
    path = tmp_path / "bank.json"
    result.export(path)
    data = json.loads(path.read_text())
    assert {"insight_doc", "query_graph", "interaction_tree"} <= set(data)
    loaded = MemoryStore.load(path, embedder)
    assert loaded.same_content(result.store)
    loaded.check()

"""Routing, summarizing, the memory kinds and their merge rules, tool effects and the run hooks.

Real parts: the SQLite store, the embedder, DSPy's adapters for the LM router; only the router LM's
words are scripted (dspy.utils.DummyLM).
"""

from __future__ import annotations

import pytest
from dspy.utils import DummyLM

from amb_dspy.config import AmbConfig
from amb_dspy.longterm import MEMORY_KINDS, MERGE_RULES, RecalledItem, route, summarize
from amb_dspy.longterm.merge import merge_items
from amb_dspy.longterm.remember import remember_task, tool_effects
from amb_dspy.longterm.route import told_statements
from amb_dspy.longterm.run_memory import lm_router, recall_for_task, remember_run
from amb_dspy.longterm.sqlite import SQLiteStore

HOPS = [{"loop": 1, "task": "Find who directed Ed Wood", "kind": "NORMAL", "success": True,
         "answer": "Tim Burton directed Ed Wood (1994).",
         "tool_calls": [{"name": "search", "args": {"query": "Ed Wood film director"}, "cached": False},
                        {"name": "visit", "args": {"url": "corpus://Ed_Wood_(film)"}, "cached": False},
                        {"name": "search", "args": {"query": "Ed Wood film director"}, "cached": True}]},
        {"loop": 2, "task": "Answer", "kind": "ANSWER", "success": True, "answer": "Tim Burton", "tool_calls": []}]


@pytest.mark.parametrize("message, write, read, kinds", [
    ("From now on, always answer in British English.", True, False, ("preference",)),
    ("My name is Ada and I work as a nurse.", True, False, ("preference",)),
    ("RAG stands for retrieval-augmented generation.", True, False, ("fact",)),
    ("The capital of Australia is Canberra.", True, False, ("fact",)),
    ("Which river flows through Paris?", False, True, ()),
    ("Is it always sunny in Los Angeles?", False, True, ()),        # "always" in a question is no preference
    ("Just this once, answer in French: what is a croissant?", False, True, ()),
    ("thanks!", False, False, ()),
    ("My password is hunter2, remember it.", False, False, ()),      # a secret is never written
    ("I'm tired today.", False, False, ()),                          # passing, not a profile
    # mixed messages: each sentence is routed on its own
    ("From now on answer in French. What is the capital of Peru?", True, True, ("preference",)),
    ("SLA stands for service level agreement. What SLA do we promise?", True, True, ("fact",)),
    ("Just this once, answer in Spanish. What time is it in Tokyo?", False, True, ()),
    ("My password is hunter2. Why can't I log in?", False, True, ()),    # a secret anywhere: nothing written
    ("Call me Jo. Thanks!", True, False, ("preference",)),
])
def test_heuristic_route(message, write, read, kinds):
    decision = route(message, namespace="alice")
    assert (decision.should_write, decision.should_read, decision.kinds) == (write, read, kinds)
    assert decision.namespaces == ("alice",) and decision.reasons


def test_route_after_a_task_keeps_the_trace_and_the_tool_effects():
    done = route("Who directed Ed Wood?", {"answer": "Tim Burton", "hops": HOPS,
                                           "completed_tasks": [{"status": "success", "context": "Tim Burton directed it."}]})
    assert done.should_write and done.kinds == ("conclusion", "fact", "trajectory", "tool_effect")
    assert done.memory_kinds == ("domain", "trace", "tool")
    failed = route("Who directed Ed Wood?", {"answer": "I don't know", "hops": HOPS[:1]})
    assert failed.kinds == ("trajectory", "tool_effect")  # what not to try again, no conclusion
    assert route("Don't remember this: who is Ed Wood?", {"answer": "a director"}).should_write is False


def test_lm_router_decides_and_falls_back_to_the_rules():
    lm = DummyLM([{"should_read": "True", "should_write": "True", "kinds": '["profile"]'}])
    decision = route("I'd rather you ask before assuming.", router=lm_router(lm))
    assert decision.should_write and decision.kinds == ("preference",)
    assert decision.reasons == ("decided by the memory router",)

    def broken(message, trace):
        raise RuntimeError("LM unavailable")

    assert route("From now on, be brief.", router=broken).kinds == ("preference",)  # the rules decided
    says_write = DummyLM([{"should_read": "False", "should_write": "True", "kinds": '["profile"]'}])
    assert route("My password is hunter2", router=lm_router(says_write)).should_write is False


def test_memory_kinds_and_merge_rules():
    assert MEMORY_KINDS == {"profile": ("preference",), "domain": ("fact",), "trace": ("conclusion", "trajectory"),
                            "tool": ("tool_effect",)}
    assert {MERGE_RULES[k] for k in ("preference", "trajectory", "tool_effect", "fact")} == {
        "overwrite", "append", "merged statement"}
    assert merge_items("preference", "Answer in French.", "Answer in English.") == "Answer in English."
    once = merge_items("tool_effect", "search(query='a')", "visit(url='b')")
    assert once == "search(query='a')\n\nvisit(url='b')"
    assert merge_items("tool_effect", once, "search(query='a')") == once  # the same effect is not appended twice


def test_tool_effects_come_from_the_hop_record(tmp_path, embedder):
    effects = tool_effects(HOPS)
    assert effects == ["search(query='Ed Wood film director') for \"Find who directed Ed Wood\": found: Tim Burton "
                       "directed Ed Wood (1994).",
                       "visit(url='corpus://Ed_Wood_(film)') for \"Find who directed Ed Wood\": found: Tim Burton "
                       "directed Ed Wood (1994)."]  # the cached repeat is not an effect
    with SQLiteStore(tmp_path / "lt.sqlite3", embedder) as store:
        outcomes = remember_task(store, namespace="ns", task_id="t1", goal="Who directed Ed Wood?", answer="Tim Burton",
                                 hops=HOPS, kinds=("conclusion", "tool_effect"))
        assert [o.item.kind for o in outcomes] == ["conclusion", "tool_effect", "tool_effect"]
        assert store.list("ns", kind="trajectory") == []


def _recalled(store, ns, query):
    return [RecalledItem(s.item, s.score) for s in store.search(ns, query, k=5)]


def test_summarize_condenses_within_the_budget(tmp_path, embedder):
    with SQLiteStore(tmp_path / "lt.sqlite3", embedder) as store:
        store.write("ns", "Question: Who directed Ed Wood?\nAnswer: Tim Burton", "conclusion", task_id="t1")
        store.write("ns", "Tim Burton directed the 1994 film Ed Wood. Burton was born in Burbank, California. "
                          "He is known for gothic fantasy films. Johnny Depp played the title role.", "fact", task_id="t1")
        store.write("ns", "Tim Burton directed the 1994 film Ed Wood.", "conclusion", task_id="t2")
        items = _recalled(store, "ns", "Where was the director of Ed Wood born?")
        wide = summarize(items, "Where was the director of Ed Wood born?", max_tokens=400)
        tight = summarize(items, "Where was the director of Ed Wood born?", max_tokens=45)
    assert wide.startswith("From earlier tasks:\n- [task t")
    assert "born in Burbank" in wide and "Answer: Tim Burton" in wide
    assert wide.count("Tim Burton directed the 1994 film Ed Wood.") == 1  # a restatement is shown once
    assert len(tight) < len(wide) and "born in Burbank" in tight  # the goal's sentence goes first
    assert summarize([], "anything", max_tokens=100) == ""


def test_run_hooks_write_what_the_route_keeps_and_read_as_routed(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path, remember=True, namespace="alice", longterm_max_tokens=200)
    decision, notices = remember_run(config, embedder, task_id="t1", goal="From now on, answer in British English.",
                                     answer="Noted.")
    assert decision.kinds[0] == "preference" and notices == []
    decision, _ = remember_run(config, embedder, task_id="t2", goal="Who directed Ed Wood?", answer="Tim Burton",
                               hops=HOPS)
    with SQLiteStore(tmp_path / "longterm.sqlite3", embedder) as store:
        assert [i.content for i in store.list("alice", kind="preference")] == ["From now on, answer in British English."]
        [effects] = store.list("alice", kind="tool_effect")  # the subtask's two calls, appended into one item
        assert effects.content.startswith("search(query='Ed Wood film director')") and "\n\nvisit(url=" in effects.content
        assert store.list("alice", kind="conclusion")
    block, notices = recall_for_task(config, embedder, "Which film director made Ed Wood?")
    assert "Answer: Tim Burton" in block and notices == []
    assert recall_for_task(config, embedder, "thanks!") == ("", [])  # small talk reads nothing
    off, _ = remember_run(config.model_copy(update={"remember": False}), embedder, task_id="t3", goal="x", answer="y")
    assert off is None


def test_a_mixed_message_keeps_only_its_statement_and_reads_for_its_question(tmp_path, embedder):
    message = "From now on answer in French. What is the capital of Peru?"
    assert told_statements(message) == [("preference", "From now on answer in French.")]
    assert told_statements("Don't remember this, but I'm vegan. Any recipes?") == []
    config = AmbConfig(storage_dir=tmp_path, remember=True, namespace="alice")
    decision, notices = remember_run(config, embedder, task_id="t1", goal=message, answer="Lima.")
    assert decision.should_read and decision.kinds[0] == "preference" and notices == []
    with SQLiteStore(tmp_path / "longterm.sqlite3", embedder) as store:
        assert [i.content for i in store.list("alice", kind="preference")] == ["From now on answer in French."]
        assert any("Answer: Lima." in i.content for i in store.list("alice", kind="conclusion"))

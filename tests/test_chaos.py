"""Issue 9: with policy="auto" no knowledge is lost and a run answers, whatever share of the LM's replies
is garbage. A chaos LM answers each call with garbage (random text, truncated JSON, wrong field names,
invented node numbers, an empty reply) at a given rate, else with sensible scripted words; the bank,
ReAct, the fallback policies, the real embedder, FAISS, the tools and a real corpus run as they are.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from scripted_lm import ScriptedLM
from test_bank import REACT, compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.tools import LocalCorpus
from optimize.hotpotqa import load_hotpotqa

DATA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa")
DEV = DATA / "dev_distractor_300.jsonl"
pytestmark = pytest.mark.skipif(not DEV.is_file(), reason=f"HotpotQA samples not found at {DATA}")
RUNS = 20


def garbage(rng: random.Random) -> str:
    return rng.choice([
        " ".join(rng.choice(["lorem", "{", "]]", "ipsum", "##", "null", "42"]) for _ in range(rng.randint(1, 30))),
        '{"clusters": [{"context": "trunc',
        json.dumps({"wrong_field": "nothing the adapter asked for", "answer_maybe": 3}),
        json.dumps({"relationships": [{"candidate": 999, "relationship": "conflict", "reasoning": "invented"}]}),
        "",
    ])


class Searches:
    """The corpus as the search backend, keeping every result it returned (to check the tree keeps them)."""

    def __init__(self, corpus: LocalCorpus):
        self.corpus, self.returned = corpus, []

    def search(self, query, k=10):
        results = self.corpus.search(query, k=k)
        self.returned.extend(results)
        return results


def chaos_lm(rate: float, seed: int, question: str) -> ScriptedLM:
    rng = random.Random(seed)

    def sometimes(script):
        return lambda call: garbage(rng) if rng.random() < rate else script(call)

    def react(call):
        text = call.messages[-1]["content"]
        if "observation_0" in text:
            return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
        return {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": question}}

    planning_calls = []

    def planning(call):
        planning_calls.append(call)
        return {"executed_status": "success", "executed_context": "found",
                "next_task": "Search for the answer" if len(planning_calls) == 1 else ""}

    return ScriptedLM(
        classification=sometimes(one_cluster_per_segment), structure=sometimes(compress),
        analysis=sometimes(unrelated), integration=sometimes(lambda call: {}), planning=sometimes(planning),
        **{REACT: sometimes(react), "reasoning,answer": sometimes(lambda call: {"reasoning": "r", "answer": "an answer"}),
           "answer": sometimes(lambda call: {"answer": "an answer from memory"})},
    )


@pytest.fixture(scope="module")
def items():
    return load_hotpotqa(f"hotpotqa:{DEV}", n=RUNS)


@pytest.fixture(scope="module")
def corpus(items, embedder, tmp_path_factory):
    lines = [json.dumps({"id": p.title, "title": p.title, "text": p.text}) for item in items for p in item.context]
    path = tmp_path_factory.mktemp("corpus") / "paragraphs.jsonl"
    path.write_text("\n".join(dict.fromkeys(lines)) + "\n")
    return LocalCorpus.load(path, embedder)


@pytest.mark.parametrize("rate", [0.1, 0.3, 1.0])
def test_garbage_replies_lose_no_knowledge_and_runs_answer(rate, items, corpus, embedder, tmp_path):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=2, react_max_iters=3)
    for seed, item in enumerate(items):
        searches = Searches(corpus)
        context = "\n\n".join(p.text for p in item.context[:4])
        bank = MemoryBank(config, lm=chaos_lm(rate, seed, item.question), embedder=embedder, search=searches,
                          corpus=corpus)
        result = bank.run(item.question, context=context)  # nothing may escape
        store = result.store
        store.check()
        entries = list(store.tree.entries.values())
        kept = [e for e in entries if "conversion_failed" in e.metadata]
        assert not [e for e in kept if e.text.strip()], (rate, seed, kept[0].metadata)  # every text became nodes
        linked = {e for ids in store.tree.node_to_entries.values() for e in ids}
        assert all(e.entry_id in linked for e in entries if e.text.strip() and e.metadata.get("source") != "image")
        assert any(e.metadata.get("source") == "user_context" for e in entries)
        everything = "\n".join(e.text for e in entries)
        for found in searches.returned:  # every successful tool response is in the tree
            assert " ".join(found.snippet.split())[:60] in " ".join(everything.split()), (rate, seed, found.title)
        if rate < 1.0:
            assert result.answer, (rate, seed, result.termination, result.errors[-3:])
        if rate == 1.0:
            assert sum(result.fallbacks.values()) > 0

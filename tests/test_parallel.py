"""Issue 12 item 1: independent agent calls at once give the same bank, node for node and in order, as
one at a time; the usage meter and the LM-call cap stay exact under threads. Scripted LM words only."""

from __future__ import annotations

import threading
import time

from scripted_lm import MEMORY_ANSWER, ScriptedLM
from test_bank import EXTRACT, FINISH, REACT, compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig

PARAGRAPHS = [f"Paragraph {i} tells how the harbour town number {i} built {i * 3} boats in the year {1800 + i}, "
              f"why its fishers sailed to island {i}, and what the records of guild {i} say about the trade." * 2
              for i in range(12)]


def lm(delay: float = 0.0, seen: list | None = None):
    lock = threading.Lock()

    def slow(script):
        def call(c):
            if seen is not None:
                with lock:
                    seen.append(threading.current_thread().name)
            time.sleep(delay)
            return script(c)
        return call

    return ScriptedLM(classification=slow(one_cluster_per_segment), structure=slow(compress),
                      analysis=slow(unrelated), planning=lambda c: {"executed_status": "success",
                                                                    "executed_context": "", "next_task": ""},
                      **{REACT: lambda c: FINISH, EXTRACT: lambda c: {"reasoning": "r", "answer": "done"},
                         # the fast path's verdict: memory does not suffice, so the loop runs
                         MEMORY_ANSWER: lambda c: {"answer": "", "cited_node_ids": [], "reason": "not in memory",
                                                   "sufficient": False}})


def bank_for(tmp_path, threads, **config):
    return AmbConfig(storage_dir=tmp_path / f"s{threads}", temp_dir=tmp_path / f"t{threads}", lm_threads=threads,
                     policy="lm", **config)


def nodes(result):
    return [(n.summary, n.context, tuple(n.keywords), tuple(tuple(s.spans) for s in n.sources))
            for n in result.store.graph.nodes_dict.values()]


def test_parallel_and_sequential_banks_are_equal_node_for_node(tmp_path, embedder):
    context = "\n\n".join(PARAGRAPHS)
    seen: list[str] = []
    # two clusters a structure call (AMB_INGEST_BATCH), so that there are several calls to run at once
    one = MemoryBank(bank_for(tmp_path, 1, ingest_batch=2), lm=lm(), embedder=embedder)
    first = one.run("What did the harbour towns build?", context=context)
    many = MemoryBank(bank_for(tmp_path, 8, ingest_batch=2), lm=lm(delay=0.05, seen=seen), embedder=embedder)
    second = many.run("What did the harbour towns build?", context=context)
    assert len(first.store.graph) == 12 and nodes(second) == nodes(first)
    assert [e.text for e in second.store.tree.entries.values()] == [e.text for e in first.store.tree.entries.values()]
    # every call counted once, for the right agent (the executor's prompts hold random node ids, so only
    # the calls of agents that see no ids are compared token for token)
    assert {a: u["calls"] for a, u in second.usage.items()} == {a: u["calls"] for a, u in first.usage.items()}
    assert all(second.usage[a] == first.usage[a] for a in ("classification", "structure"))
    assert len(set(seen)) > 1  # the structure calls did run on several threads


def test_the_lm_call_cap_is_exact_under_threads(tmp_path, embedder):
    scripted = lm(delay=0.02)
    bank = MemoryBank(bank_for(tmp_path, 8, max_lm_calls=5), lm=scripted, embedder=embedder)
    result = bank.run("What did the harbour towns build?", context="\n\n".join(PARAGRAPHS))
    assert result.termination == "lm_call_cap"
    assert len(scripted.calls) == 5 == sum(u["calls"] for u in result.usage.values())
    result.store.check()


def relating_lm():
    """Every analysis relates the new node to its first candidate, re-describing both: later verdicts
    computed ahead of time then see stale candidates and must be made again."""

    def analysis(call):
        new = call.input_json("new_node")
        first = call.input_json("candidates")[0]
        return {"relationships": [{
            "candidate": first["number"], "relationship": "related", "reasoning": "same harbour",
            "context_update_new": f"{new['context']} (linked)", "context_update_existing": f"{first['context']} +",
            "keywords_update_new": ["harbour"], "keywords_update_existing": ["harbour", "linked"]}]}

    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=analysis,
                      planning=lambda c: {"executed_status": "success", "executed_context": "", "next_task": ""},
                      **{REACT: lambda c: FINISH, EXTRACT: lambda c: {"reasoning": "r", "answer": "done"},
                         # the fast path's verdict: memory does not suffice, so the loop runs
                         MEMORY_ANSWER: lambda c: {"answer": "", "cited_node_ids": [], "reason": "not in memory",
                                                   "sufficient": False}})


def test_verdicts_made_ahead_of_time_are_made_again_when_an_earlier_one_changed_the_candidates(tmp_path, embedder):
    context = "\n\n".join(PARAGRAPHS)
    banks = {}
    for threads in (1, 8):
        bank = MemoryBank(bank_for(tmp_path, threads), lm=relating_lm(), embedder=embedder)
        result = bank.run("What did the harbour towns build?", context=context)
        by_id = {n.id: (n.summary, n.context) for n in result.store.graph.nodes_dict.values()}
        banks[threads] = (nodes(result), sorted(tuple(sorted((by_id[a], by_id[b]))) for a, b in result.store.graph.edges()))
    assert banks[8] == banks[1]
    assert any("(linked)" in context for _, context, *_ in banks[8][0]) and len(banks[8][1]) >= 10

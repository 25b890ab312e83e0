"""Issue 21 item 3: batched ingest (several clusters a structure call, several new nodes an analysis call)
makes the bank the sequential calls make, node for node, edge for edge and in order, in fewer LM calls;
an unusable batch answer is covered by the fallback policy (or, under policy "lm", by asking alone).
Scripted LM words only: a deterministic LM answers an item of a batch as it answers it alone."""

from __future__ import annotations

import pytest
from scripted_lm import ScriptedLM

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig

TOPICS = ["harbour boats fishing", "orchard apples cider", "harbour boats trade", "mountain railway tunnel",
          "orchard apples harvest", "mountain railway station", "harbour fishing nets", "choir music concert"]
TEXT = "\n\n".join(f"Part {n}. The {topic.split()[0]} story: people spoke about {topic} for a long while, and "
                   f"about {topic.split()[1]} in the season of year {1900 + n}, with {n * 7} witnesses. " * 3
                   for n, topic in enumerate(TOPICS))


def classify(call):
    count = call.inputs["segments"].count("\n\n") + 1
    return {"should_cluster": count > 1,
            "clusters": [{"context": f"Part {i - 1}", "keywords": TOPICS[i - 1].split(), "segments": [i]}
                         for i in range(1, count + 1)]}


def compress(call):
    words = call.inputs["content"].split()
    return {"summary": " ".join(words[: len(words) * 2 // 5])}


def judge(call):
    """related (both contexts and keyword lists rewritten) when two keywords are shared, else unrelated."""
    new = call.input_json("new_node")
    out = []
    for candidate in call.input_json("candidates"):
        shared = sorted(set(new["keywords"]) & set(candidate["keywords"]))
        if len(shared) >= 2:
            out.append({"candidate": candidate["number"], "relationship": "related", "reasoning": "shared",
                        "context_update_new": f"{new['context'].split(' ~')[0]} ~ {candidate['context']}",
                        "context_update_existing": f"{candidate['context'].split(' ~')[0]} ~ {new['context']}",
                        "keywords_update_new": new["keywords"][:3] + ["linked"],
                        "keywords_update_existing": candidate["keywords"][:3] + ["linked"]})
        else:
            out.append({"candidate": candidate["number"], "relationship": "unrelated", "reasoning": "-"})
    return {"relationships": out}


def ingest(tmp_path, batch: int, lm: ScriptedLM, embedder, policy: str = "lm"):
    config = AmbConfig(storage_dir=tmp_path / f"s{batch}", ingest_batch=batch, policy=policy, lm_threads=1)
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    return bank, bank.ingest(TEXT, name="parts")


def shape(result):
    ids = list(result.store.graph.nodes_dict)
    nodes = [(n.summary, n.context, tuple(n.keywords)) for n in result.store.graph.nodes_dict.values()]
    return nodes, sorted(tuple(sorted((ids.index(a), ids.index(b)))) for a, b in result.store.graph.edges())


def scripted(**extra):
    return ScriptedLM(classification=classify, structure=compress, analysis=judge, **extra)


def test_batched_ingest_makes_the_sequential_bank_in_fewer_calls(tmp_path, embedder):
    one_lm, many_lm = scripted(), scripted()
    _, alone = ingest(tmp_path, 1, one_lm, embedder)
    _, batched = ingest(tmp_path, 8, many_lm, embedder)
    assert shape(batched) == shape(alone)
    nodes, edges = shape(alone)
    assert len(nodes) == 8 and edges and any("~" in context for _, context, _ in nodes)  # related verdicts applied
    assert [e.text for e in batched.store.tree.entries.values()] == [e.text for e in alone.store.tree.entries.values()]
    assert not any(c.route.endswith("_batch") for c in one_lm.calls)
    assert {c.route for c in many_lm.calls} >= {"structure_batch", "analysis_batch"}
    # the same items were asked, and the meter counts each real LM call once
    assert sorted(c.inputs["content"] for c in many_lm.calls_for("structure")) == \
        sorted(c.inputs["content"] for c in one_lm.calls_for("structure"))
    assert alone.usage["structure"]["calls"] == 8 and batched.usage["structure"]["calls"] == 1
    assert batched.usage["analysis"]["calls"] < alone.usage["analysis"]["calls"] == 7
    for result, lm in ((alone, one_lm), (batched, many_lm)):
        assert sum(u["calls"] for u in result.usage.values()) == len(lm.calls)


def test_an_unusable_batch_answer_falls_back_to_the_policy_or_is_asked_again_in_halves(tmp_path, embedder):
    lm = scripted(structure_batch=lambda call: "no idea", analysis_batch=lambda call: "{not json")
    bank, result = ingest(tmp_path, 8, lm, embedder, policy="auto")
    assert result.nodes == 8 and any("deterministic policy was used" in e for e in result.errors)
    assert result.fallbacks["structure"] == 1 and "analysis" not in result.fallbacks
    # analysis: the 7 nodes with candidates asked in halves (7 -> 3 + 4 -> ... -> single calls), none lost
    sizes = [len(call.input_json("new_notes")) for call in lm.calls_for("analysis_batch")]
    assert sizes[::2] == sizes[1::2] == [7, 3, 2, 4, 2, 2]  # each asked twice: DSPy's ChatAdapter, then its JSON one
    assert len(lm.calls_for("analysis")) == 7 and result.edges
    assert all(n.summary for n in result.store.graph.nodes_dict.values())
    assert len(result.store.tree.entries) == 1


def test_under_policy_lm_an_unusable_analysis_batch_asks_each_node_alone(tmp_path, embedder):
    _, one = ingest(tmp_path, 1, scripted(), embedder)
    lm = scripted(analysis_batch=lambda call: "{not json")
    _, result = ingest(tmp_path, 8, lm, embedder)
    assert shape(result) == shape(one) and not result.errors
    assert lm.calls_for("analysis_batch") and len(lm.calls_for("analysis")) == 7


def test_a_batch_answer_that_leaves_a_cluster_out_asks_that_one_alone(tmp_path, embedder):
    def drop_last(call):
        topics = call.input_json("topics")
        return {"summaries": [{"number": t["number"], "summary": " ".join(t["content"].split()[:len(t["content"].split()) * 2 // 5])}
                              for t in topics[:-1]], "complete": True}

    _, one = ingest(tmp_path, 1, scripted(), embedder)
    lm = scripted(structure_batch=drop_last)
    _, result = ingest(tmp_path, 8, lm, embedder)
    assert shape(result) == shape(one) and not result.errors
    assert len(lm.calls_for("structure_batch")) == 1 and len(lm.calls_for("structure")) == 1


def test_the_nodes_of_one_conversion_are_judged_on_the_graph_it_found_and_the_verdicts_applied_in_order(tmp_path, embedder):
    conversion_lm, ordered_lm = scripted(), scripted()
    _, conversion = ingest(tmp_path, 8, conversion_lm, embedder)
    config = AmbConfig(storage_dir=tmp_path / "ordered", ingest_batch=8, ingest_analysis="ordered", policy="lm", lm_threads=1)
    ordered = MemoryBank(config, lm=ordered_lm, embedder=embedder).ingest(TEXT, name="parts")
    assert ordered.usage["analysis"]["calls"] == 7 and not ordered.errors  # ordered: one call a node
    # conversion: every node was shown its candidates as drafted, none re-described by an earlier verdict
    shown = [c["context"] for call in conversion_lm.calls_for("analysis") for c in call.input_json("candidates")]
    assert shown and all("~" not in context for context in shown)
    assert any("~" in c["context"] for call in ordered_lm.calls_for("analysis") for c in call.input_json("candidates"))
    # "harbour fishing nets" (part 6) relates to part 0, which part 2 re-described first: in conversion order
    # its verdict rests on part 0 as drafted, in the ordered one on part 0 as part 2's verdict left it
    contexts = [{n.context.split(" ~")[0]: n.context for n in ingested.store.graph.nodes_dict.values()}
                for ingested in (conversion, ordered)]
    assert contexts[0]["Part 6"] == "Part 6 ~ Part 0"
    assert contexts[1]["Part 6"] == "Part 6 ~ Part 0 ~ Part 2"
    # part 0 was re-described by the verdicts of parts 2 and 6: the later one stands
    assert contexts[0]["Part 0"] == "Part 0 ~ Part 6"


def test_a_compiled_agent_asks_each_item_alone_as_it_was_compiled(tmp_path, embedder):
    import dspy

    lm = scripted()
    config = AmbConfig(storage_dir=tmp_path / "compiled", ingest_batch=8, policy="lm", lm_threads=1)
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    demo = dspy.Example(content="a", context="b", keywords=[], feedback="", summary="a")
    bank.agents["structure"].summarize.demos = [demo]
    bank.agents["analysis"].analyze.demos = [dspy.Example(new_node="x", candidates=[], relationships=[])]
    result = bank.ingest(TEXT, name="parts")
    _, one = ingest(tmp_path, 1, scripted(), embedder)
    assert shape(result) == shape(one) and not result.errors
    assert not any(c.route.endswith("_batch") for c in lm.calls)  # the demos' predictors answered every item
    assert result.usage["structure"]["calls"] == 8 and result.usage["analysis"]["calls"] == 7


def test_an_analysis_answer_cut_short_by_max_tokens_is_asked_again_and_loses_no_judgement(tmp_path, embedder):
    from scripted_lm import _render

    def cut_the_first(script):
        calls = []

        def answer(call):
            reply = _render(script(call), call.output_fields, call.json_mode)
            if call.route != "analysis_batch":
                return reply
            calls.append(call)
            return reply[: len(reply) * 7 // 10] if len(calls) <= 2 else reply  # the LM stopped at max_tokens
        return answer

    _, one = ingest(tmp_path, 1, scripted(), embedder)
    lm = scripted(wrap_batches=cut_the_first)
    _, result = ingest(tmp_path, 8, lm, embedder)
    assert shape(result) == shape(one) and not result.errors  # every judgement of the cut answer made again
    sizes = [len(call.input_json("new_notes")) for call in lm.calls_for("analysis_batch")]
    assert sizes == [7, 7, 3, 4]  # cut twice (asked by DSPy's ChatAdapter, then its JSON one), then each half


def test_the_previous_release_names_of_the_analysis_order_still_configure_it(monkeypatch):
    monkeypatch.setenv("AMB_INGEST_ANALYSIS", "exact")
    assert AmbConfig().ingest_analysis == "ordered"
    monkeypatch.setenv("AMB_INGEST_ANALYSIS", "snapshot")
    assert AmbConfig().ingest_analysis == "conversion"
    monkeypatch.setenv("AMB_INGEST_ANALYSIS", "sometimes")
    with pytest.raises(ValueError, match="'conversion' or 'ordered'"):
        AmbConfig()

"""The five memory agents against scripted LMs: every branch, malformed output, and saved state.

Only the LM's words are scripted (tests/scripted_lm.py); DSPy's adapters, parsing and fallback run for real.
"""

from __future__ import annotations

import json
import logging

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.agents import (
    AgentError,
    AnalysisAgent,
    ClassificationAgent,
    NodeInfo,
    StructureAgent,
    estimate_tokens,
)
from amb_dspy.config import AmbConfig

ADAPTERS = [pytest.param(dspy.ChatAdapter(), id="chat"), pytest.param(dspy.JSONAdapter(), id="json")]


def run(agent, lm, adapter=None, **inputs):
    with dspy.context(lm=lm, adapter=adapter):
        return agent(**inputs)


def group(context, keywords, segments):
    return {"context": context, "keywords": keywords, "segments": segments}


def prompt_tokens(call) -> int:
    return sum(estimate_tokens(m["content"]) for m in call.messages)


# Nodes shared by the analysis and planning tests.
NEW_NODE = NodeInfo(summary="The Amazon discharges 209,000 m3/s.", context="Amazon river flow", keywords=["Amazon", "flow"])
CANDIDATES = [
    NodeInfo(id="node-a", summary="The Amazon discharges 150,000 m3/s.", context="Amazon discharge", keywords=["Amazon"]),
    NodeInfo(id="node-b", summary="The Amazon basin spans nine countries.", context="Amazon basin", keywords=["basin"]),
    NodeInfo(id="node-c", summary="Paris is the capital of France.", context="Paris", keywords=["Paris"]),
]


# --- classification ---------------------------------------------------------------------------------

FOUR_PARAGRAPHS = (
    "Paris is the capital of France.\n\n"
    "Tokyo is the capital of Japan.\n\n"
    "The Eiffel Tower stands in Paris.\n\n"
    "Berlin has many museums."
)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_classification_builds_clusters_from_the_original_segments(adapter):
    lm = ScriptedLM(classification=[{
        "should_cluster": True,
        "clusters": [group("Paris", ["Paris", "France"], [1, 3]), group("Tokyo", ["Tokyo"], [2]),
                     group("Berlin", ["Berlin"], [4])],
    }])
    out = run(ClassificationAgent(), lm, adapter, context=FOUR_PARAGRAPHS, task_goal="Which capitals?")

    assert out.should_cluster is True
    assert [c.cluster_id for c in out.clusters] == ["c1", "c2", "c3"]
    assert out.clusters[0].content == "Paris is the capital of France.\n\nThe Eiffel Tower stands in Paris."
    assert out.clusters[0].context == "Paris" and out.clusters[0].keywords == ["Paris", "France"]
    assert out.clusters[1].content == "Tokyo is the capital of Japan."
    (call,) = lm.calls
    assert call.inputs["task_goal"] == "Which capitals?"
    assert call.inputs["segments"].startswith("[1] Paris is the capital of France.\n\n[2] Tokyo")
    assert call.json_mode is isinstance(adapter, dspy.JSONAdapter)


def test_classification_keeps_duplicates_in_the_first_cluster_and_gathers_leftovers(caplog):
    lm = ScriptedLM(classification=[{
        "should_cluster": True,
        "clusters": [group("Capitals", ["capital"], [1, 2, 9]), group("Paris again", ["Paris"], [1, 3]),
                     group("Nothing real", ["x"], [0, 7])],
    }])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)

    contents = [c.content for c in out.clusters]
    assert contents == [
        "Paris is the capital of France.\n\nTokyo is the capital of Japan.",
        "The Eiffel Tower stands in Paris.",
        "Berlin has many museums.",  # left out by the LM: a cluster of its own, described from its text
    ]
    assert out.clusters[2].context == "Berlin has many museums."
    assert "Berlin" in out.clusters[2].keywords
    (warning,) = [r.message for r in caplog.records if "unknown segment number" in r.message]
    assert "dropped 3 unknown segment number(s) [9, 0, 7]" in warning


def test_classification_without_clustering_gives_one_cluster_with_everything():
    lm = ScriptedLM(classification=[{
        "should_cluster": False,
        "clusters": [group("European and Asian capitals", ["capital", "city"], [1]), group("", ["Tokyo", "city"], [2])],
    }])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert out.should_cluster is False
    (cluster,) = out.clusters
    assert cluster.content == FOUR_PARAGRAPHS
    assert cluster.context == "European and Asian capitals"
    assert cluster.keywords == ["capital", "city", "Tokyo"]


def test_classification_with_no_clusters_from_the_lm_still_keeps_everything():
    lm = ScriptedLM(classification=[{"should_cluster": True, "clusters": []}])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert [c.content for c in out.clusters] == [FOUR_PARAGRAPHS]
    assert out.should_cluster is False
    assert out.clusters[0].context == "Paris is the capital of France."


def test_classification_of_empty_context_makes_no_call():
    lm = ScriptedLM(classification=[])
    out = run(ClassificationAgent(), lm, context=" \n\n ")
    assert out.clusters == [] and out.should_cluster is False
    assert lm.calls == []


def test_classification_offers_an_overlong_paragraph_as_sentence_runs():
    paragraph = " ".join(f"Sentence {i} is about the river number {i} in the valley." for i in range(60))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    out = run(ClassificationAgent(max_segment_tokens=100), lm, context=paragraph)
    segments = lm.calls[0].inputs["segments"].split("\n\n")
    assert len(segments) > 5
    assert all(s.rstrip().endswith(".") for s in segments)
    # one topic for the LM, cut to the topic size (AmbConfig.topic_max_tokens) at sentence-run boundaries
    assert all(estimate_tokens(c.content) <= AmbConfig().topic_max_tokens for c in out.clusters)
    assert sorted(" ".join(c.content for c in out.clusters).split()) == sorted(paragraph.split())


def _spread_assignments(call):
    """Clusters by segment number mod 3; every 7th number left out; every 5th also claimed twice; one made up."""
    numbers = [int(n) for n in __import__("re").findall(r"^\[(\d+)\] ", call.inputs["segments"], flags=8)]
    clusters = [group(f"topic {k}", [f"k{k}"], [n for n in numbers if n % 3 == k and n % 7]) for k in range(3)]
    clusters.append(group("duplicates", ["dup"], [n for n in numbers if n % 5 == 0] + [len(numbers) + 5]))
    return {"should_cluster": True, "clusters": clusters}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_classification_of_a_50k_token_document_loses_nothing_and_fits_the_window(adapter):
    paragraphs = [
        f"Paragraph {p}: " + " ".join(f"fact{p}x{i} about subject {p % 11} measured {p * i} units." for i in range(12 + p % 9))
        for p in range(135)
    ]
    document = "\n\n".join(paragraphs)
    assert 50_000 <= estimate_tokens(document) <= 60_000

    config = AmbConfig()
    agent = ClassificationAgent(config)
    lm = ScriptedLM(classification=_spread_assignments)
    out = run(agent, lm, adapter, context=document, task_goal="what was measured?")

    assert len(lm.calls) >= 7  # 50k tokens through an 8000-token window
    limit = int(agent.window * config.chunk_ratio)
    for call in lm.calls:
        assert prompt_tokens(call) <= limit  # the whole prompt, instructions included
    contents = "\n\n".join(c.content for c in out.clusters)
    assert sorted(contents.split()) == sorted(document.split())  # every word exactly once
    for p in range(len(paragraphs)):  # every sentence is unique: each in exactly one cluster
        for i in range(12 + p % 9):
            sentence = f"fact{p}x{i} about subject {p % 11} measured {p * i} units."
            assert sum(sentence in c.content for c in out.clusters) == 1
    assert len({c.cluster_id for c in out.clusters}) == len(out.clusters)
    assert out.should_cluster is True


def test_classification_counts_tokens_with_the_given_counter():
    # A counter that sees every character as a token forces many chunks for a short text.
    config = AmbConfig(classification_window=4000)
    agent = ClassificationAgent(config, token_counter=len)
    text = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(40))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    out = run(agent, lm, context=text)
    assert len(lm.calls) > 3
    for call in lm.calls:
        assert sum(len(m["content"]) for m in call.messages) <= int(4000 * config.chunk_ratio)
    assert sorted(" ".join(c.content for c in out.clusters).split()) == sorted(text.split())


def test_classification_rejects_a_window_too_small_for_its_instructions():
    agent = ClassificationAgent(AmbConfig(classification_window=600))
    with pytest.raises(ValueError, match="raise AMB_CLASSIFICATION_WINDOW"):
        run(agent, ScriptedLM(classification=[]), context="Some text.")


def test_classification_uses_the_lm_it_was_built_with():
    own = ScriptedLM(classification=[{"should_cluster": False, "clusters": [group("own", ["own"], [1])]}])
    configured = ScriptedLM(classification=[])
    out = run(ClassificationAgent(lm=own), configured, context="Some text.")
    assert out.clusters[0].context == "own"
    assert len(own.calls) == 1 and configured.calls == []


# --- malformed output and LM failures (shared by all agents) --------------------------------------


def test_malformed_output_after_json_fallback_raises_agent_error_with_raw_output():
    lm = ScriptedLM(classification=["not the format at all", "still {not json"])
    with pytest.raises(AgentError) as caught:
        run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert caught.value.agent == "classification"
    assert caught.value.raw == "still {not json"
    assert [c.json_mode for c in lm.calls] == [False, True]  # ChatAdapter, then DSPy's JSONAdapter fallback


def test_malformed_chat_output_recovered_by_the_json_fallback():
    answer = json.dumps({"should_cluster": False, "clusters": [group("all", ["a"], [1, 2, 3, 4])]})
    lm = ScriptedLM(classification=["garbage", answer])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert out.clusters[0].context == "all"


def test_output_of_the_wrong_type_is_an_agent_error():
    bad = {"should_cluster": True, "clusters": [{"context": "x", "keywords": "not a list", "segments": ["one"]}]}
    lm = ScriptedLM(analysis=[bad, bad])
    with pytest.raises(AgentError) as caught:
        run(AnalysisAgent(), lm, new_node=NEW_NODE, candidates=CANDIDATES)
    assert caught.value.agent == "analysis"
    assert "not a list" in caught.value.raw


def test_lm_call_failure_is_an_agent_error_with_the_message_kept():
    from dspy import lm15

    def refuse(call):
        raise lm15.AuthError("invalid API key for scripted")

    with pytest.raises(AgentError) as caught:
        run(StructureAgent(), ScriptedLM(structure=refuse), content=LONG_TEXT, context="c", keywords=[])
    assert caught.value.agent == "structure"
    assert "invalid API key for scripted" in str(caught.value)
    assert caught.value.raw == ""


# --- structure --------------------------------------------------------------------------------------

LONG_TEXT = (
    "The Amazon river carries more water than any other river. It discharges about 209,000 cubic metres "
    "per second into the Atlantic. Its basin covers seven million square kilometres across nine countries. "
    "Scientists measured the flow at Obidos in 2019, confirming earlier estimates from the 1990s."
)


def summary_of(fraction):
    words = LONG_TEXT.split()
    return " ".join(words[: max(1, int(len(words) * fraction))])


def test_structure_within_target_makes_one_call():
    lm = ScriptedLM(structure=[{"summary": summary_of(0.4)}])
    out = run(StructureAgent(), lm, content=LONG_TEXT, context="The Amazon", keywords=["Amazon", "river"])
    assert out.retried is False
    assert 0.3 <= out.ratio <= 0.5
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(LONG_TEXT))
    (call,) = lm.calls
    assert call.inputs["feedback"] == ""
    assert json.loads(call.inputs["keywords"]) == ["Amazon", "river"]


@pytest.mark.parametrize(("first", "second", "kept", "direction"), [
    (1.0, 0.4, "second", "Shorten"),   # too long, retry fixes it
    (0.05, 0.45, "second", "Lengthen"),  # too short, retry fixes it
    (0.9, 1.0, "first", "Shorten"),    # retry is worse: the first is kept
])
def test_structure_retries_once_with_length_feedback(first, second, kept, direction):
    lm = ScriptedLM(structure=[{"summary": summary_of(first)}, {"summary": summary_of(second)}])
    out = run(StructureAgent(), lm, content=LONG_TEXT, context="The Amazon", keywords=["Amazon"])
    assert out.retried is True
    assert len(lm.calls) == 2
    feedback = lm.calls[1].inputs["feedback"]
    assert direction in feedback and "30%-50%" in feedback
    assert out.summary == summary_of(first if kept == "first" else second)
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(LONG_TEXT))


def test_structure_keeps_short_input_verbatim_without_a_call():
    lm = ScriptedLM(structure=[])
    out = run(StructureAgent(), lm, content="  Paris is in France.  ", context="Paris", keywords=[])
    assert out.summary == "Paris is in France." and out.ratio == 1.0 and out.retried is False
    assert lm.calls == []


def test_structure_rejects_empty_content():
    with pytest.raises(ValueError, match="content is empty"):
        run(StructureAgent(), ScriptedLM(structure=[]), content=" ", context="c", keywords=[])


def test_structure_empty_summary_twice_is_an_agent_error():
    lm = ScriptedLM(structure=[{"summary": ""}, {"summary": "  "}])
    with pytest.raises(AgentError, match="empty summary"):
        run(StructureAgent(), lm, content=LONG_TEXT, context="c", keywords=[])


def test_structure_chunks_long_content_and_joins_the_summaries():
    content = "\n\n".join(f"Section {i}. " + LONG_TEXT for i in range(30))
    config = AmbConfig(structure_window=1500)

    def compress(call):
        text = call.inputs["content"]
        return {"summary": text[: int(len(text) * 0.4)]}

    lm = ScriptedLM(structure=compress)
    out = run(StructureAgent(config), lm, content=content, context="Amazon", keywords=["Amazon"])
    assert len(lm.calls) > 2
    for call in lm.calls:
        assert prompt_tokens(call) <= int(1500 * config.chunk_ratio)
    # chunks are compressed in parallel (lm_threads): the calls come in any order, the summary in the text's
    chunks = sorted((c.inputs["content"] for c in lm.calls), key=content.index)
    assert "\n\n".join(chunks) == content  # split at paragraph boundaries only
    assert out.summary == "\n\n".join(c[: int(len(c) * 0.4)].strip() for c in chunks)
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(content))

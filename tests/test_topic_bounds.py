"""Topic nodes of a useful size (issue 20.1): segments bounded in tokens, whole dialogue turns, sessions kept
apart; on the heuristic policy with the real embedding model and on the LM path with a scripted LM."""

from __future__ import annotations

import os
from pathlib import Path

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.agents import ClassificationAgent
from amb_dspy.agents.chunking import bounded_runs, estimate_tokens, paragraph_breaks, segment
from amb_dspy.agents.fallback import classify_by_similarity
from amb_dspy.config import AmbConfig
from optimize.locomo import load_locomo

DATA = Path(os.environ.get("AMB_LOCOMO_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo")
needs_locomo = pytest.mark.skipif(not (DATA / "30.json").is_file(), reason=f"LoCoMo samples not found at {DATA}")

DIALOGUE = "\n\n".join(
    "\n".join(f"[{day} May, 2023] {'Ann' if i % 2 else 'Bob'}: turn {i} of session {day} about the garden and the "
              f"tomatoes we planted together last spring near the fence." for i in range(12))
    for day in (1, 2, 3)
)


def session_of(text: str) -> set[str]:
    return {line.split("]")[0] for line in text.split("\n") if line.strip()}


def test_a_long_dialogue_paragraph_is_cut_between_turns_never_inside_one():
    pieces = segment(DIALOGUE, max_tokens=120)
    turns = [line for line in DIALOGUE.split("\n") if line.strip()]
    assert all(estimate_tokens(p) <= 120 for p in pieces)
    assert all(line in turns for p in pieces for line in p.split("\n"))  # whole turns only
    assert sum(len(p.split("\n")) for p in pieces) == len(turns)


def test_paragraph_breaks_and_bounded_runs():
    text = "a b\nc d\n\ne f\n  \ng h"
    spans = [(0, 3), (4, 7), (9, 12), (16, 19)]
    assert paragraph_breaks(text, spans) == [False, False, True, True]
    sizes = [50, 50, 50, 50]
    # a run ends at a break once it holds the minimum, and never goes over the maximum
    assert bounded_runs([0, 1, 2, 3], sizes, [False, False, True, True], 80, 1000, 1) == [[0, 1], [2, 3]]
    assert bounded_runs([0, 1, 2, 3], sizes, [False, False, True, True], 40, 1000, 1) == [[0, 1], [2], [3]]
    assert bounded_runs([0, 1, 2, 3], sizes, [False, False, True, True], 200, 1000, 1) == [[0, 1, 2, 3]]
    assert bounded_runs([0, 1, 2, 3], sizes, [False] * 4, 10, 120, 1) == [[0, 1], [2, 3]]


def test_heuristic_topics_stay_within_the_target_and_inside_one_session(embedder):
    agent = ClassificationAgent(AmbConfig(topic_min_tokens=100, topic_max_tokens=250))
    out = classify_by_similarity(agent, embedder, context=DIALOGUE)
    sizes = [estimate_tokens(c.content) for c in out.clusters]
    assert len(out.clusters) >= 6 and max(sizes) <= 250
    assert all(len(session_of(c.content)) == 1 for c in out.clusters)  # no topic spans two sessions
    assert "\n".join(c.content.replace("\n\n", "\n") for c in out.clusters) == DIALOGUE.replace("\n\n", "\n")
    assert all(DIALOGUE[a:b] in c.content for c in out.clusters for a, b in c.spans)


@needs_locomo
def test_heuristic_topics_on_a_real_conversation(embedder):
    text, _ = load_locomo(f"locomo:{DATA / '30.json'}")[0].render()
    text = "\n\n".join(text.split("\n\n")[:4])  # four sessions
    agent = ClassificationAgent(AmbConfig(topic_min_tokens=150, topic_max_tokens=600))
    out = classify_by_similarity(agent, embedder, context=text)
    sizes = [estimate_tokens(c.content) for c in out.clusters]
    assert max(sizes) <= 600 and len(out.clusters) > 4
    assert all(len(session_of(c.content)) == 1 for c in out.clusters)


def test_lm_topics_are_cut_to_the_maximum_and_at_sessions():
    agent = ClassificationAgent(AmbConfig(topic_min_tokens=100, topic_max_tokens=300))
    segments = segment(DIALOGUE, 300)
    lm = ScriptedLM(classification=[{"should_cluster": True, "clusters": [
        {"context": "The garden", "keywords": ["garden"], "segments": list(range(1, len(segments) + 1))}]}])
    with dspy.context(lm=lm):
        out = agent(context=DIALOGUE)
    assert len(out.clusters) >= 3
    assert all(estimate_tokens(c.content) <= 300 for c in out.clusters)
    assert all(len(session_of(c.content)) == 1 for c in out.clusters)
    assert all(c.context == "The garden" for c in out.clusters)  # the LM's description stays with each part
    assert [c.cluster_id for c in out.clusters] == [f"c{i}" for i in range(1, len(out.clusters) + 1)]


def test_topics_are_bounded_in_the_memory_blocks_unit_whatever_the_lms_tokenizer(embedder):
    """An LM's tokenizer counts fewer tokens than the estimate; topics stay within the bound as the <memory>
    block counts them (the 300 bound once let nodes reach 410 estimated tokens under the local model's count)."""
    agent = ClassificationAgent(AmbConfig(topic_min_tokens=100, topic_max_tokens=250),
                                token_counter=lambda text: estimate_tokens(text) // 2)
    out = classify_by_similarity(agent, embedder, context=DIALOGUE)
    assert max(estimate_tokens(c.content) for c in out.clusters) <= 250  # a session is ~360: under the half count, one topic
    narrow = ClassificationAgent(AmbConfig(topic_max_tokens=250), token_counter=lambda text: 4 * estimate_tokens(text))
    assert all(4 * estimate_tokens(piece) <= 200 for piece in narrow.topic_segments(DIALOGUE, 200))  # the LM's window

"""The memory view of issue 20: ranking that spreads over shared terms to a bridge line, the summary view's
topic-and-lines form when a summary does not fit, dates shown beside their lines, a stamp shown once per
run, and the same block on every rendering (issue 24.4). Real embedding model, real store."""

from __future__ import annotations

import numpy as np
import pytest

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import Block, EvidenceView, Ranking, RankWeights, SummaryView, heading_of, is_heading
from amb_dspy.retrieval.keyword import once_per_term, tokenize
from amb_dspy.retrieval.spreading import SpreadingGraph
from amb_dspy.storage import InsightDoc, InteractionEntry, NodeContent

BRIDGE_LINES = [
    "The Zephyr racing bike is made by Corvex Cycles.",  # matches the question
    "The Nimbus bike rides well on gravel roads.",
    "A good bike needs a light frame and strong wheels.",
    "Racing bikes are ridden in the Tour de France.",
    "Gothenburg has a large harbour on the west coast.",
    "Tom Reed sells second-hand bikes at the market.",
    "Carbon frames keep a racing bike light.",
    "Ada Lindqvist started Corvex Cycles in Gothenburg.",  # the answer: shares only the bridge name
]
ANSWER = 7
QUESTION = "Who founded the company that makes the Zephyr racing bike?"


def store_of(embedder, groups: list[list[str]], summaries: list[str] | None = None) -> tuple[MemoryStore, str]:
    """One entry whose lines are ``groups`` (one node per group, its lines as spans), as ingest records it."""
    text = "\n".join(line for group in groups for line in group)
    store = MemoryStore(embedder, InsightDoc(task_goal="test"))
    drafts = [NodeContent(summary=(summaries or [" ".join(g) for g in groups])[i], context=group[0][:60],
                          keywords=tokenize(" ".join(group))[:4]) for i, group in enumerate(groups)]
    nodes = store.add_nodes(drafts)
    spans, cursor = {}, 0
    for node, group in zip(nodes, groups):
        spans[node.id] = [(text.index(line, cursor), text.index(line, cursor) + len(line)) for line in group]
        cursor = spans[node.id][-1][1]
    store.record_entry(InteractionEntry(text=text, metadata={"source": "user_context"}), [n.id for n in nodes], spans=spans)
    return store, text


def test_spreading_reaches_the_bridge_line_that_shares_no_word_with_the_question():
    graph = SpreadingGraph([tokenize(line) for line in BRIDGE_LINES], [[0]] * len(BRIDGE_LINES), [[]], [], max_df=0.25)
    spread = graph.spread(tokenize(QUESTION), {0: 1.0})
    assert spread[0] == 1.0
    assert spread[ANSWER] > 0 and spread[ANSWER] == max(spread[1:])  # reached through "Corvex Cycles"
    assert graph.spread(["unknown"], {}).tolist() == [0.0] * len(BRIDGE_LINES)


def test_the_view_ranks_the_bridge_line_higher_with_spreading(embedder):
    store, _ = store_of(embedder, [[line] for line in BRIDGE_LINES])
    answer = BRIDGE_LINES[ANSWER]
    alone = {"flat_share": 0.0, "spread_seeds": 1}  # the spreading's own effect, seeded by the best line only
    without = [line.text for line in Ranking(store, weights=RankWeights(spread_weight=0.0, **alone)).ranked_evidence(QUESTION)]
    spreading = [line.text for line in Ranking(store, weights=RankWeights(spread_weight=1.0, **alone)).ranked_evidence(QUESTION)]
    assert without.index(answer) > 1
    assert spreading.index(answer) < without.index(answer)
    assert spreading.index(answer) <= 1 and spreading[0] == BRIDGE_LINES[0]


DIALOGUE = [
    ["[1:56 pm on 8 May, 2023] Caroline: I went to a support group yesterday.",
     "[1:56 pm on 8 May, 2023] Melanie: That sounds powerful. How was it?",
     "[1:56 pm on 8 May, 2023] Caroline: Really moving, everyone shared their stories."],
    ["[2:10 pm on 20 May, 2023] Melanie: We went camping two years ago at the lake.",
     "[2:10 pm on 20 May, 2023] Caroline: I love the lake, the pottery class is next month."],
]


def test_evidence_lines_show_resolved_dates_and_each_stamp_once(embedder):
    store, _ = store_of(embedder, DIALOGUE)
    block = EvidenceView(Ranking(store)).block("When did Caroline go to the support group?", 1000)
    text, lines = block.text, block.lines
    assert len(lines) == 5
    assert "I went to a support group yesterday (7 May 2023)." in text
    assert "camping two years ago (2021) at the lake" in text and "next month (June 2023)" in text
    assert text.count("[8 May, 2023]") == 1 and text.count("[20 May, 2023]") == 1  # each date once, no time of day
    assert "\nCaroline: Really moving" in text
    assert estimate_tokens(text) <= 1300
    tight = EvidenceView(Ranking(store)).block("When did Caroline go to the support group?", 60)
    tight, shown = tight.text, tight.lines
    assert 0 < len(shown) < 5 and estimate_tokens(tight) <= 60


def test_the_summary_view_shows_topic_and_best_lines_when_a_summary_does_not_fit(embedder):
    long_summary = " ".join(["Caroline and Melanie talked about many things that week."] * 40)
    store, _ = store_of(embedder, DIALOGUE, summaries=[long_summary, long_summary])
    view = SummaryView(Ranking(store, weights=RankWeights(summary_lines=1)))
    block = view.block("When did Caroline go to the support group?", 130)
    text, whole, lines = block.text, block.nodes, block.lines
    assert whole == () and len(lines) >= 1 and estimate_tokens(text) <= 130
    assert "Topic: " in text and "Lines:" in text and "Summary:" not in text
    assert "support group yesterday (7 May 2023)" in text  # the node's best line for the question
    roomy = view.block("When did Caroline go to the support group?", 5000)
    roomy, whole = roomy.text, roomy.nodes
    assert len(whole) == 2 and "Summary: " in roomy


def test_the_same_bank_renders_the_same_blocks_every_time(embedder, tmp_path):
    store, _ = store_of(embedder, [[line] for line in BRIDGE_LINES] + DIALOGUE)
    store.export(tmp_path / "bank.json")
    questions = [QUESTION, "What is next month?", "Where is the harbour?"]

    def render(loaded: MemoryStore) -> list:
        ranking = Ranking(loaded)
        evidence, summary = EvidenceView(ranking), SummaryView(ranking)
        return [(evidence.block(q, budget), summary.block(q, budget).text) for q in questions
                for budget in (60, 200, 1000)]

    first = render(MemoryStore.load(tmp_path / "bank.json", embedder))
    second = render(MemoryStore.load(tmp_path / "bank.json", embedder))
    assert first == second and any(block[0].lines for block in first)
    assert render(store) == first


def test_lines_are_chosen_the_same_whatever_ids_the_nodes_drew(embedder):
    """Node ids are random; the lines a view chooses must not depend on them (header costs, ties)."""
    shown = []
    for _ in range(2):
        store, _ = store_of(embedder, [[line] for line in BRIDGE_LINES])
        view = EvidenceView(Ranking(store))
        shown.append([[(line.start, line.end) for line in view.block(QUESTION, budget).lines]
                      for budget in (40, 80, 160)])
    assert shown[0] == shown[1] and np.all([len(s) for s in shown[0]])


@pytest.mark.parametrize("budget", [30, 1000])
def test_an_empty_store_shows_nothing(embedder, budget):
    ranking = Ranking(MemoryStore(embedder, InsightDoc(task_goal="x")))
    assert EvidenceView(ranking).block("anything", budget) == Block("")
    assert SummaryView(ranking).block("anything", budget) == Block("")



def test_a_header_is_never_dearer_than_its_costed_form():
    """Costing a header at its id's dearest form is what keeps the lines shown independent of the ids drawn."""
    import uuid

    from amb_dspy.memory.view.showing import _header, _header_cost

    ids = [uuid.uuid4().hex[:length] for length in (8, 9, 32) for _ in range(3000)] + ["0a0a0a0a", "12345678"]
    assert all(estimate_tokens(_header(i, 10)) + 2 <= _header_cost(i, estimate_tokens) for i in ids)
    assert _header_cost("abcdef12", estimate_tokens) == _header_cost("01234567", estimate_tokens)


def test_a_long_line_is_shown_sentence_by_sentence_never_cut_at_an_initial(embedder):
    paragraph = ("Tunnels & Trolls is a fantasy role-playing game designed by Ken St. Andre and first published in 1975 "
                 "by Flying Buffalo. The second modern role-playing game published, it was written to be a more "
                 "accessible alternative to Dungeons & Dragons. Its companion books were edited by K. A. Applegate.")
    store, _ = store_of(embedder, [[paragraph]])
    lines = Ranking(store, line_tokens=20).ranked_evidence("Who designed Tunnels & Trolls?")
    assert sorted(line.text for line in lines) == sorted([
        "Tunnels & Trolls is a fantasy role-playing game designed by Ken St. Andre and first published in 1975 by Flying Buffalo.",
        "The second modern role-playing game published, it was written to be a more accessible alternative to Dungeons & Dragons.",
        "Its companion books were edited by K. A. Applegate.",
    ])
    assert lines[0].text.startswith("Tunnels & Trolls is")


def test_a_heading_is_no_line_of_its_own_and_its_words_find_the_lines_under_it(embedder):
    articles = ["Corvex Cycles", "Corvex Cycles was started in Gothenburg.", "It makes the Zephyr racing bike.", "",
                "Nimbus", "The Nimbus bike rides well on gravel roads.", "Its frame is steel."]
    text = "\n".join(articles)
    assert is_heading("Corvex Cycles", "Corvex Cycles was started in Gothenburg.")
    assert is_heading("Ed Wood (film)", "Ed Wood is a 1994 American biographical film.")  # its parenthesis ends no sentence
    assert not is_heading("It makes the Zephyr racing bike.", "")
    assert not is_heading("[8 May, 2023] Caroline: Hey Mel", "[8 May, 2023] Melanie: Hi")  # a turn, not a title
    assert heading_of(text, text.index("It makes")) == "Corvex Cycles" and heading_of(text, text.index("Its frame")) == "Nimbus"
    assert heading_of(text, 0) == ""
    assert not is_heading("Ingredients", "flour") and not is_heading("- one", "- two")  # a list is no heading
    store = MemoryStore(embedder, InsightDoc(task_goal="test"))
    nodes = store.add_nodes([NodeContent(summary=text, context="bikes", keywords=["bike"])])
    store.record_entry(InteractionEntry(text=text, metadata={"source": "user_context"}), [nodes[0].id],
                       spans={nodes[0].id: [(0, len(text))]})
    lines = Ranking(store, weights=RankWeights(flat_share=1.0)).ranked_evidence("What does Corvex Cycles make?")
    assert {line.text for line in lines} == {line for line in articles if line and line not in ("Corvex Cycles", "Nimbus")}
    # "It makes ..." says "Corvex Cycles" only through its heading
    assert {line.text for line in lines[:2]} == {"Corvex Cycles was started in Gothenburg.", "It makes the Zephyr racing bike."}


def test_the_lines_of_a_list_are_all_shown(embedder):
    text = "Shopping list\nflour\nsugar\neggs\n\nThe cake needs an hour in the oven.\nFirst step\nmix it"
    store = MemoryStore(embedder, InsightDoc(task_goal="test"))
    nodes = store.add_nodes([NodeContent(summary=text, context="cake", keywords=["cake"])])
    store.record_entry(InteractionEntry(text=text, metadata={"source": "user_context"}), [nodes[0].id],
                       spans={nodes[0].id: [(0, len(text))]})
    shown = {line.text for line in Ranking(store).ranked_evidence("What goes into the cake?")}
    assert shown == {"Shopping list", "flour", "sugar", "eggs", "The cake needs an hour in the oven.", "First step",
                     "mix it"}  # no heading here: no short line opens a paragraph over a line of text


def test_a_question_line_counts_its_ask_weight_in_the_lines_own_order_too(embedder):
    # The flat share of the block (and the spreading's seeds) follow the lines' own scores: the line that asks what
    # the question asks matches it best, and the reply under it holds the answer.
    store, _ = store_of(embedder, [["[8 May, 2023] Melanie: What activities do your kids enjoy?",
                                    "[8 May, 2023] Caroline: The kids enjoy activities like camping by the lake and painting.",
                                    "[8 May, 2023] Melanie: The weather was lovely today.",
                                    "[8 May, 2023] Caroline: I started a new job at the library.",
                                    "[8 May, 2023] Melanie: My car broke down on Monday.",
                                    "[8 May, 2023] Caroline: The library has a big reading room."]])

    def first_two(**weights):
        ranked = Ranking(store, weights=RankWeights(flat_share=1.0, **weights)).ranked_evidence("What activities do the kids enjoy?")
        return [line.text.split(": ")[1][:12] for line in ranked[:2]]

    assert first_two(ask_weight=1.0) == ["What activit", "The kids enj"]  # by its own score, the asking line leads
    assert first_two() == ["The kids enj", "What activit"]


def test_a_word_the_question_repeats_counts_once(embedder):
    # "magazine" and "first" are parts of the two titles the question names, not what it asks more of: counted
    # twice (as BM25 counts a repeated query term), a line that only repeats them would lead.
    lines = ["Arthur's Magazine was an American literary periodical published in Philadelphia.",
             "The first issue of the magazine sold out, and the magazine printed a first run of new copies.",
             "The weather in Boston was mild that spring.",
             "Bauer Media Group publishes many titles for women.",
             "A literary prize was awarded in Philadelphia.",
             "The printing press changed how news spread."]
    store, _ = store_of(embedder, [[line] for line in lines])
    question = "Which magazine was started first, Arthur's Magazine or First for Women?"
    assert once_per_term(question) == ["magazine", "started", "first", "arthur", "s", "women"]
    ranked = [line.text for line in Ranking(store, weights=RankWeights(flat_share=1.0)).ranked_evidence(question)]
    assert ranked.index(lines[0]) < ranked.index(lines[1])

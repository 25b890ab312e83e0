"""The evidence view's line scores (issue 20, second pass): the per-revision line table's arithmetic, a long
turn's later sentences found by its speaker, the flat ranking's share of the block. Real embedding model."""

from __future__ import annotations

import numpy as np
from test_recall_view import store_of

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import Ranking, RankWeights, day_stamp, label_of, speaker_of
from amb_dspy.retrieval.line_ranking import LineTable, best_first, interleave
from amb_dspy.storage import InsightDoc, InteractionEntry, NodeContent


def test_the_line_table_scores_a_line_by_its_nodes_its_neighbours_and_whether_it_asks():
    # entry "a": lines 0, 2, 1 in text order; entry "b": line 3 alone; line 2 is held by nodes 0 and 1
    table = LineTable.build([("a", 0), ("a", 50), ("a", 10), ("b", 0)], [[0], [1], [0, 1], [2]],
                            ["One.", "Two?", "Three.", "Four."])
    assert table.before.tolist() == [-1, 2, 0, -1] and table.after.tolist() == [2, -1, 1, -1]
    own, nodes, spread = np.array([0.5, 0.8, 0.1, 0.2]), np.array([0.1, 0.6, 0.3]), np.array([0.0, 0.0, 1.0, 0.0])
    scores = table.scores(own, nodes, spread, node_weight=1.0, context_weight=0.5, spread_weight=0.2, ask_weight=0.5)
    expected = [0.5 + 0.1 + 0.5 * 0.1, 0.5 * 0.8 + 0.6 + 0.5 * 0.1, 0.1 + 0.6 + 0.5 * 0.8 + 0.2, 0.2 + 0.3]
    assert np.allclose(scores, expected)
    assert best_first(np.array([0.2, 0.5, 0.2])).tolist() == [1, 0, 2]  # ties by position


def test_interleave_gives_the_first_ranking_its_share_and_each_item_once():
    assert interleave([1, 2, 3, 4], [4, 3, 9, 8], 0.5) == [1, 4, 2, 3, 9, 8]
    assert interleave([1, 2, 3], [5, 6, 7], 1 / 3) == [1, 5, 6, 2, 7, 3]
    assert interleave([1, 2], [3], 0.0) == [3, 1, 2]


FILLER = ("It was a long and busy week with work, errands, chores and a lot of driving around town for meetings "
          "that never seemed to end, and the weather was grey and cold the whole time.")


def test_a_long_turns_later_sentence_is_found_by_its_speaker(embedder):
    turns = [f"[3:00 pm on 9 May, 2023] Caroline: {FILLER} {FILLER} We went to the lake with the kids.",
             f"[3:05 pm on 9 May, 2023] Melanie: {FILLER} {FILLER} We went to the lake with the kids."]
    others = [f"[3:10 pm on 9 May, 2023] {name}: I fixed the {thing} this morning." for name, thing in
              (("Jon", "car"), ("Gina", "roof"), ("Dave", "fence"), ("Ann", "sink"), ("Tom", "door"), ("Sue", "bike"))]
    store, text = store_of(embedder, [[turn] for turn in turns + others])
    assert label_of(turns[1]) == "[3:05 pm on 9 May, 2023] Melanie:" and label_of("The Seine flows.") == ""
    assert day_stamp(turns[1]) == "9 May, 2023" and day_stamp("[9 May, 2023] x") == "9 May, 2023"
    ranked = Ranking(store, weights=RankWeights(spread_weight=0.0, context_weight=0.0, node_weight=0.0)).ranked_evidence(
        "Where did Melanie go with the kids?")
    lake = [line for line in ranked if line.text == "We went to the lake with the kids."]
    assert len(lake) == 2 and lake[0].start > text.index("Melanie")  # the same words, said by the one asked about


def test_a_flat_share_puts_the_best_own_scored_lines_first(embedder):
    from test_recall_view import BRIDGE_LINES, QUESTION

    store, _ = store_of(embedder, [[line] for line in BRIDGE_LINES])
    graph_ranked = Ranking(store, weights=RankWeights(spread_weight=1.0, node_weight=0.0, context_weight=0.0, flat_share=0.0))
    plain = Ranking(store, weights=RankWeights(spread_weight=0.0, node_weight=0.0, context_weight=0.0, flat_share=0.0))
    shared = Ranking(store, weights=RankWeights(spread_weight=1.0, node_weight=0.0, context_weight=0.0, flat_share=0.5))
    first = [line.text for line in plain.ranked_evidence(QUESTION)]
    second = [line.text for line in graph_ranked.ranked_evidence(QUESTION)]
    assert first[:4] != second[:4]
    position = {text: i for i, text in enumerate(BRIDGE_LINES)}
    expected = interleave([position[t] for t in first], [position[t] for t in second], 0.5)
    assert [line.text for line in shared.ranked_evidence(QUESTION)] == [BRIDGE_LINES[i] for i in expected]


def test_the_table_knows_who_says_each_line_and_which_lines_others_say():
    assert speaker_of("[8 May, 2023] Caroline: Hi Mel!") == "caroline" and speaker_of("The Seine flows.") == ""
    assert speaker_of("Mary Ann Lee: hello") == "mary ann lee"
    table = LineTable.build([("a", 0), ("a", 10), ("a", 20), ("a", 30)], [[0]] * 4, ["One.", "Two.", "Three.", "Four."],
                            ["caroline", "melanie", "", "mary ann lee"])
    assert table.speaker_names == ("caroline", "melanie", "mary ann lee")  # numbered as they first appear
    assert table.said_by_others({"what", "did", "caroline", "research"}).tolist() == [False, True, False, True]
    assert table.said_by_others({"did", "mary", "ann", "lee", "go"}).tolist() == [True, True, False, False]
    assert not table.said_by_others({"did", "caroline", "and", "melanie", "meet"}).any()  # two named: no prior
    assert not table.said_by_others({"who", "painted", "it"}).any()


def test_a_question_about_one_speaker_ranks_that_speakers_line_first(embedder):
    turns = ["[1:00 pm on 3 July, 2023] Melanie: Caroline, we go camping in the mountains.",
             "[1:02 pm on 3 July, 2023] Caroline: I went camping in the forest with my friends."]
    others = [f"[3:10 pm on 9 May, 2023] {name}: I fixed the {thing} this morning." for name, thing in
              (("Jon", "car"), ("Gina", "roof"), ("Dave", "fence"), ("Ann", "sink"), ("Tom", "door"), ("Sue", "bike"))]
    store, _ = store_of(embedder, [[turn] for turn in turns + others])
    question = "Where did Caroline go camping?"
    alone = {"spread_weight": 0.0, "context_weight": 0.0, "node_weight": 0.0, "flat_share": 0.0}
    without = Ranking(store, weights=RankWeights(other_weight=1.0, **alone)).ranked_evidence(question)
    with_prior = Ranking(store, weights=RankWeights(**alone)).ranked_evidence(question)
    # Melanie's line names Caroline and matches more words; what Caroline did is in Caroline's own line
    assert without[0].text == turns[0] and with_prior[0].text == turns[1]
    assert with_prior[1].score == round(0.7 * without[0].score, 6)


def test_a_line_that_names_another_paragraphs_heading_bridges_to_its_lines():
    texts = ["The Zephyr is made by Corvex Cycles.", "Its frame is carbon.", "Ada Lindqvist set it up in 1990.",
             "Gravel roads are rough."]
    headings = ["Zephyr (bicycle)", "Zephyr (bicycle)", "Corvex Cycles", ""]
    table = LineTable.build([("a", i) for i in range(4)], [[0]] * 4, texts, headings=headings)
    assert table.titles == ("Zephyr (bicycle)", "Corvex Cycles")  # numbered as they first appear
    assert table.mentions == ((1,), (), (), ())  # line 0 names "Corvex Cycles"; its own heading does not count
    assert table.bridged({0: 0.8, 3: 0.5}).tolist() == [0.0, 0.0, 0.8, 0.0]
    assert table.bridged({1: 0.9}).tolist() == [0.0] * 4
    # a heading is named without its parenthesis
    named = LineTable.build([("a", 0), ("a", 1)], [[0], [0]], ["We rode the Zephyr.", "It was fast."],
                            headings=["", "Zephyr (bicycle)"])
    assert named.mentions == ((0,), ())


def test_the_view_reaches_the_article_a_matching_line_points_to(embedder):
    articles = ["Zephyr (bicycle)", "The Zephyr racing bike is made by Corvex Cycles.", "It weighs seven kilograms.", "",
                "Corvex Cycles", "Corvex Cycles is a workshop in Gothenburg.", "Its first owner was Ada Lindqvist.", "",
                "Nimbus (bicycle)", "The Nimbus bike is a racing bike for gravel.", "Racing bikes are light.", "",
                "Tour de France", "The Tour de France is a bike race.", "Racing teams start in July."]
    text = "\n".join(articles)
    store = MemoryStore(embedder, InsightDoc(task_goal="test"))
    nodes = store.add_nodes([NodeContent(summary=text, context="bikes", keywords=["bike"])])
    store.record_entry(InteractionEntry(text=text, metadata={"source": "user_context"}), [nodes[0].id],
                       spans={nodes[0].id: [(0, len(text))]})
    question = "Who started the company that makes the Zephyr racing bike?"
    alone = {"spread_weight": 0.0, "context_weight": 0.0, "node_weight": 0.0, "flat_share": 0.0}
    without = [line.text for line in Ranking(store, weights=RankWeights(bridge_weight=0.0, **alone)).ranked_evidence(question)]
    bridged = [line.text for line in Ranking(store, weights=RankWeights(**alone)).ranked_evidence(question)]
    answer = "Its first owner was Ada Lindqvist."
    assert without.index(answer) > 2  # it shares no word with the question
    # the pointing line, and the article it points to, first
    assert set(bridged[:3]) == {"The Zephyr racing bike is made by Corvex Cycles.", answer,
                                "Corvex Cycles is a workshop in Gothenburg."}

"""Issue 23, second pass: a fact merges into an item only when it says the same thing, and a merge loses
nothing either statement says. The words' checks are pure; the store's decision runs with the real
embedder on a real SQLite store."""

from __future__ import annotations

import pytest

from amb_dspy.longterm.merge import heuristic_merge
from amb_dspy.longterm.scoring import dice, hybrid_similarity
from amb_dspy.longterm.sqlite import SQLiteStore
from amb_dspy.longterm.statements import (
    adds_full_name,
    adds_number,
    contains,
    different_facts,
    names,
    names_differ,
    negated,
)
from amb_dspy.retrieval.keyword import tokenize

HAWKINS = "The Buffaloes were led by head coach Dan Hawkins and played their home games at Folsom Field."
EMBREE = "The Buffaloes were led by head coach Jon Embree and played their home games at Folsom Field."
OPEN = "The city museum is open to the public on Mondays and holidays."
CLOSED = "The city museum is not open to the public on Mondays and holidays."
DEBUT = "The band released its debut album on the Sub Pop label."
DEBUT_DATED = "The band released its debut album on the Sub Pop label in 1994."
DERRICKSON_DATED = "Scott Derrickson (born July 16, 1966) is an American film director, screenwriter and producer."
DERRICKSON = "Scott Derrickson is an American film director, screenwriter and producer."
DERRICKSON_RETOLD = "Scott Derrickson, an American director of films, also writes screenplays and produces."


def test_names_are_runs_of_capitalised_words_and_a_lone_first_word_is_not_one():
    assert names(HAWKINS) == [("buffaloes",), ("dan", "hawkins"), ("folsom", "field")]
    assert names("He directed it. Director of the Conservatoire de Paris, he taught there.") == [
        ("director", "conservatoire", "paris")]
    assert names("Wolff and his brother released it.") == []


@pytest.mark.parametrize("new, old, reason", [
    (EMBREE, HAWKINS, "a full name the item lacks"),
    ("It is based on the opera Tosca by Giacomo Puccini.", "It is based on the opera La Bohème by Giacomo Puccini.",
     "names the other lacks on both sides"),
    ("He is the cousin of Robert Barton and a writer.", "He is a writer.", "a full name the item lacks"),
    ("He is a TV writer.", "He is a television writer.", ""),  # one capitalised word may be a common word
    (CLOSED, OPEN, "a negation on one side only"),
    (OPEN, CLOSED, "a negation on one side only"),
    (DEBUT_DATED, DEBUT, "a number the item lacks"),
    ("It was the 45th season of the team.", "It was the 44th season of the team.", "a number the item lacks"),
    # the same thing: a retelling that drops a date, a name told with one word changed, a name dropped
    (DERRICKSON, DERRICKSON_DATED, ""),
    (DEBUT, DEBUT_DATED, ""),
    ("He plays for Leicester Town in the Premier League.", "He plays for Leicester City in the Premier League.", ""),
    ("The Buffaloes played their home games at Folsom Field.", HAWKINS, ""),
])
def test_different_facts(new, old, reason):
    assert different_facts(new, old) == reason


def test_the_single_checks():
    assert adds_number("in 1994 and 1995", "in 1994") and not adds_number("in 1994", "in 1994 and 1995")
    assert negated("He didn't win.") and negated("No one came.") and not negated("Nobel laureate Notting Hill")
    assert names_differ(EMBREE, HAWKINS) and not names_differ(DERRICKSON, DERRICKSON_DATED)
    assert adds_full_name(EMBREE, HAWKINS) and not adds_full_name(DERRICKSON, DERRICKSON_DATED)


def test_contains_is_word_for_word_numbers_and_negation_included():
    assert contains(DERRICKSON_DATED, DERRICKSON)
    assert not contains(DERRICKSON, DERRICKSON_DATED)                 # the date would be lost
    assert not contains(DERRICKSON_RETOLD, DERRICKSON)                # "screenwriter", "producer" are not in it
    assert not contains(OPEN, CLOSED) and contains(CLOSED + " It is free.", "It is free.")


def test_a_merge_loses_neither_statement():
    # neither contains the other: both kept, in one statement, the longer first
    merged = heuristic_merge(DERRICKSON, DERRICKSON_RETOLD)
    assert merged == f"{DERRICKSON_RETOLD} {DERRICKSON}"
    # the longer contains the shorter: nothing to add, whichever came first
    assert heuristic_merge(DERRICKSON, DERRICKSON_DATED) == DERRICKSON_DATED
    assert heuristic_merge(DERRICKSON_DATED, DERRICKSON) == DERRICKSON_DATED
    # a shorter sentence's content survives even when most of its words are in the longer one
    short = "Scott Derrickson lives in Los Angeles."
    assert heuristic_merge(short, "Scott Derrickson, an American director, lives and works in Los Angeles, California.") \
        .endswith("California.")
    assert "Derrickson lives in Los Angeles" not in heuristic_merge(
        short, "Scott Derrickson, an American director, lives in Los Angeles.")  # contained word for word: once


@pytest.fixture
def store(tmp_path, embedder):
    with SQLiteStore(tmp_path / "longterm.sqlite3", embedder) as opened:
        yield opened


def _similarity(store, a: str, b: str) -> float:
    first, second = store.embedder.embed([a, b])
    return hybrid_similarity(float(first @ second), dice(tokenize(a), tokenize(b)), store.alpha)


@pytest.mark.parametrize("stored, new", [(HAWKINS, EMBREE), (OPEN, CLOSED), (DEBUT, DEBUT_DATED)])
def test_a_near_duplicate_by_similarity_that_is_a_different_fact_is_added(store, stored, new):
    assert _similarity(store, stored, new) >= store.dedup_threshold  # similar enough to merge by words and meaning
    first = store.write("ns", stored, "fact").item
    outcome = store.write("ns", new, "fact")
    assert outcome.action == "added" and {i.content for i in store.list("ns")} == {stored, new}
    assert store.closest("ns", new, "fact")[0].id == outcome.item.id and store.get("ns", first.id).content == stored


def test_a_retelling_merges_and_the_item_keeps_what_both_say(store):
    first = store.write("ns", DERRICKSON_DATED, "fact", task_id="t1").item
    dropped_date = store.write("ns", DERRICKSON, "fact", task_id="t2")
    assert dropped_date.action == "merged" and dropped_date.item.id == first.id
    assert dropped_date.item.content == DERRICKSON_DATED  # the date is kept
    assert store.get("ns", first.id).metadata.task_ids == ("t1", "t2") and len(store.list("ns")) == 1

    plain = store.write("other", DERRICKSON, "fact").item
    retold = store.write("other", DERRICKSON_RETOLD, "fact")
    assert retold.action == "merged" and retold.item.id == plain.id
    assert retold.item.content == f"{DERRICKSON_RETOLD} {DERRICKSON}"
    # a statement bringing a date the item lacks tells something more: its own item, nothing overwritten
    dated = store.write("other", DERRICKSON_DATED, "fact")
    assert dated.action == "added" and store.get("other", plain.id).content == retold.item.content

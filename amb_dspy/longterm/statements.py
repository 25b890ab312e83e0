"""Whether two statements say the same thing: the checks behind a merge, on words alone, no storage.

Two sentences about one entity can share most of their words and still be different facts: they differ
in a number or a date ("the 44th season" / "the 45th season"), in a name ("led by head coach Dan
Hawkins" / "led by head coach Jon Embree"), or one denies what the other says. A near-duplicate by
similarity (:func:`amb_dspy.longterm.scoring.dice` and the embeddings' cosine) merges into an item only
when :func:`different_facts` finds none of these:

* **a number the item lacks**: the new statement brings a number (a year, a count, a rank) that the item
  does not hold. A retelling may drop a date ("Scott Derrickson (born July 16, 1966) is a director." ->
  "Scott Derrickson is a director."), but a statement with a date the item lacks tells something else;
* **a negation on one side only** ("is not", "never", "no", "n't"); the word tokenizer drops these as stop
  words, so Dice and the cosine barely see them;
* **a full name the item lacks**: the new statement names someone or something in two words or more
  (a run of capitalised words: "Robert Barton") of which less than half the words occur in the item.
  Half, so that a name retold with one word changed ("Kansas City" / "Kansas Town" of a synonym table)
  is still the same name; two words, because one capitalised word may be a common word ("TV");
* **names on both sides that the other lacks** (one word each will do): each statement names something
  the other does not ("the opera Tosca" / "La bohème"). A retelling may drop a name the item keeps.

:func:`contains` is the other half of "loses nothing": whether a statement already says everything a
sentence says, so that a merge may leave the sentence out.
"""

from __future__ import annotations

import re

from amb_dspy.retrieval.keyword import tokenize
from amb_dspy.text import split_sentences
from amb_dspy.text import words as split_words

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION = re.compile(r"\b(not|no|never|none|nor|neither|nobody|nothing|nowhere|without|cannot)\b|n['’]t\b",
                       re.IGNORECASE)
# Lower-case words that may link the capitalised words of one name ("Conservatoire de Paris", "Duke of York").
_NAME_LINKS = frozenset({"of", "the", "de", "la", "le", "von", "van", "der", "du", "del", "da", "di"})
# A name counts as present in another statement when at least this share of its words occur there.
NAME_PRESENT_SHARE = 0.5


def sentences(text: str) -> list[str]:
    """Split at sentence ends followed by a capital letter or a digit (keeps "U.S. law" whole often enough)."""
    return [s.strip() for s in split_sentences(text.strip(), rule="capital") if s.strip()]


def numbers(text: str) -> set[str]:
    return set(_NUMBER.findall(text))


def numbers_disagree(a: str, b: str) -> bool:
    """Whether each statement has a number the other lacks ("the 44th season" / "the 45th season")."""
    numbers_a, numbers_b = numbers(a), numbers(b)
    return bool(numbers_a - numbers_b) and bool(numbers_b - numbers_a)


def adds_number(new: str, old: str) -> bool:
    """Whether ``new`` holds a number that ``old`` lacks (a date, a count, a rank it does not tell)."""
    return bool(numbers(new) - numbers(old))


def negated(text: str) -> bool:
    return bool(_NEGATION.search(text))


def words(text: str) -> set[str]:
    """Every word of ``text``, lower-cased, stop words included."""
    return {w.lower() for w in split_words(text, "contraction")}


def _name_follows(tokens: list[str], at: int) -> bool:
    """Whether a capitalised word comes at ``at``, past any linking words ("of the Conservatoire")."""
    while at < len(tokens) and tokens[at].lower() in _NAME_LINKS:
        at += 1
    return at < len(tokens) and tokens[at][0].isupper()


def names(text: str) -> list[tuple[str, ...]]:
    """Runs of capitalised words (lower-cased, linking words dropped), per sentence; a lone capitalised
    first word of a sentence ("The", "He", "Wolff's") is not taken for a name."""
    found = []
    for sentence in sentences(text):
        tokens = split_words(sentence, "contraction")
        run: list[str] = []
        start = 0
        for i, token in enumerate([*tokens, ""]):
            linking = bool(run) and token.lower() in _NAME_LINKS and _name_follows(tokens, i + 1)
            if token and (token[0].isupper() or linking):
                start = i if not run else start
                run.append(token)
                continue
            if run and not (start == 0 and len(run) == 1):
                found.append(tuple(w.lower() for w in run if w.lower() not in _NAME_LINKS))
            run = []
    return [name for name in found if name]


def names_missing(a: str, b: str) -> list[tuple[str, ...]]:
    """The names of ``a`` that ``b`` does not hold (less than :data:`NAME_PRESENT_SHARE` of their words)."""
    in_b = words(b)
    return [name for name in names(a) if sum(w in in_b for w in name) < NAME_PRESENT_SHARE * len(name)]


def names_differ(a: str, b: str) -> bool:
    """Whether each statement names something the other does not."""
    return bool(names_missing(a, b)) and bool(names_missing(b, a))


def adds_full_name(new: str, old: str) -> bool:
    """Whether ``new`` names someone or something in two words or more ("Robert Barton") that ``old`` lacks.
    One word alone ("TV", "Filmmaker" of a retelling) may be a common word written with a capital."""
    return any(len(name) >= 2 for name in names_missing(new, old))


def different_facts(new: str, old: str) -> str:
    """Why ``new`` is a different fact from ``old`` however similar their words ("" when no check objects)."""
    if adds_number(new, old):
        return "a number the item lacks"
    if negated(new) != negated(old):
        return "a negation on one side only"
    if adds_full_name(new, old):
        return "a full name the item lacks"
    if names_differ(new, old):
        return "names the other lacks on both sides"
    return ""


def contains(statement: str, sentence: str) -> bool:
    """Whether ``statement`` already says all that ``sentence`` says: each of its words, each of its
    numbers, and its negation if it has one. Word for word: a sentence told in other words is kept."""
    said = set(tokenize(statement))
    return (all(word in said for word in tokenize(sentence)) and not numbers(sentence) - numbers(statement)
            and (negated(statement) or not negated(sentence)))

"""Deterministic paraphrases for bench/longterm.py: templates and a synonym table, no model.

Rewrites used (each a plain function of the text, so a run is repeatable to the byte):

* ``synonyms``: whole words swapped by a table of 60 common words of Wikipedia prose and questions
  (film -> movie, directed -> helmed, located -> situated, born -> native ...), case kept;
* ``drop_parentheses``: "(born July 16, 1966)", "(Turkish: ...)" removed, as a retelling would;
* ``move_lead``: a leading "In 1990," / "During the war," moved to the end of the sentence;
* ``swap_pair``: "A and B" between capitalised names swapped ("Ed Wood and Scott Derrickson");
* ``ask_differently``: the question word changed ("Who" -> "Which person", "Were" -> "Tell me whether");
* frames around the whole statement or question ("According to what we found, ...", "Remind me: ...").

A fact gets three paraphrases, from light (a frame and synonyms) to heavy (parentheses dropped, the
lead phrase moved, synonyms, another frame). A question gets two paraphrases and one follow-up that
names only the question's entities ("Following up on Scott Derrickson and Ed Wood: what did we
conclude?").
"""

from __future__ import annotations

import re

SYNONYMS = {
    "film": "movie", "films": "movies", "directed": "helmed", "director": "filmmaker", "located": "situated",
    "born": "native", "known": "recognised", "famous": "renowned", "founded": "established", "began": "started",
    "largest": "biggest", "album": "record", "song": "track", "released": "issued", "written": "penned",
    "wrote": "authored", "company": "firm", "built": "constructed", "served": "worked", "member": "part",
    "city": "town", "population": "number of residents", "played": "competed", "team": "squad",
    "won": "earned", "award": "prize", "based": "headquartered", "television": "TV", "series": "show",
    "published": "printed", "former": "previous", "currently": "presently",
    "produced": "made", "starring": "featuring", "named": "called", "held": "occupied", "first": "initial",
    "large": "big", "small": "little", "area": "region", "country": "nation", "singer": "vocalist",
    "actress": "performer", "actor": "performer", "author": "writer", "novel": "book", "group": "band",
    "including": "among them", "opened": "inaugurated", "received": "got", "became": "turned into",
    "located in": "found in", "which": "that", "also": "additionally", "people": "persons",
    "same": "identical", "nationality": "citizenship", "older": "elder",
}
_WORD = re.compile(r"\b(" + "|".join(sorted(map(re.escape, SYNONYMS), key=len, reverse=True)) + r")\b", re.IGNORECASE)
_PARENS = re.compile(r"\s*\([^()]*\)")
_LEAD = re.compile(r"^(?P<lead>(?:In|On|During|After|Before|Since|By|From|At)\b[^,]{2,60}),\s+(?P<rest>.+?)([.!?])?$")
_PAIR = re.compile(r"\b([A-Z][\w'.-]+(?:\s[A-Z][\w'.-]+){1,3})\s+and\s+([A-Z][\w'.-]+(?:\s[A-Z][\w'.-]+){1,3})")
_ENTITY = re.compile(r"\"[^\"]+\"|(?:\b[A-Z][\w'.-]*(?:\s+(?:of|the|and|de)?\s*[A-Z][\w'.-]*)*)")

_FUNCTION_WORDS = {"The", "A", "An", "It", "This", "These", "He", "She", "They", "In", "On", "During", "After"}
_ASKING = (("How many", "What number of"), ("Who", "Which person"), ("What", "Which"), ("Where", "In which place"),
           ("When", "At what time"), ("Which", "What"), ("Are", "Tell me whether"), ("Were", "Tell me whether"),
           ("Is", "Tell me whether"), ("Was", "Tell me whether"), ("Did", "Tell me whether"))
FACT_FRAMES = ("It is known that {}", "According to what we found, {}", "{} That is what the sources say.")
QUESTION_FRAMES = ("Remind me: {}", "Do you recall this: {}")


def synonyms(text: str) -> str:
    def swap(match: re.Match) -> str:
        word = match.group(0)
        other = SYNONYMS[word.lower()]
        return other[0].upper() + other[1:] if word[0].isupper() else other

    return _WORD.sub(swap, text)


def drop_parentheses(text: str) -> str:
    return _PARENS.sub("", text).replace(" ,", ",").strip()


def move_lead(text: str) -> str:
    match = _LEAD.match(text.strip())
    if not match:
        return text
    rest = match.group("rest")
    lead = match.group("lead")
    return f"{rest[0].upper()}{rest[1:]}, {lead[0].lower()}{lead[1:]}{match.group(3) or '.'}"


def swap_pair(text: str) -> str:
    """Swap the first "Two Words and Other Names" pair after the first word."""
    head, _, body = text.partition(" ")
    return f"{head} {_PAIR.sub(lambda m: f'{m.group(2)} and {m.group(1)}', body, count=1)}"


def ask_differently(question: str) -> str:
    for old, new in _ASKING:
        if question.startswith(old + " "):
            return new + question[len(old):]
    return question


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    return text[0].lower() + text[1:] if first in _FUNCTION_WORDS else text


def fact_paraphrases(sentence: str) -> list[str]:
    """Three paraphrases of a statement, light to heavy."""
    sentence = " ".join(sentence.split())
    light = FACT_FRAMES[0].format(_lower_first(synonyms(sentence)))
    medium = FACT_FRAMES[1].format(_lower_first(synonyms(drop_parentheses(sentence))))
    heavy = FACT_FRAMES[2].format(move_lead(synonyms(drop_parentheses(sentence))))
    return [light, medium, heavy]


def question_paraphrases(question: str) -> list[str]:
    """Two paraphrases of a question: synonyms and a frame, then the named pair swapped as well."""
    question = " ".join(question.split())
    return [QUESTION_FRAMES[0].format(synonyms(question)),
            QUESTION_FRAMES[1].format(swap_pair(ask_differently(synonyms(drop_parentheses(question)))))]


def entities(question: str) -> list[str]:
    """Quoted titles and capitalised names in a question, its first word excepted."""
    body = question.split(" ", 1)[1] if " " in question else ""
    found = [m.group(0).strip() for m in _ENTITY.finditer(body)]
    return list(dict.fromkeys(e for e in found if len(e) > 2))


def follow_up(question: str, answer: str) -> str:
    """A follow-up that names only the question's entities (or, if it has none, the answer)."""
    names = entities(question)[:2] or [answer]
    return f"Following up on {' and '.join(names)}: what did we conclude?"

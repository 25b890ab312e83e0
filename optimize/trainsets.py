"""Labelled examples for each agent, derived from HotpotQA's own labels.

Each builder turns :class:`~optimize.hotpotqa.HotpotQAItem` s into ``dspy.Example`` s whose inputs are
exactly the agent's ``forward()`` arguments (so the agent itself is the program an optimizer compiles)
and whose other fields are what the matching metric in :mod:`optimize.metrics` checks:

* classification -- ``context`` is the sentences of the two gold paragraphs and one distractor, one per
  line block, in document order; ``topics`` maps each paragraph title (the true topic) to its sentences.
* structure -- ``content`` is the two gold paragraphs; ``facts`` are what the summary must keep: the
  answer (when it is a span of the content) and the gold paragraphs' entities (their titles), which are
  the bridge entities of a bridge question and the compared entities of a comparison.
* analysis -- ``new_node`` is a gold paragraph; the candidates are the other gold paragraph of a bridge
  question (related), a distractor that shares no entity with it (unrelated) and a copy of the paragraph
  with one fact altered -- a year, another number or a name (conflict). ``relations`` maps candidate ids to
  the expected relationship (``alteration`` is ``[original value, altered value]``). Candidate order is
  shuffled so that position tells nothing.
* integration -- the paragraph and its altered copy are the nodes to merge, the original paragraph is the
  validation result; ``kept`` is the original value and ``dropped`` the altered one.
* answer -- ``task_goal`` is the question and ``memory`` a ``<memory>`` block of the two gold paragraphs
  and two distractors in shuffled order, one ``Memory N (node ID):`` group each (an id made from the
  title), as the adapter writes it; ``answer`` is the gold answer (scored by answer F1).
* planning and all -- the whole bank answers ``question`` from ``context`` (all paragraphs); ``answer``
  is the gold answer.

Everything is deterministic for a given seed.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Callable, Sequence

import dspy

from amb_dspy.agents import NeighborInfo, NodeInfo, NodeWithNeighbors
from amb_dspy.agents.classification import fallback_keywords
from optimize.hotpotqa import HotpotQAItem, Paragraph
from optimize.metrics import mentions, normalize_answer

MAX_SENTENCES = 4  # per paragraph in classification inputs: enough for a topic, short for small LMs
BANK_AGENTS = ("planning", "all")


def clean_title(title: str) -> str:
    """A Wikipedia title without its disambiguation: "Lilu (mythology)" -> "Lilu"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip() or title


# --- entities and fact alteration ---------------------------------------------------------------------

_NOT_ENTITIES = frozenset(
    "a an the in on at of for and or but to by from with as is was he she it its his her they their this that "
    "these those there after before during when while however although since until later also january february "
    "march april may june july august september october november december".split()
)
_CAPITALISED = re.compile(r"\b[A-Z][\w'\u2019-]*")
_NAME = re.compile(r"\b[A-Z][a-z][\w'-]*(?:\s+[A-Z][a-z][\w'-]*){1,2}\b")
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?![\w,.]\d|\w)")


@functools.lru_cache(maxsize=8192)
def entity_words(text: str) -> frozenset[str]:
    """Lower-cased capitalised words and numbers of ``text``: a cheap stand-in for its named entities."""
    words = {w.lower() for w in _CAPITALISED.findall(text)} | set(_NUMBER.findall(text))
    return frozenset(w for w in words if w not in _NOT_ENTITIES and len(w) > 1)


def shares_entity(a: Paragraph, b: Paragraph) -> bool:
    return bool(entity_words(f"{a.title} {a.text}") & entity_words(f"{b.title} {b.text}"))


def _replace_value(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w.,]){re.escape(old)}(?![\w,.]\d|\w)", new, text)


def _altered_number(value: str, rng: random.Random) -> str:
    digits = int(value.replace(",", ""))
    if len(value) == 4 and 1000 <= digits <= 2099:  # a year: move it by a plausible amount
        return str(digits + rng.choice([-1, 1]) * rng.randint(2, 12))
    changed = digits + max(1, round(digits * rng.uniform(0.2, 0.6)))
    return f"{changed:,}" if "," in value else str(changed)


def _names(text: str) -> list[str]:
    """Runs of two or three capitalised words inside a sentence (not at its start): likely proper names."""
    spans = []
    for match in _NAME.finditer(text):
        before = text[: match.start()].rstrip()
        words = match.group().lower().split()
        if before and before[-1] not in ".!?\"" and not set(words) & _NOT_ENTITIES:
            spans.append(match.group())
    return list(dict.fromkeys(spans))


def alter_fact(paragraph: Paragraph, prefer: Sequence[str], names: Sequence[str], rng: random.Random) -> tuple[str, str, str] | None:
    """``(altered text, original value, new value)``: ``paragraph`` with every occurrence of one value
    changed -- a year, else another number, else a name swapped for a name of as many words from
    ``names`` -- looking in the ``prefer`` sentences before the rest of the text. None when nothing can
    be altered cleanly (the metric's own matcher must tell the two texts apart)."""
    text = paragraph.text
    title_words = entity_words(paragraph.title)
    scopes = [" ".join(prefer), text] if prefer else [text]

    def years(scope: str) -> list[tuple[str, Callable[[], str]]]:
        found = [v for v in dict.fromkeys(_NUMBER.findall(scope)) if len(v) == 4 and 1000 <= int(v) <= 2099]
        return [(v, lambda v=v: _altered_number(v, rng)) for v in found]

    def numbers(scope: str) -> list[tuple[str, Callable[[], str]]]:
        return [(v, lambda v=v: _altered_number(v, rng)) for v in dict.fromkeys(_NUMBER.findall(scope))]

    def other_name(words: int) -> str:
        pool = [n for n in names if len(n.split()) == words]
        for _ in range(20):  # the pool is large; a few draws find a name the text does not mention
            if pool and not mentions(text, name := rng.choice(pool)):
                return name
        return ""

    def swapped_names(scope: str) -> list[tuple[str, Callable[[], str]]]:
        spans = [s for s in _names(scope) if not entity_words(s) & title_words]
        return [(span, lambda span=span: other_name(len(span.split()))) for span in spans]

    for kind in (years, numbers, swapped_names):
        for scope in scopes:
            candidates = kind(scope)
            rng.shuffle(candidates)
            for old, make_new in candidates:
                new = make_new()
                if not new:
                    continue
                altered = _replace_value(text, old, new)
                if not mentions(text, new) and mentions(altered, new) and not mentions(altered, old):
                    return altered, old, new
    return None


def paragraph_keywords(paragraph: Paragraph, limit: int = 5) -> list[str]:
    """The paragraph's entity, then the proper names it mentions, then its most frequent words."""
    title = clean_title(paragraph.title)
    found = [title]
    for word in _names(paragraph.text) + fallback_keywords(paragraph.text, limit):
        if word.lower() not in " | ".join(found).lower():
            found.append(word)
    return found[:limit]


def node_for(paragraph: Paragraph, text: str | None = None, node_id: str | None = None) -> NodeInfo:
    """A memory node holding a paragraph: its text as summary, its first sentence as context."""
    first = paragraph.sentences[0].strip() if paragraph.sentences else paragraph.text
    context = " ".join(first.split()[:25])
    keywords = paragraph_keywords(paragraph)
    return NodeInfo(id=node_id, summary=text if text is not None else paragraph.text, context=context, keywords=keywords)


def _names_pool(items: Sequence[HotpotQAItem]) -> list[str]:
    return sorted({n for item in items for p in item.context for n in _names(p.text)})


# --- builders ---------------------------------------------------------------------------------------------


def classification_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    examples = []
    for item in items:
        gold, distractors = item.gold_paragraphs, item.distractor_paragraphs
        if len(gold) < 2 or not distractors:
            continue
        chosen = {p.title for p in gold} | {rng.choice(distractors).title}
        topics = {
            p.title: [s.strip() for s in p.sentences[:MAX_SENTENCES] if s.strip()]
            for p in item.context if p.title in chosen
        }
        context = "\n\n".join(s for sentences in topics.values() for s in sentences)
        examples.append(dspy.Example(context=context, task_goal=item.question, topics=topics).with_inputs("context", "task_goal"))
    return examples


def structure_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    examples = []
    for item in items:
        gold = item.gold_paragraphs
        if len(gold) < 2:
            continue
        content = "\n\n".join(p.text for p in gold)
        titles = [clean_title(p.title) for p in gold]
        facts = [t for t in titles if mentions(content, t)]
        if normalize_answer(item.answer) not in ("yes", "no") and mentions(content, item.answer):
            facts.insert(0, item.answer)
        facts = list(dict.fromkeys(facts))
        if not facts:
            continue
        examples.append(
            dspy.Example(
                content=content, context=f"Facts about {' and '.join(titles)}.", keywords=titles, facts=facts
            ).with_inputs("content", "context", "keywords")
        )
    return examples


def analysis_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    names = _names_pool(items)
    everything = [p for item in items for p in item.context]
    examples = []
    for item in items:
        gold = item.gold_paragraphs
        if not gold:
            continue
        paragraph = gold[0]
        candidates: list[tuple[NodeInfo, str, str]] = []  # node, label, why
        if item.type == "bridge" and len(gold) > 1:
            other = gold[1]
            candidates.append((node_for(other), "related", f"both belong to one chain of facts ({clean_title(other.title)})"))
        unrelated = [p for p in item.distractor_paragraphs if not shares_entity(paragraph, p)]
        unrelated = unrelated or [p for p in everything if p.title not in {g.title for g in gold} and not shares_entity(paragraph, p)]
        if unrelated:
            candidates.append((node_for(rng.choice(unrelated)), "unrelated", "it shares no entity or topic with the new node"))
        prefer = item.supporting_sentences_of(paragraph.title)
        alteration = alter_fact(paragraph, prefer, names, rng)
        if alteration is not None:
            altered, old, new = alteration
            candidates.append((node_for(paragraph, text=altered), "conflict", f"it says {new} where the new node says {old}"))
        if len(candidates) < 2:
            continue
        rng.shuffle(candidates)
        ids = [f"m{i}" for i in range(1, len(candidates) + 1)]
        nodes = [node.model_copy(update={"id": node_id}) for node_id, (node, _, _) in zip(ids, candidates)]
        examples.append(
            dspy.Example(
                new_node=node_for(paragraph),
                candidates=nodes,
                relations={node_id: label for node_id, (_, label, _) in zip(ids, candidates)},
                reasons={node_id: why for node_id, (_, _, why) in zip(ids, candidates)},
                alteration=list(alteration[1:]) if alteration else None,
            ).with_inputs("new_node", "candidates")
        )
    return examples


def integration_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    names = _names_pool(items)
    examples = []
    for item in items:
        gold = item.gold_paragraphs
        if not gold:
            continue
        paragraph = gold[0]
        prefer = item.supporting_sentences_of(paragraph.title)
        alteration = alter_fact(paragraph, prefer, names, rng)
        if alteration is None:
            continue
        altered, old, new = alteration
        base = node_for(paragraph)
        neighbors = []
        if len(gold) > 1:
            other = node_for(gold[1], node_id="n3")
            neighbors = [NeighborInfo(id="n3", context=other.context, keywords=other.keywords)]
        pair = [
            NodeWithNeighbors(id="n1", summary=paragraph.text, context=base.context, keywords=base.keywords, neighbors=neighbors),
            NodeWithNeighbors(id="n2", summary=altered, context=base.context, keywords=base.keywords),
        ]
        rng.shuffle(pair)
        examples.append(
            dspy.Example(
                nodes_to_merge=pair,
                validation_result=f"Cross-validation against the source text found: {paragraph.text}",
                kept=old,
                dropped=new,
            ).with_inputs("nodes_to_merge", "validation_result")
        )
    return examples


MEMORY_DISTRACTORS = 2  # distractor paragraphs beside the gold ones in an answer example's <memory>


def memory_block(paragraphs: Sequence[Paragraph]) -> str:
    """Paragraphs as a ``<memory>`` block of the evidence view: one group per paragraph, its id made from its title."""
    return "\n\n".join(
        f"Memory {n} (node {hashlib.sha256(p.title.encode()).hexdigest()[:8]}):\n" + "\n".join(s.strip() for s in p.sentences if s.strip())
        for n, p in enumerate(paragraphs, 1))


def answer_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    examples = []
    for item in items:
        if not item.gold_paragraphs:
            continue
        paragraphs = [*item.gold_paragraphs, *item.distractor_paragraphs[:MEMORY_DISTRACTORS]]
        rng.shuffle(paragraphs)
        examples.append(dspy.Example(task_goal=item.question, memory=memory_block(paragraphs), answer=item.answer)
                        .with_inputs("task_goal", "memory"))
    return examples


def bank_examples(items: Sequence[HotpotQAItem], rng: random.Random) -> list[dspy.Example]:
    return [
        dspy.Example(question=item.question, context=item.context_text(), answer=item.answer).with_inputs("question", "context")
        for item in items
    ]


BUILDERS: dict[str, Callable[[Sequence[HotpotQAItem], random.Random], list[dspy.Example]]] = {
    "classification": classification_examples,
    "structure": structure_examples,
    "analysis": analysis_examples,
    "integration": integration_examples,
    "planning": bank_examples,
    "answer": answer_examples,
    "all": bank_examples,
}


def build_examples(agent: str, items: Sequence[HotpotQAItem], *, seed: int = 0) -> list[dspy.Example]:
    """The examples for ``agent`` (an agent name, or "all" for the whole bank) from ``items``."""
    if agent not in BUILDERS:
        raise ValueError(f"unknown agent {agent!r}: choose one of {', '.join(BUILDERS)}")
    return BUILDERS[agent](items, random.Random(f"{agent}:{seed}"))


def split_items(items: Sequence[HotpotQAItem], dev_share: float = 0.3, *, seed: int = 0) -> tuple[list[HotpotQAItem], list[HotpotQAItem]]:
    """``(train, dev)``: a seeded shuffle cut so that dev holds ``dev_share`` of the items (at least one,
    and train at least one). Items are split before examples are built so no question is on both sides."""
    if len(items) < 2:
        raise ValueError(f"need at least 2 items to hold some out, got {len(items)}")
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    dev_size = min(len(shuffled) - 1, max(1, round(len(shuffled) * dev_share)))
    return shuffled[dev_size:], shuffled[:dev_size]

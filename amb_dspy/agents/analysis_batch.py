"""Several new nodes judged in one analysis call (the bank's memory conversion; spec §7.3 per node).

Consecutive new nodes share most of their candidates (and an earlier new node is often a candidate of
a later one), so a batch shows every node once, in a numbered list of notes, and lists each new note
with the numbers of its own candidates. The answer lists, under each new note, only the candidates that
conflict with it or relate to it (an unrelated judgement says nothing the bank keeps, and most
candidates are unrelated: leaving them out lets a call hold more nodes); a candidate left out is
unrelated, as in a call on one node. Each judgement names a candidate by its note number; the code
maps it back to that node's candidates (a number outside them is dropped and logged) and keeps the
highest-priority judgement per candidate, as for one node. A new node the answer leaves out is
reported as such, for the agent to judge on its own.

Calls are packed in order by the agent's window (the notes and the list of new notes), by the room its
LM leaves for the answer (:data:`NOTE_ANSWER_TOKENS` a new note and :data:`ANSWER_TOKENS_PER_CANDIDATE`
a candidate, as if all were related), and by ``config.ingest_batch``. The answer ends with a field
(``complete``) that an answer cut short by the LM's ``max_tokens`` lacks, so such an answer never
parses (DSPy's JSON reading would otherwise repair it into one missing the last judgements); it is
asked again in two halves, like any unusable answer (see ``AnalysisAgent``).
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import LMKeywords, MemoryAgent, answer_tokens, logger
from amb_dspy.agents.judgement import CandidateJudgement, Judgement
from amb_dspy.storage.content import NodeContent

# The answer room a batch reserves, for the worst case: every candidate related. A related judgement (the
# candidate's context and keywords rewritten, a sentence of reasoning) is about 60 tokens, a new note's
# heading with its own rewrite about 45 (the scripted LM of bench/ingest_cost.py writes 55 and 40; a real
# LM's sentences run longer). An unrelated judgement is left out. A longer answer than reserved is cut by
# the LM's max_tokens and asked again in halves: a wasted call, never a lost judgement.
NOTE_ANSWER_TOKENS = 45
ANSWER_TOKENS_PER_CANDIDATE = 60


class NoteBrief(BaseModel):
    number: int
    summary: str
    context: str
    keywords: list[str]


class NewNote(BaseModel):
    note: int = Field(description="the number of the note just added to memory")
    candidates: list[int] = Field(description="the numbers of the existing notes to judge it against")


class NoteVerdicts(BaseModel):
    note: int = Field(description="the new note's number")
    context_update: str = Field("", description="when it relates to a candidate: the new note's context, mentioning "
                                                "every link; else empty")
    keywords_update: LMKeywords = Field(default_factory=list, description="when it relates to a candidate: the new "
                                                                         "note's keywords; else empty")
    relationships: list[CandidateJudgement] = Field(description="the judgements of the candidates that conflict "
                                                                "with that note or relate to it; empty when none does")


class AnalyzeRelationshipsBatch(dspy.Signature):
    """Decide how each new memory note relates to each of its own candidate notes.

    Notes are listed once, each with a number. Every new note names the numbers of its candidates:
    judge it against those only, and judge each new note separately. Judge every candidate in this
    order. Conflict: the two make contradicting claims about the same thing (a different date, number,
    name or outcome); describe the contradiction. Otherwise related: they share an entity, topic or
    line of reasoning, so one helps to understand the other; rewrite the candidate's one-sentence
    context and keywords so that they also reflect the new note, and once per new note its own context
    and keywords so that they reflect all its related candidates. Otherwise unrelated: leave it out.
    Refer to notes only by their numbers, and give every new note under its number, with an empty
    list of relationships when none of its candidates conflicts or relates.
    """

    notes: list[NoteBrief] = dspy.InputField(desc="every note the judgements refer to, each once, with its number")
    new_notes: list[NewNote] = dspy.InputField(desc="the new notes to judge, each with its candidates' numbers")
    verdicts: list[NoteVerdicts] = dspy.OutputField(desc="for each new note, by number, its conflicting and related candidates")
    complete: bool = dspy.OutputField(desc="true, written after the verdicts of every new note")


Item = tuple[NodeContent, list[NodeContent]]  # (new node, its candidates), each with an id


def pack_items(agent: MemoryAgent, predictor: dspy.Predict, items: list[Item]) -> list[list[int]]:
    """``items`` (by index) grouped, in order, into calls that fit the window, the answer room and the batch size."""
    budget = int(agent.window * agent.settings.chunk_ratio) - agent.prompt_tokens(predictor, notes=[], new_notes=[])
    room = answer_tokens(agent.active_lm())
    groups: list[list[int]] = []
    current: list[int] = []
    shown: set[str] = set()
    used = answered = 0
    for index, (node, candidates) in enumerate(items):
        new = [n for n in dict.fromkeys([node.id, *(c.id for c in candidates)]) if n not in shown]
        briefs = {n.id: n for n in [node, *candidates]}
        cost = sum(agent.count_tokens(_note(99, briefs[n]).model_dump_json()) for n in new)
        cost += agent.count_tokens(NewNote(note=99, candidates=[99] * len(candidates)).model_dump_json())
        answer = NOTE_ANSWER_TOKENS + ANSWER_TOKENS_PER_CANDIDATE * len(candidates)
        full = len(current) >= agent.ingest_batch() or (room is not None and answered + answer > room)
        if current and (used + cost > budget or full):
            groups.append(current)
            current, shown, used, answered = [], set(), 0, 0
            new = list(dict.fromkeys([node.id, *(c.id for c in candidates)]))
            cost = sum(agent.count_tokens(_note(99, briefs[n]).model_dump_json()) for n in new) + \
                agent.count_tokens(NewNote(note=99, candidates=[99] * len(candidates)).model_dump_json())
        current.append(index)
        shown.update(new)
        used += cost
        answered += answer
    return groups + ([current] if current else [])


def judge_together(agent: MemoryAgent, predictor: dspy.Predict, items: list[Item]) -> list[list | None]:
    """One call for ``items``: for each, the judgements on its candidates with the candidate numbered as in
    a call of its own (1, 2, ...), or None when the answer leaves the node out."""
    numbers: dict[str, int] = {}
    notes: list[NoteBrief] = []
    for node, candidates in items:
        for brief in [node, *candidates]:
            if brief.id not in numbers:
                numbers[brief.id] = len(numbers) + 1
                notes.append(_note(numbers[brief.id], brief))
    new_notes = [NewNote(note=numbers[node.id], candidates=[numbers[c.id] for c in candidates]) for node, candidates in items]
    prediction = agent.call(predictor, notes=notes, new_notes=new_notes)
    by_note: dict[int, list[Judgement]] = {}
    for verdicts in prediction.verdicts or []:
        # the new note's rewrite, given once, goes with each of its related judgements (the last one applied stands)
        own = {"context_update_new": verdicts.context_update, "keywords_update_new": list(verdicts.keywords_update)}
        by_note.setdefault(verdicts.note, []).extend(Judgement(**j.model_dump(), **own) for j in verdicts.relationships or [])
    out: list[list | None] = []
    for node, candidates in items:
        found = by_note.get(numbers[node.id])
        if found is None:
            out.append(None)
            continue
        local = {numbers[c.id]: k for k, c in enumerate(candidates, 1)}
        unknown = sorted({v.candidate for v in found if v.candidate not in local})
        if unknown:
            logger.warning("analysis: dropped judgements on note number(s) %s, not candidates of note %d",
                           unknown, numbers[node.id])
        out.append([v.model_copy(update={"candidate": local[v.candidate]}) for v in found if v.candidate in local])
    return out


def _note(number: int, node: NodeContent) -> NoteBrief:
    return NoteBrief(number=number, summary=node.summary, context=node.context, keywords=list(node.keywords))

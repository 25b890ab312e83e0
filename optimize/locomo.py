"""LoCoMo conversations (Maharana et al., ACL 2024): loading, rendering as text, and the paper's answer F1.

A dataset is named the way the CLI takes it: ``locomo:PATH``, where PATH is one conversation's JSON file
(one object per file), the authors' ``locomo10.json`` (a list of conversation objects, each named by its
``sample_id``), or a folder of such files, read in name order.

* :func:`load_locomo` gives :class:`Conversation` objects holding the turns and the questions of
  categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop). Category 5 (adversarial: the
  answer is not in the conversation) is left out, as in the literature. The authors' annotations
  (``session_N_summary``, ``_observation``, ``events_session_N``) are never read.
* :meth:`Conversation.render` writes one line per turn -- session date, speaker, text and the photo's
  caption when there is one -- with a blank line between sessions, and says where each turn lies in
  that text, so that evidence turn ids can be matched against a memory's provenance spans.
* :func:`locomo_f1` is the F1 of the authors' ``task_eval/evaluation.py``: answers are lowercased,
  stripped of commas, punctuation and the words a/an/the/and, split on whitespace and Porter-stemmed
  (NLTK) before the token-overlap F1. For multi-hop questions the prediction and the gold answer are
  first split at commas and each gold part scores its best-matching predicted part, averaged; for
  open-domain questions only the gold answer's first ``;``-separated alternative counts.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from amb_dspy.memory.documents import turn_line
from optimize.hotpotqa import DatasetError

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION = re.compile(r"^session_(\d+)$")
_DROPPED_WORDS = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)


class Turn(BaseModel):
    dia_id: str
    session: int
    date: str
    speaker: str
    text: str
    caption: str = ""

    def line(self) -> str:
        return turn_line(self.date, self.speaker, self.text, self.caption)  # as `amb ingest` writes a session


class LoCoMoQuestion(BaseModel):
    id: str
    question: str
    answer: str
    category: int
    evidence: list[str]  # dia_ids of the turns that hold the answer


class Conversation(BaseModel):
    name: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[LoCoMoQuestion]

    def render(self) -> tuple[str, dict[str, tuple[int, int]]]:
        """The conversation as text, and each turn's ``[start, end)`` character span in it by dia_id."""
        parts: list[str] = []
        spans: dict[str, tuple[int, int]] = {}
        offset, session = 0, None
        for turn in self.turns:
            if session is not None and turn.session != session:
                parts.append("\n")
                offset += 1
            session = turn.session
            line = turn.line()
            spans[turn.dia_id] = (offset, offset + len(line))
            parts.append(line + "\n")
            offset += len(line) + 1
        return "".join(parts).rstrip("\n"), spans

    def text(self) -> str:
        return self.render()[0]


def load_locomo(source: str, *, n: int | None = None) -> list[Conversation]:
    """The conversations of ``locomo:PATH`` with their category 1-4 questions; ``n`` keeps the first ``n``
    questions over all conversations (a conversation left with none is dropped)."""
    name, _, path = source.partition(":")
    if name.strip().lower() != "locomo" or not path:
        raise DatasetError(f"unknown dataset {source!r}: use locomo:PATH (a conversation JSON file or a folder of them)")
    if n is not None and n < 1:
        raise DatasetError(f"n must be at least 1, got {n}")
    root = Path(path).expanduser()
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    if not root.exists() or not files:
        raise DatasetError(f"{root}: no such file, or no .json conversation in the folder")
    conversations, left = [], n
    for conversation in (c for file in files for c in _read_file(file)):
        if left is not None:
            conversation.questions = conversation.questions[:left]
            left -= len(conversation.questions)
        if conversation.questions:
            conversations.append(conversation)
        if left == 0:
            break
    if not conversations:
        raise DatasetError(f"{root}: no questions of categories 1-4")
    return conversations


def _read_file(path: Path) -> list[Conversation]:
    """The conversation of a one-conversation file, or each of a list of them (``locomo10.json``)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read a JSON conversation ({type(exc).__name__}: {exc})") from None
    if isinstance(raw, list) and raw:
        return [_read_conversation(path, item, f"{path.stem}-{item.get('sample_id', i) if isinstance(item, dict) else i}")
                for i, item in enumerate(raw)]
    return [_read_conversation(path, raw, path.stem)]


def _read_conversation(path: Path, raw, name: str) -> Conversation:
    raw = raw.get("conversation", raw) | {"qa": raw.get("qa")} if isinstance(raw, dict) else raw
    if not isinstance(raw, dict) or not isinstance(raw.get("qa"), list) or "speaker_a" not in raw:
        raise DatasetError(f"{path}: not a LoCoMo conversation (needs speaker_a, session_N lists and qa)")
    try:
        sessions = sorted((int(m.group(1)), key) for key in raw if (m := _SESSION.match(key)))
        turns = [
            Turn(dia_id=t["dia_id"], session=number, date=str(raw.get(f"{key}_date_time", "")), speaker=t["speaker"],
                 text=t["text"], caption=t.get("blip_caption") or "")
            for number, key in sessions for t in raw[key]
        ]
        known = {turn.dia_id for turn in turns}
        questions = [
            LoCoMoQuestion(id=f"{name}:{i}", question=q["question"], answer=str(q["answer"]), category=q["category"],
                           evidence=[e for e in _evidence_ids(q.get("evidence", [])) if e in known])
            for i, q in enumerate(raw["qa"]) if q.get("category") in CATEGORIES and q.get("answer") is not None
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path}: not a LoCoMo conversation ({type(exc).__name__}: {exc})") from None
    return Conversation(name=name, speakers=(raw["speaker_a"], raw.get("speaker_b", "")), turns=turns,
                        questions=questions)


def _evidence_ids(evidence: list[str]) -> list[str]:
    """Evidence entries may hold several ids separated by ``;`` (``"D8:6; D9:17"``)."""
    return [part.strip() for entry in evidence for part in str(entry).split(";") if part.strip()]


# --- the paper's scoring ------------------------------------------------------------------------

def normalize_locomo(text: str) -> str:
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_DROPPED_WORDS.sub(" ", text).split())


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def _stems(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(word) for word in normalize_locomo(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    predicted, wanted = _stems(prediction), _stems(gold)
    same = sum((Counter(predicted) & Counter(wanted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


def locomo_f1(prediction: str, gold: str, category: int) -> float:
    """The LoCoMo paper's F1 for one answer of ``category`` (1-4)."""
    if category == 1:
        predicted = [p.strip() for p in str(prediction).split(",")]
        return sum(max(token_f1(p, g.strip()) for p in predicted) for g in gold.split(",")) / len(gold.split(","))
    if category == 3:
        gold = gold.split(";")[0].strip()
    return token_f1(prediction, gold)


def locomo_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_locomo(prediction) == normalize_locomo(gold))

"""HotpotQA items from the official JSON/JSONL files or from Hugging Face (``hotpotqa/hotpot_qa``, distractor).

A dataset is named the way the CLI takes it:

* ``hotpotqa`` -- the Hugging Face dataset through the ``datasets`` package (needs it installed and the
  network, or a warm Hugging Face cache);
* ``hotpotqa:PATH`` -- a local file in the official format: a JSON array (``hotpot_dev_distractor_v1.json``)
  or one JSON object per line. Records in the Hugging Face layout are accepted there too.

Both layouts are normalised to :class:`HotpotQAItem`:

* official: ``_id``, ``context = [[title, [sentence, ...]], ...]``, ``supporting_facts = [[title, index], ...]``;
* Hugging Face: ``id``, ``context = {"title": [...], "sentences": [[...], ...]}``,
  ``supporting_facts = {"title": [...], "sent_id": [...]}``.

Every problem comes out as one :class:`DatasetError` line that says how to get the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from amb_dspy.errors import UserError, one_line

OFFICIAL_URL = "http://curtis.ml.cmu.edu/datasets/hotpot/"
HF_NAME = "hotpotqa/hotpot_qa"
HF_CONFIG = "distractor"
HOW_TO_GET = (
    f"download hotpot_dev_distractor_v1.json (or hotpot_train_v1.1.json) from {OFFICIAL_URL} and pass "
    "hotpotqa:PATH, or `pip install datasets` with network access for `hotpotqa`"
)


class DatasetError(UserError, ValueError):
    """A dataset could not be read; the message is one line and says what to do."""


class Paragraph(BaseModel):
    title: str
    sentences: list[str]

    @property
    def text(self) -> str:
        # Official sentences after the first carry their leading space, so "" joins them back.
        return "".join(self.sentences).strip()


class SupportingFact(BaseModel):
    title: str
    sent_id: int = Field(ge=0)


class HotpotQAItem(BaseModel):
    """One HotpotQA question with its context paragraphs (2 gold + distractors in the distractor setting)."""

    id: str
    question: str
    answer: str
    type: str = ""  # "bridge" or "comparison"
    level: str = ""
    supporting_facts: list[SupportingFact]
    context: list[Paragraph]

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, record: Any) -> Any:
        if not isinstance(record, dict):
            return record
        record = dict(record)
        if "id" not in record and "_id" in record:
            record["id"] = record.pop("_id")
        context = record.get("context")
        if isinstance(context, dict):  # Hugging Face columns
            record["context"] = [
                {"title": t, "sentences": list(s)} for t, s in zip(context.get("title", []), context.get("sentences", []))
            ]
        elif isinstance(context, list):
            record["context"] = [
                {"title": p[0], "sentences": list(p[1])} if isinstance(p, (list, tuple)) and len(p) == 2 else p
                for p in context
            ]
        facts = record.get("supporting_facts")
        if isinstance(facts, dict):
            record["supporting_facts"] = [
                {"title": t, "sent_id": i} for t, i in zip(facts.get("title", []), facts.get("sent_id", []))
            ]
        elif isinstance(facts, list):
            record["supporting_facts"] = [
                {"title": f[0], "sent_id": f[1]} if isinstance(f, (list, tuple)) and len(f) == 2 else f for f in facts
            ]
        return record

    # --- views used by the training-set builders ------------------------------------------------

    def paragraph(self, title: str) -> Paragraph | None:
        return next((p for p in self.context if p.title == title), None)

    @property
    def gold_titles(self) -> list[str]:
        """Titles of the supporting paragraphs, in supporting-fact order, without repeats."""
        return list(dict.fromkeys(f.title for f in self.supporting_facts))

    @property
    def gold_paragraphs(self) -> list[Paragraph]:
        return [p for t in self.gold_titles if (p := self.paragraph(t)) is not None]

    @property
    def distractor_paragraphs(self) -> list[Paragraph]:
        gold = set(self.gold_titles)
        return [p for p in self.context if p.title not in gold]

    @property
    def supporting_sentences(self) -> list[str]:
        return [s for title in self.gold_titles for s in self.supporting_sentences_of(title)]

    def supporting_sentences_of(self, title: str) -> list[str]:
        """The supporting sentences of the paragraph ``title`` (indices out of range are skipped)."""
        paragraph = self.paragraph(title)
        if paragraph is None:
            return []
        return [
            paragraph.sentences[f.sent_id].strip()
            for f in self.supporting_facts if f.title == title and f.sent_id < len(paragraph.sentences)
        ]

    def context_text(self, paragraphs: list[Paragraph] | None = None) -> str:
        """Paragraphs as plain text, one per block, each headed by its title."""
        return "\n\n".join(f"{p.title}\n{p.text}" for p in (self.context if paragraphs is None else paragraphs))


def load_hotpotqa(source: str, *, split: str = "train", n: int | None = None) -> list[HotpotQAItem]:
    """Items of ``source`` (``hotpotqa`` or ``hotpotqa:PATH``), the first ``n`` when given.

    ``split`` picks the Hugging Face split (``train`` or ``validation``); a local file is read whole.
    """
    name, _, path = source.partition(":")
    if name.strip().lower() != "hotpotqa":
        raise DatasetError(f"unknown dataset {source!r}: use hotpotqa or hotpotqa:PATH")
    if n is not None and n < 1:
        raise DatasetError(f"n must be at least 1, got {n}")
    items = _read_file(Path(path).expanduser(), n) if path else _read_hugging_face(split, n)
    if not items:
        raise DatasetError(f"{source}: no items; {HOW_TO_GET}")
    return items


def _read_file(path: Path, n: int | None) -> list[HotpotQAItem]:
    if not path.is_file():
        raise DatasetError(f"{path}: no such file; {HOW_TO_GET}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc})") from None
        numbered = list(enumerate(records, 1))
        where = "item"
    else:
        numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        where = "line"
    items = []
    for number, record in numbered[: n if n is not None else len(numbered)]:
        try:
            if isinstance(record, str):
                record = json.loads(record)
            items.append(HotpotQAItem.model_validate(record))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path} {where} {number}: not valid JSON ({exc})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "record"
            raise DatasetError(f"{path} {where} {number}: not a HotpotQA record ({field}: {first['msg']})") from None
    return items


def _read_hugging_face(split: str, n: int | None) -> list[HotpotQAItem]:
    try:
        # Without Hugging Face's package this resolves to the repository's datasets/ folder (a namespace
        # package with no load_dataset), which is an ImportError as well.
        from datasets import load_dataset
    except ImportError:
        raise DatasetError(f"hotpotqa from Hugging Face needs the `datasets` package; {HOW_TO_GET}") from None
    hf_split = split if n is None else f"{split}[:{n}]"
    try:
        rows = load_dataset(HF_NAME, HF_CONFIG, split=hf_split)
    except Exception as exc:  # noqa: BLE001 -- network, hub and cache errors all mean "cannot get it here"
        raise DatasetError(f"hotpotqa from Hugging Face is not reachable ({one_line(exc, 160)}); {HOW_TO_GET}") from None
    return [HotpotQAItem.model_validate(row) for row in rows]

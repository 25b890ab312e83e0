"""The embeddings of the evidence view's lines, kept with the bank so that a reopened bank is not embedded again.

The evidence view (:mod:`amb_dspy.memory.view`) embeds every source line of the bank's nodes. Embedding is
what costs (minutes for a bank of a million tokens on two cores), and a line's vector depends on nothing but
its text and the model, so the vectors are a table of the store, keyed by a hash of the exact text embedded
(:func:`line_key`) for one model (its name and dimension, :attr:`LineVectors.model`): the view consults it
before it embeds and adds to it after; a bank database (:mod:`amb_dspy.storage.bank_db`) saves the vectors not
saved yet and loads those of the embedder's model, never another's (a bank opened with another model is
embedded again). Vectors are kept, never removed: a line no node holds any more costs its row, nothing else.
JSON bank files do not carry them (see :mod:`amb_dspy.storage.bank_file`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

import numpy as np

KEY_BYTES = 16


def line_key(text: str) -> bytes:
    """The key of a line's vector: a 16-byte BLAKE2b hash of its text (a collision is not to be expected)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=KEY_BYTES).digest()


class LineVectors:
    """Line text (by :func:`line_key`) -> its float32 vector under one embedding model.

    Besides the vectors, what a bank database's next save needs: which vectors it has not saved
    (:meth:`unsaved`, :meth:`saved`), and whether every line of every node saved so far has a vector
    (``complete``; ``embedded``: the nodes whose lines got vectors since the last save), so that a save after an
    add embeds the lines of the nodes it writes, not of the whole bank."""

    def __init__(self, model_name: str, dim: int):
        self.dim = dim
        self.model = f"{model_name}/{dim}"  # what a stored vector is labelled with: name and dimension
        self._vectors: dict[bytes, np.ndarray] = {}
        self._unsaved: dict[bytes, None] = {}  # keys added since the last save, in order
        self.complete = False
        self.embedded: set[str] = set()

    def __len__(self) -> int:
        return len(self._vectors)

    def missing(self, texts: Iterable[str]) -> list[str]:
        """The distinct texts among ``texts`` with no vector yet, in their order."""
        return [text for text in dict.fromkeys(texts) if line_key(text) not in self._vectors]

    def add(self, texts: Sequence[str], vectors) -> None:
        """Keep ``vectors`` (one row per text, as the embedder returned them) as the texts' vectors."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"{len(texts)} lines and vectors of shape {vectors.shape} (expected {(len(texts), self.dim)})")
        for text, vector in zip(texts, vectors):
            key = line_key(text)
            if key not in self._vectors:
                self._vectors[key] = vector
                self._unsaved[key] = None

    def fill(self, texts: Iterable[str], embed: Callable[[list[str]], np.ndarray]) -> int:
        """Give the distinct texts among ``texts`` that have no vector yet theirs, made by ``embed`` in one call;
        how many were embedded."""
        new = self.missing(texts)
        if new:
            self.add(new, embed(new))
        return len(new)

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        """The texts' vectors, one row each (KeyError for a text with none)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[line_key(text)] for text in texts])

    def copy(self, complete: bool) -> LineVectors:
        """A table of the same vectors (shared: they are never changed) that this one's later additions and saves
        leave alone; ``complete`` as its store's next save would record it."""
        other = LineVectors.__new__(LineVectors)
        other.dim, other.model, other.complete, other.embedded = self.dim, self.model, complete, set()
        other._vectors, other._unsaved = dict(self._vectors), dict(self._unsaved)
        return other

    # --- the bank database's side -------------------------------------------------------------
    @classmethod
    def from_rows(cls, model_name: str, dim: int, keys: bytes, vectors: bytes, complete: bool) -> LineVectors:
        """The table as a bank database stored it: the keys end to end, and their vectors' float32 bytes; all saved."""
        table = cls(model_name, dim)
        count = len(keys) // KEY_BYTES
        matrix = np.frombuffer(vectors, dtype=np.float32).reshape(count, dim)
        table._vectors = dict(zip((keys[i:i + KEY_BYTES] for i in range(0, len(keys), KEY_BYTES)), matrix))
        table.complete = complete
        return table

    def unsaved(self, everything: bool) -> tuple[list[bytes], np.ndarray]:
        """The keys of the vectors not saved yet (``everything``: of all of them, a save of the whole bank) and
        their vectors, one row each."""
        keys = list(self._vectors) if everything else list(self._unsaved)
        return keys, np.stack([self._vectors[key] for key in keys]) if keys else np.zeros((0, self.dim), np.float32)

    def saved(self, keys: Iterable[bytes], complete: bool) -> None:
        """A save wrote these keys' vectors; ``complete``: it recorded that every line of its nodes has one."""
        for key in keys:
            self._unsaved.pop(key, None)
        self.complete, self.embedded = complete, set()

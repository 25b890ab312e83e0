"""Incremental BM25 (Okapi), scored exactly as ``rank_bm25.BM25Okapi`` scores the same corpus.

rank_bm25 rebuilds its whole model whenever the corpus changes; here adding, updating or removing a
document only touches that document's postings. Scores come back as a dense array indexed by the
integer keys the caller assigned, so they combine with vector scores without any id lookups.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections import Counter
from collections.abc import Mapping

import numpy as np

from amb_dspy.text import words as split_words

# A short English stop list: these words carry no topic, and dropping them sharpens BM25 on
# question-style queries ("what is the ... of the ...").
STOPWORDS = frozenset(
    """a about above after again also among against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens, stop words kept (a speaker may be named "Will")."""
    return split_words(text.lower())


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stop words."""
    return [t for t in words(text) if t not in STOPWORDS]


@functools.cache
def _english():
    # snowballstemmer runs PyStemmer's C code when it is installed (a dependency), its own Python otherwise;
    # imported in 15 ms (nltk's Porter stemmer: 1.2 s)
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=1 << 17)
def stem(word: str) -> str:
    """The word's Snowball (Porter 2) English stem: "camped", "camping" and "camps" are all "camp"."""
    return _english().stemWord(word)


class _Terms(dict):
    """A word's term: its :func:`stem`, or None for a stop word; found once per word. A dict lookup where
    :func:`terms` is called on every line of a bank (25,000 lines at a million tokens) costs a third of an
    ``lru_cache`` call; emptied when it holds ``kept`` words, so that a stream of new words cannot grow it."""

    kept = 1 << 18

    def __missing__(self, word: str) -> str | None:
        if len(self) >= self.kept:
            self.clear()
        term = self[word] = None if word in STOPWORDS else stem(word)
        return term


_TERMS = _Terms()


def terms(text: str) -> list[str]:
    """What is matched between a query and a text (BM25, the shared terms a ranking spreads over): the words of
    :func:`tokenize`, stemmed, so that "Where has Melanie camped?" finds "we went camping"."""
    return [term for term in map(_TERMS.__getitem__, words(text)) if term is not None]


def once_per_term(text: str) -> list[str]:
    """The query's words, one for each of its terms, for a ranking in which a term the question repeats counts once
    (BM25, as rank_bm25 scores it, counts it again): "Which magazine was started first, Arthur's Magazine or First
    for Women?" names "magazine" and "first" twice as parts of its titles, not as what it asks more of."""
    first: dict[str, str] = {}
    for word in tokenize(text):
        first.setdefault(stem(word), word)
    return list(first.values())


class Numbering(dict):
    """Term -> its number, a term not seen yet numbered next when it is looked up (``[]``; ``get`` numbers
    nothing), so that ``map(numbering.__getitem__, tokens)`` numbers a document's tokens in C."""

    def __missing__(self, term: str) -> int:
        number = self[term] = len(self)
        return number


class _Postings:
    """One term's documents as growable numpy arrays: no rebuild after a change.

    Removal swaps the last entry into the freed place; finding it is one vectorised comparison.
    """

    __slots__ = ("keys", "tfs", "size")

    def __init__(self) -> None:
        self.keys = np.empty(4, dtype=np.int64)
        self.tfs = np.empty(4, dtype=np.float64)
        self.size = 0

    @classmethod
    def of(cls, keys: np.ndarray, tfs: np.ndarray) -> _Postings:
        """The postings of these (key, tf) pairs, copied."""
        postings = cls.__new__(cls)
        postings.keys, postings.tfs = keys.astype(np.int64), tfs.astype(np.float64)
        postings.size = len(keys)
        return postings

    def copy(self) -> _Postings:
        return _Postings.of(self.keys[: self.size], self.tfs[: self.size])

    def add(self, key: int, tf: int) -> None:
        if self.size == len(self.keys):
            self.keys = np.concatenate([self.keys, np.empty_like(self.keys)])
            self.tfs = np.concatenate([self.tfs, np.empty_like(self.tfs)])
        self.keys[self.size] = key
        self.tfs[self.size] = tf
        self.size += 1

    def extend(self, keys: list[int], tfs: list[int]) -> None:
        """Append many (key, tf) pairs at once."""
        size = self.size + len(keys)
        if size > len(self.keys):
            capacity = max(size, 2 * len(self.keys))
            self.keys = np.concatenate([self.keys[: self.size], np.empty(capacity - self.size, dtype=np.int64)])
            self.tfs = np.concatenate([self.tfs[: self.size], np.empty(capacity - self.size, dtype=np.float64)])
        self.keys[self.size:size] = keys
        self.tfs[self.size:size] = tfs
        self.size = size

    def remove(self, key: int) -> None:
        where = int(np.flatnonzero(self.keys[: self.size] == key)[0])
        last = self.size - 1
        self.keys[where], self.tfs[where] = self.keys[last], self.tfs[last]
        self.size = last

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.keys[: self.size], self.tfs[: self.size]


class BM25Index:
    """BM25Okapi over documents keyed by small non-negative integers (reused after removal)."""

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._postings: dict[str, _Postings] = {}
        self._doc_terms: dict[int, tuple[str, ...]] = {}  # key -> its tokens (a tuple: far smaller than a Counter)
        self._doc_len = np.zeros(1024, dtype=np.float64)
        self._total_len = 0
        self._eps_cache: tuple[int, float] | None = None  # (version, epsilon * average idf)
        self._version = 0
        # document frequency -> how many terms have it: the mean idf over the vocabulary from a few hundred numbers
        # rather than from every term's postings (a large bank's vocabulary is 100,000 terms, and an add changes it)
        self._dfs: Counter[int] = Counter()

    def __len__(self) -> int:
        return len(self._doc_terms)

    def __contains__(self, key: object) -> bool:
        return key in self._doc_terms

    @property
    def capacity(self) -> int:
        return len(self._doc_len)

    def copy(self) -> BM25Index:
        """An index of the same documents that changes apart from this one (no document tokenised again)."""
        other = BM25Index(self.k1, self.b, self.epsilon)
        other._postings = {term: postings.copy() for term, postings in self._postings.items()}
        other._doc_terms, other._doc_len = dict(self._doc_terms), self._doc_len.copy()
        other._total_len, other._eps_cache, other._version = self._total_len, self._eps_cache, self._version
        other._dfs = Counter(self._dfs)
        return other

    def _df_changed(self, before: int, after: int) -> None:
        """One term's document frequency went from ``before`` to ``after`` (0: the term was not, or is no more)."""
        dfs = self._dfs
        if before:
            dfs[before] -= 1
            if not dfs[before]:
                del dfs[before]
        if after:
            dfs[after] += 1

    def add(self, key: int, tokens: list[str]) -> None:
        if key in self._doc_terms:
            raise KeyError(f"document {key} is already indexed")
        if key >= len(self._doc_len):
            grown = np.zeros(max(key + 1, 2 * len(self._doc_len)), dtype=np.float64)
            grown[: len(self._doc_len)] = self._doc_len
            self._doc_len = grown
        tokens = tuple(map(sys.intern, tokens))  # one string object per term, however many documents use it
        counts = Counter(tokens)
        self._doc_terms[key] = tokens
        self._doc_len[key] = len(tokens)
        self._total_len += len(tokens)
        for term, tf in counts.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.add(key, tf)
            self._df_changed(postings.size - 1, postings.size)
        self._version += 1

    def add_many(self, keys: list[int], token_lists: list[list[str]]) -> None:
        """:meth:`add` for many documents, each term's postings extended once rather than once a document:
        what opening a bank of thousands of nodes spends its time on. The same index as adding them in order."""
        if len(set(keys)) != len(keys) or any(key in self._doc_terms for key in keys):
            raise KeyError("document keys must be distinct and not indexed yet")
        if not keys:
            return
        if max(keys) >= len(self._doc_len):
            grown = np.zeros(max(max(keys) + 1, 2 * len(self._doc_len)), dtype=np.float64)
            grown[: len(self._doc_len)] = self._doc_len
            self._doc_len = grown
        interned = [tuple(map(sys.intern, tokens)) for tokens in token_lists]
        lengths = np.fromiter(map(len, interned), dtype=np.int64, count=len(interned))
        for key, tokens, length in zip(keys, interned, lengths.tolist()):
            self._doc_terms[key] = tokens
            self._doc_len[key] = length
            self._total_len += length
        if lengths.sum():
            self._add_postings(keys, interned, lengths)
        self._version += 1

    def _add_postings(self, keys: list[int], interned: list[tuple[str, ...]], lengths: np.ndarray) -> None:
        """Every (term, document) pair of these documents counted at once (sorted by term, then document) and
        appended to the term's postings."""
        ids = Numbering()
        term_ids = np.fromiter(map(ids.__getitem__, itertools.chain.from_iterable(interned)), dtype=np.int64,
                               count=int(lengths.sum()))
        vocabulary = list(ids)
        docs = np.repeat(np.asarray(keys, dtype=np.int64), lengths)
        pairs, tfs = np.unique(term_ids * (max(keys) + 1) + docs, return_counts=True)
        pair_terms, pair_docs = np.divmod(pairs, max(keys) + 1)
        edges = np.r_[0, np.flatnonzero(np.diff(pair_terms)) + 1, len(pairs)].tolist()  # each term's pairs
        tfs = tfs.astype(np.float64)
        for term_id, start, end in zip(pair_terms[edges[:-1]].tolist(), edges, edges[1:]):  # slices: np.split is slower
            term, term_docs, term_tfs = vocabulary[term_id], pair_docs[start:end], tfs[start:end]
            postings = self._postings.get(term)
            if postings is None:
                self._postings[term] = _Postings.of(term_docs, term_tfs)
                self._df_changed(0, len(term_docs))
            else:
                postings.extend(term_docs, term_tfs)
                self._df_changed(postings.size - len(term_docs), postings.size)

    def tokens(self, key: int) -> list[str]:
        """The document's tokens, as they were added."""
        return list(self._doc_terms[key])

    def remove(self, key: int) -> None:
        tokens = self._doc_terms.pop(key)
        self._total_len -= int(self._doc_len[key])
        self._doc_len[key] = 0.0
        for term in dict.fromkeys(tokens):
            postings = self._postings[term]
            postings.remove(key)
            self._df_changed(postings.size + 1, postings.size)
            if not postings.size:
                del self._postings[term]
        self._version += 1

    def _idf(self, df: int, n: int) -> float:
        return math.log(n - df + 0.5) - math.log(df + 0.5)

    def _epsilon_idf(self) -> float:
        """rank_bm25 replaces negative idfs by epsilon * (mean idf over the whole vocabulary)."""
        if self._eps_cache is None or self._eps_cache[0] != self._version:
            self._eps_cache = (self._version, self.epsilon * mean_idf(self._dfs, len(self._doc_terms)))
        return self._eps_cache[1]

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every key slot (0 for empty slots), as rank_bm25 would compute it."""
        scores = np.zeros(self.capacity, dtype=np.float64)
        n = len(self._doc_terms)
        if n == 0:
            return scores
        avgdl = self._total_len / n
        for term in query_tokens:  # repeated query terms count again, as in rank_bm25
            postings = self._postings.get(term)
            if postings is None:
                continue
            idf = self._idf(postings.size, n)
            if idf < 0:
                idf = self._epsilon_idf()
            keys, tfs = postings.arrays()
            norm = self.k1 * (1.0 - self.b + self.b * self._doc_len[keys] / avgdl)
            scores[keys] += idf * tfs * (self.k1 + 1.0) / (tfs + norm)
        return scores


def mean_idf(dfs: Mapping[int, int], n: int) -> float:
    """The mean idf over a vocabulary of ``n`` documents whose terms' document frequencies are counted in ``dfs``
    (frequency -> terms having it), as rank_bm25 averages it; summed in order of frequency, so that the same counts
    give the same float however they were gathered."""
    if not dfs:
        return 0.0
    df, terms = np.array(sorted(dfs.items()), dtype=np.float64).T
    return float(np.dot(terms, np.log(n - df + 0.5) - np.log(df + 0.5)) / terms.sum())


def bm25_scores(documents: list[tuple[str, ...]], query_tokens: list[str], k1: float = 1.5, b: float = 0.75,
                epsilon: float = 0.25) -> list[float]:
    """The BM25 score of each of ``documents`` (token tuples) for ``query_tokens``: the same floats as a
    :class:`BM25Index` holding them under keys 0, 1, ... gives (the same operations in the same order), without
    building one. For the few dozen sentences the heuristic analysis scores at each comparison, where the
    index's numpy postings cost a hundred times the scoring."""
    n = len(documents)
    scores = [0.0] * n
    if n == 0:
        return scores
    counts = [Counter(document) for document in documents]
    avgdl = sum(map(len, documents)) / n
    epsilon_idf = None
    for term in query_tokens:  # repeated query terms count again, as in rank_bm25
        # the documents holding the term, in order: a query has a few terms, the documents hundreds
        holders = [number for number, count in enumerate(counts) if term in count]
        if not holders:
            continue
        idf = math.log(n - len(holders) + 0.5) - math.log(len(holders) + 0.5)
        if idf < 0:
            if epsilon_idf is None:  # as BM25Index._epsilon_idf, over every term's document frequency
                frequencies = Counter(term for count in counts for term in count)
                epsilon_idf = epsilon * mean_idf(Counter(frequencies.values()), n)
            idf = epsilon_idf
        for number in holders:
            tf = float(counts[number][term])
            norm = k1 * (1.0 - b + b * float(len(documents[number])) / avgdl)
            scores[number] += idf * tf * (k1 + 1.0) / (tf + norm)
    return scores

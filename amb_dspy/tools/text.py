"""Plain-text helpers shared by the tools: HTML to text, passage splitting, goal-directed cutting.

Everything here is pure string work (BeautifulSoup and the project's BM25), so it is cheap and
deterministic and the tools can use it on every call.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

from amb_dspy.retrieval.keyword import BM25Index, terms
from amb_dspy.text import split_paragraphs, split_sentences

# Elements that never hold a page's content.
_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed",
              "nav", "footer", "form", "button", "select", "input", "textarea")
# Elements that start a new block of text; inline elements (a, b, span...) stay on their line.
_BLOCK_TAGS = ("p", "div", "section", "article", "main", "header", "aside", "blockquote", "pre", "figure",
               "figcaption", "table", "tr", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
               "hr", "address", "details", "summary", "caption")



def html_to_text(html: str | bytes, encoding: str | None = None) -> tuple[str, str]:
    """``(title, text)`` of an HTML page: scripts, styles, navigation and footers dropped, blocks as paragraphs."""
    soup = BeautifulSoup(html, "html.parser", from_encoding=encoding if isinstance(html, bytes) else None)
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text(" ").split()) if title_tag else ""
    for tag in soup(_DROP_TAGS):
        tag.decompose()
    if soup.head:
        soup.head.decompose()
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for li in soup.find_all("li"):
        li.insert_before("\n- ")
    for td in soup.find_all(("td", "th")):
        td.insert_after(" | ")
    for block in soup.find_all(_BLOCK_TAGS):
        block.insert_before("\n\n")
        block.insert_after("\n\n")
    text = normalize_whitespace(soup.get_text())
    text = re.sub(r"\n\n(?=- )", "\n", text)  # list items on consecutive lines
    if not title:
        heading = soup.find("h1")
        title = " ".join(heading.get_text(" ").split()) if heading else ""
    return title, text


def normalize_whitespace(text: str) -> str:
    """Collapse runs of spaces inside lines and runs of blank lines between paragraphs."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def truncate(text: str, max_chars: int, marker: str = "[... truncated {n} characters]") -> str:
    """``text`` cut to about ``max_chars`` at a word boundary, with a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind(" ", 0, max_chars)
    cut = cut if cut > max_chars * 0.8 else max_chars
    return text[:cut].rstrip() + " " + marker.format(n=len(text) - cut)


def _words(text: str) -> int:
    return len(text.split())


def _pieces(paragraph: str, max_words: int) -> list[str]:
    """A paragraph longer than ``max_words`` cut at sentence ends (or, for one huge sentence, at words)."""
    if _words(paragraph) <= max_words:
        return [paragraph]
    pieces: list[str] = []
    current: list[str] = []
    count = 0
    for sentence in split_sentences(paragraph):
        words = sentence.split()
        while len(words) > max_words:  # one sentence longer than a passage
            if current:
                pieces.append(" ".join(current))
                current, count = [], 0
            pieces.append(" ".join(words[:max_words]))
            words = words[max_words:]
        if count + len(words) > max_words and current:
            pieces.append(" ".join(current))
            current, count = [], 0
        if words:
            current.append(" ".join(words))
            count += len(words)
    if current:
        pieces.append(" ".join(current))
    return pieces


def split_passages(text: str, max_words: int = 150) -> list[str]:
    """Paragraph-aligned passages of at most ``max_words`` words.

    Consecutive paragraphs are packed together while they fit, so headings and short paragraphs
    travel with their neighbours; long paragraphs are cut at sentence ends. 150 words stays inside
    all-MiniLM-L6-v2's 256-token input, so the whole passage counts in its embedding.
    """
    passages: list[str] = []
    current: list[str] = []
    count = 0
    for paragraph in split_paragraphs(text):
        for piece in _pieces(paragraph, max_words):
            n = _words(piece)
            if current and count + n > max_words:
                passages.append("\n\n".join(current))
                current, count = [], 0
            current.append(piece)
            count += n
    if current:
        passages.append("\n\n".join(current))
    return passages


def select_for_goal(text: str, goal: str, max_chars: int, gap: str = "\n\n[...]\n\n") -> str:
    """The parts of ``text`` that best match ``goal``, in document order, within ``max_chars``.

    Short texts come back whole. Otherwise the text is split into passages, the first passage is
    kept (a page's opening usually says what it is about), and the rest are taken by BM25 score
    against the goal until the budget is spent; omitted stretches are marked with ``gap``.
    """
    if len(text) <= max_chars:
        return text
    passages = split_passages(text, max_words=120)
    index = BM25Index()
    for i, passage in enumerate(passages):
        index.add(i, terms(passage))
    scores = index.scores(terms(goal))[: len(passages)]
    order = [0] + sorted(range(1, len(passages)), key=lambda i: (-scores[i], i))
    chosen: set[int] = set()
    used = 0
    for i in order:
        size = len(passages[i]) + len(gap)
        if used + size > max_chars:
            continue
        chosen.add(i)
        used += size
    if not chosen:
        return truncate(text, max_chars)
    out: list[str] = []
    previous = -1
    for i in sorted(chosen):
        if out and i != previous + 1:
            out.append(gap.strip())
        out.append(passages[i])
        previous = i
    if previous != len(passages) - 1:
        out.append(gap.strip())
    return "\n\n".join(out)

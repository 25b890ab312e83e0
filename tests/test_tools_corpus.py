"""The local corpus and the search tool, on the real embedder and real FAISS/BM25."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amb_dspy.config import AmbConfig, ToolSettings
from amb_dspy.tools import (
    CorpusError,
    LocalCorpus,
    SearchError,
    SearchResult,
    SearchTool,
    SerperSearch,
    load_corpus,
    make_search_backend,
)
from amb_dspy.tools.text import html_to_text, select_for_goal, split_passages, truncate

DEMO = Path(__file__).resolve().parent.parent / "datasets" / "demo"

ORCHARD = """# Pell Orchard

Pell Orchard grows heritage pears on the south slope above the village of Tansy.

## Harvest

The pear harvest starts in the second week of August and lasts about five weeks.

## Trees

The oldest tree in the orchard, a Winter Nelis pear, was planted in 1891 by Agnes Pell.
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "places").mkdir(parents=True)
    (root / "orchard.md").write_text(ORCHARD)
    (root / "places" / "tansy.txt").write_text(
        "Tansy is a hill village with one bakery, a stone bridge over the Wend brook and a weekly market on Thursdays."
    )
    (root / "lighthouse.html").write_text(
        "<html><head><title>Corran Lighthouse</title><script>var tracking = 'SECRET_SCRIPT';</script></head>"
        "<body><nav>Home | Contact NAVTEXT</nav><h1>Corran Lighthouse</h1>"
        "<p>The Corran lighthouse was first lit in 1844 and is painted with red and white bands.</p>"
        "<footer>cookie banner FOOTERTEXT</footer></body></html>"
    )
    (root / ".hidden.md").write_text("# Hidden\nthis must not be indexed")
    (root / "scan.pdf").write_bytes(b"%PDF-1.4 binary")
    return root


def test_folder_corpus_loads_documents_with_ids_titles_and_urls(folder, embedder):
    corpus = LocalCorpus.load(folder, embedder)
    ids = sorted(doc.id for doc in corpus.documents)
    assert ids == ["lighthouse.html", "orchard.md", "places/tansy.txt"]
    by_id = {doc.id: doc for doc in corpus.documents}
    assert by_id["orchard.md"].title == "Pell Orchard"
    assert by_id["orchard.md"].url == "corpus://orchard.md"
    assert by_id["lighthouse.html"].title == "Corran Lighthouse"
    assert by_id["places/tansy.txt"].title == "Tansy"
    html_text = by_id["lighthouse.html"].text
    assert "first lit in 1844" in html_text
    assert "SECRET_SCRIPT" not in html_text and "NAVTEXT" not in html_text and "FOOTERTEXT" not in html_text


def test_search_ranks_the_answer_document_first(folder, embedder):
    corpus = LocalCorpus.load(folder, embedder)
    top = corpus.search("when was the lighthouse first lit", k=3)
    assert top[0].url == "corpus://lighthouse.html"
    top = corpus.search("which day is the market in the hill village", k=3)
    assert top[0].url == "corpus://places/tansy.txt"
    top = corpus.search("pear harvest start", k=3)
    assert top[0].url == "corpus://orchard.md"
    assert "second week of August" in top[0].snippet
    assert len({r.url for r in corpus.search("anything", k=10)}) == 3  # one result per document


def test_long_documents_are_split_into_focused_passages(tmp_path, embedder):
    paragraphs = [f"Paragraph {i} talks about routine matter number {i} of the harbour office. " * 6 for i in range(12)]
    paragraphs[9] = "The harbour master's ledger records that the schooner Alcyone sank off Dunmore Point in 1873."
    (tmp_path / "ledger.md").write_text("# Harbour ledger\n\n" + "\n\n".join(paragraphs))
    corpus = LocalCorpus.load(tmp_path, embedder)
    assert corpus.passage_count > 5
    [hit] = corpus.search("where did the schooner Alcyone sink", k=1)
    assert "Dunmore Point" in hit.snippet
    assert len(hit.snippet.split()) <= 100
    assert "Paragraph 0 " not in hit.snippet


def test_jsonl_corpus_groups_passages_and_accepts_field_aliases(tmp_path, embedder):
    rows = [
        {"title": "Brisk Cove", "text": "Brisk Cove is a fishing hamlet.", "url": "https://example.org/brisk"},
        {"title": "Brisk Cove", "contents": "Its lifeboat was founded in 1902.", "url": "https://example.org/brisk"},
        {"id": "mill", "title": "Osier Mill", "passage": ["The mill grinds", "barley and oats."]},
        {"title": "Fenwick Moss", "body": "A raised bog with rare sundews."},
    ]
    path = tmp_path / "passages.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    corpus = LocalCorpus.load(path, embedder)
    assert len(corpus) == 3
    brisk = corpus.document("https://example.org/brisk")
    assert brisk.text == "Brisk Cove is a fishing hamlet.\n\nIts lifeboat was founded in 1902."
    mill = corpus.document("corpus://mill")
    assert mill.title == "Osier Mill" and mill.text == "The mill grinds barley and oats."
    assert corpus.document("fenwick-moss").title == "Fenwick Moss"
    assert corpus.search("when was the lifeboat founded", k=1)[0].url == "https://example.org/brisk"
    assert corpus.search("bog plants sundew", k=1)[0].url == "corpus://fenwick-moss"


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"title": "x", "text": "ok"}\nnot json\n', "passages.jsonl:2: not valid JSON"),
        ('{"title": "no text"}\n', "passages.jsonl:1: no passage text"),
        ('["a list"]\n', "passages.jsonl:1: expected a JSON object"),
        ("\n\n", "holds no passages"),
    ],
)
def test_bad_jsonl_is_one_clear_error(tmp_path, embedder, content, message):
    path = tmp_path / "passages.jsonl"
    path.write_text(content)
    with pytest.raises(CorpusError, match=message.replace(".", r"\.")) as info:
        LocalCorpus.load(path, embedder)
    assert "\n" not in str(info.value)


def test_missing_or_empty_corpus_is_one_clear_error(tmp_path, embedder):
    with pytest.raises(CorpusError, match="no corpus at"):
        LocalCorpus.load(tmp_path / "nope", embedder)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(CorpusError, match="no .txt, .md or .html documents"):
        LocalCorpus.load(tmp_path / "empty", embedder)
    (tmp_path / "notes.csv").write_text("a,b")
    with pytest.raises(CorpusError, match="neither a folder nor a .jsonl"):
        LocalCorpus.load(tmp_path / "notes.csv", embedder)


def test_document_lookup_accepts_the_names_an_agent_may_use(folder, embedder):
    corpus = LocalCorpus.load(folder, embedder)
    for ref in ["corpus://orchard.md", "orchard.md", "Pell Orchard", "pell orchard", "orchard", "corpus://orchard",
                "<corpus://orchard.md>", "'corpus://orchard.md'", "corpus://orchard.md)", "corpus://places/../orchard.md"]:
        doc = corpus.document(ref)
        if ref == "corpus://places/../orchard.md":
            assert doc is None  # ids are names, not paths to resolve
        else:
            assert doc is not None and doc.id == "orchard.md", ref
    assert corpus.document("corpus://places/tansy.txt").id == "places/tansy.txt"
    assert corpus.document("corpus://nothing-here") is None


def test_demo_corpus_needs_two_documents_and_holds_a_conflict(embedder):
    corpus = LocalCorpus.load(DEMO, embedder)
    assert 8 <= len(corpus) <= 15
    festival = corpus.document("tidewater-lantern-festival.md")
    assert "Marrowick" in festival.text and "last Saturday of September" in festival.text
    assert "Sennet" not in festival.text  # the river must come from a second document
    assert "River Sennet flows through" in corpus.document("marrowick.md").text
    blog = corpus.document("corpus://blog-a-weekend-of-lanterns.html")
    assert "middle of August" in blog.text and "September" not in blog.text

    question = ("Which river flows through the city where the Tidewater Lantern Festival is held, "
                "and when does the festival take place?")
    top = [r.url for r in corpus.search(question, k=AmbConfig().search_k)]
    assert top[0] == "corpus://tidewater-lantern-festival.md"
    # the second hop is among a first search's results (the festival's own pages come first: "lantern(s)" and
    # "festival" match them all), and first when asked for
    assert {"corpus://marrowick.md", "corpus://river-sennet.md"} & set(top)
    assert corpus.search("river Marrowick", k=2)[0].url in {"corpus://marrowick.md", "corpus://river-sennet.md"}


# --- the search tool --------------------------------------------------------------------------


class _Backend:
    def __init__(self, results=None, error: Exception | None = None):
        self.results, self.error, self.calls = results or [], error, []

    def search(self, query, k=10):
        self.calls.append((query, k))
        if self.error:
            raise self.error
        return self.results


def test_search_tool_formats_numbered_results():
    backend = _Backend([
        SearchResult(title="Pell Orchard", url="corpus://orchard.md", snippet="Pears\nsince 1891."),
        SearchResult(title="News", url="https://example.org/n", snippet="Harvest begins.", date="Aug 3, 2024"),
    ])
    out = SearchTool(backend)("  pear   harvest ")
    assert backend.calls == [("pear harvest", 10)]
    assert out.splitlines() == [
        "Search for 'pear harvest' found 2 results:",
        "1. [Pell Orchard](corpus://orchard.md)",
        "   Pears since 1891.",
        "2. [News](https://example.org/n)",
        "   Date: Aug 3, 2024",
        "   Harvest begins.",
    ]


def test_search_tool_reports_failures_as_one_line():
    assert SearchTool(_Backend())("nothing").startswith("No results for 'nothing'")
    assert SearchTool(_Backend())("   ").startswith("Error: the search query is empty")
    assert SearchTool(None)("x").startswith("Error: no search backend is configured")
    out = SearchTool(_Backend(error=SearchError("Serper answered HTTP 403: bad key")))("x")
    assert out == "Error: search failed: Serper answered HTTP 403: bad key"
    out = SearchTool(_Backend(error=RuntimeError("boom\nwith a second line")))("x")
    assert out == "Error: search failed: RuntimeError: boom with a second line"


def test_make_search_backend_prefers_a_given_corpus_then_serper(folder, embedder, monkeypatch, tmp_path):
    for name in ("SERPER_API_KEY", "AMB_SERPER_API_KEY", "AMB_CORPUS"):
        monkeypatch.delenv(name, raising=False)
    keyed = ToolSettings(serper_api_key="key-1", corpus=folder)
    local = make_search_backend(keyed, load_corpus(keyed, embedder, cache_dir=tmp_path))  # a corpus the user named wins over the key
    assert isinstance(local, LocalCorpus) and len(local) == 3
    serper = make_search_backend(ToolSettings(serper_api_key="key-1"))
    assert isinstance(serper, SerperSearch) and serper.api_key == "key-1"
    assert load_corpus(ToolSettings(), embedder, cache_dir=tmp_path) is None
    assert make_search_backend(ToolSettings()) is None
    with pytest.raises(CorpusError):
        load_corpus(ToolSettings(corpus=folder / "missing"), embedder, cache_dir=tmp_path)


# --- text helpers -----------------------------------------------------------------------------


def test_split_passages_respects_the_word_limit_and_keeps_all_text():
    text = "\n\n".join(["Short heading", "one two three. " * 50, "x " * 400, "tail paragraph"])
    passages = split_passages(text, max_words=100)
    assert all(len(p.split()) <= 100 for p in passages)
    assert " ".join(" ".join(passages).split()) == " ".join(text.split())


def test_select_for_goal_keeps_the_matching_passage_within_budget():
    filler = [f"Nothing of note happened in week {i} at the depot." * 8 for i in range(40)]
    filler[27] = "The depot's clock tower was rebuilt in 1931 after a fire."
    text = "\n\n".join(["Depot history."] + filler)
    cut = select_for_goal(text, "when was the clock tower rebuilt", 1200)
    assert len(cut) <= 1200
    assert "rebuilt in 1931" in cut and cut.startswith("Depot history.")
    assert "[...]" in cut


def test_select_for_goal_matches_the_goals_words_in_another_form():
    filler = [f"Nothing of note happened in week {i} at the depot." * 8 for i in range(40)]
    filler[27] = "Rebuilding the clocks and towers took two years after the fire of 1929."
    text = "\n\n".join(["Depot history."] + filler)
    cut = select_for_goal(text, "when was the clock tower rebuilt", 1200)  # "clock" and "tower" find "clocks" and "towers"
    assert "fire of 1929" in cut


def test_truncate_marks_what_was_cut():
    assert truncate("short", 10) == "short"
    out = truncate("word " * 100, 50)
    assert out.endswith("characters]") and "truncated" in out and len(out) < 100


def test_html_to_text_keeps_inline_text_on_one_line():
    title, text = html_to_text(b"<title>T</title><p>The river <a href='#'>Sennet</a> flows.</p><ul><li>a</li><li>b</li></ul>")
    assert title == "T"
    assert "The river Sennet flows." in text
    assert "- a\n- b" in text

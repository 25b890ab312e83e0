"""visit, Serper and Jina against a real HTTP server on 127.0.0.1 (no outside network).

Only the extraction LM's words are scripted (dspy.utils.DummyLM); downloads, HTML parsing, size caps,
timeouts and request construction all run for real.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dspy
import pytest
from dspy.utils import DummyLM

from amb_dspy.config import ToolSettings
from amb_dspy.tools import LocalCorpus, SearchTool, SerperSearch, VisitTool
from amb_dspy.tools.types import SearchError

PAGE = b"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>Quarry Hill Observatory</title>
<script>var leak = "SCRIPT_TEXT";</script><style>body{color:red} .STYLE_TEXT{}</style></head>
<body><nav><a href="/">Home</a> NAV_TEXT</nav>
<h1>Quarry Hill Observatory</h1>
<p>The observatory's main telescope, a 60 cm reflector, saw first light on 4 March 1968.</p>
<footer>FOOTER_TEXT</footer></body></html>"""

LONG_FACT = "The observatory's archive holds 41,000 glass photographic plates, the oldest exposed in 1912."


def _long_page() -> bytes:
    paras = [f"<p>Visitor note {i}: the car park and the cafe open at nine and the shop sells postcards. " * 4 + "</p>"
             for i in range(80)]
    paras[63] = f"<p>{LONG_FACT}</p>"
    return ("<html><head><title>Observatory guide</title></head><body><h1>Observatory guide</h1>"
            + "".join(paras) + "</body></html>").encode()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str | None):
        try:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up first (timeout tests)
            pass

    def do_GET(self):
        self.server.requests.append({"method": "GET", "path": self.path, "headers": dict(self.headers)})
        path = self.path
        if path == "/page.html":
            self._send(200, PAGE, "text/html; charset=utf-8")
        elif path == "/long.html":
            self._send(200, _long_page(), "text/html")
        elif path == "/notes.txt":
            self._send(200, b"Tide gauge readings:\n\n  high water 5.2 m   at 06:14\n", "text/plain")
        elif path == "/image.png":
            self._send(200, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200), "image/png")
        elif path == "/blob":
            self._send(200, b"\x00\x01\x02binary\x00" * 50, None)
        elif path == "/big.txt":
            self._send(200, b"lorem ipsum dolor " * 20_000, "text/plain")
        elif path == "/slow":
            time.sleep(1.5)
            self._send(200, b"too late", "text/plain")
        elif path.startswith("/jina/"):
            target = path[len("/jina/"):]
            if "fail" in target:
                self._send(500, b"reader unavailable", "text/plain")
            else:
                self._send(200, f"Title: Reader view\n\nURL Source: {target}\n\nMarkdown Content:\nJINA_BODY".encode(),
                           "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        self.server.requests.append({"method": "POST", "path": self.path, "headers": dict(self.headers),
                                     "body": json.loads(body or b"null")})
        if self.path == "/serper":
            payload = {"organic": [
                {"title": "Quarry Hill Observatory", "link": "https://example.org/qho", "snippet": "A 60 cm\nreflector.",
                 "date": "Mar 4, 1968", "position": 1},
                {"title": "Second", "link": "https://example.org/2", "snippet": "More.", "position": 2},
                {"title": "no link, skipped"},
            ]}
            self._send(200, json.dumps(payload).encode(), "application/json")
        elif self.path == "/serper-denied":
            self._send(403, b'{"message": "Unauthorized."}', "application/json")
        elif self.path == "/serper-slow":
            time.sleep(1.5)
            self._send(200, b"{}", "application/json")
        else:
            self._send(404, b"", None)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def base(server, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    server.requests.clear()
    return f"http://127.0.0.1:{server.server_address[1]}"


class RecordingExtractor:
    """Stands in for the LM-backed extractor where a test only needs to see what it was given."""

    def __init__(self, evidence="", summary="", error: Exception | None = None):
        self.evidence, self.summary, self.error, self.calls = evidence, summary, error, []

    def __call__(self, content, goal):
        self.calls.append((content, goal))
        if self.error:
            raise self.error
        return dspy.Prediction(evidence=self.evidence, summary=self.summary)


def _config(**kw) -> ToolSettings:
    """Settings for these tests: their server is on 127.0.0.1, which visit refuses unless told otherwise."""
    kw.setdefault("jina_api_key", "")
    kw.setdefault("allow_private_urls", True)
    return ToolSettings(**kw)


def test_visit_reads_html_without_scripts_navigation_or_footers(base):
    extractor = RecordingExtractor()
    out = VisitTool(_config(), extractor=extractor)(f"{base}/page.html", "when did the telescope see first light")
    assert out.startswith(f"Content of {base}/page.html (Quarry Hill Observatory):")
    assert "saw first light on 4 March 1968" in out
    for junk in ("SCRIPT_TEXT", "STYLE_TEXT", "NAV_TEXT", "FOOTER_TEXT"):
        assert junk not in out
    assert extractor.calls == []  # short pages come back whole, with no LM call


def test_visit_extracts_long_pages_with_the_configured_lm(base):
    lm = DummyLM([{"evidence": "It holds 41,000 glass plates, the oldest from 1912.",
                   "summary": "The archive has 41,000 plates dating back to 1912."}])
    tool = VisitTool(_config(), extract_chars=3000)
    with dspy.context(lm=lm):
        out = tool(f"{base}/long.html", "how many photographic plates are in the archive")
    assert "Evidence: It holds 41,000 glass plates" in out
    assert "Summary: The archive has 41,000 plates" in out
    [call] = lm.history
    prompt = call["messages"][-1]["content"]
    assert LONG_FACT in prompt  # the cut kept the passage that serves the goal...
    assert len(prompt) < 3000 + 1500  # ...and stayed within the budget (plus the prompt's own frame)
    assert [name for name, _ in tool.extractor.named_predictors()] == ["extract"]


def test_visit_falls_back_to_the_relevant_raw_text_when_extraction_fails(base):
    tool = VisitTool(_config(), extractor=RecordingExtractor(error=RuntimeError("LM down\nretry later")),
                     fallback_chars=1500)
    out = tool(f"{base}/long.html", "how many photographic plates are in the archive")
    assert out.startswith(f"Content of {base}/long.html (Observatory guide) (goal extraction failed: "
                          "RuntimeError: LM down retry later")
    assert LONG_FACT in out
    assert len(out) < 1500 + 300
    empty = VisitTool(_config(), extractor=RecordingExtractor())(f"{base}/long.html", "plates")
    assert "the extractor returned nothing" in empty and LONG_FACT in empty


def test_visit_with_dummy_lm_out_of_answers_falls_back(base):
    with dspy.context(lm=DummyLM([])):
        out = VisitTool(_config())(f"{base}/long.html", "photographic plates archive")
    assert "goal extraction failed" in out and LONG_FACT in out


def test_visit_reads_plain_text(base):
    out = VisitTool(_config(), extractor=RecordingExtractor())(f"{base}/notes.txt", "high water")
    assert "high water 5.2 m at 06:14" in out


@pytest.mark.parametrize("path, kind", [("/image.png", "image/png"), ("/blob", "binary data")])
def test_visit_refuses_binary_content(base, path, kind):
    out = VisitTool(_config(), extractor=RecordingExtractor())(f"{base}{path}", "anything")
    assert out == f"Error: {base}{path} is {kind}, not a web page or text; visit reads HTML and plain text only"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "/etc/passwd", "../secrets.txt", "ftp://example.org/x",
                                 "javascript:alert(1)", "data:text/plain,hello", "http://", "example.org/page"])
def test_visit_refuses_everything_but_http_and_corpus_documents(url):
    out = VisitTool(_config(), extractor=RecordingExtractor())(url, "anything")
    assert out.startswith("Error: cannot visit") and "only http(s) URLs and documents of the local corpus" in out
    assert "\n" not in out and "root:" not in out


def test_visit_times_out_on_a_slow_server(base):
    out = VisitTool(_config(http_timeout_s=0.2), extractor=RecordingExtractor())(f"{base}/slow", "x")
    assert out == f"Error: timed out after 0.2 s fetching {base}/slow"


def test_visit_reports_http_errors_and_unreachable_hosts(base):
    out = VisitTool(_config(), extractor=RecordingExtractor())(f"{base}/missing", "x")
    assert out == f"Error: {base}/missing answered HTTP 404 Not Found"
    out = VisitTool(_config(http_timeout_s=2), extractor=RecordingExtractor())("http://127.0.0.1:9/", "x")
    assert out.startswith("Error: cannot fetch http://127.0.0.1:9/:") and "\n" not in out


def test_visit_stops_downloading_at_the_size_cap(base):
    url = f"{base}/big.txt"  # 360 kB of text
    _, _, text = VisitTool(_config(), extractor=RecordingExtractor(), max_download_bytes=10_000).read(url)
    assert text.endswith("[... page cut at 10000 bytes]")
    assert len(text) <= 10_000 + 40

    extractor = RecordingExtractor(evidence="e", summary="s")
    tool = VisitTool(_config(visit_max_chars=5000), extractor=extractor, max_download_bytes=10_000, extract_chars=8000)
    assert tool(url, "lorem").endswith("Summary: s")
    [(content, goal)] = extractor.calls
    assert goal == "lorem"
    assert len(content) <= 5100 and "[... truncated" in content  # then visit_max_chars applies to the text


def test_visit_serves_corpus_documents_without_network(tmp_path, embedder):
    (tmp_path / "mill.md").write_text("# Osier Mill\n\nThe mill on the Wend grinds barley and oats since 1790.")
    corpus = LocalCorpus.load(tmp_path, embedder)
    tool = VisitTool(_config(), corpus=corpus, extractor=RecordingExtractor())
    for ref in ("corpus://mill.md", "Osier Mill", "mill.md"):
        out = tool(ref, "what the mill grinds")
        assert out.startswith("Content of corpus://mill.md (Osier Mill):") and "barley and oats" in out
    assert tool("corpus://nope.md", "x") == ("Error: no document corpus://nope.md in the local corpus; "
                                            "use a url from the search results")
    no_corpus = VisitTool(_config(), extractor=RecordingExtractor())("corpus://mill.md", "x")
    assert "(no local corpus is loaded)" in no_corpus


def test_visit_serves_a_jsonl_passage_by_its_web_url_offline(tmp_path, embedder):
    path = tmp_path / "passages.jsonl"
    path.write_text(json.dumps({"title": "Weir", "text": "Fennick Weir marks the tidal limit.",
                                "url": "http://127.0.0.1:9/weir"}) + "\n")
    tool = VisitTool(_config(http_timeout_s=1), corpus=LocalCorpus.load(path, embedder), extractor=RecordingExtractor())
    out = tool("http://127.0.0.1:9/weir", "tidal limit")  # nothing listens on port 9: only the corpus can answer
    assert out == "Content of http://127.0.0.1:9/weir (Weir):\nFennick Weir marks the tidal limit."


def test_visit_uses_jina_reader_with_the_key_when_set(base, server):
    tool = VisitTool(_config(jina_api_key="jina-key-7"), extractor=RecordingExtractor(), jina_endpoint=f"{base}/jina/")
    out = tool("https://example.org/article", "anything")
    assert "JINA_BODY" in out and "(Reader view)" in out
    [request] = server.requests
    assert request["path"] == "/jina/https://example.org/article"
    assert request["headers"]["Authorization"] == "Bearer jina-key-7"


def test_visit_falls_back_to_direct_download_when_jina_fails(base, server):
    tool = VisitTool(_config(jina_api_key="k"), extractor=RecordingExtractor(), jina_endpoint=f"{base}/jina/fail/")
    out = tool(f"{base}/page.html", "first light")
    assert "4 March 1968" in out
    assert [r["path"] for r in server.requests] == [f"/jina/fail/{base}/page.html", "/page.html"]


# --- Serper -----------------------------------------------------------------------------------


def test_serper_request_and_results(base, server):
    backend = SerperSearch("serper-key-3", timeout=5, endpoint=f"{base}/serper")
    results = backend.search("quarry hill telescope", k=10)
    [request] = server.requests
    assert request["method"] == "POST"
    assert request["headers"]["X-API-KEY"] == "serper-key-3"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["body"] == {"q": "quarry hill telescope", "num": 10}
    assert [(r.title, r.url, r.date) for r in results] == [
        ("Quarry Hill Observatory", "https://example.org/qho", "Mar 4, 1968"),
        ("Second", "https://example.org/2", None),
    ]
    out = SearchTool(backend)("quarry hill telescope")
    assert out.splitlines()[:4] == [
        "Search for 'quarry hill telescope' found 2 results:",
        "1. [Quarry Hill Observatory](https://example.org/qho)",
        "   Date: Mar 4, 1968",
        "   A 60 cm reflector.",
    ]


def test_serper_failures_become_error_lines(base):
    with pytest.raises(SearchError, match="Serper answered HTTP 403"):
        SerperSearch("bad", endpoint=f"{base}/serper-denied").search("x")
    out = SearchTool(SerperSearch("k", timeout=0.2, endpoint=f"{base}/serper-slow"))("x")
    assert out == "Error: search failed: Serper did not answer within 0.2 s"
    out = SearchTool(SerperSearch("k", timeout=2, endpoint="http://127.0.0.1:9/search"))("x")
    assert out.startswith("Error: search failed: cannot reach Serper:") and "\n" not in out
    with pytest.raises(ValueError, match="needs an API key"):
        SerperSearch("")

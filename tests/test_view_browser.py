"""The HTML view in a real browser: Debian's headless Chromium, driven by Playwright.

The page is opened from a file with a hostile node whose summary holds a script, an image with an
``onerror`` handler and a fetch, all aimed at a real HTTP server on 127.0.0.1 that counts what it is
asked for. The test checks what is drawn against the bank, clicks nodes with the mouse, and checks
that nothing ran and nothing was requested. Skipped, with the reason, only where no browser exists.
"""

from __future__ import annotations

import dataclasses
import http.server
import shutil
import threading
from pathlib import Path

import pytest
from view_banks import GOAL, MERGE_WHY, MERGED, SEARCH, build_bank, hostile_summary

from amb_dspy.view import load_view, write_html
from amb_dspy.view.model import SourceSpan

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary on this machine (apt-get install chromium)")
playwright_api = pytest.importorskip("playwright.sync_api", reason="the dev extra's playwright package is not installed")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - the name http.server calls
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def trap():
    """A real HTTP server on 127.0.0.1 that records every request (there must be none)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _CountingHandler.hits
    server.shutdown()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory, embedder, trap):
    url, _hits = trap
    folder = tmp_path_factory.mktemp("view")
    built = build_bank(folder / "bank.json", embedder, hostile=hostile_summary(url))
    view = load_view(built.path)
    # Provenance is not stored yet: give the merged node a source span so the page's highlighting runs.
    start = SEARCH.index("August")
    nodes = dict(view.nodes)
    nodes[built.merged] = dataclasses.replace(nodes[built.merged], sources=(SourceSpan(built.search_entry, start, start + 6),))
    write_html(dataclasses.replace(view, nodes=nodes), folder / "view.html")
    return built, folder / "view.html"


@pytest.fixture
def browser_page(tmp_path):
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 850}, service_workers="block",
        )
        page = context.pages[0] if context.pages else context.new_page()
        seen = {"requests": [], "errors": [], "dialogs": []}
        context.on("request", lambda request: seen["requests"].append(request.url))
        page.on("pageerror", lambda error: seen["errors"].append(str(error)))
        page.on("console", lambda message: message.type == "error" and seen["errors"].append(message.text))
        page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
        yield page, seen
        context.close()


def click_node(page, node_id: str) -> None:
    """A real mouse click at the node's centre on the canvas."""
    x, y = page.evaluate("id => { const p = ambView.cy.getElementById(id).renderedPosition(); return [p.x, p.y]; }", node_id)
    box = page.locator("#graph").bounding_box()
    page.mouse.click(box["x"] + x, box["y"] + y)


def test_the_page_draws_the_bank_and_shows_a_clicked_node_without_running_its_text(page_file, browser_page, trap, tmp_path):
    built, html = page_file
    page, seen = browser_page
    page.goto(html.as_uri())
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=60_000)

    # what is drawn equals the bank: 3 nodes (two merged into one), 2 edges, every node on screen
    store = built.store
    drawn = page.evaluate("""() => {
        const cy = ambView.cy, box = document.getElementById('graph').getBoundingClientRect();
        const inside = (n) => { const p = n.renderedPosition(); return p.x > 0 && p.y > 0 && p.x < box.width && p.y < box.height; };
        return {nodes: cy.nodes().filter(n => n.visible() && inside(n)).map(n => n.id()).sort(),
                edges: cy.edges().filter(e => e.visible()).map(e => [e.source().id(), e.target().id()].sort()).sort()}
    }""")
    assert drawn["nodes"] == sorted(store.graph.nodes_dict)
    assert drawn["edges"] == sorted(list(edge) for edge in store.graph.edges())
    assert page.locator("#stats").text_content() == "3 nodes · 2 edges · 3 entries · 1 merges"
    assert page.locator("#goal").text_content() == GOAL
    tasks = page.locator("#tasks li").all_text_contents()
    assert len(tasks) == 4 and "CROSS_VALIDATE" in tasks[1] and tasks[2].startswith("failure") and tasks[3].startswith("next")
    # the canvas really has the nodes painted: a canvas pixel under each node's centre is not transparent
    # (read once the first frame is drawn, and polled until every node's pixel is there: the paint lands after
    # data-ready, and a test that read it at once failed now and then)
    page.wait_for_function("() => document.body.dataset.painted === '1'", timeout=30_000)
    painted = page.wait_for_function("""() => {
        const under = ambView.cy.nodes().map(n => {
            const p = n.renderedPosition();
            return [...document.querySelectorAll('#graph canvas')].some(c => {
                const scale = c.width / c.clientWidth;
                return c.getContext('2d').getImageData(Math.round(p.x * scale), Math.round(p.y * scale), 1, 1).data[3] > 0;
            });
        });
        return under.every(Boolean) && under;
    }""", timeout=30_000).json_value()
    assert painted == [True, True, True]
    painted_nowhere = page.evaluate("""() => [...document.querySelectorAll('#graph canvas')].some(c =>
        c.getContext('2d').getImageData(2, 2, 1, 1).data[3] > 0)""")
    assert painted_nowhere is False  # a corner of the graph area is empty: the check above can fail
    screenshot = tmp_path / "view.png"

    # clicking the hostile node shows its summary as text: no element made from it, nothing ran
    click_node(page, built.poster)
    page.wait_for_selector("#node-summary")
    assert page.locator("#node-summary").text_content() == hostile_summary(trap[0])
    assert page.locator("#node-topic").text_content() == "A festival poster"
    assert page.locator("#node-keywords .chip").all_text_contents() == ["poster", "<b>bold</b>"]
    assert page.locator("#panel img, #panel script, #panel b").count() == 0
    assert page.evaluate("window.__pwned") is None

    # clicking the merged node: its summary, merge history and the source span highlighted in its entry
    click_node(page, built.merged)
    page.wait_for_function("id => document.getElementById('node-id')?.textContent === id", arg=built.merged)
    assert page.locator("#node-summary").text_content() == MERGED
    assert "made by a merge" in page.locator("#panel").text_content()
    assert MERGE_WHY in page.locator("#panel").text_content()
    assert page.locator("#panel .entry").count() == 3
    assert page.locator("#panel mark").all_text_contents() == ["August"]
    page.screenshot(path=str(screenshot))
    assert screenshot.stat().st_size > 10_000

    # the search box finds a node by its keywords; Enter shows it
    page.locator("#search").fill("poster")
    assert page.locator("#search-count").text_content() == "1 found"
    page.locator("#search").press("Enter")
    page.wait_for_function("id => document.getElementById('node-id')?.textContent === id", arg=built.poster)

    # nothing was fetched, nothing complained (a blocked request or a refused script would be an error)
    assert seen["requests"] == [html.as_uri()]
    assert trap[1] == []
    assert seen["errors"] == [] and seen["dialogs"] == []


def test_an_empty_bank_renders_with_a_notice(tmp_path, embedder, browser_page):
    from amb_dspy.memory.graph_ops import MemoryStore
    from amb_dspy.storage import InsightDoc

    MemoryStore(embedder, InsightDoc(task_goal="nothing yet")).export(tmp_path / "empty.json")
    html = write_html(load_view(tmp_path / "empty.json"), tmp_path / "empty.html")
    page, seen = browser_page
    page.goto(Path(html).as_uri())
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=30_000)
    assert page.locator("#status").text_content() == "this bank has no nodes"
    assert page.locator("#stats").text_content().startswith("0 nodes · 0 edges")
    assert seen["errors"] == []

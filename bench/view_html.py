"""Is the HTML view usable at 2,000 nodes? A real bank, the real page, headless Chromium.

    python bench/view_html.py --n 2000
    python bench/view_html.py --n 500 --hotpotqa ../shared/datasets/hotpotqa/dev_distractor_300.jsonl
    python bench/view_html.py --bank amb_runs/demo-bank.json        # any bank; built there first if missing

The bank is built with the real MemoryStore and embedding model from HotpotQA's paragraphs (each
question is one memory conversion: its paragraphs become nodes, recorded in one entry; its two
supporting paragraphs are related, plus a few more edges inside the question; every 20th question
merges two of its nodes). Building it is not timed. Then:

* write: ``load_view`` + ``write_html`` (ms) and the page's size;
* ready: from navigation start to the page's layout done and drawn (``body[data-ready]``), in Chromium;
* click: a real mouse click on a node until the side panel shows it and a frame is drawn (p50 of 20);
* zoom / pan: one mouse-wheel step, or one 40 px move of a drag, until the next frame is drawn (p50 and
  p95 of 30 each; the pan is one drag, as a user pans).

Targets (on the 2-core development machine, software rendering): ready < 10 s, click p50 < 250 ms,
zoom and pan p50 < 100 ms. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.storage import InsightDoc, InteractionEntry, node_text  # noqa: E402
from amb_dspy.view import load_view, write_html  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "datasets" / "hotpotqa" / "dev_distractor_300.jsonl"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGETS = {"ready_ms": 10_000, "click_p50_ms": 250, "zoom_p50_ms": 100, "pan_p50_ms": 100}
NEXT_FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"


def _questions(data: Path, n: int):
    """(question item, its new paragraphs as (title, text)) until ``n`` paragraphs, titles never repeated."""
    seen: set[str] = set()
    taken = 0
    for line in data.read_text(encoding="utf-8").splitlines():
        if taken >= n:
            break
        item = json.loads(line)
        paragraphs = [(t, "".join(s).strip()) for t, s in item["context"] if t not in seen][: n - taken]
        seen.update(t for t, _ in paragraphs)
        taken += len(paragraphs)
        if paragraphs:
            yield item, paragraphs


def _draft(title: str, text: str) -> NodeDraft:
    return NodeDraft(text, title, [w for w in title.replace("(", " ").replace(")", " ").split() if len(w) > 3][:4])


def build_bank(path: Path, data: Path, n: int, seed: int = 0) -> MemoryStore:
    rng = random.Random(seed)
    store = MemoryStore(default_embedder(), InsightDoc(task_goal=f"bench: {n} HotpotQA paragraphs as memory"))
    questions = list(_questions(data, n + n // 100 + 20))  # merges remove nodes: take a few more paragraphs
    # One big batch first: the embedder caches vectors by text, so the per-question adds below reuse them.
    store.embedder.embed([node_text(d.summary, d.context, d.keywords) for _, ps in questions for d in (_draft(*p) for p in ps)])
    for number, (item, paragraphs) in enumerate(questions):
        paragraphs = paragraphs[: n - len(store.graph)]
        if not paragraphs:
            break
        nodes = store.add_nodes([_draft(title, text) for title, text in paragraphs])
        entry = InteractionEntry(text="\n\n".join(t for _, t in paragraphs), metadata={"source": "bench", "question": item["question"]})
        store.record_entry(entry, [node.id for node in nodes])
        by_title = {node.context: node for node in nodes}
        support = [by_title[t] for t in dict.fromkeys(t for t, _ in item["supporting_facts"]) if t in by_title]
        if len(support) >= 2:
            store.add_edge(support[0].id, support[1].id)
        for node in nodes:
            other = rng.choice(nodes)
            if rng.random() < 0.3 and other.id != node.id:
                store.add_edge(node.id, other.id)
        if number % 20 == 0 and len(nodes) >= 2:
            a, b = nodes[0], nodes[1]
            store.merge_nodes([a.id, b.id], NodeDraft(f"{a.summary} {b.summary}"[:600], f"{a.context} / {b.context}",
                                                      [*a.keywords[:2], *b.keywords[:2]]), description="bench merge")
    store.export(path)
    return store


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_page(page_file: Path, profile: Path, n_nodes: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium binary: apt-get install chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(profile), executable_path=chromium, headless=True, args=FLAGS,
                                                       viewport={"width": 1400, "height": 850})
        page = context.pages[0] if context.pages else context.new_page()
        requests: list[str] = []
        context.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        page.wait_for_function("document.body.dataset.ready === '1'", timeout=120_000, polling=50)
        ready_ms = page.evaluate(NEXT_FRAME)
        drawn = page.evaluate("() => ambView.cy.nodes().filter(n => n.visible()).length")
        box = page.locator("#graph").bounding_box()
        ids = page.evaluate("() => ambView.cy.nodes().map(n => n.id())")

        clicks = []
        rng = random.Random(1)
        for node_id in rng.sample(ids, 20):
            # zoom in on the node so that the click hits a node (at full view, 2,000 nodes overlap)
            page.evaluate("id => { ambView.cy.zoom(1); ambView.cy.center(ambView.cy.getElementById(id)); }", node_id)
            page.keyboard.press("Escape")
            page.evaluate(NEXT_FRAME)
            x, y = page.evaluate("id => { const p = ambView.cy.getElementById(id).renderedPosition(); return [p.x, p.y]; }", node_id)
            start = page.evaluate("() => performance.now()")
            page.mouse.click(box["x"] + x, box["y"] + y)
            page.wait_for_function("() => document.getElementById('node-id') !== null", polling="raf", timeout=10_000)
            clicks.append(page.evaluate(NEXT_FRAME) - start)
        page.keyboard.press("Escape")
        page.evaluate("() => { ambView.cy.fit(); }")

        zooms, pans = [], []
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(cx, cy)
        for i in range(30):
            start = page.evaluate("() => performance.now()")
            page.mouse.wheel(0, -120 if i < 15 else 120)
            zooms.append(page.evaluate(NEXT_FRAME) - start)
        page.mouse.move(cx, cy)
        page.mouse.down()  # one drag, 30 moves of 40 px: the first frame builds the viewport texture
        for i in range(30):
            start = page.evaluate("() => performance.now()")
            page.mouse.move(cx + (40 if i % 2 == 0 else 0), cy, steps=1)
            pans.append(page.evaluate(NEXT_FRAME) - start)
        page.mouse.up()
        context.close()
    return {"ready_ms": ready_ms, "drawn_nodes": drawn, "expected_nodes": n_nodes, "requests": len(requests) - 1,
            "click_p50_ms": statistics.median(clicks), "click_p95_ms": percentile(clicks, 0.95),
            "zoom_p50_ms": statistics.median(zooms), "zoom_p95_ms": percentile(zooms, 0.95),
            "pan_p50_ms": statistics.median(pans), "pan_p95_ms": percentile(pans, 0.95)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="nodes in the bank")
    parser.add_argument("--hotpotqa", type=Path, default=DEFAULT_DATA, help="HotpotQA JSONL (distractor setting)")
    parser.add_argument("--bank", type=Path, help="view this bank file (built there first, from --n and --hotpotqa, if missing)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        bank = args.bank or folder / "bank.json"
        build_s = None  # the bank was given: nothing built
        if not bank.exists():
            if not args.hotpotqa.is_file():
                raise SystemExit(f"{args.hotpotqa}: no such file (pass --hotpotqa PATH)")
            started = time.perf_counter()
            build_bank(bank, args.hotpotqa, args.n)
            build_s = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        view = load_view(bank)
        write_html(view, folder / "view.html")
        write_ms = (time.perf_counter() - started) * 1000
        size_mb = (folder / "view.html").stat().st_size / 1e6
        result = {"n": len(view.nodes), "edges": len(view.edges), "merges": len(view.merge_events),
                  "build_s": build_s, "write_ms": round(write_ms, 1), "page_mb": round(size_mb, 2)}
        result.update({k: round(v, 1) if isinstance(v, float) else v
                       for k, v in measure_page(folder / "view.html", folder / "profile", len(view.nodes)).items()})
    result["met"] = all(result[k] < limit for k, limit in TARGETS.items()) and result["drawn_nodes"] == result["n"] \
        and result["requests"] == 0
    print(f"{'measure':<16}{'value':>12}  target")
    for key, value in result.items():
        target = f"< {TARGETS[key]}" if key in TARGETS else ""
        print(f"{key:<16}{value!s:>12}  {target}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

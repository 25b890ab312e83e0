"""Render a bank's HTML view in headless Chromium and save a PNG (the README's picture is made this way).

    python docs/screenshot.py amb_runs/demo-bank.json docs/view.png [--node ID]

With ``--node`` (an id or a prefix of one) that node is selected, so the side panel shows it; without
it, the node with the most entries is.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amb_dspy.view import load_view, write_html  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--node", help="the node to show in the side panel")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    view = load_view(args.bank)
    node = view.node(args.node) if args.node else max(view.nodes.values(), key=lambda n: len(n.entry_ids), default=None)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium binary: apt-get install chromium")
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        page_file = write_html(view, Path(folder) / "view.html")
        context = p.chromium.launch_persistent_context(str(Path(folder) / "profile"), executable_path=chromium,
                                                       headless=True, args=FLAGS,
                                                       viewport={"width": args.width, "height": args.height})
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(page_file.as_uri())
        page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=120_000)
        if node is not None:  # selected as a click would (a click at full view may hit an overlapping node)
            page.evaluate("id => { ambView.select(id); }", node.id)
            page.wait_for_function("id => document.getElementById('node-id')?.textContent === id", arg=node.id)
        page.screenshot(path=str(args.png))
        context.close()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

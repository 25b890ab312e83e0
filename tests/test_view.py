"""`amb show` in the terminal, the HTML page's content, and `amb run --trace`, on real banks.

Banks are built with the real MemoryStore (real embeddings, a real merge) and exported; the trace
comes from a whole MemoryBank run in which only the LM's words are scripted.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner
from view_banks import (
    GOAL,
    MERGE_WHY,
    MERGED,
    NOTES,
    SEARCH,
    VALIDATION,
    build_bank,
    hostile_summary,
)

from amb_dspy.view import load_view
from amb_dspy.view.html import page_data, render_html
from amb_dspy.view.model import SourceSpan, source_spans
from amb_dspy.view.terminal import SPAN_STYLE, highlighted
from cli import app

ROOT = Path(__file__).resolve().parent.parent
WIDE = {"COLUMNS": "220"}  # rich folds long cells in narrow terminals; the tests read whole lines


@pytest.fixture(scope="module")
def built(tmp_path_factory, embedder):
    return build_bank(tmp_path_factory.mktemp("bank") / "bank.json", embedder)


def show(*args: str):
    return CliRunner().invoke(app, ["show", *args], env=WIDE)


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- amb show: the whole bank ------------------------------------------------------------------
def test_show_prints_the_insight_doc_nodes_merges_and_totals(built):
    result = show(str(built.path))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"goal: {GOAL}" in out
    assert re.search(r"1\s+NORMAL\s+success\s+Find the festival date\s+July, or August per a blog", out)
    assert re.search(r"2\s+CROSS_VALIDATE\s+success\s+Check July against August\s+July is right", out)
    assert re.search(r"3\s+NORMAL\s+failure\s+Find the poster's printer", out)
    assert re.search(r"next\s+pending\s+Name the river through Port Merrow", out)
    assert "Query Graph: 3 nodes, 2 edges" in out
    # one row per node: short id (M for the merged one), topic, keywords, degree, entries, creation step
    assert re.search(rf"{built.merged[:8]} M\s.*The festival date, verified\s.*festival, July\s.*\s2\s.*\s3\s.*\s2\s", out)
    assert re.search(rf"{built.city[:8]}\s.*Port Merrow, the festival city\s.*Port Merrow, Calder\s.*\s1\s.*\s1\s.*\s0\s", out)
    assert re.search(rf"{built.poster[:8]}\s.*A festival poster\s.*poster, <b>bold</b>\s.*\s1\s.*\s1\s.*\s0\s", out)
    for gone in (built.july, built.august):  # merged away: only in the merge event
        assert f"{gone[:8]} " not in out.split("Merge events")[0]
    assert re.search(rf"{built.july[:8]}, {built.august[:8]}\s.*{built.merged[:8]}\s.*{re.escape(MERGE_WHY)}", out)
    assert "totals: nodes 3, edges 2, entries 3, merges 1, completed tasks 3, pending tasks 1" in out


def test_show_one_node_gives_summary_neighbours_entries_and_merge_history(built):
    result = show(str(built.path), "--node", built.merged[:6])  # a prefix is enough
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "node (made by a merge)" in out and built.merged in out
    assert f"summary   {MERGED}" in out
    assert "Neighbours (2)" in out
    assert re.search(rf"{built.city[:8]}\s.*Port Merrow, the festival city", out)
    assert re.search(rf"{built.poster[:8]}\s.*A festival poster", out)
    # the entries of both merged nodes and the validation record, oldest first, in full
    assert "Entries (3)" in out
    positions = [out.index(text) for text in (NOTES.splitlines()[0], SEARCH, VALIDATION)]
    assert positions == sorted(positions)
    assert "user_context" in out and "cross_validation" in out and '{"task": "Check the date"}' in out
    assert "Merge history" in out and MERGE_WHY in out


def test_bank_text_is_printed_as_written_not_as_console_markup(built):
    result = show(str(built.path), "--node", built.poster)
    assert result.exit_code == 0, result.output
    assert "[bold red]not markup[/]" in result.stdout
    assert '<img src="http://127.0.0.1:9/pwned/img" onerror="window.__pwned = 2">' in result.stdout


@pytest.mark.parametrize("node, expected", [("f" * 32, "no node"), ("", "nodes start with")])
def test_unknown_or_ambiguous_node_is_one_line(built, node, expected):
    assert expected in one_line_error(show(str(built.path), "--node", node))


def test_bad_bank_files_get_the_bank_file_error_and_no_page(tmp_path, built):
    truncated = tmp_path / "truncated.json"
    truncated.write_text(built.path.read_text()[:500])
    not_a_bank = tmp_path / "other.json"
    not_a_bank.write_text('{"hello": "world"}')
    broken = json.loads(built.path.read_text())
    broken["query_graph"]["nodes"][0]["links"].append("nowhere")
    inconsistent = tmp_path / "inconsistent.json"
    inconsistent.write_text(json.dumps(broken))
    short = json.loads(built.path.read_text())  # viewing takes the file's dimension, but every node must have it
    short["query_graph"]["nodes"][1]["embedding"] = [0.5, 0.5, 0.5]
    wrong_dim = tmp_path / "wrong-dim.json"
    wrong_dim.write_text(json.dumps(short))
    page = tmp_path / "view.html"
    cases = [(tmp_path / "missing.json", "no such bank file"), (truncated, "not valid JSON"),
             (not_a_bank, "not an amb-dspy bank file"), (inconsistent, "links to missing node 'nowhere'"),
             (wrong_dim, "has an embedding of shape (3,)")]
    for path, expected in cases:
        line = one_line_error(show(str(path), "--html", str(page)))
        assert str(path) in line and expected in line
        assert not page.exists()


def test_show_needs_a_bank_or_a_trace(built, tmp_path):
    assert "give a bank file to show" in one_line_error(show())
    assert "--node and --html need a bank file" in one_line_error(show("--html", str(tmp_path / "v.html"),
                                                                       "--trace", str(tmp_path / "t.jsonl")))
    assert "does not exist" in one_line_error(show(str(built.path), "--html", str(tmp_path / "no" / "v.html")))


def test_show_offers_only_options_it_uses(built):
    """Long-term memory options belong to `amb run` and `amb memory`; `amb show` accepted and ignored them before."""
    result = show(str(built.path), "--remember")
    assert result.exit_code == 2 and "No such option" in result.output
    assert "--recall" not in show("--help").output


def test_amb_show_loads_no_model_library(built):
    code = f"import cli; cli.app(['show', {str(built.path)!r}])"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Query Graph: 3 nodes" in out.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "sentence_transformers", "faiss", "dspy", "llama_cpp", "transformers"}


# --- creation steps and source spans -----------------------------------------------------------
def test_creation_steps_follow_the_entries_recorded_before_each_node(built):
    view = load_view(built.path)
    steps = {node_id: view.nodes[node_id].step for node_id in (built.city, built.poster, built.merged)}
    assert steps == {built.city: 0, built.poster: 0, built.merged: 2}
    assert view.steps == 3
    assert list(view.nodes) == [built.city, built.poster, built.merged]  # creation order
    assert [e.entry_id for e in view.node_entries(built.merged)] == [built.notes_entry, built.search_entry,
                                                                      built.validation_entry]
    assert [m.description for m in view.merge_history(built.merged)] == [MERGE_WHY]
    assert view.merge_history(built.city) == []


def test_source_spans_are_read_from_dicts_or_objects_and_highlighted(built):
    blog, august = SEARCH.index("A travel blog"), SEARCH.index("August")
    node = SimpleNamespace(sources=[
        {"entry_id": built.search_entry, "start": blog, "end": blog + 13},
        SimpleNamespace(entry_id=built.search_entry, spans=[[august, august + 6], [5, 5], [-1, 3]]),  # empty, negative: dropped
        {"entry_id": 7, "start": 0, "end": 1},  # not an entry id: dropped
    ])
    spans = source_spans(node)
    assert spans == (SourceSpan(built.search_entry, blog, blog + 13), SourceSpan(built.search_entry, august, august + 6))
    assert source_spans(SimpleNamespace()) == () and source_spans({"sources": None}) == ()

    view = load_view(built.path)
    merged = dataclasses.replace(view.nodes[built.merged], sources=spans)
    entry = view.entries[built.search_entry]
    text = highlighted(entry, merged)
    marked = [(s.start, s.end) for s in text.spans if str(s.style) == SPAN_STYLE]
    assert [entry.text[a:b] for a, b in marked] == ["A travel blog", "August"]
    assert highlighted(view.entries[built.notes_entry], merged).spans == []  # other entries untouched


# --- the HTML page, read as text (tests/test_view_browser.py opens it in Chromium) ---------------
def test_page_is_self_contained_and_embeds_the_bank_as_inert_json(built):
    view = load_view(built.path)
    page = render_html(view)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)\s*=", page, re.I)  # nothing loaded from anywhere
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    data = re.search(r'<script type="application/json" id="bank-data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data
    assert json.loads(data) == json.loads(json.dumps(page_data(view)))
    assert hostile_summary() not in page and "<img src=" not in page
    # the hostile text is there, escaped, and comes back intact from the JSON
    assert any(n["summary"] == hostile_summary() for n in json.loads(data)["nodes"])
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 5 and "cytoscape" in scripts[0] and "cytoscapeFcose" in scripts[3]


def test_bank_text_cannot_break_out_of_the_page_template(built, tmp_path, embedder):
    sneaky = build_bank(tmp_path / "sneaky.json", embedder, hostile="@@SCRIPTS@@ @@DATA@@ </script><script>x()</script>")
    page = render_html(load_view(sneaky.path))
    assert page.count("<script>") == 5  # the vendored scripts and the page's own, no more
    data = re.search(r'id="bank-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["nodes"][1]["summary"] == "@@SCRIPTS@@ @@DATA@@ </script><script>x()</script>"

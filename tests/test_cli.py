"""The `amb` command: fast help, and bad input refused in one line with a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parent.parent


def test_help_imports_no_heavy_library():
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cli; cli.app(['--help'])"],
                         capture_output=True, text=True, cwd=ROOT)
    assert "run" in out.stdout and "optimize" in out.stdout and "eval" in out.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "sentence_transformers", "faiss", "dspy", "llama_cpp", "transformers",
                              "mcp", "pydantic_ai", "langgraph"}


def test_version():
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0 and result.stdout.startswith("amb-dspy ")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01binary\x00")
    huge = tmp_path / "huge.txt"
    huge.write_text("word " * 2_100_000)  # about 10 MB
    fake_image = tmp_path / "photo.png"
    fake_image.write_text("not an image")
    return {"binary": binary, "huge": huge, "fake_image": fake_image, "missing": tmp_path / "missing.txt",
            "no_corpus": tmp_path / "no-corpus", "corpus": ROOT / "datasets" / "demo"}


@pytest.mark.parametrize("case, args, expected", [
    ("empty task", ["   "], "the task is empty"),
    ("missing context file", ["q", "--context-file", "{missing}"], "no such file"),
    ("binary context file", ["q", "--context-file", "{binary}"], "binary data"),
    ("10 MB context", ["q", "--context-file", "{huge}"], "over the 1.0 MB limit"),
    ("unreadable image", ["q", "--image", "{fake_image}"], "not a PNG"),
    ("missing image", ["q", "--image", "{missing}"], "no such file"),
    ("missing corpus", ["q", "--corpus", "{no_corpus}"], "no such file or folder"),
    ("bad gguf", ["q", "--lm", "gguf:{missing}"], "GGUF file not found"),
])
def test_bad_input_exits_non_zero_with_one_line(files, tmp_path, monkeypatch, case, args, expected):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    args = [a.format(**files) for a in args]
    result = CliRunner().invoke(app, ["run", *args, "--lm", "local"] if "--lm" not in args else ["run", *args])
    assert result.exit_code == 1, (case, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (case, result.stderr)
    assert not (tmp_path / "temp").exists() or not any((tmp_path / "temp").rglob("*"))

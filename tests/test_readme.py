"""The README's examples run as written: every Python block is run, as a user would paste it, in a fresh folder
beside the demo data; every `amb` command line in its bash blocks names flags the command has.

A block that generates with the embedded llama.cpp model is marked e2e (it takes minutes on 2 cores).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def _param(index: int, code: str):
    first = next(line for line in code.splitlines() if line.strip() and not line.startswith(("import", "from")))
    marks = [pytest.mark.e2e] if 'lm="local"' in code else []
    return pytest.param(code, id=f"{index}-{first[:40]}", marks=marks)


@pytest.mark.parametrize("code", [_param(i, code) for i, code in enumerate(blocks("python"))])
def test_a_python_block_runs_as_written(code, tmp_path):
    (tmp_path / "datasets").symlink_to(ROOT / "datasets")  # the examples name datasets/... as from a checkout
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(tmp_path / "storage"),
           "AMB_TEMP_DIR": str(tmp_path / "temp"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for key in ("OPENAI_API_KEY", "DEEPSEEK_API_KEY", "LLM_API_KEY", "LLM_BASE_URL", "AMB_LM"):
        env.pop(key, None)  # offline, as a new user: no key, no server
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example prints nothing"


def test_the_python_examples_live_in_the_demo_world():
    code = "\n".join(blocks("python"))
    assert "Sennet" in code and "Marrowick" in code
    assert not re.search(r"Port Merrow|Calder|Seine|Paris", README)


def _amb_lines() -> list[list[str]]:
    """Every `amb ...` command of the bash blocks, continuation lines joined and comments dropped."""
    commands = []
    for body in blocks("bash"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("amb "):
                commands.append(shlex.split(line)[1:])
    return commands


@pytest.mark.parametrize("args", _amb_lines(), ids=lambda args: " ".join(args)[:50])
def test_an_amb_command_in_the_readme_names_only_flags_the_command_has(args):
    words = [a for a in args if not a.startswith("-")]
    command = words[:2] if words[:1] in (["memory"], ["keys"]) else words[:1]  # command groups: their sub-command
    result = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert flag.split("/")[0] in result.output, (args, flag)


def test_the_readme_is_a_guide_not_a_record():
    assert len(README.splitlines()) <= 450
    for page in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / page).is_file(), page

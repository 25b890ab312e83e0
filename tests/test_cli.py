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


@pytest.mark.parametrize("args, expected", [
    (["run", "q", "--lm", "nosuchprovider/model"], "unknown LM provider 'nosuchprovider'"),
    (["run", "q", "--lm", "deepsek/deepseek-chat"], "did you mean deepseek/...?"),
    (["run", "q", "--policy", "bogus"], "bad setting policy='bogus' (--policy or AMB_POLICY)"),
    (["ingest", "--context-file", "{notes}", "--export", "{out}", "--policy", "bogus"], "bad setting policy="),
    (["ingest", "--context-file", "{notes}", "--export", "{out}", "--lm", "nosuchprovider/m"], "unknown LM provider"),
    (["eval", "--policy", "bogus"], "bad setting policy="),
    (["serve", "--policy", "bogus"], "bad setting policy="),
])
def test_a_bad_setting_fails_before_any_work_in_one_line_with_exit_2(tmp_path, monkeypatch, args, expected):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    notes, out = tmp_path / "notes.md", tmp_path / "bank.json"
    notes.write_text("The River Sennet flows through Marrowick.")
    result = CliRunner().invoke(app, [a.format(notes=notes, out=out) for a in args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert "errors.pydantic.dev" not in result.stderr and "BadRequestError" not in result.stderr
    assert not out.exists() and not (tmp_path / "storage").exists()  # nothing was done


@pytest.mark.parametrize("variable, value, expected", [
    ("AMB_POLICY", "bogus", "AMB_POLICY"),
    ("AMB_AGENT_LMS", '{"planning": "nosuchprovider/m"}', "unknown LM provider 'nosuchprovider'"),
    ("AMB_AGENT_LMS", "{not json", 'field "agent_lms"'),
    ("AMB_RANK_WEIGHTS", '{"nod_weight": 1}', "bad setting rank_weights.nod_weight=1 (--rank-weights or AMB_RANK_WEIGHTS)"),
    ("AMB_RANK_WEIGHTS", '{"flat_share": 2}', "bad setting rank_weights.flat_share=2"),
    ("AMB_RANK_WEIGHTS", "{not json", 'field "rank_weights"'),
])
def test_a_bad_setting_from_the_environment_is_named_too(monkeypatch, variable, value, expected):
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(app, ["run", "q"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and expected in lines[0], result.stderr


def test_storage_defaults_to_the_per_user_data_folder_and_a_named_path_stays_relative(monkeypatch):
    from platformdirs import user_data_dir

    from amb_dspy.config import AmbConfig

    monkeypatch.delenv("AMB_STORAGE_DIR", raising=False)
    default = AmbConfig().storage_dir
    assert default == Path(user_data_dir("amb-dspy")) / "storage" and default.is_absolute()
    monkeypatch.setenv("AMB_STORAGE_DIR", "my-storage")
    assert AmbConfig().storage_dir == Path("my-storage")  # relative to where amb runs, as the user wrote it


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    import dspy

    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    yield
    dspy.configure(lm=None)


@pytest.fixture
def sigterm_caught():
    """SIGTERM recorded instead of ending the test process, unless the command installs its own handler."""
    import signal

    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
    yield received
    signal.signal(signal.SIGTERM, previous)


def _terminate(call):
    import os
    import signal

    os.kill(os.getpid(), signal.SIGTERM)  # a `kill` while this LM call is in flight
    raise AssertionError("SIGTERM did not stop the command")


def _notes(tmp_path: Path) -> Path:
    path = tmp_path / "notes.md"
    path.write_text("The Tidewater Lantern Festival is held in Marrowick on the last Saturday of September.\n\n"
                    "Marrowick is a port city on the Gull Coast; the River Sennet flows through it.\n")
    return path


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_partial_bank_is_exported(cli_env, sigterm_caught, tmp_path):
    import dspy
    from scripted_lm import ScriptedLM
    from test_bank import compress, one_cluster_per_segment, unrelated

    dspy.configure(lm=ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                                 planning=_terminate))
    out = tmp_path / "partial.json"
    result = CliRunner().invoke(app, ["run", "When is the festival?", "--context-file", str(_notes(tmp_path)),
                                      "--export", str(out)])
    assert result.exit_code == 130, result.output
    assert "interrupted: memory kept 2 nodes and 1 entries" in result.stderr and out.is_file()
    assert not sigterm_caught  # the command's handler took it, and the test's came back after


def test_sigterm_stops_an_ingest_with_the_memory_kept_line_and_the_bank_written(cli_env, sigterm_caught, tmp_path):
    import dspy
    from scripted_lm import ScriptedLM
    from test_bank import compress, one_cluster_per_segment

    dspy.configure(lm=ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=_terminate))
    out = tmp_path / "partial.json"
    result = CliRunner().invoke(app, ["ingest", "--context-file", str(_notes(tmp_path)), "--export", str(out),
                                      "--policy", "lm"])
    assert result.exit_code == 130, result.output
    assert "interrupted: memory kept" in result.stderr and out.is_file()


def test_ingest_shows_progress_and_no_lm_notice_with_the_heuristic_policy(cli_env, tmp_path):
    out = tmp_path / "bank.json"
    result = CliRunner().invoke(app, ["ingest", "--context-file", str(_notes(tmp_path)), "--export", str(out),
                                      "--policy", "heuristic"])
    assert result.exit_code == 0, result.output
    assert "SmolLM2" not in result.stderr and "no LM configured" not in result.stderr
    progress = [line for line in result.stderr.splitlines() if " | loop " in line]
    assert progress and "nodes" in progress[-1] and out.is_file()


def test_ingest_on_the_embedded_model_says_nothing_of_an_lm_it_does_not_call(cli_env, tmp_path, monkeypatch):
    """With no LM named and no key, the embedded model stands in; it takes the direct strategy, whose memory
    agents run on their policies: no notice that answers will be weak, and no LM call."""
    for name in ("AMB_LM", "AMB_LLM_API_KEY", "LLM_API_KEY", "AMB_LLM_BASE_URL", "LLM_BASE_URL", "DEEPSEEK_API_KEY",
                 "AMB_POLICY", "AMB_STRATEGY"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "bank.json"
    result = CliRunner().invoke(app, ["ingest", "--context-file", str(_notes(tmp_path)), "--export", str(out)])
    assert result.exit_code == 0, result.output
    assert "answers will be weak" not in result.stderr and "LM calls 0" in " ".join(result.output.split())

"""Compiled agents on disk: JSON state plus manifest, checked loading, and pickles only on request."""

from __future__ import annotations

import json

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.agents import AnalysisAgent, NodeInfo, StructureAgent
from amb_dspy.agents.compiled import (
    MANIFEST_FILE,
    SCHEMA_VERSION,
    AgentRecord,
    CompiledError,
    Manifest,
    apply_compiled,
    load_agents,
    read_manifest,
    save_agent,
    save_agents,
)
from amb_dspy.config import AmbConfig

INSTRUCTIONS = "Compiled instructions: a changed date or number between two nodes is always a conflict."
DEMO = dspy.Example(
    new_node={"summary": "Zanzibar Quill was founded in 1911.", "context": "Zanzibar Quill", "keywords": ["Quill"]},
    candidates=[{"number": 1, "summary": "Zanzibar Quill was founded in 1921.", "context": "Zanzibar Quill", "keywords": ["Quill"]}],
    relationships=[{"candidate": 1, "relationship": "conflict", "reasoning": "1911 vs 1921", "conflict_description": "founding year"}],
    augmented=True,
)


def compiled_analysis() -> AnalysisAgent:
    agent = AnalysisAgent()
    agent.analyze.signature = agent.analyze.signature.with_instructions(INSTRUCTIONS)
    agent.analyze.demos = [DEMO]
    return agent


def record(**changes) -> AgentRecord:
    fields = dict(file="analysis.json", predictors=[], optimizer="bootstrap", model="scripted/lm", dataset="hotpotqa:x",
                  train_size=7, dev_size=3, metric="analysis_relation_accuracy", score_before=0.5, score_after=0.75)
    return AgentRecord(**{**fields, **changes})


def analyse(agent: AnalysisAgent) -> ScriptedLM:
    lm = ScriptedLM(analysis=[{"relationships": [{"candidate": 1, "relationship": "unrelated", "reasoning": "no"}]}])
    with dspy.context(lm=lm):
        agent(new_node=NodeInfo(summary="Paris is in France.", context="Paris", keywords=["Paris"]),
              candidates=[NodeInfo(id="n1", summary="Tokyo is in Japan.", context="Tokyo", keywords=["Tokyo"])])
    return lm


def test_saved_state_loads_and_reaches_the_prompt(tmp_path):
    manifest_path = save_agent(tmp_path, "analysis", compiled_analysis(), record())
    assert manifest_path == tmp_path / MANIFEST_FILE
    state = json.loads((tmp_path / "analysis.json").read_text())
    assert state["analyze"]["signature"]["instructions"] == INSTRUCTIONS and len(state["analyze"]["demos"]) == 1
    manifest = json.loads(manifest_path.read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["dspy_version"] == dspy.__version__
    assert manifest["agents"]["analysis"]["predictors"] == ["analyze"]
    assert manifest["agents"]["analysis"]["score_after"] == 0.75
    assert not list(tmp_path.glob(".*"))  # no temporary files left

    agents = load_agents(tmp_path)
    assert list(agents) == ["analysis"] and isinstance(agents["analysis"], AnalysisAgent)
    lm = analyse(agents["analysis"])
    prompt = "\n".join(m["content"] for m in lm.calls[0].messages)
    assert INSTRUCTIONS in prompt and "Zanzibar Quill was founded in 1921" in prompt

    plain = analyse(AnalysisAgent())
    assert "Zanzibar" not in "\n".join(m["content"] for m in plain.calls[0].messages)


def test_apply_compiled_loads_into_the_given_instances(tmp_path):
    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    mine = {"analysis": AnalysisAgent(), "structure": StructureAgent()}
    untouched = mine["structure"].dump_state()
    result = apply_compiled(mine, tmp_path)
    assert result["analysis"] is mine["analysis"] and mine["analysis"].analyze.demos
    assert result["structure"].dump_state() == untouched


def test_agents_saved_at_different_times_share_a_directory(tmp_path):
    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    structure = StructureAgent()
    structure.summarize.signature = structure.summarize.signature.with_instructions("Compiled: bullet points only.")
    save_agent(tmp_path, "structure", structure, record(file="structure.json", metric="structure_facts_x_compression"))
    manifest = read_manifest(tmp_path)
    assert sorted(manifest.agents) == ["analysis", "structure"]
    assert manifest.agents["analysis"].metric == "analysis_relation_accuracy"
    loaded = load_agents(tmp_path)
    assert loaded["structure"].summarize.signature.instructions == "Compiled: bullet points only."
    assert loaded["analysis"].analyze.signature.instructions == INSTRUCTIONS


def _edit_manifest(directory, change):
    path = directory / MANIFEST_FILE
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda d: (d / MANIFEST_FILE).unlink(), r"manifest.json: missing; .* is not a compiled-programs directory"),
        (lambda d: _edit_manifest(d, lambda m: m.update(schema_version=99)), r"schema version 99, but this amb-dspy reads version 1"),
        (lambda d: _edit_manifest(d, lambda m: m.pop("schema_version")), r"schema version None"),
        (lambda d: _edit_manifest(d, lambda m: m.update(schema_version=True)), r"schema version True"),  # JSON true == 1
        (lambda d: _edit_manifest(d, lambda m: m["agents"].update(executor=m["agents"]["analysis"])), r"unknown agent\(s\) executor"),
        (lambda d: _edit_manifest(d, lambda m: m["agents"]["analysis"].update(predictors=["judge"])),
         r"compiled for predictors \['judge'\] but AnalysisAgent has \['analyze'\]"),
        (lambda d: _edit_manifest(d, lambda m: m.update(agents={})), r"lists no agents"),
        (lambda d: (d / "analysis.json").unlink(), r"analysis.json: missing, though .*manifest.json lists agent analysis"),
        (lambda d: (d / "analysis.json").write_text('{"judge": {}}'), r"does not fit the analysis agent"),
        (lambda d: (d / MANIFEST_FILE).write_text("{not json"), r"manifest.json: unreadable"),
    ],
)
def test_broken_directories_give_one_line_errors(tmp_path, breakage, message):
    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    breakage(tmp_path)
    with pytest.raises(CompiledError, match=message) as error:
        load_agents(tmp_path)
    assert "\n" not in str(error.value)


def test_missing_directory(tmp_path):
    with pytest.raises(CompiledError, match=r"no such directory; compile agents into it with `amb optimize"):
        load_agents(tmp_path / "nowhere")


def test_a_bad_file_changes_no_agent(tmp_path):
    save_agents(tmp_path, {"analysis": compiled_analysis(), "structure": StructureAgent()})
    (tmp_path / "structure.json").write_text('{"summarize": {"demos": "not a list"}}')
    mine = {"analysis": AnalysisAgent(), "structure": StructureAgent()}
    before = {name: agent.dump_state() for name, agent in mine.items()}
    with pytest.raises(CompiledError, match="structure"):
        apply_compiled(mine, tmp_path)
    assert {name: agent.dump_state() for name, agent in mine.items()} == before


def test_saving_over_a_foreign_manifest_writes_nothing(tmp_path):
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"schema_version": 0, "agents": {}}))
    with pytest.raises(CompiledError, match="schema version 0"):
        save_agent(tmp_path, "analysis", compiled_analysis())
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_FILE]
    with pytest.raises(CompiledError, match="unknown agent"):
        save_agents(tmp_path / "new", {"executor": AnalysisAgent()})


def test_pickles_load_only_when_allowed(tmp_path):
    agent = compiled_analysis()
    save_agent(tmp_path, "analysis", agent, record())
    agent.save(str(tmp_path / "analysis.pkl"))
    _edit_manifest(tmp_path, lambda m: m["agents"]["analysis"].update(file="analysis.pkl"))
    with pytest.raises(CompiledError, match=r"analysis.pkl: a pickle, which can run arbitrary code.*allow_pickle=True"):
        load_agents(tmp_path)
    assert load_agents(tmp_path, allow_pickle=True)["analysis"].analyze.demos[0].new_node["summary"].startswith("Zanzibar")

    agent.save(str(tmp_path / "analysis_program"), save_program=True)  # a whole pickled program
    _edit_manifest(tmp_path, lambda m: m["agents"]["analysis"].update(file="analysis_program"))
    with pytest.raises(CompiledError, match="a pickle"):
        load_agents(tmp_path)
    program = load_agents(tmp_path, allow_pickle=True)["analysis"]
    assert isinstance(program, AnalysisAgent) and program.analyze.signature.instructions == INSTRUCTIONS


def test_a_program_pickled_when_agents_held_the_whole_config_still_loads():
    agent = AnalysisAgent(AmbConfig(analysis_window=3000, chunk_ratio=0.5, lm_threads=2))
    state = agent.__getstate__()
    old = {key: value for key, value in state.items() if key not in ("settings", "configured_threads")}
    old["config"] = AmbConfig(analysis_window=3000, chunk_ratio=0.5, lm_threads=2)  # as pickled before
    loaded = AnalysisAgent.__new__(AnalysisAgent)
    loaded.__setstate__(old)
    assert loaded.settings.analysis_window == 3000 and loaded.settings.chunk_ratio == 0.5
    assert loaded.lm_threads() == 2 and "config" not in vars(loaded)


def test_load_agents_is_exported_lazily_from_the_package():
    import amb_dspy
    import amb_dspy.agents.compiled

    assert amb_dspy.load_agents is amb_dspy.agents.compiled.load_agents


def test_the_old_module_name_is_the_moved_module_itself():
    """docs/reference.md names ``amb_dspy.compiled.CompiledError``: the old name still imports, and is the
    same module (so a patch through either name changes the one the bank reads)."""
    import amb_dspy.agents.compiled
    import amb_dspy.compiled
    from amb_dspy.compiled import CompiledError as old_name

    assert amb_dspy.compiled is amb_dspy.agents.compiled and old_name is amb_dspy.agents.compiled.CompiledError


def test_the_manifest_records_the_installed_package_version():
    from importlib.metadata import version

    assert Manifest.current().amb_dspy_version == version("amb-dspy")


# --- tampered state and manifests (issue 15) ---------------------------------------------------------


def _edit_state(directory, change):
    path = directory / "analysis.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))


TAMPERED_STATES = {
    "an lm": (lambda s: s["analyze"].update(lm={"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9"}),
              "analyze.lm"),
    "a config": (lambda s: s["analyze"].update(config={"temperature": 2}), "analyze.config: Extra inputs"),
    "a forward": (lambda s: s.update(forward="print('hi')"), r"holds \['analyze', 'forward'\]"),
    "a predictor attribute": (lambda s: s["analyze"].update(forward="x"), "analyze.forward: Extra inputs"),
    "list instructions": (lambda s: s["analyze"]["signature"].update(instructions=["a", "b"]), "instructions"),
    "numeric instructions": (lambda s: s["analyze"]["signature"].update(instructions=7), "instructions"),
    "a field without prefix": (lambda s: s["analyze"]["signature"]["fields"][0].pop("prefix"), "prefix"),
    "a missing field": (lambda s: s["analyze"]["signature"]["fields"].pop(), "fields: 2 fields, but the predictor has 3"),
    "demos as text": (lambda s: s["analyze"].update(demos="not a list"), "demos"),
    "a demo that is no object": (lambda s: s["analyze"].update(demos=[["a"]]), "demos"),
    "no signature": (lambda s: s["analyze"].pop("signature"), "signature"),
    "bad metadata": (lambda s: s.update(metadata={"dependency_versions": {"dspy": 3}}), "metadata"),
    "a list for a predictor": (lambda s: s.update(analyze=[]), "analyze: Input should be a valid dictionary"),
}


@pytest.mark.parametrize("case", list(TAMPERED_STATES))
def test_tampered_state_is_refused_and_changes_nothing(tmp_path, case):
    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    change, message = TAMPERED_STATES[case]
    _edit_state(tmp_path, change)
    mine = {"analysis": AnalysisAgent()}
    before = mine["analysis"].dump_state()
    with pytest.raises(CompiledError, match=message) as error:
        apply_compiled(mine, tmp_path)
    assert "\n" not in str(error.value) and "does not fit the analysis agent" in str(error.value)
    assert mine["analysis"].dump_state() == before and mine["analysis"].analyze.lm is None


def test_a_deeply_nested_or_huge_state_file_is_refused(tmp_path, monkeypatch):
    from amb_dspy.agents import compiled

    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    (tmp_path / "analysis.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CompiledError, match="nested too deeply"):
        load_agents(tmp_path)
    save_agent(tmp_path, "analysis", compiled_analysis(), record())
    monkeypatch.setattr(compiled, "MAX_STATE_BYTES", 100)
    with pytest.raises(CompiledError, match="over the 100-byte limit"):
        load_agents(tmp_path)


@pytest.mark.parametrize("file", ["../outside.json", "{outside}", "sub/analysis.json", "..", ""])
def test_a_manifest_file_outside_the_directory_is_refused(tmp_path, file):
    directory = tmp_path / "compiled"
    save_agent(directory, "analysis", compiled_analysis(), record())
    (tmp_path / "outside.json").write_text((directory / "analysis.json").read_text())
    (directory / "sub").mkdir()
    (directory / "sub" / "analysis.json").write_text((directory / "analysis.json").read_text())
    file = file.format(outside=tmp_path / "outside.json")
    _edit_manifest(directory, lambda m: m["agents"]["analysis"].update(file=file))
    with pytest.raises(CompiledError, match="is not a file name inside the directory"):
        load_agents(directory)


def test_a_state_file_that_links_outside_the_directory_is_refused(tmp_path):
    directory = tmp_path / "compiled"
    save_agent(directory, "analysis", compiled_analysis(), record())
    outside = tmp_path / "outside.json"
    (directory / "analysis.json").rename(outside)
    (directory / "analysis.json").symlink_to(outside)
    with pytest.raises(CompiledError, match="leads outside"):
        load_agents(directory)

"""Issue 16 through the bank: a run with remember=True writes its conclusion; a later run recalls it in
<memory> ("from earlier tasks"); a store that cannot be opened is a notice and the run goes on.
Only the LM's words are scripted; the SQLite store, the embedder and the bank run for real."""

from __future__ import annotations

from scripted_lm import ScriptedLM
from test_bank import EXTRACT, FINISH, REACT, compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.longterm.sqlite import SQLiteStore

ANSWER = "The Tidewater Lantern Festival is held on the second Saturday of July"


def scripted(answer: str) -> ScriptedLM:
    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                      planning=lambda c: {"executed_status": "success", "executed_context": "", "next_task": ""},
                      **{REACT: lambda c: FINISH, EXTRACT: lambda c: {"reasoning": "r", "answer": answer}})


def test_a_remembered_conclusion_is_recalled_by_a_later_task(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=1, remember=True)
    first = MemoryBank(config, lm=scripted(ANSWER), embedder=embedder).run("When is the Tidewater Lantern Festival?")
    assert first.answer == ANSWER and not [n for n in first.notices if n.startswith("not remembered")]

    later = scripted("July")
    second = MemoryBank(config.model_copy(update={"remember": False}), lm=later, embedder=embedder).run(
        "What date is the Tidewater Lantern Festival held?")
    prompts = [c.messages[-1]["content"] for c in later.calls_for(REACT)]
    assert any("earlier task" in p.lower() and "second Saturday of July" in p for p in prompts)
    assert second.answer == "July"

    quiet = scripted("x")
    unrelated_store = MemoryBank(config.model_copy(update={"recall": False, "remember": False}), lm=quiet,
                                 embedder=embedder)
    unrelated_store.run("When is the Tidewater Lantern Festival?")
    assert not any("second Saturday" in c.messages[-1]["content"] for c in quiet.calls_for(REACT))


def test_an_unreachable_server_gives_way_to_the_local_store_and_the_run_goes_on(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=1, remember=True,
                       recall=True, longterm_backend="chroma", longterm_url="http://127.0.0.1:9")
    result = MemoryBank(config, lm=scripted(ANSWER), embedder=embedder).run("When is the Tidewater Lantern Festival?")
    assert result.answer == ANSWER
    fallback = [n for n in result.notices if "using the local SQLite store this run" in n]
    assert fallback and fallback[0].startswith("long-term store http://127.0.0.1:9: ") and "\n" not in fallback[0]
    assert not [n for n in result.notices if n.startswith("not remembered")]
    with SQLiteStore(config.storage_dir / "longterm.sqlite3", embedder) as local:
        assert any(ANSWER in item.content for item in local.list("default", kind="conclusion"))


def test_a_store_that_cannot_be_opened_at_all_is_a_notice_and_the_run_goes_on(tmp_path, embedder):
    (tmp_path / "storage" / "longterm.sqlite3").mkdir(parents=True)  # not even the local store opens
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=1, remember=True,
                       recall=True, longterm_backend="chroma", longterm_url="http://127.0.0.1:9")
    result = MemoryBank(config, lm=scripted(ANSWER), embedder=embedder).run("When is the festival?")
    assert result.answer == ANSWER
    assert any(n.startswith("no long-term memory this run") for n in result.notices)
    assert any(n.startswith("not remembered") for n in result.notices)

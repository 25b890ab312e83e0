"""Issue 21: how a run's answer was made is in its checkpoint. A run whose fast-path answer sufficed, killed
after its checkpoint, ends on resume as it would have (no final pass, no LM call); an extractive answer
stays marked as one. Scripted LM words only; the bank, the checkpoint file and retrieval are real."""

from __future__ import annotations

import json

import pytest
from scripted_lm import MEMORY_ANSWER, ScriptedLM
from test_answer_paths import GOAL, bank_file, verdict  # noqa: F401 - fixtures (corpus and config: conftest.py)

from amb_dspy.agents import ConflictNotification, cross_validation_task
from amb_dspy.bank import MemoryBank
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc, TaskKind
from amb_dspy.storage.bank_file import BankFileError
from amb_dspy.task.checkpoint import CHECKPOINT_FILE, read_checkpoint, write_checkpoint
from amb_dspy.task.state import RunState


def test_a_fast_path_answer_survives_a_resume_without_a_final_pass(config, embedder, bank_file, tmp_path):  # noqa: F811
    folder = tmp_path / "cp"
    first = MemoryBank(config.model_copy(update={"checkpoint_dir": folder}), lm=ScriptedLM(**{MEMORY_ANSWER: verdict(True)}),
                       embedder=embedder).run(GOAL, bank=bank_file)
    assert first.termination == "answered_from_memory"
    saved = json.loads((folder / CHECKPOINT_FILE).read_text())["run"]
    assert saved["answered_from_memory"] is True and saved["extractive"] is False

    silent = ScriptedLM()  # no script: any LM call would fail the resumed run
    bank = MemoryBank(config, lm=silent, embedder=embedder)
    resumed = bank.resume(folder)
    assert resumed.termination == "answered_from_memory" and resumed.answer == first.answer
    assert silent.calls == [] and not resumed.errors
    # the resumed task checkpoints in its folder; the bank's own config, which other tasks share, is unchanged
    assert bank.config == config and config.checkpoint_dir != folder


@pytest.mark.parametrize("flags", [{"answered_from_memory": True}, {"extractive": True}, {}])
def test_the_answer_flags_round_trip_and_default_to_false(tmp_path, embedder, flags):
    doc = InsightDoc(task_goal="g")
    state = RunState(doc_id=doc.doc_id, answer="a line of memory", **flags)
    write_checkpoint(tmp_path, state, {}, MemoryStore(embedder, doc))
    read, _, _ = read_checkpoint(tmp_path, embedder)
    assert (read.answered_from_memory, read.extractive) == (flags.get("answered_from_memory", False),
                                                           flags.get("extractive", False))
    assert read == state


def test_an_older_checkpoint_without_the_flags_reads_as_false_and_a_bad_flag_is_one_line(tmp_path, embedder):
    doc = InsightDoc(task_goal="g")
    write_checkpoint(tmp_path, RunState(doc_id=doc.doc_id), {}, MemoryStore(embedder, doc))
    path = tmp_path / CHECKPOINT_FILE
    raw = json.loads(path.read_text())
    for name in ("answered_from_memory", "extractive"):
        del raw["run"][name]
    path.write_text(json.dumps(raw))
    read, _, _ = read_checkpoint(tmp_path, embedder)
    assert not read.answered_from_memory and not read.extractive
    raw["run"]["extractive"] = "yes"
    path.write_text(json.dumps(raw))
    with pytest.raises(BankFileError, match="extractive is 'yes', not true or false") as caught:
        read_checkpoint(tmp_path, embedder)
    assert "\n" not in str(caught.value)


def test_a_checkpoint_of_bank_schema_2_reads_its_pending_task_typed(tmp_path, embedder):
    conflict = ConflictNotification(conflicting_node_ids=["n1", "n2"], conflict_description="1932 or 1936?")
    doc = InsightDoc(task_goal="g", pending=[cross_validation_task(conflict)])
    write_checkpoint(tmp_path, RunState(doc_id=doc.doc_id), {}, MemoryStore(embedder, doc))
    path = tmp_path / CHECKPOINT_FILE
    raw = json.loads(path.read_text())
    raw["bank"]["schema_version"] = 2  # as written before kinds were stored: the pending task's text alone
    del raw["bank"]["insight_doc"]["pending"]
    path.write_text(json.dumps(raw))
    _, _, store = read_checkpoint(tmp_path, embedder)
    assert store.insight_doc.pending == [cross_validation_task(conflict)]
    assert store.insight_doc.pending_task.kind is TaskKind.CROSS_VALIDATE

"""LoCoMo: the loader and rendering on the real shared conversations, the paper's F1, ``amb eval
--dataset locomo:PATH`` in its three modes with a scripted LM (everything else real: the bank, the
embedding model, the turn corpus, the bank cache on disk), per-question usage under threads, and the
evidence view of ``<memory>``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from scripted_lm import ScriptedLM
from test_optimize import EXTRACT, REACT, bank_lm, prompt

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.view import short_ids
from amb_dspy.storage import InsightDoc
from amb_dspy.task.adapter import MemoryAdapter
from optimize import commands
from optimize.evaluate import run_eval
from optimize.hotpotqa import DatasetError
from optimize.locomo import load_locomo, locomo_exact_match, locomo_f1, token_f1

DATA = Path(os.environ.get("AMB_LOCOMO_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo")
pytestmark = pytest.mark.skipif(not (DATA / "30.json").is_file(), reason=f"LoCoMo samples not found at {DATA}")
SOURCE = f"locomo:{DATA / '30.json'}"


@pytest.fixture(scope="module")
def conversation():
    return load_locomo(SOURCE)[0]


def reader(questions, wrong: int | None = None):
    """Answers the question found in the prompt with its gold answer; the ``wrong``-th gets a wrong one."""

    def answer(call):
        text = prompt(call)
        index = next(i for i, q in enumerate(questions) if f"[[ ## question ## ]]\n{q.question}" in text)
        return {"reasoning": "read it", "answer": "Paris" if index == wrong else questions[index].answer}

    return answer


def test_loader_keeps_categories_1_to_4_and_renders_one_line_per_turn(conversation):
    both = load_locomo(f"locomo:{DATA}")
    assert [c.name for c in both] == ["26", "30"]
    assert [len(c.questions) for c in both] == [32 + 37 + 13 + 70, 11 + 26 + 44]  # the README's counts, no category 5
    assert len(conversation.turns) == 369 and {q.category for q in conversation.questions} == {1, 2, 4}
    text, spans = conversation.render()
    assert len(text.split("\n")) == 369 + 18  # a blank line between the 19 sessions
    first = conversation.turns[0]
    assert text[slice(*spans[first.dia_id])] == "[4:04 pm on 20 January, 2023] Gina: Hey Jon! Good to see you. What's up? Anything new?"
    assert any("[shares a photo: " in t.line() for t in conversation.turns)
    raw = json.loads((DATA / "30.json").read_text())
    assert raw["session_1_summary"][:60] not in text  # the authors' annotations are never read
    assert all(e in spans for q in conversation.questions for e in q.evidence)
    assert sum(len(q.evidence) > 0 for q in conversation.questions) == len(conversation.questions)
    assert [q.id for q in load_locomo(f"locomo:{DATA}", n=3)[0].questions] == ["26:0", "26:1", "26:2"]


def test_f1_is_the_papers(conversation):
    assert token_f1("The sunsets, and lakes", "sunset lake") == 1.0  # commas, articles, 'and' dropped; stems
    assert token_f1("Paris", "London") == 0.0
    assert locomo_f1("sunset", "sunset, sunrise", 1) == 0.5  # multi-hop: each gold part scores its best match
    assert locomo_f1("sunrise, sunset", "sunset, sunrise", 1) == 1.0
    assert locomo_f1("psychology", "Psychology; counseling", 3) == 1.0  # open-domain: the first alternative
    assert locomo_f1("counseling", "Psychology; counseling", 4) == pytest.approx(2 / 3)
    assert locomo_exact_match("7 May, 2023.", "7 May 2023") == 1.0 and locomo_exact_match("May 2023", "7 May 2023") == 0.0


@pytest.mark.parametrize("source, message", [
    ("locomo:/no/such/dir", "no such file"),
    ("locomo", "use locomo:PATH"),
])
def test_bad_datasets_are_one_line_errors(source, message, tmp_path):
    with pytest.raises(DatasetError, match=message) as error:
        load_locomo(source)
    assert "\n" not in str(error.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"speaker_a": "A", "qa": [{"question": "q"}], "session_1": [{"speaker": "A"}]}')
    with pytest.raises(DatasetError, match="not a LoCoMo conversation"):
        load_locomo(f"locomo:{bad}")


def test_context_mode_scores_per_category_and_measures_each_question(conversation):
    questions = conversation.questions[:4]
    lm = ScriptedLM(**{EXTRACT: reader(questions, wrong=1)})
    report = run_eval(SOURCE, lm=lm, n=4, mode="context")
    assert [q.id for q in report.questions] == [q.id for q in questions]
    assert [q.f1 for q in report.questions] == [1.0, 0.0, 1.0, 1.0]
    assert all(q.calls == 1 and q.prompt_tokens > 5000 for q in report.questions)  # the whole conversation
    assert conversation.turns[-1].text in prompt(lm.calls[0]) and conversation.turns[0].text in prompt(lm.calls[0])
    assert report.means()["f1"] == 0.75 and report.ingest == []


def test_threads_keep_per_question_usage_exact(conversation):
    questions = conversation.questions[:6]
    sequential = run_eval(SOURCE, lm=ScriptedLM(**{EXTRACT: reader(questions)}), n=6, mode="context")
    lm = ScriptedLM(**{EXTRACT: reader(questions)})
    threaded = run_eval(SOURCE, lm=lm, n=6, mode="context", num_threads=3)
    assert len(lm.calls) == 6
    assert [(q.id, q.calls, q.prompt_tokens, q.completion_tokens) for q in threaded.questions] == \
           [(q.id, q.calls, q.prompt_tokens, q.completion_tokens) for q in sequential.questions]
    assert len({q.prompt_tokens for q in threaded.questions}) > 1  # questions differ, so a mix-up would show


def test_react_mode_searches_the_turns(conversation, embedder):
    questions = conversation.questions[:1]
    steps = iter([
        {"next_thought": "search", "next_tool_name": "search", "next_tool_args": {"query": questions[0].question}},
        {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}},
    ])
    lm = ScriptedLM(**{REACT: lambda call: next(steps), EXTRACT: reader(questions)})
    report = run_eval(SOURCE, lm=lm, n=1, mode="react", embedder=embedder)
    assert report.questions[0].f1 == 1.0 and report.questions[0].calls == 3
    evidence = next(t for t in conversation.turns if t.dia_id == questions[0].evidence[0])
    assert evidence.dia_id in prompt(lm.calls[1])  # the search result shows the turn's id


def test_bank_mode_ingests_once_and_reuses_the_cached_bank(conversation, embedder, tmp_path):
    questions = conversation.questions[:2]
    done = {"executed_status": "success", "executed_context": "memory answers it", "next_task": ""}
    config = AmbConfig(policy="heuristic", cache_dir=tmp_path / "cache")
    first = run_eval(SOURCE, lm=bank_lm(questions, planning=lambda call: done), n=2, mode="bank",
                            config=config, embedder=embedder)
    assert [q.f1 for q in first.questions] == [1.0, 1.0] and all(q.error is None for q in first.questions)
    cost = first.ingest[0]
    assert not cost.cached and cost.nodes >= 2 and cost.calls == 0  # the heuristic policy needs no LM to ingest
    cached = list((tmp_path / "cache" / "locomo-banks").glob("*.json"))
    assert len(cached) == 2  # the bank and its ingest cost
    again = run_eval(SOURCE, lm=bank_lm(questions, planning=lambda call: done), n=2, mode="bank",
                            config=config, embedder=embedder)
    assert again.ingest[0].cached and again.ingest[0].nodes == cost.nodes and again.ingest[0].seconds == cost.seconds
    assert again.ingest_totals()["ingest_seconds_per_question"] == pytest.approx(cost.seconds / 2, abs=0.01)
    bank_file = next(p for p in cached if not p.name.endswith(".cost.json"))
    bank_file.write_text("{not json")  # a corrupt cache is rebuilt, never trusted
    notices: list[str] = []
    rebuilt = run_eval(SOURCE, lm=bank_lm(questions, planning=lambda call: done), n=1, mode="bank",
                              config=config, embedder=embedder, notices=notices)
    assert not rebuilt.ingest[0].cached and "ingesting again" in notices[0]


def test_eval_command_prints_categories_and_a_final_json_line(monkeypatch, conversation):
    questions = conversation.questions[:3]
    lm = ScriptedLM(**{EXTRACT: reader(questions, wrong=0)})
    judge = ScriptedLM(**{"label": lambda call: {"label": "WRONG" if "Paris" in prompt(call) else "CORRECT"}})
    monkeypatch.setattr(commands, "_build_lms", lambda config, teacher: (lm, "scripted/lm", judge, "scripted/judge", None))
    lines = []
    commands.eval_command(dataset=SOURCE, n=3, mode="context", judge_lm="scripted/judge", echo=lines.append)
    final = json.loads(lines[-1])
    assert final["n"] == 3 and final["judge"] == pytest.approx(2 / 3, abs=1e-4) and final["model"] == "scripted/lm"
    assert final["f1"] == pytest.approx(2 / 3, abs=1e-4) and set(final["categories"]) <= {"multi-hop", "temporal", "single-hop"}
    assert final["ingest_calls"] == 0


def test_evidence_view_shows_raw_source_lines_within_the_budget(conversation, embedder, tmp_path):
    text = "\n".join(t.line() for t in conversation.turns[:60])
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"), embedder=embedder)
    ingested = bank.ingest(text, "first sessions")
    doc = InsightDoc(task_goal="What did Jon lose his job as?")
    evidence = MemoryAdapter(ingested.store, view="evidence", budget=400).memory_text(doc)
    assert 200 < estimate_tokens(evidence) <= 400
    headers = [line for line in evidence.split("\n") if line.startswith("Memory ")]
    prefixes = [h.split("(node ")[1].rstrip("):") for h in headers]  # unique id prefixes, as citations take them
    assert headers and all(len([n for n in ingested.store.graph.nodes_dict if n.startswith(p)]) == 1 for p in prefixes)
    # raw turns, each session's stamp shown once above its turns, relative dates followed by the absolute one
    undated = [re.sub(r" \((?:the week(?:end)? of )?(?:\d+ )?(?:[A-Z][a-z]+ )?\d{4}\)", "", line)
               for line in evidence.split("\n") if line and line not in headers]
    stamps = [line for line in undated if re.fullmatch(r"\[\d{1,2} [A-Z][a-z]+, \d{4}\]", line)]  # dates, no time
    assert stamps and all(f" on {stamp[1:]}" in text for stamp in stamps)
    assert all(line in text for line in undated if line not in stamps)
    assert sum(line.startswith("[") for line in undated) < len(undated) / 2
    assert "Lost my job as a banker" in evidence
    summary = MemoryAdapter(ingested.store).memory_text(doc)
    assert summary.startswith("Memory 1 (node ") and "Summary: " in summary and estimate_tokens(summary) <= 1000
    tight = MemoryAdapter(ingested.store, budget=120).memory_text(doc)  # the summary view keeps the budget too
    assert tight.startswith("Memory 1 (node ") and estimate_tokens(tight) <= 120
    assert short_ids(["abcdef123", "abcdef129", "ffff0000aa"]) == {"abcdef123": "abcdef123", "abcdef129": "abcdef129",
                                                                   "ffff0000aa": "ffff00"}  # six: the executor resolves six or more
    with pytest.raises(ValueError, match="unknown memory view"):
        MemoryAdapter(ingested.store, view="raw")


def test_a_folder_may_hold_the_authors_locomo10_list_beside_single_conversations(tmp_path):
    raw = json.loads((DATA / "30.json").read_text())
    (tmp_path / "locomo10.json").write_text(json.dumps([raw | {"sample_id": "conv-30"}, raw | {"sample_id": "conv-31"}]))
    (tmp_path / "z-single.json").write_text(json.dumps(raw))
    loaded = load_locomo(f"locomo:{tmp_path}")
    assert [c.name for c in loaded] == ["locomo10-conv-30", "locomo10-conv-31", "z-single"]
    assert len({q.id for c in loaded for q in c.questions}) == 3 * len(loaded[2].questions)
    assert loaded[0].render() == loaded[2].render()
    (tmp_path / "broken.json").write_text(json.dumps([{"qa": []}]))
    with pytest.raises(DatasetError, match="broken.json: not a LoCoMo conversation"):
        load_locomo(f"locomo:{tmp_path}")

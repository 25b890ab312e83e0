"""The HotpotQA loader (official files, Hugging Face records) and the per-agent training sets built from it."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from optimize.hotpotqa import DatasetError, HotpotQAItem, load_hotpotqa
from optimize.metrics import mentions
from optimize.trainsets import build_examples, entity_words, split_items

# The shared samples live next to the repository; AMB_HOTPOTQA_DIR points elsewhere.
DATA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa")
DEV, TRAIN = DATA / "dev_distractor_300.jsonl", DATA / "train_100.jsonl"
pytestmark = pytest.mark.skipif(not DEV.is_file(), reason=f"HotpotQA samples not found at {DATA}")


@pytest.fixture(scope="module")
def train_items() -> list[HotpotQAItem]:
    return load_hotpotqa(f"hotpotqa:{TRAIN}")


# --- loading ---------------------------------------------------------------------------------------


def test_reads_both_sample_files():
    dev, train = load_hotpotqa(f"hotpotqa:{DEV}"), load_hotpotqa(f"hotpotqa:{TRAIN}")
    assert (len(dev), len(train)) == (300, 100)
    first = dev[0]
    assert first.id == "5a8b57f25542995d1e6f1371"
    assert first.answer == "yes" and first.type == "comparison" and first.level == "hard"
    assert first.gold_titles == ["Scott Derrickson", "Ed Wood"]
    assert first.paragraph("Scott Derrickson").sentences[0].startswith("Scott Derrickson (born July 16, 1966)")
    assert len(first.context) == 10 and len(first.distractor_paragraphs) == 8
    # joined with "" as the official format intends: sentences after the first carry their space
    assert "producer. He lives in Los Angeles" in first.paragraph("Scott Derrickson").text
    assert train[0].question == "If Gallu is a demon Lilu is what?"
    assert train[0].supporting_sentences_of("Lilu (mythology)")[0].startswith("A lilu or lilû")
    assert {i.id for i in dev}.isdisjoint({i.id for i in train})


def test_n_and_a_json_array_file(tmp_path):
    records = [json.loads(line) for line in DEV.read_text(encoding="utf-8").splitlines()[:3]]
    array = tmp_path / "hotpot_dev_distractor_v1.json"
    array.write_text(json.dumps(records), encoding="utf-8")
    items = load_hotpotqa(f"hotpotqa:{array}", n=2)
    assert [i.id for i in items] == [r["_id"] for r in records[:2]]
    assert load_hotpotqa(f"hotpotqa:{DEV}", n=5)[4].id == load_hotpotqa(f"hotpotqa:{DEV}")[4].id


def _hf_record(official: dict) -> dict:
    """The same item as Hugging Face's hotpotqa/hotpot_qa (distractor) stores it."""
    return {
        "id": official["_id"], "question": official["question"], "answer": official["answer"],
        "type": official["type"], "level": official["level"],
        "supporting_facts": {"title": [f[0] for f in official["supporting_facts"]], "sent_id": [f[1] for f in official["supporting_facts"]]},
        "context": {"title": [p[0] for p in official["context"]], "sentences": [p[1] for p in official["context"]]},
    }


def test_a_hugging_face_record_normalises_to_the_same_item(tmp_path):
    official = json.loads(DEV.read_text(encoding="utf-8").splitlines()[1])
    path = tmp_path / "hf.jsonl"
    path.write_text(json.dumps(_hf_record(official)) + "\n", encoding="utf-8")
    assert load_hotpotqa(f"hotpotqa:{path}") == [HotpotQAItem.model_validate(official)]


def test_hugging_face_source_through_the_datasets_package(monkeypatch):
    official = [json.loads(line) for line in DEV.read_text(encoding="utf-8").splitlines()[:2]]
    asked = {}

    def load_dataset(name, config, split):
        asked.update(name=name, config=config, split=split)
        return [_hf_record(r) for r in official]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    items = load_hotpotqa("hotpotqa", split="validation", n=2)
    assert asked == {"name": "hotpotqa/hotpot_qa", "config": "distractor", "split": "validation[:2]"}
    assert [i.id for i in items] == [r["_id"] for r in official]
    assert items[0].gold_titles == ["Scott Derrickson", "Ed Wood"]


def test_hugging_face_unreachable_says_how_to_get_the_data(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'hotpotqa/hotpot_qa' on the Hub (LocalEntryNotFoundError)\nmore")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    with pytest.raises(DatasetError) as error:
        load_hotpotqa("hotpotqa")
    message = str(error.value)
    assert "\n" not in message and "not reachable" in message and "hotpotqa:PATH" in message
    assert "curtis.ml.cmu.edu" in message

    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DatasetError, match=r"needs the `datasets` package.*hotpotqa:PATH"):
        load_hotpotqa("hotpotqa")


@pytest.mark.parametrize(
    ("source", "content", "match"),
    [
        ("hotpotqa:{tmp}/missing.jsonl", None, r"no such file; download"),
        ("squad", None, r"unknown dataset 'squad'"),
        ("hotpotqa:{tmp}/bad.jsonl", '{"_id": "x"}\nnot json\n', r"line 1: not a HotpotQA record \(question: Field required\)"),
        ("hotpotqa:{tmp}/bad.jsonl", "\n\nnot json\n", r"line 3: not valid JSON"),
        ("hotpotqa:{tmp}/bad.jsonl", "[1, 2", r"not valid JSON"),
        ("hotpotqa:{tmp}/bad.jsonl", "", r"no items"),
    ],
)
def test_bad_sources_give_one_line_errors(tmp_path, source, content, match):
    if content is not None:
        (tmp_path / "bad.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=match) as error:
        load_hotpotqa(source.format(tmp=tmp_path))
    assert "\n" not in str(error.value)


# --- training sets ----------------------------------------------------------------------------------


def test_split_is_disjoint_and_seeded(train_items):
    train, dev = split_items(train_items[:10], 0.3, seed=0)
    assert (len(train), len(dev)) == (7, 3)
    assert {i.id for i in train}.isdisjoint({i.id for i in dev})
    assert split_items(train_items[:10], 0.3, seed=0) == (train, dev)
    assert split_items(train_items[:10], 0.3, seed=1) != (train, dev)
    with pytest.raises(ValueError):
        split_items(train_items[:1])


def test_classification_examples_label_sentences_with_their_paragraph_titles(train_items):
    examples = build_examples("classification", train_items[:20])
    assert len(examples) == 20
    for example, item in zip(examples, train_items[:20]):
        assert set(example.inputs().keys()) == {"context", "task_goal"} and example.task_goal == item.question
        assert set(item.gold_titles) < set(example.topics) and len(example.topics) == 3
        sentences = [s for group in example.topics.values() for s in group]
        assert example.context.split("\n\n") == sentences  # every sentence of the input is labelled, in order
        for title, group in example.topics.items():
            assert all(s in item.paragraph(title).text for s in group)


def test_structure_examples_keep_answer_and_bridge_entities(train_items):
    examples = build_examples("structure", train_items)
    assert len(examples) >= 90
    for example in examples:
        assert example.facts and all(mentions(example.content, f) for f in example.facts)
    first = examples[0]  # "If Gallu is a demon Lilu is what?" -> "a spirit", over Alû and Lilu
    assert first.facts == ["a spirit", "Alû", "Lilu"] and first.keywords == ["Alû", "Lilu"]


def test_analysis_examples_related_unrelated_and_altered_copies(train_items):
    examples = build_examples("analysis", train_items)
    assert len(examples) >= 90
    kinds = set()
    for example in examples:
        ids = [c.id for c in example.candidates]
        assert sorted(ids) == sorted(example.relations) and len(set(ids)) == len(ids)
        new = example.new_node
        for candidate in example.candidates:
            kind = example.relations[candidate.id]
            kinds.add(kind)
            if kind == "conflict":
                old, changed = example.alteration
                assert candidate.summary != new.summary
                assert mentions(new.summary, old) and not mentions(new.summary, changed)
                assert mentions(candidate.summary, changed) and not mentions(candidate.summary, old)
            elif kind == "unrelated":
                assert not entity_words(new.summary) & entity_words(candidate.summary)
            else:
                assert kind == "related" and candidate.summary != new.summary
    assert kinds == {"conflict", "related", "unrelated"}
    assert [e.relations for e in build_examples("analysis", train_items[:10])] == [e.relations for e in examples[:10]]
    assert [e.relations for e in build_examples("analysis", train_items[:10], seed=1)] != [e.relations for e in examples[:10]]


def test_integration_examples_validate_the_original_fact(train_items):
    examples = build_examples("integration", train_items)
    assert len(examples) >= 90
    for example in examples:
        summaries = [n.summary for n in example.nodes_to_merge]
        assert len(summaries) == 2 and len({n.id for n in example.nodes_to_merge}) == 2
        assert mentions(example.validation_result, example.kept) and not mentions(example.validation_result, example.dropped)
        assert sum(mentions(s, example.dropped) for s in summaries) == 1
    years = sum(e.kept.isdigit() and len(e.kept) == 4 for e in examples)
    assert years > len(examples) // 2  # dates first, as the altered fact


def test_bank_examples_and_unknown_agents(train_items):
    example = build_examples("planning", train_items[:1])[0]
    assert example.question == train_items[0].question and example.answer == "a spirit"
    assert example.context.startswith(train_items[0].context[0].title + "\n")
    assert build_examples("all", train_items[:3]) == build_examples("planning", train_items[:3])
    with pytest.raises(ValueError, match="unknown agent 'executor'"):
        build_examples("executor", train_items)

"""Issue 13: no tool call twice in a task. A scripted executor repeats a search and a visit; the backend
is called once each, the repeat says so and names the nodes, nothing is converted twice, and the hop
record counts it. Only the LM's words are scripted; the corpus, the tools and the bank run for real."""

from __future__ import annotations

import pytest
from scripted_lm import ScriptedLM
from test_bank import CITY, EXTRACT, FESTIVAL, REACT, compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.storage import hop_summary
from amb_dspy.task.tool_cache import search_key, url_key
from amb_dspy.tools import LocalCorpus


@pytest.fixture
def corpus(tmp_path, embedder):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (folder / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    return LocalCorpus.load(folder, embedder)


class Counting:
    def __init__(self, corpus):
        self.corpus, self.queries = corpus, []

    def search(self, query, k=10):
        self.queries.append(query)
        return self.corpus.search(query, k=k)


STEPS = [("search", {"query": "Tidewater Lantern Festival date"}),
         ("visit", {"url": "corpus://festival.md", "goal": "the date"})]


def repeating_lm(steps_per_task: list[list[tuple[str, dict]]]):
    """Each executed task runs its list of tool calls, then finishes; planning asks for two tasks."""
    tasks = ["Find the festival date", "Check the festival date again"]

    def react(call):
        prompt = call.messages[-1]["content"]
        done = prompt.count("observation_")
        index = next((i for i, t in enumerate(tasks) if f"1. {t}" in prompt), None)
        steps = steps_per_task[index] if index is not None else []
        if done < len(steps):
            name, args = steps[done]
            return {"next_thought": "look", "next_tool_name": name, "next_tool_args": args}
        return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}

    def planning(call):
        executed = call.inputs.get("executed_task", "")
        upcoming = tasks[tasks.index(executed) + 1:] if executed in tasks else tasks
        return {"executed_status": "success", "executed_context": "ok", "next_task": upcoming[0] if upcoming else ""}

    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                      planning=planning,
                      **{REACT: react, EXTRACT: lambda call: {"reasoning": "r", "answer": "July"},
                         "evidence,summary": lambda call: {"evidence": FESTIVAL, "summary": "second Saturday of July"}})


def run(config, corpus, embedder, lm):
    search = Counting(corpus)
    bank = MemoryBank(config, lm=lm, embedder=embedder, search=search, corpus=corpus)
    return bank, search, bank.run("When is the Tidewater Lantern Festival?")


def test_a_repeated_search_and_visit_are_answered_from_memory(tmp_path, corpus, embedder):
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", max_loops=3, policy="lm")
    repeat = [("search", {"query": "festival date, Tidewater LANTERN"}), ("visit", {"url": "corpus://festival.md/", "goal": "when"})]
    lm = repeating_lm([STEPS, repeat])
    reads = []
    document = corpus.document
    corpus.document = lambda url: reads.append(url) or document(url)  # count the visit backend's reads
    bank, search, result = run(config, corpus, embedder, lm)

    assert search.queries == ["Tidewater Lantern Festival date"]  # the search backend once
    assert reads == ["corpus://festival.md"]  # the page read once
    second_task = [c for c in lm.calls_for(REACT) if "1. Check the festival date again" in c.messages[-1]["content"]]
    observations = second_task[-1].messages[-1]["content"]
    assert observations.count("(Repeat: ") == 2 and "memory node(s)" in observations
    executor_entries = [e for e in result.store.tree.entries.values() if e.metadata.get("source") == "executor"]
    assert len(executor_entries) == 1  # the repeats were not converted again
    counts = hop_summary([h for h in result.store.hops])
    assert counts == {"searches": 2, "unique_searches": 1, "repeats_avoided": 2, "visits": 2, "hops": 3}
    assert [[c["cached"] for c in hop["tool_calls"]] for hop in result.hops[:2]] == [[False, False], [True, True]]
    assert all(hop["lm_calls"] > 0 for hop in result.hops)
    # the second task's prompt listed what was already fetched
    assert "Already searched / already read" in second_task[0].messages[-1]["content"]


def test_the_cache_can_be_turned_off(tmp_path, corpus, embedder, monkeypatch):
    monkeypatch.setenv("AMB_TOOL_CACHE", "0")
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", max_loops=3, policy="lm")
    bank, search, result = run(config, corpus, embedder, repeating_lm([STEPS, STEPS]))
    assert len(search.queries) == 2 and hop_summary(result.store.hops)["repeats_avoided"] == 0


def test_failed_calls_are_not_cached(tmp_path, corpus, embedder):
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", max_loops=3, policy="lm")
    missing = [("visit", {"url": "corpus://no-such.md", "goal": "x"})]
    bank, search, result = run(config, corpus, embedder, repeating_lm([missing, missing]))
    visits = [c for hop in result.hops for c in hop["tool_calls"] if c["name"] == "visit"]
    assert len(visits) == 2 and not any(c["cached"] for c in visits)


def test_hops_are_stored_in_the_bank_file(tmp_path, corpus, embedder):
    from amb_dspy.memory.graph_ops import MemoryStore

    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", max_loops=3, policy="lm")
    bank, _, result = run(config, corpus, embedder, repeating_lm([STEPS, STEPS]))
    result.export(tmp_path / "bank.json")
    loaded = MemoryStore.load(tmp_path / "bank.json", embedder)
    assert [h.model_dump(mode="json") for h in loaded.hops] == result.hops


@pytest.mark.parametrize("a, b", [
    ("Tidewater Lantern Festival date", "date: tidewater  lantern festival!"),
    ("festival date", "date festival"),
])
def test_search_queries_are_compared_as_bags_of_words(a, b):
    assert search_key(a) == search_key(b)
    assert search_key("festival date") != search_key("festival city")


def test_urls_are_compared_without_case_scheme_slash_or_fragment():
    assert url_key("HTTPS://Example.ORG/page/#top") == url_key("http://example.org/page")
    assert url_key("https://example.org/Page") != url_key("https://example.org/page")  # paths are case-sensitive
    assert url_key("corpus://festival.md/") == url_key("corpus://festival.md")

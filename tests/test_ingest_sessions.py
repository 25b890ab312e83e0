"""A conversation ingested in one go builds the memory it builds session by session (issue 34's last target).

A text made of dated sessions (one turn a line, each starting with its date stamp, a blank line between
sessions, as ``optimize.locomo`` renders a conversation) is cut where its sessions are: the documents a
LoCoMo .json gives. Real embedding model, real store, heuristic policy (no LM)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.documents import NamedDocument, dated_sessions, read_documents
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc
from optimize.locomo import load_locomo

LOCOMO = Path(os.environ.get("AMB_LOCOMO_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo")
SESSIONS = 4  # conversation 30's first sessions: enough to relate sessions, quick to ingest


@pytest.fixture(scope="module")
def conversation():
    """Conversation 30 cut to its first :data:`SESSIONS` sessions."""
    whole = load_locomo(f"locomo:{LOCOMO / '30.json'}")[0]
    return whole.model_copy(update={"turns": [t for t in whole.turns if t.session <= SESSIONS]})


def test_a_rendered_conversation_is_cut_into_the_sessions_its_json_file_gives(conversation, tmp_path):
    raw = json.loads((LOCOMO / "30.json").read_text())
    path = tmp_path / "30.json"
    path.write_text(json.dumps({k: v for k, v in raw.items() if not k.startswith("session_")
                                or int(k.split("_")[1]) <= SESSIONS}))
    from_json = list(read_documents([path], 10**6, skip=pytest.fail))
    cut = dated_sessions(NamedDocument("30", conversation.text()))
    assert [d.name for d in cut] == [f"30#session_{n}" for n in range(1, SESSIONS + 1)]
    assert [(d.text, d.date) for d in cut] == [(d.text, d.date) for d in from_json]
    assert cut[0].date == "4:04 pm on 20 January, 2023"


def test_only_a_dialogue_of_dated_sessions_is_cut_and_only_where_the_date_changes():
    day = "[1:56 pm on 8 May, 2023] Caroline: Hi!\n[1:56 pm on 8 May, 2023] Melanie: Hello."
    later = "[7:10 pm on 25 May, 2023] Caroline: I went to a talk."
    same = NamedDocument("chat", f"{day}\n\n[1:56 pm on 8 May, 2023] Caroline: Bye.\n\n{later}")
    assert [d.text for d in dated_sessions(same)] == [f"{day}\n\n[1:56 pm on 8 May, 2023] Caroline: Bye.", later]
    for text in (f"{day}\nMelanie: no stamp on this line.\n\n{later}",  # a line without a date: not a dialogue
                 f"{day}\n{later}",  # no blank line: one session as written
                 "[Note] The ferry leaves at nine.\n\n[Todo] Buy tickets."):  # bracketed, but no dates
        assert dated_sessions(NamedDocument("notes", text)) == [NamedDocument("notes", text)]


def memory(store: MemoryStore) -> tuple[list, set, set]:
    """The store as what it holds, whatever its ids: the entries' texts and dates, each node's text and where
    it comes from (entry number, spans), and the edges between such nodes."""
    number = {entry_id: n for n, entry_id in enumerate(store.tree.entries)}
    key = {node.id: (node.summary, node.context, tuple(node.keywords),
                     tuple((number[s.entry_id], tuple(s.spans)) for s in node.sources))
           for node in store.graph.nodes_dict.values()}
    edges = {frozenset((key[a], key[b])) for a, b in store.graph.edges()}
    entries = [(e.text, e.metadata.get("date")) for e in store.tree.entries.values()]
    return entries, set(key.values()), edges


def test_one_go_and_session_by_session_build_the_same_memory(conversation, embedder, tmp_path):
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"),
                      embedder=embedder)
    goal = "Ingest conversation 30"  # the same goal: the structure policy favours its words
    at_once = MemoryStore(embedder, InsightDoc(task_goal=goal))
    one_go = bank.ingest(conversation.text(), "30", into=at_once)
    by_session = MemoryStore(embedder, InsightDoc(task_goal=goal))
    for number in range(1, SESSIONS + 1):
        turns = [t for t in conversation.turns if t.session == number]
        bank.ingest("\n".join(t.line() for t in turns), f"session {number}", into=by_session, date=turns[0].date)
    assert one_go.added and len(at_once.tree) == SESSIONS
    entries, nodes, edges = memory(at_once)
    assert (entries, nodes, edges) == memory(by_session)
    sources = {entry for *_, places in nodes for entry, _ in places}
    assert sources == set(range(SESSIONS)) and len(edges) > SESSIONS  # every session made nodes, related


def test_the_whole_conversation_added_again_adds_only_its_new_session(conversation, embedder, tmp_path):
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"),
                      embedder=embedder)
    so_far = conversation.model_copy(update={"turns": [t for t in conversation.turns if t.session < SESSIONS]})
    ingested = bank.ingest(so_far.text(), "30")
    store = ingested.store
    before = store.payload()
    assert not bank.ingest(so_far.text(), "30", into=store).added and store.payload() == before
    grown = bank.ingest(conversation.text(), "30", into=store)  # the conversation so far, one session more
    assert grown.added and not grown.replaced
    assert [e.metadata["name"] for e in store.tree.entries.values()] == [f"30#session_{n}" for n in range(1, SESSIONS + 1)]
    store.check()




@pytest.mark.parametrize("analysis", ["ordered", "conversion"])
def test_sessions_the_lm_call_cap_leaves_unconverted_are_kept_raw_not_lost(analysis, embedder, tmp_path):
    """``ordered``: a conversion a session (session 1 becomes memory, then the cap); ``conversion`` (the LM
    policy's default): one conversion for all three, stopped by the cap before any node."""
    from scripted_lm import ScriptedLM
    from test_bank import compress, one_cluster_per_segment, unrelated

    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated)
    config = AmbConfig(policy="lm", max_lm_calls=1, ingest_analysis=analysis, storage_dir=tmp_path / "s",
                       temp_dir=tmp_path / "t")
    sessions = [f"[10:00 am on {day} May, 2023] Gina: I opened my {shop} shop today, and {more}."
                for day, shop, more in ((2, "dance", "it was packed"), (9, "clothing", "my sister helped"),
                                        (16, "flower", "the roses sold out"))]
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.ingest("\n\n".join(sessions), "gina")
    entries = list(result.store.tree.entries.values())
    assert [e.text for e in entries] == sessions and result.added
    failed = ["conversion_failed" in e.metadata for e in entries]
    assert failed == ([False, True, True] if analysis == "ordered" else [True, True, True])
    assert result.errors == ["LM call cap reached: 1 calls made (max_lm_calls=1)"]
    result.store.check()


def test_under_the_lm_policy_a_conversation_in_one_go_is_one_conversion_an_entry_a_session(embedder, tmp_path):
    """As cheap in LM calls as one text (one classification call for the three sessions here), yet a session
    an entry holding its own topics' nodes; a topic the LM makes across two sessions is cut at the session."""
    from scripted_lm import ScriptedLM
    from test_bank import compress, unrelated

    def one_topic(call):  # every segment, from every session, in one topic
        count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
        return {"should_cluster": False, "clusters": [{"context": "Gina's shops", "keywords": ["shop"],
                                                       "segments": list(range(1, count + 1))}]}

    lm = ScriptedLM(classification=one_topic, structure=compress, analysis=unrelated)
    config = AmbConfig(policy="lm", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t")
    sessions = [f"[10:00 am on {day} May, 2023] Gina: I opened my {shop} shop today."
                for day, shop in ((2, "dance"), (9, "clothing"), (16, "flower"))]
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.ingest("\n\n".join(sessions), "gina")
    store = result.store
    entries = list(store.tree.entries.values())
    assert [e.text for e in entries] == sessions and result.usage["classification"]["calls"] == 1
    assert [e.metadata["name"] for e in entries] == ["gina#session_1", "gina#session_2", "gina#session_3"]
    nodes = list(store.graph.nodes_dict.values())
    assert [[(s.entry_id, s.spans) for s in n.sources] for n in nodes] == [
        [(e.entry_id, ((0, len(e.text)),))] for e in entries]  # a node a session, its spans in its session
    assert all(n.context == "Gina's shops" for n in nodes)
    store.check()


def test_a_text_file_of_a_conversation_is_added_a_session_an_entry(embedder, tmp_path):
    sessions = [f"[10:00 am on {day} May, 2023] Gina: I opened my {shop} shop today.\n"
                f"[10:00 am on {day} May, 2023] Jon: Congratulations on the {shop} shop!"
                for day, shop in ((2, "dance"), (9, "clothing"))]
    path = tmp_path / "chat.txt"
    path.write_text("\n\n".join(sessions) + "\n")
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"),
                      embedder=embedder)
    result = bank.add_documents([path])
    entries = list(result.store.tree.entries.values())
    assert result.added == [path.as_posix()] and [e.text for e in entries] == sessions
    assert [(e.metadata["name"], e.metadata["date"]) for e in entries] == [
        (f"{path.as_posix()}#session_1", "10:00 am on 2 May, 2023"), (f"{path.as_posix()}#session_2", "10:00 am on 9 May, 2023")]

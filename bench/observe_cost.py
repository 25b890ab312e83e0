"""What one huge or garbled tool response costs a run (issue 32, finding 3): a search returning 5 MB of
prose with one relevant sentence in it, and a search returning 200 kB of binary junk and base64.

The bank, ReAct, the search tool, the memory writer, the real embedding model and FAISS run as they are;
only the LM's words are scripted (tests/scripted_lm.py): the executor searches once and finishes,
classification makes a topic of each segment, structure keeps the first two fifths of its cluster.
One row per case (the run's LM calls and prompt tokens, those of memory conversion alone: classification,
structure and analysis; nodes, bytes kept in the Interaction Tree, whether a node was built from the
relevant sentence), then the share of real text the language test would wrongly set
apart (HotpotQA and LoCoMo passages, the demo corpus), then a JSON line.

    python bench/observe_cost.py [--mb 5] [--junk-kb 200]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dspy  # noqa: E402
from scripted_lm import ScriptedLM  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.tools import SearchResult  # noqa: E402

DATASETS = ROOT.parent / "shared" / "datasets"
GOAL = "When is the Tidewater Lantern Festival held?"
NEEDLE = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
REACT = "next_thought,next_tool_name,next_tool_args"
MEMORY_AGENTS = ("classification", "structure", "analysis")  # the agents of memory conversion


class OneAnswer:
    """A search backend that answers every query with one result holding ``snippet``."""

    def __init__(self, snippet: str):
        self.snippet = snippet

    def search(self, query, k=10):
        return [SearchResult(title="Result", url="https://example.org/result", snippet=self.snippet)]


def scripted_lm() -> ScriptedLM:
    def classify(call):
        count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
        return {"should_cluster": count > 1, "clusters": [
            {"context": f"topic {i}", "keywords": [f"kw{i}"], "segments": [i]} for i in range(1, count + 1)]}

    def react(call):
        if "observation_0" in call.messages[-1]["content"]:
            return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
        return {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": "lantern festival"}}

    def plan(call):  # one subtask, then done
        seen = {t["description"] for t in call.input_json("completed_tasks")} | {call.inputs.get("executed_task", "")}
        return {"executed_status": "success", "executed_context": "done",
                "next_task": "" if "Find the festival date" in seen else "Find the festival date"}

    return ScriptedLM(
        classification=classify,
        structure=lambda call: {"summary": call.inputs["content"][: max(1, len(call.inputs["content"]) * 2 // 5)]},
        analysis=lambda call: {"relationships": [{"candidate": c["number"], "relationship": "unrelated",
                                                  "reasoning": "different"} for c in call.input_json("candidates")]},
        planning=plan,
        default=lambda call: {"reasoning": "r", "answer": "the second Saturday of July"},
        **{REACT: react},
    )


def prose() -> list[str]:
    """Real passages: HotpotQA's paragraphs, LoCoMo's dialogue turns and the demo corpus's documents."""
    passages: list[str] = []
    hotpot = DATASETS / "hotpotqa" / "dev_distractor_300.jsonl"
    for line in hotpot.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        context = item["context"]
        pairs = zip(context["title"], context["sentences"]) if isinstance(context, dict) else context
        passages.extend("".join(sentences) for _title, sentences in pairs)
    for path in sorted((DATASETS / "locomo").glob("*.json")):
        conversation = json.loads(path.read_text(encoding="utf-8"))
        conversation = conversation[0] if isinstance(conversation, list) else conversation
        sessions = conversation.get("conversation", conversation)
        for value in sessions.values():
            if isinstance(value, list):
                passages.extend(f"{t['speaker']}: {t['text']}" for t in value if isinstance(t, dict) and "text" in t)
    passages.extend(p.read_text(encoding="utf-8") for p in sorted((ROOT / "datasets" / "demo").glob("*")) if p.is_file())
    return [p for p in passages if p.strip()]


def large_text(passages: list[str], size: int) -> str:
    text, parts = 0, []
    while text < size:
        for passage in passages:
            parts.append(passage)
            text += len(passage) + 2
            if text >= size:
                break
    parts.insert(len(parts) // 2, NEEDLE)
    return "\n\n".join(parts)


def junk_text(size: int, seed: int = 7) -> str:
    """Half random bytes read as Latin-1, half base64 in 76-character lines (an inlined image)."""
    rng = random.Random(seed)
    raw = bytes(rng.getrandbits(8) for _ in range(size // 2)).decode("latin-1")
    encoded = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(size * 3 // 8))).decode("ascii")
    return raw + "\n" + "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))


def run_case(snippet: str, embedder, work: Path) -> dict:
    config = AmbConfig(storage_dir=work / "storage", temp_dir=work / "temp", max_loops=3, policy="auto")
    lm = scripted_lm()
    started = time.monotonic()
    with dspy.context(lm=lm):
        bank = MemoryBank(config, lm=lm, embedder=embedder, search=OneAnswer(snippet))
        result = bank.run(GOAL)
    entries = result.store.tree.entries
    from_needle = any(NEEDLE[:60] in entries[s.entry_id].text[a:b] for node in result.store.graph.nodes_dict.values()
                      for s in node.sources for a, b in s.spans if s.entry_id in entries)
    memory = [result.usage.get(agent, {"calls": 0, "prompt_tokens": 0}) for agent in MEMORY_AGENTS]
    return {
        "lm_calls": sum(u["calls"] for u in result.usage.values()),
        "prompt_tokens": sum(u["prompt_tokens"] for u in result.usage.values()),
        "memory_lm_calls": sum(u["calls"] for u in memory),
        "memory_prompt_tokens": sum(u["prompt_tokens"] for u in memory),
        "nodes": len(result.query_graph["nodes"]),
        "tree_bytes": sum(len(e.text.encode("utf-8")) for e in entries.values()),
        "snippet_in_tree": any(" ".join(snippet.split())[:5000] in e.text for e in entries.values()),
        "needle_in_node": from_needle,
        "termination": result.termination,
        "notices": len(result.notices),
        "seconds": round(time.monotonic() - started, 1),
    }


def false_positives(passages: list[str]) -> dict:
    """How much real text the language test sets apart (needs amb_dspy.memory.conversion_budget; None before it)."""
    try:
        from amb_dspy.memory.conversion_budget import is_language, language_lines
    except ImportError:
        return {"passages": len(passages), "passages_judged_junk": None, "chars_set_apart": None}
    judged = sum(not is_language(p) for p in passages)
    set_apart = sum(language_lines(p)[1] for p in passages)
    return {"passages": len(passages), "passages_judged_junk": judged, "chars": sum(map(len, passages)),
            "chars_set_apart": set_apart}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--junk-kb", type=float, default=200.0)
    args = parser.parse_args()
    passages = prose()
    embedder = default_embedder()
    cases = {"large": large_text(passages, int(args.mb * 1_000_000)), "junk": junk_text(int(args.junk_kb * 1000))}
    rows = {}
    print(f"{'case':<8}{'chars':>10}{'LM calls':>10}{'prompt tokens':>15}{'memory calls':>14}{'memory tokens':>15}"
          f"{'nodes':>7}{'tree bytes':>12}{'all in tree':>13}{'needle node':>13}{'termination':>16}{'s':>7}")
    for name, snippet in cases.items():
        with tempfile.TemporaryDirectory(prefix="amb-observe-") as work:
            row = rows[name] = run_case(snippet, embedder, Path(work))
        print(f"{name:<8}{len(snippet):>10}{row['lm_calls']:>10}{row['prompt_tokens']:>15}"
              f"{row['memory_lm_calls']:>14}{row['memory_prompt_tokens']:>15}{row['nodes']:>7}"
              f"{row['tree_bytes']:>12}{row['snippet_in_tree']!s:>13}{row['needle_in_node']!s:>13}"
              f"{row['termination']:>16}{row['seconds']:>7}", flush=True)
    fp = false_positives(passages)
    print(f"language test on real text: {fp}")
    print(json.dumps({**{f"{case}_{key}": value for case, row in rows.items() for key, value in row.items()
                         if key in ("lm_calls", "prompt_tokens", "memory_lm_calls", "memory_prompt_tokens", "nodes",
                                    "tree_bytes", "needle_in_node", "termination")},
                      "real_passages": fp["passages"], "real_passages_judged_junk": fp["passages_judged_junk"],
                      "real_chars_set_apart": fp["chars_set_apart"]}))


if __name__ == "__main__":
    main()

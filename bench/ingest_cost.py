"""What ingesting a LoCoMo conversation costs: LM calls, prompt and completion tokens per 1,000 ingested tokens.

``bank.ingest`` of a whole conversation (as ``amb eval --dataset locomo`` renders it) with ``--policy lm``,
three ways:

* ``ordered`` -- ``AMB_INGEST_ANALYSIS=ordered``, one call per cluster and per new node, each node judged
  after the verdicts on the nodes before it: the spec read strictly, and the bank ingest made before
  issue 21 (its batched mode made that bank in 4.69 calls/1k on conversation 26);
* ``sequential`` -- the default conversion order (every new node of a conversion judged on the graph as the
  conversion found it, verdicts applied in order after), one call per cluster and per node
  (``AMB_INGEST_BATCH=1``);
* ``batched`` -- the defaults: the same, packed into as few calls as the windows, the answer room and
  ``AMB_INGEST_BATCH`` allow. Its bank must equal ``sequential``'s node for node and edge for edge
  (checked: ``same bank``); ``ordered``'s may differ (``edges``, ``ctx``: contexts rewritten by a
  ``related`` verdict).

The LM is a deterministic scripted one that gives valid answers to every agent:

* classification groups consecutive segments into topics of about ``--topic-tokens`` tokens (300: the
  150-600-token nodes classification is meant to make), described by their most frequent words;
* structure keeps the first 40% of the words (inside the 30-50% target, so no retries);
* analysis says ``related`` (rewriting both contexts, marked "(linked to ...)", and keyword lists) when
  the new node and a candidate share two keywords or more, else ``unrelated`` (``--analysis
  unrelated``: always unrelated).

It answers an item of a batch call as it answers it alone, and stands for the limits of a real LM
(``--as``, the default LM ``deepseek/deepseek-chat`` unless told; ``--as none``: an LM LiteLLM does not
know, so the documented 8,000-token windows): the ingest agents' windows follow its context as
LiteLLM's table gives it, and its answers are cut at AmbConfig's ``max_tokens`` (``cut``: replies cut,
counted with the embedded model's BPE tokenizer, coarser than DeepSeek's, so rather too many; a cut
answer is asked again, and those calls are counted). ``--lm local`` ingests the first ``--slice`` tokens with the embedded model
instead (slow on CPU). Tokens are counted with the project's estimate (the scripted LM's own count);
the ingested tokens likewise.

    python bench/ingest_cost.py [--conversations 26 30] [--as MODEL|none] [--lm scripted|local] [--slice 2000]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from scripted_lm import ScriptedLM  # noqa: E402

from amb_dspy.agents.base import fallback_keywords  # noqa: E402
from amb_dspy.agents.chunking import estimate_tokens  # noqa: E402
from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import DEFAULT_LM, AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from optimize.locomo import load_locomo  # noqa: E402

DATASETS = Path(os.environ.get("AMB_DATASETS", "/work/shared/datasets"))
_SEGMENT = re.compile(r"^\[(\d+)\] ", re.M)
_LINK = " (linked to "


def topics_of(topic_tokens: int, speakers: tuple[str, ...]):
    """Classification: consecutive segments, a new topic once the current one holds ``topic_tokens``;
    keywords: the most frequent words but the speakers' names and the turns' dates."""
    names = re.compile(r"\[[^\]]*\]|\b(?:" + "|".join(map(re.escape, speakers)) + r")\b") if speakers else None

    def classify(call):
        text = call.inputs["segments"]
        marks = list(_SEGMENT.finditer(text))
        groups, current, used = [], [], 0
        for k, mark in enumerate(marks):
            body = text[mark.end(): marks[k + 1].start() if k + 1 < len(marks) else len(text)]
            if current and used >= topic_tokens:
                groups.append(current)
                current, used = [], 0
            current.append((int(mark.group(1)), body))
            used += estimate_tokens(body)
        groups += [current] if current else []
        clusters = []
        for group in groups:
            words = " ".join(body for _, body in group)
            keywords = fallback_keywords(names.sub(" ", words) if names else words, limit=5)
            clusters.append({"context": f"Talk about {', '.join(keywords[:3])}", "keywords": keywords,
                             "segments": [n for n, _ in group]})
        return {"should_cluster": len(clusters) > 1, "clusters": clusters}
    return classify


def first_words(call):
    words = call.inputs["content"].split()
    return {"summary": " ".join(words[: max(1, len(words) * 2 // 5)])}


def judge(related: bool):
    def analysis(call):
        new = call.input_json("new_node")
        mine = {k.lower() for k in new["keywords"]}
        out = []
        for candidate in call.input_json("candidates"):
            shared = sorted(mine & {k.lower() for k in candidate["keywords"]})
            if related and len(shared) >= 2:
                out.append({"candidate": candidate["number"], "relationship": "related", "reasoning": "shared words",
                            "context_update_new": new["context"].split(_LINK)[0] + f"{_LINK}{candidate['keywords'][0]})",
                            "context_update_existing": candidate["context"].split(_LINK)[0] + f"{_LINK}{new['keywords'][0]})",
                            "keywords_update_new": new["keywords"][:4] + shared[:1],
                            "keywords_update_existing": candidate["keywords"][:4] + shared[-1:]})
            else:
                out.append({"candidate": candidate["number"], "relationship": "unrelated", "reasoning": "-"})
        return {"relationships": out}
    return analysis


def bank_shape(store) -> tuple:
    graph = store.graph
    nodes = [(n.summary, n.context, tuple(n.keywords)) for n in graph.nodes_dict.values()]
    index = {node_id: k for k, node_id in enumerate(graph.nodes_dict)}
    edges = sorted(tuple(sorted((index[a], index[b]))) for a, b in graph.edges())
    return nodes, edges


def ingest(text: str, batch: int, lm, embedder, analysis: str = "conversion") -> tuple[dict, tuple]:
    config = AmbConfig(ingest_batch=batch, ingest_analysis=analysis, policy="lm", storage_dir=Path("/tmp/amb-ingest-cost"))
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.ingest(text, name="locomo")
    if result.errors and isinstance(lm, CutScriptedLM):  # the scripted LM never fails; a real one may (a column)
        raise SystemExit(f"ingest failed: {result.errors[:2]}")
    total = {key: sum(usage[key] for usage in result.usage.values())
             for key in ("calls", "prompt_tokens", "completion_tokens")}
    by_agent = {agent: usage["calls"] for agent, usage in result.usage.items()}
    rewritten = sum(_LINK in node.context for node in result.store.graph.nodes_dict.values())  # the scripted rewrite
    return {"nodes": result.nodes, "edges": result.edges, "contexts_rewritten": rewritten, "seconds": result.seconds,
            **total, "cut": getattr(lm, "cut", 0), "errors": result.errors, "by_agent": by_agent}, bank_shape(result.store)


def make_lm(kind: str, topic_tokens: int, related: bool, speakers: tuple[str, ...], stands_for: str = DEFAULT_LM):
    if kind == "local":
        from amb_dspy.lm import build_lm

        lm = build_lm("local", AmbConfig())
        lm.cache = False  # the batched ingest must not read the sequential one's answers from DSPy's cache
        return lm
    return CutScriptedLM(stands_for, classification=topics_of(topic_tokens, speakers), structure=first_words,
                         analysis=judge(related))


class CutScriptedLM(ScriptedLM):
    """The scripted LM's words with the limits of the LM it stands for (``--as``: by default the default LM):
    its name, so that the agents' windows follow its context as LiteLLM's table gives it, and AmbConfig's
    ``max_tokens``, as ``build_lm`` sets it. A reply longer than that is cut there, as the LM would cut it
    (counted in ``cut``), its tokens counted by :func:`reply_tokens`."""

    def __init__(self, stands_for: str, **scripts):
        super().__init__(**scripts)
        self.model = stands_for if stands_for != "none" else self.model
        self.kwargs["max_tokens"] = AmbConfig().max_tokens
        self.cut = 0

    def _respond(self, messages):
        reply, prompt = super()._respond(messages)
        if reply_tokens(reply) <= self.kwargs["max_tokens"]:
            return reply, prompt
        self.cut += 1
        words = reply.split(" ")
        while reply_tokens(" ".join(words)) > self.kwargs["max_tokens"]:
            words = words[: len(words) * 9 // 10]
        return " ".join(words), prompt


@functools.cache
def _bpe():
    """The embedded model's tokenizer (SmolLM2's, a 49k vocabulary: it counts more tokens than DeepSeek's 128k
    one, fewer than the project's deliberately high estimate, about 1.6 of its tokens on these answers)."""
    from amb_dspy.lm import LlamaCppEngine

    return LlamaCppEngine("local", n_ctx=512)


def reply_tokens(reply: str) -> int:
    """A reply's tokens as an LM's max_tokens counts them: a real BPE tokenizer where installed, else the estimate."""
    try:
        return _bpe().count_tokens(reply)
    except Exception:  # noqa: BLE001 - no embedded model installed: the estimate (more cuts than a real LM makes)
        return estimate_tokens(reply)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", nargs="+", default=["26", "30"])
    parser.add_argument("--lm", choices=["scripted", "local"], default="scripted")
    parser.add_argument("--as", dest="stands_for", default=DEFAULT_LM, help="the LM whose limits the scripted one has")
    parser.add_argument("--slice", type=int, default=0, help="ingest only the first N tokens (0: all)")
    parser.add_argument("--topic-tokens", type=int, default=300)
    parser.add_argument("--analysis", choices=["related", "unrelated"], nargs="+", default=["related", "unrelated"])
    parser.add_argument("--batch", type=int, default=None, help="AMB_INGEST_BATCH (default: the LM's, 24 hosted, 1 embedded)")
    args = parser.parse_args()
    embedder = default_embedder()
    rows = []
    print(f"{'conv':>4} {'analysis':>9} {'mode':>10} {'tokens':>7} {'nodes':>5} {'edges':>5} {'ctx':>4} {'calls':>5} "
          f"{'calls/1k':>8} {'prompt/1k':>9} {'compl/1k':>8} {'cut':>3} {'same bank':>9}  calls by agent")
    for name in args.conversations:
        conversation = load_locomo(f"locomo:{DATASETS / 'locomo' / f'{name}.json'}")[0]
        text = conversation.text()
        if args.slice:
            text = text[: args.slice * 4]  # the estimate's four characters a token
            text = text[: text.rfind("\n")]
        tokens = estimate_tokens(text)
        for analysis in args.analysis if args.lm == "scripted" else ["model"]:
            shapes = {}
            modes = [("ordered", 1, "ordered")] if args.lm == "scripted" else []
            modes += [("sequential", 1, "conversion"), ("batched", args.batch, "conversion")]
            for mode, batch, order in modes:
                lm = make_lm(args.lm, args.topic_tokens, analysis == "related", tuple(conversation.speakers),
                             args.stands_for)
                figures, shapes[mode] = ingest(text, batch, lm, embedder, order)
                same = "-" if mode != "batched" else "yes" if shapes[mode] == shapes["sequential"] else "NO"
                row = {"conversation": name, "analysis": analysis, "mode": mode, "tokens": tokens, **figures,
                       "calls_per_1k_tokens": round(1000 * figures["calls"] / tokens, 3),
                       "prompt_tokens_per_1k": round(1000 * figures["prompt_tokens"] / tokens, 1),
                       "completion_tokens_per_1k": round(1000 * figures["completion_tokens"] / tokens, 1),
                       "same_bank": same}
                rows.append(row)
                print(f"{name:>4} {analysis:>9} {mode:>10} {tokens:>7} {row['nodes']:>5} {row['edges']:>5} "
                      f"{row['contexts_rewritten']:>4} {row['calls']:>5} {row['calls_per_1k_tokens']:>8} "
                      f"{row['prompt_tokens_per_1k']:>9} {row['completion_tokens_per_1k']:>8} {row['cut']:>3} "
                      f"{same:>9}  {row['by_agent']}", flush=True)

    def summary(mode: str) -> dict:
        picked = [r for r in rows if r["mode"] == mode]
        if not picked:
            return {}
        tokens = sum(r["tokens"] for r in picked)
        return {"calls_per_1k_tokens": round(1000 * sum(r["calls"] for r in picked) / tokens, 3),
                "prompt_tokens_per_1k": round(1000 * sum(r["prompt_tokens"] for r in picked) / tokens, 1),
                "completion_tokens_per_1k": round(1000 * sum(r["completion_tokens"] for r in picked) / tokens, 1)}

    batched = [r for r in rows if r["mode"] == "batched"]
    print(json.dumps({"bench": "ingest_cost", "lm": args.lm, "as": args.stands_for, "batch": args.batch,
                      "topic_tokens": args.topic_tokens, "ordered": summary("ordered"), "before": summary("sequential"),
                      "after": summary("batched"), **summary("batched"),
                      "worst_calls_per_1k_tokens": max(r["calls_per_1k_tokens"] for r in batched),
                      # met only by an ingest that made its bank: an LM whose calls fail makes few calls and no nodes
                      "target_met": all(r["calls_per_1k_tokens"] <= 1.0 and r["nodes"] and not r["errors"] for r in batched),
                      "same_bank": all(r["same_bank"] == "yes" for r in batched), "rows": rows}))


if __name__ == "__main__":
    main()

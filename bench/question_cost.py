"""What one question costs: LM calls, prompt and completion tokens per question (median and p90) for the
bank (an ingested bank, answered from memory first), rag and context modes, on LoCoMo and HotpotQA.

By default the LM is scripted and deterministic: the answer agent says "sufficient" (citing the first
memory group) for a given share of the questions, picked by a hash of the question (``--share``, several
values allowed); every other call gets a well-formed minimal answer (one cluster per segment, 40%
summaries, nothing related, planning one search then done, ReAct searching once). Tokens are counted
on the real prompts DSPy renders (tests/scripted_lm.py's estimate). The bank is also run with the fast
path off (``--no-fast`` column: today's loop) so the cost of an insufficient memory can be read beside it.
``--lm local`` (or any LM spec) measures a real model on ``--n`` questions instead.

LoCoMo: the conversation is ingested once (its cost reported apart; ``--ingest-policy heuristic`` for a
slow real LM) and every question asks a copy of that bank. rag and context do not depend on the share:
they are measured once. HotpotQA: each question's paragraphs are ingested into a bank first
(not counted), then the question asks it.

    python bench/question_cost.py --locomo /work/shared/datasets/locomo/26.json \
        --hotpotqa /work/shared/datasets/hotpotqa/dev_distractor_300.jsonl [--n 20] [--share 1.0 0.5 0.0]
    python bench/question_cost.py --locomo .../26.json --lm local --n 3 --modes bank rag context
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AMB_CORPUS_CACHE", "0")

from scripted_lm import MEMORY_ANSWER, ScriptedLM  # noqa: E402

from amb_dspy.agents.chunking import estimate_tokens  # noqa: E402
from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from optimize.evaluate import measured, run_eval  # noqa: E402
from optimize.hotpotqa import load_hotpotqa  # noqa: E402

REACT = "next_thought,next_tool_name,next_tool_args"
EXTRACT = "reasoning,answer"
_GROUP_ID = re.compile(r"^Memory \d+ \(node ([0-9a-f]+)\):$", re.M)


def sufficient_for(question: str, share: float) -> bool:
    """Deterministic: the question's hash, as a fraction of 1, falls under ``share``."""
    return int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def scripted_lm(share: float) -> ScriptedLM:
    def answer_from_memory(call):
        ids = _GROUP_ID.findall(call.inputs["memory"])
        sufficient = bool(ids) and sufficient_for(call.inputs["task_goal"], share)
        return {"answer": "an answer from memory", "cited_node_ids": ids[:1], "sufficient": sufficient,
                "reason": "the notes state it" if sufficient else "the notes do not say"}

    def clusters(call):
        count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
        return {"should_cluster": count > 1,
                "clusters": [{"context": f"topic {i}", "keywords": [f"k{i}"], "segments": [i]} for i in range(1, count + 1)]}

    def planning(call):
        first = not call.inputs.get("executed_task", "").strip()
        return {"executed_status": "success", "executed_context": "looked it up",
                "next_task": "Search for the facts the goal needs" if first else ""}

    def react(call):
        if "observation_0" in call.messages[-1]["content"]:
            return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
        return {"next_thought": "search", "next_tool_name": "search", "next_tool_args": {"query": "the goal"}}

    return ScriptedLM(
        classification=clusters, structure=lambda call: {"summary": call.inputs["content"][: len(call.inputs["content"]) * 2 // 5]},
        analysis=lambda call: {"relationships": [{"candidate": c["number"], "relationship": "unrelated", "reasoning": "-"}
                                                 for c in call.input_json("candidates")]},
        integration=lambda call: {}, planning=planning,
        **{REACT: react, EXTRACT: lambda call: {"reasoning": "-", "answer": "an answer"},
           MEMORY_ANSWER: answer_from_memory, "answer": lambda call: {"answer": "an answer"}},
    )


def spread(rows: list[dict], field: str) -> tuple[float, float]:
    values = sorted(r[field] for r in rows)
    if not values:
        return 0.0, 0.0
    p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
    return statistics.median(values), p90


def summarise(dataset: str, mode: str, label: str, rows: list[dict], extra: dict | None = None) -> dict:
    out = {"dataset": dataset, "mode": mode, "label": label, "n": len(rows)}
    for field in ("calls", "prompt_tokens", "completion_tokens"):
        median, p90 = spread(rows, field)
        out[f"{field}_median"], out[f"{field}_p90"] = median, p90
    out["f1_mean"] = round(sum(r.get("f1", 0.0) for r in rows) / len(rows), 4) if rows else 0.0
    return {**out, **(extra or {})}


def locomo_rows(path: str, mode: str, lm, config: AmbConfig, n: int, embedder, lm_name: str,
                ingest_policy: str | None) -> tuple[list[dict], dict]:
    if mode != "bank":
        report = run_eval(f"locomo:{path}", lm=lm, n=n, mode=mode, config=config, embedder=embedder, lm_name=lm_name)
        return [q.model_dump() for q in report.questions], {}
    from optimize.locomo import load_locomo, locomo_f1

    conversation = load_locomo(f"locomo:{path}", n=n)[0]
    with tempfile.TemporaryDirectory(prefix="amb-qcost-") as work:
        config = config.model_copy(update={"storage_dir": Path(work) / "s", "temp_dir": Path(work) / "t"})
        ingest_config = config.model_copy(update={"policy": ingest_policy}) if ingest_policy else config
        ingested = MemoryBank(ingest_config, lm=lm, embedder=embedder)
        cost = ingested.ingest(conversation.text(), conversation.name)
        rows = []
        for question in conversation.questions:
            def ask(text, store=ingested.store):
                return MemoryBank(config, lm=lm, embedder=embedder).run(text, bank=store).answer

            prediction, error, usage, seconds = measured(ask, question.question)
            rows.append({**usage, "seconds": seconds, "error": error,
                         "f1": locomo_f1(prediction, question.answer, question.category)})
    ingest = {f: sum(u[f] for u in cost.usage.values()) for f in ("calls", "prompt_tokens")}
    return rows, {"ingest_policy": ingest_config.policy, "ingest_calls": ingest["calls"],
                  "ingest_prompt_tokens": ingest["prompt_tokens"], "ingest_nodes": cost.nodes,
                  "conversation_tokens": estimate_tokens(conversation.text())}


def hotpotqa_bank_rows(path: str, lm, config: AmbConfig, n: int, embedder) -> list[dict]:
    """Each question's paragraphs ingested first (not counted), then the question asked of that bank."""
    from optimize.metrics import answer_f1

    rows = []
    with tempfile.TemporaryDirectory(prefix="amb-qcost-") as work:
        config = config.model_copy(update={"storage_dir": Path(work) / "s", "temp_dir": Path(work) / "t"})
        for item in load_hotpotqa(f"hotpotqa:{path}", split="validation", n=n):
            ingested = MemoryBank(config, lm=lm, embedder=embedder)
            ingested.ingest(item.context_text(), item.id)

            def ask(question, store=ingested.store):
                return MemoryBank(config, lm=lm, embedder=embedder).run(question, bank=store).answer

            prediction, error, usage, _ = measured(ask, item.question)
            rows.append({**usage, "f1": answer_f1(prediction, item.answer), "error": error})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", help="a LoCoMo conversation file (e.g. 26.json)")
    parser.add_argument("--hotpotqa", help="a HotpotQA JSONL (e.g. dev_distractor_300.jsonl)")
    parser.add_argument("--n", type=int, default=20, help="questions per dataset")
    parser.add_argument("--share", type=float, nargs="+", default=[1.0, 0.5, 0.0],
                        help="shares of questions the scripted answer agent finds memory sufficient for")
    parser.add_argument("--lm", default=None, help="a real LM (local, gguf:PATH, a DSPy model string) instead of the script")
    parser.add_argument("--modes", nargs="+", default=["bank", "rag", "context"])
    parser.add_argument("--fast-only", action="store_true", help="bank mode without its --no-fast comparison run")
    parser.add_argument("--ingest-policy", choices=["lm", "heuristic", "auto"], default=None,
                        help="the policy that ingests the LoCoMo bank (default: the questions' own); heuristic "
                             "makes no LM call, for a slow real LM")
    args = parser.parse_args()

    embedder = default_embedder()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="amb-qcost-cache-") as cache:
        base = AmbConfig(cache_dir=Path(cache), **({"lm": args.lm} if args.lm else {}))
        if args.lm:
            from amb_dspy.lm import build_lm, resolve_lm_spec

            spec, _ = resolve_lm_spec(base)
            runs = [(f"lm {spec}", build_lm(spec, base), spec)]
        else:
            runs = [(f"share {share:.2f}", scripted_lm(share), f"scripted/{share}") for share in args.share]
        for label, lm, name in runs:
            for mode in args.modes:
                if mode != "bank" and label != runs[0][0]:
                    continue  # rag and context do not depend on the scripted share: measured once
                compare = mode == "bank" and not args.fast_only and (args.lm or label == runs[-1][0])
                fast_variants = [True, False] if compare else [True]
                for fast in fast_variants:
                    config = base.model_copy(update={"fast_path": fast})
                    tag = label if fast else f"{label} --no-fast"
                    if args.locomo:
                        rows, extra = locomo_rows(args.locomo, mode, lm, config, args.n, embedder, name, args.ingest_policy)
                        results.append(summarise(f"locomo {Path(args.locomo).stem}", mode, tag, rows, extra))
                        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
                    if args.hotpotqa:
                        if mode == "bank":
                            rows = hotpotqa_bank_rows(args.hotpotqa, lm, config, args.n, embedder)
                        else:
                            report = run_eval(f"hotpotqa:{args.hotpotqa}", lm=lm, n=args.n, mode=mode, config=config,
                                              embedder=embedder, lm_name=name)
                            rows = [q.model_dump() for q in report.questions]
                        results.append(summarise("hotpotqa", mode, tag, rows))
                        print(json.dumps(results[-1]), file=sys.stderr, flush=True)

    header = f"{'dataset':<12} {'mode':<8} {'LM / share':<26} {'n':>3} {'calls med':>9} {'p90':>5} {'prompt med':>10} {'p90':>7} {'compl med':>9} {'p90':>6} {'F1':>6}"
    print(header)
    for r in results:
        print(f"{r['dataset']:<12} {r['mode']:<8} {r['label']:<26} {r['n']:>3} {r['calls_median']:>9.1f} {r['calls_p90']:>5.0f} "
              f"{r['prompt_tokens_median']:>10.0f} {r['prompt_tokens_p90']:>7.0f} {r['completion_tokens_median']:>9.0f} "
              f"{r['completion_tokens_p90']:>6.0f} {r['f1_mean']:>6.3f}")
    print(json.dumps({"bench": "question_cost", "results": results}))


if __name__ == "__main__":
    main()

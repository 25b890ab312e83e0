"""`amb serve` under load, driven by the mcp SDK's own client, with the heuristic policy:

1. memory_context over stdio on a 1,000-node bank (HotpotQA dev paragraphs, one node each): p50/p95;
2. 20 task sessions at once over streamable HTTP on 127.0.0.1, each observing 10 results: errors, entries
   that landed in another task's bank, and observed results missing from their own task's tree;
3. memory_observe of a 2,000-token result (stdio): p50/p95 of the call as clients make it (queued: the
   conversion runs on the task's thread before its next request), and of ``wait=true`` (the call returns
   once the result is memory: the conversion's own cost).

Targets: context p50 <= 50 ms and p95 <= 150 ms; 0 errors, 0 leaks, 0 missing; observe p50 <= 300 ms.
Times are round trips seen by the client. A table, then one JSON line.

    python bench/serve.py ../shared/datasets/hotpotqa/dev_distractor_300.jsonl [--contexts 200] [--observes 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from local_servers import free_port, stop, wait_listening  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from amb_dspy.agents.chunking import estimate_tokens  # noqa: E402
from amb_dspy.memory.graph_ops import MemoryStore  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.storage import InsightDoc, InteractionEntry, NodeContent  # noqa: E402
from optimize.hotpotqa import load_hotpotqa  # noqa: E402

SERVE = [str(ROOT / "cli.py"), "serve", "--policy", "heuristic"]


def paragraphs(items) -> list[tuple[str, str]]:
    seen, out = set(), []
    for item in items:
        for paragraph in item.context:
            if paragraph.title not in seen and paragraph.text:
                seen.add(paragraph.title)
                out.append((paragraph.title, paragraph.text))
    return out


def build_bank(path: Path, passages: list[tuple[str, str]]) -> None:
    """A bank of one node per passage (its text as the summary) and one entry behind each."""
    store = MemoryStore(default_embedder(), InsightDoc(task_goal="HotpotQA dev paragraphs"))
    for start in range(0, len(passages), 100):
        batch = passages[start:start + 100]
        with store.transaction():
            nodes = store.add_nodes([NodeContent(summary=text, context=title, keywords=title.split()[:5])
                                     for title, text in batch])
            for node, (_title, text) in zip(nodes, batch):
                store.record_entry(InteractionEntry(text=text, metadata={"source": "bench"}), [node.id])
    store.export(path)


def env(work: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(work / "storage"),
            "AMB_TEMP_DIR": str(work / "temp"), "AMB_RECALL": "0"}


async def ok(session: ClientSession, tool: str, /, **arguments):
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    if result.is_error:
        raise RuntimeError(text)
    return json.loads(text) if text[:1] in "{[" else text


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


async def over_stdio(work: Path, bank: Path, questions: list[str], contexts: int, results: list[str]) -> dict:
    params = StdioServerParameters(command=sys.executable, args=SERVE, env=env(work), cwd=str(work))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        context_ms = []
        tasks = [(await ok(session, "memory_start_task", goal=q, bank=str(bank)))["task_id"] for q in questions]
        for i in range(contexts):
            started = time.perf_counter()
            await ok(session, "memory_context", task_id=tasks[i % len(tasks)])
            context_ms.append(1000 * (time.perf_counter() - started))
        out = {"context_ms": context_ms}
        half = len(results) // 2  # other texts for each way: the embedding model caches vectors of texts seen
        for wait, texts in ((False, results[:half]), (True, results[half:])):
            task = (await ok(session, "memory_start_task", goal=questions[0]))["task_id"]
            times = []
            for i, text in enumerate(texts):
                started = time.perf_counter()
                await ok(session, "memory_observe", task_id=task, tool="visit", arguments={"url": f"doc://{i}"},
                         result=text, wait=wait)
                times.append(1000 * (time.perf_counter() - started))
                if not wait:  # the next result comes after the agent's next step, which reads memory
                    await ok(session, "memory_context", task_id=task)
            out["wait_ms" if wait else "observe_ms"] = times
        return out


async def over_http(url: str, work: Path, sessions: int, per_task: int, passages: list[tuple[str, str]]) -> dict:
    errors: list[str] = []

    async def one(i: int) -> tuple[str, list[str], dict]:
        texts = [f"{passages[i * per_task + j][1]} [task {i} result {j}]" for j in range(per_task)]
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            task = (await ok(session, "memory_start_task", goal=f"Task {i}: {passages[i * per_task][0]}"))["task_id"]
            for j, text in enumerate(texts):
                try:
                    await ok(session, "memory_observe", task_id=task, tool="search", arguments={"query": f"t{i} q{j}"},
                             result=text)
                except RuntimeError as exc:
                    errors.append(str(exc))
            path = Path((await ok(session, "memory_export", task_id=task, path=f"http-{i}.json"))["path"])
            await ok(session, "memory_end_task", task_id=task, remember=False)
        return task, texts, json.loads(path.read_text())

    started = time.perf_counter()
    done = await asyncio.gather(*(one(i) for i in range(sessions)), return_exceptions=True)
    seconds = time.perf_counter() - started
    leaks = missing = 0
    for i, outcome in enumerate(done):
        if isinstance(outcome, BaseException):
            error = innermost(outcome)
            errors.append(f"{type(error).__name__}: {error}")
            continue
        _task, texts, bank = outcome
        entries = [e["text"] for e in bank["interaction_tree"]["entries"]]
        leaks += sum(1 for e in entries if f"[task {i} " not in e)
        missing += sum(1 for t in texts if t not in entries)
    return {"errors": errors, "leaks": leaks, "missing": missing, "seconds": seconds}


def innermost(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio task groups raise."""
    while getattr(error, "exceptions", None):
        error = error.exceptions[0]
    return error


def run_http(work: Path, sessions: int, per_task: int, passages) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, *SERVE, "--http", str(port)], env=env(work), cwd=str(work),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, server, 180, what="amb serve --http")
        return asyncio.run(over_http(f"http://127.0.0.1:{port}/mcp", work, sessions, per_task, passages))
    finally:
        stop(server, timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--contexts", type=int, default=200)
    parser.add_argument("--observes", type=int, default=15)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--per-task", type=int, default=10)
    args = parser.parse_args()
    items = load_hotpotqa(f"hotpotqa:{args.path}")
    passages = paragraphs(items)
    if len(passages) < max(args.nodes, args.sessions * args.per_task):
        sys.exit(f"only {len(passages)} paragraphs in {args.path}")
    long_results, text = [], ""
    for _title, paragraph in passages[args.nodes:]:  # 2,000-token results from paragraphs not in the bank
        text = f"{text}\n\n{paragraph}".strip()
        if estimate_tokens(text) >= 2000:
            long_results.append(text)
            text = ""
            if len(long_results) == 2 * args.observes:
                break
    with tempfile.TemporaryDirectory(prefix="amb-bench-serve-") as work:
        work = Path(work)
        bank = work / "storage" / "bank.json"  # the server reads bank files from its storage folder only
        build_bank(bank, passages[:args.nodes])
        stdio = asyncio.run(over_stdio(work, bank, [i.question for i in items[:5]], args.contexts, long_results))
        http = run_http(work, args.sessions, args.per_task, passages)
    context_p50, context_p95 = quantiles(stdio["context_ms"])
    observe_p50, observe_p95 = quantiles(stdio["observe_ms"])
    wait_p50, wait_p95 = quantiles(stdio["wait_ms"])
    tokens = statistics.median(estimate_tokens(t) for t in long_results)
    rows = [
        (f"memory_context, {args.nodes}-node bank, stdio", f"p50 {context_p50:.1f} ms, p95 {context_p95:.1f} ms",
         "p50 <= 50 ms, p95 <= 150 ms", context_p50 <= 50 and context_p95 <= 150),
        (f"{args.sessions} HTTP sessions x {args.per_task} observes",
         f"{len(http['errors'])} errors, {http['leaks']} leaks, {http['missing']} missing, {http['seconds']:.1f} s",
         "0 / 0 / 0", not http["errors"] and not http["leaks"] and not http["missing"]),
        (f"memory_observe, {tokens:.0f}-token result, stdio", f"p50 {observe_p50:.0f} ms, p95 {observe_p95:.0f} ms",
         "p50 <= 300 ms", observe_p50 <= 300),
    ]
    conversion = ("  wait=true (the conversion itself)", f"p50 {wait_p50:.0f} ms, p95 {wait_p95:.0f} ms",
                  "(no target)", None)
    print(f"{'measure':<44}{'result':<46}{'target':<30}met")
    for name, result, target, met in [*rows, conversion]:
        print(f"{name:<44}{result:<46}{target:<30}{'' if met is None else 'yes' if met else 'NO'}")
    for error in http["errors"][:5]:
        print(f"error: {error}")
    print(json.dumps({"nodes": args.nodes, "context_p50_ms": round(context_p50, 2), "context_p95_ms": round(context_p95, 2),
                      "http_sessions": args.sessions, "observes_per_session": args.per_task,
                      "http_errors": len(http["errors"]), "cross_task_leaks": http["leaks"],
                      "missing_results": http["missing"], "observe_tokens": tokens,
                      "observe_p50_ms": round(observe_p50, 1), "observe_p95_ms": round(observe_p95, 1),
                      "observe_wait_p50_ms": round(wait_p50, 1), "observe_wait_p95_ms": round(wait_p95, 1),
                      "targets_met": all(met for *_, met in rows)}))


if __name__ == "__main__":
    main()

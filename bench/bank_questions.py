"""Questions on a bank database as an agent asks them: task start, the first ``memory_context``, the next ones.

For a bank built by ``bench/add_latency.py --cache DIR`` (``DIR/bank_1000000.sqlite``, saved with its line
vectors) or any bank file: starts a task on it as the MCP server's ``memory_start_task(bank=...)`` does, asks
its first ``memory_context`` at once and, on a second task, after ``--think`` seconds (the task lays its lines
out meanwhile), then times the evidence block of ``--n`` HotpotQA questions (p50 / p95). Last line JSON.

Then the issue's warm start (issue 40, item 5): ``--tasks`` more tasks on the same bank, which the tasks above
already opened in this process, each started and asked its first ``memory_context`` (the default budget) at once,
as an agent does: ``warm_start_ms`` / ``warm_first_context_ms`` / ``warm_total_ms`` are the p50s of the start, of
the first context and of both (the target: ``warm_total_ms`` <= 80 at 215k tokens, <= 150 at 1M). Each task is
closed (remembering nothing) before the next starts. ``--mcp`` measures the same over MCP stdio as well (``amb
serve --policy heuristic`` in a child process, the mcp SDK's own client; ``mcp_*`` keys): a first task started and
asked at once (the bank read and laid out), then ``--tasks`` tasks, each ended before the next starts.

    python bench/bank_questions.py /tmp/cache/bank_1000000.sqlite
    python bench/with_postgres.py python bench/bank_questions.py BANK.sqlite --database {url}

With ``--database URL`` the bank file is first copied into that PostgreSQL database as the bank ``bench``
(``copy_s``), with the evidence view's layout of its lines, and every task (and ``amb serve --database``) starts
from there: the process reads it from the database as a replica that has just started does, taking the layout over
as a replica does once one process laid that bank version out (issue 40; ``--no-layout``: the first one, which lays
it out). A bank file is read as it is: a bank database keeps the layout its first reader made, so a second run
reads it as a replica would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa" / "dev_distractor_300.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", help="a bank file (a .sqlite bank database keeps its line vectors)")
    parser.add_argument("--n", type=int, default=30, help="questions timed after the first")
    parser.add_argument("--think", type=float, default=3.0, help="seconds between the second task's start and its first question")
    parser.add_argument("--tasks", type=int, default=15, help="tasks started warm, on the bank the first tasks opened")
    parser.add_argument("--mcp", action="store_true", help="the warm starts over MCP stdio too (amb serve)")
    parser.add_argument("--database", default="", help="a PostgreSQL URL: the bank is copied there first and read from there")
    parser.add_argument("--no-layout", action="store_true", help="copy it there without its lines' layout (the first process to open a bank version lays it out)")
    args = parser.parse_args()
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()][: args.n + 1]
    embedder = default_embedder()
    embedder.embed(["warm-up"])
    work = Path(tempfile.mkdtemp(prefix="amb-bank-questions-"))
    row = {"load": round(os.getloadavg()[0], 2), "backend": "postgresql" if args.database else "sqlite"}
    if args.database:
        row["copy_s"] = copied_into_database(args.database, args.bank, embedder, layout=not args.no_layout)
        args.bank = "bench"
    config = AmbConfig(policy="heuristic", storage_dir=work / "storage", temp_dir=work / "temp",
                       database_url=args.database)
    bank = MemoryBank(config, embedder=embedder)
    for think in (0.0, args.think):
        started = time.perf_counter()
        session = bank.start_session(questions[0], bank=args.bank)
        row[f"start_s_{think:g}"] = round(time.perf_counter() - started, 2)
        time.sleep(think)
        started = time.perf_counter()
        session.context(1000)
        row[f"first_context_s_after_{think:g}s"] = round(time.perf_counter() - started, 3)
    view, times = session.memory.adapter.view, []
    for question in questions[1:]:
        started = time.perf_counter()
        view.block(question, 1000)
        times.append(time.perf_counter() - started)
    times.sort()
    row.update(nodes=len(session.store.graph), p50_ms=round(1000 * statistics.median(times), 1),
               p95_ms=round(1000 * times[max(0, int(0.95 * len(times)) - 1)], 1))
    row.update(warm_starts(bank, args.bank, questions, args.tasks))
    if args.mcp:
        row.update(asyncio.run(over_mcp(args.bank, questions, args.tasks, work, args.database)))
    row.update(rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), load_after=round(os.getloadavg()[0], 2))
    print("  ".join(f"{key} {value}" for key, value in row.items()))
    print(json.dumps(row))


def copied_into_database(url: str, bank_file: str, embedder, layout: bool = True) -> float:
    """Copy the bank file into the database at ``url`` as the bank ``bench``, with the evidence view's layout of its
    lines (``layout``: as the first process that lays a bank version out keeps it there for the next ones); the
    seconds it took."""
    from amb_dspy.memory.graph_ops import MemoryStore
    from amb_dspy.memory.view.line_index import stored_layouts
    from amb_dspy.storage.bank_pg import DatabaseBank

    started = time.perf_counter()
    store = MemoryStore.load(bank_file, embedder)
    store.save(DatabaseBank(url, "bench"), line_layouts=stored_layouts(store) if layout else None)
    return round(time.perf_counter() - started, 2)


def warm_starts(bank: MemoryBank, bank_file: str, questions: list[str], tasks: int) -> dict[str, float]:
    """``tasks`` tasks on ``bank_file`` (opened already in this process), each started and asked its first context
    at once: the p50 milliseconds of the start, of that context and of both."""
    starts, contexts, totals = [], [], []
    for number in range(tasks):
        started = time.perf_counter()
        session = bank.start_session(questions[number % len(questions)], bank=bank_file)
        opened = time.perf_counter()
        session.context()
        done = time.perf_counter()
        session.close(remember=False)
        starts.append(opened - started)
        contexts.append(done - opened)
        totals.append(done - started)
    return {"warm_start_ms": round(1000 * statistics.median(starts), 1),
            "warm_first_context_ms": round(1000 * statistics.median(contexts), 1),
            "warm_total_ms": round(1000 * statistics.median(totals), 1)}


async def over_mcp(bank: str, questions: list[str], tasks: int, work: Path, database: str) -> dict[str, float]:
    """:func:`warm_starts` over MCP stdio, after a first task (cold: the server reads and lays out the bank), on
    a bank file or, with ``database``, the bank of that name there."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "AMB_STORAGE_DIR": str(work / "mcp"), "AMB_RECALL": "0"}
    serve = [str(root / "cli.py"), "serve", "--policy", "heuristic"]
    if database:
        serve += ["--database", database]
    else:
        bank = str(Path(bank).resolve())
        serve += ["--allow-dir", str(Path(bank).parent)]

    async def call(session: ClientSession, tool: str, **arguments) -> dict:
        result = await session.call_tool(tool, arguments)
        text = result.content[0].text
        if result.is_error:
            raise RuntimeError(text)
        return json.loads(text) if text[:1] in "{[" else {"text": text}

    times: dict[str, list[float]] = {"start": [], "first_context": [], "total": []}
    async with stdio_client(StdioServerParameters(command=sys.executable, args=serve, env=env)) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        for number in range(tasks + 1):
            started = time.perf_counter()
            task = (await call(session, "memory_start_task", goal=questions[number % len(questions)], bank=bank))
            opened = time.perf_counter()
            await call(session, "memory_context", task_id=task["task_id"])
            done = time.perf_counter()
            await call(session, "memory_end_task", task_id=task["task_id"], remember=False)
            for key, seconds in (("start", opened - started), ("first_context", done - opened), ("total", done - started)):
                times[key].append(1000 * seconds)
    out = {"mcp_cold_total_ms": round(times["total"][0], 1)}
    out.update({f"mcp_warm_{key}_ms": round(statistics.median(values[1:]), 1) for key, values in times.items()})
    return out


if __name__ == "__main__":
    main()

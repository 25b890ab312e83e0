"""MCP tasks survive the server: 8 tasks over streamable HTTP, 10 observes each, the server killed and restarted.

`amb serve --http --policy heuristic` (no LM) on one storage folder; 8 clients of the mcp SDK each start a task
and observe 10 results (``wait=false``, as clients call it: the reply comes before the conversion runs). The
server is stopped 5 times at random points, the signal alternating kill -9 and SIGTERM, and started again:

* ``traffic`` stops: the signal goes the moment the K-th observe is answered, the other clients' calls in
  flight and conversions still queued; a client whose call failed sends it again after the restart (a result
  the server had kept comes back as a repeat, not stored twice);
* ``quiet`` stops: after the K-th observe the clients read every task's ``memory_context``, then the signal; after
  the restart each block is read again and compared.

At the end each task's bank (memory_export) must hold every observe that was answered, once: ``observations_lost``
counts the answered ones missing, ``duplicated`` the ones held twice; ``context_changed`` the blocks that differ
after a restart. A table, then one JSON line.

    python bench/serve_restart.py [--tasks 8] [--observes 10] [--restarts 5] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from local_servers import free_port, wait_listening  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

SERVE = [str(ROOT / "cli.py"), "serve", "--policy", "heuristic"]
KINDS = ("traffic", "quiet", "quiet", "traffic", "traffic")  # with the alternating signal: each pair at least once
PASSAGE = ("Report {i} of task {t}: the river {river} passes the town of {town}, where the {event} is held in "
           "{month}; its harbour was rebuilt in {year}.")


class Server:
    def __init__(self, work: Path):
        self.work, self.port = work, free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(work / "storage"),
                    "AMB_TEMP_DIR": str(work / "temp"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.process: subprocess.Popen | None = None

    def start(self) -> float:
        began = time.monotonic()
        self.process = subprocess.Popen([sys.executable, *SERVE, "--http", str(self.port)], env=self.env,
                                        cwd=str(self.work), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.process, 180, what="amb serve --http", pause=0.2)
        return time.monotonic() - began

    def stop(self, how: signal.Signals) -> float:
        began = time.monotonic()
        self.process.send_signal(how)
        self.process.wait(timeout=120)
        return time.monotonic() - began


def result(task: int, i: int) -> str:
    rng = random.Random(task * 100 + i)
    return PASSAGE.format(i=i, t=task, river=rng.choice(["Calder", "Wenn", "Ashby", "Mourne"]),
                          town=rng.choice(["Port Merrow", "Fenwick", "Gull Bay", "Ostry"]),
                          event=rng.choice(["lantern festival", "horse fair", "boat race"]),
                          month=rng.choice(["July", "March", "October"]), year=rng.randint(1850, 1990))


async def one_call(url: str, name: str, arguments: dict) -> str:
    async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
        await session.initialize()
        out = await session.call_tool(name, arguments)
        if out.is_error:
            raise RuntimeError(out.content[0].text)
        return out.content[0].text


async def traffic(url: str, tasks: list[dict], target: int, acked: list[int], stop=None) -> None:
    """Every task observes its next results until ``target`` observes in all were answered; then ``stop()`` (the
    signal) runs at once, the other calls in flight. A call that fails after it was cut by the server's end
    (it is sent again in the next round); any other failure is raised."""
    stopped = []

    async def one(task: dict) -> None:
        async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            while task["next"] < task["count"] and acked[0] < target:
                i = task["next"]
                out = await session.call_tool("memory_observe", {
                    "task_id": task["id"], "tool": "search", "arguments": {"query": f"task {task['n']} #{i}"},
                    "result": result(task["n"], i)})
                if out.is_error:
                    raise RuntimeError(out.content[0].text)
                task["acked"].append(i)
                task["next"] += 1
                acked[0] += 1
                if acked[0] == target and stop is not None:
                    stop()
                    stopped.append(True)

    outcomes = await asyncio.wait_for(asyncio.gather(*(one(t) for t in tasks), return_exceptions=True), 300)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not stopped:
            raise outcome


async def contexts(url: str, tasks: list[dict]) -> list[str]:
    return list(await asyncio.gather(*(one_call(url, "memory_context", {"task_id": t["id"]}) for t in tasks)))


def run(args: argparse.Namespace, work: Path) -> dict:
    rng = random.Random(args.seed)
    server = Server(work)
    starts = [server.start()]
    tasks = [{"n": n, "count": args.observes, "next": 0, "acked": []} for n in range(args.tasks)]
    for task in tasks:
        task["id"] = json.loads(asyncio.run(one_call(server.url, "memory_start_task", {
            "goal": f"Where is the event of task {task['n']} held?"})))["task_id"]
    total = args.tasks * args.observes
    targets = sorted(rng.sample(range(3, total - 3), args.restarts))
    acked, rows, changed, stops = [0], [], 0, []
    for k, target in enumerate(targets):
        how = signal.SIGKILL if k % 2 == 0 else signal.SIGTERM
        kind = KINDS[k % len(KINDS)]
        if kind == "traffic":
            asyncio.run(traffic(server.url, tasks, target, acked, lambda how=how: server.process.send_signal(how)))
            server.process.wait(timeout=120)
            before = None
        else:
            asyncio.run(traffic(server.url, tasks, target, acked))
            before = asyncio.run(contexts(server.url, tasks))
            stops.append(server.stop(how))
        starts.append(server.start())
        differ = 0
        if before is not None:
            differ = sum(a != b for a, b in zip(before, asyncio.run(contexts(server.url, tasks))))
            changed += differ
        rows.append((k + 1, how.name, kind, acked[0], "-" if before is None else str(differ)))
    asyncio.run(traffic(server.url, tasks, total + 1, acked))
    lost, duplicated = check(server.url, tasks)
    server.stop(signal.SIGTERM)
    return {"rows": rows, "lost": lost, "duplicated": duplicated, "changed": changed, "starts": starts,
            "acked": acked[0], "total": total, "sigterm_stop_s": stops}


def check(url: str, tasks: list[dict]) -> tuple[int, int]:
    """(answered observes missing from their task's bank, observes held more than once)."""
    lost = duplicated = 0
    for task in tasks:
        path = json.loads(asyncio.run(one_call(url, "memory_export", {"task_id": task["id"]})))["path"]
        texts = [e["text"] for e in json.loads(Path(path).read_text())["interaction_tree"]["entries"]]
        lost += sum(result(task["n"], i) not in texts for i in task["acked"])
        duplicated += len(texts) - len(set(texts))
    return lost, duplicated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--observes", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="amb-bench-restart-") as work:
        out = run(args, Path(work))
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"{'restart':<9}{'signal':<9}{'stopped':<10}{'observes answered':<20}contexts changed")
    for row in out["rows"]:
        print(f"{row[0]:<9}{row[1]:<9}{row[2]:<10}{row[3]:<20}{row[4]}")
    print(f"observes answered {out['acked']} of {out['total']}; lost {out['lost']}, held twice {out['duplicated']}; "
          f"server start {min(out['starts']):.1f}-{max(out['starts']):.1f} s")
    print(json.dumps({"tasks": args.tasks, "observes_per_task": args.observes, "restarts": len(out["rows"]),
                      "observations_answered": out["acked"], "observations_lost": out["lost"],
                      "observations_duplicated": out["duplicated"], "context_changed": out["changed"],
                      "load_avg_1m": round(load[0], 2)}))


if __name__ == "__main__":
    main()

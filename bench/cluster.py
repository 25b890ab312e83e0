"""Replicas of `amb serve` on one PostgreSQL database, one killed mid-load, beside the same load on one SQLite server
(issue 40, item 4).

Two legs, each `amb serve --http --policy heuristic` (no LM) with a key, driven by concurrent clients of the mcp
SDK, each running one task: `memory_start_task`, then ``--observes`` `memory_observe` calls each followed by a
`memory_context` call (the agent's next step reads memory), each call to a replica chosen at random; a call that
fails is sent once more, to the other replica. A client keeps one MCP session per replica open across its calls
(:class:`Line`), as a client that talks to the replicas does; the server's streamable HTTP is stateless, so a
session survives its replica's restart, and a session whose call failed is opened again on its next call:

* ``sqlite``: one server on its own storage folder (the embedded default), nothing killed: the reference;
* ``postgres``: a throwaway PostgreSQL server (tests/postgres_server.py), 2 replicas with `--database URL`, each on
  a storage folder of its own (as on two machines), keys made with `amb keys create --database URL`. When half
  the calls are answered, one replica is killed (-9) and started again.

It reports calls/s, p50/p95 of `memory_observe` and `memory_context` (successful calls, as the client sees them),
``observations_lost`` (observes answered but missing from their task's final bank, `memory_export`),
``failed_after_retry``, ``tasks_differing`` (tasks whose final bank, its entries and node summaries, differs
from the same task's in the SQLite leg, which ran without a kill) and ``throughput_ratio_vs_sqlite``. A table,
then one JSON line. Targets: 0 lost, 0 failed after retry, 0 differing, context p95 <= 150 ms at 32 tasks,
throughput >= 0.7x SQLite.

The PostgreSQL leg needs the MCP task store in the database (`amb serve --database URL`) and a PostgreSQL install
(tests/postgres_server.py): it is skipped, saying why, without them (the SQLite leg runs either way).

    python bench/cluster.py [--clients 32] [--observes 20] [--seed 7] [--sqlite-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from local_servers import free_port, stop, wait_listening  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

CLI = str(ROOT / "cli.py")
CALL_TIMEOUT_S = 120.0
PASSAGE = ("Report {i} of task {t}: the river {river} passes the town of {town}, where the {event} is held in "
           "{month}; its harbour was rebuilt in {year}.")


def result(task: int, i: int) -> str:
    rng = random.Random(task * 1000 + i)
    return PASSAGE.format(i=i, t=task, river=rng.choice(["Calder", "Wenn", "Ashby", "Mourne"]),
                          town=rng.choice(["Port Merrow", "Fenwick", "Gull Bay", "Ostry"]),
                          event=rng.choice(["lantern festival", "horse fair", "boat race"]),
                          month=rng.choice(["July", "March", "October"]), year=rng.randint(1850, 1990))


@dataclass
class Replica:
    """One `amb serve --http` process on a storage folder of its own."""

    work: Path
    flags: list[str]
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    cpu_s: float = 0.0  # CPU seconds its processes spent serving, since each was ready (startup not counted)
    _ready_cpu_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> float:
        began = time.monotonic()
        self.process = subprocess.Popen([sys.executable, CLI, "serve", "--policy", "heuristic", "--http",
                                         str(self.port), *self.flags], env=self.env, cwd=str(self.work),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port, self.process, 180, what="amb serve --http", pause=0.2)
        self._ready_cpu_s = process_cpu_s(self.process.pid)
        return time.monotonic() - began

    def served_cpu_s(self) -> float:
        """CPU seconds spent serving so far, by this process and the ones killed before it."""
        running = self.process is not None and self.process.poll() is None
        return self.cpu_s + (process_cpu_s(self.process.pid) - self._ready_cpu_s if running else 0.0)

    def kill(self) -> None:
        self.cpu_s = self.served_cpu_s()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)


def process_cpu_s(pid: int) -> float:
    """The user + system CPU seconds of process ``pid`` (all its threads; Linux /proc), 0.0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def environment(work: Path, database: str = "") -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(work / "storage"),
            "AMB_TEMP_DIR": str(work / "temp"), "AMB_RECALL": "0", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", **({"AMB_DATABASE_URL": database} if database else {})}


def serve_has_database_option() -> bool:
    """Whether this checkout's `amb serve` takes `--database URL` (the MCP task store in PostgreSQL)."""
    shown = subprocess.run([sys.executable, CLI, "serve", "--help"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    return "--database" in shown.stdout


def make_key(env: dict[str, str], flags: list[str]) -> str:
    made = subprocess.run([sys.executable, CLI, "keys", "create", "--namespace", "bench", *flags], env=env,
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        raise RuntimeError(f"amb keys create: {made.stderr.strip()}")
    return made.stdout.strip()


class Line:
    """One client's MCP session to one replica, kept open across its calls (as a client that talks to the replicas
    does), in an asyncio task of its own: a dead replica breaks that task's task group, not the client. A call
    that fails ends the session; the next call on this replica opens a new one (a restarted replica knows none of
    the old sessions)."""

    def __init__(self, url: str, key: str):
        self.url, self.key = url, key
        self.requests: asyncio.Queue = asyncio.Queue()
        self.worker: asyncio.Task | None = None

    async def call(self, tool: str, arguments: dict) -> tuple[str, float]:
        """The tool's text and its round trip in ms (the call, not the session's handshake)."""
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._serve())
        answer = asyncio.get_running_loop().create_future()
        await self.requests.put((tool, arguments, answer))
        try:
            out, elapsed = await asyncio.wait_for(asyncio.shield(answer), CALL_TIMEOUT_S)
        except TimeoutError:
            self.worker.cancel()
            raise
        if out.is_error:
            raise RuntimeError(out.content[0].text)
        return out.content[0].text, elapsed

    async def close(self) -> None:
        if self.worker is not None and not self.worker.done():
            await self.requests.put(None)
            await asyncio.gather(self.worker, return_exceptions=True)

    async def _serve(self) -> None:
        waiting: list[asyncio.Future] = []  # the call being answered, failed with the session if it breaks
        try:
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {self.key}"}) as http,
                        streamable_http_client(self.url, http_client=http) as (read, write, *_),
                        ClientSession(read, write) as session):
                await session.initialize()
                while (request := await self.requests.get()) is not None:
                    tool, arguments, answer = request
                    waiting[:] = [answer]
                    began = time.perf_counter()
                    try:
                        out = await session.call_tool(tool, arguments)
                    except Exception as exc:  # noqa: BLE001 - the session is broken: answer, then end it
                        answer.set_exception(exc)
                        return
                    answer.set_result((out, 1000 * (time.perf_counter() - began)))
        except BaseException as exc:  # noqa: BLE001 - a dead replica: every waiting call fails, the client retries
            failure = exc if isinstance(exc, Exception) else ConnectionError(f"session ended: {type(exc).__name__}")
            while not self.requests.empty():
                request = self.requests.get_nowait()
                waiting += [request[2]] if request is not None else []
            for answer in waiting:
                if not answer.done():
                    answer.set_exception(failure)
            if not isinstance(exc, Exception):
                raise


@dataclass
class Load:
    """What the clients of one leg saw."""

    replicas: list[Replica]
    key: str
    rng: random.Random
    observe_ms: list[float] = field(default_factory=list)
    context_ms: list[float] = field(default_factory=list)
    answered: int = 0
    retried: int = 0
    failed: list[str] = field(default_factory=list)
    acked: dict[int, list[int]] = field(default_factory=dict)

    def lines(self) -> list[Line]:
        """A new client's sessions, one per replica (opened on first use)."""
        return [Line(replica.url, self.key) for replica in self.replicas]


async def call_with_retry(load: Load, lines: list[Line], tool: str, arguments: dict) -> str | None:
    """The call on a replica chosen at random, sent once more to the other on failure; None when both failed."""
    order = load.rng.sample(lines, len(lines))
    error: BaseException | None = None
    for attempt in range(2):
        try:
            text, ms = await order[attempt % len(order)].call(tool, arguments)
        except Exception as exc:  # noqa: BLE001 - a dead replica, a refused call: retried once, then counted
            error = exc
            load.retried += attempt == 0
            continue
        {"memory_observe": load.observe_ms, "memory_context": load.context_ms}.get(tool, []).append(ms)
        load.answered += 1
        return text
    while getattr(error, "exceptions", None):  # the first error inside the task groups' exception groups
        error = error.exceptions[0]
    load.failed.append(f"{tool}: {type(error).__name__}: {str(error)[:200]}")
    return None


async def client(load: Load, n: int, observes: int, on_answer) -> str | None:
    """Task ``n``: start, then observe and read memory ``observes`` times; its task id (None: never started)."""
    lines = load.lines()
    try:
        return await run_task(load, lines, n, observes, on_answer)
    finally:
        await asyncio.gather(*(line.close() for line in lines))


async def run_task(load: Load, lines: list[Line], n: int, observes: int, on_answer) -> str | None:
    started = await call_with_retry(load, lines, "memory_start_task", {"goal": f"Where is the event of task {n} held?"})
    if started is None:
        return None
    task_id = json.loads(started)["task_id"]
    load.acked[n] = []
    for i in range(observes):
        observed = await call_with_retry(load, lines, "memory_observe", {
            "task_id": task_id, "tool": "search", "arguments": {"query": f"task {n} #{i}"}, "result": result(n, i)})
        if observed is not None:
            load.acked[n].append(i)
        await call_with_retry(load, lines, "memory_context", {"task_id": task_id})
        on_answer()
    return task_id


async def drive(load: Load, clients: int, observes: int, kill_at: int | None) -> tuple[list[str | None], float, dict]:
    """Every client at once; at ``kill_at`` observe+context rounds answered, replica 0 is killed and started again
    (in a thread, the load going on). The task ids, the seconds the load took, what the kill did."""
    rounds, killed = [0], {}

    async def kill_and_restart() -> None:
        began = time.monotonic()
        load.replicas[0].kill()
        killed["restart_s"] = await asyncio.to_thread(load.replicas[0].start)
        killed["down_s"] = time.monotonic() - began

    restarting: list[asyncio.Task] = []

    def on_answer() -> None:
        rounds[0] += 1
        if kill_at is not None and rounds[0] == kill_at:
            restarting.append(asyncio.get_running_loop().create_task(kill_and_restart()))

    began = time.perf_counter()
    task_ids = await asyncio.gather(*(client(load, n, observes, on_answer) for n in range(clients)))
    seconds = time.perf_counter() - began
    await asyncio.gather(*restarting)
    return list(task_ids), seconds, killed


async def final_banks(load: Load, task_ids: list[str | None]) -> dict[int, dict]:
    """Each started task's final bank (memory_export, read from the file the server wrote)."""
    banks, lines = {}, load.lines()
    try:
        for n, task_id in enumerate(task_ids):
            exported = task_id and await call_with_retry(load, lines, "memory_export", {"task_id": task_id})
            if exported:
                banks[n] = json.loads(Path(json.loads(exported)["path"]).read_text())
    finally:
        await asyncio.gather(*(line.close() for line in lines))
    return banks


def fingerprint(bank: dict) -> tuple:
    """What a task's memory holds, ids aside: its entries in order and its nodes' summaries."""
    entries = tuple(e["text"] for e in bank["interaction_tree"]["entries"])
    nodes = bank.get("query_graph", {}).get("nodes", {})
    summaries = sorted(n.get("summary", "") for n in (nodes.values() if isinstance(nodes, dict) else nodes))
    return entries, tuple(summaries)


def quantiles(samples: list[float]) -> tuple[float | None, float | None]:
    if not samples:
        return None, None
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def run_leg(name: str, replicas: list[Replica], key: str, args: argparse.Namespace, kill: bool) -> dict:
    """Start the replicas, drive the load (killing one at the midpoint when ``kill``), read the final banks."""
    starts = [replica.start() for replica in replicas]
    load = Load(replicas, key, random.Random(args.seed))
    try:
        client_cpu_s = time.process_time()
        task_ids, seconds, killed = asyncio.run(drive(load, args.clients, args.observes,
                                                      args.clients * args.observes // 2 if kill else None))
        client_cpu_s = time.process_time() - client_cpu_s
        server_cpu_s = sum(replica.served_cpu_s() for replica in replicas)
        calls = load.answered  # the load's calls, not the exports read after it
        banks = asyncio.run(final_banks(load, task_ids))
    finally:
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is None:
                stop(replica.process, timeout=60)
    lost = sum(result(n, i) not in fingerprint(banks[n])[0] if n in banks else 1
               for n, acked in load.acked.items() for i in acked)
    observe, context = quantiles(load.observe_ms), quantiles(load.context_ms)
    return {"leg": name, "replicas": len(replicas), "calls": calls, "seconds": seconds,
            "calls_per_s": calls / seconds if seconds else 0.0, "observe_p50_ms": observe[0],
            "observe_p95_ms": observe[1], "context_p50_ms": context[0], "context_p95_ms": context[1],
            "observations_lost": lost, "retried": load.retried, "failed_after_retry": len(load.failed),
            "errors": load.failed[:5], "start_s": max(starts), "killed": killed,
            "server_cpu_ms_per_call": 1000 * server_cpu_s / calls if calls else None,
            "client_cpu_ms_per_call": 1000 * client_cpu_s / calls if calls else None,
            "fingerprints": {n: fingerprint(bank) for n, bank in banks.items()}}


def sqlite_leg(work: Path, args: argparse.Namespace) -> dict:
    work.mkdir(parents=True)
    env = environment(work)
    key = make_key(env, [])
    return run_leg("sqlite", [Replica(work, [], env)], key, args, kill=False)


def postgres_leg(work: Path, args: argparse.Namespace) -> dict:
    from postgres_server import PostgresServer

    server = PostgresServer().start()
    try:
        url = server.new_database()
        folders = [work / f"replica-{i}" for i in range(2)]
        for folder in folders:
            folder.mkdir(parents=True)
        key = make_key(environment(folders[0], url), ["--database", url])
        replicas = [Replica(folder, ["--database", url], environment(folder, url)) for folder in folders]
        return run_leg("postgres, 2 replicas, one killed", replicas, key, args, kill=True)
    finally:
        from amb_dspy.storage.postgres import close_pools

        close_pools()
        server.stop()


def postgres_skip_reason(args: argparse.Namespace) -> str | None:
    """Why the PostgreSQL leg does not run here (None: it runs)."""
    from postgres_server import skip_reason

    if args.sqlite_only:
        return "--sqlite-only"
    if not serve_has_database_option():
        return ("amb serve has no --database option in this checkout (the MCP task store in PostgreSQL, the other "
                "half of issue 40)")
    return skip_reason()


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def report(legs: list[dict], skipped: str | None, load: tuple[float, float, float], args: argparse.Namespace) -> None:
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; "
          f"{args.clients} clients x {args.observes} observes + {args.observes} memory_context calls")
    print(f"{'leg':<36}{'calls/s':>8}{'observe p50/p95 ms':>20}{'context p50/p95 ms':>20}{'lost':>6}"
          f"{'retried':>9}{'failed':>8}{'differing':>11}")
    for leg in legs:
        print(f"{leg['leg']:<36}{leg['calls_per_s']:>8.1f}{ms(leg['observe_p50_ms']) + ' / ' + ms(leg['observe_p95_ms']):>20}"
              f"{ms(leg['context_p50_ms']) + ' / ' + ms(leg['context_p95_ms']):>20}{leg['observations_lost']:>6}"
              f"{leg['retried']:>9}{leg['failed_after_retry']:>8}{str(leg.get('tasks_differing', '-')):>11}")
        for error in leg["errors"]:
            print(f"  error: {error}")
        print(f"  CPU per call: servers {ms(leg['server_cpu_ms_per_call'])} ms, clients {ms(leg['client_cpu_ms_per_call'])} ms "
              f"({os.cpu_count()} cores shared by both)")
        if leg["killed"]:
            print(f"  replica killed (-9) at the midpoint: down {leg['killed']['down_s']:.1f} s "
                  f"(restart {leg['killed']['restart_s']:.1f} s)")
    if skipped:
        print(f"postgres leg skipped: {skipped}")
    sqlite, cluster = legs[0], (legs[1] if len(legs) > 1 else None)
    figures = {key: (cluster[key] if cluster else None) for key in
               ("observations_lost", "failed_after_retry", "tasks_differing", "context_p95_ms")}
    print(json.dumps({**figures, "throughput_ratio_vs_sqlite": round(cluster["calls_per_s"] / sqlite["calls_per_s"], 3)
                      if cluster and sqlite["calls_per_s"] else None,
                      "server_cpu_ms_per_call": cluster["server_cpu_ms_per_call"] if cluster else None,
                      "sqlite": {k: sqlite[k] for k in ("calls_per_s", "context_p95_ms", "observe_p95_ms",
                                                         "observations_lost", "failed_after_retry",
                                                         "server_cpu_ms_per_call", "client_cpu_ms_per_call")},
                      "postgres_leg": "ran" if cluster else f"skipped: {skipped}", "clients": args.clients,
                      "observes_per_task": args.observes, "load_avg_1m": round(load[0], 2),
                      "load_avg_1m_end": round(os.getloadavg()[0], 2)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--observes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sqlite-only", action="store_true", help="skip the PostgreSQL leg")
    args = parser.parse_args()
    logging.getLogger("mcp").setLevel(logging.CRITICAL)  # a killed replica's broken sessions: counted, not logged
    load = os.getloadavg()
    skipped = postgres_skip_reason(args)
    with tempfile.TemporaryDirectory(prefix="amb-bench-cluster-") as work:
        legs = [sqlite_leg(Path(work) / "sqlite", args)]
        if skipped is None:
            cluster = postgres_leg(Path(work) / "postgres", args)
            cluster["tasks_differing"] = sum(cluster["fingerprints"].get(n) != fp
                                             for n, fp in legs[0]["fingerprints"].items())
            legs.append(cluster)
    report(legs, skipped, load, args)


if __name__ == "__main__":
    main()

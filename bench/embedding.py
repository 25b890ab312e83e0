"""Embedding speed and start-up: today's path (sentence-transformers on torch) against the ONNX Runtime
backend, side by side in one run, interleaved so that both see the same load on a shared machine.

    python bench/embedding.py                       # HotpotQA dev paragraphs from ../shared/datasets
    python bench/embedding.py --paragraphs 256 --repeats 2

What is measured:

* throughput: paragraphs per second embedding HotpotQA paragraphs (title + text, as the corpus
  indexes them), by sentence-transformers, by ONNX at float32 on one session (``AMB_EMBEDDING_PRECISION=float32
  AMB_EMBEDDING_WORKERS=1``, the default before issue 41) and by the default setting (ONNX, int8 unless configured). The models are loaded and warmed up first; then
  the paragraphs are embedded in rounds, each round giving the same new slice to the three (in a rotating
  order), so no text cache can answer and all run under the same load. ``float_*_cosine`` compare the
  default's vectors to ONNX float32's (the same as sentence-transformers'); ``min_cosine`` compares the
  two backends' vectors of every paragraph.
* start-up, on the real ``amb run`` in a fresh process per run (alternating backends), with a
  scripted LM served over HTTP on 127.0.0.1 (tests/scripted_lm.py behind an OpenAI-compatible
  endpoint, answering at once). The bench records when each LM request arrives:

  - ``first_lm_call_s``: from starting ``amb run`` to its first LM call. Today that call (the
    classification of the context) comes before anything is embedded, so the embedding backend
    cannot change it: the number is shown to make that visible.
  - ``first_memory_lm_call_s``: from starting ``amb run`` to the first LM call made after the memory
    bank's first embedding (the context's nodes are embedded, retrieved against, then analysed or
    planned on). This is where the embedding model's import and load sit on a run's critical path.
  - ``embedder_ready_s``: a fresh interpreter importing the embedder and embedding one text (import +
    model load + first embed), the chain the model adds to a run wherever it is first needed.

The last line is JSON with baseline_* and new values, speed-ups, min_cosine and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BASELINE, NEW = "sentence-transformers", "onnx"
FLOAT = "onnx float32"  # the ONNX path at float32 on one session (AMB_EMBEDDING_WORKERS=1): the default before issue 41
CONTEXT = ("The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year.\n\n"
           "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay.")


def hotpotqa_paragraphs(path: Path, count: int) -> list[str]:
    seen: dict[str, str] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            for title, sentences in json.loads(line)["context"]:
                seen.setdefault(title, f"{title}\n{''.join(sentences).strip()}")
                if len(seen) == count:
                    return list(seen.values())
    return list(seen.values())


# --- throughput ------------------------------------------------------------------------------------


def throughput(paragraphs: list[str], rounds: int) -> dict[str, float]:
    """Paragraphs/s of sentence-transformers, ONNX float32 and the default setting (ONNX int8 unless configured),
    each round's slice given to all three in a rotating order; cosines of each to the float vectors."""
    from amb_dspy.config import AmbConfig
    from amb_dspy.retrieval.embedding import default_embedder

    models = {BASELINE: default_embedder(BASELINE), FLOAT: default_embedder(config=AmbConfig(
        embedding_backend="onnx", embedding_precision="float32", embedding_workers=1)), NEW: default_embedder(NEW)}
    for model in models.values():
        model.embed(["warm-up: the first call loads the model"])
    seconds = dict.fromkeys(models, 0.0)
    vectors: dict[str, list[np.ndarray]] = {name: [] for name in models}
    size = -(-len(paragraphs) // rounds)
    for r in range(rounds):
        chunk = paragraphs[r * size : (r + 1) * size]
        names = list(models)
        for name in names[r % 3:] + names[: r % 3]:
            started = time.perf_counter()
            vectors[name].append(models[name].embed(chunk))
            seconds[name] += time.perf_counter() - started
    base, flat, new = (np.concatenate(vectors[name]) for name in models)
    to_float = (new * flat).sum(axis=1)
    return {"baseline": len(paragraphs) / seconds[BASELINE], "float32": len(paragraphs) / seconds[FLOAT],
            "new": len(paragraphs) / seconds[NEW], "min_cosine": float((base * new).sum(axis=1).min()),
            "float_min_cosine": float(to_float.min()), "float_mean_cosine": float(to_float.mean()),
            "precision": getattr(models[NEW], "precision", "float32")}


# --- start-up: the real `amb run` against a scripted LM on 127.0.0.1 --------------------------------


def scripted_lm():
    from scripted_lm import ScriptedLM

    def classification(call):
        count = call.inputs["segments"].count("\n[") + 1
        return {"should_cluster": count > 1,
                "clusters": [{"context": f"topic {i}", "keywords": [f"kw{i}"], "segments": [i]} for i in range(1, count + 1)]}

    return ScriptedLM(
        classification=classification,
        structure=lambda call: {"summary": call.inputs["content"][: max(1, len(call.inputs["content"]) * 2 // 5)]},
        analysis=lambda call: {"relationships": [{"candidate": c["number"], "relationship": "unrelated", "reasoning": "-"}
                                                 for c in call.input_json("candidates")]},
        planning=lambda call: {"executed_status": "success", "executed_context": "done", "next_task": ""},
        default=lambda call: {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {},
                              "reasoning": "-", "answer": "-"},
    )


class LMServer:
    """An OpenAI-compatible /chat/completions endpoint on 127.0.0.1 answering with the scripted LM."""

    def __init__(self):
        self.lm = scripted_lm()
        self.arrivals: list[tuple[float, str]] = []  # (time.time(), route) of each request
        self.changed = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                arrived = time.time()
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with warnings.catch_warnings():  # messages= is what an HTTP endpoint receives
                    warnings.simplefilter("ignore", DeprecationWarning)
                    reply = server.lm(messages=body["messages"])[0]
                with server.changed:
                    server.arrivals.append((arrived, server.lm.calls[-1].route))
                    server.changed.notify_all()
                data = json.dumps({
                    "id": "bench", "object": "chat.completion", "created": int(arrived), "model": body.get("model", "m"),
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for_memory_call(self, since: int, timeout: float) -> None:
        """Until a request other than classification/structure arrives after request number ``since``."""
        deadline = time.time() + timeout
        with self.changed:
            while not any(route not in ("classification", "structure") for _, route in self.arrivals[since:]):
                if not self.changed.wait(max(0.0, deadline - time.time())):
                    raise TimeoutError("amb run made no LM call after embedding in time")


def one_run(server: LMServer, backend: str, context_file: Path, workdir: Path) -> dict[str, float]:
    since = len(server.arrivals)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_BASE_URL": server.url, "LLM_API_KEY": "bench",
           "AMB_EMBEDDING_BACKEND": backend, "AMB_MAX_LOOPS": "1", "HF_HUB_OFFLINE": "1",
           "AMB_STORAGE_DIR": str(workdir / "storage"), "AMB_TEMP_DIR": str(workdir / "temp"),
           "DSPY_CACHEDIR": tempfile.mkdtemp(dir=workdir)}  # an empty LM cache: every call reaches the server
    started = time.time()
    process = subprocess.Popen([sys.executable, "-c", "from cli import app; app()", "run", "Where is the festival?",
                                "--lm", "openai/scripted", "--context-file", str(context_file)],
                               env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        server.wait_for_memory_call(since, timeout=300)
    finally:
        process.kill()
        _, err = process.communicate()
    arrivals = server.arrivals[since:]
    if not arrivals:
        raise RuntimeError(f"amb run made no LM call: {err.decode()[-500:]}")
    first_memory = next(t for t, route in arrivals if route not in ("classification", "structure"))
    return {"first": arrivals[0][0] - started, "memory": first_memory - started}


def embedder_ready(backend: str) -> float:
    code = ("from amb_dspy.retrieval.embedding import default_embedder\n"
            f"default_embedder({backend!r}).embed(['The Seine flows through Paris.'])\n")
    started = time.time()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.time() - started


def startup(repeats: int) -> dict[str, dict[str, float]]:
    server = LMServer()
    samples: dict[str, dict[str, list[float]]] = {b: {"first": [], "memory": [], "ready": []} for b in (BASELINE, NEW)}
    with tempfile.TemporaryDirectory() as tmp:
        context_file = Path(tmp) / "context.md"
        context_file.write_text(CONTEXT)
        for r in range(repeats):
            for backend in ((BASELINE, NEW) if r % 2 == 0 else (NEW, BASELINE)):
                run = one_run(server, backend, context_file, Path(tmp))
                samples[backend]["first"].append(run["first"])
                samples[backend]["memory"].append(run["memory"])
                samples[backend]["ready"].append(embedder_ready(backend))
    server.httpd.shutdown()
    return {b: {k: statistics.median(v) for k, v in s.items()} for b, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hotpotqa", type=Path, default=ROOT.parent / "shared/datasets/hotpotqa/dev_distractor_300.jsonl")
    parser.add_argument("--paragraphs", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="amb run start-ups per backend (median reported)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()[0]

    paragraphs = hotpotqa_paragraphs(args.hotpotqa, args.paragraphs)
    speed = throughput(paragraphs, args.rounds)
    start = startup(args.repeats)
    load_after = os.getloadavg()[0]

    base, new = start[BASELINE], start[NEW]
    rows = [
        ("paragraphs/s (HotpotQA)", speed["baseline"], speed["new"], speed["new"] / speed["baseline"]),
        ("  onnx float32 paragraphs/s, onnx default vs it", speed["float32"], speed["new"], speed["new"] / speed["float32"]),
        ("amb run -> first LM call (s)", base["first"], new["first"], base["first"] / new["first"]),
        ("amb run -> first LM call after embedding (s)", base["memory"], new["memory"], base["memory"] / new["memory"]),
        ("fresh process -> embedder ready (s)", base["ready"], new["ready"], base["ready"] / new["ready"]),
    ]
    print(f"{len(paragraphs)} HotpotQA paragraphs in {args.rounds} rounds; {args.repeats} amb run start-ups per backend "
          f"(median); {os.cpu_count()} CPUs, load average {load_before:.1f} before, {load_after:.1f} after")
    print(f"{'':<46} {BASELINE:>22} {NEW:>10} {'speed-up':>9}")
    for label, before, after, gain in rows:
        print(f"{label:<46} {before:>22.2f} {after:>10.2f} {gain:>8.2f}x")
    print(f"onnx default = {speed['precision']}; min cosine to sentence-transformers' vectors {speed['min_cosine']:.7f}, "
          f"to onnx float32's: min {speed['float_min_cosine']:.5f}, mean {speed['float_mean_cosine']:.5f}")
    print(json.dumps({
        "paragraphs": len(paragraphs),
        "baseline_paragraphs_per_s": round(speed["baseline"], 2), "paragraphs_per_s": round(speed["new"], 2),
        "throughput_speedup": round(speed["new"] / speed["baseline"], 2),
        "precision": speed["precision"], "float32_paragraphs_per_s": round(speed["float32"], 2),
        "speedup_over_float32": round(speed["new"] / speed["float32"], 2),
        "float_min_cosine": round(speed["float_min_cosine"], 5), "float_mean_cosine": round(speed["float_mean_cosine"], 5),
        "baseline_first_lm_call_s": round(base["first"], 3), "first_lm_call_s": round(new["first"], 3),
        "first_lm_call_speedup": round(base["first"] / new["first"], 2),
        "baseline_first_memory_lm_call_s": round(base["memory"], 3), "first_memory_lm_call_s": round(new["memory"], 3),
        "first_memory_lm_call_speedup": round(base["memory"] / new["memory"], 2),
        "baseline_embedder_ready_s": round(base["ready"], 3), "embedder_ready_s": round(new["ready"], 3),
        "embedder_ready_speedup": round(base["ready"] / new["ready"], 2),
        "min_cosine": round(speed["min_cosine"], 7),
        "cpus": os.cpu_count(), "load_before": round(load_before, 2), "load_after": round(load_after, 2),
    }))


if __name__ == "__main__":
    main()

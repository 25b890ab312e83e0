"""Long-term memory on HotpotQA: recall of earlier conclusions, duplicate merging, and store latency.

    python bench/longterm.py                                   # everything, both backends
    python bench/longterm.py --backend sqlite --max-items 10000
    python bench/longterm.py --backend qdrant                  # Qdrant's local mode (Qdrant Edge)
    python bench/longterm.py --backend qdrant-client           # qdrant-client's local mode (before Qdrant Edge)
    python bench/longterm.py --backend postgres                # a throwaway PostgreSQL server (tests/postgres_server.py)
    python bench/longterm.py --calibrate                       # the dedup threshold sweep (train_100)

All parts use the real all-MiniLM-L6-v2 embedder and real stores (a SQLite file, an embedded Chroma,
a Qdrant Edge shard, qdrant-client's local mode, a PostgreSQL database). PostgreSQL's ``open_s`` is a process's
first search of the namespace (its indexes are built from the database then, and cached): what a replica pays
at its first search, and again after another replica wrote to the namespace.
Paraphrases come from the templates of ``bench/longterm_paraphrase.py`` (no model: repeatable).

(a) recall@k. Each dev question is remembered as a finished task through ``remember_task``, all in
    one namespace: its answer as a conclusion ("Question: ... Answer: ..."), each supporting fact as
    a fact, and a trajectory. Then each question is asked again as two template paraphrases and one
    follow-up naming only its entities; a hit is the question's own conclusion among the top k of
    ``store.search`` over every kind (about 1,300 items compete).
(b) merge rate. Per dev question, a namespace holds every context sentence of its ten paragraphs as
    facts, except the other sentences of the two gold paragraphs, which are held out. Three
    paraphrases of each supporting fact are then written: a merge into that fact counts for
    ``merge_rate``; a merge into another item, and a held-out sentence (a different fact about the
    same entity) merged into anything, count for ``false_merge_rate``.
(c) latency. qdrant-client's stores over 1k items run in its local mode's in-memory variant: it
    persists every point with its own SQLite commit (about 20 ms here), and its search is the same
    numpy code either way. Qdrant Edge stores are folders at every size. Stores filled with N HotpotQA sentences (real embeddings; past the ~16k distinct
    sentences, copies with a suffix and a slightly perturbed vector) by ``add_many``; then 200 writes
    of sentences not in the store (merge check included) and 200 searches (k=5) with real questions.
    Texts are embedded beforehand (served from the embedder's cache): the times are the store's own;
    ``embed_ms`` reports what one text costs the model on this machine.

``--calibrate`` runs (b)'s set-up on train_100 without writing the paraphrases: for each threshold
it prints the share of paraphrases whose closest item is their fact and over the threshold, the
share whose closest item is another one and over it, and the share of held-out facts over it, then
picks the threshold that maximises ``merge_rate - wrong_merge_rate - false_merge_rate`` (Youden's J;
a tie goes to the higher one). The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from longterm_paraphrase import fact_paraphrases, follow_up, question_paraphrases  # noqa: E402

from amb_dspy.longterm import DEDUP_THRESHOLD, remember_task  # noqa: E402
from amb_dspy.longterm.chroma import ChromaStore  # noqa: E402
from amb_dspy.longterm.edge import QdrantEdgeStore  # noqa: E402
from amb_dspy.longterm.qdrant import QdrantStore  # noqa: E402
from amb_dspy.longterm.sqlite import SQLiteStore  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402

DATA = ROOT.parent / "shared" / "datasets" / "hotpotqa"
SIZES = (1_000, 10_000, 100_000)
QDRANT_PERSISTED_MAX = 1_000  # larger qdrant-client stores are filled in its memory variant (same search code)
TIMED = 200


def load(path: Path, n: int | None = None) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        items = [json.loads(line) for line in handle if line.strip()]
    return items[:n] if n else items


_databases: dict[Path, str] = {}  # a temporary folder -> the fresh database standing for it
_server: list = []  # the throwaway PostgreSQL server, started on first use


def database_for(folder: Path) -> str:
    """A fresh database on a throwaway PostgreSQL server (started once, stopped at exit), one per ``folder``."""
    if folder not in _databases:
        if not _server:
            import atexit

            from postgres_server import PostgresServer

            _server.append(PostgresServer().start())
            atexit.register(_server[0].stop)
        _databases[folder] = _server[0].new_database()
    return _databases[folder]


def open_store(backend: str, folder: Path, embedder):
    if backend == "postgres":
        from amb_dspy.longterm.postgres import PostgresStore

        return PostgresStore(database_for(folder), embedder)
    if backend == "sqlite":
        return SQLiteStore(folder / "longterm.sqlite3", embedder)
    if backend == "qdrant":
        return QdrantEdgeStore.local(folder / "qdrant", embedder)
    if backend == "qdrant-client":
        return QdrantStore.local(folder / "qdrant-client", embedder)
    if backend == "qdrant-memory":
        return QdrantStore.memory(embedder)
    return ChromaStore.persistent(folder / "chroma", embedder)


def gold(item: dict) -> tuple[dict[str, list[str]], list[tuple[str, int]]]:
    paragraphs = {title: [" ".join(s.split()) for s in sentences] for title, sentences in item["context"]}
    facts = [(t, i) for t, i in item["supporting_facts"] if t in paragraphs and i < len(paragraphs[t])]
    return paragraphs, list(dict.fromkeys(facts))


def fact_sets(item: dict) -> tuple[list[str], list[str], list[str]]:
    """(stored sentences, supporting facts among them, held-out sentences of the gold paragraphs)."""
    paragraphs, facts = gold(item)
    supporting = [paragraphs[t][i] for t, i in facts]
    gold_titles = {t for t, _ in facts}
    held_out = [s for t in gold_titles for s in paragraphs[t] if s not in supporting]
    stored = [s for t, sentences in paragraphs.items() for s in sentences
              if s and (t not in gold_titles or s in supporting)]
    return list(dict.fromkeys(stored)), supporting, list(dict.fromkeys(s for s in held_out if s))


# --- (a) recall@k ----------------------------------------------------------------------------------
def recall_at_k(store, items: list[dict], ks=(1, 5)) -> dict[str, float]:
    namespace = "bench-recall"
    conclusion_of = {}
    for item in items:
        paragraphs, facts = gold(item)
        tasks = [{"description": f"Look up {t}", "status": "success", "context": paragraphs[t][i]} for t, i in facts]
        outcomes = remember_task(store, namespace=namespace, task_id=item["_id"], goal=item["question"],
                                 answer=item["answer"], citations=[f"wikipedia:{t}" for t, _ in facts],
                                 completed_tasks=tasks)
        conclusion_of[item["_id"]] = outcomes[0].item.id
    hits = {(kind, k): [] for kind in ("paraphrase", "follow-up") for k in ks}
    right_scores = []
    for item in items:
        queries = [("paraphrase", q) for q in question_paraphrases(item["question"])]
        queries.append(("follow-up", follow_up(item["question"], item["answer"])))
        for kind, query in queries:
            found = store.search(namespace, query, k=max(ks))
            ids = [s.item.id for s in found]
            for k in ks:
                hits[(kind, k)].append(conclusion_of[item["_id"]] in ids[:k])
            right_scores += [s.score for s in found if s.item.id == conclusion_of[item["_id"]]]
    result = {f"recall_at_{k}": float(np.mean(hits[("paraphrase", k)] + hits[("follow-up", k)])) for k in ks}
    result.update({f"recall_at_{k}_{kind.replace('-', '')}": float(np.mean(hits[(kind, k)]))
                   for kind in ("paraphrase", "follow-up") for k in ks})
    result["right_score_p10"] = float(np.percentile(right_scores, 10)) if right_scores else 0.0
    result["items_in_store"] = len(store.list(namespace))
    return result


def unrelated_scores(store, questions: list[str]) -> float:
    """p90 of the best score that questions never remembered get (what ``min_score`` must stay above)."""
    best = [hits[0].score if (hits := store.search("bench-recall", q, k=1)) else 0.0 for q in questions]
    return float(np.percentile(best, 90))


# --- (b) merge rate and calibration ----------------------------------------------------------------
def merge_rates(store, items: list[dict]) -> dict[str, float]:
    right = wrong = missed = negatives_merged = negatives = 0
    for n, item in enumerate(items):
        namespace = f"bench-merge-{n}"
        stored, supporting, held_out = fact_sets(item)
        ids = {item_.content: item_.id for item_ in store.add_many(namespace, stored, "fact")}
        for fact in supporting:
            for paraphrase in fact_paraphrases(fact):
                outcome = store.write(namespace, paraphrase, "fact")
                if outcome.action == "added":
                    missed += 1
                elif outcome.item.id == ids[fact]:
                    right += 1
                else:
                    wrong += 1
        for sentence in held_out:
            negatives += 1
            negatives_merged += store.write(namespace, sentence, "fact").action == "merged"
    paraphrases = right + wrong + missed
    return {"merge_rate": right / paraphrases, "wrong_merge_rate": wrong / paraphrases,
            "false_merge_rate": negatives_merged / max(negatives, 1), "paraphrases": paraphrases,
            "negatives": negatives}


def calibrate(store, items: list[dict]) -> dict:
    positives, wrong_scores, negative_scores = [], [], []
    for n, item in enumerate(items):
        namespace = f"calibrate-{n}"
        stored, supporting, held_out = fact_sets(item)
        ids = {item_.content: item_.id for item_ in store.add_many(namespace, stored, "fact")}
        for fact in supporting:
            for paraphrase in fact_paraphrases(fact):
                closest, similarity = store.closest(namespace, paraphrase, "fact")
                (positives if closest is not None and closest.id == ids[fact] else wrong_scores).append(similarity)
        negative_scores += [store.closest(namespace, s, "fact")[1] for s in held_out]
    total = len(positives) + len(wrong_scores)
    rows = []
    for threshold in np.arange(0.50, 0.951, 0.01):
        rows.append({"threshold": round(float(threshold), 2),
                     "merge_rate": sum(s >= threshold for s in positives) / total,
                     "wrong_merge_rate": sum(s >= threshold for s in wrong_scores) / total,
                     "false_merge_rate": sum(s >= threshold for s in negative_scores) / len(negative_scores)})
    # Youden's J: the most paraphrases merged for the fewest wrong merges; a tie goes to the higher threshold.
    best = max(rows, key=lambda r: (round(r["merge_rate"] - r["wrong_merge_rate"] - r["false_merge_rate"], 6),
                                    r["threshold"]))
    return {"rows": rows, "chosen": best["threshold"], "paraphrases": total, "negatives": len(negative_scores)}


# --- (c) latency ---------------------------------------------------------------------------------------
def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def latency(backend: str, size: int, pool: list[str], vectors: np.ndarray, timed_writes: list[str],
            queries: list[str], embedder) -> dict[str, float]:
    rng = np.random.default_rng(size)
    if backend == "qdrant-client" and size > QDRANT_PERSISTED_MAX:
        backend = "qdrant-memory"  # qdrant-client commits each point on its own: 100k would take half an hour
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(backend, Path(folder), embedder)
        t0 = time.perf_counter()
        for start in range(0, size, 5_000):
            rows = range(start, min(size, start + 5_000))
            texts = [pool[i % len(pool)] + ("" if i < len(pool) else f" (copy {i // len(pool)})") for i in rows]
            batch = vectors[[i % len(pool) for i in rows]]
            copies = np.array([i >= len(pool) for i in rows])
            batch[copies] = unit(batch[copies] + 0.05 * rng.standard_normal(batch[copies].shape))
            store.add_many("bench", texts, "fact", vectors=batch)
        fill_s = time.perf_counter() - t0
        open_s = float("nan")
        if backend in ("sqlite", "qdrant", "qdrant-client", "postgres"):
            store.close()  # reopened: the time to load the store
            t0 = time.perf_counter()
            store = open_store(backend, Path(folder), embedder)
            if backend == "postgres":  # a process that has not searched it yet: its indexes come at the first search
                from amb_dspy.longterm import postgres

                postgres._cache.clear()
                t0 = time.perf_counter()
                store = open_store(backend, Path(folder), embedder)
                store.search("bench", queries[0], k=5)
            open_s = time.perf_counter() - t0
        write_ms, merged = [], 0
        for text in timed_writes:
            t0 = time.perf_counter()
            merged += store.write("bench", text, "fact").action == "merged"
            write_ms.append((time.perf_counter() - t0) * 1e3)
        search_ms = []
        for query in queries:
            t0 = time.perf_counter()
            store.search("bench", query, k=5)
            search_ms.append((time.perf_counter() - t0) * 1e3)
        store.close()
    return {"fill_s": fill_s, "open_s": open_s, "write_p50": float(np.median(write_ms)),
            "write_p95": float(np.percentile(write_ms, 95)), "search_p50": float(np.median(search_ms)),
            "search_p95": float(np.percentile(search_ms, 95)), "merged_writes": merged}


def size_label(size: int) -> str:
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "chroma", "qdrant", "qdrant-client", "postgres", "both",
                                                      "all"], default="both",
                        help="both: sqlite and chroma; all: the three")
    parser.add_argument("--max-items", type=int, default=max(SIZES), help="largest store size for the latency part")
    parser.add_argument("--n", type=int, default=300, help="HotpotQA dev questions for recall and merging")
    parser.add_argument("--data", type=Path, default=DATA, help="folder with dev_distractor_300.jsonl and train_100.jsonl")
    parser.add_argument("--calibrate", action="store_true", help="sweep the dedup threshold on train_100 and stop")
    parser.add_argument("--skip-latency", action="store_true", help="only recall and merging")
    parser.add_argument("--skip-quality", action="store_true", help="only latency")
    args = parser.parse_args()
    embedder = default_embedder()
    backends = {"both": ["sqlite", "chroma"], "all": ["sqlite", "chroma", "qdrant"]}.get(args.backend, [args.backend])
    dev, train = load(args.data / "dev_distractor_300.jsonl", args.n), load(args.data / "train_100.jsonl")

    if args.calibrate:
        with tempfile.TemporaryDirectory() as folder:
            store = open_store(backends[0], Path(folder), embedder)
            result = calibrate(store, train)
            store.close()
        print(f"dedup calibration on train_100: {result['paraphrases']} paraphrases, {result['negatives']} held-out facts")
        print(f"{'threshold':>9} {'merge_rate':>10} {'wrong_merge':>11} {'false_merge':>11}")
        for row in result["rows"]:
            print(f"{row['threshold']:>9.2f} {row['merge_rate']:>10.3f} {row['wrong_merge_rate']:>11.3f} "
                  f"{row['false_merge_rate']:>11.3f}")
        print(f"chosen threshold (max merge_rate - wrong_merge - false_merge): {result['chosen']:.2f}")
        print(json.dumps({"chosen_threshold": result["chosen"], "paraphrases": result["paraphrases"],
                          "negatives": result["negatives"], "calibration": result["rows"]}))
        return

    summary: dict[str, float] = {"dedup_threshold": DEDUP_THRESHOLD}
    embedder.embed(["warm-up"])  # loads the model
    t0 = time.perf_counter()
    for i in range(30):
        embedder.embed([f"an uncached sentence number {i} to time one embedding"])
    summary["embed_ms"] = (time.perf_counter() - t0) / 30 * 1e3
    print(f"{'backend':<13} {'part':<34} {'value':>10}")
    for backend in [] if args.skip_quality else backends:
        with tempfile.TemporaryDirectory() as folder:
            store = open_store(backend, Path(folder), embedder)
            quality = recall_at_k(store, dev)
            quality["unrelated_p90"] = unrelated_scores(store, [item["question"] for item in train])
            quality.update(merge_rates(store, dev))
            store.close()
        for key, value in quality.items():
            print(f"{backend:<13} {key:<34} {value:>10.3f}")
            summary[key if backend == "sqlite" or len(backends) == 1 else f"{key}_{backend}"] = round(value, 4)

    if not args.skip_latency:
        pool, seen = [], set()
        for item in dev + train:
            for sentences in gold(item)[0].values():
                for sentence in sentences:
                    if len(sentence) > 20 and sentence not in seen:
                        seen.add(sentence)
                        pool.append(sentence)
        timed_writes, pool = pool[-TIMED:], pool[:-TIMED]
        queries = [q for item in train + dev for q in question_paraphrases(item["question"])][:TIMED]
        t0 = time.perf_counter()
        vectors = embedder.embed(pool)
        embedder.embed(timed_writes + queries)  # cached: the timed calls measure the store
        print(f"{'-':<13} {f'embedded {len(pool)} sentences (s)':<34} {time.perf_counter() - t0:>10.1f}")
        print(f"\n{'backend':<13} {'items':>7} {'fill_s':>8} {'open_s':>7} {'write_p50':>9} {'write_p95':>9} "
              f"{'search_p50':>10} {'search_p95':>10} {'merged':>6}")
        for size in [s for s in SIZES if s <= args.max_items] or [args.max_items]:
            for backend in backends:
                row = latency(backend, size, pool, vectors, timed_writes, queries, embedder)
                print(f"{backend:<13} {size:>7} {row['fill_s']:>8.1f} {row['open_s']:>7.1f} {row['write_p50']:>9.2f} "
                      f"{row['write_p95']:>9.2f} {row['search_p50']:>10.2f} {row['search_p95']:>10.2f} "
                      f"{row['merged_writes']:>6}", flush=True)
                label = size_label(size)
                summary[f"search_ms_{label}_{backend}"] = round(row["search_p50"], 3)
                summary[f"write_ms_{label}_{backend}"] = round(row["write_p50"], 3)
                if not np.isnan(row["open_s"]):
                    summary[f"open_s_{label}_{backend}"] = round(row["open_s"], 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

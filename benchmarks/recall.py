"""Recall quality on the golden queries of the dev corpus: recall@k, MRR and nDCG@10.

    uv run python benchmarks/ingest.py --home /tmp/librarian-bench-home   # once
    uv run python benchmarks/recall.py --home /tmp/librarian-bench-home

Queries go through the same search the MCP tool uses (hybrid vector + full text, at most two
chunks per session); the ranked chunks are turned into a ranked list of distinct sessions.
Negative queries (no relevant session) are reported apart: their best score shows how confident
the search is when nothing should match.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from _corpus import GOLDEN

from librarian_dagster.core.embeddings import local_embedder
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import Store, open_store

CHUNKS_PER_QUERY = 30


def ranked_sessions(store: Store, embedder, query: str) -> tuple[list[str], float]:
    hits = store.search(
        query, embedder.embed_query(query), embedder.model_name, limit=CHUNKS_PER_QUERY
    )
    seen: list[str] = []
    for hit in hits:
        if hit.session_id not in seen:
            seen.append(hit.session_id)
    return seen, (hits[0].score if hits else 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="a home made by ingest.py")
    parser.add_argument("--golden", type=Path, default=GOLDEN)
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()

    settings = Settings.from_env({"LIBRARIAN_HOME": str(args.home)})
    store = open_store(settings)
    embedder = local_embedder()
    queries = [json.loads(line) for line in args.golden.read_text(encoding="utf-8").splitlines()]

    ks = (1, 3, 5, 10)
    recall = {k: [] for k in ks}
    rr, ndcg, negative_scores, positive_scores = [], [], [], []
    by_kind: dict[str, list[float]] = {}
    by_style: dict[str, list[float]] = {}
    for q in queries:
        ranking, top_score = ranked_sessions(store, embedder, q["query"])
        relevant = set(q["relevant"])
        if not relevant:
            negative_scores.append(top_score)
            continue
        positive_scores.append(top_score)
        for k in ks:
            recall[k].append(len(relevant & set(ranking[:k])) / len(relevant))
        first = next((i for i, s in enumerate(ranking) if s in relevant), None)
        rr.append(1 / (first + 1) if first is not None else 0.0)
        by_kind.setdefault(q["kind"], []).append(rr[-1])
        by_style.setdefault(q["style"], []).append(rr[-1])
        dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranking[:10]) if s in relevant)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
        ndcg.append(dcg / ideal)
        if args.show_misses and (first is None or first >= 5):
            print(f"miss {q['id']} ({q['kind']}/{q['style']}): {q['query'][:90]}")

    n = len(rr)
    print(f"queries:    {n} with answers, {len(negative_scores)} negative")
    for k in ks:
        print(f"recall@{k:<3} {statistics.mean(recall[k]):.3f}")
    print(f"MRR        {statistics.mean(rr):.3f}")
    print(f"nDCG@10    {statistics.mean(ndcg):.3f}")
    for name, values in sorted(by_kind.items()) + sorted(by_style.items()):
        print(f"  MRR {name:<10} {statistics.mean(values):.3f} ({len(values)} queries)")
    if negative_scores:
        print(
            f"top score:  answered median {statistics.median(positive_scores):.4f}, "
            f"negative median {statistics.median(negative_scores):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

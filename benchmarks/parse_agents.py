"""Every agent's sessions of the agents corpus through its reader: what was read, and how fast.

    uv run python benchmarks/parse_agents.py [--repeat 3]

For each agent of ../shared/corpus/agents-dev.tar.xz (unpacked to a temporary folder), the
sessions `readers.find` makes of its folder, parsed and redacted as the `transcript` step does:
sessions, turns, tool uses by action, files changed, malformed lines, records skipped by kind,
sessions with nothing to remember (and why), and failures (an exception: there must be none).
Then parse + redact throughput per MB, best of N, and its ratio to Claude Code's on the same
machine in the same run (target: every agent within 2x, so >= 0.5x). The last line is one JSON
object of the figures. Never run from tests: timings belong here.
"""

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _corpus import unpack_agents
from _results import add_record_option, record

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import find, parse_session
from librarian_dagster.core.capture.session import ACTIONS
from librarian_dagster.core.capture.touches import file_touches
from librarian_dagster.core.redaction.scan import redact_session

FOLDERS = {"claude-code": "claude-code", "codex": "codex", "gemini": "gemini-cli",
           "opencode": "opencode", "copilot": "copilot-cli", "pi": "pi"}  # fmt: skip
"""Each agent's name -> its folder in the corpus."""


def read(sessions: list[SessionFiles]) -> dict:
    figures: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    nothing: Counter[str] = Counter()
    for files in sessions:
        try:
            session = parse_session(files)
            redact_session(session)
        except Exception:
            figures["failures"] += 1
            continue
        if session.skip_reason:
            nothing[session.skip_reason] += 1
            continue
        figures["turns"] += len(session.turns)
        figures["malformed lines"] += session.stats.malformed_lines
        figures["subagents"] += session.stats.subagents
        for turn in session.turns:
            for use in turn.tool_uses:
                actions[use.action or "other"] += 1
        figures["files changed"] += sum(1 for t in file_touches(session) if t.edits)
        skipped.update(session.stats.skipped_by_kind)
    return {
        "sessions": len(sessions),
        **{k: figures[k] for k in ("turns", "subagents", "files changed", "malformed lines")},
        "tool uses": {a: actions[a] for a in (*ACTIONS, "other")},
        "skipped by kind": dict(skipped),
        "nothing to remember": dict(nothing),
        "failures": figures["failures"],
    }


def throughput(sessions: list[SessionFiles], repeat: int) -> tuple[float, float]:
    """MB read, and the best seconds of parse + redact over them."""
    size = sum(p.stat().st_size for s in sessions for p in s.paths)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for files in sessions:
            redact_session(parse_session(files))
        best = min(best, time.perf_counter() - start)
    return size / 1e6, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3)
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="librarian-agents-") as tmp:
        corpus = unpack_agents(Path(tmp))
        rows = {}
        for agent, folder in FOLDERS.items():
            sessions = [s for s in find([corpus / folder]).sessions if s.agent == agent]
            mb, seconds = throughput(sessions, args.repeat)
            rows[agent] = {**read(sessions), "MB": round(mb, 1), "MB/s": round(mb / seconds, 1)}
        base = rows["claude-code"]["MB/s"]
        for row in rows.values():
            row["vs Claude Code"] = round(row["MB/s"] / base, 2)
    print("| agent | sessions | turns | change/read/run/search/other | files changed | "
          "malformed | skipped by kind | nothing to remember | failures | MB | MB/s | "
          "vs Claude Code |")  # fmt: skip
    print("|---" * 12 + "|")
    for agent, r in rows.items():
        uses = "/".join(str(n) for n in r["tool uses"].values())
        print(f"| {agent} | {r['sessions']} | {r['turns']} | {uses} | {r['files changed']} | "
              f"{r['malformed lines']} | {r['skipped by kind'] or '-'} | "
              f"{r['nothing to remember'] or '-'} | {r['failures']} | {r['MB']} | {r['MB/s']} | "
              f"{r['vs Claude Code']}x |")  # fmt: skip
    print(json.dumps(rows))
    if args.record:
        slowest = min(rows, key=lambda a: rows[a]["vs Claude Code"])
        record("parse_agents", {
            "sessions": sum(r["sessions"] for r in rows.values()),
            "failures": sum(r["failures"] for r in rows.values()),
            "malformed": sum(r["malformed lines"] for r in rows.values()),
            "skipped": sum(sum(r["skipped by kind"].values()) for r in rows.values()),
            "Claude Code MB/s": base,
            "slowest vs Claude Code": f"{slowest} {rows[slowest]['MB/s']} MB/s "
            f"({rows[slowest]['vs Claude Code']}x)",
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

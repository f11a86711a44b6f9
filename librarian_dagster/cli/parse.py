"""`librarian parse PATH... [--json]`: what the parser made of each session, and why it skipped.

Prints per session: records by type, turns, tool uses, malformed lines (with line numbers and
reasons, never content), subagents, compactions and redaction counts by family.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.readers import (
    find,
    known_cwds,
    not_a_transcript,
    parse_session,
)
from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.commandline import AddParser
from librarian_dagster.core.redaction.scan import redact_session


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "parse",
        help="parse transcripts and report what was found (and why a session is skipped)",
        description="Parse session transcripts of any agent Librarian reads (files or folders; "
        "the agent is told from each file's content) and print per-session stats.",
    )
    p.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="a transcript file or folder"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per session, per line")
    p.add_argument("--include-thinking", action="store_true", help="keep thinking blocks")
    p.set_defaults(handler=run)


def session_report(session: Session, redactions: dict[str, int]) -> dict[str, Any]:
    st = session.stats
    return {
        "session_id": session.session_id,
        "project": session.project,
        "agent": session.agent,
        "files": list(session.files),
        "skip_reason": session.skip_reason,
        "title": session.title,
        "started_at": session.started_at.isoformat() if session.started_at else None,
        "ended_at": session.ended_at.isoformat() if session.ended_at else None,
        "versions": list(session.versions),
        "models": list(session.models),
        "records_by_type": dict(sorted(st.records_by_type.items())),
        "turns": st.turns,
        "turns_by_kind": _turns_by_kind(session),
        "tool_uses": st.tool_uses,
        "malformed_lines": st.malformed_lines,
        "malformed_examples": st.malformed_examples,
        "subagents": st.subagents,
        "compactions": st.compactions,
        "duplicate_records": st.duplicate_records,
        "skipped_by_kind": dict(sorted(st.skipped_by_kind.items())),
        "tokens": {
            "input": session.input_tokens,
            "output": session.output_tokens,
            "cache_read": session.cache_read_tokens,
            "cache_creation": session.cache_creation_tokens,
        },
        "redactions": dict(sorted(redactions.items())),
    }


def _turns_by_kind(session: Session) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in session.turns:
        out[t.kind] = out.get(t.kind, 0) + 1
    return dict(sorted(out.items()))


def _print_text(rep: dict[str, Any]) -> None:
    status = f"SKIPPED: {rep['skip_reason']}" if rep["skip_reason"] else "ok"
    print(f"{rep['session_id']}  [{rep['project']}, {rep['agent']}]  {status}")
    if rep["title"]:
        print(f"  title:        {rep['title']}")
    for f in rep["files"]:
        print(f"  file:         {f}")
    rec = ", ".join(f"{k}={v}" for k, v in rep["records_by_type"].items()) or "none"
    print(f"  records:      {rec}")
    kinds = ", ".join(f"{k}={v}" for k, v in rep["turns_by_kind"].items())
    print(f"  turns:        {rep['turns']}" + (f" ({kinds})" if kinds else ""))
    print(f"  tool uses:    {rep['tool_uses']}")
    print(f"  subagents:    {rep['subagents']}   compactions: {rep['compactions']}")
    print(f"  malformed:    {rep['malformed_lines']}")
    skipped = ", ".join(f"{k}={v}" for k, v in rep["skipped_by_kind"].items()) or "none"
    print(f"  skipped:      {skipped} (records of a shape the reader does not know)")
    for ex in rep["malformed_examples"]:
        print(f"    - {ex}")
    red = ", ".join(f"{k}={v}" for k, v in rep["redactions"].items()) or "none"
    print(f"  redactions:   {red}")


def run(args: argparse.Namespace) -> int:
    missing = [p for p in args.paths if not p.exists()]
    for p in missing:
        print(f"librarian parse: no such file or folder: {p}", file=sys.stderr)
    found = find(p for p in args.paths if p.exists())
    for p in found.unknown:
        print(f"librarian parse: {p}: {not_a_transcript()}", file=sys.stderr)
    sessions = found.sessions
    if not sessions and not missing and not found.unknown:
        print("librarian parse: no session transcripts found", file=sys.stderr)
    # The folders the sessions found name: a transcript that names none is placed by them.
    cwds = known_cwds(sessions)
    for files in sessions:
        session = parse_session(files, include_thinking=args.include_thinking, known_cwds=cwds)
        # Report from the redacted copy: the title and project are printed too.
        redacted, counts = redact_session(session)
        rep = session_report(redacted, counts)
        if args.json:
            print(json.dumps(rep, ensure_ascii=False))
        else:
            _print_text(rep)
    return 1 if missing or found.unknown else 0

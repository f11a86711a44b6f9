"""`librarian redact [--json]`: redact stdin to stdout; findings (never values) to stderr."""

import argparse
import json
import sys

from librarian_dagster.core.commandline import AddParser
from librarian_dagster.core.redaction.scan import redact


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "redact",
        help="redact secrets in text read from stdin",
        description="Read text on stdin, write it redacted to stdout; findings go to stderr "
        "(family and position, never the value).",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='write {"text": ..., "findings": [...]} to stdout instead',
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Bytes in, explicit decode: a stray non-UTF-8 byte must not stop a redaction.
    data = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    text, findings = redact(data)
    found = [{"family": f.family, "start": f.start, "end": f.end} for f in findings]
    if args.json:
        sys.stdout.write(json.dumps({"text": text, "findings": found}, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(text)
        for f in found:
            print(f"redacted {f['family']} at {f['start']}-{f['end']}", file=sys.stderr)
    return 0

"""What the LLM digester would send for the dev corpus: input size per session and segments.

Parses and redacts each of the 199 sessions as the write path does, builds the digest input
(core/llm_digest.digest_input) and prints its estimated tokens (4 characters a token), how many
sessions need segments at a budget, and the calls that makes. No model is called.

    uv run python benchmarks/digest_input.py [--budget 200000]
"""

import argparse
import statistics

from _corpus import unpack_corpus
from _results import add_record_option, record

from librarian_dagster.core.capture.readers import parse_session, session_files_for
from librarian_dagster.core.digest.llm import CHARS_PER_TOKEN, digest_input
from librarian_dagster.core.redaction.scan import redact_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=int, default=200_000, help="tokens per request")
    add_record_option(parser)
    args = parser.parse_args()
    tokens, segments = [], []
    raw_chars = 0
    for files in session_files_for([unpack_corpus()]):
        session = parse_session(files)
        if session.skip_reason:
            continue
        clean, _counts = redact_session(session)
        raw_chars += sum(len(t.text) for t in clean.turns)
        whole = digest_input(clean, 10**12)[0]
        tokens.append(len(whole) // CHARS_PER_TOKEN)
        segments.append(len(digest_input(clean, args.budget * CHARS_PER_TOKEN)))
    tokens.sort()
    calls = sum(n if n == 1 else n + 1 for n in segments)
    print(f"sessions: {len(tokens)}")
    print(
        f"digest input tokens (est.): p50 {statistics.median(tokens):,.0f}, "
        f"p95 {tokens[int(0.95 * (len(tokens) - 1))]:,}, max {tokens[-1]:,}, "
        f"total {sum(tokens):,} ({sum(tokens) * CHARS_PER_TOKEN / max(raw_chars, 1):.0%} of "
        "the redacted turns' text)"
    )
    print(
        f"budget {args.budget:,} tokens: {sum(n > 1 for n in segments)} session(s) in segments "
        f"(most {max(segments)}), {calls} generateContent calls for the corpus"
    )
    if args.record:
        record("digest_input", {
            "sessions": len(tokens), "p50 tokens": round(statistics.median(tokens)),
            "p95 tokens": tokens[int(0.95 * (len(tokens) - 1))], "max tokens": tokens[-1],
            "total tokens": sum(tokens), "budget tokens": args.budget,
            "in segments": sum(n > 1 for n in segments), "calls": calls,
        })  # fmt: skip


if __name__ == "__main__":
    main()

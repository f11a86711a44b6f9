"""Consolidation replayed against no notes: each dev project's library mined from its earlier
sessions, then the later sessions' first edits replayed through the real PreToolUse hook, with
the notes, and with today's file history alone. No LLM judges anything.

For each project, its sessions in time order: T is when the first of the later 30% began. The
library is what `librarian library consolidate --before T` would write (the same functions, over
the earlier sessions' transcripts, redacted), placed in a scratch checkout. Reported by project:
- re-asks: later sessions that failed with a line an earlier cluster holds (the same failure,
  compared as consolidation compares it), and whose own way out has key strings (the command
  that passed next, when it is not the failed one, and the other files it changed to get there);
  at their first edit under the cluster's folder, the share whose injected text carries one of
  them: with the notes, with file history alone (a recall server over the earlier sessions) and
  with nothing (no library, no history);
- foreseen: later failures that earlier sessions had met too; the share a note on an enclosing
  folder of a file their session changed named before T;
- grounded: lines citing only earlier sessions (target 100%), path precision (cited sessions
  that changed a file under the line's folder), lines quoting what none of their sessions said
  (target 0);
- hygiene: lines per 100 sessions, duplicate lines per folder, churn when mined again (0),
  secrets found in the notes (0), lines left standing when their only session is forgotten (0);
- ms: the hook's wall time at those edits, p50 / p95, with the notes and without a library.
The last line is one JSON object of those figures.

    uv run python benchmarks/consolidation_replay.py [--split 0.7] [--no-history] [--record]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _corpus import unpack_agents
from _ports import free_port
from _results import add_record_option, record

from librarian_dagster.core.capture.readers import find, parse_session
from librarian_dagster.core.capture.session import CHANGE, Session
from librarian_dagster.core.capture.touches import normal_path
from librarian_dagster.core.consolidation import notes
from librarian_dagster.core.consolidation.consolidate import files as library_files
from librarian_dagster.core.consolidation.evidence import (
    Evidence,
    Failure,
    evidence_of,
    failure_key,
    relative,
)
from librarian_dagster.core.consolidation.mining import COMMAND, Line, grounded, mine
from librarian_dagster.core.recall.file_match import root_of
from librarian_dagster.core.redaction.scan import find_secrets_many, redact_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edit_replay import (
    CHANGE_TOOLS,
    RUN_HOOK,
    Replayer,
    Stored,
    dev_projects,
    hook_event,
    ingest,
    pct,
    sessions_of,
    start_server,
    tool_calls,
)


@dataclass
class Case:
    """A later session that failed as an earlier cluster says, at its first edit under it."""

    project: str
    session: Session
    line: Line
    keys: list[str]
    event: dict
    relative_path: str
    carried: dict[str, bool] = field(default_factory=dict)
    said: dict[str, bool] = field(default_factory=dict)
    """Whether the arm added anything at all."""
    stale: tuple[int, int] = (0, 0)
    """Lines the notes injected that git says are stale, and of those the unmarked."""
    ms: dict[str, float] = field(default_factory=dict)


def evidence_for(sessions: list[Session], worked_in: set[str]) -> list[Evidence]:
    found = []
    for session in sessions:
        redacted, _ = redact_session(session)
        root = root_of(normal_path(redacted.cwd or "") or "/", worked_in)
        found.append(evidence_of(redacted, root))
    return found


def way_out(failure: Failure, touched: str) -> list[str]:
    """What a session did to get past `failure`, as strings a note could carry."""
    keys = [failure.then] if failure.then and failure.then != failure.command else []
    name = touched.rsplit("/", 1)[-1]
    keys += sorted({p.rsplit("/", 1)[-1] for p in failure.changed} - {name})
    return keys


def first_edit_under(session: Session, folder: str, root: str, replay_dir: Path):
    """(event, path relative to root) of the session's first edit of a file under `folder`."""
    source = Path(session.files[0])
    for number, said, block in tool_calls(source):
        given = block["input"]
        path = given.get("file_path") or given.get("notebook_path")
        cwd = said.get("cwd") or session.cwd
        rel = relative(path, root, cwd) if isinstance(path, str) else None
        if (
            block.get("name") in CHANGE_TOOLS
            and rel
            and (not folder or rel.startswith(folder + "/"))
        ):
            transcript = replay_dir / f"{session.session_id}.jsonl"
            # A session id of its own: the hook injects a note once per session.
            sid = f"{session.session_id}-{number}"
            return hook_event(sid, transcript, source, number, cwd, block), rel
    return None


def first_edit_in_session(session: Session, folder: str, root: str, replay_dir: Path):
    """The same from the session model, for any agent: no transcript written as it goes."""
    for turn in session.turns:
        for use in turn.tool_uses:
            for path in use.file_paths if use.action == CHANGE else ():
                rel = relative(path, root, session.cwd)
                if rel and (not folder or rel.startswith(folder + "/")):
                    return {"session_id": f"{session.session_id}-{rel}", "cwd": session.cwd,
                            "hook_event_name": "PreToolUse", "tool_name": "Edit",
                            "tool_input": {"file_path": path}, "_line": -1,
                            "transcript_path": str(replay_dir / "none.jsonl")}, rel  # fmt: skip
    return None


def cases_of(project: str, later: list[Session], evidence: list[Evidence], lines: list[Line],
             worked_in: set[str], replay_dir: Path, first_edit) -> list[Case]:  # fmt: skip
    found = []
    for session, e in zip(later, evidence, strict=True):
        root = root_of(normal_path(session.cwd or "") or "/", worked_in)
        for failure in e.failures:
            line = holding(failure, lines)
            if line is None:
                continue
            edit = first_edit(session, line.folder, root, replay_dir)
            if edit is None:
                continue
            event, rel = edit
            keys = way_out(failure, rel)
            if keys:
                found.append(Case(project, session, line, keys, event, rel))
            break  # one case per session: its first failure an earlier cluster holds
    return found


def holding(failure: Failure, lines: list[Line]) -> Line | None:
    """The earlier line that holds a later failure: the same failure, else one about the same
    command (a failure of it, then a command line), most sessions first."""
    keys = {failure_key(said) for said in failure.lines}
    for wanted in (lambda x: x.kind != COMMAND and x.key in keys,
                   lambda x: x.kind != COMMAND and x.quotes[0] == failure.command,
                   lambda x: x.kind == COMMAND and x.key == failure.command):  # fmt: skip
        held = [x for x in lines if wanted(x)]
        if held:
            return max(held, key=lambda x: len(x.sessions))
    return None


def run_hook(replayer: Replayer, event: dict, env: dict[str, str]) -> tuple[str, float]:
    if event["_line"] >= 0:  # the transcript as it stood at the call, for file history
        replayer.write_until(event)
    given = {k: v for k, v in event.items() if not k.startswith("_")}
    started = time.perf_counter()
    done = subprocess.run(["sh", str(RUN_HOOK), "pre_tool_use.py"],
                          input=json.dumps(given).encode(), capture_output=True,
                          env={**replayer.env, **env}, timeout=30)  # fmt: skip
    ms = (time.perf_counter() - started) * 1000.0
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"the hook failed: {done.returncode} {done.stderr[:300]!r}")
    output = json.loads(done.stdout)["hookSpecificOutput"] if done.stdout else {}
    return output.get("additionalContext", ""), ms


def in_checkout(case: Case, checkout: Path) -> dict:
    """The case's event as if the session's checkout were `checkout` (where the library is)."""
    event = dict(case.event)
    given = dict(event["tool_input"])
    given["file_path"] = str(checkout / case.relative_path)
    given.pop("notebook_path", None)
    return {**event, "tool_input": given, "cwd": str(checkout)}


def replay(cases: list[Case], replayer: Replayer, checkouts: dict[str, Path], history: bool,
           lines: list[Line]) -> None:  # fmt: skip
    off = {"LIBRARIAN_HISTORY": "off", "LIBRARIAN_RECALL": "off"}
    for case in cases:
        checkout = checkouts[case.project]
        at = at_the_time(checkout, case.session)
        arms = {"notes": (in_checkout(case, checkout), off),
                "nothing": (in_checkout(case, checkout.parent / "bare"), off)}  # fmt: skip
        if history:
            arms["file history"] = (case.event, {})  # LIBRARIAN_RECALL=off would stop it too
        for arm, (event, env) in arms.items():
            text, case.ms[arm] = run_hook(replayer, event, env)
            case.carried[arm] = any(k in text for k in case.keys)
            case.said[arm] = bool(text)
            if arm == "notes" and at:
                case.stale = staleness(checkout, at, text, lines)


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def at_the_time(checkout: Path, session: Session) -> float | None:
    """Check out, in a git checkout, the commit the session began on; its Unix time."""
    if not (checkout / ".git").exists() or session.started_at is None:
        return None
    when = session.started_at.timestamp()
    commit = _git(checkout, "rev-list", "-1", f"--before={int(when)}", "origin/HEAD")
    if not commit:
        return None
    _git(checkout, "checkout", "-q", "--force", commit)
    return when


def staleness(checkout: Path, at: float, text: str, lines: list[Line]) -> tuple[int, int]:
    """(injected lines whose files changed between their newest session and `at`, of those
    the ones not marked)."""
    stale = unmarked = 0
    for said in (x for x in text.splitlines() if x.startswith("- ")):
        line = next((x for x in lines if x.text in said and x.files and x.kind != COMMAND), None)
        newest = line.newest if line else None
        if line is None or newest is None:
            continue
        changed = _git(checkout, "log", "-1", "--format=%h", f"--since={int(newest.timestamp())}",
                       f"--until={int(at)}", "--", *line.files)  # fmt: skip
        if changed:
            stale += 1
            unmarked += "(may be stale since" not in said
    return stale, unmarked


def foreseen(
    evidence: list[Evidence], before: list[Evidence], lines: list[Line]
) -> tuple[int, int]:
    """(later failures met before T that a note on an enclosing folder named, those met before)."""
    met_before = {failure_key(s) for e in before for f in e.failures for s in f.lines}
    named = [(line.key, line.folder) for line in lines if line.kind != COMMAND]
    hits = total = 0
    for e in evidence:
        for key in {failure_key(s) for f in e.failures for s in f.lines} & met_before:
            total += 1
            hits += any(k == key and any(not d or p.startswith(d + "/") for p in e.changed)
                        for k, d in named)  # fmt: skip
    return hits, total


def quality(lines: list[Line], before: list[Evidence]) -> dict[str, object]:
    by_id = {e.session_id: e for e in before}
    cited = [(line, s) for line in lines for s, _ in line.sessions]
    under = sum(any(not line.folder or p.startswith(line.folder + "/") for p in by_id[s].changed)
                for line, s in cited if s in by_id)  # fmt: skip
    files = library_files(lines, [], {}, set(), None)
    texts = [x for text in files.values() for x in text.splitlines() if x.startswith("- ")]
    dupes = len(texts) - len(set(texts))
    alone = {s for line in lines for s, _ in line.sessions}
    cascade = 0
    for sid in sorted(alone)[:20]:  # forget one cited session at a time
        again = {(x.key, x.folder) for x in mine([e for e in before if e.session_id != sid])}
        cascade += sum((x.key, x.folder) in again for x in lines
                       if [s for s, _ in x.sessions] == [sid])  # fmt: skip
    return {
        "lines": len(lines),
        "cite earlier only": f"{sum(s in by_id for _, s in cited)}/{len(cited)}",
        "path precision": f"{under}/{len(cited)}",
        "ungrounded": sum(not grounded(line, by_id) for line in lines),
        "lines/100 sessions": round(100 * len(lines) / max(1, len(before)), 1),
        "duplicates": dupes,
        "churn": int(library_files(mine(before), [], {}, set(), None) != files),
        "secrets": sum(len(f) for f in find_secrets_many(list(files.values()))),
        "left after forget": cascade,
    }


def share(hits: int, total: int) -> str:
    return f"{hits}/{total} ({hits / total:.2f})" if total else "0/0"


def report(cases: list[Case], quality_row: dict, seen: tuple[int, int]) -> dict[str, object]:
    row: dict[str, object] = {"re-asks": len(cases)}
    for arm in ("notes", "file history", "nothing"):
        if any(arm in c.carried for c in cases):
            row[f"carried by {arm}"] = share(sum(c.carried[arm] for c in cases), len(cases))
            row[f"{arm} said anything"] = share(sum(c.said[arm] for c in cases), len(cases))
    row["foreseen"] = share(*seen)
    stale = [c.stale for c in cases if c.stale != (0, 0)]
    row["stale injected"] = sum(x for x, _ in stale)
    row["stale unmarked"] = sum(y for _, y in stale)
    row |= quality_row
    for arm in ("notes", "nothing"):
        ms = [c.ms[arm] for c in cases if arm in c.ms]
        if ms:
            row[f"ms {arm} p50/p95"] = f"{pct(ms, 0.5):.1f} / {pct(ms, 0.95):.1f}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument("--no-history", action="store_true", help="skip the file history arm")
    parser.add_argument("--repo", action="append", default=[], metavar="PROJECT=GIT",
                        help="a project's git repository, for its stale lines (cli's: "
                        "entireio/cli)")  # fmt: skip
    add_record_option(parser)
    args = parser.parse_args()
    repos = {n: Path(d) for n, d in (r.split("=", 1) for r in args.repo)}
    scratch = Path(tempfile.mkdtemp(prefix="consolidation-replay-"))
    try:
        rows = run(scratch, args.split, not args.no_history, repos)
        for name, row in rows.items():
            print(name, json.dumps(row))
        print(json.dumps(rows))
        if args.record:
            dev, held = rows["dev"], rows["held out"]
            record("consolidation_replay", {
                "re-asks": dev["re-asks"], "notes": dev.get("carried by notes"),
                "file history": dev.get("carried by file history"),
                "nothing": dev.get("carried by nothing"),
                "held-out re-asks": held["re-asks"], "held-out notes": held.get("carried by notes"),
                "foreseen": dev["foreseen"], "held-out foreseen": held["foreseen"],
                "stale unmarked": f"{dev['stale unmarked']}/{dev['stale injected']}",
                "ms p95 notes / none": f"{dev.get('ms notes p50/p95', '-').split(' / ')[-1]} / "
                                       f"{dev.get('ms nothing p50/p95', '-').split(' / ')[-1]}",
            })  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


HELD_OUT = ("git-sync", "agentv", "gatomia-vscode", "session-bridge")
"""Projects of the agents corpus, of several agents, never looked at while consolidation's
rules were written: their figures are the held-out ones (edits from each agent's own tools,
with the notes or nothing; file history is replayed on the dev projects)."""


def held_out_projects(scratch: Path) -> dict[str, list[Session]]:
    agents = unpack_agents(scratch)
    found = {}
    for project in HELD_OUT:
        folders = [a / project for a in sorted(agents.iterdir()) if (a / project).is_dir()]
        parsed = [parse_session(files) for files in find(folders).sessions]
        kept = [x for x in parsed if x.started_at and x.cwd and not x.skip_reason]
        found[project] = sorted(kept, key=lambda x: (x.started_at, x.session_id))
    return found


def run(scratch: Path, split: float, history: bool, repos: dict[str, Path]) -> dict[str, dict]:
    replay_dir = scratch / "replay"
    replay_dir.mkdir()
    projects = {n: (sessions_of(f), False) for n, f in dev_projects(scratch / "corpus").items()}
    projects |= {n: (s, True) for n, s in held_out_projects(scratch / "agents").items()}
    per_project, stored, checkouts = {}, [], {}
    for name, (sessions, held_out) in projects.items():
        cut = int(len(sessions) * split)
        worked_in = {p for p in (normal_path(s.cwd or "") for s in sessions) if p}
        before = evidence_for(sessions[:cut], worked_in)
        later = evidence_for(sessions[cut:], worked_in)
        by_id = {e.session_id: e for e in before}
        lines = [line for line in mine(before) if grounded(line, by_id)]
        checkouts[name] = scratch / "checkouts" / name / "repo"
        (scratch / "checkouts" / name / "bare").mkdir(parents=True)
        repo = None
        if name in repos:  # the project's own git history: the library written as of T
            subprocess.run(["git", "clone", "-q", str(repos[name]), str(checkouts[name])],
                           check=True)  # fmt: skip
            repo = checkouts[name] if at_the_time(checkouts[name], sessions[cut]) else None
        written = library_files(lines, [], {}, set(), repo)
        notes.write(checkouts[name] / "_memory_library", {}, written)
        found = first_edit_in_session if held_out else first_edit_under
        cases = cases_of(name, sessions[cut:], later, lines, worked_in, replay_dir, found)
        per_project[name] = (cases, quality(lines, before), foreseen(later, before, lines), lines)
        if not held_out:
            stored += [Stored(s, "", []) for s in sessions[:cut]]
        print(f"{name}{' (held out)' if held_out else ''}: {len(sessions)} sessions, {cut} before "
              f"T, {len(lines)} lines, {len(cases)} re-asks", flush=True)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env |= {"LIBRARIAN_HOME": str(scratch / "home"), "LIBRARIAN_MCP_PORT": str(free_port())}
    server = None
    if history:
        ingest(scratch / "home", stored, env)
        server = start_server(env, int(env["LIBRARIAN_MCP_PORT"]))
    try:
        replayer = Replayer(scratch, f"http://127.0.0.1:{env['LIBRARIAN_MCP_PORT']}")
        for name, (cases, _, _, lines) in per_project.items():
            replay(cases, replayer, checkouts, history and not projects[name][1], lines)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    rows = {name: report(cases, row, seen) for name, (cases, row, seen, _) in per_project.items()}
    for pooled, held_out in (("dev", False), ("held out", True)):
        cases = [c for n, r in per_project.items() if projects[n][1] == held_out for c in r[0]]
        seen = [r[2] for n, r in per_project.items() if projects[n][1] == held_out]
        rows[pooled] = report(cases, {}, (sum(h for h, _ in seen), sum(t for _, t in seen)))
    return rows


if __name__ == "__main__":
    main()

"""File history replayed: the first touches of files in each project's later sessions, through the
real PreToolUse hook process, against a recall server over the earlier sessions.

For each project, its sessions in time order (by when they began): the earlier 70% are ingested
(`librarian ingest`, the offline digester and local embeddings, into a fresh LIBRARIAN_HOME),
and a real recall server (`librarian mcp --transport http`) serves them. Each later session's
transcript is then written again record by record, as Claude Code writes it; at the first Read,
Edit, Write, MultiEdit or NotebookEdit of each file (per agent) the hook runs as hooks.json runs
it (`sh hooks/run-hook.sh pre_tool_use.py`, CLAUDE_PLUGIN_ROOT the checkout, the event on stdin
with session_id, the transcript up to that call, cwd, tool_name, tool_input and tool_use_id),
and the session ids are read out of its additionalContext.

What the store knows is worked out apart from the server, from the earlier transcripts: which
stored sessions touched the file, by the same path matching (core/recall/file_match.py), and, as
a check independent of it, which touched the very same absolute path. Reported by project:
- changed before: first touches of a file an earlier session changed; of those, the share whose
  context names the most recent such session (target >= 0.90), and names it first;
- the same for the exact absolute path alone (no matching needed);
- nothing before: first touches of a file no earlier session read or changed; the share that
  names a session anyway (target <= 0.05); and where no stored file even has its name;
- chars: added per first touch, over all of them (target <= 1,500) and over those given one;
- ms: the hook's wall time as a whole process, p50 / p95, Reads and edits apart (<= 100), and
  with the server down or hanging against today's hook (LIBRARIAN_HISTORY=off) (<= +30).
The last line is one JSON object of those figures.

    uv run python benchmarks/edit_replay.py [--project NAME=DIR ...] [--home DIR] [--keep]
        [--split 0.7] [--fault-sample 150] [--texts FILE]

Without `--project`, the three dev projects of ../shared/corpus (unpacked into a temporary
folder). `--home` reuses (or keeps) an ingested home: the store must hold exactly the earlier
sessions of the same projects and split.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from _ports import free_port
from _results import add_record_option, record

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.capture.touches import FileTouch, file_touches, normal_path
from librarian_dagster.core.recall.file_match import root_of, same_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import SHARED, extract

ROOT = Path(__file__).resolve().parents[1]
RUN_HOOK = ROOT / "hooks" / "run-hook.sh"
# The tools whose first use of a file the hook answers, as Claude Code names them in its events.
CHANGE_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})
READ_TOOLS = frozenset({"Read", "NotebookRead"})
TOOLS = CHANGE_TOOLS | READ_TOOLS
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Stored:
    session: Session
    root: str
    touches: list[FileTouch]


@dataclass
class Touch:
    project: str
    tool: str
    path: str
    event: dict
    changed_by: list[str] = field(default_factory=list)
    """Stored sessions that changed the file, most recent first."""
    read_by: list[str] = field(default_factory=list)
    exact_changed_by: list[str] = field(default_factory=list)
    name_held: bool = False
    named: list[str] = field(default_factory=list)
    chars: int = 0
    ms: float = 0.0


def dev_projects(scratch: Path) -> dict[str, Path]:
    corpus = SHARED / "corpus"
    extract(corpus / "entire-dev.tar.xz", scratch)
    extract(corpus / "xproj-dev.tar.xz", scratch)
    return {
        "cli": scratch / "dev",
        "cipher-box": scratch / "xdev" / "cipher-box",
        "FitToday": scratch / "xdev" / "FitToday",
    }


def sessions_of(folder: Path) -> list[Session]:
    sessions = []
    for path in sorted(folder.glob("*.jsonl")):
        session = parse_session(SessionFiles(path.stem, path))
        if session.started_at is not None and session.cwd and not session.skip_reason:
            sessions.append(session)
    return sorted(sessions, key=lambda s: (s.started_at, s.session_id))


def tool_calls(source: Path) -> Iterator[tuple[int, dict, dict]]:
    """(line number, record, tool_use block) of each of the main agent's tool calls with an
    input, in a Claude Code transcript, in order."""
    with open(source, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh):
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if said.get("type") != "assistant" or said.get("isSidechain"):
                continue
            content = (said.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if (isinstance(block, dict) and block.get("type") == "tool_use"
                        and isinstance(block.get("input"), dict)):  # fmt: skip
                    yield number, said, block


def hook_event(session_id: str, transcript: Path, source: Path, number: int, cwd: str | None,
               block: dict) -> dict:  # fmt: skip
    """The PreToolUse event of a tool call, as Claude Code sends it; `_line` and `_source` say
    where the call is, for `Replayer.write_until`."""
    return {
        "session_id": session_id,
        "transcript_path": str(transcript),
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": block.get("name"),
        "tool_input": block["input"],
        "tool_use_id": block.get("id") or f"toolu_{number}",
        "_line": number,
        "_source": str(source),
    }


def first_touches(project: str, session: Session, replay_dir: Path) -> list[Touch]:
    """The session's first touches, each with its event; the transcript is written again up to
    each call as the replay reaches it (`write_until`)."""
    source = Path(session.files[0]) if session.files else None
    if source is None:
        return []
    transcript = replay_dir / f"{session.session_id}.jsonl"
    touches, seen = [], set()
    for number, said, block in tool_calls(source):
        name, tool_input = block.get("name"), block["input"]
        if name not in TOOLS:
            continue
        raw = tool_input.get("file_path") or tool_input.get("notebook_path")
        cwd = said.get("cwd") or session.cwd
        path = normal_path(raw, cwd) if isinstance(raw, str) else None
        if path is None or path in seen:
            continue
        seen.add(path)
        event = hook_event(session.session_id, transcript, source, number, cwd, block)
        touches.append(Touch(project, name, path, event))
    return touches


def know(touch: Touch, stored: list[Stored], worked_in: set[str]) -> None:
    """What the store holds about the touched file, worked out from the transcripts."""
    cwd = normal_path(touch.event["cwd"]) or touch.path
    root = root_of(cwd, worked_in | {cwd})
    name = touch.path.rsplit("/", 1)[-1].casefold()
    for memory in reversed(stored):  # most recent first
        for t in memory.touches:
            if t.path.rsplit("/", 1)[-1].casefold() == name:
                touch.name_held = True
            else:
                continue
            if not same_file(touch.path, root, t.path, memory.root):
                continue
            sid = memory.session.session_id
            (touch.changed_by if t.edits else touch.read_by).append(sid)
            if t.edits and t.path == touch.path:
                touch.exact_changed_by.append(sid)


def ingest(home: Path, stored: list[Stored], env: dict[str, str]) -> None:
    mirror = home / "mirror"
    mirror.mkdir(parents=True, exist_ok=True)
    for memory in stored:
        source = Path(memory.session.files[0])
        link = mirror / source.name
        if not link.exists():
            link.symlink_to(source)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "librarian_dagster.cli.main", "ingest", str(mirror)],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    print(f"ingested {len(stored)} sessions in {time.perf_counter() - started:.0f} s", flush=True)


def start_server(env: dict[str, str], port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "librarian_dagster.cli.main", "mcp", "--transport", "http",
         "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    body = json.dumps({"path": "/warm/up.txt", "cwd": "/warm"}).encode()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/history", data=body, method="POST",
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=5):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the recall server did not start")


class Replayer:
    """Runs the hook as hooks.json does, the transcripts written up to each call."""

    def __init__(self, scratch: Path, url: str, extra: dict[str, str] | None = None) -> None:
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "CLAUDE_"))
        }
        self.env.update({
            "HOME": str(scratch / "home"),
            "CLAUDE_PLUGIN_ROOT": str(ROOT),
            "CLAUDE_PLUGIN_DATA": str(scratch / "plugin-data"),
            "LIBRARIAN_MCP_URL": url + "/mcp",
            "LIBRARIAN_LOG": str(scratch / "hooks.log"),
            **(extra or {}),
        })  # fmt: skip
        (scratch / "home").mkdir(exist_ok=True)
        self.written: dict[str, int] = {}
        self.sources: dict[str, TextIO] = {}

    def write_until(self, event: dict) -> None:
        """Append the source's lines up to the event's call to the replayed transcript, from
        where the last call of the session left off (read once, not again per call)."""
        transcript, line = event["transcript_path"], event["_line"]
        done = self.written.get(transcript, 0)
        if done > line:
            return
        source = self.sources.get(transcript)
        if source is None:
            source = self.sources[transcript] = open(  # noqa: SIM115 - kept open across calls
                event["_source"], encoding="utf-8", errors="replace"
            )
        with open(transcript, "a", encoding="utf-8") as out:
            for _ in range(line + 1 - done):
                out.write(source.readline())
        self.written[transcript] = line + 1

    def run(self, touch: Touch) -> tuple[str, float]:
        self.write_until(touch.event)
        event = {k: v for k, v in touch.event.items() if not k.startswith("_")}
        started = time.perf_counter()
        done = subprocess.run(
            ["sh", str(RUN_HOOK), "pre_tool_use.py"], input=json.dumps(event).encode(),
            capture_output=True, env=self.env, timeout=30,
        )  # fmt: skip
        ms = (time.perf_counter() - started) * 1000.0
        if done.returncode != 0 or done.stderr:
            raise SystemExit(f"the hook failed: {done.returncode} {done.stderr[:300]!r}")
        text = ""
        if done.stdout:
            output = json.loads(done.stdout)["hookSpecificOutput"]
            assert "permissionDecision" not in output and "updatedInput" not in output
            text = output.get("additionalContext", "")
        return text, ms


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def share(hits: int, total: int) -> str:
    return f"{hits / total:.3f} ({hits}/{total})" if total else "-"


def report(touches: list[Touch]) -> dict:
    changed = [t for t in touches if t.changed_by]
    exact = [t for t in touches if t.exact_changed_by]
    nothing = [t for t in touches if not t.changed_by and not t.read_by]
    no_name = [t for t in touches if not t.name_held]
    given = [t for t in touches if t.chars]
    reads = [t.ms for t in touches if t.tool in READ_TOOLS]
    edits = [t.ms for t in touches if t.tool in CHANGE_TOOLS]
    named_recent = sum(t.changed_by[0] in t.named for t in changed)
    first_recent = sum(bool(t.named) and t.named[0] == t.changed_by[0] for t in changed)
    exact_recent = sum(t.exact_changed_by[0] in t.named for t in exact)
    invented = sum(bool(t.named) for t in nothing)
    invented_name = sum(bool(t.named) for t in no_name)
    return {
        "first touches": len(touches),
        "reads": len(reads),
        "changed before": len(changed),
        "most recent named": share(named_recent, len(changed)),
        "most recent first": share(first_recent, len(changed)),
        "exact path changed before": len(exact),
        "exact: most recent named": share(exact_recent, len(exact)),
        "nothing before": len(nothing),
        "nothing before, named anyway": share(invented, len(nothing)),
        "no stored file of its name, named anyway": share(invented_name, len(no_name)),
        "chars per first touch": round(statistics.fmean(t.chars for t in touches), 0)
        if touches
        else 0,
        "chars when given": round(statistics.fmean(t.chars for t in given), 0) if given else 0,
        "ms Read p50/p95": f"{pct(reads, 0.5):.1f} / {pct(reads, 0.95):.1f}",
        "ms edit p50/p95": f"{pct(edits, 0.5):.1f} / {pct(edits, 0.95):.1f}",
    }


def table(rows: dict[str, dict]) -> None:
    keys = list(next(iter(rows.values())))
    print("| | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    for key in keys:
        print(f"| {key} | " + " | ".join(str(r[key]) for r in rows.values()) + " |")


def timed(replayer: Replayer, touches: list[Touch]) -> list[float]:
    return [replayer.run(t)[1] for t in touches]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--home", type=Path, help="an ingested home to reuse, or to keep")
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument("--fault-sample", type=int, default=150)
    parser.add_argument(
        "--texts",
        type=Path,
        help="write each first touch's context here (JSON lines): two "
        "versions of the hook compared byte for byte",
    )
    add_record_option(parser)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="edit-replay-"))
    try:
        projects = (
            {n: Path(d) for n, d in (p.split("=", 1) for p in args.project)}
            if args.project else dev_projects(scratch / "corpus")
        )  # fmt: skip
        stored_by: dict[str, list[Stored]] = {}
        later: dict[str, list[Session]] = {}
        for name, folder in projects.items():
            sessions = sessions_of(folder)
            cut = int(len(sessions) * args.split)
            worked_in = {p for p in (normal_path(s.cwd or "") for s in sessions[:cut]) if p}
            stored_by[name] = [
                Stored(s, root_of(normal_path(s.cwd or "") or "/", worked_in), file_touches(s))
                for s in sessions[:cut]
            ]
            later[name] = sessions[cut:]
            print(f"{name}: {len(sessions)} sessions, {cut} stored", flush=True)
        home = args.home or scratch / "librarian-home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        env.update({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MCP_PORT": str(free_port())})
        if not (home / "ingested").exists():
            ingest(home, [m for ms in stored_by.values() for m in ms], env)
            (home / "ingested").touch()
        # One store for every project, as a user's is: another project's files must stay out.
        worked_in = {
            normal_path(m.session.cwd or "") or "/" for ms in stored_by.values() for m in ms
        }
        every = sorted((m for ms in stored_by.values() for m in ms),
                       key=lambda m: m.session.ended_at or m.session.started_at)  # fmt: skip
        replay_dir = scratch / "replay"
        replay_dir.mkdir()
        touches: list[Touch] = []
        for name, sessions in later.items():
            for session in sessions:
                for touch in first_touches(name, session, replay_dir):
                    know(touch, every, worked_in)
                    touches.append(touch)
        port = int(env["LIBRARIAN_MCP_PORT"])
        server = start_server(env, port)
        url = f"http://127.0.0.1:{port}"
        texts: list[dict] = []
        try:
            replayer = Replayer(scratch, url)
            for touch in touches:
                text, touch.ms = replayer.run(touch)
                touch.chars = len(text)
                touch.named = list(dict.fromkeys(UUID.findall(text)))
                texts.append({"session": touch.event["session_id"], "text": text})
        finally:
            server.terminate()
            server.wait(30)
        if args.texts:
            args.texts.write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
        rows = {name: report([t for t in touches if t.project == name]) for name in projects}
        rows["all"] = report(touches)
        table(rows)
        faults = faults_table(scratch, touches[: args.fault_sample])
        print(json.dumps({"projects": rows, "faults": faults}))
        if args.record:
            pooled = rows["all"]
            p50_p95 = {case: figure.split(" (")[0] for case, figure in faults.items()}
            record("edit_replay", {
                "first touches": pooled["first touches"],
                "recent changer named": pooled["most recent named"],
                "nothing before named": pooled["nothing before, named anyway"],
                "chars/touch": int(pooled["chars per first touch"]),
                "Read ms p50/p95": pooled["ms Read p50/p95"],
                "edit ms p50/p95": pooled["ms edit p50/p95"],
                "history off ms p50/p95": p50_p95["today's hook (history off)"],
                "hanging ms p50/p95": p50_p95["server hanging"],
            })  # fmt: skip
    finally:
        if args.home is None:
            shutil.rmtree(scratch, ignore_errors=True)


def faults_table(scratch: Path, sample: list[Touch]) -> dict[str, str]:
    """The hook with no server (a closed port) and with one that never answers (a socket that
    listens and never reads), against today's hook (history off), on the same touches."""
    results = {}
    port = free_port()
    cases = {
        "today's hook (history off)": {"LIBRARIAN_HISTORY": "off"},
        "server down": {},
        "server hanging": {},
    }
    for case, extra in cases.items():
        state = scratch / f"state-{len(results)}"
        replay = scratch / f"replay-{len(results)}"
        replay.mkdir()
        runs = []
        for t in sample:
            event = dict(
                t.event, transcript_path=str(replay / Path(t.event["transcript_path"]).name)
            )
            runs.append(Touch(t.project, t.tool, t.path, event))
        hanging = None
        if case == "server hanging":
            hanging = socket.socket()
            hanging.bind(("127.0.0.1", 0))
            hanging.listen(512)
            port = hanging.getsockname()[1]
        replayer = Replayer(
            scratch, f"http://127.0.0.1:{port}", {**extra, "LIBRARIAN_STATE_DIR": str(state)}
        )
        times = timed(replayer, runs)
        if hanging is not None:
            hanging.close()
        results[case] = (
            f"{pct(times, 0.5):.1f} / {pct(times, 0.95):.1f} (mean {statistics.fmean(times):.1f})"
        )
    print("\n| hook, ms p50 / p95 | " + f"{len(sample)} first touches |\n|---|---|")
    for case, figure in results.items():
        print(f"| {case} | {figure} |")
    return results


if __name__ == "__main__":
    main()

"""File history across agents, replayed: one project worked on by Claude Code and by Codex.

The sessions of every agent given (by default git-sync's 48 Claude Code and 51 Codex sessions of
../shared/corpus/agents-dev.tar.xz), read through their readers and put in time order: the
earlier 70% are ingested (`librarian ingest`, offline digest, local embeddings) and served by a
real recall server; in each later session, every first read or change of a file (per agent of
the session, as the readers' `ToolUse.action` says) is asked of the real PreToolUse hook process
(`sh hooks/run-hook.sh pre_tool_use.py`), with the task the session's user last typed.

The hook is Claude Code's: a Codex session's touch is put to it in Claude Code's words (Read or
Edit of the path), so what is measured is what the store and the server know across agents,
which every agent's hook will ask the same way. Reported by the agent of the touch:
- other agent changed it: first touches of a file whose most recent earlier change of the other
  agent is known; the share whose context names that session (target >= 0.90);
- any agent changed it: the share naming the most recent earlier session that changed it;
- nothing before: first touches of a file no earlier session read or changed; the share that
  names a session anyway (target <= 0.05).

    uv run python benchmarks/agents_replay.py [--project git-sync] [--split 0.7] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from librarian_dagster.core.capture.readers import find, parse_session
from librarian_dagster.core.capture.session import CHANGE, READ, Session
from librarian_dagster.core.capture.touches import file_touches, normal_path
from librarian_dagster.core.recall.file_match import root_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus import unpack_agents
from _results import add_record_option, record
from edit_replay import UUID, Replayer, Stored, Touch, free_port, know, share, start_server

AGENTS = ("claude-code", "codex")


def sessions_of(agents_dir: Path, project: str) -> list[Session]:
    folders = [agents_dir / agent / project for agent in AGENTS]
    found = find([f for f in folders if f.is_dir()]).sessions
    parsed = [parse_session(files) for files in found]
    kept = [s for s in parsed if s.started_at and s.cwd and not s.skip_reason]
    return sorted(kept, key=lambda s: (s.started_at, s.session_id))


def first_touches(project: str, session: Session, scratch: Path) -> list[Touch]:
    """The session's first reads and changes of each file, per agent of it, each with the event
    the hook is given: the task the user last typed in a transcript of its own."""
    touches, seen, task = [], set(), ""
    for number, turn in enumerate(session.turns):
        if turn.kind == "prompt" and turn.agent_id is None:
            task = turn.text
        for use in turn.tool_uses:
            if use.action not in (CHANGE, READ):
                continue
            for raw in use.file_paths:
                path = normal_path(raw, session.cwd)
                if path is None or (turn.agent_id, path) in seen:
                    continue
                seen.add((turn.agent_id, path))
                transcript = scratch / f"{session.session_id}-{number}-{len(touches)}.jsonl"
                transcript.write_text(_typed(task, session.session_id), encoding="utf-8")
                tool = "Edit" if use.action == CHANGE else "Read"
                event = {
                    "session_id": session.session_id,
                    "transcript_path": str(transcript),
                    "cwd": session.cwd,
                    "permission_mode": "default",
                    "hook_event_name": "PreToolUse",
                    "tool_name": tool,
                    "tool_input": {"file_path": path},
                    "tool_use_id": f"toolu_{number}_{len(touches)}",
                    "_line": -1,  # the transcript is written whole, beforehand
                    "_source": "",
                }
                if turn.agent_id:
                    event["agent_id"] = turn.agent_id
                touches.append(Touch(project, tool, path, event))
    return touches


def _typed(prompt: str, session_id: str) -> str:
    record = {"type": "user", "sessionId": session_id, "message": {"role": "user",
              "content": prompt[:2000] or "continue"}}  # fmt: skip
    return json.dumps(record) + "\n"


def ingest(home: Path, stored: list[Session], env: dict[str, str]) -> None:
    paths = [p for s in stored for p in s.files]
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "librarian_dagster.cli.main", "ingest", *paths],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    print(f"ingested {len(stored)} sessions in {time.perf_counter() - started:.0f} s", flush=True)


def report(touches: list[Touch], agent_of: dict[str, str], agent: str) -> dict[str, str]:
    mine = [t for t in touches if agent_of[t.event["session_id"]] == agent]
    other = [t for t in mine if _other_changer(t, agent_of, agent)]
    named_other = sum(_other_changer(t, agent_of, agent) in t.named for t in other)
    changed = [t for t in mine if t.changed_by]
    named_recent = sum(t.changed_by[0] in t.named for t in changed)
    nothing = [t for t in mine if not t.changed_by and not t.read_by]
    return {
        "first touches": str(len(mine)),
        "other agent changed it": str(len(other)),
        "other agent's most recent named": share(named_other, len(other)),
        "any agent changed it": str(len(changed)),
        "most recent named": share(named_recent, len(changed)),
        "nothing before": str(len(nothing)),
        "nothing before, named anyway": share(sum(bool(t.named) for t in nothing), len(nothing)),
    }


def _other_changer(touch: Touch, agent_of: dict[str, str], agent: str) -> str | None:
    return next((s for s in touch.changed_by if agent_of[s] != agent), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", default="git-sync")
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument("--keep", type=Path, help="keep the scratch folder (its home) here")
    add_record_option(parser)
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="agents-replay-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        sessions = sessions_of(unpack_agents(scratch / "corpus"), args.project)
        cut = int(len(sessions) * args.split)
        agent_of = {s.session_id: s.agent for s in sessions}
        worked_in = {p for p in (normal_path(s.cwd or "") for s in sessions[:cut]) if p}
        stored = [
            Stored(s, root_of(normal_path(s.cwd or "") or "/", worked_in), file_touches(s))
            for s in sessions[:cut]
        ]
        counts = {a: sum(s.agent == a for s in sessions[:cut]) for a in AGENTS}
        print(f"{args.project}: {len(sessions)} sessions, {cut} stored {counts}", flush=True)
        home = scratch / "librarian-home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        env.update({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MCP_PORT": str(free_port())})
        if not (home / "ingested").exists():
            ingest(home, sessions[:cut], env)
            (home / "ingested").touch()
        every = sorted(stored, key=lambda m: m.session.ended_at or m.session.started_at)
        events = scratch / "events"
        events.mkdir(exist_ok=True)
        touches = []
        for session in sessions[cut:]:
            for touch in first_touches(args.project, session, events):
                know(touch, every, worked_in)
                touches.append(touch)
        # The hook's once-per-file markers of a kept scratch's last run would silence this one.
        shutil.rmtree(scratch / "plugin-data" / "state", ignore_errors=True)
        port = int(env["LIBRARIAN_MCP_PORT"])
        server = start_server(env, port)
        try:
            replayer = Replayer(scratch, f"http://127.0.0.1:{port}")
            # The server's first real question (a live transcript read, the store cold) can miss
            # the hook's deadline, and the breaker would then leave the server alone for the
            # replay: asked once and forgotten, as a user's second touch meets a warm server.
            replayer.run(touches[0])
            shutil.rmtree(scratch / "plugin-data" / "state", ignore_errors=True)
            for touch in touches:
                text, touch.ms = replayer.run(touch)
                touch.chars = len(text)
                touch.named = list(dict.fromkeys(UUID.findall(text)))
        finally:
            server.terminate()
            server.wait(30)
        rows = {agent: report(touches, agent_of, agent) for agent in AGENTS}
        keys = list(next(iter(rows.values())))
        print("| by the touch's agent | " + " | ".join(rows) + " |")
        print("|---|" + "---|" * len(rows))
        for key in keys:
            print(f"| {key} | " + " | ".join(r[key] for r in rows.values()) + " |")
        print(json.dumps(rows))
        if args.record:
            other = "other agent's most recent named"
            nothing = [t for t in touches if not t.changed_by and not t.read_by]
            anyway = sum(bool(t.named) for t in nothing)
            record("agents_replay", {
                "project": args.project, "first touches": len(touches),
                "CC touch, Codex changed: named": rows["claude-code"][other],
                "Codex touch, CC changed: named": rows["codex"][other],
                "nothing before": len(nothing),
                "nothing before, named anyway": share(anyway, len(nothing)),
            })  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Wall time of `hooks/pre_tool_use.py` as a whole process, the way Claude Code runs it.

Generated library (issue 4): 10 x 10 x 5 leaf folders with two notes each, one note per top
folder, three global notes; the edited file is four levels deep (`t3/m4/l2/run.py`), so the hook
reads 2 leaf notes + 1 top note + 3 global notes. Everything (library, HOME, log, state) lives in a
temporary folder.

Cases:
- `startup`: the interpreter alone (`-c pass`), the floor under any Python hook;
- `cold`: a new session id each run, so all six notes are read and injected (the usual first edit);
- `warm`: one session id, so after the first run nothing is new (every later edit in a session);
- `no -E -S`: cold, without the flags hooks.json uses, to show what site-packages costs.

    uv run python benchmarks/hooks.py [--runs 101] [--python python3]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import add_record_option, record

HOOK = Path(__file__).resolve().parents[1] / "hooks" / "pre_tool_use.py"
NOTE = "- {label}: {text}\n" * 6


def build_library(root: Path) -> Path:
    lib = root / "repo" / "_memory_library"
    for name in ("patterns", "tech", "product"):
        (lib / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (lib / f"{name}.md").write_text(
            NOTE.format(label="global", text=f"{name} rule that applies everywhere"),
            encoding="utf-8",
        )
    for t in range(10):
        top = lib / f"t{t}"
        top.mkdir()
        (top / "patterns.md").write_text(
            NOTE.format(label=f"t{t}", text="a pattern for this top folder"), encoding="utf-8"
        )
        for m in range(10):
            for leaf in range(5):
                folder = top / f"m{m}" / f"l{leaf}"
                folder.mkdir(parents=True)
                for name in ("patterns", "tech"):
                    (folder / f"{name}.md").write_text(
                        NOTE.format(label=f"t{t}/m{m}/l{leaf}", text=f"{name} detail"),
                        encoding="utf-8",
                    )
    (root / "repo" / "t3" / "m4" / "l2").mkdir(parents=True)
    return lib


def event(repo: Path, session: str) -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": "/home/user/.claude/projects/x/transcript.jsonl",
            "cwd": str(repo),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_input": {
                "file_path": str(repo / "t3" / "m4" / "l2" / "run.py"),
                "old_string": "a",
                "new_string": "b",
            },
            "tool_use_id": "toolu_bench",
        }
    ).encode("utf-8")


def timed(argv, stdin: bytes, env) -> tuple[float, bytes]:
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=True)
    return (time.perf_counter() - start) * 1000.0, proc.stdout


def measure(cases: dict, runs: int) -> dict:
    """Run the cases round-robin, so a busy machine slows all of them alike; print the stats."""
    for call in cases.values():  # warm the page cache and the .pyc files
        for _ in range(3):
            call(-1)
    times = {name: [] for name in cases}
    for i in range(runs):
        for name, call in cases.items():
            times[name].append(call(i))
    for name, ts in times.items():
        ts.sort()
        p90 = ts[int(len(ts) * 0.9) - 1]
        print(
            f"{name:<28} median {statistics.median(ts):6.1f} ms   p90 {p90:6.1f} ms"
            f"   min {ts[0]:6.1f} ms   (n={runs})"
        )
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description="Time pre_tool_use.py as a whole process.")
    parser.add_argument("--runs", type=int, default=101)
    parser.add_argument("--python", default="python3", help="interpreter, as hooks.json names it")
    add_record_option(parser)
    args = parser.parse_args()
    python = shutil.which(args.python) or args.python

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lib = build_library(root)
        repo = lib.parent
        home = root / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "CLAUDE_"))}
        # The notes alone: the file history's cost, against a server, is edit_replay.py's.
        env.update(
            HOME=str(home), LIBRARIAN_LOG=str(root / "librarian.log"), LIBRARIAN_HISTORY="off"
        )
        leaves = sum(1 for _ in lib.glob("t*/m*/l*"))
        notes = sum(1 for _ in lib.rglob("*.md"))
        real = subprocess.run(
            [python, "-c", "import sys; print(sys.executable, sys.version.split()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"library: {leaves} leaf folders, {notes} notes; interpreter: {python} -> {real}")

        _, out = timed([python, "-E", "-S", str(HOOK)], event(repo, "check"), env)
        context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
        print(f"cold run injects {context.count('### ')} notes, {len(context)} characters\n")

        hook = [python, "-E", "-S", str(HOOK)]
        medians = measure(
            {
                "startup (-E -S -c pass)": lambda i: timed(
                    [python, "-E", "-S", "-c", "pass"], b"", env
                )[0],
                "startup (-c pass)": lambda i: timed([python, "-c", "pass"], b"", env)[0],
                "pre_tool_use cold": lambda i: timed(hook, event(repo, f"cold-{i}"), env)[0],
                "pre_tool_use warm": lambda i: timed(hook, event(repo, "warm"), env)[0],
                "pre_tool_use cold, no -E -S": lambda i: timed(
                    [python, str(HOOK)], event(repo, f"plain-{i}"), env
                )[0],
            },
            args.runs,
        )
        cold = medians["pre_tool_use cold"]

        logged = [
            float(line.split()[2].removesuffix("ms"))
            for line in (root / "librarian.log").read_text(encoding="utf-8").splitlines()
            if " pre_tool_use " in line and "injected=" in line
        ]
        print(
            f"\nin-process time of a cold firing (from the log): median "
            f"{statistics.median(logged):.1f} ms"
        )
        print(f"target: <= 30 ms median for the whole process; cold median {cold:.1f} ms")
        if args.record:
            record("hooks", {
                "cold p50 ms": cold, "warm p50 ms": medians["pre_tool_use warm"],
                "in-process p50 ms": statistics.median(logged),
                "startup -E -S p50 ms": medians["startup (-E -S -c pass)"],
                "cold no -E -S p50 ms": medians["pre_tool_use cold, no -E -S"],
            })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

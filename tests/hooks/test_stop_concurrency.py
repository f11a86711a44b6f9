"""Two Stop hooks at once over 100 tagged blocks: none lost, none duplicated."""

import json
import re

import pytest
from hookutil import make_library, stop_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def _scratch(n: int, round_: int) -> str:
    blocks = []
    for i in range(n):
        path = f"pkg{i % 7}/mod{i % 3}" if i % 5 else "global"
        kind = ("patterns", "tech", "product")[i % 3]
        blocks.append(f"## [TAG: {path}, type: {kind}]\n- learning r{round_} n{i:03d}\n")
    return "# Scratch\n\n" + "\n".join(blocks)


def test_two_stop_hooks_at_once_lose_and_duplicate_nothing(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {})
    event_file = tmp_path / "stop.json"
    event_file.write_text(json.dumps(stop_event(str(repo))), encoding="utf-8")
    for round_ in range(3):  # a few rounds: each one is a fresh race
        (lib / ".scratch.md").write_text(_scratch(100, round_), encoding="utf-8")
        # stdin from a file, so both processes start reading at once (no pipe hand-off order).
        with open(event_file, "rb") as in1, open(event_file, "rb") as in2:
            procs = [hooks.popen("stop", stdin) for stdin in (in1, in2)]
            for proc in procs:
                out, err = proc.communicate(timeout=60)
                assert proc.returncode == 0 and out == b"", err

        found = []
        for note in lib.rglob("*.md"):
            if note.name != ".scratch.md":
                found += re.findall(rf"- learning r{round_} n(\d{{3}})", note.read_text("utf-8"))
        assert sorted(found) == [f"{i:03d}" for i in range(100)]  # every one, exactly once
        assert "learning" not in (lib / ".scratch.md").read_text(encoding="utf-8")

    routed = [int(m) for line in hooks.log_lines() for m in re.findall(r"routed=(\d+)", line)]
    assert sum(routed) == 300

"""stop.py: recent auto-memory entries go to patterns/product/tech; user memories never do."""

import os
import re
import time

import pytest
from hookutil import make_library, stop_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


TOP_LEVEL = """---
name: Testing style
description: how this user wants tests written
type: feedback
originSessionId: 1b2c
---

Use real Postgres in tests, never mocks.
**Why:** mocks hid a migration bug.
"""

UNDER_METADATA = """---
name: launch-service-owner
description: who owns the launch service
metadata:
  type: project
---

The launch service is owned by the platform team; deploys on Tuesdays.
"""

REFERENCE = """---
name: grafana-board
description: where latency lives
metadata:
  type: reference
---

Latency dashboards: grafana.internal/d/launch
"""

USER = """---
name: user-role
description: the user
type: user
---

The user is a senior data scientist who prefers terse answers.
"""


def _memory_dir(home, cwd) -> str:
    slug = re.sub(r"[^A-Za-z0-9]", "-", str(cwd))
    path = home / ".claude" / "projects" / slug / "memory"
    path.mkdir(parents=True)
    return path


def test_auto_memory_is_synced_by_type_and_only_once(hooks, tmp_path):
    repo = tmp_path / "my.repo"
    lib = make_library(repo, {})
    mem = _memory_dir(hooks.home, repo)
    files = {
        "feedback_testing.md": TOP_LEVEL,
        "launch_owner.md": UNDER_METADATA,
        "grafana.md": REFERENCE,
        "user_role.md": USER,
        "MEMORY.md": "- [Testing style](feedback_testing.md) - tests",
        "old.md": TOP_LEVEL.replace("real Postgres", "OLD ENTRY"),
    }
    for name, text in files.items():
        (mem / name).write_text(text, encoding="utf-8")
    three_hours_ago = time.time() - 3 * 3600
    os.utime(mem / "old.md", (three_hours_ago, three_hours_ago))

    for _ in range(2):
        proc = hooks.run("stop", stop_event(str(repo)))
        assert proc.returncode == 0 and proc.stdout == b""

    patterns = (lib / "patterns.md").read_text(encoding="utf-8")
    assert patterns.count("Use real Postgres in tests, never mocks.") == 1
    assert "### Testing style" in patterns and "originSessionId" not in patterns
    assert "OLD ENTRY" not in patterns
    product = (lib / "product.md").read_text(encoding="utf-8")
    assert product.count("owned by the platform team") == 1
    assert "grafana.internal/d/launch" in (lib / "tech.md").read_text(encoding="utf-8")
    everything = "".join(p.read_text(encoding="utf-8") for p in lib.rglob("*.md"))
    assert "senior data scientist" not in everything
    assert "Testing style](feedback_testing.md)" not in everything
    assert "auto_memory=3" in hooks.log_lines()[0] and "auto_memory=0" in hooks.log_lines()[1]


def test_changed_memory_is_synced_again(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {})
    mem = _memory_dir(hooks.home, repo)
    (mem / "feedback_testing.md").write_text(TOP_LEVEL, encoding="utf-8")
    hooks.run("stop", stop_event(str(repo)))
    (mem / "feedback_testing.md").write_text(TOP_LEVEL + "Also: no sleeps.\n", encoding="utf-8")
    hooks.run("stop", stop_event(str(repo)))
    patterns = (lib / "patterns.md").read_text(encoding="utf-8")
    assert patterns.count("never mocks") == 2 and patterns.count("no sleeps") == 1


def test_memory_of_the_git_root_is_found_from_a_subfolder(hooks, tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    lib = make_library(repo, {})
    mem = _memory_dir(hooks.home, repo)
    (mem / "feedback_testing.md").write_text(TOP_LEVEL, encoding="utf-8")
    hooks.run("stop", stop_event(str(repo / "sub")))
    assert "never mocks" in (lib / "patterns.md").read_text(encoding="utf-8")

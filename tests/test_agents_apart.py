"""One folder per agent (docs/decisions/0038): no agent's folder imports another's, for every
agent core/capture/agents.py lists, so a seventh agent is held to it without a list to edit. A
copy of the packages in which Codex's folder imports Claude Code's is caught."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, edit, linked_packages

pytestmark = pytest.mark.process  # builds the import graph in a process of its own

CHECK = """
import itertools, json
import grimp
from librarian_dagster.core.capture.agents import AGENTS

# An agent's folder: the package under core/capture/ its reader's parse is in.
packages = {a: ".".join(r.reader.parse.__module__.split(".")[:4]) for a, r in AGENTS.items()}
graph = grimp.build_graph("librarian_dagster")
print(json.dumps(sorted(
    [a, b] for a, b in itertools.permutations(packages, 2)
    if graph.chain_exists(importer=packages[a], imported=packages[b], as_packages=True)
)))
"""


def _imports_between_agents(root: Path) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_no_agent_s_folder_imports_another_s():
    assert _imports_between_agents(REPO) == []


def test_an_agent_importing_another_is_caught(tmp_path):
    root = linked_packages(tmp_path)
    codex = root / "librarian_dagster" / "core" / "capture" / "codex" / "__init__.py"
    edit(codex, lambda text: text + "\nfrom librarian_dagster.core.capture import claude_code\n")
    assert _imports_between_agents(root) == [["codex", "claude-code"]]

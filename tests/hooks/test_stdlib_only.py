"""The hooks import the standard library only: startup time and the user's bare python3."""

import json
import subprocess
import sys

import pytest
from hookutil import HOOKS, make_library

from tests.helpers import free_port

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

# Imports all hook modules and runs every handle() on a real library inside a venv python that has
# dagster, psycopg, mcp and google-genai installed: any import of them would show in sys.modules.
# The prompt is long enough for recall to really ask (a closed port), so its imports count too.
PROBE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import librarian_hooklib, librarian_routing, pre_tool_use, stop, user_prompt_submit

repo = sys.argv[2]
base = {"session_id": "probe", "cwd": repo}
pre_tool_use.handle(dict(base, tool_name="Edit", tool_input={"file_path": repo + "/a/f.py"}))
env = dict(os.environ, LIBRARIAN_RECALL="on", LIBRARIAN_RECALL_URL=sys.argv[3])
_, outcome = user_prompt_submit.handle(dict(base, prompt="how did we fix the lock"), env)
assert "recall failed (ConnectionRefusedError)" in outcome, outcome
stop.handle(dict(base, stop_hook_active=False))
top = sorted({m.split(".")[0] for m in sys.modules})
package = sorted(m for m in sys.modules if m.split(".")[0] == "librarian_dagster")
print(json.dumps({"top": top, "package": package, "stdlib": sorted(sys.stdlib_module_names)}))
"""


def test_hooks_import_only_the_standard_library(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(repo, {"a/tech.md": "- t", ".scratch.md": "## [TAG: a, type: patterns]\n- p\n"})
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(HOOKS), str(repo), f"http://127.0.0.1:{free_port()}/r"],
        capture_output=True,
        env=hooks.env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.decode("utf-8").splitlines()[-1])
    top = set(report["top"])
    for heavy in ("dagster", "psycopg", "psycopg2", "mcp", "google", "pydantic", "numpy"):
        assert heavy not in top
    ours = {
        "librarian_agents",
        "librarian_hooklib",
        "librarian_routing",
        "librarian_inject",
        "librarian_recurring",
        "librarian_memory",
        "librarian_pycache",
        "pre_tool_use",
        "stop",
        "user_prompt_submit",
        "librarian_dagster",
    }
    # Of the package, only the stdlib-only module of library rules (its __init__s: docstrings).
    assert report["package"] == [
        "librarian_dagster",
        "librarian_dagster.core",
        "librarian_dagster.core.library",
        "librarian_dagster.core.library.paths",
    ]
    # site/sitecustomize machinery of this interpreter may load a few extras; they are not ours.
    outside = top - set(report["stdlib"]) - ours - {"__main__", "sitecustomize", "usercustomize"}
    assert not {m for m in outside if not m.startswith("_")} - {"certifi"}, outside
    # The probe really ran the Stop logic, not just the imports.
    assert (repo / "_memory_library" / "a" / "patterns.md").exists()


def test_a_prompt_not_asked_about_does_not_load_the_http_client(hooks, tmp_path):
    """Speed: http.client costs ~20 ms; only a prompt that is really asked about pays for it
    (an empty one is not; the server says which others are not looked up)."""
    probe = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); import user_prompt_submit; "
        "env = dict(os.environ, LIBRARIAN_RECALL='on'); "
        "user_prompt_submit.handle({'session_id': 's', 'prompt': ' '}, env); "
        "print(*[m in sys.modules for m in ('http.client', 'threading')])"
    )
    proc = subprocess.run(
        [sys.executable, "-E", "-S", "-c", probe, str(HOOKS)],
        capture_output=True,
        env=hooks.env,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.stdout.split() == [b"False"] * 2, proc.stderr


def test_pre_tool_use_stays_light(hooks, tmp_path):
    """Speed: neither the Stop hook's routing module nor hashlib on the hot path."""
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": "- t"})
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import pre_tool_use; "
        "out, _ = pre_tool_use.handle({'session_id': 's', 'tool_input': "
        "{'file_path': sys.argv[2] + '/f.py'}}); assert out, 'nothing injected'; "
        "print(*[m in sys.modules for m in ('librarian_routing', 'hashlib')])"
    )
    proc = subprocess.run(
        [sys.executable, "-E", "-S", "-c", probe, str(HOOKS), str(repo)],
        capture_output=True,
        env=hooks.env,
        timeout=60,
    )
    assert proc.stdout.split() == [b"False"] * 2, proc.stderr

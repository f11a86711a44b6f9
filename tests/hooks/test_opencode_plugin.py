"""Librarian's OpenCode plugin (plugins/opencode/librarian.js) on OpenCode's own runtime (the
Bun its binary is built with: `BUN_BE_BUN=1 opencode run script.mjs`), and on Node (which runs
Pi's extension, sharing plugins/shared/memory.js), its hooks called as OpenCode calls them,
against a stand-in recall server: it hands on the server's text as it is, and keeps the Python
hooks' contract: the deadlines, a server that hung left alone, the switches, the token, once
per file per session, and never an exception into OpenCode."""

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.local_server import LocalServer, QuietHandler, Reply

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "opencode" / "librarian.js"
INSTALLED = ROOT / ".tools" / "agents" / "opencode" / "node_modules" / ".bin" / "opencode"
HOOKS = ROOT / "hooks"

DRIVER = """
import { LibrarianPlugin } from "__PLUGIN__"

const steps = JSON.parse(process.env.STEPS)
const options = process.env.OPTIONS ? JSON.parse(process.env.OPTIONS) : undefined
const hooks = await LibrarianPlugin({ directory: process.env.DIRECTORY }, options)
const results = []
for (const step of steps) {
  const start = performance.now()
  let error = null
  Object.assign(process.env, step.env ?? {})
  try {
    await hooks[step.hook](step.input, step.output)
  } catch (e) {
    error = String(e)
  }
  results.push({ output: step.output, ms: performance.now() - start, error })
}
console.log(JSON.stringify(results))
"""

RECALLED_TEXT = (
    "Librarian remembers past sessions that may bear on this prompt (from memory):\n"
    "- alice's Codex session 019e0000-aaaa-7000-8000-0000000000aa (alpha, 2026-10-31)"
)
RECALLED = {"context": RECALLED_TEXT, "sessions": 1, "note": None}
HISTORY_TEXT = (
    "Librarian remembers earlier sessions that worked on cmd/main.go (from memory):\n"
    "- session 3c1d0000-0000-4000-8000-000000000001 (2026-09-01; read it)"
)
HISTORY = {"context": HISTORY_TEXT, "sessions": 1, "note": None}


class Recall(LocalServer):
    """A stand-in for the recall server's hook endpoints: each path answers its `answers`
    entry (a Reply), or hangs `hang` seconds first."""

    def __init__(self) -> None:
        self.answers: dict[str, Reply] = {}
        self.hang = 0.0
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(server.record(self) or b"{}")
                if server.hang:
                    time.sleep(server.hang)
                answer = server.answers.get(self.path, Reply(404, {"error": "no"}))
                if self.path == "/touches" and self.path not in server.answers:
                    paths = [body["tool_input"]["filePath"]]
                    answer = Reply(body={"action": "read", "paths": paths})
                with contextlib.suppress(OSError):  # the plugin gave up waiting (a hang)
                    self.send_reply(answer)

        super().__init__(Handler)

    def asked(self, path: str) -> list[dict[str, Any]]:
        return [r.json for r in self.requests if r.path == path]


@pytest.fixture(params=["bun", "node"])
def bun(request) -> list[str]:
    """How a script is run: by OpenCode's Bun, and by Node, which runs Pi (whose extension
    shares the plugin's plugins/shared/memory.js)."""
    if request.param == "node":
        node = shutil.which("node")
        if node is None:
            pytest.skip("no node on PATH")
        return [node]
    if not INSTALLED.exists():
        pytest.skip(f"the OpenCode CLI (its Bun runs the plugin) is absent ({INSTALLED})")
    return [str(INSTALLED), "run"]


@pytest.fixture
def server():
    with Recall() as recall:
        yield recall


def prompt(words: str, session: str = "ses_1") -> dict[str, Any]:
    """`chat.message` as OpenCode calls it: the message and its parts, before they are saved."""
    message = {"id": "msg_1", "sessionID": session, "role": "user"}
    part = {"id": "prt_fffffffffff0TYPEDTEXT00001", "sessionID": session, "messageID": "msg_1",
            "type": "text", "text": words}  # fmt: skip
    return {"hook": "chat.message", "input": {"sessionID": session},
            "output": {"message": message, "parts": [part]}}  # fmt: skip


def tool(name: str, file: str, session: str = "ses_1") -> dict[str, Any]:
    """`tool.execute.after` as OpenCode calls it: the call, and the result the model will read."""
    return {"hook": "tool.execute.after",
            "input": {"tool": name, "sessionID": session, "callID": "call_1",
                      "args": {"filePath": file}},
            "output": {"title": "", "output": "1: package main", "metadata": {}}}  # fmt: skip


def run(
    bun: list[str], tmp_path: Path, steps: list[dict[str, Any]], **env: str
) -> list[dict[str, Any]]:
    driver = tmp_path / "driver.mjs"
    driver.write_text(DRIVER.replace("__PLUGIN__", PLUGIN.as_uri()), encoding="utf-8")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    environment.update(BUN_BE_BUN="1", HOME=str(tmp_path), STEPS=json.dumps(steps),
                       DIRECTORY=str(tmp_path), LIBRARIAN_LOG=str(tmp_path / "librarian.log"),
                       **env)  # fmt: skip
    done = subprocess.run([*bun, str(driver)], env=environment, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    assert [r["error"] for r in results] == [None] * len(steps)
    return results


def added(result: dict[str, Any]) -> list[str]:
    """The synthetic parts a `chat.message` result gained."""
    return [p["text"] for p in result["output"]["parts"] if p.get("synthetic")]


def test_the_server_s_text_is_handed_on_as_it_is(bun, tmp_path, server):
    server.answers = {"/recall": Reply(body=RECALLED), "/history": Reply(body=HISTORY)}
    env = {"LIBRARIAN_RECALL_BUDGET": "700", "LIBRARIAN_HISTORY_BUDGET": "x"}
    steps = [
        {**prompt("how did we fix the verbose flag"), "env": env},
        tool("read", str(tmp_path / "cmd" / "main.go")),
    ]
    asked, read = run(bun, tmp_path, steps, LIBRARIAN_MCP_URL=server.url + "/mcp")
    assert added(asked) == [RECALLED_TEXT]
    assert read["output"]["output"] == f"1: package main\n\n{HISTORY_TEXT}"
    # The user's budget goes as it is; one that is not a number goes not at all.
    assert [b.get("budget") for b in server.asked("/recall") + server.asked("/history")] == [
        700, None,
    ]  # fmt: skip
    part = asked["output"]["parts"][-1]
    # After the typed text, whose id (OpenCode's counter) may be later than this millisecond.
    assert part["id"] > asked["output"]["parts"][0]["id"]
    assert part["id"].startswith("prt_fffffffffff1")
    assert (part["synthetic"], part["messageID"], part["type"]) == (True, "msg_1", "text")


def test_what_it_asks_the_server(bun, tmp_path, server):
    nothing = {"context": None, "sessions": 0, "note": "nothing relevant"}
    server.answers = {"/recall": Reply(body=nothing), "/history": Reply(body=HISTORY)}
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/fix/flags\n", encoding="utf-8")
    (tmp_path / ".git" / "config").write_text(
        '[remote "origin"]\n\turl = https://me:tok@github.com/acme/alpha.git\n', encoding="utf-8"
    )
    remote = "https://github.com/acme/alpha.git"  # the credential stays on the laptop
    file = str(tmp_path / "cmd" / "main.go")
    steps = [
        prompt("how did we fix the verbose flag"),
        tool("read", "cmd/main.go"),
        tool("edit", file),
        tool("bash", file),
        tool("read", file, session="ses_2"),
    ]
    said = run(bun, tmp_path, steps, LIBRARIAN_MCP_URL=server.url + "/mcp/",
               LIBRARIAN_MCP_TOKEN="s3cret")  # fmt: skip
    assert added(said[0]) == []  # nothing relevant: nothing added
    assert {r.headers["Authorization"] for r in server.requests} == {"Bearer s3cret"}
    assert server.asked("/recall") == [
        {"prompt": "how did we fix the verbose flag", "limit": 3, "deadline_ms": 800,
         "cwd": str(tmp_path), "git_branch": "fix/flags"}
    ]  # fmt: skip
    # Every file tool's call is read by the server's reader; bash is not a file tool.
    touches = server.asked("/touches")
    assert [(t["agent"], t["tool_name"], t["tool_input"]) for t in touches] == [
        ("opencode", "read", {"filePath": "cmd/main.go"}),
        ("opencode", "edit", {"filePath": file}),
        ("opencode", "read", {"filePath": file}),
    ]
    # Once per file in a session (the relative path is the same file); the task is the prompt.
    assert server.asked("/history") == [
        {"path": file, "limit": 3, "cwd": str(tmp_path), "root": str(tmp_path),
         "remote": remote, "task": "how did we fix the verbose flag", "session_id": "ses_1"},
        {"path": file, "limit": 3, "cwd": str(tmp_path), "root": str(tmp_path),
         "remote": remote, "session_id": "ses_2"},
    ]  # fmt: skip
    assert [s["output"]["output"] != "1: package main" for s in said[1:]] == [
        True, False, False, True,
    ]  # fmt: skip


def test_switches_and_prompts_not_asked_about(bun, tmp_path, server):
    server.answers = {"/recall": Reply(body=RECALLED), "/history": Reply(body=HISTORY)}
    url = server.url + "/mcp"
    file = str(tmp_path / "a.go")
    steps = [prompt(""), prompt(" \n "), tool("read", file)]
    run(bun, tmp_path, steps, LIBRARIAN_MCP_URL=url)
    assert server.asked("/recall") == []  # no prompt (the server says which others say too little)
    server.requests.clear()
    run(bun, tmp_path, [prompt("how did we fix the verbose flag"), tool("read", file)],
        LIBRARIAN_MCP_URL=url, LIBRARIAN_HISTORY="off")  # fmt: skip
    assert [r.path for r in server.requests] == ["/recall"]
    server.requests.clear()
    run(bun, tmp_path, [prompt("how did we fix the verbose flag"), tool("read", file)],
        LIBRARIAN_MCP_URL=url, LIBRARIAN_RECALL="off")  # fmt: skip
    assert server.requests == []


def test_a_server_that_is_down_or_wrong_adds_nothing_and_breaks_nothing(bun, tmp_path, server):
    from tests.helpers import free_port

    steps = [prompt("how did we fix the verbose flag"), tool("read", str(tmp_path / "a.go"))]
    for url, answers in [
        (f"http://127.0.0.1:{free_port()}/mcp", {}),
        (server.url + "/mcp", {"/recall": Reply(500, {}), "/touches": Reply(401, {})}),
        (server.url + "/mcp", {"/recall": Reply(raw="not json"), "/touches": Reply(body=[1])}),
        (server.url + "/mcp", {"/recall": Reply(body={"context": 5}),
                               "/touches": Reply(body={"action": "read", "paths": ["/a.go"]}),
                               "/history": Reply(body={"results": [{"session_id": 3}]})}),
        (server.url + "/mcp", {"/recall": Reply(body={"context": "x" * 10_001}),
                               "/touches": Reply(body={"action": "read", "paths": ["/b.go"]}),
                               "/history": Reply(body={"context": ["x"]})}),
        ("ftp://127.0.0.1/mcp", {}),
    ]:  # fmt: skip
        server.answers = answers
        said = run(bun, tmp_path, steps, LIBRARIAN_MCP_URL=url)
        assert added(said[0]) == []
        assert said[1]["output"]["output"] == "1: package main"
    log = (tmp_path / "librarian.log").read_text(encoding="utf-8")
    assert "recall failed (http 500)" in log and "touches failed (refused (401))" in log
    assert (
        "history none" in log and "recall not a context" in log and "history not a context" in log
    )


def test_a_server_that_hangs_is_abandoned_at_the_deadline_then_left_alone(bun, tmp_path, server):
    server.hang = 3.0
    server.answers = {"/recall": Reply(body=RECALLED)}
    file = str(tmp_path / "a.go")
    steps = [prompt("how did we fix the verbose flag"), tool("read", file),
             prompt("and what about the quiet flag then"), tool("read", file)]  # fmt: skip
    said = run(bun, tmp_path, steps, LIBRARIAN_MCP_URL=server.url + "/mcp",
               LIBRARIAN_RECALL_TIMEOUT_MS="400", LIBRARIAN_HISTORY_TIMEOUT_MS="200")  # fmt: skip
    assert [added(s) for s in said[::2]] == [[], []]
    assert [s["output"]["output"] for s in said[1::2]] == ["1: package main"] * 2
    # The ask ends at its deadline (with room for a loaded machine), and once it missed one the
    # server is not asked again for a while.
    assert said[0]["ms"] < 400 + 1500
    assert [r.path for r in server.requests] == ["/recall"]
    log = (tmp_path / "librarian.log").read_text(encoding="utf-8")
    assert "recall skipped (server hung lately)" in log
    assert "history skipped (server hung lately)" in log


def test_the_server_of_the_plugin_s_entry_is_asked_and_a_silent_one_costs_its_deadline(
    bun, tmp_path, server
):
    """`connect opencode --server URL` writes `[plugin, {"server": URL}]`: OpenCode's options,
    asked in place of LIBRARIAN_MCP_URL (here a port nobody listens on); a server there that
    hangs costs the prompt its deadline, and the prompt goes on as it was."""
    from tests.helpers import free_port

    server.answers = {"/recall": Reply(body=RECALLED)}
    steps = [prompt("how did we fix the verbose flag")]
    options = json.dumps({"server": server.url + "/mcp"})
    elsewhere = f"http://127.0.0.1:{free_port()}/mcp"
    said = run(bun, tmp_path, steps, OPTIONS=options, LIBRARIAN_MCP_URL=elsewhere)
    assert added(said[0]) and [r.path for r in server.requests] == ["/recall"]
    server.hang = 3.0
    said = run(bun, tmp_path, steps, OPTIONS=options, LIBRARIAN_MCP_URL=elsewhere,
               LIBRARIAN_RECALL_TIMEOUT_MS="400")  # fmt: skip
    assert added(said[0]) == [] and said[0]["ms"] < 400 + 1500
    assert "recall failed (timeout)" in (tmp_path / "librarian.log").read_text(encoding="utf-8")

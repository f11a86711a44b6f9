"""OpenCode's real CLI (npm `opencode-ai`, pinned) run offline against a stand-in OpenAI Chat
Completions API (tests/fake_openai_chat.py) with a trivial plugin: the text the plugin adds at
the prompt (`chat.message`, a synthetic text part) and after a file read or edit
(`tool.execute.after`, appended to the tool's output) reaches the model in a request, and the
session OpenCode stores (its SQLite database) is read by our reader.

How OpenCode is kept off the network (read from its bundled source, 1.18.33):
- the provider is `@ai-sdk/openai-compatible`, which OpenCode bundles: nothing is downloaded;
- OPENCODE_DISABLE_MODELS_FETCH: no fetch of models.dev;
- every config folder (~/.config/opencode, a project's .opencode) gets `@opencode-ai/plugin`
  installed from npm in the background, and plugins wait for it (70 s of npm retries offline).
  `Npm.install` skips a folder holding `node_modules/` whose package-lock.json's root already
  lists every dependency of its package.json: the test seeds that (`seed_config_dir`);
  `npm_config_offline` makes any install that would still happen fail at once.
"""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from tests.fake_openai_chat import FakeOpenAIChat, text, tool_call

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.18.33"
INSTALLED = ROOT / ".tools" / "agents" / "opencode" / "node_modules" / ".bin" / "opencode"
PROMPT_CONTEXT = "LIBRARIAN-PROMPT-CONTEXT: the cache lock is released in teardown"
TOOL_CONTEXT = "LIBRARIAN-FILE-CONTEXT"

PLUGIN = r"""
// Adds text the model sees: at the prompt (a synthetic text part of the user's message) and
// after a file read or edit (appended to the tool's output). Logs every call to PROBE_LOG.
import { appendFileSync } from "node:fs"


const LOG = process.env.PROBE_LOG
const log = (what, data) => LOG && appendFileSync(LOG, JSON.stringify({ what, data }) + "\n")
let counter = 0
// OpenCode's ascending id (its id.ts): prefix, 12 hex digits (the low 48 bits of ms * 0x1000 + a
// counter), 14 random base62 characters; parts are ordered by id: this one follows the typed text
// (past the last of `parts`, whose id OpenCode's own counter may have put later in the same ms).
const partId = (parts) => {
  let n = (BigInt(Date.now()) * 0x1000n + BigInt(counter++ % 0x1000)) & 0xffffffffffffn
  for (const part of parts) {
    const hex = String(part.id ?? "").slice(4, 16)
    if (/^[0-9a-f]{12}$/.test(hex) && BigInt("0x" + hex) >= n) n = BigInt("0x" + hex) + 1n
  }
  const abc = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
  let tail = ""
  for (let i = 0; i < 14; i++) tail += abc[Math.floor(Math.random() * abc.length)]
  return "prt_" + n.toString(16).padStart(12, "0") + tail
}

export const LibrarianProbe = async ({ directory, worktree }) => {
  log("init", { directory, worktree })
  return {
    "chat.message": async (input, output) => {
      log("chat.message", { input, output })
      output.parts.push({
        id: partId(output.parts),
        sessionID: output.message.sessionID,
        messageID: output.message.id,
        type: "text",
        synthetic: true,
        text: "__PROMPT_CONTEXT__",
      })
    },
    "tool.execute.before": async (input, output) => log("tool.execute.before", { input, output }),
    "tool.execute.after": async (input, output) => {
      log("tool.execute.after", { input, output })
      if (["read", "edit", "write"].includes(input.tool))
        output.output += "\n\n__TOOL_CONTEXT__ " + input.tool + " " + (input.args?.filePath ?? "")
    },
  }
}
"""


@pytest.fixture
def opencode() -> str:
    named = os.environ.get("LIBRARIAN_TEST_OPENCODE")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(
            f"the OpenCode CLI is absent ({cli}): npm install --prefix .tools/agents/opencode "
            f"opencode-ai@{VERSION}"
        )
    return str(cli)


def seed_config_dir(folder: Path) -> None:
    """What makes OpenCode take `@opencode-ai/plugin` as installed in a config folder."""
    (folder / "node_modules").mkdir(parents=True, exist_ok=True)
    deps = {"@opencode-ai/plugin": VERSION}
    (folder / "package.json").write_text(json.dumps({"dependencies": deps}))
    lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}
    (folder / "package-lock.json").write_text(json.dumps(lock))


def config(base_url: str) -> dict:
    model = {
        "name": "Stand-in model",
        "tool_call": True,
        "limit": {"context": 100000, "output": 4000},
    }
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Stand-in",
        "options": {"baseURL": f"{base_url}/v1", "apiKey": "sk-stand-in"},
        "models": {"stand-in-model": model},
    }
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": "standin/stand-in-model",
        "small_model": "standin/stand-in-model",
        "share": "disabled",
        "autoupdate": False,
        "provider": {"standin": provider},
    }


def opencode_env(home: Path, project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE", "XDG_"))}
    env.update(
        HOME=str(home),
        PWD=str(project),  # OpenCode takes its directory from PWD, not from its cwd
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        npm_config_offline="true",
    )
    return env


def run_opencode(
    cli: str, home: Path, project: Path, prompt: str, log: Path, env: dict[str, str] | None = None
):
    env = dict(env or opencode_env(home, project), PROBE_LOG=str(log))
    return subprocess.run(
        # One word an argument: `opencode run` quotes an argument holding a space.
        [cli, "run", *prompt.split()],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_plugins_text_reaches_the_model_at_the_prompt_and_after_a_read_and_an_edit(
    opencode, tmp_path
):
    home, project = tmp_path / "home", tmp_path / "project"
    config_dir = home / ".config" / "opencode"
    (config_dir / "plugin").mkdir(parents=True)
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    notes = project / "notes.txt"
    notes.write_text("the cache lock is held\n")
    seed_config_dir(config_dir)
    plugin = PLUGIN.replace("__PROMPT_CONTEXT__", PROMPT_CONTEXT)
    (config_dir / "plugin" / "librarian.js").write_text(
        plugin.replace("__TOOL_CONTEXT__", TOOL_CONTEXT)
    )
    log = tmp_path / "probe.jsonl"
    with FakeOpenAIChat() as fake:
        (config_dir / "opencode.json").write_text(json.dumps(config(fake.url)))
        fake.script += [
            tool_call("read", {"filePath": str(notes)}, "call_read"),
            tool_call(
                "edit",
                {"filePath": str(notes), "oldString": "is held", "newString": "is released"},
                "call_edit",
            ),
            text("Released the lock."),
        ]
        done = run_opencode(opencode, home, project, "Release the cache lock", log)
        turns = fake.agent_turns()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Released the lock." in done.stdout
    assert notes.read_text() == "the cache lock is released\n"

    assert len(turns) == 3
    first = turns[0]["messages"]
    user = [m for m in first if m["role"] == "user"][-1]
    said = [c["text"] for c in user["content"]] if isinstance(user["content"], list) else []
    assert said == ["Release the cache lock", PROMPT_CONTEXT]
    results = [[m for m in t["messages"] if m["role"] == "tool"] for t in turns]
    read_result, edit_result = results[1][-1], results[2][-1]
    assert read_result["tool_call_id"] == "call_read"
    assert "1: the cache lock is held" in read_result["content"]
    assert read_result["content"].endswith(f"{TOOL_CONTEXT} read {notes}")
    assert edit_result["tool_call_id"] == "call_edit"
    assert edit_result["content"].endswith(f"{TOOL_CONTEXT} edit {notes}")

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    before = [c["data"] for c in calls if c["what"] == "tool.execute.before"]
    assert [b["input"]["tool"] for b in before] == ["read", "edit"]
    assert before[1]["output"]["args"]["oldString"] == "is held"
    assert {"sessionID", "callID"} <= set(before[0]["input"])

    # OpenCode's database, as our reader reads it: the added text is `meta`, not the prompt.
    database = home / ".local" / "share" / "opencode" / "opencode.db"
    copy = tmp_path / "opencode.db"
    with sqlite3.connect(database) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    sessions = readers.session_files_for([copy])
    assert len(sessions) == 1
    session = readers.parse_session(sessions[0])
    assert session.skip_reason is None
    prompts = [t.text for t in session.turns if t.kind == "prompt"]
    assert prompts == ["Release the cache lock"]
    assert any(PROMPT_CONTEXT in t.text for t in session.turns if t.kind == "meta")
    assert session.stats.tool_uses == 2


def test_the_cli_is_the_pinned_version(opencode):
    out = subprocess.run([opencode, "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == VERSION


REMEMBERED = "019e0000-aaaa-7000-8000-0000000000aa"
EARLIER = (
    "Fixed the flag parser in cmd/main.go: a repeated --verbose flag now counts up instead of "
    "failing with 'flag redefined'."
)
PROMPT = "How did we fix the repeated verbose flag in the flag parser before?"
RECALL_HEADER = "Librarian remembers past sessions that may bear on this prompt"
HISTORY_HEADER = "Librarian remembers earlier sessions that worked on "


@pytest.fixture(scope="module")
def embedder():
    from librarian_dagster.core.models.minilm import local_embedder

    model = local_embedder()
    model.embed_query("warm up")  # the first query pays for loading the weights
    return model


def test_librarian_connect_hands_opencode_recall_and_file_history(
    opencode, tmp_path, store, embedder
):
    """`librarian connect opencode --server URL` into the user's own opencode.json: the real CLI
    loads Librarian's plugin, the server its option (this machine's, from LIBRARIAN_MCP_URL, is the
    other tests'), and its MCP server with the token's header; the model is told of an earlier
    session that bears on the prompt (with the prompt) and of the one that changed the file it reads
    (with the read's result); the session OpenCode stores keeps each text whole at the end of what
    it joined, so that Librarian can cut it off when it reads the session back. Undone, the user's
    file is the very bytes it was."""
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.store.memories import ChunkRecord
    from mcp_server.app import Served, build_server, http_app
    from tests.core.test_store import memory_record
    from tests.helpers import free_port, serve_http

    home, project = tmp_path / "home", tmp_path / "workspace"
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True)
    seed_config_dir(config_dir)
    (project / "cmd").mkdir(parents=True)
    main_go = project / "cmd" / "main.go"
    main_go.write_text("package main\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    memory = memory_record(REMEMBERED, project="workspace", embedding_model=embedder.model_name)
    memory = memory.model_copy(update={"cwd": "/elsewhere/workspace", "agent": "codex"})
    [vector] = embedder.embed_documents([EARLIER])
    store.memories.replace_memory(
        memory,
        [ChunkRecord("solution", 0, EARLIER, vector)],
        [FileTouch("/elsewhere/workspace/cmd/main.go", 2, 0)],
    )
    connect = [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "opencode"]
    app = http_app(build_server(Served.of(store, embedder)), "127.0.0.1")
    port = free_port()
    with FakeOpenAIChat() as fake, serve_http(app, port) as url:
        users = (json.dumps(config(fake.url), indent=2) + "\n").encode()
        (config_dir / "opencode.json").write_bytes(users)
        env = opencode_env(home, project)
        env.update(
            LIBRARIAN_HOME=str(tmp_path / "librarian"),
            LIBRARIAN_LOG=str(tmp_path / "librarian.log"),
            LIBRARIAN_RECALL_TIMEOUT_MS="5000",
            LIBRARIAN_HISTORY_TIMEOUT_MS="5000",
            LIBRARIAN_MCP_TOKEN="a-token-of-the-environment",
        )
        plugin = [(ROOT / "plugins" / "opencode" / "librarian.js").as_uri(),
                  {"server": url + "/mcp"}]  # fmt: skip
        mcp = {"type": "remote", "url": url + "/mcp",
               "headers": {"Authorization": "Bearer {env:LIBRARIAN_MCP_TOKEN}"}}  # fmt: skip
        done = subprocess.run([*connect, "--server", url], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        written = json.loads((config_dir / "opencode.json").read_text(encoding="utf-8"))
        assert written["plugin"] == [plugin]
        assert written["mcp"] == {"librarian": mcp}
        check = subprocess.run([*connect[:-1], "--check", "opencode"], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert check.returncode == 0, check.stdout
        fake.script += [
            tool_call("read", {"filePath": str(main_go)}, "call_read"),
            text("It is the entry point."),
        ]
        run = run_opencode(opencode, home, project, PROMPT, tmp_path / "unused.jsonl", env)
        turns = fake.agent_turns()
    log = (tmp_path / "librarian.log").read_text(encoding="utf-8")
    assert run.returncode == 0, (run.stderr[-3000:], log)
    assert "It is the entry point." in run.stdout
    assert len(turns) == 2, log
    # The MCP server is OpenCode's too: its tools are offered to the model.
    offered = [t["function"]["name"] for t in turns[0]["tools"]]
    assert any(name.startswith("librarian_") for name in offered), offered

    # Recall joins the prompt's message, after the typed text.
    user = [m for m in turns[0]["messages"] if m["role"] == "user"][-1]
    said = [c["text"] for c in user["content"]]
    assert said[0] == PROMPT and said[1].startswith(RECALL_HEADER), (said, log)
    assert f"Codex session {REMEMBERED}" in said[1] and "flag parser" in said[1]
    # The file's history ends the read's result.
    [result] = [m for m in turns[1]["messages"] if m["role"] == "tool"]
    assert result["tool_call_id"] == "call_read"
    content, _, added = result["content"].partition("\n\n" + HISTORY_HEADER)
    assert "1: package main" in content and content.endswith("</content>"), result["content"]
    assert added.startswith("cmd/main.go ") and REMEMBERED in added, (result["content"], log)
    assert "recall added 1 sessions" in log and "history added 1 sessions" in log

    # The session as OpenCode stored it: the typed prompt alone is the prompt.
    database = home / ".local" / "share" / "opencode" / "opencode.db"
    copy = tmp_path / "opencode.db"
    with sqlite3.connect(database) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    [files] = readers.session_files_for([copy])
    session = readers.parse_session(files)
    assert [t.text for t in session.turns if t.kind == "prompt"] == [PROMPT]
    # Read back, nothing Librarian added is remembered: the read's result is the file again.
    assert not [t for t in session.turns if "Librarian remembers" in t.text]
    results = [t.text for t in session.turns if t.kind == "tool_result"]
    assert results and "package main" in results[0], results

    # Undone, the user's file is the very bytes it was.
    undone = subprocess.run([*connect, "--undo"], env=env, capture_output=True, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert (config_dir / "opencode.json").read_bytes() == users

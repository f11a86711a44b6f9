"""Pi's real CLI (npm `@mariozechner/pi-coding-agent`, pinned) run offline (`pi -p`, PI_OFFLINE)
against a stand-in OpenAI Chat Completions API (a custom provider in ~/.pi/agent/models.json)
with a trivial extension (~/.pi/agent/extensions/): the text it adds at the prompt
(`before_agent_start` returning a custom message) and after a file read or edit (`tool_result`
returning more content) reaches the model in a request, and the session Pi writes
(~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl) is read by our reader.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from tests.fake_openai_chat import FakeOpenAIChat, text, tool_call

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.73.1"
INSTALLED = ROOT / ".tools" / "agents" / "pi" / "node_modules" / ".bin" / "pi"
PROMPT_CONTEXT = "LIBRARIAN-PROMPT-CONTEXT: the cache lock is released in teardown"

EXTENSION = r"""
// Adds text the model sees: at the prompt (a custom message, stored in the session and sent as
// a user message) and after a file read or edit (one more text block in the tool's result).
import { appendFileSync } from "node:fs"


const log = (what: string, data: unknown) =>
  appendFileSync(process.env.PROBE_LOG!, JSON.stringify({ what, data }) + "\n")

export default function (pi: any) {
  pi.on("before_agent_start", async (event: any) => {
    log("before_agent_start", { prompt: event.prompt })
    const content = process.env.PROBE_PROMPT_CONTEXT
    return { message: { customType: "librarian", content, display: false } }
  })
  pi.on("tool_call", async (event: any) => log("tool_call", event))
  pi.on("tool_result", async (event: any) => {
    log("tool_result", event)
    if (!["read", "edit", "write"].includes(event.toolName)) return
    const note = `LIBRARIAN-FILE-CONTEXT ${event.toolName} ${event.input.path}`
    return { content: [...event.content, { type: "text", text: note }] }
  })
}
"""


@pytest.fixture
def pi() -> str:
    named = os.environ.get("LIBRARIAN_TEST_PI")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(
            f"the Pi CLI is absent ({cli}): npm install --prefix .tools/agents/pi "
            f"@mariozechner/pi-coding-agent@{VERSION}"
        )
    return str(cli)


def models(base_url: str) -> dict:
    """A custom provider speaking Chat Completions; `system` (not `developer`) for its prompt."""
    provider = {
        "baseUrl": f"{base_url}/v1",
        "api": "openai-completions",
        "apiKey": "sk-stand-in",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [
            {
                "id": "stand-in-model",
                "name": "Stand-in model",
                "contextWindow": 100000,
                "maxTokens": 4000,
            }
        ],
    }
    return {"providers": {"standin": provider}}


def run_pi(cli: str, home: Path, project: Path, log: Path, prompt: str, **more: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
    env.update(
        HOME=str(home),
        PI_OFFLINE="1",
        PROBE_LOG=str(log),
        PROBE_PROMPT_CONTEXT=PROMPT_CONTEXT,
        **more,
    )
    command = [cli, "-p", "--model", "standin/stand-in-model", prompt]
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=120
    )


def test_an_extensions_text_reaches_the_model_at_the_prompt_and_after_a_read_and_an_edit(
    pi, tmp_path
):
    home, project = tmp_path / "home", tmp_path / "project"
    agent_dir = home / ".pi" / "agent"
    (agent_dir / "extensions").mkdir(parents=True)
    (agent_dir / "extensions" / "librarian.ts").write_text(EXTENSION)
    project.mkdir()
    notes = project / "notes.txt"
    notes.write_text("the cache lock is held\n")
    log = tmp_path / "probe.jsonl"
    with FakeOpenAIChat() as fake:
        (agent_dir / "models.json").write_text(json.dumps(models(fake.url)))
        fake.script += [
            tool_call("read", {"path": str(notes)}, "call_read"),
            tool_call(
                "edit",
                {"path": str(notes), "edits": [{"oldText": "is held", "newText": "is released"}]},
                "call_edit",
            ),
            text("Released the lock."),
        ]
        done = run_pi(pi, home, project, log, "Release the cache lock")
        turns = fake.agent_turns()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Released the lock."
    assert notes.read_text() == "the cache lock is released\n"
    assert len(turns) == 3

    users = [m["content"] for m in turns[0]["messages"] if m["role"] == "user"]
    assert users == [
        [{"type": "text", "text": "Release the cache lock"}],
        [{"type": "text", "text": PROMPT_CONTEXT}],
    ]
    read = next(m for m in turns[1]["messages"] if m.get("tool_call_id") == "call_read")
    assert read["content"].startswith("the cache lock is held")
    assert read["content"].endswith(f"LIBRARIAN-FILE-CONTEXT read {notes}")
    edit = next(m for m in turns[2]["messages"] if m.get("tool_call_id") == "call_edit")
    assert edit["content"].endswith(f"LIBRARIAN-FILE-CONTEXT edit {notes}")

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["what"] for c in calls] == [
        "before_agent_start",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
    ]
    edit_call = calls[3]["data"]
    assert (edit_call["toolName"], edit_call["toolCallId"]) == ("edit", "call_edit")
    assert edit_call["input"]["edits"] == [{"oldText": "is held", "newText": "is released"}]

    # The session Pi wrote, as our reader reads it: the added text is `meta`, not the prompt.
    (written,) = (agent_dir / "sessions").glob("*/*.jsonl")
    sessions = readers.session_files_for([written])
    assert [s.agent for s in sessions] == ["pi"]
    session = readers.parse_session(sessions[0])
    assert session.skip_reason is None and session.cwd == str(project)
    assert [t.text for t in session.turns if t.kind == "prompt"] == ["Release the cache lock"]
    assert [t.text for t in session.turns if t.kind == "meta"] == [PROMPT_CONTEXT]
    assert session.stats.tool_uses == 2


def test_the_cli_is_the_pinned_version(pi, tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "PI_OFFLINE": "1"}
    out = subprocess.run([pi, "--version"], capture_output=True, text=True, timeout=60, env=env)
    assert (out.stdout + out.stderr).strip() == VERSION  # Pi prints it on stderr


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


def test_librarian_connect_hands_pi_recall_and_file_history(pi, tmp_path, store, embedder):
    """`librarian connect pi --server URL` into the user's own settings.json: the real CLI loads
    Librarian's extension, the server Pi's settings' alone (this machine's, from LIBRARIAN_MCP_URL,
    is the other tests'); the model is told of an earlier session that bears on the prompt (a
    message after it) and of the one that changed the file it reads (the end of the read's result);
    the session Pi writes keeps each text whole at the end of what it joined, so that Librarian can
    cut it off when it reads the session back. Undone, the user's file is the very bytes it was."""
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.store.memories import ChunkRecord
    from mcp_server.app import Served, build_server, http_app
    from tests.core.test_store import memory_record
    from tests.helpers import free_port, serve_http

    home, project = tmp_path / "home", tmp_path / "workspace"
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
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
    mine = b'{\n  "defaultThinkingLevel": "off",\n  "quietStartup": true\n}\n'
    (agent_dir / "settings.json").write_bytes(mine)
    connect = [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "pi"]
    app = http_app(build_server(Served.of(store, embedder)), "127.0.0.1")
    with FakeOpenAIChat() as fake, serve_http(app, free_port()) as url:
        (agent_dir / "models.json").write_text(json.dumps(models(fake.url)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
        librarian = {
            "LIBRARIAN_HOME": str(tmp_path / "librarian"),
            "LIBRARIAN_LOG": str(tmp_path / "librarian.log"),
            "LIBRARIAN_RECALL_TIMEOUT_MS": "5000",
            "LIBRARIAN_HISTORY_TIMEOUT_MS": "5000",
        }
        env.update(HOME=str(home), **librarian)
        done = subprocess.run([*connect, "--server", url], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        written = json.loads((agent_dir / "settings.json").read_text(encoding="utf-8"))
        assert written["extensions"] == [str(ROOT / "plugins" / "pi" / "librarian.ts")]
        assert written["librarian"] == {"server": url + "/mcp"}
        check = subprocess.run([*connect[:-1], "--check", "pi"], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert check.returncode == 0, check.stdout
        fake.script += [
            tool_call("read", {"path": str(main_go)}, "call_read"),
            text("It is the entry point."),
        ]
        run = run_pi(pi, home, project, tmp_path / "unused.jsonl", PROMPT, **librarian)
        turns = fake.agent_turns()
    log = (tmp_path / "librarian.log").read_text(encoding="utf-8")
    assert run.returncode == 0, (run.stderr[-3000:], log)
    assert run.stdout.strip() == "It is the entry point."
    assert len(turns) == 2, log

    # Recall comes as a user message right after the prompt.
    users = [m["content"] for m in turns[0]["messages"] if m["role"] == "user"]
    assert users[0] == [{"type": "text", "text": PROMPT}]
    [recalled] = [c["text"] for c in users[1]]
    assert recalled.startswith(RECALL_HEADER), (users, log)
    assert f"Codex session {REMEMBERED}" in recalled and "flag parser" in recalled
    # The file's history ends the read's result.
    read = next(m for m in turns[1]["messages"] if m.get("tool_call_id") == "call_read")
    content, _, added = read["content"].partition("\n" + HISTORY_HEADER)
    assert content == "package main\n", read["content"]
    assert added.startswith("cmd/main.go ") and REMEMBERED in added, (read["content"], log)
    assert "recall added 1 sessions" in log and "history added 1 sessions" in log

    # The session as Pi wrote it, read back: the typed prompt alone is the prompt, and nothing
    # Librarian added is remembered (the read's result is the file again).
    (written_session,) = (agent_dir / "sessions").glob("*/*.jsonl")
    [files] = readers.session_files_for([written_session])
    session = readers.parse_session(files)
    assert [t.text for t in session.turns if t.kind == "prompt"] == [PROMPT]
    assert not [t for t in session.turns if "Librarian remembers" in t.text]
    results = [t.text for t in session.turns if t.kind == "tool_result"]
    assert results and results[0].strip() == "package main", results
    assert "Librarian remembers" in written_session.read_text(encoding="utf-8")  # Pi kept it

    # Undone, the user's file is the very bytes it was.
    undone = subprocess.run([*connect, "--undo"], env=env, capture_output=True, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert (agent_dir / "settings.json").read_bytes() == mine

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
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from tests.fake_openai_chat import FakeOpenAIChat, text, tool_call

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


def run_pi(cli: str, home: Path, project: Path, log: Path, prompt: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_")}
    env.update(
        HOME=str(home),
        PI_OFFLINE="1",
        PROBE_LOG=str(log),
        PROBE_PROMPT_CONTEXT=PROMPT_CONTEXT,
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

"""The real Gemini CLI (npm @google/gemini-cli, pinned below) run headless (`-p`) against a
stand-in Gemini API on 127.0.0.1 (tests/fake_gemini_chat.py), with command hooks: what each hook
is handed on stdin, and where the `additionalContext` it prints goes.

What the runs show (0.61.0):
* BeforeAgent's context is a part of the same request as the prompt it follows
  (`<hook_context>...</hook_context>`, a text part after the prompt's); SessionStart's is put
  before the prompt, in its text (headless only; interactive sessions get it as a first turn).
* AfterTool's context is appended to the tool's result (`functionResponse.response.output`),
  so it reaches the model in the next request.
* BeforeTool's `additionalContext` goes nowhere: the CLI reads only `decision`, `reason`,
  `continue` and `hookSpecificOutput.tool_input` from it.
* Hooks from ~/.gemini/settings.json, from the project's .gemini/settings.json and from an
  extension (~/.gemini/extensions/<name>/hooks/hooks.json) all run. Headless, the folder must be
  trusted or the CLI exits with code 55: GEMINI_CLI_TRUST_WORKSPACE=true does it; `--skip-trust`
  does too, but too late for the project's .gemini/settings.json, which is then not read.

Skipped, saying so, without the CLI (LIBRARIAN_TEST_GEMINI_CLI names another one).
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_gemini_chat import FakeGeminiChat, answer, read_file

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.61.0"
INSTALLED = ROOT / ".tools" / "agents" / "gemini" / "node_modules" / ".bin" / "gemini"
INSTALL = (
    f"npm install --prefix .tools/agents/gemini --no-audit --no-fund @google/gemini-cli@{VERSION}"
)
MODEL = "gemini-2.5-flash"

HOOK = """\
import json, sys

event = json.load(sys.stdin)
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write(json.dumps({"hook": sys.argv[2], "args": sys.argv[3:], "input": event}) + "\\n")
name = event["hook_event_name"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": name,
                                         "additionalContext": f"{sys.argv[2]} says {name}"}}))
"""


@pytest.fixture
def gemini() -> str:
    named = os.environ.get("LIBRARIAN_TEST_GEMINI_CLI")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(f"the Gemini CLI is absent ({cli}): `{INSTALL}` installs it")
    return str(cli)


class Setup:
    """A temp HOME with ~/.gemini/settings.json, a project folder, and the hook script."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.project = tmp_path / "webshop"
        self.log = tmp_path / "hooks.jsonl"
        self.script = tmp_path / "hook.py"
        (self.home / ".gemini").mkdir(parents=True)
        self.project.mkdir()
        self.script.write_text(HOOK, encoding="utf-8")
        self.settings: dict = {
            # With GOOGLE_GEMINI_BASE_URL set the CLI guesses the auth type "gateway", which its
            # headless check then refuses ("Invalid auth method selected.", exit 41).
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        }

    def command(self, name: str, *extra: str) -> str:
        words = [sys.executable, str(self.script), str(self.log), name, *extra]
        return " ".join(shlex.quote(w) for w in words)

    def hook(self, name: str, matcher: str | None = None) -> dict:
        entry: dict = {"hooks": [{"type": "command", "name": name, "command": self.command(name)}]}
        if matcher is not None:
            entry["matcher"] = matcher
        return entry

    def events(self) -> list[dict]:
        lines = self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []
        return [json.loads(line) for line in lines]

    @property
    def settings_json(self) -> Path:
        return self.home / ".gemini" / "settings.json"

    def write(self) -> None:
        self.settings_json.write_text(json.dumps(self.settings, indent=2))

    def env(self, **more: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GEMINI", "GOOGLE", "LIBRARIAN_"))
        }
        env["HOME"] = str(self.home)
        return {**env, **more}

    def run(
        self,
        cli: str,
        api: FakeGeminiChat,
        prompt: str,
        *flags: str,
        env: dict[str, str] | None = None,
        as_on_disk: bool = False,
    ) -> subprocess.CompletedProcess:
        """Runs the CLI headless in the project, trusting it by GEMINI_CLI_TRUST_WORKSPACE unless
        `flags` say otherwise, with `env` added to the environment. `settings` are written
        first, unless `as_on_disk`."""
        if not as_on_disk:
            self.write()
        env = self.env(GEMINI_API_KEY="stand-in-for-a-key", GOOGLE_GEMINI_BASE_URL=api.url,
                       **(env or {}))  # fmt: skip
        if "--skip-trust" not in flags:
            env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        done = subprocess.run(
            [cli, "-p", prompt, "-m", MODEL, "-o", "json", *flags],
            cwd=self.project, env=env, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:], self.events())
        return done


def test_the_prompt_hook_s_context_reaches_the_model_with_the_prompt_and_a_tool_hook_s_next(
    gemini, tmp_path
):
    s = Setup(tmp_path)
    (s.project / "notes.txt").write_text("the zanzibar cache needs a lock timeout\n")
    s.settings["hooks"] = {
        "SessionStart": [s.hook("session-start")],
        "BeforeAgent": [s.hook("prompt")],
        "BeforeTool": [s.hook("before-read", "read_file")],
        "AfterTool": [s.hook("after-read", "read_file"), s.hook("after-shell", "run_shell.*")],
        "AfterAgent": [s.hook("after-agent")],
        "SessionEnd": [s.hook("session-end")],
    }
    with FakeGeminiChat() as api:
        api.script = [read_file("notes.txt"), answer("It asks for a lock timeout.", pieces=2)]
        done = s.run(gemini, api, "what does notes.txt say?")
        turns = api.turns()
    out = json.loads(done.stdout)
    assert out["response"] == "It asks for a lock timeout."
    assert [r.path for r in api.requests] == [
        f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    ] * 2
    assert api.requests[0].headers["x-goog-api-key"] == "stand-in-for-a-key"

    # The prompt's request: SessionStart's context before the prompt, BeforeAgent's after it.
    first = api.texts(turns[0])
    assert first[-2:] == [
        "<hook_context>session-start says SessionStart</hook_context>\n\nwhat does notes.txt say?",
        "<hook_context>prompt says BeforeAgent</hook_context>",
    ]
    # The next request carries the tool's result, AfterTool's context appended to it.
    (result,) = api.function_responses(turns[1])
    assert result["name"] == "read_file"
    assert result["response"]["output"] == (
        "the zanzibar cache needs a lock timeout\n\n\n"
        "<hook_context>after-read says AfterTool</hook_context>"
    )
    assert not any("says BeforeTool" in json.dumps(t) for t in turns)

    events = s.events()
    assert [(e["hook"], e["input"]["hook_event_name"]) for e in events] == [
        ("session-start", "SessionStart"),
        ("prompt", "BeforeAgent"),
        ("before-read", "BeforeTool"),
        ("after-read", "AfterTool"),
        ("after-agent", "AfterAgent"),
        ("session-end", "SessionEnd"),
    ]
    by_event = {e["input"]["hook_event_name"]: e["input"] for e in events}
    common = {"session_id", "transcript_path", "cwd", "hook_event_name", "timestamp"}
    assert {name: set(i) - common for name, i in by_event.items()} == {
        "SessionStart": {"source"},
        "BeforeAgent": {"prompt"},
        "BeforeTool": {"tool_name", "tool_input"},
        "AfterTool": {"tool_name", "tool_input", "tool_response"},
        "AfterAgent": {"prompt", "prompt_response", "stop_hook_active"},
        "SessionEnd": {"reason"},
    }
    assert {i["session_id"] for i in by_event.values()} == {out["session_id"]}
    assert {i["cwd"] for i in by_event.values()} == {str(s.project)}
    assert by_event["SessionStart"]["source"] == "startup"
    assert by_event["BeforeAgent"]["prompt"] == (
        "<hook_context>session-start says SessionStart</hook_context>\n\nwhat does notes.txt say?"
    )
    assert by_event["BeforeTool"]["tool_name"] == "read_file"
    assert by_event["BeforeTool"]["tool_input"] == {"file_path": "notes.txt"}
    assert by_event["AfterTool"]["tool_response"] == {
        "llmContent": "the zanzibar cache needs a lock timeout\n",
        "returnDisplay": "",
    }
    # The answer came in two chunks ("It asks for a ", "lock timeout."): 0.61.0 hands
    # AfterAgent the whole answer, then again every chunk but the first, joined by spaces.
    # The chat file has the answer right (below); prompt_response is not to be relied on.
    assert by_event["AfterAgent"]["prompt_response"] == (
        "It asks for a lock timeout." + " " + "lock timeout."
    )
    assert by_event["SessionEnd"]["reason"] == "exit"

    # The chat the CLI wrote, where transcript_path says: JSONL, its header first.
    chat = Path(by_event["SessionEnd"]["transcript_path"])
    assert chat.parent == s.home / ".gemini" / "tmp" / "webshop" / "chats"
    assert chat.name.startswith("session-") and chat.suffix == ".jsonl"
    records = [json.loads(line) for line in chat.read_text(encoding="utf-8").splitlines()]
    assert records[0]["sessionId"] == out["session_id"] and records[0]["kind"] == "main"
    said = [r["content"] for r in records if r.get("type") == "gemini" and r.get("content")]
    assert said == ["It asks for a lock timeout."]


def test_hooks_from_the_project_s_settings_and_from_an_extension_run_too(gemini, tmp_path):
    s = Setup(tmp_path)
    extension = s.home / ".gemini" / "extensions" / "librarian"
    (extension / "hooks").mkdir(parents=True)
    (extension / "gemini-extension.json").write_text('{"name": "librarian", "version": "0.0.1"}')
    # ${extensionPath} is put in by the CLI when it reads the extension's hooks.json.
    command = s.command("extension", "${extensionPath}")
    hooks = {
        "BeforeAgent": [{"hooks": [{"type": "command", "name": "extension", "command": command}]}]
    }
    (extension / "hooks" / "hooks.json").write_text(json.dumps({"hooks": hooks}))
    (s.project / ".gemini").mkdir()
    project_settings = {"hooks": {"BeforeAgent": [s.hook("project")]}}
    (s.project / ".gemini" / "settings.json").write_text(json.dumps(project_settings))
    s.settings["hooks"] = {"BeforeAgent": [s.hook("user")]}
    with FakeGeminiChat() as api:
        done = s.run(gemini, api, "hello")
        (turn,) = api.turns()
    assert json.loads(done.stdout)["response"] == "OK"
    (context,) = [t for t in api.texts(turn) if t.startswith("<hook_context>")]
    # Several hooks' contexts are joined by newlines into one part.
    assert sorted(context.removeprefix("<hook_context>").removesuffix("</hook_context>")
                  .split("\n")) == [
        "extension says BeforeAgent", "project says BeforeAgent", "user says BeforeAgent"
    ]  # fmt: skip
    ran = {e["hook"]: e["args"] for e in s.events()}
    assert ran == {"user": [], "project": [], "extension": [str(extension)]}
    # The project's hooks are remembered as seen (a warning the first time, on stderr).
    assert "project-level hooks have been detected" in done.stderr
    trusted = json.loads((s.home / ".gemini" / "trusted_hooks.json").read_text())
    assert trusted == {str(s.project): [f"project:{s.command('project')}"]}


def test_with_skip_trust_the_project_s_settings_are_not_read(gemini, tmp_path):
    """`--skip-trust` trusts the folder too late for its .gemini/settings.json: the run goes on,
    the user's hooks run, the project's do not (GEMINI_CLI_TRUST_WORKSPACE=true reads them)."""
    s = Setup(tmp_path)
    (s.project / ".gemini").mkdir()
    project_settings = {"hooks": {"BeforeAgent": [s.hook("project")]}}
    (s.project / ".gemini" / "settings.json").write_text(json.dumps(project_settings))
    s.settings["hooks"] = {"BeforeAgent": [s.hook("user")]}
    with FakeGeminiChat() as api:
        s.run(gemini, api, "hello", "--skip-trust")
    assert [e["hook"] for e in s.events()] == ["user"]


REMEMBERED = "5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10"
EARLIER = (
    "Fixed the cart total in cart.py: total() now applies the discount it is given, where it "
    "returned the raw sum and ignored the discount."
)
CART = "def total(items, discount=0.0):\n    return sum(price * qty for price, qty in items)\n"


@pytest.fixture(scope="module")
def embedder():
    from librarian_dagster.core.models.minilm import local_embedder

    model = local_embedder()
    model.embed_query("warm up")  # the first query pays for loading the weights
    return model


def test_librarian_connect_hands_gemini_recall_and_file_history(gemini, tmp_path, store, embedder):
    """`librarian connect gemini --server URL` into the user's own ~/.gemini/settings.json (the auth
    and privacy settings the CLI needs, and a hook of theirs): the real CLI then runs Librarian's
    hooks and talks to its MCP server; the model is told of an earlier session for a prompt about
    earlier work, in the prompt's request, and of the session that changed the file it reads, with
    the file. Undone, the user's settings are the very bytes they were."""
    from librarian_dagster.core.capture.gemini import READER
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.store.memories import ChunkRecord
    from mcp_server.app import Served, build_server, http_app
    from tests.core.test_store import memory_record
    from tests.helpers import free_port, serve_http

    s = Setup(tmp_path)
    (s.project / "cart.py").write_text(CART, encoding="utf-8")
    memory = memory_record(REMEMBERED, project="webshop", embedding_model=embedder.model_name)
    memory = memory.model_copy(update={"cwd": "/elsewhere/webshop", "agent": "claude-code"})
    [vector] = embedder.embed_documents([EARLIER])
    store.memories.replace_memory(
        memory,
        [ChunkRecord("solution", 0, EARLIER, vector)],
        [FileTouch("/elsewhere/webshop/cart.py", 2, 0)],
    )
    # The user's own settings: what the CLI needs offline, and a SessionStart hook of theirs,
    # whose context the CLI puts before the prompt's text (headless).
    s.settings["hooks"] = {"SessionStart": [s.hook("users-own")]}
    s.write()
    users_settings = s.settings_json.read_bytes()
    log = tmp_path / "librarian.log"
    port = free_port()
    # The server is the configuration's alone (this machine's, from LIBRARIAN_MCP_URL, is the
    # other tests'), and the token the environment's.
    env = s.env(LIBRARIAN_HOME=str(tmp_path / "librarian"),
                LIBRARIAN_MCP_TOKEN="a-token-of-the-environment",
                LIBRARIAN_RECALL_TIMEOUT_MS="5000", LIBRARIAN_HISTORY_TIMEOUT_MS="5000",
                LIBRARIAN_LOG=str(log))  # fmt: skip
    connect = [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "gemini"]
    mcp = {"httpUrl": f"http://127.0.0.1:{port}/mcp",
           "headers": {"Authorization": "Bearer $LIBRARIAN_MCP_TOKEN"}}  # fmt: skip
    done = subprocess.run([*connect, "--server", f"http://127.0.0.1:{port}"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    check = subprocess.run([*connect[:-1], "--check", "gemini"], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    # Not served yet: `--check` asks the server it names, and says it does not answer.
    assert check.returncode == 1 and "does not answer" in check.stdout, check.stdout
    connected = json.loads(s.settings_json.read_text())
    assert connected["mcpServers"] == {"librarian": mcp}
    assert "a-token-of-the-environment" not in s.settings_json.read_text()
    assert connected["security"] == s.settings["security"]

    prompt = "How did we fix the cart total that ignored the discount before?"
    app = http_app(build_server(Served.of(store, embedder)), "127.0.0.1")
    asked: list[str] = []

    async def served(scope, receive, send) -> None:
        if scope["type"] == "http":
            asked.append(f"{scope['method']} {scope['path']}")
        await app(scope, receive, send)

    with serve_http(served, port), FakeGeminiChat() as api:
        api.script = [read_file("cart.py"), answer("It applies the discount now.")]
        run = s.run(gemini, api, prompt, env=env, as_on_disk=True)
        turns = api.turns()
    said = log.read_text(encoding="utf-8") if log.exists() else ""
    assert json.loads(run.stdout)["response"] == "It applies the discount now.", said
    first, second = turns
    # The CLI connected to the MCP server connect named; the hooks asked beside it.
    assert "POST /mcp" in asked
    assert [a for a in asked if not a.endswith(" /mcp")] == [
        "POST /recall", "POST /touches", "POST /history"
    ]  # fmt: skip
    # The recall is a part after the prompt in the prompt's own request.
    texts = api.texts(first)
    at = texts.index(f"<hook_context>users-own says SessionStart</hook_context>\n\n{prompt}")
    recalled = texts[at + 1]
    assert recalled.startswith("<hook_context>Librarian remembers past sessions"), (texts, said)
    assert REMEMBERED in recalled and "Fixed the cart total" in recalled
    # The file history comes with the file, in the next request.
    (result,) = api.function_responses(second)
    output = result["response"]["output"]
    assert output.startswith(CART), output
    history = output[len(CART) :]
    assert history.lstrip().startswith("<hook_context>Librarian remembers earlier sessions that"
                                       " worked on cart.py"), (output, said)  # fmt: skip
    assert REMEMBERED in history and "changed it (2 edits)" in history
    assert "history added 1 sessions" in said

    # The chat the CLI wrote: the prompt is the words typed, Librarian's contexts meta turns.
    (chat,) = (s.home / ".gemini" / "tmp" / "webshop" / "chats").glob("session-*.jsonl")
    (files,) = READER.files_for([chat])
    session = READER.parse(files)
    assert [t.text for t in session.turns if t.kind == "prompt"] == [prompt]
    meta = [t.text for t in session.turns if t.kind == "meta"]
    assert sum(REMEMBERED in text for text in meta) == 2
    assert not [t for t in session.turns if t.kind != "meta" and REMEMBERED in t.text]

    # Undone, the user's settings are the very bytes they were.
    undone = subprocess.run([*connect, "--undo"], env=env, capture_output=True, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert s.settings_json.read_bytes() == users_settings

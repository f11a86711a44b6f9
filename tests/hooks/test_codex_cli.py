"""The real Codex CLI (npm @openai/codex, pinned) with hooks, offline: `codex exec` against a
stand-in Responses API (tests/fake_openai.py) in a temporary CODEX_HOME. What each hook is given
on stdin, where its `additionalContext` reaches the model, and how Codex decides that a hook is
trusted (it runs no hook it does not trust, and says nothing of it).

The hook here is trivial on purpose: it logs the event it got and answers a fixed context.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from librarian_dagster.core.capture.codex import READER
from librarian_dagster.core.capture.codex.connector import label, trusted_hash
from tests.fake_openai import FakeOpenAI, apply_patch, say, shell, texts, tool_outputs

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

CODEX_VERSION = "0.171.0"
ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".tools" / "agents" / "codex" / "node_modules" / ".bin" / "codex"
MODEL = "gpt-5.5"
"""A model in the CLI's own catalog, so it offers the tools it offers OpenAI's: the shell
(`exec_command`) and the freeform `apply_patch`. An unknown name gets fallback metadata, and no
apply_patch."""

PROMPT = "Read notes.txt, then change beta to gamma."
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n alpha\n-beta\n+gamma\n*** End Patch\n"
HOOK = """\
import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write(json.dumps(event) + "\\n")
name = event["hook_event_name"]
if name != "Stop":  # Stop's output has no hookSpecificOutput: Codex would call the run failed
    context = f"test-context {name} {event.get('tool_use_id', '')}".strip()
    print(json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}))
"""
CLIENT = {"name": "librarian-tests", "version": "0"}
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")

_LABELS = {event: label(event) for event in (
    "PreToolUse", "PermissionRequest", "PostToolUse", "PreCompact", "PostCompact", "SessionStart",
    "SessionEnd", "UserPromptSubmit", "SubagentStart", "SubagentStop", "Stop", "PreModelRequest",
    "Interrupt",
)}  # fmt: skip

"""Every event Codex takes, by the name Codex gives it in a trust key and in the hashed identity
(hook_event_key_label): the product's `label`, which the hash tests hold to Codex's own."""


def trust_entries(hooks_json: Path) -> dict[str, str]:
    """Every hook of a hooks.json, by the key Codex looks its trust up with:
    `<hooks.json, path resolved>:<event label>:<group index>:<handler index>`."""
    hooks = json.loads(hooks_json.read_text(encoding="utf-8"))["hooks"]
    entries = {}
    for event, groups in hooks.items():
        for g, group in enumerate(groups):
            for h, handler in enumerate(group["hooks"]):
                key = f"{os.path.realpath(hooks_json)}:{_LABELS[event]}:{g}:{h}"
                entries[key] = trusted_hash(event, group.get("matcher"), handler)
    return entries


@pytest.fixture
def codex() -> str:
    named = os.environ.get("LIBRARIAN_TEST_CODEX")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(
            f"the Codex CLI is absent ({cli}): npm install --prefix .tools/agents/codex"
            f" --no-audit --no-fund @openai/codex@{CODEX_VERSION}"
        )
    return str(cli)


class Home:
    """A temporary CODEX_HOME (and HOME) with a provider pointing at the stand-in, a hooks.json
    and, unless told otherwise, the trust Codex keeps for each of its hooks."""

    def __init__(self, tmp_path: Path, fake: FakeOpenAI) -> None:
        self.home = tmp_path / "home"
        self.codex_home = tmp_path / "codex"
        self.workspace = tmp_path / "workspace"
        self.log = tmp_path / "hook-events.jsonl"
        self.hook = tmp_path / "hook.py"
        for folder in (self.home, self.codex_home, self.workspace):
            folder.mkdir()
        self.hook.write_text(HOOK, encoding="utf-8")
        self.fake = fake
        self.hooks_json = self.codex_home / "hooks.json"

    def command(self) -> str:
        return f"{sys.executable} {self.hook} {self.log}"

    def write(self, hooks: dict[str, list[dict[str, Any]]], trust: dict[str, str]) -> None:
        self.hooks_json.write_text(json.dumps({"hooks": hooks}, indent=2), encoding="utf-8")
        lines = [
            f'model = "{MODEL}"',
            'model_provider = "stand-in"',
            'approval_policy = "never"',
            'sandbox_mode = "danger-full-access"',
            "check_for_update_on_startup = false",
            "",
            "[model_providers.stand-in]",
            'name = "OpenAI stand-in"',
            f'base_url = "{self.fake.url}/v1"',
            'wire_api = "responses"',
            'env_key = "STAND_IN_OPENAI_KEY"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
            "[analytics]",
            "enabled = false",
        ]
        for key, digest in trust.items():
            lines += ["", f"[hooks.state.{json.dumps(key)}]", f'trusted_hash = "{digest}"']
        (self.codex_home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_"))}
        env.update(
            HOME=str(self.home),
            CODEX_HOME=str(self.codex_home),
            STAND_IN_OPENAI_KEY="sk-stand-in-for-a-real-key",
        )
        return env

    def exec(self, codex: str, prompt: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [codex, "exec", "--skip-git-repo-check", prompt],
            cwd=self.workspace,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def listed_hooks(self, codex: str) -> list[dict[str, Any]]:
        """The hooks Codex finds for the workspace, as its app server lists them (`hooks/list`:
        key, currentHash, trustStatus, ...)."""
        server = subprocess.Popen(
            [codex, "app-server"],
            cwd=self.workspace,
            env=self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert server.stdin is not None and server.stdout is not None
        messages = [
            {"id": 1, "method": "initialize", "params": {"clientInfo": CLIENT}},
            {"method": "initialized"},
            {"id": 2, "method": "hooks/list", "params": {"cwds": [str(self.workspace)]}},
        ]
        try:
            server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
            server.stdin.flush()
            for line in server.stdout:
                message = json.loads(line)
                if message.get("id") == 2:
                    (listed,) = message["result"]["data"]
                    return listed["hooks"]
            raise AssertionError("the app server ended without answering hooks/list")
        finally:
            server.stdin.close()
            server.wait(timeout=30)


@pytest.fixture
def setup(tmp_path):
    with FakeOpenAI() as fake:
        yield Home(tmp_path, fake)


def _all_events(setup: Home) -> dict[str, list[dict[str, Any]]]:
    hook = {"type": "command", "command": setup.command(), "timeout": 30}
    tools = {"matcher": "Bash|apply_patch", "hooks": [hook]}
    return {
        event: [tools] if event in ("PreToolUse", "PostToolUse") else [{"hooks": [hook]}]
        for event in EVENTS
    }


def test_our_trust_hash_is_the_one_codex_computes(codex, setup):
    hook = {"type": "command", "command": setup.command()}
    hooks = {
        "SessionStart": [{"matcher": "startup|resume", "hooks": [hook]}],
        # A matcher on UserPromptSubmit is ignored, and left out of the hash.
        "UserPromptSubmit": [{"matcher": "ignored", "hooks": [{**hook, "timeout": 5}]}],
        "PreToolUse": [
            {"matcher": "^Bash$", "hooks": [hook, {**hook, "statusMessage": "checking"}]},
            {"hooks": [{**hook, "timeout": 0, "additionalContextLimit": 0}]},
        ],
        "Stop": [{"hooks": [hook]}],
    }
    setup.hooks_json.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    ours = trust_entries(setup.hooks_json)
    setup.write(hooks, ours)
    listed = {h["key"]: h for h in setup.listed_hooks(codex)}
    assert {key: h["currentHash"] for key, h in listed.items()} == ours
    assert {h["trustStatus"] for h in listed.values()} == {"trusted"}


def test_codex_runs_no_hook_it_does_not_trust_and_says_nothing(codex, setup):
    hooks = _all_events(setup)
    setup.hooks_json.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    trusted = trust_entries(setup.hooks_json)
    # The prompt hook trusted as it was, then changed; the others never trusted.
    (prompt_key,) = [key for key in trusted if ":user_prompt_submit:" in key]
    hooks["UserPromptSubmit"][0]["hooks"][0]["timeout"] = 31
    setup.write(hooks, {prompt_key: trusted[prompt_key]})
    status = {h["key"].split(":")[-3]: h["trustStatus"] for h in setup.listed_hooks(codex)}
    assert status["user_prompt_submit"] == "modified"
    assert {status[_LABELS[e]] for e in EVENTS if e != "UserPromptSubmit"} == {"untrusted"}

    setup.fake.queue(say("Nothing to do."))
    run = setup.exec(codex, PROMPT)
    assert run.returncode == 0, run.stderr
    assert setup.events() == []
    said = run.stderr.replace(str(setup.home.parent), "<tmp>").lower()
    assert "hook" not in said and "trust" not in said
    (request,) = setup.fake.bodies()
    assert not [t for t in texts(request, "developer") if "test-context" in t]


def test_hooks_see_the_prompt_and_the_tools_and_the_model_sees_their_context(codex, setup):
    (setup.workspace / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    hooks = _all_events(setup)
    setup.hooks_json.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    setup.write(hooks, trust_entries(setup.hooks_json))
    setup.fake.queue(shell("cat notes.txt"), apply_patch(PATCH), say("Changed beta to gamma."))

    run = setup.exec(codex, PROMPT)

    assert run.returncode == 0, run.stderr
    assert setup.fake.failures == []
    assert (setup.workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\ngamma\n"
    events = setup.events()
    names = [(e["hook_event_name"], e.get("tool_name")) for e in events]
    assert names == [
        ("SessionStart", None),
        ("UserPromptSubmit", None),
        ("PreToolUse", "Bash"),
        ("PostToolUse", "Bash"),
        ("PreToolUse", "apply_patch"),
        ("PostToolUse", "apply_patch"),
        ("Stop", None),
    ]
    start, prompt, read, read_done, patch, patch_done, stop = events
    # What every hook is given.
    assert {e["session_id"] for e in events} == {start["session_id"]}
    assert {e["cwd"] for e in events} == {str(setup.workspace)}
    assert {e["model"] for e in events} == {MODEL}
    assert {e["transcript_path"] for e in events} == {start["transcript_path"]}
    rollout = Path(start["transcript_path"])
    assert rollout.parent.parent.parent.parent == setup.codex_home / "sessions"
    assert rollout.name.startswith("rollout-") and rollout.name.endswith(
        f"-{start['session_id']}.jsonl"
    )
    assert start["source"] == "startup"
    assert prompt["prompt"] == PROMPT
    assert len({e["turn_id"] for e in events[1:]}) == 1
    # The shell tool (`exec_command`, argument `cmd`) is "Bash" with `command`; apply_patch
    # gives the whole patch as `command`.
    assert read["tool_input"] == {"command": "cat notes.txt"}
    assert patch["tool_input"] == {"command": PATCH}
    assert read_done["tool_response"] == "alpha\nbeta\n"
    assert "Success. Updated the following files" in patch_done["tool_response"]
    assert stop["last_assistant_message"] == "Changed beta to gamma."

    # Each context reaches the model as a developer message: the prompt's (after the prompt)
    # in the same request, a tool's in the next request, beside the call's output.
    first, second, third = setup.fake.bodies()
    assert _contexts(first) == ["SessionStart", "UserPromptSubmit"]
    assert _after(first, PROMPT) == ["test-context UserPromptSubmit"]
    read_id, patch_id = read["tool_use_id"], patch["tool_use_id"]
    assert _contexts(second) == [
        "SessionStart",
        "UserPromptSubmit",
        f"PreToolUse {read_id}",
        f"PostToolUse {read_id}",
    ]
    assert "beta" in tool_outputs(second)[read_id]
    assert _contexts(third)[-2:] == [f"PreToolUse {patch_id}", f"PostToolUse {patch_id}"]

    # The contexts are in the rollout as developer messages, which the reader leaves out:
    # the one prompt is the one the user typed.
    (files,) = READER.files_for([rollout])
    session = READER.parse(files)
    assert [t.text for t in session.turns if t.kind == "prompt"] == [PROMPT]
    assert "test-context" not in json.dumps([t.text for t in session.turns])
    changed = [u.file_paths for t in session.turns for u in t.tool_uses if u.action == "change"]
    assert changed == [("notes.txt",)]


def _contexts(request: dict[str, Any]) -> list[str]:
    prefix = "test-context "
    return [t[len(prefix) :] for t in texts(request, "developer") if t.startswith(prefix)]


def _after(request: dict[str, Any], prompt: str) -> list[str]:
    """The developer messages between the user's prompt and the next non-developer item."""
    items = request["input"]
    start = next(i for i, it in enumerate(items) if texts({"input": [it]}, "user") == [prompt])
    found = []
    for item in items[start + 1 :]:
        if item.get("type") != "message" or item.get("role") != "developer":
            break
        found += texts({"input": [item]})
    return found


REMEMBERED = "019e0000-aaaa-7000-8000-0000000000aa"
EARLIER = (
    "Fixed the flag parser in cmd/main.go: a repeated --verbose flag now counts up instead of "
    "failing with 'flag redefined'."
)


@pytest.fixture(scope="module")
def embedder():
    from librarian_dagster.core.models.minilm import local_embedder

    model = local_embedder()
    model.embed_query("warm up")  # the first query pays for loading the weights
    return model


def test_librarian_connect_hands_codex_recall_and_file_history(codex, setup, store, embedder):
    """`librarian connect codex --server URL` into a Codex home that has the user's own
    config.toml: the real CLI then runs Librarian's hooks, trusted, and the model is told of an
    earlier session that changed the file it reads, and recalls it for a prompt about earlier
    work. The server is the configuration's alone: no LIBRARIAN_MCP_URL in the environment (the
    hooks' own tests ask the one it names; tests/core/test_connect.py writes this machine's)."""
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.store.memories import ChunkRecord
    from mcp_server.app import Served, build_server, http_app
    from tests.core.test_store import memory_record
    from tests.helpers import free_port, serve_http

    (setup.workspace / "cmd").mkdir()
    (setup.workspace / "cmd" / "main.go").write_text("package main\n", encoding="utf-8")
    memory = memory_record(REMEMBERED, project="workspace", embedding_model=embedder.model_name)
    memory = memory.model_copy(update={"cwd": "/elsewhere/workspace", "agent": "claude-code"})
    [vector] = embedder.embed_documents([EARLIER])
    store.memories.replace_memory(
        memory,
        [ChunkRecord("solution", 0, EARLIER, vector)],
        [FileTouch("/elsewhere/workspace/cmd/main.go", 2, 0)],
    )
    setup.write({}, {})  # the user's config.toml: the model provider; no hooks yet
    users_config = (setup.codex_home / "config.toml").read_bytes()
    users_hooks = setup.hooks_json.read_bytes()
    env = setup.env()
    connect = [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "codex"]
    app = http_app(build_server(Served.of(store, embedder)), "127.0.0.1")
    with serve_http(app, free_port()) as url:
        env.update(LIBRARIAN_HOME=str(setup.home / "librarian"), LIBRARIAN_MCP_URL=url + "/mcp",
                   LIBRARIAN_RECALL_TIMEOUT_MS="5000", LIBRARIAN_HISTORY_TIMEOUT_MS="5000",
                   LIBRARIAN_LOG=str(setup.log.with_suffix(".log")))  # fmt: skip
        del env["LIBRARIAN_MCP_URL"]
        done = subprocess.run([*connect, "--server", url], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        check = subprocess.run([*connect[:-1], "--check", "codex"], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert check.returncode == 0, check.stdout
        assert f"via {url}/mcp" in check.stdout, check.stdout
        setup.fake.queue(shell("cat cmd/main.go"), say("It is the entry point."))
        prompt = "How did we fix the repeated verbose flag in the flag parser before?"
        run = subprocess.run(
            [codex, "exec", "--skip-git-repo-check", prompt], cwd=setup.workspace, env=env,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    log = setup.log.with_suffix(".log").read_text(encoding="utf-8")
    assert run.returncode == 0, (run.stderr[-2000:], log)
    first, second, *_ = setup.fake.bodies()
    recalled = [t for t in texts(first, "developer") if REMEMBERED in t]
    assert recalled and "flag parser" in recalled[0], (texts(first, "developer"), log)
    history = [t for t in texts(second, "developer") if "cmd/main.go" in t and REMEMBERED in t]
    assert history, (texts(second, "developer"), log)
    assert "history added 1 sessions" in log
    # Undone, the user's files are the very bytes they were.
    undone = subprocess.run([*connect, "--undo"], env=env, capture_output=True, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert (setup.codex_home / "config.toml").read_bytes() == users_config
    assert setup.hooks_json.read_bytes() == users_hooks

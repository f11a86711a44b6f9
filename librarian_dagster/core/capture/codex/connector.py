"""Codex: hooks in `hooks.json` and the MCP server in `config.toml`, both in $CODEX_HOME
(`~/.codex`), or a repository's `.codex/hooks.json`.

Codex runs a hook only when it is trusted, and skips one that is not without a word: trust is a
hash of the hook's definition, kept in the user's config.toml under `[hooks.state."KEY"]` as
`trusted_hash`, the key naming the hooks.json, the event and the hook's place in it. Connecting
writes that trust for Librarian's own hooks (the hash as Codex computes it: codex-rs/hooks
`command_hook_hash`, held equal to its app server's `hooks/list` by tests/hooks/test_codex_cli.py),
and `--check` recomputes it, so a hook Codex would skip is caught.

For a server elsewhere (`--server`) each hook's command names it (`run-hook.sh --server=URL`), and
the MCP server reads its token from the environment (`bearer_token_env_var`), never the file.

A repository's hooks are read only in a project the user trusted in Codex (`[projects."DIR"]
trust_level`); connecting never trusts a project for the user, and `--check` says when it is not.
"""

import hashlib
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from librarian_dagster.core.connect.agent import SERVER, Connector, Where, mcp_problems, run_hook
from librarian_dagster.core.connect.files import (
    ConfigError,
    Content,
    Target,
    json_target,
    text_block_add,
    text_block_remove,
)

AGENT = "codex"
TIMEOUT_S = 10
"""Codex's own bound on a hook; the hooks keep to their deadlines (under a second) well within."""
TOOLS = "Bash|apply_patch"
"""What the PreToolUse hook is asked about: the shell (a read is a command that plainly reads a
path) and patches (edits)."""
_NO_MATCHER = {"UserPromptSubmit", "Stop", "PreModelRequest", "Interrupt"}
"""Events whose matcher Codex drops, so it is not hashed."""


def label(event: str) -> str:
    """How Codex names an event in a trust key and in a hook's hashed identity: PreToolUse ->
    pre_tool_use."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def codex_home(where: Where) -> Path:
    named = (where.env.get("CODEX_HOME") or "").strip()
    return Path(named).expanduser() if named else where.home / ".codex"


def _hooks_json(where: Where) -> Path:
    return (where.repo / ".codex" if where.repo else codex_home(where)) / "hooks.json"


def _groups(where: Where) -> dict[str, dict[str, Any]]:
    def hook(script: str) -> dict[str, Any]:
        command = run_hook(where, script, AGENT)
        return {"type": "command", "command": command, "timeout": TIMEOUT_S}

    return {
        "UserPromptSubmit": {"hooks": [hook("user_prompt_submit.py")]},
        "PreToolUse": {"matcher": TOOLS, "hooks": [hook("pre_tool_use.py")]},
    }


def trusted_hash(event: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """The `trusted_hash` Codex expects for one hook: sha256 of the compact, key-sorted JSON of
    its normalized definition."""
    timeout = max(1, int(handler.get("timeout", 600)))
    normal: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": min(timeout, 3) if event == "SessionEnd" else timeout,
        "async": handler.get("async", False),
    }
    for key in ("statusMessage", "additionalContextLimit"):
        if handler.get(key) is not None:
            normal[key] = handler[key]
    identity: dict[str, Any] = {"event_name": label(event), "hooks": [normal]}
    if matcher is not None and event not in _NO_MATCHER:
        identity["matcher"] = matcher
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _ours(where: Where, hooks: dict[str, Any]) -> dict[str, str]:
    """{trust key: hash} of Librarian's hooks where they stand in this hooks.json content."""
    path = os.path.realpath(_hooks_json(where))
    trust = {}
    for event, group in _groups(where).items():
        listed = hooks.get("hooks", {}).get(event, [])
        if isinstance(listed, list) and group in listed:
            index = listed.index(group)
            key = f"{path}:{label(event)}:{index}:0"
            trust[key] = trusted_hash(event, group.get("matcher"), group["hooks"][0])
    return trust


def _read(path: Path) -> Content:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _toml(path: Path, content: Content) -> dict[str, Any]:
    try:
        return tomllib.loads((content or b"").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not TOML ({exc}); change nothing until it is") from None


def _config_lines(where: Where, hooks_after: bytes, users: dict[str, Any]) -> list[str]:
    """The block Librarian adds to config.toml: its MCP server (unless the user has one by that
    name) and the trust of its hooks (unless the user's file already holds it)."""
    lines: list[str] = []
    if SERVER not in users.get("mcp_servers", {}):
        lines += [f"[mcp_servers.{SERVER}]", f"url = {json.dumps(where.mcp_url)}"]
        if where.sends_token:  # Codex reads the variable when it starts the server
            lines.append('bearer_token_env_var = "LIBRARIAN_MCP_TOKEN"')
    state = users.get("hooks", {}).get("state", {})
    for key, digest in _ours(where, json.loads(hooks_after)).items():
        if key not in state:
            lines += [f"[hooks.state.{json.dumps(key)}]", f"trusted_hash = {json.dumps(digest)}"]
    return lines


def targets(where: Where) -> list[Target]:
    hooks_path = _hooks_json(where)
    config_path = codex_home(where) / "config.toml"
    entries = [(("hooks", event + "[]"), group) for event, group in _groups(where).items()]
    hooks = json_target(hooks_path, entries)

    def add_config(content: Content) -> bytes:
        users = _toml(config_path, text_block_remove(content) if content else None)
        hooks_after = hooks.add(_read(hooks_path))
        added = text_block_add(content, _config_lines(where, hooks_after, users))
        _toml(config_path, added)  # never a file Codex cannot read
        return added

    return [
        hooks,
        Target(config_path, add_config, text_block_remove),
    ]


def check(where: Where) -> list[str]:
    problems = []
    hooks_path = _hooks_json(where)
    content = _read(hooks_path)
    try:
        hooks = json.loads(content) if content else {}
    except ValueError:
        return [f"{hooks_path} is not JSON: Codex reads no hook from it"]
    ours = _ours(where, hooks if isinstance(hooks, dict) else {})
    if len(ours) < len(_groups(where)):
        problems.append(f"not connected: {hooks_path} does not run Librarian's hooks")
    config_path = codex_home(where) / "config.toml"
    try:
        config = _toml(config_path, _read(config_path))
    except ConfigError as exc:
        return [*problems, str(exc)]
    state = config.get("hooks", {}).get("state", {})
    for key, digest in ours.items():
        if state.get(key, {}).get("trusted_hash") != digest:
            problems.append(f"Codex would skip a hook it does not trust: {key}")
    if config.get("features", {}).get("hooks") is False:
        problems.append(f"{config_path} turns Codex's hooks off ([features] hooks = false)")
    problems += mcp_problems(config_path, config.get("mcp_servers", {}).get(SERVER), where)
    if where.repo:
        project = config.get("projects", {}).get(str(where.repo), {})
        if project.get("trust_level") != "trusted":
            problems.append(
                f"Codex reads {where.repo}/.codex only in a project you trusted: trust it in Codex"
            )
    return problems


CONNECTOR = Connector(agent=AGENT, targets=targets, check=check, folder=codex_home, command="codex")

"""The user's own Claude Code as a model service: `claude -p` in headless mode, JSON out, which
needs no API key (the CLI's own login serves), and which of its failures are worth another try.

Run so that it neither remembers nor reaches out: `--no-session-persistence` (no transcript that
the sensor would ingest as a session of its own), `--setting-sources ""` (none of the user's
hooks, this product's prompt hook among them, see the request), `--tools ""` (nothing to run),
and the request on stdin, never on the command line (`ps` shows a command line).
"""

import json
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

from librarian_dagster.core.models.calls import RETRYABLE_CODES, Failure
from librarian_dagster.core.settings import default


@dataclass(frozen=True)
class ClaudeCodeConfig:
    command: str = default("claude_code_command")
    """The CLI to run: `claude` on the PATH, or a path."""
    timeout_seconds: float = default("llm_timeout_seconds")


class ClaudeCodeFailed(RuntimeError):
    """`claude -p` ran and failed; `status` is the API's HTTP status when it says one."""

    def __init__(self, reason: str, status: int | None = None, transient: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.transient = transient


def ask(config: ClaudeCodeConfig, model: str, system: str, schema: dict, request: str) -> dict:
    """The CLI's JSON result for one request answered in `schema` (`structured_output`)."""
    command = [
        config.command,
        "-p",
        "--output-format",
        "json",
        "--model",
        model,
        "--system-prompt",
        system,
        "--json-schema",
        json.dumps(schema),
        "--tools",
        "",
        "--no-session-persistence",
        "--setting-sources",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="librarian-digest-") as empty:
        # An empty folder: no CLAUDE.md or project settings of wherever the run happens to be.
        done = subprocess.run(
            command,
            input=request,
            capture_output=True,
            text=True,
            timeout=config.timeout_seconds,
            cwd=empty,
            check=False,
        )
    result = _result(done.stdout)
    if done.returncode != 0 or result is None or result.get("is_error"):
        status = (result or {}).get("api_error_status")
        status = status if isinstance(status, int) else None
        why = str((result or {}).get("result") or _last_line(done.stderr) or "no output")
        raise ClaudeCodeFailed(
            f"exit {done.returncode}" + (f", HTTP {status}" if status else "") + f": {why[:300]}",
            status,
            transient=status in RETRYABLE_CODES,
        )
    return result


def claude_code_failure(exc: Exception) -> Failure | None:
    if isinstance(exc, subprocess.TimeoutExpired):
        return Failure(True, "timed out")
    if isinstance(exc, FileNotFoundError):
        return Failure(
            False,
            f"{exc.filename or 'claude'} not found: install Claude Code "
            "(npm install -g @anthropic-ai/claude-code) or set LIBRARIAN_CLAUDE_CODE_COMMAND",
        )
    if isinstance(exc, ClaudeCodeFailed):
        return Failure(exc.transient, str(exc))
    return None


def _result(stdout: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(stdout)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""

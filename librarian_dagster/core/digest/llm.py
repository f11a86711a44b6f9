"""The LLM digesters: Gemini or Vertex AI (google-genai), or Claude (the Messages API through the
`anthropic` SDK, or the user's own Claude Code, `claude -p`), writes the digest of a redacted
session.

One call per session, with the `Digest` pydantic model as the response's JSON schema, the
prompts of `digest_prompt.py`, and the store's most used tags offered so the vocabulary
converges. Bounded and loud, whoever serves it:

- 429, 5xx and timeouts are retried as `calls.call_with_backoff` allows, then the step fails
  (`ProviderUnavailable`, which the asset runs again later: `retried` in defs/assets/_common.py);
- a reply that does not parse into the schema gets one repair request; a second miss fails with
  the reason (`DigestRejected`);
- a reply that parses but is not a digest (an error or rate-limit text, a refusal, empty
  sections) fails at once with the reason; nothing of it is stored.

What is sent is built from the redacted session only (prompts, final replies, tool names, files
touched, commands, errors), and is scanned by the leak-check once more before it leaves: a
finding stops the call. A session longer than the token budget is digested in segments whose
digests are merged by one more call; the result says so (`method`), nothing is cut silently.
"""

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.offline import Exchange, exchanges
from librarian_dagster.core.digest.prompt import (
    PROMPT_VERSION,
    SYSTEM,
    digest_request,
    merge_request,
    repair_request,
)
from librarian_dagster.core.digest.schema import SECTIONS, Digest, DigestResult
from librarian_dagster.core.models.anthropic import (
    AnthropicConfig,
    anthropic_failure,
)
from librarian_dagster.core.models.anthropic import make_client as make_anthropic_client
from librarian_dagster.core.models.calls import ProviderError, RetryBounds, call_with_backoff
from librarian_dagster.core.models.claude_code import ClaudeCodeConfig, ask, claude_code_failure
from librarian_dagster.core.models.gemini import ClientConfig, genai_failure, make_client
from librarian_dagster.core.redaction.scan import find_secrets

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import MessageParam, OutputConfigParam
    from google import genai
    from google.auth.credentials import Credentials

Config = TypeVar("Config")
"""How a digester reaches its service (ClientConfig, AnthropicConfig, ClaudeCodeConfig)."""


@dataclass(frozen=True)
class Ask:
    """What a request asks the model for: its system prompt, and the JSON schema of the reply."""

    system: str
    schema: type[BaseModel]


DIGEST = Ask(SYSTEM, Digest)

# A token is about four characters of English or code; the budget is checked on this estimate.
CHARS_PER_TOKEN = 4

# Text that is an answer about the request, not a digest of the session: an error or rate-limit
# message, a refusal. Anchored at the start, so a digest *about* rate limits is not taken for one.
_NOT_A_DIGEST = re.compile(
    r"^\W*(?:i(?:'m| am) (?:sorry|unable|not able)|i can(?:not|'t|\u2019t)|as an ai\b|sorry\b|"
    r"error\b|\d{3} [a-z_]{4,}|resource(?: has been)? exhausted|quota exceeded|rate limit|"
    r"too many requests|the model is overloaded|service unavailable|internal (?:server )?error|"
    r"an internal error|please try again|unable to (?:process|digest|summari[sz]e))",
    re.IGNORECASE,
)


class DigestRejected(ProviderError):
    """The model's reply is not a digest (after the one repair attempt where one applies)."""


class SecretInRequest(ProviderError):
    """The digest input still holds something the leak-check flags: it is not sent."""


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


class LLMDigester(Generic[Config]):
    """What every LLM digester does alike: segments, the leak-check before each call, the schema
    check with one repair, the refusal check and the token count. A subclass sends one request
    to its service (`_complete`), reached as `config` says."""

    def __init__(
        self,
        config: Config,
        model: str,
        bounds: RetryBounds | None = None,
        input_token_budget: int = 200_000,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.model = model
        # The digest's key holds the prompt version: a new prompt means new digests.
        self.model_name = f"{model}+prompt-v{PROMPT_VERSION}"
        self.bounds = bounds or RetryBounds()
        self.input_token_budget = input_token_budget
        self._sleep = sleep

    def digest(self, session: Session, known_tags: Sequence[str] = ()) -> DigestResult:
        usage = _Usage()
        try:
            return self._digest(session, known_tags, usage)
        except ProviderError as exc:
            exc.input_tokens, exc.output_tokens = usage.input_tokens, usage.output_tokens
            exc.calls = usage.calls
            raise

    def _digest(self, session: Session, known_tags: Sequence[str], usage: _Usage) -> DigestResult:
        segments = digest_input(session, self.input_token_budget * CHARS_PER_TOKEN)
        if len(segments) == 1:
            digest = self._ask(digest_request(segments[0], known_tags), usage)
            method = "whole"
        else:
            n = len(segments)
            parts = [
                self._ask(digest_request(text, known_tags, part=f"part {i} of {n}"), usage)
                for i, text in enumerate(segments, 1)
            ]
            merged = merge_request([p.model_dump_json() for p in parts], known_tags)
            digest = self._ask(merged, usage)
            method = f"segments:{n}+merge"
        return DigestResult(
            digest=digest,
            model=self.model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            calls=usage.calls,
            method=method,
        )

    # -- one request, checked ------------------------------------------------------------------

    def _ask(self, request: str, usage: _Usage) -> Digest:
        reply = self._generate(request, usage)
        problem = _schema_problem(reply)
        if problem is not None:
            if _NOT_A_DIGEST.match(reply):
                raise DigestRejected(f"the model answered with no digest: {_quote(reply)}")
            repaired = self._generate(repair_request(reply, problem), usage)
            second = _schema_problem(repaired)
            if second is not None:
                raise DigestRejected(
                    f"the reply does not fit the digest schema, even after one repair "
                    f"attempt: {second}"
                )
            reply = repaired
        digest = Digest.model_validate_json(reply)
        not_a_digest = _not_a_digest(digest)
        if not_a_digest:
            raise DigestRejected(not_a_digest)
        return digest

    def answer(self, request: str, asked: Ask) -> str:
        """The model's reply to a request of another kind than a digest (`asked`): leak-checked
        before it leaves and retried, as a digest's request is (consolidation's wording,
        core/consolidation/wording.py)."""
        return self._generate(request, _Usage(), asked)

    def _generate(self, request: str, usage: _Usage, asked: Ask = DIGEST) -> str:
        found = Counter(f.family for f in find_secrets(request))
        if found:
            # Families only: the value goes nowhere, not even into this message.
            raise SecretInRequest(
                f"the digest input still holds what the leak-check flags ({dict(found)}): "
                "not sent to the model"
            )
        return self._complete(request, usage, asked)

    def _complete(self, request: str, usage: _Usage, asked: Ask) -> str:
        """The service's reply text to one request, its tokens added to `usage`."""
        raise NotImplementedError


class GeminiDigester(LLMDigester[ClientConfig]):
    """Digests through google-genai's `generate_content`, on the Gemini API or Vertex AI."""

    def __init__(
        self,
        config: ClientConfig,
        model: str,
        bounds: RetryBounds | None = None,
        input_token_budget: int = 200_000,
        *,
        credentials: "Credentials | None" = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config, model, bounds, input_token_budget, sleep=sleep)
        self._credentials = credentials
        self._client: genai.Client | None = None

    def _complete(self, request: str, usage: _Usage, asked: Ask) -> str:
        from google.genai import types

        config = types.GenerateContentConfig(
            system_instruction=asked.system,
            response_mime_type="application/json",
            response_schema=asked.schema,
            temperature=0.2,
        )
        response = call_with_backoff(
            lambda: self._client_now().models.generate_content(
                model=self.model, contents=request, config=config
            ),
            self.bounds,
            f"{self.model} generateContent",
            genai_failure,
            self._sleep,
        )
        usage.calls += 1
        meta = response.usage_metadata
        if meta is not None:
            usage.input_tokens += meta.prompt_token_count or 0
            # Thinking tokens are billed as output.
            usage.output_tokens += (meta.candidates_token_count or 0) + (
                meta.thoughts_token_count or 0
            )
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            raise DigestRejected(f"the model blocked the request: {_enum(feedback.block_reason)}")
        if not response.candidates:
            raise DigestRejected("the reply holds no candidate")
        finish = response.candidates[0].finish_reason
        if finish is not None and _enum(finish) != "STOP":
            raise DigestRejected(f"the reply ended with {_enum(finish)}, not a finished answer")
        return response.text or ""

    def _client_now(self) -> "genai.Client":
        if self._client is None:
            self._client = make_client(self.config, self._credentials)
        return self._client


# A digest is a few hundred tokens; this leaves room for the longest, a merge of many parts.
ANTHROPIC_MAX_TOKENS = 4096


class AnthropicDigester(LLMDigester[AnthropicConfig]):
    """Digests through the `anthropic` SDK's Messages API, with the digest's JSON schema as the
    structured output format (`output_config.format`)."""

    _client: "anthropic.Anthropic | None" = None

    def _complete(self, request: str, usage: _Usage, asked: Ask) -> str:
        import anthropic

        if self._client is None:
            self._client = make_anthropic_client(self.config)
        client = self._client
        output: OutputConfigParam = {
            "format": {"type": "json_schema", "schema": anthropic.transform_schema(asked.schema)}
        }
        messages: list[MessageParam] = [{"role": "user", "content": request}]
        message = call_with_backoff(
            lambda: client.messages.create(
                model=self.model,
                max_tokens=ANTHROPIC_MAX_TOKENS,
                system=asked.system,
                messages=messages,
                output_config=output,
            ),
            self.bounds,
            f"{self.model} messages",
            anthropic_failure,
            self._sleep,
        )
        usage.calls += 1
        usage.input_tokens += message.usage.input_tokens or 0
        usage.output_tokens += message.usage.output_tokens or 0
        if message.stop_reason == "refusal":
            raise DigestRejected("the model refused the request")
        if message.stop_reason not in ("end_turn", "stop_sequence"):
            raise DigestRejected(
                f"the reply ended with {message.stop_reason}, not a finished answer"
            )
        return "".join(block.text for block in message.content if block.type == "text")


# -- what the model reads -------------------------------------------------------------------------


def digest_input(session: Session, budget_chars: int) -> list[str]:
    """The session as the model reads it, in as few segments of at most `budget_chars` as can be.

    Each exchange is one block; blocks are packed in order, and a block longer than the budget on
    its own is cut into consecutive pieces marked as continued.
    """
    header = _header(session)
    blocks = [_render(i, x) for i, x in enumerate(exchanges(session.turns), 1)] or [
        "(no exchanges)"
    ]
    room = max(1000, budget_chars - len(header) - 1)
    pieces: list[str] = []
    for block in blocks:
        if len(block) <= room:
            pieces.append(block)
            continue
        for start in range(0, len(block), room - 40):
            mark = "" if start == 0 else "(continued)\n"
            pieces.append(mark + block[start : start + room - 40])
    segments: list[list[str]] = [[]]
    size = 0
    for piece in pieces:
        if segments[-1] and size + len(piece) + 2 > room:
            segments.append([])
            size = 0
        segments[-1].append(piece)
        size += len(piece) + 2
    return [header + "\n" + "\n\n".join(s) for s in segments]


def _header(session: Session) -> str:
    facts = [
        ("Project", session.project),
        ("Branch", session.git_branch),
        ("Title", session.title),
        ("Started", session.started_at.isoformat() if session.started_at else None),
        ("Ended", session.ended_at.isoformat() if session.ended_at else None),
    ]
    return "\n".join(f"{name}: {value}" for name, value in facts if value)


def _render(index: int, x: Exchange) -> str:
    lines = [f"### Exchange {index}", f"User: {x.prompt or '(no typed prompt)'}"]
    if x.replies:
        lines.append(f"Assistant (final reply): {x.replies[-1]}")
    if x.tools:
        lines.append("Tools: " + ", ".join(f"{n} x{c}" for n, c in Counter(x.tools).most_common()))
    for label, paths in (("Files edited", x.files_edited), ("Files read", x.files_read)):
        if paths:
            lines.append(f"{label}: " + ", ".join(dict.fromkeys(paths)))
    commands = list(dict.fromkeys(_first_line(c)[:200] for c in x.commands if c.strip()))
    if commands:
        lines.append("Commands: " + "; ".join(commands[:10]))
    if x.errors:
        lines.append("Errors: " + "; ".join(e[:300] for e in x.errors))
    return "\n".join(lines)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# -- is it a digest? ------------------------------------------------------------------------------


def _schema_problem(reply: str) -> str | None:
    """Why `reply` is not a JSON object of the digest schema, or None when it is."""
    try:
        Digest.model_validate_json(reply)
    except ValidationError as exc:
        issues = exc.errors()
        shown = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in issues[:3]
        )
        more = f" (and {len(issues) - 3} more)" if len(issues) > 3 else ""
        return shown + more
    return None


def _not_a_digest(digest: Digest) -> str | None:
    """Why a reply that fits the schema is still no digest, or None when it is one."""
    if not digest.summary.strip():
        return "the reply has an empty summary"
    bullets = [b for key, _ in SECTIONS for b in getattr(digest, key) if b.strip()]
    if not bullets:
        return "the reply has empty sections: no bullet in any of them"
    if _NOT_A_DIGEST.match(digest.summary) or all(_NOT_A_DIGEST.match(b) for b in bullets):
        return f"the model answered with an error or a refusal: {_quote(digest.summary)}"
    return None


def _quote(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return repr(text[:120] + ("…" if len(text) > 120 else ""))


def _enum(value: Any) -> str:
    return str(getattr(value, "value", value))


class ClaudeCodeDigester(LLMDigester[ClaudeCodeConfig]):
    """Digests through the user's own Claude Code (`claude -p`, JSON out, the digest's schema as
    `--json-schema`): no API key, the CLI's login pays (core/models/claude_code.py)."""

    def _complete(self, request: str, usage: _Usage, asked: Ask) -> str:
        schema = asked.schema.model_json_schema()
        result = call_with_backoff(
            lambda: ask(self.config, self.model, asked.system, schema, request),
            self.bounds,
            f"{self.model} claude -p",
            claude_code_failure,
            self._sleep,
        )
        usage.calls += 1
        spent = result.get("usage")
        if not isinstance(spent, dict):
            spent = {}
        usage.input_tokens += int(spent.get("input_tokens") or 0)
        usage.output_tokens += int(spent.get("output_tokens") or 0)
        structured = result.get("structured_output")
        if structured is not None:
            return json.dumps(structured)
        return str(result.get("result") or "")

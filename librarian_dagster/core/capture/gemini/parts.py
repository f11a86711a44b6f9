"""The text of a Gemini CLI message's content: a string, or a list of Gemini API parts.

A part is `{text}` (with `thought: true` when it is the model's thinking), `{functionCall}`,
`{functionResponse}`, `{inlineData}` or `{fileData}` (files sent inline, base64, or by URI),
`{executableCode}` or `{codeExecutionResult}`. Inline data becomes `[image/png data]`: base64
never leaves the parser, nor does a `thoughtSignature` (opaque, encrypted).

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections import Counter
from typing import Any

__all__ = ["as_parts", "part_kind", "part_text", "response_text"]


def as_parts(content: Any) -> list[Any]:
    """Content as a list of parts (a string or a lone part is one)."""
    if content is None:
        return []
    if isinstance(content, list):
        return content
    return [content]


def part_kind(part: Any) -> str:
    """What a part is, by its one content key ("text", "thought", "functionCall", ...)."""
    if isinstance(part, str):
        return "text"
    if not isinstance(part, dict):
        return type(part).__name__
    if part.get("thought") is True:
        return "thought"
    for key in (
        "text",
        "functionCall",
        "functionResponse",
        "inlineData",
        "fileData",
        "executableCode",
        "codeExecutionResult",
    ):
        if key in part:
            return key
    return ",".join(sorted(k for k in part if k != "thoughtSignature")) or "empty"


def _media(part: dict[str, Any], key: str) -> str:
    data = part.get(key)
    mime = data.get("mimeType") if isinstance(data, dict) else None
    if key == "fileData" and isinstance(data, dict) and isinstance(data.get("fileUri"), str):
        return f"[file: {data['fileUri']}]"
    return f"[{mime or 'unknown'} data]"


def part_text(part: Any, blocks: Counter[str] | None = None) -> str:
    """The words of one part ("" for a call, a response or a thought: read elsewhere)."""
    kind = part_kind(part)
    if blocks is not None:
        blocks[kind] += 1
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    if kind == "text":
        text = part.get("text")
        return text if isinstance(text, str) else ""
    if kind in ("inlineData", "fileData"):
        return _media(part, kind)
    if kind == "executableCode":
        code = part["executableCode"]
        return str(code.get("code") or "") if isinstance(code, dict) else ""
    if kind == "codeExecutionResult":
        out = part["codeExecutionResult"]
        return str(out.get("output") or "") if isinstance(out, dict) else ""
    return ""


def response_text(response: Any) -> str:
    """A tool's answer as Gemini CLI sends it back (`functionResponse.response`): its output,
    else its error; the parts it carries (images of a read file) as placeholders."""
    if isinstance(response, str):
        return response
    if not isinstance(response, dict):
        return ""
    for key in ("output", "error", "content", "llmContent"):
        value = response.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list):
            return "\n".join(t for t in (part_text(p) for p in value) if t)
    return ""

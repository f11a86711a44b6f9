"""A fake Gemini API and Vertex AI on 127.0.0.1, speaking their REST wire format.

The real google-genai SDK is pointed at it through `HttpOptions(base_url=...)`
(LIBRARIAN_GEMINI_BASE_URL). It serves the paths the SDK really calls:

- Gemini API: `POST /v1beta/models/<m>:generateContent`, `:embedContent`, `:batchEmbedContents`
- Vertex AI: `POST /v1beta1/projects/<p>/locations/<l>/publishers/google/models/<m>:<method>`
  with `generateContent`, `embedContent` and `predict`

Every request is recorded (path, headers, body) so tests can count calls and look for secrets in
what left the machine. Replies to generateContent are scripted: a test queues bodies or HTTP
errors; with nothing queued the fake answers with `default_digest`. Embeddings are a bag of
hashed words, L2-normalised, so texts sharing words are near each other, like a real model's.
"""

import hashlib
import json
import math
import re
from collections.abc import Callable
from typing import Any

from tests.local_server import LocalServer, QuietHandler, Recorded, Reply

DEFAULT_DIGEST: dict[str, Any] = {
    "summary": "Fixed the flaky zanzibar cache test by releasing the lock in teardown.",
    "worked_on": ["Investigated why the zanzibar cache test hangs on CI."],
    "problem": ["The cache lock stayed held after the fixture's teardown."],
    "solution": ["Released the lock in teardown; the test passes 50 times in a row."],
    "open_items": ["Add a timeout to every lock acquisition."],
    "tags": ["Python", "py", "Testing", "CI"],
    "domain": "technical",
    "importance": 3,
}


def error(status: int, message: str, reason: str, headers: dict[str, str] | None = None) -> Reply:
    """An error in Google's JSON error shape."""
    return Reply(
        status,
        {"error": {"code": status, "message": message, "status": reason}},
        headers or {},
    )


def generation(text: str, tokens_in: int = 1200, tokens_out: int = 300) -> Reply:
    """A generateContent answer whose one candidate says `text`."""
    return Reply(
        200,
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": text}], "role": "model"},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": tokens_in,
                "candidatesTokenCount": tokens_out,
                "totalTokenCount": tokens_in + tokens_out,
            },
            "modelVersion": "gemini-2.5-flash",
        },
    )


def digest_reply(**changes: Any) -> Reply:
    return generation(json.dumps({**DEFAULT_DIGEST, **changes}))


def bag_of_words(text: str, dim: int) -> list[float]:
    vector = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    # Not normalised to 1 on purpose: gemini-embedding-001 below 3072 dimensions is not either,
    # so the client must normalise.
    return [3.0 * v / norm for v in vector]


class FakeGemini(LocalServer):
    def __init__(self) -> None:
        self.generate_script: list[Reply] = []
        self.embed_script: list[Reply] = []
        self.default_generate: Callable[[Any], Reply] = lambda _body: digest_reply()
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = fake.record(self)
                reply = fake._answer(self.path, body)
                self.send_reply(reply, "application/json; charset=UTF-8")

        super().__init__(Handler)

    # -- what was asked ------------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Recorded]:
        """Requests received, optionally only those to `:<method>`."""
        with self._lock:
            return [r for r in self.requests if method is None or r.path.endswith(":" + method)]

    # -- answers -------------------------------------------------------------------------------

    def _answer(self, path: str, raw: bytes) -> Reply:
        match = re.fullmatch(
            r"/v1(?:beta)?/models/(?P<m>[\w.@-]+):(?P<op>\w+)"
            r"|/v1(?:beta1)?/projects/[\w-]+/locations/[\w-]+/publishers/google/models/"
            r"(?P<vm>[\w.@-]+):(?P<vop>\w+)",
            path.split("?", 1)[0],
        )
        if not match:
            return error(404, f"no such method: {path}", "NOT_FOUND")
        op = match.group("op") or match.group("vop")
        try:
            body = json.loads(raw)
        except ValueError:
            return error(400, "Invalid JSON payload received.", "INVALID_ARGUMENT")
        if op == "generateContent":
            with self._lock:
                scripted = self.generate_script.pop(0) if self.generate_script else None
            return scripted or self.default_generate(body)
        with self._lock:
            scripted = self.embed_script.pop(0) if self.embed_script else None
        if scripted:
            return scripted
        if op == "embedContent":
            dim = body.get("outputDimensionality") or body.get("embedContentConfig", {}).get(
                "outputDimensionality", 3072
            )
            text = " ".join(p.get("text", "") for p in body["content"]["parts"])
            return Reply(200, {"embedding": {"values": bag_of_words(text, dim)}})
        if op == "batchEmbedContents":
            embeddings = []
            for one in body["requests"]:
                text = " ".join(p.get("text", "") for p in one["content"]["parts"])
                dim = one.get("outputDimensionality") or one.get("embedContentConfig", {}).get(
                    "outputDimensionality", 3072
                )
                embeddings.append({"values": bag_of_words(text, dim)})
            return Reply(200, {"embeddings": embeddings})
        if op == "predict":
            dim = body.get("parameters", {}).get("outputDimensionality", 3072)
            predictions = [
                {
                    "embeddings": {
                        "values": bag_of_words(i["content"], dim),
                        "statistics": {"token_count": len(i["content"].split())},
                    }
                }
                for i in body["instances"]
            ]
            return Reply(200, {"predictions": predictions})
        return error(404, f"unknown method {op}", "NOT_FOUND")

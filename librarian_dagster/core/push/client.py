"""The laptop's half of the push protocol: one session per request to the server's `POST /push`.

A request carries a whole session (its redacted files, gzip-compressed JSON) and the SHA-256 of
its bytes, so the server stages all of it or none of it: a push cut at any byte leaves nothing
half-written there, and the next push sends it again. The same bytes pushed twice are staged once
(the server answers `unchanged`). The token is `LIBRARIAN_MCP_TOKEN`, as for the hooks; who
pushed is the token's person, never a claim of this side.

What the server answers is said plainly: a refusal of one session (too large, not a transcript,
another person's session id) ends that session's push; one that no later session can pass (a bad
token, a server too old to take pushes, its disk full, no server) ends the whole push. A server
that fails (5xx) or does not answer is tried again, within bounds (core/models/calls.py).
"""

import gzip
import json
from dataclasses import dataclass

import httpx

from librarian_dagster.core.capture.uploads import StagedFile
from librarian_dagster.core.models.calls import Failure, RetryBounds, call_with_backoff, retry_after
from librarian_dagster.core.models.calls import ProviderError as CallFailed

__all__ = ["FORMAT", "HELLO_PATH", "PUSH_PATH", "PushClient", "PushStopped", "Sent", "SessionMeta"]

PUSH_PATH = "/push"
HELLO_PATH = "/push/hello"
"""Where a pushing machine says it is alive with nothing to send: its silence is a capture gap
(core/service/alerts.py), which an idle laptop's watch must not look like."""
FORMAT = 1
"""The body's format; a server that takes another answers 400 naming the ones it takes."""
FORMAT_HEADER = "Librarian-Push-Format"
BOUNDS = RetryBounds(attempts=4, backoff_seconds=1.0, max_wait_seconds=30.0, env_prefix=None)
_RETRY = frozenset({408, 429, 500, 502, 503, 504})


class PushStopped(RuntimeError):
    """Nothing more can be pushed now; the message says why, in a user's words."""


@dataclass(frozen=True)
class SessionMeta:
    """What the server records of a session beside its files."""

    agent: str
    session_id: str
    sha256: str
    project: str
    folder: str | None
    cwd: str | None
    remote: str | None
    private: bool


@dataclass(frozen=True)
class Sent:
    status: str
    """`stored`, `unchanged` or `refused`."""
    reason: str = ""
    person: str | None = None


def _body(meta: SessionMeta, machine: str, files: list[StagedFile]) -> bytes:
    doc = {
        "format": FORMAT,
        "machine": machine,
        **meta.__dict__,
        "files": [
            {"name": f.name, "text": f.data.decode("utf-8"), "mtime": f.mtime} for f in files
        ],
    }
    return gzip.compress(json.dumps(doc, ensure_ascii=False).encode("utf-8"), compresslevel=6)


class _Retry(Exception):
    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.wait = reason, wait


def _failure(exc: Exception) -> Failure | None:
    if isinstance(exc, _Retry):
        return Failure(True, exc.reason, exc.wait)
    if isinstance(exc, httpx.TimeoutException):
        return Failure(True, "the server did not answer in time")
    if isinstance(exc, httpx.TransportError):
        return Failure(True, f"cannot reach the server ({type(exc).__name__})")
    return None


class PushClient:
    """Sends sessions to one server. `url` is the server's base (`https://memory.example`)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        machine: str,
        *,
        timeout: float = 120.0,
        bounds: RetryBounds = BOUNDS,
    ) -> None:
        self.url = url.rstrip("/")
        self.machine = machine
        self.bounds = bounds
        headers = {FORMAT_HEADER: str(FORMAT)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def send(self, meta: SessionMeta, files: list[StagedFile]) -> Sent:
        body = _body(meta, self.machine, files)
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return _read(self._post(PUSH_PATH, body, headers), len(body))

    def hello(self) -> str:
        """Tell the server this machine is alive, whether or not it has anything to push; the
        person the server knows the token by. PushStopped when it cannot hear it."""
        body = json.dumps({"format": FORMAT, "machine": self.machine}).encode("utf-8")
        response = self._post(HELLO_PATH, body, {"Content-Type": "application/json"})
        if response.status_code == 200:
            try:
                return str(response.json().get("person", ""))
            except (ValueError, AttributeError):
                return ""  # heard (a proxy's page, say): the server's record is what counts
        _stop(response)
        # Not a session's refusal: a machine name or a body this server does not take.
        raise PushStopped(f"the server refused this machine's hello: {_said(response)}")

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        """POST `body`, tried again (within bounds) while the server fails or does not answer."""

        def once() -> httpx.Response:
            response = self._http.post(self.url + path, content=body, headers=headers)
            if response.status_code in _RETRY:
                raise _Retry(
                    f"the server answered {response.status_code}: {_said(response)}",
                    retry_after(response.headers),
                )
            return response

        try:
            return call_with_backoff(once, self.bounds, "push", _failure)
        except CallFailed as exc:
            raise PushStopped(str(exc).removeprefix("push: ")) from None


def _said(response: httpx.Response) -> str:
    try:
        said = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(said, dict) and isinstance(said.get("error"), str):
        return said["error"]
    return str(said)[:200]


def _read(response: httpx.Response, size: int) -> Sent:
    status = response.status_code
    if status == 200:
        said = response.json()
        return Sent(str(said.get("status", "stored")), person=said.get("person"))
    _stop(response)
    if status == 413:
        return Sent("refused", f"too large ({size / 1e6:.1f} MB compressed): {_said(response)}")
    if status in (400, 409, 410, 415, 422):
        return Sent("refused", _said(response))
    raise PushStopped(f"the server answered {status}: {_said(response)}")


def _stop(response: httpx.Response) -> None:
    """PushStopped for an answer no later request can pass: a bad token, a server too old to
    take pushes, its disk full, another push format."""
    status = response.status_code
    if status == 401:
        raise PushStopped(
            "the server refused the token: set LIBRARIAN_MCP_TOKEN to a token of yours from "
            "`librarian token add NAME --person YOU` on the server (a revoked one pushes nothing)"
        )
    if status == 403:
        raise PushStopped(f"the server refused this token: {_said(response)}")
    if status in (404, 405):
        raise PushStopped(
            "the server is too old: it takes no pushes (upgrade Librarian there, then push again)"
        )
    if status == 507:
        raise PushStopped(f"the server's disk is full: {_said(response)}")
    if status == 400 and FORMAT_HEADER.lower() in _said(response).lower():
        raise PushStopped(f"the server speaks another push format: {_said(response)}")

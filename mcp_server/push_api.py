"""`POST /push`: sessions pushed from other machines (`librarian push`), staged for the sensor.

One request is one whole session (gzip-compressed JSON: its redacted files and what the laptop
knew of it) with the SHA-256 of its bytes. It is staged whole or not at all
(core/capture/uploads.py); the sensor of `librarian up` finds it there and the same assets ingest
it. Who pushed it is the token's person, never what the body says. The bytes are checked again
here: the laptop redacted them, and the pipeline's blocking leak check reads every session anyway.

Every refusal changes nothing and says why, as `{"error": ...}`: not gzip or not JSON (400), a
format this server does not take (400, naming it), bytes that are not the ones their hash names
(400), a body over LIBRARIAN_PUSH_MAX_MB (413), a session id another person pushed (409), one
forgotten on the server (410), files that are not a transcript of the agent named (422), the
server's disk full (507). Each push is
read and staged in a worker thread, so a slow upload holds up no other.

`POST /push/hello` (`{"format": 1, "machine": NAME}`, the same guards) is a machine saying it is
alive with nothing to push: `librarian push --watch` says it each round, so an idle laptop is
not taken for one that stopped pushing (a capture gap, core/service/alerts.py).
"""

import errno
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import anyio
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from librarian_dagster.core.capture import uploads
from librarian_dagster.core.capture.repository import normal_remote
from librarian_dagster.core.capture.uploads import StagedFile, UploadRefused
from librarian_dagster.core.push.bundle import content_sha256
from librarian_dagster.core.push.client import FORMAT, FORMAT_HEADER, HELLO_PATH, PUSH_PATH
from librarian_dagster.core.service import tokens
from librarian_dagster.core.store.pushes import Forgotten, Owned, PushedSession
from mcp_server.auth import LOOPBACK_HOSTS, LoopbackOnly, caller_person
from mcp_server.served import ServedSlot

__all__ = ["HelloRequest", "Intake", "PushRequest", "push_routes"]

logger = logging.getLogger(__name__)

_NAME = f"^{tokens.NAME.pattern}$"
"""A machine's name, as `librarian push --machine` checks it."""
MAX_FILES = 2000
_HELLO_BYTES = 4096
"""A hello is a format and a name: a larger body is not one."""


@dataclass(frozen=True)
class Intake:
    """Where this server stages pushed sessions, and the most bytes one session may be."""

    root: Path
    max_bytes: int


class PushedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=512)
    text: str
    mtime: float = Field(ge=0)


class PushRequest(BaseModel):
    """The body of `POST /push` (core/push/client.py writes it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: int
    machine: str = Field(pattern=_NAME)
    agent: str = Field(min_length=1, max_length=40)
    session_id: str = Field(min_length=1, max_length=200)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    project: str = Field(min_length=1, max_length=200)
    folder: str | None = Field(default=None, max_length=200)
    cwd: str | None = Field(default=None, max_length=4096)
    remote: str | None = Field(default=None, max_length=400)
    private: bool = False
    files: list[PushedFile] = Field(min_length=1, max_length=MAX_FILES)


class HelloRequest(BaseModel):
    """The body of `POST /push/hello` (core/push/client.py writes it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: int
    machine: str = Field(pattern=_NAME)


_Body = TypeVar("_Body", PushRequest, HelloRequest)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _unzipped(body: bytes, limit: int) -> bytes:
    """The body, gunzipped, at most `limit` bytes (UploadRefused 413 past it: a small body may
    unpack to a large one)."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflate.decompress(body, limit + 1)
    except zlib.error:
        raise UploadRefused(400, "send the body gzip-compressed (Content-Encoding: gzip)") from None
    if len(data) > limit or inflate.unconsumed_tail:
        raise UploadRefused(413, f"a session of more than {limit // 1_000_000} MB is not taken")
    return data


def _request(data: bytes, kind: type[_Body], what: str) -> _Body:
    try:
        asked = kind.model_validate_json(data)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise UploadRefused(400, f"not {what}: {reasons}") from None
    if asked.format != FORMAT:
        raise UploadRefused(
            400, f"this server takes {FORMAT_HEADER} {FORMAT}, not {asked.format}: upgrade one side"
        )
    return asked


def _take(intake: Intake, served: ServedSlot, person: str, body: bytes) -> dict[str, str]:
    """Check, stage and record one pushed session; UploadRefused says why not."""
    try:
        return _stage(intake, served, person, body)
    except Owned:
        raise UploadRefused(
            409, "another person pushed a session with this id: not overwritten"
        ) from None
    except Forgotten:
        raise UploadRefused(
            410, "this session was forgotten on the server: it is not taken again"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UploadRefused(
                507, "no space left where the server stages pushed sessions"
            ) from None
        logger.error("POST %s: staging failed: %s", PUSH_PATH, exc.strerror or exc)
        raise UploadRefused(503, "the server could not stage the session") from None


def _stage(intake: Intake, served: ServedSlot, person: str, body: bytes) -> dict[str, str]:
    """`_take` itself: what it refuses in its own words, the store's and the disk's raised as they
    come."""
    asked = _request(_unzipped(body, intake.max_bytes), PushRequest, "a push of a session")
    pushes = served().pushes
    if pushes is None:
        raise UploadRefused(404, "this server takes no pushes")
    files = [StagedFile(f.name, f.text.encode("utf-8"), f.mtime) for f in asked.files]
    if content_sha256(asked.agent, asked.session_id, files) != asked.sha256:
        raise UploadRefused(400, "the files are not the bytes their sha256 names: send again")
    status = "unchanged"
    with pushes.claim(asked.session_id, person) as claim:
        staged = uploads.staged_version(intake.root, asked.agent, asked.session_id)
        if claim.sha256 != asked.sha256 or staged != asked.sha256:
            uploads.stage(intake.root, asked.agent, asked.session_id, files, asked.sha256)
            status = "stored"
        pushes.record(claim, _record(asked, person, sum(len(f.data) for f in files)))
    pushes.machine_pushed(person, asked.machine)
    return {"status": status, "session_id": asked.session_id, "person": person}


def _hello(served: ServedSlot, person: str, body: bytes) -> dict[str, str]:
    """Record that a machine of `person` is alive; UploadRefused says why not."""
    asked = _request(body, HelloRequest, "a hello")
    pushes = served().pushes
    if pushes is None:
        raise UploadRefused(404, "this server takes no pushes")
    pushes.machine_pushed(person, asked.machine)
    return {"person": person, "machine": asked.machine}


def _record(asked: PushRequest, person: str, size: int) -> PushedSession:
    # Normalised here too (a user or password in it is dropped), whatever the laptop sent.
    remote = normal_remote(asked.remote) if asked.remote else None
    return PushedSession(
        session_id=asked.session_id,
        agent=asked.agent,
        person=person,
        machine=asked.machine,
        sha256=asked.sha256,
        bytes=size,
        remote=remote,
        folder=asked.folder,
        private=asked.private,
        pushed_at=datetime.now(UTC),
    )


def push_routes(
    served: ServedSlot, intake: Intake, host: str, authenticated: bool, own_person: str
) -> list[Route]:
    """`POST /push` and `POST /push/hello` for an app served on `host`; `authenticated`: the app
    checks tokens, and these routes then refuse a request without one; a push without a
    person's token is `own_person`'s."""
    guards = [Middleware(LoopbackOnly)] if host in LOOPBACK_HOSTS else []
    if authenticated:
        guards.append(Middleware(RequireAuthMiddleware, required_scopes=[]))
    # The body limit counts compressed bytes; `_unzipped` bounds what they unpack to.
    return [
        Route(
            PUSH_PATH,
            _endpoint(
                PUSH_PATH,
                lambda person, body: _take(intake, served, person, body),
                "session",
                own_person,
            ),
            methods=["POST"],
            middleware=guards,
            max_body_size=intake.max_bytes,
        ),
        Route(
            HELLO_PATH,
            _endpoint(
                HELLO_PATH,
                lambda person, body: _hello(served, person, body),
                "hello",
                own_person,
            ),
            methods=["POST"],
            middleware=guards,
            max_body_size=_HELLO_BYTES,
        ),
    ]


async def _json_body(http: Request) -> bytes | Response:
    """The request's body, or the answer to a request that sent no JSON body."""
    if not http.headers.get("content-type", "").lower().startswith("application/json"):
        return _error(415, "send the body as Content-Type: application/json")
    try:
        return await http.body()
    except ClientDisconnect:
        return Response(status_code=400)


Work = Callable[[str, bytes], dict[str, str]]
"""What an endpoint does with the caller's person and the body, in a worker thread; raises
UploadRefused with the status to answer."""


def _endpoint(
    path: str, work: Work, what: str, own_person: str
) -> Callable[[Request], Awaitable[Response]]:
    """`POST path` of a JSON body: `work` of it, as JSON, or the refusal that says why not.
    A request without a person's token is `own_person`'s."""

    async def endpoint(http: Request) -> Response:
        body = await _json_body(http)
        if isinstance(body, Response):
            return body
        person = caller_person(own_person)
        try:
            said = await anyio.to_thread.run_sync(work, person, body)
        except UploadRefused as exc:
            return _error(exc.status, str(exc))
        except Exception:
            # The database is down or broken: the cause to the log, never to the client.
            logger.exception("POST %s failed", path)
            return _error(503, f"the server could not record the {what}")
        return JSONResponse(said)

    return endpoint

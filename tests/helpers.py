"""Test helpers shared across folders: settings in a temp home, a live MCP server over HTTP."""

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

from librarian_dagster.core.settings import Settings


def make_settings(tmp_path: Path, database_url: str, mirror: Path | None = None) -> Settings:
    return Settings.from_env(
        {
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_MIRROR": str(mirror or tmp_path / "mirror"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_SETTLE_SECONDS": "120",
        }
    )


def age(path: Path, seconds: float) -> None:
    """Make a file look last written `seconds` ago (so the sensor sees it as settled)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_http(app, port: int):
    """Run an ASGI app with uvicorn on 127.0.0.1:port in a thread, for the test's duration."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("MCP test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def sensor_tick(definitions, instance, cursor):
    """Evaluate the mirror sensor once, with the resources bound from the environment."""
    import dagster as dg

    from librarian_dagster.defs.resources import build_resources

    sensor = definitions.resolve_sensor_def("mirror_sensor")
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=definitions,
        resources=build_resources(Settings.from_env()),
    ) as context:
        return sensor(context)


def write_transcript(folder: Path, session_id: str, prompt: str, reply: str) -> Path:
    """A minimal real-format Claude Code transcript: one typed prompt and one reply."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    records = [
        {
            "type": "user",
            "sessionId": session_id,
            "uuid": "u1",
            "cwd": "/work/app",
            "timestamp": "2026-11-01T10:00:00Z",
            "message": {"role": "user", "content": prompt},
        },
        {
            "type": "assistant",
            "sessionId": session_id,
            "uuid": "a1",
            "timestamp": "2026-11-01T10:00:05Z",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "text", "text": reply}],
            },
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path

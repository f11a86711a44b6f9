"""Dagster's processes under `librarian up`: one code server, the webserver and the daemon.

`dagster dev` would run five: itself (a supervisor), a proxy code server and the code server it
starts (for the UI's reload of changed code), the webserver and the daemon. `up` supervises its
children itself and has no code to reload, so it starts the code server (`dagster api grpc`) and
points the webserver and the daemon at it through a workspace file of one `grpc_server` entry:
one copy of the definitions in memory, evaluated by both (decision 0043). The three write to one
log, `dagster.log`, as `dagster dev` and its children did.
"""

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LOCATION = "librarian"
"""The code location's name, as in the repository's workspace.yaml."""
DEFINITIONS_MODULE = "librarian_dagster.definitions"
CODE_SERVER = "dagster code server"
WEBSERVER = "dagster webserver"
DAEMON = "dagster daemon"
LOG = "dagster"
"""The one log (LOG.log) the three write to."""
SOCKET_WAIT_S = 120.0
"""How long the webserver and the daemon wait for the code server's socket before they start
anyway (they connect to it when it comes: Dagster's workspace watches a `grpc_server` entry)."""


@dataclass(frozen=True)
class DagsterProcesses:
    """Where the code server listens (a Unix socket in a private folder) and how to start each
    of the three; `close()` removes the folder."""

    folder: Path
    ui_port: int

    @classmethod
    def create(cls, ui_port: int) -> "DagsterProcesses":
        # Under /tmp, not LIBRARIAN_HOME: a socket's path is limited to about 100 bytes.
        folder = Path(tempfile.mkdtemp(prefix="librarian-dagster-"))
        made = cls(folder, ui_port)
        workspace = {"load_from": [{"grpc_server": {"socket": str(made.socket),
                                                    "location_name": LOCATION}}]}  # fmt: skip
        # JSON is YAML: no YAML library needed to write it.
        made.workspace.write_text(json.dumps(workspace, indent=2), encoding="utf-8")
        return made

    @property
    def socket(self) -> Path:
        return self.folder / "code.sock"

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace.yaml"

    def commands(self) -> list[tuple[str, list[str]]]:
        """(name, command) of each, in the order they start: the code server first."""
        python = [sys.executable, "-m"]
        # Dagster's code server, importing Dagster uncollected (dagster_code_server.py).
        code = [*python, "librarian_dagster.dagster_code_server", "api", "grpc",
                "--socket", str(self.socket),
                # As `dagster dev` runs it: the definitions load at the first request, so one that
                # fails to load shows its error in the UI rather than ending the server.
                "--lazy-load-user-code", "--log-level", "warning",
                "--location-name", LOCATION, "--module-name", DEFINITIONS_MODULE]  # fmt: skip
        # Dagster's webserver, watching the code server every 10 s (dagster_webserver.py).
        webserver = [*python, "librarian_dagster.dagster_webserver", "-h", "127.0.0.1",
                     "-p", str(self.ui_port), "-w", str(self.workspace)]  # fmt: skip
        # Dagster's daemon, its storage connections kept (librarian_dagster/dagster_daemon.py).
        daemon = [*python, "librarian_dagster.dagster_daemon", str(self.workspace)]
        return [(CODE_SERVER, code), (WEBSERVER, webserver), (DAEMON, daemon)]

    def before_start(self, name: str) -> None:
        """A code server started again binds afresh: the socket its predecessor left goes."""
        if name == CODE_SERVER:
            self.socket.unlink(missing_ok=True)

    def after_start(
        self, name: str, proc: subprocess.Popen, stop: Callable[[], bool] = lambda: False
    ) -> None:
        """After the code server: wait until it listens (or exits, or a stop is asked)."""
        if name != CODE_SERVER:
            return
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not self.socket.exists() and proc.poll() is None and not stop():
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def log_name(name: str) -> str:
    """The log a child writes to: Dagster's three share one."""
    return LOG if name in (CODE_SERVER, WEBSERVER, DAEMON) else name

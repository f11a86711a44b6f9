"""A seventh agent is one folder and one line: a toy agent (a reader of a toy transcript format,
a connector of a toy configuration) added to a copy of the packages, and listed in
core/capture/agents.py. Its sessions are then found in its folder, ingested, searchable by
`--agent`, shown on the page and in `status`, and connectable, with no other file edited; the
test says which files the agent needed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import AGENTS_AWAY
from tests.helpers import edit, linked_packages

pytestmark = pytest.mark.process  # a copy of the packages, ingest and a page in a process

SESSION = "toy-0001"

TOY = '''"""Toy: `<session>.toy` files, a header line then `> prompt` and `< answer` lines."""

from datetime import datetime
from pathlib import Path

from librarian_dagster.core.capture.agent import Agent, Folder
from librarian_dagster.core.capture.files import SessionFiles, SessionHead, given_files
from librarian_dagster.core.capture.reader import Reader
from librarian_dagster.core.capture.session import Session, Turn
from librarian_dagster.core.capture.toy.connector import CONNECTOR

NAME = "toy"


def _header(path: Path) -> dict[str, str] | None:
    try:
        first = path.read_text(encoding="utf-8").split("\\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return None
    words = first.split()
    if not words or words[0] != "TOY":
        return None
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def claims(path: Path) -> bool:
    return path.suffix == ".toy" and _header(path) is not None


def discover(root: Path) -> list[SessionFiles]:
    return [SessionFiles(p.stem, p, agent=NAME) for p in sorted(Path(root).rglob("*.toy"))]


def files_for(paths) -> list[SessionFiles]:
    return [SessionFiles(p.stem, p, agent=NAME) for p in given_files(paths, discover)]


def head(files: SessionFiles, known_cwds=()) -> SessionHead:
    said = _header(files.main) or {}
    cwd = said.get("cwd")
    started = datetime.fromisoformat(said["started"]) if "started" in said else None
    return SessionHead(project=Path(cwd).name if cwd else "toy", started_at=started, cwd=cwd)


def parse(files: SessionFiles, include_thinking=False, known_cwds=()) -> Session:
    top = head(files)
    turns = []
    for line in files.main.read_text(encoding="utf-8").splitlines()[1:]:
        if line[:2] in ("> ", "< "):
            role, kind = ("user", "prompt") if line[0] == ">" else ("assistant", "text")
            turns.append(Turn(role, kind, line[2:], top.started_at))
    return Session(session_id=files.session_id, project=top.project, cwd=top.cwd,
                   started_at=top.started_at, ended_at=top.started_at, turns=turns,
                   files=(str(files.main),), fingerprint=files.fingerprint(), agent=NAME)


READER = Reader(agent=NAME, label="Toy", claims=claims, discover=discover, files_for=files_for,
                head=head, parse=parse)
AGENT = Agent(
    reader=READER,
    folder=Folder(variable="LIBRARIAN_TOY_SESSIONS", default="~/.toy/sessions",
                  about="Toy's sessions (`*.toy`)"),
    connector=CONNECTOR,
)
'''

TOY_CONNECTOR = '''"""Toy: `~/.toy/config.json` names the recall server under "memory"."""

import json

from librarian_dagster.core.connect.agent import Connector, Where
from librarian_dagster.core.connect.files import json_target


def _config(where: Where):
    return (where.repo or where.home) / ".toy" / "config.json"


def targets(where: Where):
    return [json_target(_config(where), [(("memory", "url"), where.mcp_url)])]


def check(where: Where) -> list[str]:
    try:
        said = json.loads(_config(where).read_bytes())
    except (OSError, ValueError):
        return [f"not connected: no {_config(where)}"]
    url = said.get("memory", {}).get("url") if isinstance(said, dict) else None
    return [] if url == where.mcp_url else [f"not connected: {_config(where)} names {url}"]


CONNECTOR = Connector(agent="toy", targets=targets, check=check,
                      folder=lambda where: where.home / ".toy", command="toy")
'''

DRIVER = """
import contextlib, io, json, os, sys
from pathlib import Path

from starlette.testclient import TestClient

from librarian_dagster.cli.main import main
from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import open_store
from librarian_dagster.core.capture.agents import folders
from librarian_dagster.core.capture.readers import discover
from librarian_dagster.core.settings import Settings
from librarian_dagster.ingest import ingest_paths
from mcp_server.app import Served, build_server, http_app


def said(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


settings = Settings.from_env()
found = discover(folders(settings))
outcomes = ingest_paths([folders(settings)["toy"]], settings)
search = said("search", "why did the kite string tangle", "--agent", "toy", "--json")
status = said("status")
with open_store(settings) as store:
    app = http_app(build_server(Served.of(store, configured_embedder(settings))), "127.0.0.1")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/", params={"q": "why did the kite string tangle"}).text
connected = said("connect", "toy")
checked = said("connect", "--check")
print(json.dumps({
    "found": [(s.agent, s.session_id) for s in found],
    "ingested": [(o.session_id, o.status) for o in outcomes],
    "search": search, "status": status, "page": page,
    "connected": connected, "checked": checked,
    "config": json.loads((Path.home() / ".toy" / "config.json").read_text()),
}))
"""


def _add_the_agent(root: Path) -> None:
    capture = root / "librarian_dagster" / "core" / "capture"
    (capture / "toy").mkdir()
    (capture / "toy" / "__init__.py").write_text(TOY, encoding="utf-8")
    (capture / "toy" / "connector.py").write_text(TOY_CONNECTOR, encoding="utf-8")
    edit(capture / "agents.py", lambda text: text.replace(
        "opencode, pi\n", "opencode, pi, toy\n", 1
    ).replace("        pi.AGENT,\n", "        pi.AGENT,\n        toy.AGENT,\n"))  # fmt: skip


def _edited(root: Path) -> list[str]:
    """The files of the copy that are not links to the checkout's: what the agent needed."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
    )


def test_a_seventh_agent_needs_a_folder_and_a_line(tmp_path, database_url):
    root = linked_packages(tmp_path / "copy")
    _add_the_agent(root)
    sessions = tmp_path / "toy-sessions"
    sessions.mkdir()
    (sessions / f"{SESSION}.toy").write_text(
        "TOY cwd=/work/kites started=2026-05-01T10:00:00+00:00\n"
        "> why did the kite string tangle on every launch\n"
        "< the reel spun freely: a ratchet on the reel stopped the tangles\n",
        encoding="utf-8",
    )
    home = tmp_path / "home"
    (home / ".toy").mkdir(parents=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")},
        **AGENTS_AWAY,
        "PYTHONPATH": str(root),
        "HOME": str(home),
        "LIBRARIAN_HOME": str(tmp_path / "librarian"),
        "LIBRARIAN_DATABASE_URL": database_url,
        "LIBRARIAN_CLAUDE_CODE_SESSIONS": str(tmp_path / "no-claude-code"),
        "LIBRARIAN_TOY_SESSIONS": str(sessions),
    }
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["found"] == [["toy", SESSION]]  # in its own folder, by its own setting
    assert said["ingested"] == [[SESSION, "ingested"]]
    code, found = said["search"]
    assert code == 0 and {r["agent"] for r in json.loads(found)["results"]} == {"toy"}
    code, status = said["status"]
    assert code == 0 and "Toy 1" in status  # by agent
    assert any("Toy" in line and str(sessions) in line for line in status.splitlines())
    assert '<span class="agent">Toy</span>' in said["page"] and SESSION in said["page"]
    assert said["connected"][0] == 0 and said["config"] == {"memory": {"url": _url(env)}}
    assert said["checked"][0] == 0 and "toy" in said["checked"][1].lower()
    assert _edited(root) == [
        "librarian_dagster/core/capture/agents.py",
        "librarian_dagster/core/capture/toy/__init__.py",
        "librarian_dagster/core/capture/toy/connector.py",
    ]


def _url(env: dict[str, str]) -> str:
    port = env.get("LIBRARIAN_MCP_PORT", "3201")
    return f"http://127.0.0.1:{port}/mcp"

"""`librarian connect pi`: where it writes (Pi's agent folder, as Pi finds it, or a
repository's .pi/) and what (the extension's path in "extensions")."""

import json
from pathlib import Path

from librarian_dagster.core.capture.pi.connector import CONNECTOR
from librarian_dagster.core.connect import files
from librarian_dagster.core.connect.agent import Where

ROOT = Path(__file__).resolve().parents[2]


def where(tmp_path: Path, repo: Path | None = None, **env: str) -> Where:
    return Where(tmp_path / "home", repo, ROOT, "http://127.0.0.1:3201/mcp", env)


def test_the_settings_are_pi_s_own(tmp_path):
    home = tmp_path / "home"
    [target] = CONNECTOR.targets(where(tmp_path))
    assert target.path == home / ".pi" / "agent" / "settings.json"
    [target] = CONNECTOR.targets(where(tmp_path, PI_CODING_AGENT_DIR=str(tmp_path / "pi")))
    assert target.path == tmp_path / "pi" / "settings.json"
    [target] = CONNECTOR.targets(where(tmp_path, PI_CODING_AGENT_DIR="~/agents/pi"))
    assert target.path == home / "agents" / "pi" / "settings.json"
    [target] = CONNECTOR.targets(where(tmp_path, tmp_path / "repo"))
    assert target.path == tmp_path / "repo" / ".pi" / "settings.json"


def test_the_extension_joins_the_user_s_and_check_says_so(tmp_path):
    at = where(tmp_path)
    [target] = CONNECTOR.targets(at)
    target.path.parent.mkdir(parents=True)
    target.path.write_text(json.dumps({"extensions": ["~/mine.ts"], "theme": "dark"}))
    assert CONNECTOR.check(at) == [
        f"not connected: {target.path} does not load Librarian's extension"
    ]
    files.apply([target], tmp_path / "state", "pi")
    written = json.loads(target.path.read_text())
    assert written["extensions"] == ["~/mine.ts", str(ROOT / "plugins" / "pi" / "librarian.ts")]
    assert CONNECTOR.check(at) == []
    moved = Where(at.home, None, tmp_path / "elsewhere", at.mcp_url, at.env)
    assert f"{tmp_path / 'elsewhere'} holds no Pi extension" in CONNECTOR.check(moved)[0]

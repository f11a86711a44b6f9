"""`librarian up` watches every agent's folder (cli/run.folder_watches): one that cannot be listed
is an incident named by its agent, one not made yet is no trouble."""

import threading

from librarian_dagster.cli.run import folder_watches
from librarian_dagster.core.capture.agents import AGENTS
from librarian_dagster.core.settings import Settings
from tests.conftest import AGENTS_AWAY


def test_each_agent_s_folder_is_watched_and_one_that_cannot_be_listed_is_said(tmp_path):
    codex = tmp_path / "codex-sessions"
    codex.write_text("a file where Codex's folder should be")  # listing it fails: not a folder
    settings = Settings.from_env({
        **AGENTS_AWAY,
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_CLAUDE_CODE_SESSIONS": str(tmp_path / "claude"),  # not made yet
        "LIBRARIAN_CODEX_SESSIONS": str(codex),
        "LIBRARIAN_WATCH_INTERVAL_SECONDS": "0.5",
    })  # fmt: skip
    said: list[str] = []
    watches = folder_watches(settings, said.append)
    assert [w.what for w in watches] == [f"{agent.label}'s folder" for agent in AGENTS.values()]
    assert {w.what: w.probe() for w in watches} == {
        **{w.what: None for w in watches},
        "Codex's folder": "Not a directory",
    }

    (codex_watch,) = [w for w in watches if w.what == "Codex's folder"]
    stopping = threading.Event()
    watching = threading.Thread(target=codex_watch.run, args=(stopping,), daemon=True)
    watching.start()
    try:
        codex_watch.healed.clear()
        for _ in range(100):  # two failed probes in a row make the incident: about a second
            if said:
                break
            stopping.wait(0.1)
        assert said and said[0].startswith(f"Librarian: Codex's folder cannot be read ({codex})")
        codex.unlink()  # gone: not made yet, which is no trouble
        assert codex_watch.healed.wait(10)
    finally:
        stopping.set()
        watching.join(10)
    assert "Codex's folder" in said[-1] and len(said) == 2  # the alert, then its recovery

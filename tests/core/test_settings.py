"""Settings: offline by default, clear errors for bad values, secrets never in repr, and the
declaration the one place defaults and docs/settings.md come from."""

import dataclasses
from pathlib import Path

import pytest

from librarian_dagster.core.assembly.providers import ProviderConfig
from librarian_dagster.core.capture.agents import AGENTS, folders
from librarian_dagster.core.models.calls import RetryBounds
from librarian_dagster.core.models.gemini import ClientConfig
from librarian_dagster.core.settings import (
    SETTINGS,
    Settings,
    SettingsError,
    default,
    describe,
    variables,
    wording,
)

SETTINGS_MD = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
BEGIN = "<!-- The table is generated from librarian_dagster/core/settings.py: "
BEGIN += "`uv run python -m tests.core.test_settings` rewrites it. -->"
END = "<!-- end of the generated table -->"


def test_defaults_need_no_key():
    s = Settings.from_env({})
    assert (s.digest_provider, s.embed_provider) == ("offline", "local")
    assert (s.digest_model, s.embed_model, s.embed_dimension) == (
        "gemini-2.5-flash",
        "gemini-embedding-001",
        768,
    )
    assert s.gemini_api_key is None and s.daily_token_budget is None


def test_an_agent_s_own_home_holds_its_sessions_unless_librarian_is_told_otherwise(tmp_path):
    home = tmp_path / "copilot"
    s = folders(Settings.from_env({"COPILOT_HOME": str(home), "CODEX_HOME": "/c"}))
    assert (s["copilot"], s["codex"]) == (home / "session-state", Path("/c/sessions"))
    told = Settings.from_env({"COPILOT_HOME": str(home), "LIBRARIAN_COPILOT_SESSIONS": "/s"})
    assert folders(told)["copilot"] == Path("/s")
    assert folders(Settings.from_env({}))["pi"] == Path.home() / ".pi" / "agent" / "sessions"


def test_claude_code_s_folder_is_read_from_its_old_name_too():
    old = Settings.from_env({"LIBRARIAN_MIRROR": "/m", "GEMINI_API_KEY": "AIzaSyKEPT"})
    assert folders(old)["claude-code"] == Path("/m")
    both = {"LIBRARIAN_MIRROR": "/m", "LIBRARIAN_CLAUDE_CODE_SESSIONS": "/new"}
    assert folders(Settings.from_env(both))["claude-code"] == Path("/new")
    # Read as the settings were, and no secret kept beside the fields: none in their repr.
    assert old.variable("LIBRARIAN_MIRROR") == "/m" and old.variable("GEMINI_API_KEY") is None
    assert "/m" not in repr(old)


def test_gemini_takes_the_key_from_gemini_api_key_or_google_api_key():
    s = Settings.from_env(
        {"LIBRARIAN_DIGEST_PROVIDER": "Gemini", "GOOGLE_API_KEY": "AIzaSyFAKEFAKEFAKE"}
    )
    assert s.digest_provider == "gemini"
    assert (s.gemini_api_key, s.gemini_api_key_variable) == ("AIzaSyFAKEFAKEFAKE", "GOOGLE_API_KEY")
    both = Settings.from_env(
        {"LIBRARIAN_EMBED_PROVIDER": "gemini", "GEMINI_API_KEY": "k1", "GOOGLE_API_KEY": "k2"}
    )
    assert (both.gemini_api_key, both.gemini_api_key_variable) == ("k1", "GEMINI_API_KEY")


def test_keys_stay_out_of_repr():
    s = Settings.from_env(
        {
            "LIBRARIAN_DIGEST_PROVIDER": "gemini",
            "GEMINI_API_KEY": "AIzaSySECRETSECRET",
            "LIBRARIAN_MCP_TOKEN": "tok-SECRET",
        }
    )
    assert "SECRET" not in repr(s) and "SECRET" not in str(s)
    assert "GEMINI_API_KEY" in repr(s)  # which variable holds it is no secret


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"LIBRARIAN_DIGEST_PROVIDER": "openai"}, "LIBRARIAN_DIGEST_PROVIDER"),
        ({"LIBRARIAN_EMBED_PROVIDER": "gemini"}, "GEMINI_API_KEY"),
        ({"LIBRARIAN_DIGEST_PROVIDER": "vertex"}, "GOOGLE_CLOUD_PROJECT"),
        ({"LIBRARIAN_GEMINI_BASE_URL": "localhost:9"}, "LIBRARIAN_GEMINI_BASE_URL"),
        ({"LIBRARIAN_EMBED_DIMENSION": "76.8"}, "LIBRARIAN_EMBED_DIMENSION"),
        ({"LIBRARIAN_LLM_ATTEMPTS": "0"}, "LIBRARIAN_LLM_ATTEMPTS"),
        ({"LIBRARIAN_DIGEST_MODEL": "models/x y"}, "LIBRARIAN_DIGEST_MODEL"),
        ({"LIBRARIAN_DAILY_TOKEN_BUDGET": "lots"}, "LIBRARIAN_DAILY_TOKEN_BUDGET"),
    ],
)
def test_bad_values_name_the_variable(env, names):
    with pytest.raises(SettingsError, match=names):
        Settings.from_env(env)


def test_vertex_reads_project_and_location():
    s = Settings.from_env(
        {
            "LIBRARIAN_DIGEST_PROVIDER": "vertex",
            "GOOGLE_CLOUD_PROJECT": "acme",
            "GOOGLE_CLOUD_LOCATION": "europe-west4",
            "LIBRARIAN_DAILY_TOKEN_BUDGET": "500000",
        }
    )
    assert (s.google_cloud_project, s.google_cloud_location) == ("acme", "europe-west4")
    assert s.daily_token_budget == 500_000 and s.gemini_api_key is None


def test_a_mapping_is_read_alone_blank_is_unset_and_whole_numbers_may_be_floats(monkeypatch):
    monkeypatch.setenv("LIBRARIAN_DIGEST_INPUT_TOKENS", "5000")
    s = Settings.from_env(
        {
            "LIBRARIAN_SETTLE_SECONDS": "  ",
            "LIBRARIAN_DIGEST_PROVIDER": " Offline ",
            "LIBRARIAN_EMBED_DIMENSION": "1e3",
            "LIBRARIAN_DAILY_TOKEN_BUDGET": "0",
            "LIBRARIAN_UI_URL": "http://127.0.0.1:3100/",
        }
    )
    assert s.digest_input_tokens == default("digest_input_tokens")  # not the process's 5000
    assert s.settle_seconds == default("settle_seconds")
    assert (s.digest_provider, s.embed_dimension, s.daily_token_budget) == ("offline", 1000, None)
    assert s.ui_url == "http://127.0.0.1:3100"
    assert Settings.from_env().digest_input_tokens == 5000


def test_every_secret_stays_out_of_repr():
    s = Settings.from_env(
        {
            "LIBRARIAN_DATABASE_URL": "postgresql://me:SECRET@db/x",
            "TELEGRAM_BOT_TOKEN": "123:SECRET",
            "TELEGRAM_CHAT_ID": "42",
            "LIBRARIAN_EMBED_PROVIDER": "gemini",
            "GOOGLE_API_KEY": "SECRET",
            "LIBRARIAN_MCP_TOKEN": "SECRET",
            "LIBRARIAN_DIGEST_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": "SECRET",
        }
    )
    assert s.telegram_configured and s.database_url and s.mcp_token and s.anthropic_api_key
    assert "SECRET" not in repr(s)
    secrets = {name for name, f in SETTINGS.items() if f.repr is False}
    assert secrets == {
        "database_url",
        "mcp_token",
        "telegram_bot_token",
        "gemini_api_key",
        "anthropic_api_key",
    }


@pytest.mark.parametrize(
    ("owner", "field", "setting"),
    [
        (ProviderConfig, "attempts", "llm_attempts"),
        (ProviderConfig, "backoff_seconds", "llm_backoff_seconds"),
        (ProviderConfig, "max_wait_seconds", "llm_max_wait_seconds"),
        (ProviderConfig, "timeout_seconds", "llm_timeout_seconds"),
        (ProviderConfig, "input_token_budget", "digest_input_tokens"),
        (ClientConfig, "timeout_seconds", "llm_timeout_seconds"),
        (RetryBounds, "attempts", "llm_attempts"),
        (RetryBounds, "backoff_seconds", "llm_backoff_seconds"),
        (RetryBounds, "max_wait_seconds", "llm_max_wait_seconds"),
    ],
)
def test_the_model_clients_defaults_are_the_settings(owner, field, setting):
    (declared,) = [f.default for f in dataclasses.fields(owner) if f.name == field]
    assert declared == default(setting)


def _reference() -> str:
    """docs/settings.md's table, from the declaration."""
    rows = ["| variable | default | values | meaning |", "| --- | --- | --- | --- |"]
    for field in SETTINGS.values():
        first, *others = [f"`{name}`" for name in variables(field)]
        kind = wording(field)
        values = "secret: never shown or logged" if field.repr is False else ""
        if kind is not None and kind.values:
            values = describe(kind.values, field)
        meaning = " ".join((field.description or "").split())
        named = first + "".join(f" (or {other})" for other in others)
        rows.append(f"| {named} | {_shown(field.default)} | {values} | {meaning} |")
        if field is SETTINGS["home"]:
            rows += _folder_rows()
    return "\n".join(rows) + "\n"


def _folder_rows() -> list[str]:
    """Each agent's sessions folder, declared with the agent (core/capture/agents.py)."""
    rows = []
    for agent in AGENTS.values():
        folder = agent.folder
        named = f"`{folder.variable}`" + "".join(f" (or `{a}`)" for a in folder.aliases)
        home = ""
        if folder.home:
            variable, under = folder.home
            home = f"; unset, and `{variable}` set: `${variable}/{under}`"
        meaning = f"{folder.about}, which the sensor watches{home}"
        rows.append(f"| {named} | `{folder.default}` | a path | {meaning}. Not there: skipped |")
    return rows


def _shown(value: object) -> str:
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _documented() -> tuple[str, str, str]:
    text = SETTINGS_MD.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    table, tail = rest.split(END, 1)
    return head, table, tail


def test_the_settings_reference_is_the_declaration():
    _, table, _ = _documented()
    assert table.strip() == _reference().strip(), (
        "docs/settings.md's table differs from core/settings.py: "
        "`uv run python -m tests.core.test_settings` rewrites it"
    )


if __name__ == "__main__":
    head, _, tail = _documented()
    SETTINGS_MD.write_text(f"{head}{BEGIN}\n{_reference()}{END}{tail}", encoding="utf-8")

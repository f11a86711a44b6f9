"""Provider settings: offline by default, clear errors for bad values, keys never in repr."""

import pytest

from librarian_dagster.core.settings import Settings, SettingsError


def test_defaults_need_no_key():
    s = Settings.from_env({})
    assert (s.digest_provider, s.embed_provider) == ("offline", "local")
    assert (s.digest_model, s.embed_model, s.embed_dimension) == (
        "gemini-2.5-flash",
        "gemini-embedding-001",
        768,
    )
    assert s.gemini_api_key is None and s.daily_token_budget is None


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

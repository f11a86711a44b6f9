"""The provider resources and ProviderConfig: one set of fields, mapped by name both ways; and
every resource default is its setting's, from the declaration."""

import dataclasses

import dagster as dg
import pytest

from librarian_dagster.core.assembly.providers import ProviderConfig
from librarian_dagster.core.settings import default
from librarian_dagster.defs.resources import (
    DigesterResource,
    EmbedderResource,
    NotifierResource,
    QualityResource,
    SessionFoldersResource,
)

KEY_VARIABLE = "LIBRARIAN_TEST_PROVIDER_KEY"
# The resource's own fields: what is not the provider's (how many tokens a day may be spent).
OWN = {"daily_token_budget", "step_retry_seconds"}  # the resources' own: the step, not the calls
CONFIG = ProviderConfig(
    provider="vertex",
    model="some-model",
    dimension=3,
    api_key="the-key",
    project="a-project",
    location="a-location",
    base_url="http://127.0.0.1:1",
    attempts=2,
    backoff_seconds=0.5,
    max_wait_seconds=3.0,
    timeout_seconds=4.0,
    input_token_budget=9,
)


@pytest.mark.parametrize("resource", [DigesterResource, EmbedderResource])
def test_every_provider_field_of_a_resource_is_the_config_field_of_its_name(resource):
    config_fields = {f.name: f for f in dataclasses.fields(ProviderConfig)}
    for name, field in resource.model_fields.items():
        if name in OWN:
            continue
        assert name in config_fields, f"{resource.__name__}.{name} is not a ProviderConfig field"
        assert field.annotation == config_fields[name].type, name
        if name not in ("provider", "dimension"):  # each resource's own default provider/size
            assert field.default == config_fields[name].default, name


@pytest.mark.parametrize(
    ("resource", "left_at_default"),
    [(DigesterResource, {"dimension"}), (EmbedderResource, {"input_token_budget"})],
)
def test_a_config_comes_back_whole_through_a_resource_with_the_key_by_name(
    resource, left_at_default, monkeypatch
):
    monkeypatch.setenv(KEY_VARIABLE, "the-key")
    bound = resource.from_config(CONFIG, KEY_VARIABLE)
    assert isinstance(bound.api_key, dg.EnvVar) and bound.api_key.env_var_name == KEY_VARIABLE
    with dg.build_resources({"provider": bound}) as resources:
        config = resources.provider._config()
    defaults = ProviderConfig(provider="")
    expected = dataclasses.replace(
        CONFIG, **{name: getattr(defaults, name) for name in left_at_default}
    )
    assert dataclasses.asdict(config) == dataclasses.asdict(expected)


def test_without_a_key_variable_no_key_is_bound():
    assert EmbedderResource.from_config(CONFIG, None).api_key is None


@pytest.mark.parametrize(
    ("resource", "field", "setting"),
    [
        (SessionFoldersResource, "settle_seconds", "settle_seconds"),
        (SessionFoldersResource, "include_thinking", "include_thinking"),
        (DigesterResource, "provider", "digest_provider"),
        (DigesterResource, "attempts", "llm_attempts"),
        (DigesterResource, "input_token_budget", "digest_input_tokens"),
        (EmbedderResource, "provider", "embed_provider"),
        (EmbedderResource, "dimension", "embed_dimension"),
        (EmbedderResource, "timeout_seconds", "llm_timeout_seconds"),
        (QualityResource, "recall_floor", "recall_floor"),
        (QualityResource, "min_relevance", "recall_threshold"),
        (NotifierResource, "base_url", "telegram_base_url"),
        (NotifierResource, "ui_url", "ui_url"),
        (NotifierResource, "notify_digests", "notify_digests"),
        (NotifierResource, "gap_minutes", "gap_minutes"),
        (NotifierResource, "quiet_hours", "quiet_hours"),
    ],
)
def test_a_resource_default_is_its_setting_default(resource, field, setting):
    assert resource.model_fields[field].default == default(setting)

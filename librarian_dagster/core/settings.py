"""Every setting, declared once: its environment variable, default, bounds, whether it is a secret
and what it means. The rest is derived from `Settings`: the Dagster resources' and the model
clients' defaults (`default`), the one-line error for a bad value (`SettingsError`), and the table
in docs/settings.md (tests/core/test_settings.py rewrites and checks it).

Everything else takes a `Settings` (or the values in it) as an argument: nothing below this module
reads `os.environ` for its own configuration.

pydantic parses and bounds the values; `from_env` reads them from any mapping of variables, the
process's environment by default (decision 0023 says why not pydantic-settings).
"""

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    AliasChoices,
    AliasGenerator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

PREFIX = "LIBRARIAN_"
"""A setting's variable is PREFIX and its name in capitals, unless it declares another."""

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Where the Gemini API key is read from, the first one set winning (the SDK's own names)."""

ANTHROPIC_KEY_VARIABLE = "ANTHROPIC_API_KEY"
"""Where the Anthropic API key is read from (the SDK's own name)."""

ANTHROPIC_DIGEST_MODEL = "claude-haiku-4-5"
"""The digest model of `anthropic` when LIBRARIAN_DIGEST_MODEL is unset: small, fast, cheap."""

CLAUDE_CODE_DIGEST_MODEL = "haiku"
"""The digest model of `claude-code` when LIBRARIAN_DIGEST_MODEL is unset: the CLI's alias for
its current small model."""


class SettingsError(ValueError):
    """A setting's variable holds a value we cannot use, or a provider lacks what it needs; the
    message, one line, names the variable."""


@dataclass(frozen=True)
class Wording:
    """How a kind of value is put in words: after "VARIABLE " in its one-line error (`wrong`, or
    `outside` when only a bound is crossed) and in docs/settings.md's `values` column.
    `{ge}`, `{le}`, `{choices}` and `{default}` are filled in from the field, so that a bound is
    written once, in its `Field`."""

    wrong: str
    outside: str = ""
    values: str = ""


def _integral(value: object) -> object:
    # float() reads "2e5" and "5.0", which are whole numbers too; pydantic's int reads neither.
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        if number.is_integer():
            return int(number)
    return value


def _http(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("not an http(s) URL")
    return value


def _model_name(value: str) -> str:
    # A model name goes into a URL path (models/<name>:generateContent): no spaces or slashes.
    if not all(c.isalnum() or c in "-._@" for c in value):
        raise ValueError("not a model name")
    return value


def _globs(value: object) -> object:
    if isinstance(value, str):
        return tuple(glob.strip() for glob in value.split(",") if glob.strip())
    return value


def _absolute(path: Path) -> Path:
    return path.expanduser().absolute()


Number = Annotated[
    float,
    Field(ge=0, allow_inf_nan=False),
    Wording("must be a number", outside="must be at least {ge}", values="a number, at least {ge}"),
]
Share = Annotated[
    float,
    Field(ge=0, le=1, allow_inf_nan=False),
    Wording("must be a number", outside="must be between {ge} and {le}", values="{ge} to {le}"),
]
Whole = Annotated[
    int,
    BeforeValidator(_integral),
    Wording("must be a whole number of at least {ge}", values="a whole number, at least {ge}"),
]
Port = Annotated[
    int,
    BeforeValidator(_integral),
    Field(ge=1, le=65535),
    Wording(
        "must be a whole number", outside="must be a port from {ge} to {le}", values="{ge} to {le}"
    ),
]
Flag = Annotated[bool, Wording("must be true or false", values="true or false")]
Url = Annotated[
    str,
    AfterValidator(_http),
    Wording("must be an http:// or https:// URL", values="an http(s) URL"),
]
# Where a path is appended (links to runs, Bot API methods): without the trailing slash.
Address = Annotated[Url, AfterValidator(lambda url: url.rstrip("/"))]
ModelName = Annotated[
    str,
    AfterValidator(_model_name),
    Wording("must be a model name such as {default}", values="a model name, e.g. `{default}`"),
]
Location = Annotated[Path, AfterValidator(_absolute), Wording("must be a path", values="a path")]
Globs = Annotated[
    tuple[str, ...],
    BeforeValidator(_globs),
    Wording("must be globs", values="globs, comma-separated"),
]
Names = Annotated[
    tuple[str, ...],
    BeforeValidator(_globs),
    Wording("must be names", values="names, comma-separated"),
]
_CHOICE = Wording("must be one of {choices}", values="{choices}")
DigestProvider = Annotated[
    Literal["offline", "gemini", "vertex", "anthropic", "claude-code"],
    BeforeValidator(str.lower),
    _CHOICE,
]
EmbedProvider = Annotated[Literal["local", "gemini", "vertex"], BeforeValidator(str.lower), _CHOICE]


def _zero_is_unset(value: int | None) -> int | None:
    # 0 means no limit, as unset does: what reads the budget tells "no limit" by None alone.
    return value or None


def _secret(default: Any = None, **kwargs: Any) -> Any:
    """A secret's field: never in a repr, so never in a log line through one."""
    return Field(default, repr=False, **kwargs)


class Settings(BaseModel):
    """The settings of one process, read from its environment by `Settings.from_env()`."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_default=True,
        use_attribute_docstrings=True,
        alias_generator=AliasGenerator(validation_alias=lambda name: PREFIX + name.upper()),
    )
    _variables: dict[str, str] = PrivateAttr(default_factory=dict)
    """The variables no field declares that the settings were read with (`variable`)."""

    home: Location = Path("~/.librarian")
    """embedded database files (`pgdata/`), `DAGSTER_HOME` (`dagster/`), staged stage outputs
    (`staging/`, redacted only), golden question files (`eval/*.jsonl`), logs"""
    database_url: str | None = _secret()
    """unset: the embedded server under `LIBRARIAN_HOME`. An external PostgreSQL with the `vector`
    extension, e.g. `postgresql://user:pw@host/db`; a server without pgvector is refused with a
    clear error"""
    person: str | None = None
    """unset: your login name. The person the sessions read on this machine are of (a pushed
    session is of the person whose token pushed it)"""
    push_exclude: Names = ()
    """project names (or folder names) `librarian push` never sends"""
    private_projects: Names = ()
    """project names (or folder names) `librarian push` sends as private: only your own tokens
    read them on the server"""
    push_max_mb: Number = Field(256.0, ge=1)
    """the largest session (its redacted files, in MB) the server takes from `librarian push`;
    a larger one is refused (413) and said"""
    exclude: Globs = ()
    """globs over project folder names (e.g. `-Users-me-private`) or transcript paths
    (`*/scratch/*`): such sessions are never requested by the sensor, taken by `librarian ingest`,
    or remembered by a backfill (their stages note `excluded`); a memory already stored stays"""
    settle_seconds: Number = 120.0
    """a session is ingested once its files have not changed for this long"""
    unreadable_wait_seconds: Number = 200.0
    """how long a run waits, reading again, for a transcript it cannot read (a folder away, a
    mount reconnecting) before that session fails, said: an outage shorter than this heals"""
    watch_interval_seconds: Number = Field(5.0, ge=0.5)
    """how often `librarian up` and `librarian mcp` probe the database (`SELECT 1`, 5 s to
    answer), every agent's folder and LIBRARIAN_HOME's free space; two failed probes in a row are
    an incident, said and healed, so a death is said within about twice this"""
    home_full_wait_seconds: Number = 60.0
    """how long `librarian up` waits, once LIBRARIAN_HOME is short of space, before it exits
    naming it (no waiting frees a disk; a supervisor's failure alert then fires)"""
    include_thinking: Flag = False
    """include thinking blocks in the digest input"""
    mcp_host: str = "127.0.0.1"
    """where `librarian mcp` and `up` serve MCP"""
    mcp_port: Port = 3201
    """the port `librarian mcp` and `up` serve MCP on"""
    recall_threshold: Share = 0.6
    """when the best ranked session's relevance (a probability) does not reach this, recall
    answers "nothing relevant" instead of guessing; lower answers more paraphrases and more
    questions nothing answers ([decisions/0021](decisions/0021-recall-that-carries.md) has the
    trade-off measured)"""
    recency_boost: Share = 0.005
    """how much a session from today multiplies its rank score by (1 + ...), halved every
    `LIBRARIAN_RECENCY_HALF_LIFE_DAYS` of its age: a tie-breaker, kept below the gap between two
    ranks"""
    recency_half_life_days: Number = 90.0
    """the age, in days, at which a session's recency boost is half what it was new"""
    importance_boost: Share = 0.002
    """how much each point of importance above 3 multiplies a session's rank score by
    (1 + ...): a tie-breaker, kept below the gap between two ranks"""
    project_boost: Number = 1.0
    """where the question comes from a project (the prompt hook's, MCP's `cwd`): how much a
    session of that project multiplies its rank score by (1 + ...), enough to lift it over
    other projects' sessions ranked a few places better"""
    branch_boost: Number = 2.0
    """how much more (1 + ...) a session of the caller's feature branch (not a trunk) of that
    project multiplies its rank score by"""
    recall_floor: Share = 0.8
    """recall@5 on the golden questions below which the `recall_quality` check warns"""
    mcp_token: str | None = _secret()
    """a bearer token the server accepts with the default scope (every domain but `private`),
    beside those of the token file; set, it turns authentication on for `/mcp`, `/sse`,
    `POST /history` (`file_history`'s parameters as plain JSON, for the PreToolUse hook) and
    `POST /recall` (plain JSON beside `/mcp`, for the prompt hook: `{"query": str, "limit":
    1..10}`, optionally `cwd` and `git_branch` (context: that project's sessions first, earlier
    work on that feature branch preferred; never a filter) and `search_chunks`' filters
    `project`, `domain`, `tags`, `any_tags`, `since`, `until` → the `search_chunks` result). Set
    it to a token from `librarian token add` and that token's scopes apply"""
    mcp_tokens: Location | None = None
    """unset: `LIBRARIAN_HOME/tokens.json`. The token file (`librarian token`): salted SHA-256
    hashes with their scopes, never a token; re-read when it changes. Tokens in it turn
    authentication on"""
    stdio_private: Flag = False
    """whether the stdio server (local, started by you) returns the `private` domain; over HTTP
    only a token with the `private` scope does"""
    telegram_bot_token: str | None = _secret(validation_alias="TELEGRAM_BOT_TOKEN")
    """unset: alerts go to the log. The bot (from @BotFather) that sends the
    [alerts](how-it-behaves.md#alerts), with `TELEGRAM_CHAT_ID`; bound by name (`dg.EnvVar`),
    and scrubbed from log lines"""
    telegram_chat_id: str | None = Field(None, validation_alias="TELEGRAM_CHAT_ID")
    """the chat (user, group or channel id) the alerts go to; both it and the bot token are
    needed"""
    telegram_base_url: Address = "https://api.telegram.org"
    """where the Bot API answers (tests point it at a fake on 127.0.0.1)"""
    notify_digests: Flag = True
    """a short message per new memory (project, summary, importance); `false` turns only these
    off"""
    gap_minutes: Number = 60.0
    """a settled session not ingested this long after it was due (or requested) is a capture
    gap"""
    quiet_hours: Number = 24.0
    """the agents' folders with no new transcript, or a machine that pushes here not heard of,
    for this long is a capture gap, and the `memory` asset turns stale (red) in the UI; `0` turns
    all off"""
    consolidation: Flag = False
    """the `library_sensor` proposes, for each project with new sessions, what they repeat as
    `_memory_library/` notes (`librarian library consolidate`), shown on the page; on the
    project's checkout here it writes only stale marks and sources, never a new line (decision
    0049)"""
    verbose: Flag = False
    """`librarian up` shows in the terminal what Dagster and the recall server log (as
    `--verbose` does); they always go to `logs/` under `LIBRARIAN_HOME`"""
    ui_url: Address = "http://127.0.0.1:3000"
    """the Dagster UI's address, for the run links in failure alerts; `librarian up` sets it to
    its `--ui-port` when unset"""
    digest_provider: DigestProvider = "offline"
    """who writes digests: `offline` (extracts, no key), `gemini` (Gemini API, needs
    `GEMINI_API_KEY`), `vertex` (Vertex AI, needs `GOOGLE_CLOUD_PROJECT`), `anthropic` (Claude
    through the Messages API, needs `ANTHROPIC_API_KEY`) or `claude-code` (your own Claude Code,
    `claude -p`, with its own login: no key); see
    [Cloud providers](how-it-behaves.md#cloud-providers-gemini-and-vertex-ai)"""
    embed_provider: EmbedProvider = "local"
    """who embeds chunks and queries: `local` (all-MiniLM-L6-v2, 384-d), `gemini` or `vertex`;
    memories embedded with another model are not searchable until re-embedded"""
    gemini_api_key: str | None = _secret(validation_alias=AliasChoices(*KEY_VARIABLES))
    """the Gemini API key, for either provider set to `gemini`"""
    gemini_api_key_variable: str | None = Field(None, validation_alias="gemini_api_key_variable")
    """Which of KEY_VARIABLES held the key, so Dagster resources bind it by name (dg.EnvVar):
    set by `from_env`, never read from a variable of its own."""
    google_cloud_project: str | None = Field(None, validation_alias="GOOGLE_CLOUD_PROJECT")
    """for `vertex`; credentials are google-auth's application default credentials (`gcloud
    auth application-default login`, a service account)"""
    google_cloud_location: str = Field("us-central1", validation_alias="GOOGLE_CLOUD_LOCATION")
    """the Vertex AI region, for `vertex`"""
    gemini_base_url: Url | None = None
    """send the SDK's requests here instead of Google's endpoint (a proxy; the tests' fake
    server)"""
    anthropic_api_key: str | None = _secret(validation_alias=ANTHROPIC_KEY_VARIABLE)
    """the Anthropic API key, for `LIBRARIAN_DIGEST_PROVIDER=anthropic`"""
    anthropic_base_url: Url | None = None
    """send the Anthropic SDK's requests here instead of Anthropic's endpoint (a proxy, a
    gateway; the tests' stand-in)"""
    claude_code_command: str = "claude"
    """the Claude Code CLI that `claude-code` runs: a name on the PATH or a path"""
    digest_model: ModelName = "gemini-2.5-flash"
    """the digest model; with `anthropic` unset means `claude-haiku-4-5`, with `claude-code`
    `haiku`"""
    embed_model: ModelName = "gemini-embedding-001"
    """the embedding model"""
    embed_dimension: Whole = Field(768, ge=1)
    """the embedding model's output dimensionality"""
    llm_attempts: Whole = Field(5, ge=1)
    """tries per model call (the first included) on 429, 5xx and timeouts before the step
    fails"""
    llm_backoff_seconds: Number = 2.0
    """the first wait between tries (doubling, with jitter) when the server does not say"""
    llm_max_wait_seconds: Number = 60.0
    """the longest wait, `Retry-After` included (a server asking for more fails the call now)"""
    llm_timeout_seconds: Number = 120.0
    """one request's timeout (a timeout is retried)"""
    llm_step_retry_seconds: Number = Field(10.0, ge=0)
    """once a digest or embedding step's tries are spent on a model service that may come back
    (429, 5xx, timeouts), how long Dagster waits before running the step again; twice that
    before the last of its 2 more runs"""
    digest_input_tokens: Whole = Field(200_000, ge=1000)
    """the most (estimated) tokens of session one digest request carries; longer sessions are
    digested in segments and merged"""
    daily_token_budget: Annotated[Whole | None, AfterValidator(_zero_is_unset)] = Field(None, ge=0)
    """unset or `0`: no limit. Digest tokens (in + out) per UTC day; once spent, digests are
    deferred to the next day (nothing spent, the run says so) and the sensor asks again then"""

    @model_validator(mode="after")
    def _providers_have_what_they_need(self) -> "Settings":
        if self.uses_gemini_api and self.gemini_api_key is None:
            raise ValueError(
                "the gemini provider needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), "
                "or use LIBRARIAN_DIGEST_PROVIDER=offline / LIBRARIAN_EMBED_PROVIDER=local"
            )
        if self.digest_provider == "anthropic" and self.anthropic_api_key is None:
            raise ValueError(
                f"the anthropic provider needs an API key: set {ANTHROPIC_KEY_VARIABLE}, "
                "or use LIBRARIAN_DIGEST_PROVIDER=offline"
            )
        if self.uses_vertex and self.google_cloud_project is None:
            raise ValueError(
                "the vertex provider needs GOOGLE_CLOUD_PROJECT (and GOOGLE_CLOUD_LOCATION, "
                f"default {default('google_cloud_location')}); credentials come from "
                "google-auth's application default credentials "
                "(`gcloud auth application-default login`)"
            )
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """The settings `env` holds (the process's environment by default); a variable that is
        blank is one that is unset. A bad value is a SettingsError of one line naming it."""
        env = os.environ if env is None else env
        given = {name: value.strip() for name in VARIABLES if (value := env.get(name, "").strip())}
        key_variable = next((name for name in KEY_VARIABLES if name in given), None)
        try:
            settings = cls.model_validate({**given, "gemini_api_key_variable": key_variable})
        except ValidationError as exc:
            raise SettingsError(_one_line(exc, given)) from None
        # What is declared elsewhere, each agent's folder (core/capture/agent.py), is read from
        # the same variables, at the same moment: Librarian's own and the agents' homes, never
        # a secret (a key is no LIBRARIAN_ variable, and a declared one is a field).
        settings._variables = {
            k: v.strip()
            for k, v in env.items()
            if v.strip() and k not in VARIABLES and (k.startswith(PREFIX) or k.endswith("_HOME"))
        }
        return settings

    def variable(self, name: str) -> str | None:
        """A LIBRARIAN_ or `*_HOME` variable no field declares, as the settings were read; None
        when it was unset or blank: for a setting declared outside this module (an agent's
        folder, core/capture/agent.py)."""
        return self._variables.get(name)

    @property
    def digest_model_name(self) -> str:
        """The digest model: LIBRARIAN_DIGEST_MODEL, else the digest provider's own default."""
        if "digest_model" not in self.model_fields_set:
            if self.digest_provider == "anthropic":
                return ANTHROPIC_DIGEST_MODEL
            if self.digest_provider == "claude-code":
                return CLAUDE_CODE_DIGEST_MODEL
        return self.digest_model

    @property
    def uses_gemini_api(self) -> bool:
        return "gemini" in (self.digest_provider, self.embed_provider)

    @property
    def uses_vertex(self) -> bool:
        return "vertex" in (self.digest_provider, self.embed_provider)

    @property
    def own_person(self) -> str:
        """The person of the sessions read on this machine: LIBRARIAN_PERSON, else the login."""
        return self.person or getpass.getuser()

    @property
    def uploads(self) -> Path:
        """Where the sessions pushed to this server are staged for the sensor
        (core/capture/uploads.py)."""
        return self.home / "uploads"

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def tokens_file(self) -> Path:
        """The recall server's bearer tokens (hashed, with their scopes)."""
        return self.mcp_tokens or self.home / "tokens.json"

    @property
    def postings_dir(self) -> Path:
        """Where searches keep the BM25 postings between processes (core/recall/postings_file.py):
        a cache, rebuilt from the store when missing."""
        return self.home / "cache" / "postings"

    @property
    def incidents_file(self) -> Path:
        """The incidents `librarian up` healed, whose failed runs are run again
        (core/service/incidents.py)."""
        return self.home / "incidents.jsonl"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def eval_dir(self) -> Path:
        """Golden question files (`*.jsonl`) the recall quality asset measures."""
        return self.home / "eval"

    @property
    def library_dir(self) -> Path:
        """Consolidation's own: each session's evidence kept (`cache/`, its watermark) and the
        proposals waiting for a person (`pending/`)."""
        return self.home / "library"

    @property
    def telegram_configured(self) -> bool:
        return bool(self.telegram_bot_token and self.telegram_chat_id)


# Filled by `from_env`, not read from a variable: not a setting of its own.
DERIVED = frozenset({"gemini_api_key_variable"})


def variables(field: FieldInfo) -> tuple[str, ...]:
    """The environment variables a field is read from, in the order they are looked up."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (alias,) if isinstance(alias, str) else ()


SETTINGS = {name: f for name, f in Settings.model_fields.items() if name not in DERIVED}
"""Every setting's field by its name, in the order docs/settings.md lists them."""
VARIABLES = {variable: name for name, f in SETTINGS.items() for variable in variables(f)}
"""Every environment variable a setting is read from, with the setting's name."""


def default(name: str) -> Any:
    """A setting's declared default, for what restates it (a Dagster resource's field, a model
    client's) so that the number is written once, here."""
    return SETTINGS[name].get_default(call_default_factory=True)


def wording(field: FieldInfo) -> Wording | None:
    """How the kind of a field's values is put in words (through an optional `X | None` too)."""
    inside = [getattr(member, "__metadata__", ()) for member in get_args(field.annotation)]
    found = [m for group in (field.metadata, *inside) for m in group if isinstance(m, Wording)]
    return found[0] if found else None


def describe(text: str, field: FieldInfo) -> str:
    """`text` with the field's own bounds, choices and default filled in."""
    ge = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    le = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    literal = field.annotation if get_origin(field.annotation) is Literal else None
    return text.format(
        ge=_number(ge),
        le=_number(le),
        choices=", ".join(get_args(literal)),
        default=field.default,
    )


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _one_line(exc: ValidationError, given: Mapping[str, str]) -> str:
    error = exc.errors()[0]
    if not error["loc"]:  # a check over several settings (a provider and what it needs)
        return str(error.get("ctx", {}).get("error", error["msg"]))
    variable = str(error["loc"][0])
    field = SETTINGS[VARIABLES[variable]]
    kind = wording(field)
    if error["type"] == "finite_number":
        must = "must be a finite number"
    elif kind is None:
        must = f"is not valid ({error['msg']})"
    elif error["type"] in ("greater_than_equal", "less_than_equal") and kind.outside:
        must = kind.outside
    else:
        must = kind.wrong
    return f"{variable} {describe(must, field)}, got {given.get(variable)!r}"

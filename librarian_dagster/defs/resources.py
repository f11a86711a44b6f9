"""The resources every stage uses, all built from one `Settings` (see `build_resources`)."""

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Self

import dagster as dg
from pydantic import Field, PrivateAttr

from librarian_dagster.core.assembly.providers import (
    ProviderConfig,
    digest_config,
    embed_config,
    make_digester,
    make_embedder,
)
from librarian_dagster.core.assembly.store import Store, migrated_url, open_store
from librarian_dagster.core.consolidation.cache import EvidenceCache
from librarian_dagster.core.consolidation.pending import Pending
from librarian_dagster.core.digest.schema import Digester
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.search import Search
from librarian_dagster.core.service import journal
from librarian_dagster.core.service.incidents import Incident, read_incidents
from librarian_dagster.core.service.telegram import Notifier
from librarian_dagster.core.settings import ANTHROPIC_KEY_VARIABLE, Settings, default
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.memories import Memories
from librarian_dagster.core.store.pool import Database
from librarian_dagster.core.store.pushes import Pushes
from librarian_dagster.dagster_internals import (
    keep_storage_connections,
    shares_instance_across_ticks,
)
from librarian_dagster.defs.staging import StagingIOManager


class StoreResource(dg.ConfigurableResource):
    """Librarian's PostgreSQL: the embedded server under `home`, or `database_url`.

    Open for the span of a run or a sensor tick: every resource of it shares one store (one pool
    of connections), opened by the first that is set up and closed by the last torn down. The
    stages take what they use of it through the resources below, one per concern, so that a
    stage's signature says what it touches; this one hands out the pool itself, for the
    monitor's queries (core/store/integrity.py).
    """

    home: str
    database_url: str | None = None
    _store: Store | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if context.run is not None and context.instance is not None:
            # A run the daemon or the UI launched runs in a process of its own, whose instance
            # would open a connection for each of its hundreds of storage calls (decision 0029).
            keep_storage_connections(context.instance)
        self._store = _shared.acquire(self.home, self.database_url)
        if context.run is None and shares_instance_across_ticks(context.instance):
            # A tick of the code server's sensors: the store stays open for the next one, as the
            # instance does, where each tick opened a pool (a connection, pgvector's types read)
            # and closed it, three times a minute (decision 0043).
            _shared.keep(self.home, self.database_url)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._store is not None:
            self._store = None
            _shared.release(self.home, self.database_url)

    def opened(self) -> Store:
        if self._store is None:
            raise RuntimeError("the store resource is used outside a run or a sensor tick")
        return self._store

    def database(self) -> Database:
        return self.opened().database


class MemoriesResource(dg.ConfigurableResource):
    """The memories (core/store/memories.py): written by the `memory` stage, read by the rest."""

    store: StoreResource

    def get(self) -> Memories:
        return self.store.opened().memories


class LedgerResource(dg.ConfigurableResource):
    """The pipeline's bookkeeping (core/store/ledger.py): sources, skips, tokens, deferrals."""

    store: StoreResource

    def get(self) -> Ledger:
        return self.store.opened().ledger

    def pushes(self) -> Pushes:
        """The record of sessions pushed from other machines, and of those machines."""
        return self.store.opened().pushes


class SearchResource(dg.ConfigurableResource):
    """Hybrid search over the memories (core/recall/search.py), for measuring recall."""

    store: StoreResource

    def get(self) -> Search:
        return self.store.opened().search


class _SharedStores:
    """The stores open in this process, by (home, database URL), with how many resources hold
    each. Dagster sets up a copy of `StoreResource` for each resource that nests it, so the
    copies meet here to share one pool."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str | None], tuple[Store, int]] = {}
        self._kept: set[tuple[str, str | None]] = set()
        self._lock = threading.Lock()

    def acquire(self, home: str, url: str | None, settings: Settings | None = None) -> Store:
        """The open store, or one opened now: of `settings` when the caller has them, else of
        the settings the environment gives this home and URL (a run the daemon launched)."""
        with self._lock:
            held = self._open.get((home, url))
            store, holders = held or (_opened(home, url, settings), 0)
            self._open[(home, url)] = (store, holders + 1)
            return store

    def keep(self, home: str, url: str | None) -> None:
        """Hold the store open until this process ends (once per store): one more holder that
        never releases it."""
        with self._lock:
            if (home, url) in self._kept:
                return
            self._kept.add((home, url))
        self.acquire(home, url)

    def release(self, home: str, url: str | None) -> None:
        with self._lock:
            store, holders = self._open.pop((home, url))
            if holders > 1:
                self._open[(home, url)] = (store, holders - 1)
            else:
                store.close()


_shared = _SharedStores()


@contextmanager
def shared_store(settings: Settings) -> Iterator[Store]:
    """The store of `settings`, open for the block and shared with every run started in it:
    one `librarian ingest` opens (and migrates) its store once, and its runs' resources take
    that one instead of each opening, and closing, a pool of their own."""
    key = (str(settings.home), settings.database_url)
    store = _shared.acquire(*key, settings)
    try:
        yield store
    finally:
        _shared.release(*key)


def _opened(home: str, url: str | None, settings: Settings | None) -> Store:
    """The store, its search keeping the BM25 postings where every process of this home does
    (a run's recall check maps them instead of loading them all)."""
    if settings is not None:
        return open_store(settings)
    return Store(_migrated(home, url), postings_dir=_settings(home, url).postings_dir)


@cache
def _settings(home: str, url: str | None) -> Settings:
    return Settings.from_env({"LIBRARIAN_HOME": home, "LIBRARIAN_DATABASE_URL": url or ""})


@cache
def _migrated(home: str, url: str | None) -> str:
    # Migrated once per process: every run and sensor tick after the first skips the check.
    return migrated_url(_settings(home, url))


class LibraryResource(dg.ConfigurableResource):
    """Consolidation (core/consolidation/): whether the sensor proposes, and where its evidence
    and the proposals waiting for a person are kept."""

    enabled: bool = default("consolidation")
    folder: str
    """LIBRARIAN_HOME/library"""

    def cache(self, project: str) -> EvidenceCache:
        return EvidenceCache(Path(self.folder) / "cache" / Pending.file_name(project))

    def pending(self) -> Pending:
        return Pending(Path(self.folder) / "pending")


class SessionFoldersResource(dg.ConfigurableResource):
    """The folders the agents write their sessions to, and how the parser reads them."""

    folders: dict[str, str]
    """Every agent's name -> its folder (LIBRARIAN_CLAUDE_CODE_SESSIONS, ...), in the
    registry's order."""
    settle_seconds: float = default("settle_seconds")
    unreadable_wait_seconds: float = default("unreadable_wait_seconds")
    include_thinking: bool = default("include_thinking")
    exclude: list[str] | None = None
    """LIBRARIAN_EXCLUDE: globs over project folder names or paths, never ingested."""
    uploads: str | None = None
    """Where the sessions pushed to this server are staged (core/capture/uploads.py)."""
    person: str | None = None
    """The person of the sessions read on this machine (LIBRARIAN_PERSON, else the login)."""
    private_projects: list[str] | None = None
    """LIBRARIAN_PRIVATE_PROJECTS: projects (or folders) only their person reads."""

    def by_agent(self) -> dict[str, Path]:
        return {agent: Path(folder) for agent, folder in self.folders.items()}

    def present(self) -> dict[str, Path]:
        """The agents' folders that exist here: the others hold no session yet."""
        return {agent: folder for agent, folder in self.by_agent().items() if folder.is_dir()}


class JournalResource(dg.ConfigurableResource):
    """Where the events a person running `librarian up` hears of are written: a session
    remembered, skipped or failed, a capture gap (core/service/journal.py)."""

    path: str
    person: str | None = None
    """This machine's person: a session of another (pushed) is said to be theirs."""

    def note(self, kind: journal.Kind, text: str) -> None:
        journal.write(Path(self.path), kind, text)


class IncidentsResource(dg.ConfigurableResource):
    """The incidents `librarian up` healed (core/service/incidents.py), whose failed runs are run
    again."""

    path: str

    def since(self, moment: float) -> list[Incident]:
        return [i for i in read_incidents(Path(self.path)) if i.healed >= moment]


# The provider's defaults are ProviderConfig's; the resource only names what the UI shows.
_DEFAULT = ProviderConfig(provider="")
_CONFIG_FIELDS = frozenset(field.name for field in fields(ProviderConfig))


class _ProviderResource(dg.ConfigurableResource):
    """What a model provider needs; the API key is bound by its variable's name (dg.EnvVar), so
    the UI shows the name, never the key."""

    # A field named like a ProviderConfig field is that field (same type and default; held so by
    # tests/defs/test_resources.py), so both directions map by name; the rest (the daily token
    # budget) are the resource's own.
    provider: str
    model: str = _DEFAULT.model
    api_key: str | None = _DEFAULT.api_key
    project: str | None = _DEFAULT.project
    location: str | None = _DEFAULT.location
    base_url: str | None = _DEFAULT.base_url
    attempts: int = _DEFAULT.attempts
    backoff_seconds: float = _DEFAULT.backoff_seconds
    max_wait_seconds: float = _DEFAULT.max_wait_seconds
    timeout_seconds: float = _DEFAULT.timeout_seconds
    step_retry_seconds: float = 10.0
    """LIBRARIAN_LLM_STEP_RETRY_SECONDS: read by `retried` (defs/assets/_common.py)."""

    @classmethod
    def from_config(cls, config: ProviderConfig, key_variable: str | None, **own) -> Self:
        """The resource for the settings' provider values; the key as dg.EnvVar, by name."""
        shared = {
            name: getattr(config, name) for name in cls.model_fields if name in _CONFIG_FIELDS
        }
        shared["api_key"] = dg.EnvVar(key_variable) if key_variable and config.api_key else None
        return cls(**shared, **own)

    def _config(self) -> ProviderConfig:
        return ProviderConfig(**self.model_dump(include=set(_CONFIG_FIELDS)))


class DigesterResource(_ProviderResource):
    """Who writes the digest: `offline` (no key), `gemini` (Gemini API), `vertex` (Vertex AI),
    `anthropic` (Claude, Messages API) or `claude-code` (the user's own `claude -p`)."""

    provider: str = default("digest_provider")
    input_token_budget: int = _DEFAULT.input_token_budget
    command: str = _DEFAULT.command
    daily_token_budget: int | None = None

    def get(self) -> Digester:
        try:
            return _digester(self._config())
        except ValueError as exc:
            raise dg.Failure(str(exc), allow_retries=False) from None


class EmbedderResource(_ProviderResource):
    """Who embeds chunks: `local` (all-MiniLM-L6-v2 from a wheel, CPU), `gemini` or `vertex`."""

    provider: str = default("embed_provider")
    dimension: int = default("embed_dimension")

    def get(self) -> Embedder:
        try:
            return _embedder(self._config())
        except ValueError as exc:
            raise dg.Failure(str(exc), allow_retries=False) from None


# One provider object per configuration and process: clients (and their connections) are reused.
@cache
def _digester(config: ProviderConfig) -> Digester:
    return make_digester(config)


@cache
def _embedder(config: ProviderConfig) -> Embedder:
    return make_embedder(config)


class QualityResource(dg.ConfigurableResource):
    """How recall quality is measured: the golden files' folder, the floor, the threshold."""

    eval_dir: str
    recall_floor: float = default("recall_floor")
    min_relevance: float = default("recall_threshold")


class NotifierResource(dg.ConfigurableResource):
    """Where alerts go: a Telegram chat when a bot token and a chat id are set, else the log."""

    base_url: str = default("telegram_base_url")
    token: str | None = Field(default=None, repr=False)
    chat_id: str | None = None
    ui_url: str = default("ui_url")
    """The Dagster UI's address, for links to runs."""
    notify_digests: bool = default("notify_digests")
    gap_minutes: float = default("gap_minutes")
    quiet_hours: float = default("quiet_hours")

    def notifier(self, log: logging.Logger | dg.DagsterLogManager) -> Notifier:
        """A notifier for one tick or run, logging through `log` (the tick's or run's log)."""
        return Notifier(
            self.base_url, self.token, self.chat_id, log_info=log.info, log_warning=log.warning
        )


class ClockResource(dg.ConfigurableResource):
    """What time it is for the alert sensors: the system clock, or a fixed instant in tests."""

    frozen_at: float | None = None

    def now(self) -> float:
        return time.time() if self.frozen_at is None else self.frozen_at


TELEGRAM_TOKEN_VAR = "TELEGRAM_BOT_TOKEN"


def _folders(settings: Settings) -> SessionFoldersResource:
    from librarian_dagster.core.capture.agents import folders

    return SessionFoldersResource(
        folders={agent: str(folder) for agent, folder in folders(settings).items()},
        settle_seconds=settings.settle_seconds,
        unreadable_wait_seconds=settings.unreadable_wait_seconds,
        include_thinking=settings.include_thinking,
        exclude=list(settings.exclude),
        uploads=str(settings.uploads),
        person=settings.own_person,
        private_projects=list(settings.private_projects),
    )


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource | dg.IOManager]:
    """Every resource of the code location, bound to these settings."""
    store = StoreResource(home=str(settings.home), database_url=settings.database_url)
    return {
        "store": store,
        "memories": MemoriesResource(store=store),
        "ledger": LedgerResource(store=store),
        "search": SearchResource(store=store),
        # The default IO manager: every stage hands its output on through the staged files.
        "io_manager": StagingIOManager(home=str(settings.home)),
        "folders": _folders(settings),
        "digester": DigesterResource.from_config(
            digest_config(settings),
            ANTHROPIC_KEY_VARIABLE
            if settings.digest_provider == "anthropic"
            else settings.gemini_api_key_variable,
            daily_token_budget=settings.daily_token_budget,
            step_retry_seconds=settings.llm_step_retry_seconds,
        ),
        "embedder": EmbedderResource.from_config(
            embed_config(settings),
            settings.gemini_api_key_variable,
            step_retry_seconds=settings.llm_step_retry_seconds,
        ),
        "library": LibraryResource(
            enabled=settings.consolidation, folder=str(settings.library_dir)
        ),
        "quality": QualityResource(
            eval_dir=str(settings.eval_dir),
            recall_floor=settings.recall_floor,
            min_relevance=settings.recall_threshold,
        ),
        "notifier": NotifierResource(
            base_url=settings.telegram_base_url,
            # By name, not value: the UI's resource page then shows the variable, not the token.
            token=dg.EnvVar(TELEGRAM_TOKEN_VAR) if settings.telegram_bot_token else None,
            chat_id=settings.telegram_chat_id,
            ui_url=settings.ui_url,
            notify_digests=settings.notify_digests,
            gap_minutes=settings.gap_minutes,
            quiet_hours=settings.quiet_hours,
        ),
        "clock": ClockResource(),
        "incidents": IncidentsResource(path=str(settings.incidents_file)),
        "journal": JournalResource(
            path=str(journal.journal_path(settings.log_dir)), person=settings.own_person
        ),
    }

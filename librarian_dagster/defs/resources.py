"""The resources every stage uses, all built from one `Settings` (see `build_resources`)."""

from functools import cache

import dagster as dg

from librarian_dagster.core.digest import Digester, OfflineDigester
from librarian_dagster.core.embeddings import Embedder, local_embedder
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import Store, open_store
from librarian_dagster.defs.staging import StagingIOManager


class StoreResource(dg.ConfigurableResource):
    """Librarian's PostgreSQL: the embedded server under `home`, or `database_url`."""

    home: str
    database_url: str | None = None

    def get(self) -> Store:
        return _migrated_store(self.home, self.database_url)


@cache
def _migrated_store(home: str, url: str | None) -> Store:
    # Migrate once per process: every run worker and the sensor share the same schema check.
    return open_store(
        Settings.from_env({"LIBRARIAN_HOME": home, "LIBRARIAN_DATABASE_URL": url or ""})
    )


class MirrorResource(dg.ConfigurableResource):
    """The folder of Claude Code transcripts and how the parser reads it."""

    path: str
    settle_seconds: float = 120.0
    include_thinking: bool = False
    exclude: list[str] | None = None
    """LIBRARIAN_EXCLUDE: globs over project folder names or paths, never ingested."""


class DigesterResource(dg.ConfigurableResource):
    """Who writes the digest. `offline` needs no key; LLM providers come as other values."""

    provider: str = "offline"

    def get(self) -> Digester:
        if self.provider == "offline":
            return OfflineDigester()
        raise dg.Failure(f"unknown digester provider {self.provider!r} (known: offline)")


class EmbedderResource(dg.ConfigurableResource):
    """Who embeds chunks. `local` is all-MiniLM-L6-v2 shipped in a wheel, run on the CPU."""

    provider: str = "local"

    def get(self) -> Embedder:
        if self.provider == "local":
            return local_embedder()
        raise dg.Failure(f"unknown embedder provider {self.provider!r} (known: local)")


class QualityResource(dg.ConfigurableResource):
    """How recall quality is measured: the golden files' folder, the floor, the threshold."""

    eval_dir: str
    recall_floor: float = 0.8
    min_relevance: float = 0.0


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource | dg.IOManager]:
    """Every resource of the code location, bound to these settings."""
    return {
        "store": StoreResource(home=str(settings.home), database_url=settings.database_url),
        # The default IO manager: every stage hands its output on through the staged files.
        "io_manager": StagingIOManager(home=str(settings.home)),
        "mirror": MirrorResource(
            path=str(settings.mirror),
            settle_seconds=settings.settle_seconds,
            include_thinking=settings.include_thinking,
            exclude=list(settings.exclude),
        ),
        "digester": DigesterResource(),
        "embedder": EmbedderResource(),
        "quality": QualityResource(
            eval_dir=str(settings.eval_dir),
            recall_floor=settings.recall_floor,
            min_relevance=settings.recall_threshold,
        ),
    }

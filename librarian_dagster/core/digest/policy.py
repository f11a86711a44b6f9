"""When a session's digest is reused, written or deferred, and what a written one costs: the
rules of the digest stage, apart from Dagster (defs/assets/session_digest.py calls `DigestPolicy`).

Keyed by (redacted content hash, prompt version, model): an unchanged session costs no call.
Once the day's token budget is spent, a digest that would call a model waits for the next day
(UTC) instead. A failed call's tokens are counted all the same.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.schema import Digester, DigestRecord, DigestResult, content_hash
from librarian_dagster.core.digest.tags import normalize_tags
from librarian_dagster.core.models.calls import ProviderError

KNOWN_TAGS = 30
"""How many of the store's most used tags the digester is offered."""


class StoredDigest(Protocol):
    """What the store holds of a session's digest (core/store/rows.py's `MemoryRecord`)."""

    @property
    def content_hash(self) -> str: ...
    @property
    def digest_model(self) -> str: ...
    def digest_record(self) -> DigestRecord: ...


class HeldMemories(Protocol):
    """The store's memories, as the digest stage reads them (core/store/memories.py)."""

    def memory_record(self, session_id: str) -> StoredDigest | None: ...
    def top_tags(self, limit: int = ...) -> list[str]: ...


class TokenLedger(Protocol):
    """The tokens spent and the digests deferred (core/store/ledger.py)."""

    def tokens_spent_today(self) -> int: ...
    def record_usage(
        self, model: str, input_tokens: int, output_tokens: int, calls: int
    ) -> None: ...
    def defer_digest(self, session_id: str) -> None: ...
    def clear_deferral(self, session_id: str) -> None: ...


@dataclass(frozen=True)
class Digested:
    """A digest to hand on: the stored one reused, or one just written."""

    record: DigestRecord
    reused: bool
    method: str = "reused"
    """How the session was read (`DigestResult.method`); "reused" when no model was asked."""
    calls: int = 0


@dataclass(frozen=True)
class Deferred:
    """The day's token budget is spent: the digest waits for the next day (UTC)."""

    spent: int
    budget: int


class DigestFailed(Exception):
    """The digester gave no digest; `transient`: another try may."""

    def __init__(self, message: str, model: str, calls: int, transient: bool) -> None:
        super().__init__(message)
        self.model, self.calls, self.transient = model, calls, transient


class DigestPolicy:
    def __init__(
        self,
        digester: Digester,
        memories: HeldMemories,
        ledger: TokenLedger,
        daily_token_budget: int | None,
    ) -> None:
        """`daily_token_budget`: None for a digester that calls no model (nothing to count)."""
        self.digester, self.memories, self.ledger = digester, memories, ledger
        self.budget = daily_token_budget

    def digest(self, session_id: str, session: Session) -> Digested | Deferred:
        """The session's digest: reused when the same input met the same digester (prompt
        version included), else written unless today's budget is spent. Raises DigestFailed."""
        fingerprint = content_hash(session)
        model = self.digester.model_name
        stored = self.memories.memory_record(session_id)
        if stored is not None and (stored.content_hash, stored.digest_model) == (
            fingerprint,
            model,
        ):
            return Digested(stored.digest_record(), reused=True)
        # Asked per session: the sessions before it in this run have spent their share.
        spent = self.ledger.tokens_spent_today() if self.budget else 0
        if self.budget and spent >= self.budget:
            self.ledger.defer_digest(session_id)
            return Deferred(spent, self.budget)
        written = self._write(session_id, session, self.memories.top_tags(KNOWN_TAGS))
        record = DigestRecord(
            # One spelling per tag on the write path, whoever wrote the digest.
            digest=written.digest.model_copy(update={"tags": normalize_tags(written.digest.tags)}),
            model=written.model,
            input_tokens=written.input_tokens,
            output_tokens=written.output_tokens,
            content_hash=fingerprint,
        )
        self.ledger.clear_deferral(session_id)
        return Digested(record, reused=False, method=written.method, calls=written.calls)

    def _write(self, session_id: str, session: Session, known_tags: Sequence[str]) -> DigestResult:
        model = self.digester.model_name
        try:
            result = self.digester.digest(session, known_tags=known_tags)
        except ProviderError as exc:
            if exc.calls:
                self.ledger.record_usage(model, exc.input_tokens, exc.output_tokens, exc.calls)
            raise DigestFailed(
                f"no digest for session {session_id}: {exc}", model, exc.calls, exc.transient
            ) from None
        if result.calls:
            self.ledger.record_usage(model, result.input_tokens, result.output_tokens, result.calls)
        return result

"""The digest stage's rules without Dagster: reuse, the daily budget, a failed call counted."""

import pytest

from librarian_dagster.core.capture.readers import parse_session, session_files_for
from librarian_dagster.core.digest.offline import OfflineDigester
from librarian_dagster.core.digest.policy import Deferred, Digested, DigestFailed, DigestPolicy
from librarian_dagster.core.models.calls import ProviderError, ProviderUnavailable
from librarian_dagster.core.store.rows import memory_of
from tests.conftest import TRANSCRIPTS

TINY = TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl"


def _session():
    [files] = session_files_for([TINY])
    return parse_session(files)


class _Failing(OfflineDigester):
    """A model service that fails after spending: what a digester reports then."""

    model_name = "a-model"

    def __init__(self, error: ProviderError) -> None:
        self.error = error

    def digest(self, session, known_tags=()):
        raise self.error


def test_a_digest_is_written_then_reused_for_the_same_input(store):
    session = _session()
    policy = DigestPolicy(OfflineDigester(), store.memories, store.ledger, None)
    written = policy.digest(session.session_id, session)
    assert isinstance(written, Digested) and not written.reused and written.method != "reused"
    store.memories.replace_memory(memory_of(session, written.record, "m"), [])
    again = policy.digest(session.session_id, session)
    assert isinstance(again, Digested) and again.reused and again.calls == 0
    assert again.record.digest == written.record.digest
    session.turns.pop()  # another input: written again
    changed = policy.digest(session.session_id, session)
    assert isinstance(changed, Digested) and not changed.reused


def test_a_spent_budget_defers_and_the_next_digest_clears_it(store):
    session = _session()
    store.ledger.record_usage("a-model", 60, 40, 1)
    deferred = DigestPolicy(OfflineDigester(), store.memories, store.ledger, 100)
    assert deferred.digest(session.session_id, session) == Deferred(spent=100, budget=100)
    assert store.ledger.deferred([session.session_id]) == {session.session_id}
    room = DigestPolicy(OfflineDigester(), store.memories, store.ledger, 1000)
    assert isinstance(room.digest(session.session_id, session), Digested)
    assert store.ledger.deferred([session.session_id]) == set()


@pytest.mark.parametrize("error, transient", [(ProviderError, False), (ProviderUnavailable, True)])
def test_a_failed_call_is_counted_and_says_whether_to_try_again(store, error, transient):
    session = _session()
    failure = error("the service said no")
    failure.input_tokens, failure.output_tokens, failure.calls = 30, 5, 2
    policy = DigestPolicy(_Failing(failure), store.memories, store.ledger, 1000)
    with pytest.raises(DigestFailed, match="the service said no") as raised:
        policy.digest(session.session_id, session)
    assert (raised.value.transient, raised.value.calls) == (transient, 2)
    assert store.ledger.tokens_spent_today() == 35

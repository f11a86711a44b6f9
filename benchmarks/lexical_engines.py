"""Our BM25 index (core/recall/lexical.py) against tantivy, an embedded search library, on one
store: the lists search fuses, what each costs, and what forgetting leaves behind.

    uv run --with tantivy==0.27.0 python benchmarks/lexical_engines.py --home H | --url U

H is a home holding a store (benchmarks/recall.py's: the three dev projects); `--url U` names a
store instead (recall_latency.py's, kept with --keep-store: 100,000 or 1,000,000 chunks), whose
eval figures are not measured. For each engine:
- build: ours loads its postings from the store (one full load, as a first process does);
  tantivy indexes every chunk's text (its English stemmer, one writer thread, 128 MB heap), which
  is what its write path would cost at ingest;
- the BM25 lists of every golden question (the `CANDIDATES` best chunks of each layer), p50 /
  p95 in this process, and how far tantivy's lists agree with ours (top-10 overlap);
- `librarian eval`'s figures with tantivy's lists in the fusion in place of ours (the vector
  lists, the boosts and the relevance unchanged; the BM25 vote's weight, the share of the
  question's idf mass its best chunk holds, is ours in both: tantivy does not report it);
- resident memory added, and the index's size on disk;
- forgetting: a session's documents deleted and committed, is a word only it held still in the
  index's files?
tantivy is not a dependency: `uv run --with` brings it for this run only.
"""

import argparse
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tantivy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import GOLDEN  # noqa: E402
from benchmarks._results import add_record_option, record  # noqa: E402
from librarian_dagster.core.assembly.providers import configured_embedder  # noqa: E402
from librarian_dagster.core.assembly.store import Store  # noqa: E402
from librarian_dagster.core.recall.evaluation import (  # noqa: E402
    compare_modes,
    load_golden,
    store_projects,
    with_projects,
)
from librarian_dagster.core.recall.lexical import LexicalIndex  # noqa: E402
from librarian_dagster.core.recall.ranking import Boosts  # noqa: E402
from librarian_dagster.core.recall.search import Search  # noqa: E402
from librarian_dagster.core.recall.terms import question_terms  # noqa: E402
from librarian_dagster.core.settings import Settings  # noqa: E402
from librarian_dagster.core.store.database import database_url  # noqa: E402
from librarian_dagster.core.store.memories import _count_chunks as count_chunks  # noqa: E402
from librarian_dagster.core.store.pool import CANDIDATES  # noqa: E402

FILES = (GOLDEN, GOLDEN.with_name("negatives-dev.jsonl"), GOLDEN.with_name("golden-xdev.jsonl"))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def document(
    chunk_id: int, session: str, exchange: bool, model: str, text: str
) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_unsigned("id", chunk_id)
    doc.add_text("session", session)
    doc.add_unsigned("exchange", int(exchange))
    doc.add_text("model", model)
    doc.add_text("text", text)
    return doc


def build_tantivy(folder: Path, chunks: list[tuple]) -> tuple[tantivy.Index, float]:
    schema = tantivy.SchemaBuilder()
    schema.add_text_field("text", stored=False, tokenizer_name="en_stem")
    schema.add_unsigned_field("id", stored=True, indexed=True, fast=True)
    schema.add_text_field("session", stored=True, tokenizer_name="raw")
    schema.add_unsigned_field("exchange", stored=True, indexed=True, fast=True)
    schema.add_text_field("model", stored=False, tokenizer_name="raw")
    index = tantivy.Index(schema.build(), path=str(folder))
    started = time.perf_counter()
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for chunk in chunks:
        writer.add_document(document(*chunk))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index, time.perf_counter() - started


class TantivyLists:
    """tantivy's BM25 lists, shaped as `Scored` is for candidates.gather (`top`, `best_covered`);
    the session facts and the idf-mass vote are our index's (`ours`)."""

    def __init__(self, index: tantivy.Index, ours: LexicalIndex) -> None:
        self.index, self.ours, self.searcher = index, ours, index.searcher()
        self.schema = index.schema

    def refresh(self, conn, generation) -> None:
        self.ours.refresh(conn, generation)

    def private_sessions(self, viewer: str | None = None) -> list[str]:
        return self.ours.private_sessions(viewer)

    def session_facts(self, sessions):
        return self.ours.session_facts(sessions)

    def score(
        self,
        terms,
        avgdl,
        model,
        sessions=None,
        include_private=True,
        pool=None,
        agent=None,
        viewer=None,
    ):
        ours = self.ours.score(terms, avgdl, model, sessions, include_private, pool, agent, viewer)
        if include_private:
            hidden = set(self.ours.private_sessions(viewer)) if viewer is not None else set()
        else:
            hidden = set(self.ours.private_sessions())
        if agent is not None:  # the benchmark's questions filter no agent: not measured here
            raise NotImplementedError("tantivy's lists take no agent filter")
        return _Lists(self, self.question, model, sessions, hidden, ours.best_covered)

    question = ""


class _Lists:
    def __init__(self, lists, question, model, sessions, hidden, best_covered) -> None:
        self.lists, self.question, self.model = lists, question, model
        self.sessions, self.hidden, self.best_covered = sessions, hidden, best_covered

    def top(self, exchange: bool, pool: int) -> list[tuple[int, str, float]]:
        return tantivy_top(self.lists, self.question, exchange, pool, self.model, self.sessions,
                           self.hidden)  # fmt: skip


class _Asking:
    """The store's search with tantivy's lists in place of ours, told each question's text
    (the lists are asked by terms alone)."""

    def __init__(self, store: Store, lists: TantivyLists) -> None:
        self.search = Search(store.database, lexical=lists)
        self.lists = lists

    def find(self, query_text, *args, **kwargs):
        self.lists.question = query_text
        return self.search.find(query_text, *args, **kwargs)

    def embedding_spaces(self):
        return self.search.embedding_spaces()

    def embed_meanwhile(self, embed, text):
        return self.search.embed_meanwhile(embed, text)


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text))


def tantivy_top(lists, question, exchange, pool, model, sessions=None, hidden=()):
    text, _errors = lists.index.parse_query_lenient(_words(question) or "nothing", ["text"])
    schema = lists.schema
    query = tantivy.Query.boolean_query([
        (tantivy.Occur.Must, text),
        (tantivy.Occur.Must, tantivy.Query.term_query(schema, "exchange", int(exchange))),
        (tantivy.Occur.Must, tantivy.Query.term_query(schema, "model", model)),
        *((tantivy.Occur.MustNot, tantivy.Query.term_query(schema, "session", s)) for s in hidden),
    ])  # fmt: skip
    # Filters by session (a caller's project, tags...) are applied after: eval asks none.
    found = lists.searcher.search(query, pool * (3 if sessions is not None else 1)).hits
    out = []
    for score, address in sorted(found, key=lambda h: -h[0]):
        doc = lists.searcher.doc(address)
        session = doc["session"][0]
        if sessions is None or session in sessions:
            out.append((int(doc["id"][0]), session, float(score)))
    return out[:pool]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--home", type=Path, help="a home with a store: eval figures too")
    where.add_argument("--url", help="a store's URL (recall_latency.py's kept store): no eval")
    parser.add_argument("--golden", nargs="+", type=Path, default=list(FILES))
    add_record_option(parser)
    args = parser.parse_args()
    home = {"LIBRARIAN_HOME": str(args.home)} if args.home else {}
    settings = Settings.from_env({**os.environ, **home})
    store = Store(args.url or database_url(settings))
    embedder = configured_embedder(settings)
    with store.database.connection() as conn:
        chunks = conn.execute(
            "SELECT id, session_id, section = 'exchange', embedding_model, text"
            " FROM indexed_chunks ORDER BY id"
        ).fetchall()
        chunks = [tuple(r.values()) for r in chunks]
        generation = conn.execute("SELECT generation FROM chunk_stats").fetchone()["generation"]

    before = rss_mb()
    ours = LexicalIndex(None)
    started = time.perf_counter()
    with store.database.connection() as conn:
        ours.refresh(conn, generation)
    ours_build = time.perf_counter() - started
    ours_rss = rss_mb() - before

    kept = Path(tempfile.mkdtemp(prefix="postings-"))
    with store.database.connection() as conn:
        LexicalIndex(kept).refresh(conn, generation)  # loads in full, then writes the file
        started = time.perf_counter()
        mapped = LexicalIndex(kept)
        mapped.refresh(conn, generation)
        mapped.score([("the", 1.0)], 50.0, embedder.model_name, None, True, CANDIDATES)
        ours_reopened = time.perf_counter() - started
    kept_mb = sum(p.stat().st_size for p in kept.rglob("*") if p.is_file()) / 1e6
    shutil.rmtree(kept, ignore_errors=True)

    folder = Path(tempfile.mkdtemp(prefix="tantivy-"))
    before = rss_mb()
    index, tantivy_build = build_tantivy(folder, chunks)
    lists = TantivyLists(index, ours)
    tantivy_rss = rss_mb() - before
    disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    started = time.perf_counter()
    reopened = tantivy.Index.open(str(folder))
    first = tantivy_top(TantivyLists(reopened, ours), "the", False, CANDIDATES, embedder.model_name)
    tantivy_reopened = time.perf_counter() - started
    print(
        f"a new process's first BM25 list: ours {ours_reopened:.2f} s with its postings file "
        f"({kept_mb:.1f} MB), tantivy {tantivy_reopened:.2f} s ({len(first)} found)"
    )
    print(f"{len(chunks):,} chunks; ours loaded in {ours_build:.2f} s (+{ours_rss:.0f} MB peak), "
          f"tantivy built in {tantivy_build:.2f} s ({len(chunks) / tantivy_build:,.0f} chunks/s, "
          f"+{tantivy_rss:.0f} MB peak), {disk / 1e6:.1f} MB on disk")  # fmt: skip

    questions = load_golden(args.golden)
    model = embedder.model_name
    ours_ms, tantivy_ms, overlap = [], [], []
    for q in questions:
        with store.database.connection() as conn:
            terms = question_terms(conn, q.query)
        t = time.perf_counter()
        scored = ours.score(list(terms.idf.items()), terms.avgdl, model, None, False, CANDIDATES)
        ours_lists = [scored.top(layer, CANDIDATES) for layer in (False, True)]
        ours_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        hidden = set(ours.private_sessions())
        theirs = [tantivy_top(lists, q.query, layer, CANDIDATES, model, None, hidden)
                  for layer in (False, True)]  # fmt: skip
        tantivy_ms.append((time.perf_counter() - t) * 1000)
        for a, b in zip(ours_lists, theirs, strict=True):
            if a:
                shared = {c[0] for c in a[:10]} & {c[0] for c in b[:10]}
                overlap.append(len(shared) / min(10, len(a)))
    print(f"BM25 lists of {len(questions)} questions, p50 / p95 ms: ours "
          f"{percentile(ours_ms, 50):.2f} / {percentile(ours_ms, 95):.2f}, tantivy "
          f"{percentile(tantivy_ms, 50):.2f} / {percentile(tantivy_ms, 95):.2f}; "
          f"top-10 overlap {statistics.mean(overlap):.3f}")  # fmt: skip

    recall_at_5 = {"ours": "-", "tantivy": "-"}  # no eval on a store of copies (--url)
    if args.home:  # a store of real sessions, which the golden questions are about
        questions = with_projects(questions, store_projects(store.memories))
        for name, search in (("ours", store.search), ("tantivy", _Asking(store, lists))):
            report = compare_modes(
                questions,
                search,
                embedder,
                min_relevance=settings.recall_threshold,
                boosts=Boosts.of(settings),
                ks=(1, 5, 10),
                modes=("hybrid",),
            )
            m = report["hybrid"].overall  # fmt: skip
            print(f"eval with {name}'s BM25: recall@1 {m.recall_at[1]:.3f}, recall@5 "
                  f"{m.recall_at[5]:.3f}, MRR {m.mrr:.3f}, abstain {m.abstain_rate:.3f}, false "
                  f"abstain {m.false_abstain_rate:.3f}")  # fmt: skip
            recall_at_5[name] = f"{m.recall_at[5]:.3f}"
    forget_check(index, chunks, folder)
    write_costs(store, index, chunks)
    shutil.rmtree(folder, ignore_errors=True)
    store.close()
    if args.record:
        record("lexical_engines", {
            "chunks": len(chunks),
            **{f"{engine} {p} ms": f"{percentile(ms, q):.1f}"
               for engine, ms in (("ours", ours_ms), ("tantivy", tantivy_ms))
               for p, q in (("p50", 50), ("p95", 95))},
            "top-10 overlap": f"{statistics.mean(overlap):.3f}",
            "recall@5 ours": recall_at_5["ours"], "recall@5 tantivy": recall_at_5["tantivy"],
        })  # fmt: skip


def write_costs(store: Store, index: tantivy.Index, chunks: list[tuple], n: int = 50) -> None:
    """What one session's write adds for each engine: ours, the BM25 statistics updated in the
    write's transaction (rolled back here); tantivy, its documents added and committed."""
    by_session: dict[str, list[tuple]] = {}
    for chunk in chunks:
        by_session.setdefault(chunk[1], []).append(chunk)
    sessions = sorted(by_session)[:: max(len(by_session) // n, 1)][:n]
    ours, theirs = [], []
    for session in sessions:
        with store.database.connection() as conn, conn.transaction(force_rollback=True):
            started = time.perf_counter()
            count_chunks(conn, session, 1)
            ours.append((time.perf_counter() - started) * 1000)
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    for session in sessions:
        started = time.perf_counter()
        for chunk in by_session[session]:
            writer.add_document(document(*chunk))
        writer.commit()
        theirs.append((time.perf_counter() - started) * 1000)
    writer.wait_merging_threads()
    print(
        f"a session's write, p50 / p95 ms over {len(sessions)} sessions: ours (statistics) "
        f"{percentile(ours, 50):.1f} / {percentile(ours, 95):.1f}, tantivy (add + commit) "
        f"{percentile(theirs, 50):.1f} / {percentile(theirs, 95):.1f}"
    )


def forget_check(index: tantivy.Index, chunks: list[tuple], folder: Path) -> None:
    """Delete one session's documents: is a term only it held still counted, still found?"""
    stems = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(
        tantivy.Filter.remove_long(40)).filter(tantivy.Filter.lowercase()).filter(
        tantivy.Filter.stemmer("english")).build()  # fmt: skip
    held: dict[str, set[str]] = {}
    for _id, session, _exchange, _model, text in chunks:
        for term in set(stems.analyze(text)):
            if len(term) >= 8 and term.isalpha():
                held.setdefault(term, set()).add(session)
    only = next(((t, s) for t, s in sorted(held.items()) if len(s) == 1), None)
    if only is None:  # a store of copies: every term is in many sessions
        print("forget: no term is held by one session alone here; not measured")
        return
    term, [session] = only
    before = index.searcher().doc_freq("text", term)
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    writer.delete_documents_by_term("session", session)
    writer.commit()
    writer.garbage_collect_files()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    query = tantivy.Query.term_query(index.schema, "text", term)
    found = len(searcher.search(query, 10).hits)
    raw = [p.name for p in folder.rglob("*") if p.is_file() and term.encode() in p.read_bytes()]
    print(
        f"forget: session {session} deleted; the term {term!r} only it held: doc_freq "
        f"{before} -> {searcher.doc_freq('text', term)}, found by a search {found}, its bytes "
        f"in the index's files: {raw or 'none'} ({searcher.num_segments} segment(s))"
    )


if __name__ == "__main__":
    main()

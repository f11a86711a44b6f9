"""Prompt recall replayed: each remembered session's opening prompt, asked as the hook would ask it.

For every session in the store, its first typed prompt (parsed from its transcript as ingest
parses it) is asked of recall with the cwd and git branch it was typed in (from the transcript's
first records, as the hook would read them), against only the memories that existed before it
(`until` = a moment before the session began): the same call as `POST /recall` makes (the
`search_chunks` tool's `recall`, with the server's threshold and boosts). The answer is written
as `POST /recall` writes it for the hooks (core/recall/hook_text.py), within its default budget.

Reported, per project and in all:
- injected: the share of asked prompts that get a context (prompts the hook skips, short ones and
  slash commands, are counted apart);
- branch recall: of the sessions on a feature branch (not a trunk) that an earlier session of
  the same project already worked on, the share whose context names such an earlier session
  (target >= 0.80);
- named of project: the share of the sessions a context names that are of the prompt's own
  project (what the project preference buys), and how many sessions a context names;
- chars: the characters injected, mean / p50 / p95 over the prompts that get a context.
The last line is one JSON object of those figures.

    uv run python benchmarks/replay.py --home /tmp/devstore [--corpus DIR] [--projects cli,x]
        [--project-boost 0.25] [--branch-boost 0.05] [--branch-logit 1.0] [--grid]

`--corpus DIR` finds each session's transcript under DIR by its id (`<id>.jsonl`); without it the
store's `session_sources.main_path` says where it is. The store is only read (no migration).
`--grid` tries combinations of the three constants and prints one table row for each.
"""

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from _results import add_record_option, record

from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.capture.records import iter_records
from librarian_dagster.core.digest.offline import exchanges
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall import answer as recall_module
from librarian_dagster.core.recall.answer import recall
from librarian_dagster.core.recall.hook_text import RECALL_BUDGET, recall_text, skip_reason
from librarian_dagster.core.recall.ranking import Boosts, RecallContext, is_feature_branch
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import database_url
from librarian_dagster.core.store.queries import SearchFilters

LIMIT = 3
"""Chunks the hooks ask for."""
MAX_QUERY_CHARS = 2000
"""Of a prompt, what the hooks send (the endpoint's limit)."""
# Before the session's first record: its own memory must not answer its own opening prompt.
_BEFORE = timedelta(microseconds=1)


@dataclass(frozen=True)
class Opening:
    session_id: str
    project: str
    started_at: datetime
    prompt: str
    cwd: str | None
    branch: str | None
    earlier_same_branch: frozenset[str]
    """Earlier sessions of the same project whose stored branch is this feature branch."""


def _where_typed(path: Path) -> tuple[str | None, str | None]:
    """The cwd and branch of the transcript's first record that has a cwd: where the session
    began. Claude Code writes `gitBranch` empty outside a repository and `HEAD` when detached;
    the hook reads no branch there."""
    for entry in iter_records(path):
        cwd = entry.get("cwd")
        if isinstance(cwd, str) and cwd:
            branch = entry.get("gitBranch")
            ok = isinstance(branch, str) and branch and branch != "HEAD"
            return cwd, branch if ok else None
    return None, None


def _transcripts(corpus: Path | None, rows: list[dict]) -> dict[str, Path]:
    if corpus is None:
        return {r["session_id"]: Path(r["main_path"]) for r in rows if r["main_path"]}
    wanted = {r["session_id"] for r in rows}
    return {p.stem: p for p in corpus.rglob("*.jsonl") if p.stem in wanted}


def openings(store: Store, corpus: Path | None) -> tuple[list[Opening], int]:
    """Every remembered session with a typed opening prompt, oldest first; and how many had
    none (no transcript found, or no typed prompt)."""
    with store.database.connection() as conn:
        rows = conn.execute(
            """
            SELECT m.session_id, m.project, m.git_branch, m.started_at, s.main_path
            FROM memories m LEFT JOIN session_sources s USING (session_id)
            WHERE m.started_at IS NOT NULL
            ORDER BY m.started_at, m.session_id
            """
        ).fetchall()
    paths = _transcripts(corpus, rows)
    found: list[Opening] = []
    missing = 0
    for row in rows:
        path = paths.get(row["session_id"])
        if path is None or not path.is_file():
            missing += 1
            continue
        session = parse_session(SessionFiles(row["session_id"], path))
        prompt = next((x.prompt for x in exchanges(session.turns) if x.prompt), None)
        if prompt is None:
            missing += 1
            continue
        cwd, branch = _where_typed(path)
        earlier = frozenset(
            r["session_id"]
            for r in rows
            if is_feature_branch(branch)
            and r["project"] == row["project"]
            and r["git_branch"] == branch
            and r["started_at"] < row["started_at"]
        )
        found.append(
            Opening(row["session_id"], row["project"], row["started_at"], prompt, cwd, branch,
                    earlier)
        )  # fmt: skip
    return found, missing


def replay_one(
    store: Store,
    embedder: Embedder,
    settings: Settings,
    boosts: Boosts,
    opening: Opening,
    limit: int,
) -> tuple[str | None, list[tuple[str, str]]] | None:
    """(the context the hook would inject, the sessions it names with their projects); None
    when the hook would
    not ask (a short prompt, a slash command)."""
    if skip_reason(opening.prompt):
        return None
    context = RecallContext(opening.cwd, opening.branch) if opening.cwd else None
    # What the search_chunks tool does for POST /recall (the hook asks for `limit` chunks, no
    # private sessions).
    result = recall(
        store.search,
        embedder,
        opening.prompt[:MAX_QUERY_CHARS],
        SearchFilters(until=opening.started_at - _BEFORE),
        limit,
        min_relevance=settings.recall_threshold,
        boosts=boosts,
        context=context,
    )
    text, named = recall_text(result.results, RECALL_BUDGET, settings.own_person)
    sessions = list({hit.session_id: hit.project for hit in result.results}.items())
    return text, sessions[:named]


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def figures(
    outcomes: list[tuple[Opening, tuple[str | None, list[tuple[str, str]]] | None]],
) -> dict:
    asked = [(o, r) for o, r in outcomes if r is not None]
    injected = [(o, r) for o, r in asked if r[0] is not None]
    branch = [(o, r) for o, r in asked if o.earlier_same_branch]
    branch_hits = sum(1 for o, r in branch if o.earlier_same_branch & {sid for sid, _ in r[1]})
    named = [(o.project, project) for o, r in injected for _, project in r[1]]
    chars = sorted(len(r[0]) for _, r in injected if r[0] is not None)
    return {
        "sessions": len(outcomes),
        "asked": len(asked),
        "injected": len(injected),
        "injected_share": _share(len(injected), len(asked)),
        "branch_sessions": len(branch),
        "branch_hits": branch_hits,
        "branch_recall": _share(branch_hits, len(branch)),
        "named_per_context": round(len(named) / len(injected), 2) if injected else None,
        "named_of_project": _share(sum(1 for mine, theirs in named if mine == theirs), len(named)),
        "chars_mean": round(statistics.fmean(chars)) if chars else None,
        "chars_p50": round(statistics.median(chars)) if chars else None,
        "chars_p95": chars[min(len(chars) - 1, int(0.95 * len(chars)))] if chars else None,
    }


def run(store, embedder, settings, boosts, chosen: list[Opening], limit: int) -> dict[str, dict]:
    outcomes = [(o, replay_one(store, embedder, settings, boosts, o, limit)) for o in chosen]
    by_project: dict[str, dict] = {"all": figures(outcomes)}
    for project in sorted({o.project for o in chosen}):
        by_project[project] = figures([x for x in outcomes if x[0].project == project])
    return by_project


def _print_table(by_project: dict[str, dict]) -> None:
    print(f"{'project':<28} {'asked':>5} {'inject':>7} {'branch':>10} {'chars mean/p50/p95':>20}")
    for name, f in by_project.items():
        hits = f"{f['branch_hits']}/{f['branch_sessions']}"
        chars = f"{f['chars_mean']}/{f['chars_p50']}/{f['chars_p95']}"
        print(f"{name:<28} {f['asked']:>5} {f['injected_share']!s:>7} {hits:>10} {chars:>20}")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description="Replay each session's opening prompt.")
    parser.add_argument("--home", type=Path, required=True, help="a LIBRARIAN_HOME with a store")
    parser.add_argument("--corpus", type=Path, help="where the transcripts are (by session id)")
    parser.add_argument("--projects", help="replay only these projects' sessions (comma-separated)")
    defaults = Boosts()
    # Each takes a comma-separated list with --grid.
    parser.add_argument("--project-boost", type=_floats, default=[defaults.project])
    parser.add_argument("--branch-boost", type=_floats, default=[defaults.branch])
    parser.add_argument("--branch-logit", type=_floats, default=[recall_module.SAME_BRANCH_LOGIT])
    parser.add_argument("--limit", type=int, default=LIMIT, help="chunks asked for")
    parser.add_argument("--grid", action="store_true", help="one row per combination of the lists")
    add_record_option(parser)
    args = parser.parse_args()

    # Settings from the environment, as the server reads them, with this home.
    settings = Settings.from_env({**os.environ, "LIBRARIAN_HOME": str(args.home)})
    store = Store(database_url(settings))  # not open_store: the store is read, never migrated
    embedder = configured_embedder(settings)
    chosen, missing = openings(store, args.corpus)
    if args.projects:
        keep = set(args.projects.split(","))
        chosen = [o for o in chosen if o.project in keep]
    print(f"{len(chosen)} opening prompts to replay ({missing} sessions without one)")
    base = Boosts.of(settings)
    combinations = [
        (p, b, logit)
        for p in args.project_boost
        for b in args.branch_boost
        for logit in args.branch_logit
    ]
    if len(combinations) > 1 and not args.grid:
        parser.error("lists of constants need --grid")
    for project_boost, branch_boost, logit in combinations:
        # The prior is read from the module when recall applies it: set here for this run.
        recall_module.SAME_BRANCH_LOGIT = logit
        boosts = replace(base, project=project_boost, branch=branch_boost)
        by_project = run(store, embedder, settings, boosts, chosen, args.limit)
        f = by_project["all"]
        if args.grid:
            print(
                f"project {project_boost:<5} branch {branch_boost:<5} logit {logit:<4}"
                f" injected {f['injected_share']}  own project {f['named_of_project']}"
                f" ({f['named_per_context']} named)  branch {f['branch_hits']}/"
                f"{f['branch_sessions']} = {f['branch_recall']}  chars "
                f"{f['chars_mean']}/{f['chars_p50']}/{f['chars_p95']}",
                flush=True,
            )
            continue
        _print_table(by_project)
        constants = {
            "project_boost": project_boost,
            "branch_boost": branch_boost,
            "branch_logit": logit,
            "limit": args.limit,
        }
        print(json.dumps({**f, **constants, "by_project": by_project}))
        if args.record:
            record("replay", {
                "asked": f["asked"], "injected": f["injected_share"],
                "branch": f"{f['branch_hits']}/{f['branch_sessions']}",
                "branch recall": f["branch_recall"], "of project": f["named_of_project"],
                "chars mean": f["chars_mean"], "chars p95": f["chars_p95"],
            })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

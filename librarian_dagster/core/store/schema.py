"""The store's schema: versioned migrations, applied by every process that opens the store.

Two tables hold the memory: `memories` (one row per session: the digest and the facts about the
session) and `indexed_chunks` (one row per digest bullet or exchange window, with its embedding).
Embeddings are stored in an untyped `vector` column with the model and dimension beside them, so a
switch of embedding model (384-d local, 768-d Gemini) needs no schema change; each dimension and
layer gets its own partial HNSW index on `embedding::vector(N)`, which is how pgvector indexes
mixed dimensions. The rest is the pipeline's bookkeeping (core/store/ledger.py) and the statistics
BM25 is scored from (core/store/memories.py keeps them as it writes).
"""

import psycopg

from librarian_dagster.core.store.pool import StoreError, with_connect_timeout

# Versioned, append-only: never edit a released step, add a new one. (`Store._vector_lists`, in
# the comments of steps 4 and 9, is `Search._vector_lists` in core/recall/search.py.)
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE memories (
            session_id            text PRIMARY KEY,
            project               text NOT NULL,
            cwd                   text,
            git_branch            text,
            started_at            timestamptz,
            ended_at              timestamptz,
            title                 text,
            digest                jsonb NOT NULL,
            digest_text           text NOT NULL,
            summary               text NOT NULL,
            domain                text NOT NULL,
            tags                  text[] NOT NULL DEFAULT '{}',
            importance            smallint NOT NULL,
            content_hash          text NOT NULL,
            digest_version        integer NOT NULL,
            digest_model          text NOT NULL,
            embedding_model       text NOT NULL,
            session_input_tokens  bigint NOT NULL DEFAULT 0,
            session_output_tokens bigint NOT NULL DEFAULT 0,
            digest_input_tokens   integer NOT NULL DEFAULT 0,
            digest_output_tokens  integer NOT NULL DEFAULT 0,
            turns                 integer NOT NULL DEFAULT 0,
            ingested_at           timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX memories_recent ON memories (COALESCE(ended_at, ingested_at) DESC, session_id);
        CREATE INDEX memories_project ON memories (project);
        CREATE INDEX memories_tags ON memories USING gin (tags);
        CREATE TABLE indexed_chunks (
            id              bigserial PRIMARY KEY,
            session_id      text NOT NULL REFERENCES memories (session_id) ON DELETE CASCADE,
            section         text NOT NULL,
            position        integer NOT NULL,
            text            text NOT NULL,
            embedding       vector NOT NULL,
            embedding_model text NOT NULL,
            embedding_dim   integer NOT NULL,
            text_search     tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            UNIQUE (session_id, section, position)
        );
        CREATE INDEX indexed_chunks_session ON indexed_chunks (session_id);
        CREATE INDEX indexed_chunks_text_search ON indexed_chunks USING gin (text_search);
        -- Where each session's files are, so any stage (or a backfill from the UI) can find
        -- them from the partition key alone.
        CREATE TABLE session_sources (
            session_id     text PRIMARY KEY,
            main_path      text,
            subagent_paths text[] NOT NULL DEFAULT '{}',
            fingerprint    text NOT NULL,
            recorded_at    timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        2,
        """
        -- BM25 needs each lexeme's document frequency and the collection's size and mean length.
        -- Counted once at write time (in the same transaction as the chunks), not per query.
        CREATE TABLE lexeme_df (
            lexeme text PRIMARY KEY,
            df     integer NOT NULL
        );
        CREATE TABLE chunk_stats (
            singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            chunks       bigint NOT NULL,
            total_length bigint NOT NULL
        );
        INSERT INTO chunk_stats (chunks, total_length)
            SELECT COUNT(*), COALESCE(SUM(length(text_search)), 0) FROM indexed_chunks;
        INSERT INTO lexeme_df (lexeme, df)
            SELECT u.lexeme, COUNT(*) FROM indexed_chunks c, unnest(c.text_search) u
            GROUP BY u.lexeme;
        CREATE INDEX indexed_chunks_session_section ON indexed_chunks (session_id, section);
        """,
    ),
    (
        3,
        """
        -- Bumped by every write of chunks, so a reader that keeps the BM25 postings in memory
        -- (core/recall/lexical.py) knows, from one small row, when to catch up.
        ALTER TABLE chunk_stats ADD COLUMN generation bigint NOT NULL DEFAULT 0;
        """,
    ),
    (
        4,
        """
        -- One HNSW index per dimension and layer, not per dimension: search asks each layer for
        -- its nearest chunks, and over a two-layer index the scan must step over the other
        -- layer's chunks (2 to 5x slower at 100,000 chunks, docs/decisions/0017). The
        -- predicates must stay those of `Store._vector_lists`.
        CREATE FUNCTION librarian_ensure_vector_indexes(dim integer) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON indexed_chunks USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s AND section = %L',
                           'indexed_chunks_' || dim || '_exchange_hnsw', dim, dim, 'exchange');
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON indexed_chunks USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s AND section <> %L',
                           'indexed_chunks_' || dim || '_bullets_hnsw', dim, dim, 'exchange');
        END $$;
        DO $$
        DECLARE
            -- Read before the loop: no index can be made while a scan of the table is open.
            dims integer[] := ARRAY(SELECT DISTINCT embedding_dim FROM indexed_chunks);
            d integer;
        BEGIN
            FOREACH d IN ARRAY dims LOOP
                PERFORM librarian_ensure_vector_indexes(d);
                EXECUTE format('DROP INDEX IF EXISTS %I',
                               'indexed_chunks_embedding_' || d || '_hnsw');
            END LOOP;
        END $$;
        """,
    ),
    (
        5,
        """
        -- Tokens spent on model calls, per UTC day and model: `librarian status` sums them and
        -- the daily token budget is checked against today's row. A reused digest adds nothing.
        CREATE TABLE llm_usage (
            day           date NOT NULL,
            model         text NOT NULL,
            input_tokens  bigint NOT NULL DEFAULT 0,
            output_tokens bigint NOT NULL DEFAULT 0,
            calls         integer NOT NULL DEFAULT 0,
            PRIMARY KEY (day, model)
        );
        -- Sessions whose digest waits for the next day's token budget; the sensor asks again.
        CREATE TABLE deferred_digests (
            session_id  text PRIMARY KEY,
            deferred_on date NOT NULL
        );
        """,
    ),
    (
        6,
        """
        -- What the store already holds, by the transcript files' fingerprint: a memory made
        -- from them, or "nothing to remember" in them. The sensor asks for neither again.
        ALTER TABLE memories ADD COLUMN source_fingerprint text;
        ALTER TABLE session_sources ADD COLUMN nothing_at_fingerprint text;
        """,
    ),
    (
        7,
        """
        -- What `librarian skip` keeps out of the memory (core/capture/skips.py): a session by
        -- its id (skip_before NULL), or every session last active before a date ('before:DATE').
        CREATE TABLE skip_list (
            entry       text PRIMARY KEY,
            skip_before timestamptz,
            added_at    timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        8,
        """
        -- A chunk's vector stays in its row (its text is compressed or moved out first): the
        -- searches read the vectors of the chunks they rank, and an out-of-line vector cost
        -- three more page reads each (docs/decisions/0017). Rows written before keep their
        -- layout until their session is written again; nothing is rewritten here.
        ALTER TABLE indexed_chunks ALTER COLUMN embedding SET STORAGE MAIN;
        """,
    ),
    (
        9,
        """
        -- One vector per session, the mean of its exchange windows' (of all its chunks when it
        -- has none): the session as a whole, which a question in other words than any one
        -- window's comes closest to (docs/decisions/0021). Filled from the chunks already held.
        CREATE TABLE session_vectors (
            session_id      text PRIMARY KEY REFERENCES memories (session_id) ON DELETE CASCADE,
            embedding       vector NOT NULL,
            embedding_model text NOT NULL,
            embedding_dim   integer NOT NULL
        );
        ALTER TABLE session_vectors ALTER COLUMN embedding SET STORAGE MAIN;
        INSERT INTO session_vectors (session_id, embedding, embedding_model, embedding_dim)
            SELECT DISTINCT ON (session_id) session_id,
                   COALESCE(avg(embedding) FILTER (WHERE section = 'exchange'), avg(embedding)),
                   embedding_model, embedding_dim
            FROM indexed_chunks GROUP BY session_id, embedding_model, embedding_dim
            ORDER BY session_id, COUNT(*) DESC;
        -- An HNSW index per dimension, as the chunks have (`Store._vector_lists` plans with it).
        CREATE FUNCTION librarian_ensure_session_vector_index(dim integer) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON session_vectors USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE embedding_dim = %s',
                           'session_vectors_' || dim || '_hnsw', dim, dim);
        END $$;
        DO $$
        DECLARE
            dims integer[] := ARRAY(SELECT DISTINCT embedding_dim FROM session_vectors);
            d integer;
        BEGIN
            FOREACH d IN ARRAY dims LOOP
                PERFORM librarian_ensure_session_vector_index(d);
            END LOOP;
        END $$;
        """,
    ),
    (
        10,
        """
        -- The files each session changed, most edited first: a result names them, and the
        -- prompt hook checks them against the repository (docs/decisions/0031). A session
        -- stored before has none until it is written again (its digest version is older).
        ALTER TABLE memories ADD COLUMN files text[] NOT NULL DEFAULT '{}';
        """,
    ),
    (
        11,
        """
        -- Each embedding space's background, as relevance measures it on the store's own
        -- chunks (core/recall/relevance.py): kept, so a one-shot search reads a row instead of
        -- sampling 2,000 vectors; measured again once the store has grown or shrunk by a third.
        CREATE TABLE space_calibrations (
            embedding_model text NOT NULL,
            embedding_dim   integer NOT NULL,
            chunks          bigint NOT NULL,
            chunk_mean      float8 NOT NULL,
            chunk_sd        float8 NOT NULL,
            session_mean    float8 NOT NULL,
            session_sd      float8 NOT NULL,
            PRIMARY KEY (embedding_model, embedding_dim)
        );
        -- Which store this is, whatever its address: a copy of the BM25 postings kept on disk
        -- (core/recall/lexical.py) belongs to one store, and a store made anew reuses chunk ids.
        CREATE TABLE store_identity (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            id        uuid NOT NULL DEFAULT gen_random_uuid()
        );
        INSERT INTO store_identity DEFAULT VALUES;
        """,
    ),
    (
        12,
        """
        -- Every file a session changed or read, by absolute path (core/capture/touches.py), so
        -- that opening a file can be told which earlier sessions changed it
        -- (core/recall/history.py). `name` is the path's last part as it is compared (case
        -- folded for a Windows path): a look-up asks by name, then matches whole paths.
        CREATE TABLE session_files (
            session_id text NOT NULL REFERENCES memories (session_id) ON DELETE CASCADE,
            path       text NOT NULL,
            name       text NOT NULL,
            edits      integer NOT NULL,
            reads      integer NOT NULL,
            PRIMARY KEY (session_id, path)
        );
        CREATE INDEX session_files_name ON session_files (name);
        -- The sessions stored before: the files they changed (kept relative to their cwd),
        -- until they are written again; those of a Windows cwd wait for that.
        INSERT INTO session_files (session_id, path, name, edits, reads)
            SELECT DISTINCT ON (m.session_id, p.path) m.session_id, p.path,
                   regexp_replace(p.path, '^.*/', ''), 1, 0
            FROM memories m,
                 LATERAL (SELECT CASE WHEN f LIKE '/%' THEN f
                                      ELSE rtrim(m.cwd, '/') || '/' || f END AS path
                          FROM unnest(m.files) f) p
            WHERE m.cwd LIKE '/%' AND p.path NOT LIKE '%/../%' AND p.path NOT LIKE '%/./%';
        """,
    ),
    (
        13,
        """
        -- Which agent wrote each session (core/capture/readers.py): every memory and source
        -- held before is Claude Code's, the one agent read until then. `version` is what the
        -- files alone cannot say of a session's change (`SessionFiles.version`).
        ALTER TABLE memories ADD COLUMN agent text NOT NULL DEFAULT 'claude-code';
        CREATE INDEX memories_agent ON memories (agent);
        ALTER TABLE session_sources ADD COLUMN agent text NOT NULL DEFAULT 'claude-code';
        ALTER TABLE session_sources ADD COLUMN version text NOT NULL DEFAULT '';
        """,
    ),
    (
        14,
        """
        -- Sessions forgotten whose Dagster runs and partitions are still to delete: the recall
        -- server's page forgets without Dagster, and the sessions sensor or the next `librarian
        -- forget` deletes them (core/assembly/forgetting.py).
        CREATE TABLE run_history_to_forget (
            session_id   text PRIMARY KEY,
            forgotten_at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        15,
        """
        -- Whose each session is (the person whose token pushed it, or the server's own person
        -- for one read on its machine; NULL: stored before, the server's own), the repository
        -- it worked in by its remote, and whether its person keeps its project private.
        ALTER TABLE memories ADD COLUMN person text;
        ALTER TABLE memories ADD COLUMN repository text;
        ALTER TABLE memories ADD COLUMN private boolean NOT NULL DEFAULT false;
        CREATE INDEX memories_person ON memories (person);
        -- A person's sessions of one folder, found at each write (store/memories.py).
        CREATE INDEX memories_cwd ON memories (cwd);
        -- Sessions pushed from other machines (`POST /push`, mcp_server/push_api.py): whose
        -- each is (never overwritten by another person), from which machine, the bytes staged
        -- last, and what the laptop knew of it.
        CREATE TABLE pushed_sessions (
            session_id text PRIMARY KEY,
            agent      text NOT NULL,
            person     text NOT NULL,
            machine    text NOT NULL,
            sha256     text,
            bytes      bigint NOT NULL DEFAULT 0,
            remote     text,
            folder     text,
            private    boolean NOT NULL DEFAULT false,
            pushed_at  timestamptz NOT NULL DEFAULT now()
        );
        -- Each machine that pushes, and when it last did: one quiet too long is a capture gap.
        CREATE TABLE push_machines (
            person     text NOT NULL,
            machine    text NOT NULL,
            first_push timestamptz NOT NULL DEFAULT now(),
            last_push  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (person, machine)
        );
        """,
    ),
)

# Serialises migrations between processes that start together (webserver, daemon, MCP server).
_MIGRATION_LOCK_KEY = 0x4C49425241  # "LIBRA"


def migrate(url: str) -> int:
    """Bring the schema to the newest version; safe to call from every process. Returns it."""
    # The first connection of a process: it must fail in seconds on an address that drops packets.
    with psycopg.connect(url, autocommit=True, **with_connect_timeout(url)) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise StoreError(
                "cannot enable the `vector` extension on this database "
                f"({exc.diag.message_primary or exc}); pgvector must be installed on the "
                "server, or unset LIBRARIAN_DATABASE_URL to use the embedded one"
            ) from None
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        current = row[0] if row else 0
        for version, statements in MIGRATIONS:
            if version > current:
                conn.execute(statements)  # type: ignore[arg-type]
                conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
                current = version
        return current


def attribute_sessions(url: str, person: str) -> int:
    """The sessions stored before each recorded its person (migration 15), as `person`'s: they
    were read on the machine whose settings name `person`. How many there were."""
    with psycopg.connect(url, **with_connect_timeout(url)) as conn:
        return conn.execute(
            "UPDATE memories SET person = %s WHERE person IS NULL", (person,)
        ).rowcount

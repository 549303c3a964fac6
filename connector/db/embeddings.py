"""The database's embedding models (active, standby), the embedding cache, and the standby vectors that `connector
reembed` builds beside the active ones (migration 0010).

Who may see which model: writers (`Store.write`) and searches take `MODEL_LOCK` shared and read the active model in
the transaction that uses it; `switch` takes it exclusively first. So a write or a search runs wholly before a switch
or wholly after it, and one made with the old model after the switch is refused, never stored or mis-ranked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from connector.embedders.base import ModelSpec
from connector.errors import EmbeddingModelMismatch, FatalError, TransientError

MODEL_LOCK = 7_236_011_510_517_116_261  # pg advisory lock key ("connembs")

SELECT_MODELS = "SELECT slot, provider, name, dim, options, state FROM connector.embedding_models ORDER BY slot"
SELECT_ACTIVE = "SELECT slot, provider, name, dim, options, state FROM connector.embedding_models WHERE slot = 'active'"
LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(%s)"
LOCK_EXCLUSIVE = "SELECT pg_advisory_xact_lock(%s)"
INSERT_MODEL = """
INSERT INTO connector.embedding_models (slot, provider, name, dim, options, state)
VALUES (%(slot)s, %(provider)s, %(name)s, %(dim)s, %(options)s, %(state)s)
"""
SET_STATE = "UPDATE connector.embedding_models SET state = %s WHERE slot = 'standby'"
DELETE_MODELS = "DELETE FROM connector.embedding_models"
DELETE_STANDBY = "DELETE FROM connector.embedding_models WHERE slot = 'standby'"
COLUMN_DIM = """
SELECT atttypmod FROM pg_attribute
WHERE attrelid = 'connector.chunks'::regclass AND attname = %s AND NOT attisdropped
"""

CACHE_GET = """
SELECT text_hash, spans, weights, vectors FROM connector.embedding_cache WHERE model = %s AND text_hash = ANY(%s)
"""
# One statement for a batch's new texts (an INSERT each cost the writer more than the rest of the cache), every
# array sent binary; a text's spans and weights, of its own lengths, as int[] literals.
CACHE_PUT = """
INSERT INTO connector.embedding_cache (model, text_hash, dim, spans, weights, vectors)
SELECT %(model)s, h, %(dim)s, s::int[], w::int[], v
FROM unnest(%(hashes)b::bytea[], %(spans)b::text[], %(weights)b::text[], %(vectors)b::bytea[]) AS t(h, s, w, v)
ON CONFLICT (model, text_hash) DO NOTHING
"""
CACHE_DROP = "DELETE FROM connector.embedding_cache WHERE model = %s"

# The table blocks of the chunks' documents (each table's start, end and first 64 KB, whose first two lines are its
# header rows), so that a re-embedded chunk is read under its table's header as the writer read it
# (`embed.header_rows`). Each document's blocks are read once: looked up per chunk, a 4 MB document's 40,000 blocks
# were read again for each of its 4,000 chunks (25 s for `reembed --estimate` on that one document).
_TABLES_OF = """
tables AS MATERIALIZED (
    SELECT d.id AS document_id, (b->>'start')::int AS table_start, (b->>'end')::int AS table_end,
           substr(d.markdown, (b->>'start')::int + 1, least((b->>'end')::int - (b->>'start')::int, 65536)) AS table_text
    FROM connector.documents d
    CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(d.blocks) = 'array' THEN d.blocks ELSE '[]' END) b
    WHERE d.id IN (SELECT document_id FROM batch) AND b->>'kind' = 'table'
)"""
_WITH_TABLE = """
SELECT c.id, c.text, c.start_char, c.end_char, c.section_path, d.title, t.table_start, t.table_text
FROM batch c JOIN connector.documents d ON d.id = c.document_id
LEFT JOIN LATERAL (SELECT table_start, table_text FROM tables
                   WHERE tables.document_id = c.document_id AND table_start <= c.start_char
                     AND c.start_char < table_end LIMIT 1) t ON true
ORDER BY c.id
"""
_CHUNK_COLUMNS = "c.id, c.document_id, c.text, c.start_char, c.end_char, c.section_path"
# The chunks the standby model has not embedded yet, with what the writer embedded them with (title, sections).
MISSING_STANDBY = f"""
WITH batch AS MATERIALIZED (
    SELECT {_CHUNK_COLUMNS} FROM connector.chunks c
    WHERE c.standby_embedding IS NULL AND c.id > %s ORDER BY c.id LIMIT %s
), {_TABLES_OF}
{_WITH_TABLE}"""
ALL_CHUNKS_TEXT = f"""
WITH batch AS MATERIALIZED (SELECT {_CHUNK_COLUMNS} FROM connector.chunks c), {_TABLES_OF}
{_WITH_TABLE}"""
STANDBY_PROGRESS = "SELECT count(*) FILTER (WHERE standby_embedding IS NOT NULL), count(*) FROM connector.chunks"
SET_STANDBY = "UPDATE connector.chunks SET standby_embedding = %s WHERE id = %s"
INSERT_STANDBY_WINDOW = """
INSERT INTO connector.standby_windows (chunk_id, window_no, start_char, end_char, embedding)
SELECT %(id)s, %(no)s, %(start)s, %(end)s, %(v)s WHERE EXISTS (SELECT 1 FROM connector.chunks WHERE id = %(id)s)
ON CONFLICT (chunk_id, window_no) DO UPDATE SET start_char = EXCLUDED.start_char, end_char = EXCLUDED.end_char,
    embedding = EXCLUDED.embedding
"""


@dataclass(frozen=True, slots=True)
class ModelRow:
    """SELECT_MODELS: one slot of connector.embedding_models."""

    slot: str
    provider: str
    name: str
    dim: int
    options: dict
    state: str

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.provider, self.name, self.dim, tuple(sorted(self.options.items())))


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """MISSING_STANDBY, ALL_CHUNKS_TEXT: a chunk as the writer embedded it."""

    id: int
    text: str
    start_char: int
    end_char: int
    section_path: list[str]
    title: str | None
    table_start: int | None
    table_text: str | None

    @property
    def table_head(self) -> str:
        """The header rows it was embedded under (`embed.header_rows`): "" outside a table."""
        from connector.embed import header_rows

        return header_rows(self.table_text, self.table_start, self.start_char) if self.table_text else ""


def same_space(a: ModelSpec, b: ModelSpec) -> bool:
    return a.name == b.name and a.dim == b.dim


def models(conn: psycopg.Connection) -> dict[str, ModelRow]:
    with conn.cursor(row_factory=class_row(ModelRow)) as cur:
        return {row.slot: row for row in cur.execute(SELECT_MODELS)}


def active(conn: psycopg.Connection) -> ModelRow | None:
    with conn.cursor(row_factory=class_row(ModelRow)) as cur:
        return cur.execute(SELECT_ACTIVE).fetchone()


def hold_shared(conn: psycopg.Connection) -> ModelRow | None:
    """In the caller's transaction: no switch until it ends; the active model it sees stays the active one."""
    conn.execute(LOCK_SHARED, (MODEL_LOCK,))
    return active(conn)


def mismatch(stored: ModelRow, configured: ModelSpec) -> EmbeddingModelMismatch:
    return EmbeddingModelMismatch(
        f"this database's vectors come from {stored.spec.describe()}, but this connector is configured for "
        f"{configured.describe()}. Vectors of different models cannot be compared. Either configure the database's "
        f"model ({env_for(stored.spec)}), or move the database to the new model without downtime: "
        f"`{reembed_command(configured)}`, then `connector reembed --switch`."
    )


def _loading(spec: ModelSpec) -> list[tuple[str, str | None, str]]:
    """(environment variable, reembed flag or None, value) that load this model (never a key)."""
    found: list[tuple[str, str | None, str]] = [("CONNECTOR_EMBEDDER", "--embedder", spec.provider)]
    options = dict(spec.options)
    if spec.provider == "openai":
        found.append(("CONNECTOR_EMBED_MODEL", "--model", spec.name))
        for key, flag in (("base_url", "--base-url"), ("dimensions", "--dimensions")):
            if options.get(key):
                found.append((f"CONNECTOR_EMBED_{key.upper()}", flag, str(options[key])))
    elif spec.provider == "minilm" and spec.name.endswith("(int8)"):
        found.append(("CONNECTOR_EMBED_RUNTIME", None, "onnx-int8"))
    return found


def env_for(spec: ModelSpec) -> str:
    """The settings that load this model, as environment assignments."""
    return " ".join(f"{env}={value}" for env, _, value in _loading(spec))


def reembed_command(spec: ModelSpec) -> str:
    parts = _loading(spec)
    env = "".join(f"{e}={v} " for e, flag, v in parts if flag is None)
    return env + "connector reembed " + " ".join(f"{flag} {v}" for _, flag, v in parts if flag is not None)


def ensure_active(conn: psycopg.Connection, spec: ModelSpec) -> None:
    """Record the model on first use; refuse, writing nothing, when the database's active model is another."""
    try:
        column_dim = conn.execute(COLUMN_DIM, ("embedding",)).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise FatalError("the connector schema is missing: run `connector migrate` first") from exc
    if column_dim is None:
        raise FatalError("connector.chunks has no embedding column: run `connector migrate` first")
    row = active(conn)
    if row is None:
        if spec.dim != column_dim[0]:
            _resize_empty(conn, column_dim[0], spec)
        # Two replicas starting at once on a new database: the first one's model counts, the other compares.
        conn.execute(INSERT_MODEL + " ON CONFLICT (slot) DO NOTHING", _model_params("active", spec, "ready"))
        row = active(conn)
    if not same_space(row.spec, spec):
        conn.rollback()
        raise mismatch(row, spec)
    conn.commit()


def _resize_empty(conn: psycopg.Connection, dim: int, spec: ModelSpec) -> None:
    """A database that has no model and no chunks yet takes the first model's dimension (migrations create the
    columns before any model is known); one that holds chunks is refused."""
    if conn.execute("SELECT EXISTS (SELECT 1 FROM connector.chunks)").fetchone()[0]:
        conn.rollback()
        raise EmbeddingModelMismatch(
            f"connector.chunks holds {dim}-dimensional embeddings of an unrecorded model, but the configured embedder "
            f"is {spec.describe()}: point --dsn/CONNECTOR_DSN at a new database for this model"
        )
    new = sql.SQL("vector({})").format(sql.Literal(int(spec.dim)))
    try:
        conn.execute(sql.SQL("ALTER TABLE connector.chunks ALTER COLUMN embedding TYPE {}").format(new))
        conn.execute(sql.SQL("ALTER TABLE connector.chunk_windows ALTER COLUMN embedding TYPE {}").format(new))
    except psycopg.errors.InsufficientPrivilege as exc:
        conn.rollback()
        raise FatalError(
            f"the empty connector.chunks has {dim}-dimensional vectors and this role may not change it to "
            f"{spec.dim} for {spec.name}: start once as the schema's owner (README: Roles)"
        ) from exc


def _model_params(slot: str, spec: ModelSpec, state: str) -> dict:
    return {"slot": slot, "provider": spec.provider, "name": spec.name, "dim": spec.dim,
            "options": Jsonb(dict(spec.options)), "state": state}  # fmt: skip


class CacheTable:
    """connector.embedding_cache on a connection of its own (opened on first use, opened again after a loss): the
    cache is read and written from inside the pipeline, while the worker's connection serves its heartbeat."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection | None = None

    def get(
        self, model: str, hashes: list[bytes], dim: int
    ) -> dict[bytes, tuple[list[tuple[int, int]], list[int], np.ndarray]]:
        rows = self._run(lambda c: c.execute(CACHE_GET, (model, hashes)).fetchall())
        found = {}
        for h, spans, weights, blob in rows:
            vectors = np.frombuffer(blob, dtype=np.float32).reshape(-1, dim)
            found[bytes(h)] = (list(zip(spans[::2], spans[1::2], strict=True)), list(weights), vectors)
        return found

    def put(
        self, model: str, dim: int, entries: list[tuple[bytes, list[tuple[int, int]], list[int], np.ndarray]]
    ) -> None:
        if not entries:
            return
        # One transaction for the batch (so was psycopg's pipelined executemany): rows taken in the order of their
        # hashes, as every writer takes them, two batches sharing texts wait for each other, never deadlock.
        entries = sorted(entries, key=lambda e: e[0])
        params = {
            "model": model, "dim": dim, "hashes": [h for h, _, _, _ in entries],
            "spans": ["{" + ",".join(str(x) for span in spans for x in span) + "}" for _, spans, _, _ in entries],
            "weights": ["{" + ",".join(map(str, weights)) + "}" for _, _, weights, _ in entries],
            "vectors": [np.ascontiguousarray(v, dtype=np.float32).tobytes() for _, _, _, v in entries],
        }  # fmt: skip
        self._run(lambda c: c.execute(CACHE_PUT, params))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self, work):
        from connector.db.database import MissingPrivilege, connect

        for attempt in (1, 2):
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._conn = connect(self.dsn, autocommit=True)
                return work(self._conn)
            except MissingPrivilege:
                raise  # no outage: the worker waits for the grant
            except (psycopg.OperationalError, TransientError) as exc:  # connect() says TransientError
                self.close()
                if attempt == 2:
                    raise TransientError(f"embedding cache: no database connection: {exc}") from exc
        raise AssertionError("unreachable")


# --- standby vectors (connector reembed) ---


def prepare_standby(conn: psycopg.Connection, spec: ModelSpec) -> ModelRow:
    """The standby slot for `spec`, its column and table created with its dimension; resumes one already building
    for the same model, refuses one holding another model."""
    with conn.transaction():
        conn.execute(LOCK_EXCLUSIVE, (MODEL_LOCK,))
        slots = models(conn)
        current = slots.get("active")
        if current is not None and same_space(current.spec, spec):
            raise FatalError(f"{spec.describe()} is already the active model: nothing to re-embed")
        standby = slots.get("standby")
        if standby is not None and not same_space(standby.spec, spec):
            raise FatalError(
                f"the standby slot holds {standby.spec.describe()} ({standby.state}): run `connector reembed --drop` "
                "first to discard it"
            )
        if standby is None:
            conn.execute(INSERT_MODEL, _model_params("standby", spec, "building"))
        else:  # resumed, or filled again: not switchable until this build says so
            conn.execute(SET_STATE, ("building",))
        existing = conn.execute(COLUMN_DIM, ("standby_embedding",)).fetchone()
        if existing is not None and existing[0] != spec.dim:
            conn.execute("ALTER TABLE connector.chunks DROP COLUMN standby_embedding")
            conn.execute("DROP TABLE IF EXISTS connector.standby_windows")
            existing = None
        if existing is None:
            dim = sql.Literal(int(spec.dim))
            conn.execute(sql.SQL("ALTER TABLE connector.chunks ADD COLUMN standby_embedding vector({})").format(dim))
            conn.execute("DROP TABLE IF EXISTS connector.standby_windows")
            conn.execute(
                sql.SQL(
                    """
                    CREATE TABLE connector.standby_windows (
                        chunk_id   bigint NOT NULL REFERENCES connector.chunks (id) ON DELETE CASCADE,
                        window_no  integer NOT NULL,
                        start_char integer NOT NULL,
                        end_char   integer NOT NULL,
                        embedding  vector({}) NOT NULL,
                        CONSTRAINT standby_windows_pkey PRIMARY KEY (chunk_id, window_no)
                    )
                    """
                ).format(dim)
            )
        return models(conn)["standby"]


def missing_standby(conn: psycopg.Connection, after: int, limit: int) -> list[StoredChunk]:
    with conn.transaction(), conn.cursor(row_factory=class_row(StoredChunk)) as cur:
        return cur.execute(MISSING_STANDBY, (after, limit)).fetchall()


def all_chunks(conn: psycopg.Connection) -> Iterator[StoredChunk]:
    with conn.transaction(), conn.cursor(row_factory=class_row(StoredChunk)) as cur:
        yield from cur.execute(ALL_CHUNKS_TEXT)


def standby_progress(conn: psycopg.Connection) -> tuple[int, int]:
    with conn.transaction():
        done, total = conn.execute(STANDBY_PROGRESS).fetchone()
    return done, total


def write_standby(
    conn: psycopg.Connection, spec: ModelSpec, vectors: list[tuple[int, np.ndarray, list[tuple[int, int, np.ndarray]]]]
) -> None:
    """(chunk id, vector, windows in document offsets) for chunks that may have been deleted meanwhile: those are
    skipped. Refused when the standby slot no longer holds `spec` (a switch or a drop ran meanwhile: the names now
    point at another model's vectors)."""
    # Only chunks of several windows have window rows: one window is the chunk's own vector (migration 0013).
    windows = [{"id": cid, "no": no, "start": s, "end": e, "v": v}
               for cid, _, ws in vectors if len(ws) > 1 for no, (s, e, v) in enumerate(ws)]  # fmt: skip
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(LOCK_SHARED, (MODEL_LOCK,))
        standby = models(conn).get("standby")
        if standby is None or not same_space(standby.spec, spec):
            raise FatalError(
                f"the standby slot no longer holds {spec.describe()} (a switch or drop ran meanwhile): nothing written"
            )
        cur.executemany(SET_STANDBY, [(v, cid) for cid, v, _ in vectors])
        cur.executemany(INSERT_STANDBY_WINDOW, windows)


def build_standby_indexes(dsn: str) -> None:
    """The standby vectors' HNSW indexes, built once they are filled (one build, not one insertion per vector);
    CONCURRENTLY on chunks, so that the sidecar keeps writing meanwhile."""
    from connector.db.database import connect

    with connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS chunks_standby_embedding_hnsw ON connector.chunks "
            "USING hnsw (standby_embedding vector_cosine_ops)"
        )
        conn.execute(
            "CREATE INDEX IF NOT EXISTS standby_windows_embedding_hnsw ON connector.standby_windows "
            "USING hnsw (embedding vector_cosine_ops)"
        )
        # An index left INVALID by an interrupted concurrent build would stay unused: build it again.
        invalid = conn.execute(
            "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'chunks_standby_embedding_hnsw' AND NOT i.indisvalid"
        ).fetchone()
        if invalid:
            conn.execute("DROP INDEX CONCURRENTLY connector.chunks_standby_embedding_hnsw")
            build_standby_indexes(dsn)


def mark_standby_ready(conn: psycopg.Connection) -> None:
    with conn.transaction():
        conn.execute(SET_STATE, ("ready",))


_SWAPS = (
    # (kind, active name, standby name) in connector; each pair trades names through a temporary one
    ("COLUMN", "embedding", "standby_embedding"),
    ("TABLE", "chunk_windows", "standby_windows"),
    ("INDEX", "chunks_embedding_hnsw", "chunks_standby_embedding_hnsw"),
    ("INDEX", "chunk_windows_embedding_hnsw", "standby_windows_embedding_hnsw"),
    ("INDEX", "chunk_windows_pkey", "standby_windows_pkey"),
)


def begin_switch(conn: psycopg.Connection) -> tuple[ModelRow, ModelRow]:
    """In the caller's transaction: wait for writes and searches in flight, keep new ones out until it commits
    (plain SQL readers go on until the renames), and return (active, standby). The caller fills the standby gaps
    left by writes since the last pass, then calls `finish_switch` in the same transaction."""
    conn.execute(LOCK_EXCLUSIVE, (MODEL_LOCK,))
    slots = models(conn)
    if "active" not in slots:
        raise FatalError("this database has no active embedding model yet: nothing to switch from")
    if "standby" not in slots:
        raise FatalError("no standby model to switch to: run `connector reembed --embedder … [--model …]` first")
    if slots["standby"].state != "ready":
        raise FatalError(
            f"the standby model {slots['standby'].spec.describe()} is still being built: run `connector reembed` "
            "with the same model again to finish it, then --switch"
        )
    conn.execute("LOCK TABLE connector.chunks IN SHARE MODE")
    return slots["active"], slots["standby"]


def finish_switch(conn: psycopg.Connection, active_row: ModelRow, standby_row: ModelRow) -> None:
    left = conn.execute("SELECT count(*) FROM connector.chunks WHERE standby_embedding IS NULL").fetchone()[0]
    if left:
        raise TransientError(f"{left} chunks still lack standby vectors: run the switch again")
    for kind, a, b in _SWAPS:
        has_a, has_b = (_exists(conn, a), _exists(conn, b)) if kind == "INDEX" else (True, True)
        if not (has_a and has_b):
            # The chunks' active index waits for a large table (migration 0015), so one side may have none: an index
            # follows its column, and its name follows it too.
            if has_a or has_b:
                _rename(conn, kind, *((a, b) if has_a else (b, a)))
            continue
        _rename(conn, kind, a, f"{a}_swap")
        _rename(conn, kind, b, a)
        _rename(conn, kind, f"{a}_swap", b)
    conn.execute("ALTER TABLE connector.chunks ALTER COLUMN standby_embedding DROP NOT NULL")
    conn.execute("ALTER TABLE connector.chunks ALTER COLUMN embedding SET NOT NULL")
    conn.execute(DELETE_MODELS)
    conn.execute(INSERT_MODEL, _model_params("active", standby_row.spec, "ready"))
    conn.execute(INSERT_MODEL, _model_params("standby", active_row.spec, "ready"))
    conn.execute("UPDATE connector.embedding_models SET switched_at = now()")


def _exists(conn: psycopg.Connection, name: str) -> bool:
    qualified = sql.SQL("{}.{}").format(sql.Identifier("connector"), sql.Identifier(name)).as_string(conn)
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (qualified,)).fetchone()[0]


def _rename(conn: psycopg.Connection, kind: str, old: str, new: str) -> None:
    if kind == "COLUMN":
        stmt = sql.SQL("ALTER TABLE connector.chunks RENAME COLUMN {} TO {}")
    elif kind == "TABLE":
        stmt = sql.SQL("ALTER TABLE connector.{} RENAME TO {}")
    else:
        stmt = sql.SQL("ALTER INDEX connector.{} RENAME TO {}")
    conn.execute(stmt.format(sql.Identifier(old), sql.Identifier(new)))


def drop_standby(conn: psycopg.Connection) -> ModelRow | None:
    """Forget the standby model: its vectors, indexes and cache entries."""
    with conn.transaction():
        conn.execute(LOCK_EXCLUSIVE, (MODEL_LOCK,))
        standby = models(conn).get("standby")
        conn.execute("DROP TABLE IF EXISTS connector.standby_windows")
        conn.execute("ALTER TABLE connector.chunks DROP COLUMN IF EXISTS standby_embedding")
        conn.execute(DELETE_STANDBY)
        if standby is not None:
            conn.execute(CACHE_DROP, (standby.spec.cache_key,))
    return standby


def drop_standby_at(dsn: str) -> ModelRow | None:
    from connector.db.database import connect

    with connect(dsn, autocommit=True) as conn:
        return drop_standby(conn)

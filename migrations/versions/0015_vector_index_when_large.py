"""The chunks' HNSW index is built once the table is large enough to need it, not kept from the first chunk.

An HNSW index pays at every insert (a graph walk per vector: 0.6-1.0 ms of the database's CPU per document of the
bench rows, about a third of the write) to make searching a large table fast. On a small one an exact scan is fast
already and exact (384 dimensions: 1.2 ms at 2,500 chunks, 7.6 ms at 10,000, 46 ms at 100,000 here), so, like
pgai's vectorizer (`ai.indexing_default()`: at 100,000 rows), the index now waits for
`CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS` chunks (100,000 by default). Searches return the same rows either way;
with the index, HNSW's approximate ones.

`connector.build_vector_index(min_chunks)` builds it when the table has that many chunks; the sidecar's workers call
it between batches, about once a minute, until it exists. It runs as the owner of the schema (SECURITY DEFINER:
only a table's owner may index it, and the runtime role of README "Roles" is not), one caller at a time (an advisory
lock; the others return at once). The build is a plain CREATE INDEX, as pgai's: writes to `connector.chunks` wait
for it (50 s for 100,000 random 384-dimensional vectors on 2 cores, with the 512 MB of `maintenance_work_mem` it
takes if the server's setting is lower); searches go on, exact until it commits. A worker held up longer than its
lease may see a row it holds claimed again by another replica; the claim token keeps one result.

A database that already holds `min_chunks` chunks keeps its index; a smaller one loses it here.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

DEFAULT_MIN_CHUNKS = 100_000  # connector.settings.SearchSettings.vector_index_min_chunks

BUILD = """
CREATE FUNCTION connector.build_vector_index(min_chunks bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    opclass text;
BEGIN
    IF to_regclass('connector.chunks_embedding_hnsw') IS NOT NULL THEN
        RETURN true;
    END IF;
    -- One builder at a time: a second caller would wait on the first's lock and then fail on the name.
    IF NOT pg_try_advisory_xact_lock(hashtextextended('connector.chunks_embedding_hnsw', 0)) THEN
        RETURN false;
    END IF;
    IF to_regclass('connector.chunks_embedding_hnsw') IS NOT NULL THEN  -- built while we waited for the lock
        RETURN true;
    END IF;
    IF (SELECT count(*) FROM (SELECT FROM connector.chunks LIMIT min_chunks) AS enough) < min_chunks THEN
        RETURN false;
    END IF;
    -- The operator class lives in the schema `vector` was installed in, which this function's path leaves out.
    SELECT format('%I.%I', n.nspname, c.opcname) INTO STRICT opclass
    FROM pg_opclass c JOIN pg_namespace n ON n.oid = c.opcnamespace JOIN pg_am a ON a.oid = c.opcmethod
    WHERE c.opcname = 'vector_cosine_ops' AND a.amname = 'hnsw';
    -- The graph built in memory: 100,000 chunks of 384 dimensions took 188 s with the default 64 MB, 50 s with
    -- 512 MB (for this transaction only; a larger setting is kept).
    IF pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('512MB') THEN
        PERFORM set_config('maintenance_work_mem', '512MB', true);
    END IF;
    EXECUTE format('CREATE INDEX chunks_embedding_hnsw ON connector.chunks USING hnsw (embedding %s)', opclass);
    RETURN true;
END $$;
"""


def upgrade() -> None:
    op.execute(BUILD)
    op.execute(
        f"""
        DO $$ BEGIN
            IF (SELECT count(*) FROM (SELECT FROM connector.chunks LIMIT {DEFAULT_MIN_CHUNKS}) AS enough)
               < {DEFAULT_MIN_CHUNKS} THEN
                DROP INDEX IF EXISTS connector.chunks_embedding_hnsw;
            END IF;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION connector.build_vector_index(bigint)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON connector.chunks USING hnsw (embedding vector_cosine_ops)"
    )

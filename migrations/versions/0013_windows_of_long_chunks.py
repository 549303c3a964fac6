"""`chunk_windows` holds the windows of chunks longer than the model's input only; a chunk that fits is one window
whose vector is its own `chunks.embedding`, found through `chunks_embedding_hnsw`.

Every chunk used to have at least one window row, so that the vector arm of `connector.search()` could walk one
index: most chunks fit the model, so most window rows repeated their chunk's vector, and writing them into a second
HNSW graph cost as much as the chunks' own (~0.7 ms of the database's CPU per short document, a quarter of its
write). `connector.search_windows()` now walks both graphs, the windows' (long chunks) and the chunks' (every
chunk, by its own vector), and gives each chunk found its exact best-window distance: the minimum over its windows
where it has some, its own vector's distance where it has none. A chunk reached through either graph is scored as
before; the search reads one more index, each walk half as far (measured below).

The upgrade deletes the rows of chunks that have a single window (its vector is the chunk's, or for chunks stored
before 0007 the mean the chunk holds), in the active slot and in a reembed's standby slot, and builds their HNSW
indexes anew (a graph of mostly dead entries would be walked at length until vacuumed). Before a downgrade, stop
the sidecars of this version: they write no window for a chunk that fits the model.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# The two walks are separate subqueries, each an ORDER BY … LIMIT on its own HNSW index (search() runs them under
# hnsw.iterative_scan, so a filter keeps each walking until enough rows pass). Each reads half of the `n` that 0007's
# one walk read: on 20,000 chunks (a tenth of them long), p50 4.9 ms against 0007's 6.5 ms, and the top 10 agrees
# more often with an exact ranking (0.23 against 0.17; `n` from each walk: 9.5 ms). A filter that few chunks pass
# (one document of 4 chunks) makes each walk scan to pgvector's `hnsw.max_scan_tuples`: 233 ms against 202 ms, and
# all 4 chunks found against 3 of them.
WINDOWS = """
CREATE OR REPLACE FUNCTION connector.search_windows(query_embedding vector, filter jsonb, n integer)
RETURNS TABLE (chunk_id bigint, dist double precision)
LANGUAGE sql STABLE
AS $$
    WITH found AS (
        (SELECT w.chunk_id
         FROM connector.chunk_windows w
         JOIN connector.chunks c ON c.id = w.chunk_id
         JOIN connector.documents d ON d.id = c.document_id
         WHERE connector.search_matches(filter, d.metadata, d.source, d.source_key, c.chunk_type, c.document_id)
         ORDER BY w.embedding <=> query_embedding
         LIMIT (n + 1) / 2)
        UNION
        (SELECT c.id
         FROM connector.chunks c
         JOIN connector.documents d ON d.id = c.document_id
         WHERE connector.search_matches(filter, d.metadata, d.source, d.source_key, c.chunk_type, c.document_id)
         ORDER BY c.embedding <=> query_embedding
         LIMIT (n + 1) / 2)
    )
    SELECT f.chunk_id,
           coalesce((SELECT min(w.embedding <=> query_embedding) FROM connector.chunk_windows w
                     WHERE w.chunk_id = f.chunk_id),
                    c.embedding <=> query_embedding)
    FROM found f JOIN connector.chunks c ON c.id = f.chunk_id
$$;
"""


def _windows_0007() -> str:
    """0007's function, as it made it: one walk of the windows' graph, every chunk having at least one window."""
    spec = importlib.util.spec_from_file_location("_m0007", Path(__file__).with_name("0007_windows.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WINDOWS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


# The standby slot (`connector reembed`: a build in progress, or the model kept after a switch) follows the same rule.
SINGLE_WINDOWS_GO = """
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['chunk_windows', 'standby_windows'] LOOP
        IF to_regclass('connector.' || t) IS NOT NULL THEN
            EXECUTE format('DELETE FROM connector.%1$I w USING (SELECT chunk_id FROM connector.%1$I GROUP BY chunk_id '
                           'HAVING count(*) = 1) single WHERE w.chunk_id = single.chunk_id', t);
            -- Most rows are gone: a graph of dead entries would be walked (and vacuumed) at length; build it anew.
            IF to_regclass('connector.' || t || '_embedding_hnsw') IS NOT NULL THEN
                EXECUTE format('REINDEX INDEX connector.%I', t || '_embedding_hnsw');
            END IF;
        END IF;
    END LOOP;
END
$$;
"""

# Every chunk gets its window back (its own vector, as 0007's backfill gave it), the index built once afterwards
# rather than one graph insertion per row; in the standby slot, from the standby vector, where it has one.
SINGLE_WINDOWS_BACK = """
DROP INDEX connector.chunk_windows_embedding_hnsw;
INSERT INTO connector.chunk_windows (chunk_id, window_no, start_char, end_char, embedding)
SELECT c.id, 0, c.start_char, c.end_char, c.embedding FROM connector.chunks c
WHERE NOT EXISTS (SELECT 1 FROM connector.chunk_windows w WHERE w.chunk_id = c.id);
CREATE INDEX chunk_windows_embedding_hnsw ON connector.chunk_windows USING hnsw (embedding vector_cosine_ops);
DO $$
BEGIN
    IF to_regclass('connector.standby_windows') IS NOT NULL THEN
        INSERT INTO connector.standby_windows (chunk_id, window_no, start_char, end_char, embedding)
        SELECT c.id, 0, c.start_char, c.end_char, c.standby_embedding FROM connector.chunks c
        WHERE c.standby_embedding IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM connector.standby_windows w WHERE w.chunk_id = c.id);
    END IF;
END
$$;
"""


def upgrade() -> None:
    op.execute(SINGLE_WINDOWS_GO)
    op.execute(WINDOWS)


def downgrade() -> None:
    # NOTE: stop sidecars of this version first: they write no window for a chunk that fits the model, which
    # 0007's one-walk search would then never find.
    op.execute(SINGLE_WINDOWS_BACK)
    op.execute(_windows_0007())

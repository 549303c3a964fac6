"""Multi-vector chunks: every model window's vector in `connector.chunk_windows`, and `connector.search()` ranking a
chunk by its best window blended with its mean vector.

- `chunk_windows(chunk_id, window_no, start_char, end_char, embedding)`: one row per model window (a chunk that fits
  the model is one window, whose vector is the chunk's), spans in the document's Markdown, HNSW index. Chunks
  stored before this migration get one window holding their mean vector (their window vectors were not kept);
  re-ingesting a document stores its real windows.
- `connector.search(query_embedding, query_text, k, filter, text_weight, window_weight)`: the vector arm walks the
  window index, keeps each chunk's best window, and scores a chunk by
  `window_weight · best-window similarity + (1 - window_weight) · mean-vector similarity` (0.5 by default: measured
  in the note of issue 12 and in the README). Rows now also carry `strategy`, `prev_chunk_id`, `next_chunk_id`.
- `filter` also takes `document_id` (one id or an array of ids).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import re

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

MATCHES = """
CREATE FUNCTION connector.search_matches(
    filter jsonb, metadata jsonb, source text, source_key text, chunk_type text, document_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (NOT filter ? 'metadata' OR metadata @> (filter -> 'metadata'))
   AND (NOT filter ? 'source' OR source = filter ->> 'source')
   AND (NOT filter ? 'source_key_prefix'
        OR left(source_key, length(filter ->> 'source_key_prefix')) = filter ->> 'source_key_prefix')
   AND (NOT filter ? 'chunk_type'
        OR CASE jsonb_typeof(filter -> 'chunk_type')
               WHEN 'array' THEN (filter -> 'chunk_type') ? chunk_type
               ELSE chunk_type = filter ->> 'chunk_type' END)
   AND (NOT filter ? 'document_id'
        OR CASE jsonb_typeof(filter -> 'document_id')
               WHEN 'array' THEN (filter -> 'document_id') @> to_jsonb(document_id)
               ELSE document_id = (filter ->> 'document_id')::bigint END);
"""

# The vector arm's index walk, on its own so that its plan can be checked (a SQL function like this one is inlined
# into the query that calls it: `EXPLAIN SELECT * FROM connector.search_windows(...)` shows the plan search() runs).
WINDOWS = """
CREATE FUNCTION connector.search_windows(query_embedding vector, filter jsonb, n integer)
RETURNS TABLE (chunk_id bigint, dist double precision)
LANGUAGE sql STABLE
AS $$
    SELECT w.chunk_id, w.embedding <=> query_embedding
    FROM connector.chunk_windows w
    JOIN connector.chunks c ON c.id = w.chunk_id
    JOIN connector.documents d ON d.id = c.document_id
    WHERE connector.search_matches(filter, d.metadata, d.source, d.source_key, c.chunk_type, c.document_id)
    ORDER BY w.embedding <=> query_embedding
    LIMIT n
$$;
"""

# NOTE: the vector arm reads `greatest(8 k, 80)` windows (a long chunk has several near the query) and keeps the
# best `greatest(4 k, 40)` chunks; RRF's constant 60 is the value of Cormack et al. (2009).
SEARCH = """
CREATE FUNCTION connector.search(
    query_embedding vector, query_text text DEFAULT NULL, k integer DEFAULT 10, filter jsonb DEFAULT '{{}}'::jsonb,
    text_weight double precision DEFAULT 0.5, window_weight double precision DEFAULT 0.5)
RETURNS TABLE (chunk_id bigint, document_id bigint, source_key text, title text, text text, section_path text[],
               page_start integer, page_end integer, chunk_type text, score double precision, strategy text,
               prev_chunk_id bigint, next_chunk_id bigint)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = strict_order  -- filtered searches keep walking the graph until enough rows pass
AS $fn$
DECLARE
    pool integer := greatest(4 * k, 40);
    tq tsquery;
BEGIN
    IF k IS NULL OR k < 1 THEN
        RAISE EXCEPTION 'connector.search: k must be at least 1';
    END IF;
    filter := coalesce(filter, '{{}}'::jsonb);
    window_weight := coalesce(window_weight, 0.5);
    IF query_text IS NOT NULL AND btrim(query_text) <> '' THEN
        -- Any of the question's words (an AND of every word rarely matches one chunk), ranked by cover density.
        tq := nullif(replace(plainto_tsquery('{config}'::regconfig, query_text)::text, ' & ', ' | '), '')::tsquery;
    END IF;
    RETURN QUERY
    WITH win AS (
        SELECT * FROM connector.search_windows(query_embedding, filter, 2 * pool)
    ), vec_scored AS (
        SELECT b.chunk_id AS id,
               (window_weight * (1 - b.dist) + (1 - window_weight) * (1 - (c.embedding <=> query_embedding)))
                   ::double precision AS sim
        FROM (SELECT win.chunk_id, min(win.dist) AS dist FROM win GROUP BY win.chunk_id) b
        JOIN connector.chunks c ON c.id = b.chunk_id
    ), vec AS (
        SELECT vs.id, vs.sim, row_number() OVER (ORDER BY vs.sim DESC, vs.id) AS r
        FROM vec_scored vs ORDER BY vs.sim DESC, vs.id LIMIT pool
    ), fts AS (
        SELECT c.id, row_number() OVER (ORDER BY ts_rank_cd(c.search_tsv, tq) DESC, c.id) AS r
        FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id
        WHERE tq IS NOT NULL AND c.search_tsv @@ tq
          AND connector.search_matches(filter, d.metadata, d.source, d.source_key, c.chunk_type, c.document_id)
        ORDER BY ts_rank_cd(c.search_tsv, tq) DESC, c.id
        LIMIT pool
    ), fused AS (
        -- Without query text the score is the vector similarity itself; with it, weighted reciprocal rank fusion.
        SELECT ranked.id, CASE WHEN tq IS NULL THEN max(ranked.sim) ELSE sum(ranked.w / (60 + ranked.r)) END AS s
        FROM (SELECT vec.id, vec.r, vec.sim, 1.0::double precision AS w FROM vec
              UNION ALL SELECT fts.id, fts.r, NULL, text_weight FROM fts) AS ranked
        GROUP BY ranked.id
    )
    SELECT c.id, c.document_id, d.source_key, d.title, c.text, c.section_path, c.page_start, c.page_end,
           c.chunk_type, f.s::double precision, c.strategy, c.prev_chunk_id, c.next_chunk_id
    FROM fused f JOIN connector.chunks c ON c.id = f.id JOIN connector.documents d ON d.id = c.document_id
    ORDER BY f.s DESC, c.id
    LIMIT k;
END
$fn$;
"""


def _dimension() -> int:
    """The window vectors have the dimension of the chunk vectors already there."""
    row = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'connector.chunks'::regclass AND attname = 'embedding'"
        )
        .fetchone()
    )
    return int(row[0])


def _text_config() -> str:
    """The text search configuration the full-text column was generated with (migration 0006), so that queries
    are parsed as the chunks were, whatever the setting says now."""
    expr = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
            " ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
            " WHERE d.adrelid = 'connector.chunks'::regclass AND a.attname = 'search_tsv'"
        )
        .fetchone()[0]
    )
    match = re.search(r"to_tsvector\('(\w+)'::regconfig", expr)
    if match is None:
        raise RuntimeError(f"cannot read the text search configuration of connector.chunks.search_tsv: {expr}")
    return match.group(1)


def upgrade() -> None:
    dim = _dimension()
    op.execute(
        f"""
        CREATE TABLE connector.chunk_windows (
            chunk_id    bigint NOT NULL REFERENCES connector.chunks (id) ON DELETE CASCADE,
            window_no   integer NOT NULL,
            start_char  integer NOT NULL,
            end_char    integer NOT NULL,
            embedding   vector({dim}) NOT NULL,
            PRIMARY KEY (chunk_id, window_no)
        );
        -- filled before the index is built: one build, not one graph insertion per existing chunk
        INSERT INTO connector.chunk_windows (chunk_id, window_no, start_char, end_char, embedding)
            SELECT id, 0, start_char, end_char, embedding FROM connector.chunks;
        CREATE INDEX chunk_windows_embedding_hnsw ON connector.chunk_windows
            USING hnsw (embedding vector_cosine_ops);
        DROP FUNCTION connector.search(vector, text, integer, jsonb, double precision);
        DROP FUNCTION connector.search_matches(jsonb, jsonb, text, text, text);
        """
    )
    op.execute(MATCHES)
    op.execute(WINDOWS)
    op.execute(SEARCH.format(config=_text_config()))


def downgrade() -> None:
    op.execute(
        """
        DROP FUNCTION IF EXISTS connector.search(vector, text, integer, jsonb, double precision, double precision);
        DROP FUNCTION IF EXISTS connector.search_windows(vector, jsonb, integer);
        DROP FUNCTION IF EXISTS connector.search_matches(jsonb, jsonb, text, text, text, bigint);
        DROP TABLE IF EXISTS connector.chunk_windows;
        """
    )
    previous = _m0006()  # its functions as they were, from the migration that made them
    op.execute(previous.MATCHES)
    op.execute(previous.SEARCH.format(config=_text_config()))


def _m0006():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_m0006", Path(__file__).with_name("0006_search.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

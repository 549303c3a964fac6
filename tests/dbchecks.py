"""SQL assertions shared by the integration tests: the invariants every stored document must satisfy."""

from __future__ import annotations

import psycopg

OFFSET_MISMATCHES = """
SELECT c.id FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id
WHERE substr(d.markdown, c.start_char + 1, c.end_char - c.start_char) <> c.text
"""

# Every chunk's neighbours are the chunks with ordinal ± 1 of the same document, and ordinals run 0..n-1.
LINK_MISMATCHES = """
SELECT c.id FROM connector.chunks c
LEFT JOIN connector.chunks p ON p.document_id = c.document_id AND p.ordinal = c.ordinal - 1
LEFT JOIN connector.chunks n ON n.document_id = c.document_id AND n.ordinal = c.ordinal + 1
WHERE c.prev_chunk_id IS DISTINCT FROM p.id OR c.next_chunk_id IS DISTINCT FROM n.id
UNION ALL
SELECT document_id FROM connector.chunks GROUP BY document_id HAVING max(ordinal) <> count(*) - 1
"""

CANDIDATE_MISMATCHES = """
SELECT d.id FROM connector.documents d
WHERE d.status = 'done' AND (
    (SELECT count(*) FROM connector.candidates c WHERE c.document_id = d.id AND c.chosen) <> 1
    OR NOT EXISTS (SELECT 1 FROM connector.candidates c
                   WHERE c.document_id = d.id AND c.chosen AND c.strategy = d.strategy AND c.score = d.score)
    OR EXISTS (SELECT 1 FROM connector.chunks k WHERE k.document_id = d.id AND k.strategy <> d.strategy)
    OR (SELECT count(*) FROM connector.chunks k WHERE k.document_id = d.id)
       <> (SELECT chunk_count FROM connector.candidates c WHERE c.document_id = d.id AND c.chosen)
)
"""

# The BM25 postings (migration 0008; kept in step by triggers since 0012): one per lexeme of each chunk, none left of
# a chunk that is gone. A chunk's own postings are looked up by its lexemes, as the delete trigger does (0014: there
# is no index on chunk_id alone).
POSTING_MISMATCHES = """
SELECT t.chunk_id FROM connector.chunk_terms t LEFT JOIN connector.chunks c ON c.id = t.chunk_id WHERE c.id IS NULL
UNION ALL
SELECT c.id FROM connector.chunks c
WHERE length(c.search_tsv) <> (SELECT count(*) FROM unnest(c.search_tsv) u
                               JOIN connector.chunk_terms t ON t.term = u.lexeme AND t.chunk_id = c.id)
UNION ALL  -- and no posting besides those: none of a term the chunk does not hold
SELECT NULL WHERE (SELECT count(*) FROM connector.chunk_terms)
                  <> (SELECT coalesce(sum(length(search_tsv)), 0) FROM connector.chunks)
"""


def assert_consistent(conn: psycopg.Connection) -> None:
    assert conn.execute(OFFSET_MISMATCHES).fetchall() == [], "chunk offsets must address documents.markdown"
    assert conn.execute(LINK_MISMATCHES).fetchall() == [], "prev/next links must follow ordinals"
    assert conn.execute(CANDIDATE_MISMATCHES).fetchall() == [], "winner, candidates and chunks must agree"
    assert conn.execute(POSTING_MISMATCHES).fetchall() == [], "postings must match the chunks' lexemes"


def documents(conn: psycopg.Connection) -> dict[str, tuple]:
    rows = conn.execute(
        "SELECT source_key, status, strategy, attempts, last_error FROM connector.documents ORDER BY id"
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


# Time passing, for the queue's clocks: a test that waited out a real backoff or lease raced the machine's speed (a
# slow step after a 0.3 s backoff found the row claimable again). The backoff is set long and then ended by hand.
def backoff_left(conn: psycopg.Connection, doc_id: int) -> float:
    """Seconds until the row may be claimed again."""
    sql = "SELECT extract(epoch FROM retry_after - now())::float8 FROM connector.documents WHERE id = %s"
    return conn.execute(sql, (doc_id,)).fetchone()[0]


def backoff_ends(conn: psycopg.Connection, doc_id: int) -> None:
    conn.execute("UPDATE connector.documents SET retry_after = now() - interval '1 second' WHERE id = %s", (doc_id,))


def lease_ends(conn: psycopg.Connection, doc_id: int) -> None:
    """The worker holding the row stopped renewing its lease long enough ago."""
    sql = "UPDATE connector.documents SET lease_expires_at = now() - interval '1 second' WHERE id = %s"
    conn.execute(sql, (doc_id,))

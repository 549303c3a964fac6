"""Three indexes that every chunk written paid for and no query needs.

- `chunks_search_tsv_gin`, a GIN index over `chunks.search_tsv`: the text arm of `connector.search()` reads the BM25
  postings (`chunk_terms`, migration 0008) and has not matched `search_tsv @@ tsquery` since. The column stays:
  the postings are made from it, and a query of your own can still use it (without an index).
- `chunks_document_idx (document_id, ordinal)`: the same columns, in the same order, as the unique constraint's own
  index `chunks_document_id_ordinal_key`, which serves every lookup it served.
- `chunk_terms_chunk (chunk_id)`: a second btree entry for every posting (~150 per chunk), only there so that the
  trigger of migration 0012 could find a deleted chunk's postings. The trigger now finds them through the primary key
  `(term, chunk_id)`, by the deleted chunk's own lexemes (`search_tsv` is in the transition table: it is a stored
  column). `search_tsv` is generated from `text` and the postings are written from it in the same transaction, so
  the lexemes are the postings' terms. (Were `search_tsv` ever regenerated under other lexemes, a restore into a
  server whose text search dictionaries differ, say, the postings should be written again from it: `TRUNCATE
  connector.chunk_terms` then the `INSERT ... SELECT` of migration 0008. Deleting such chunks would otherwise leave
  the postings of the lexemes they no longer have.)

Measured on 2,000 rows of ~2,400 characters (`connector bench --rows`'s workload), written 32 documents per
transaction: the database's CPU per document went from 2.21-2.42 to 1.78-2.19 ms. Deleting 20 documents (60 chunks,
7,200 postings) from a table of 740,000 postings takes as long as before (55-126 ms either way); one document
6-10 ms.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

DELETE_BY_LEXEMES = """
        CREATE OR REPLACE FUNCTION connector.chunk_terms_follow_delete() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            -- Each deleted chunk's postings, looked up by (term, chunk_id): its lexemes are its postings' terms.
            DELETE FROM connector.chunk_terms t USING gone g CROSS JOIN LATERAL unnest(g.search_tsv) u
            WHERE t.term = u.lexeme AND t.chunk_id = g.id;
            RETURN NULL;
        END $$;
"""

DELETE_BY_CHUNK = """
        CREATE OR REPLACE FUNCTION connector.chunk_terms_follow_delete() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            DELETE FROM connector.chunk_terms t USING gone g WHERE t.chunk_id = g.id;
            RETURN NULL;
        END $$;
"""


def upgrade() -> None:
    op.execute(
        DELETE_BY_LEXEMES
        + """
        DROP INDEX connector.chunk_terms_chunk;
        DROP INDEX connector.chunks_search_tsv_gin;
        DROP INDEX connector.chunks_document_idx;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        CREATE INDEX chunks_document_idx ON connector.chunks (document_id, ordinal);
        CREATE INDEX chunks_search_tsv_gin ON connector.chunks USING gin (search_tsv);
        CREATE INDEX chunk_terms_chunk ON connector.chunk_terms (chunk_id);
        """
        + DELETE_BY_CHUNK
    )

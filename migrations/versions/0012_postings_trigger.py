"""BM25 postings follow their chunks by a statement trigger instead of a foreign key.

The foreign key `chunk_terms.chunk_id → chunks.id` checked every posting as it was inserted: one lookup into
`chunks` per distinct term of every chunk (~150 per chunk), which doubled the cost of writing the postings, the
largest statement of a batch's write. The postings are only ever written by the sidecar, from chunks of the same
transaction (`INSERT … SELECT … FROM connector.chunks`), so that check can never fail. What the key also did, removing
the postings of deleted chunks (ON DELETE CASCADE, also when a document's deletion cascades to its chunks), is done
here once per statement from its transition table, and TRUNCATE of the chunks empties the postings too.

Both functions are SECURITY DEFINER (like the foreign key's own actions, which run as the table's owner): a role
that may delete chunks need not be granted anything on the postings. EXECUTE on them is revoked from PUBLIC.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.chunk_terms DROP CONSTRAINT chunk_terms_chunk_id_fkey;

        CREATE FUNCTION connector.chunk_terms_follow_delete() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            DELETE FROM connector.chunk_terms t USING gone g WHERE t.chunk_id = g.id;
            RETURN NULL;
        END $$;
        CREATE TRIGGER chunk_terms_follow_delete AFTER DELETE ON connector.chunks
            REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION connector.chunk_terms_follow_delete();

        CREATE FUNCTION connector.chunk_terms_follow_truncate() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            TRUNCATE connector.chunk_terms;
            RETURN NULL;
        END $$;
        CREATE TRIGGER chunk_terms_follow_truncate AFTER TRUNCATE ON connector.chunks
            FOR EACH STATEMENT EXECUTE FUNCTION connector.chunk_terms_follow_truncate();

        -- As migration 0003 does for its trigger functions: nobody may call them (nor attach them to a table of
        -- their own to empty the postings with the owner's rights); triggers run them regardless.
        REVOKE EXECUTE ON FUNCTION connector.chunk_terms_follow_delete() FROM PUBLIC;
        REVOKE EXECUTE ON FUNCTION connector.chunk_terms_follow_truncate() FROM PUBLIC;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER chunk_terms_follow_truncate ON connector.chunks;
        DROP TRIGGER chunk_terms_follow_delete ON connector.chunks;
        DROP FUNCTION connector.chunk_terms_follow_truncate();
        DROP FUNCTION connector.chunk_terms_follow_delete();
        DELETE FROM connector.chunk_terms t WHERE NOT EXISTS (SELECT 1 FROM connector.chunks c WHERE c.id = t.chunk_id);
        ALTER TABLE connector.chunk_terms ADD CONSTRAINT chunk_terms_chunk_id_fkey
            FOREIGN KEY (chunk_id) REFERENCES connector.chunks (id) ON DELETE CASCADE;
        """
    )

"""A queue several workers share safely, rows that requeue when their content changes, and users' tables as sources.

- documents: `claimed_by` and `heartbeat_at` (who holds the lease, last sign of life), `retry_after` (transient
  failures back off), `retries` (failed or abandoned tries since the content last changed; capped by the setting
  `max_attempts`), and source 'table' (rows of a watched user table).
- An UPDATE that changes a document's content requeues it (other updates do not).
- A pending row notifies the workers whenever it becomes pending, whichever statement made it so.
- `watched_tables`: the user tables `connector watch-table` installed triggers on; `connector.watch_row()` and
  `connector.watch_truncate()` are those triggers' functions: generic, configured by trigger arguments, so no SQL is
  ever assembled from a table or column name.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.documents
            ADD COLUMN claimed_by   text,
            ADD COLUMN heartbeat_at timestamptz,
            ADD COLUMN retry_after  timestamptz,
            ADD COLUMN retries      integer NOT NULL DEFAULT 0,
            DROP CONSTRAINT documents_source_check,
            ADD CONSTRAINT documents_source_check CHECK (source IN ('folder', 'sql', 'table'));

        CREATE FUNCTION connector.requeue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.content IS DISTINCT FROM OLD.content OR NEW.content_bytes IS DISTINCT FROM OLD.content_bytes
               OR NEW.mime_type IS DISTINCT FROM OLD.mime_type THEN
                NEW.status := 'pending';
                NEW.retries := 0;
                NEW.retry_after := NULL;
                NEW.updated_at := now();
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER documents_requeue_changed BEFORE UPDATE ON connector.documents
        FOR EACH ROW EXECUTE FUNCTION connector.requeue_changed();

        -- "UPDATE OF status" only sees columns named in the statement, not a status set by the trigger above.
        DROP TRIGGER documents_notify_pending ON connector.documents;
        CREATE TRIGGER documents_notify_pending AFTER INSERT OR UPDATE ON connector.documents
        FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION connector.notify_pending();

        CREATE TABLE connector.watched_tables (
            table_name    text PRIMARY KEY,  -- schema.table, as quoted by Postgres (regclass::text)
            id_column     text NOT NULL,
            text_column   text NOT NULL,
            title_column  text,
            metadata_columns text[] NOT NULL DEFAULT '{}',
            installed_at  timestamptz NOT NULL DEFAULT now()
        );

        -- TG_ARGV: 0 = the table's name as stored in watched_tables, 1 = id column, 2 = text column,
        -- 3 = title column ('' for none), 4.. = metadata columns. Values are read through to_jsonb(row).
        CREATE FUNCTION connector.watch_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            r jsonb;
            key text;
            meta jsonb := '{}'::jsonb;
            i integer;
        BEGIN
            IF TG_OP = 'DELETE' THEN
                DELETE FROM connector.documents
                WHERE source = 'table' AND source_key = TG_ARGV[0] || ':' || (to_jsonb(OLD) ->> TG_ARGV[1]);
                RETURN NULL;
            END IF;
            r := to_jsonb(NEW);
            key := TG_ARGV[0] || ':' || (r ->> TG_ARGV[1]);
            IF TG_OP = 'UPDATE' AND (to_jsonb(OLD) ->> TG_ARGV[1]) IS DISTINCT FROM (r ->> TG_ARGV[1]) THEN
                DELETE FROM connector.documents
                WHERE source = 'table' AND source_key = TG_ARGV[0] || ':' || (to_jsonb(OLD) ->> TG_ARGV[1]);
            END IF;
            FOR i IN 4 .. TG_NARGS - 1 LOOP
                meta := meta || jsonb_build_object(TG_ARGV[i], r -> TG_ARGV[i]);
            END LOOP;
            INSERT INTO connector.documents AS d (source, source_key, title, content, mime_type, metadata, status)
            VALUES ('table', key, CASE WHEN TG_ARGV[3] <> '' THEN r ->> TG_ARGV[3] END, r ->> TG_ARGV[2],
                    'text/plain', meta, 'pending')
            ON CONFLICT (source, source_key) DO UPDATE
                SET content = EXCLUDED.content, title = EXCLUDED.title, metadata = d.metadata || EXCLUDED.metadata;
            RETURN NULL;
        END $$;

        CREATE FUNCTION connector.watch_truncate() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            DELETE FROM connector.documents
            WHERE source = 'table' AND left(source_key, length(TG_ARGV[0]) + 1) = TG_ARGV[0] || ':';
            RETURN NULL;
        END $$;

        -- SECURITY DEFINER: attaching a trigger needs EXECUTE on its function, so nobody but their owner (the role
        -- that runs the migrations and `connector watch-table`) can point them at a table.
        REVOKE EXECUTE ON FUNCTION connector.watch_row() FROM PUBLIC;
        REVOKE EXECUTE ON FUNCTION connector.watch_truncate() FROM PUBLIC;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP FUNCTION IF EXISTS connector.watch_truncate() CASCADE;
        DROP FUNCTION IF EXISTS connector.watch_row() CASCADE;
        DROP TABLE IF EXISTS connector.watched_tables;
        DROP TRIGGER IF EXISTS documents_notify_pending ON connector.documents;
        CREATE TRIGGER documents_notify_pending
        AFTER INSERT OR UPDATE OF status ON connector.documents
        FOR EACH ROW WHEN (NEW.status = 'pending') EXECUTE FUNCTION connector.notify_pending();
        DROP TRIGGER IF EXISTS documents_requeue_changed ON connector.documents;
        DROP FUNCTION IF EXISTS connector.requeue_changed();
        DELETE FROM connector.documents WHERE source = 'table';
        ALTER TABLE connector.documents
            DROP CONSTRAINT documents_source_check,
            ADD CONSTRAINT documents_source_check CHECK (source IN ('folder', 'sql')),
            DROP COLUMN claimed_by, DROP COLUMN heartbeat_at, DROP COLUMN retry_after, DROP COLUMN retries;
        """
    )

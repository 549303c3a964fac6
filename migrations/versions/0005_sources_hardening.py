"""Sources hardening (issue 11): the page count gets its own column, and a watched table's trigger never makes the
application's statement fail.

- `documents.page_count`: the number of pages of a paged document (PDF), NULL otherwise. It used to be merged into
  `metadata` (`metadata || {"pages": …}`), which rewrote the user's metadata: an array got an object appended, a
  user `pages` key was overwritten. `metadata` is now only ever written by its owner (you, or the watch trigger
  copying your columns). Existing numeric `metadata.pages` values are copied into the column; `metadata` itself is
  left as it is (the migration cannot tell the connector's key from a user's).
- `connector.watch_key(table, id)`: the `source_key` of a watched row, shared by the trigger and the backfill of
  `connector watch-table`. NULL for a NULL id; an id longer than 512 bytes is keyed by its SHA-256
  (`<table>:sha256:<hex>`): a longer key would not fit the unique index, and the insert would fail.
- `connector.watch_row()` / `connector.watch_truncate()` (replacing 0003's):
  - a row with a NULL id is not queued (a WARNING says so; the application's statement succeeds); an update that
    sets the id to NULL removes the document the old id had;
  - on a table in the `connector` schema they do nothing but warn: on `connector.documents` the trigger's own
    insert would fire it again, without end ("stack depth limit exceeded" on every insert). `watch-table` refuses
    those tables; this is the defence for a trigger attached by hand.
  A NULL text is queued like any other (the document then fails, visibly: no content). There is deliberately no
  catch-all EXCEPTION block: it would cost a subtransaction per row of every bulk load of the user's table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

WATCH_ROW_0005 = """
CREATE OR REPLACE FUNCTION connector.watch_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r jsonb;
    key text;
    old_key text;
    meta jsonb := '{}'::jsonb;
    i integer;
BEGIN
    IF TG_TABLE_SCHEMA = 'connector' THEN
        RAISE WARNING 'connector.watch_row(): %.% is a table of the connector itself and cannot be watched; '
                      'drop the trigger % on it', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NAME;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        old_key := connector.watch_key(TG_ARGV[0], to_jsonb(OLD) ->> TG_ARGV[1]);
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM connector.documents WHERE source = 'table' AND source_key = old_key;
        RETURN NULL;
    END IF;
    r := to_jsonb(NEW);
    key := connector.watch_key(TG_ARGV[0], r ->> TG_ARGV[1]);
    IF TG_OP = 'UPDATE' AND old_key IS DISTINCT FROM key THEN
        DELETE FROM connector.documents WHERE source = 'table' AND source_key = old_key;
    END IF;
    IF key IS NULL THEN
        RAISE WARNING 'connector: a row of % has a NULL %: it is not queued', TG_ARGV[0], TG_ARGV[1];
        RETURN NULL;
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

CREATE OR REPLACE FUNCTION connector.watch_truncate() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_TABLE_SCHEMA = 'connector' THEN
        RAISE WARNING 'connector.watch_truncate(): %.% is a table of the connector itself and cannot be watched',
                      TG_TABLE_SCHEMA, TG_TABLE_NAME;
        RETURN NULL;
    END IF;
    DELETE FROM connector.documents
    WHERE source = 'table' AND left(source_key, length(TG_ARGV[0]) + 1) = TG_ARGV[0] || ':';
    RETURN NULL;
END $$;
"""

# 0003's bodies, restored by the downgrade.
WATCH_ROW_0003 = """
CREATE OR REPLACE FUNCTION connector.watch_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
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

CREATE OR REPLACE FUNCTION connector.watch_truncate() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM connector.documents
    WHERE source = 'table' AND left(source_key, length(TG_ARGV[0]) + 1) = TG_ARGV[0] || ':';
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.documents ADD COLUMN page_count integer;
        UPDATE connector.documents SET page_count = (metadata ->> 'pages')::integer
        WHERE jsonb_typeof(metadata) = 'object' AND jsonb_typeof(metadata -> 'pages') = 'number'
          AND (metadata ->> 'pages') ~ '^[0-9]{1,9}$';

        CREATE FUNCTION connector.watch_key(table_name text, id text) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
        RETURN table_name || ':' || CASE WHEN octet_length(id) > 512
                                         THEN 'sha256:' || encode(sha256(convert_to(id, 'UTF8')), 'hex')
                                         ELSE id END;
        -- Like the other watch functions: only their owner (the trigger, `watch-table`) calls it.
        REVOKE EXECUTE ON FUNCTION connector.watch_key(text, text) FROM PUBLIC;
        """
    )
    op.execute(WATCH_ROW_0005)


def downgrade() -> None:
    op.execute(WATCH_ROW_0003)
    op.execute(
        """
        DROP FUNCTION connector.watch_key(text, text);
        -- the code of revision 0003 reads the page count from metadata: give it back where the user left room
        UPDATE connector.documents SET metadata = metadata || jsonb_build_object('pages', page_count)
        WHERE page_count IS NOT NULL AND jsonb_typeof(metadata) = 'object' AND NOT metadata ? 'pages';
        ALTER TABLE connector.documents DROP COLUMN page_count;
        """
    )

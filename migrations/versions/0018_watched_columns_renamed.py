"""A watched table's columns are followed through a rename (`ALTER TABLE … RENAME COLUMN`).

The row trigger read the id, text, title and metadata columns by the names they had at `watch-table`
(`to_jsonb(NEW) ->> 'body'`). Renamed, a column read as NULL without a word: an update of the text turned a `done`
document `failed` ("row has neither content nor content_bytes"), and once the id column was renamed a deleted row's
document and chunks stayed, found by every search, for good. Postgres keeps a column's number (attnum) through a
rename, and the trigger's own `UPDATE OF` list already follows it: `watched_tables` now records the table's oid and
each named column's number (`watch-table` writes them; here they are read for the tables watched before), and
`connector.watch_column` finds a column by its number once its name is gone. (A watched column cannot be dropped:
the trigger depends on it, and `DROP COLUMN … CASCADE` drops the trigger with it.)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# 0005's body, restored by the downgrade.
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
"""

WATCH_ROW_0018 = """
CREATE OR REPLACE FUNCTION connector.watch_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r jsonb;
    id_col text;
    text_col text;
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
    r := to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END);
    -- the names given to watch-table, or what they were renamed to since
    id_col := connector.watch_column(TG_ARGV[0], TG_ARGV[1], r);
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        old_key := connector.watch_key(TG_ARGV[0], to_jsonb(OLD) ->> id_col);
    END IF;
    IF TG_OP = 'DELETE' THEN
        DELETE FROM connector.documents WHERE source = 'table' AND source_key = old_key;
        RETURN NULL;
    END IF;
    key := connector.watch_key(TG_ARGV[0], r ->> id_col);
    IF TG_OP = 'UPDATE' AND old_key IS DISTINCT FROM key THEN
        DELETE FROM connector.documents WHERE source = 'table' AND source_key = old_key;
    END IF;
    IF key IS NULL THEN
        RAISE WARNING 'connector: a row of % has a NULL %: it is not queued', TG_ARGV[0], TG_ARGV[1];
        RETURN NULL;
    END IF;
    text_col := connector.watch_column(TG_ARGV[0], TG_ARGV[2], r);
    FOR i IN 4 .. TG_NARGS - 1 LOOP
        meta := meta || jsonb_build_object(TG_ARGV[i], r -> connector.watch_column(TG_ARGV[0], TG_ARGV[i], r));
    END LOOP;
    INSERT INTO connector.documents AS d (source, source_key, title, content, mime_type, metadata, status)
    VALUES ('table', key,
            CASE WHEN TG_ARGV[3] <> '' THEN r ->> connector.watch_column(TG_ARGV[0], TG_ARGV[3], r) END,
            r ->> text_col, 'text/plain', meta, 'pending')
    ON CONFLICT (source, source_key) DO UPDATE
        SET content = EXCLUDED.content, title = EXCLUDED.title, metadata = d.metadata || EXCLUDED.metadata;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.watched_tables
            ADD COLUMN relid oid,
            ADD COLUMN attnums jsonb NOT NULL DEFAULT '{}'::jsonb;  -- column name as watched -> its attnum
        UPDATE connector.watched_tables w SET relid = to_regclass(w.table_name),
            attnums = coalesce((SELECT jsonb_object_agg(a.attname, a.attnum) FROM pg_attribute a
                                WHERE a.attrelid = to_regclass(w.table_name) AND NOT a.attisdropped
                                  AND a.attname = ANY (ARRAY[w.id_column, w.text_column, w.title_column]
                                                       || w.metadata_columns)), '{}'::jsonb);

        -- The column watched as `col`: by that name while the row has it, else by the number it had (a rename
        -- keeps it). Only looked up when the name is gone: no cost to a table left alone. The table by its name
        -- first: a dump restored elsewhere gives it another oid (the stored one serves a table renamed since).
        CREATE FUNCTION connector.watch_column(tbl text, col text, r jsonb) RETURNS text
        LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
        RETURN CASE WHEN r ? col THEN col ELSE (
            SELECT a.attname::text FROM connector.watched_tables w
            JOIN pg_attribute a ON a.attrelid = coalesce(to_regclass(w.table_name), w.relid)
                                AND a.attnum = (w.attnums ->> col)::smallint
                                AND NOT a.attisdropped
            WHERE w.table_name = tbl) END;
        REVOKE EXECUTE ON FUNCTION connector.watch_column(text, text, jsonb) FROM PUBLIC;
        """
    )
    op.execute(WATCH_ROW_0018)


def downgrade() -> None:
    op.execute(WATCH_ROW_0005)
    op.execute(
        """
        DROP FUNCTION connector.watch_column(text, text, jsonb);
        ALTER TABLE connector.watched_tables DROP COLUMN relid, DROP COLUMN attnums;
        """
    )

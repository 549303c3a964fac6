"""One NOTIFY per transaction that queues documents, not one per row.

Every pending row sent `pg_notify('connector_documents', id)`: 8,000 rows inserted at once were 8,000 notifications,
written to the server's notification queue and sent to every listening worker thread, which only needs to know that
something is pending (it claims from the table, never from the payload). A listening backend sends its notifications
from inside a transaction of its own; when they outgrow its socket's buffer (~200 KB: ~5,000 notifications) it waits
there, holding its snapshot, until the client reads them. The worker read them only between drains, so during a burst
that backend held back the database's xmin horizon for the whole drain: no dead row version could be vacuumed or
skipped, and every claim walked all the queue index's entries of the rows done since the burst began (8,000 rows: the
claim's scan grew to ~15,000 heap fetches, the queue's bloat grew unchecked). The sidecar now reads its LISTEN
connection without pause (`sidecar._Wakeups`); and here, the payload is the same for every row (an empty string), so
Postgres folds a transaction's notifications into one.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from alembic import op

from connector.settings import NOTIFY_CHANNEL

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def _notify(payload: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION connector.notify_pending() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{NOTIFY_CHANNEL}', {payload});
            RETURN NULL;
        END $$
    """


def upgrade() -> None:
    # Identical notifications of one transaction are sent once (Postgres folds them at commit).
    op.execute(_notify("''"))


def downgrade() -> None:
    op.execute(_notify("NEW.id::text"))

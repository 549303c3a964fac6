"""A row whose `mime_type` changes is converted again, not found unchanged.

Changing `content`, `content_bytes` or `mime_type` requeues a row (`connector.requeue_changed`), but the worker
skips a row whose bytes hash to the stored `content_hash` ("unchanged"): HTML stored as `text/plain`, its type then
corrected to `text/html`, kept its chunks with the tags in them for good. The bytes' hash says nothing of the type
they were converted as, so a new type clears it: the next pass converts the row again.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_BODY = """
CREATE OR REPLACE FUNCTION connector.requeue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.content IS DISTINCT FROM OLD.content OR NEW.content_bytes IS DISTINCT FROM OLD.content_bytes
       OR NEW.mime_type IS DISTINCT FROM OLD.mime_type THEN
        NEW.status := 'pending';
        NEW.retries := 0;
        NEW.retry_after := NULL;
        NEW.updated_at := now();
    END IF;{retype}
    RETURN NEW;
END $$;
"""
_RETYPE = """
    IF NEW.mime_type IS DISTINCT FROM OLD.mime_type THEN
        NEW.content_hash := NULL;  -- the stored chunks came from these bytes read as another type
    END IF;"""


def upgrade() -> None:
    op.execute(_BODY.format(retype=_RETYPE))


def downgrade() -> None:
    op.execute(_BODY.format(retype=""))

"""Queue hardening (issue 11): what a folder row was queued with, so a rescan leaves work in flight alone.

- `queued_hash`: sha256 of the bytes a folder row was last queued with. A rescan (a restarting replica, a second
  replica watching the same folder, the periodic safety rescan) that finds a row pending or processing with these
  same bytes leaves it alone: no second NOTIFY, no try counted, no worker's lease taken away.
- `file_size`, `file_mtime_ns`: the file's size and modification time when it was last hashed, so a rescan re-reads
  only files whose signature changed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.documents
            ADD COLUMN queued_hash   text,
            ADD COLUMN file_size     bigint,
            ADD COLUMN file_mtime_ns bigint;
        -- Rows queued before this revision: the bytes their chunks came from are the best guess (a wrong guess only
        -- costs one extra pass over a file that changed while it was being processed).
        UPDATE connector.documents SET queued_hash = content_hash WHERE source = 'folder';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.documents
            DROP COLUMN IF EXISTS queued_hash,
            DROP COLUMN IF EXISTS file_size,
            DROP COLUMN IF EXISTS file_mtime_ns;
        """
    )

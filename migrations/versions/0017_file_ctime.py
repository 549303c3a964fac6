"""The file's inode change time in the signature a rescan compares, so bytes replaced with the mtime kept are read.

A rescan re-read only files whose size or modification time differed from those their row was hashed with. Tools
that preserve the mtime (`rsync -a`, `cp -p`, `tar x`, reproducible builds with a fixed mtime) replaced a file's
bytes while the sidecar was down, at the same size, and no rescan ever read it again: the database kept the old
content for good. `file_ctime_ns` is the file's `st_ctime_ns` when it was last hashed; no user tool can set it back
(every write, chmod or rename moves it). Rows hashed before this revision have none: the next rescan hashes their
files once (re-queueing only those whose bytes changed) and records it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE connector.documents ADD COLUMN file_ctime_ns bigint")


def downgrade() -> None:
    op.execute("ALTER TABLE connector.documents DROP COLUMN IF EXISTS file_ctime_ns")

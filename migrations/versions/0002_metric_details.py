"""Candidates record which coreference backend produced RC and how long each metric took.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.candidates
            ADD COLUMN rc_backend text,
            ADD COLUMN metric_ms jsonb NOT NULL DEFAULT '{}'::jsonb;
        COMMENT ON COLUMN connector.candidates.rc_backend IS 'coreference backend behind rc (heuristic, maverick)';
        COMMENT ON COLUMN connector.candidates.metric_ms IS 'milliseconds per metric for this candidate';
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE connector.candidates DROP COLUMN rc_backend, DROP COLUMN metric_ms")

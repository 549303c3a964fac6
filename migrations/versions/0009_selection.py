"""Selection that follows retrieval: the retrievability metric and each candidate's shape.

- `candidates.rt`: Retrievability (`connector.metrics.retrievability`), the sixth metric.
- `candidates.shape`: what `connector explain` compares between the winner and the runner-up: token sizes (mean,
  min, max, p10, p90), protected units cut and their total, chunks outside the size range.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.candidates
            ADD COLUMN rt double precision,
            ADD COLUMN shape jsonb NOT NULL DEFAULT '{}'::jsonb;
        COMMENT ON COLUMN connector.candidates.rt IS
            'retrievability: share of sampled sentences that find their own (masked) chunk within the budget';
        COMMENT ON COLUMN connector.candidates.shape IS
            'token sizes, protected units cut, chunks out of range: what explain compares';
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE connector.candidates DROP COLUMN rt, DROP COLUMN shape")

"""Where each candidate cuts, for the web UI's strips.

- `candidates.spans`: the candidate's chunks as a flat array of character offsets into `documents.markdown`,
  `[start_1, end_1, start_2, end_2, ...]` (NULL for candidates scored before this revision, or that failed).
- `candidates.breaks`: what its cuts break, `[{"at": offset, "kind": "table"|"list"|…|"reference", "count": n}]`
  (`connector.metrics.breaks`): the protected units Block Integrity and the coreference pairs References
  Completeness hold against it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE connector.candidates
            ADD COLUMN spans integer[],
            ADD COLUMN breaks jsonb NOT NULL DEFAULT '[]'::jsonb;
        COMMENT ON COLUMN connector.candidates.spans IS
            'the chunks as [start_1, end_1, start_2, end_2, ...] character offsets into documents.markdown';
        COMMENT ON COLUMN connector.candidates.breaks IS
            'what the cuts break: [{"at": offset, "kind": table|list|...|reference, "count": n}]';
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE connector.candidates DROP COLUMN spans, DROP COLUMN breaks")

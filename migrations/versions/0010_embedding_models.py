"""Embedding models that can change without downtime, and a cache of every vector made.

- `embedding_models(slot, provider, name, dim, options, state, ...)`: the `active` model (the one `chunks.embedding`
  and `chunk_windows` hold, the one search embeds questions with) and, while `connector reembed` builds one, the
  `standby` model, whose vectors live beside the active ones in `chunks.standby_embedding` and
  `connector.standby_windows` (created by reembed with the new model's dimension). `connector reembed --switch`
  swaps the two in one transaction; the old vectors stay as the standby until `connector reembed --drop`.
  `options` holds what is needed to load the model again (base URL, dimensions): never a key.
- `embedding_model` becomes a view of the active row (name, dim, recorded_at), as the README's SQL reads it.
- `embedding_cache(model, text_hash, ...)`: every text the storage embedder read, by model and sha256, with its
  windows' spans, token weights and float32 vectors: unchanged chunks of an edited document, and re-ingested text,
  are never sent to the model again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE connector.embedding_models (
            slot        text PRIMARY KEY CHECK (slot IN ('active', 'standby')),
            provider    text NOT NULL,
            name        text NOT NULL,
            dim         integer NOT NULL CHECK (dim > 0),
            options     jsonb NOT NULL DEFAULT '{}'::jsonb,
            state       text NOT NULL DEFAULT 'ready' CHECK (state IN ('building', 'ready')),
            recorded_at timestamptz NOT NULL DEFAULT now(),
            switched_at timestamptz
        );
        INSERT INTO connector.embedding_models (slot, provider, name, dim, recorded_at)
            SELECT 'active', CASE WHEN name LIKE 'fake-%' THEN 'fake' ELSE 'minilm' END, name, dim, recorded_at
            FROM connector.embedding_model;
        DROP TABLE connector.embedding_model;
        CREATE VIEW connector.embedding_model AS
            SELECT name, dim, recorded_at FROM connector.embedding_models WHERE slot = 'active';
        COMMENT ON TABLE connector.embedding_models IS
            'active: the model of chunks.embedding and chunk_windows; standby: the one connector reembed builds';

        CREATE TABLE connector.embedding_cache (
            model      text NOT NULL,
            text_hash  bytea NOT NULL,
            dim        integer NOT NULL,
            spans      integer[] NOT NULL,
            weights    integer[] NOT NULL,
            vectors    bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (model, text_hash)
        );
        COMMENT ON TABLE connector.embedding_cache IS
            'vectors by (model, sha256 of the text embedded): window spans (start, end pairs), token weights, '
            'float32 window vectors';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE IF EXISTS connector.embedding_cache;
        DROP TABLE IF EXISTS connector.standby_windows;
        ALTER TABLE connector.chunks DROP COLUMN IF EXISTS standby_embedding;
        DROP VIEW connector.embedding_model;
        CREATE TABLE connector.embedding_model (
            singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            name        text NOT NULL,
            dim         integer NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO connector.embedding_model (name, dim, recorded_at)
            SELECT name, dim, recorded_at FROM connector.embedding_models WHERE slot = 'active';
        DROP TABLE connector.embedding_models;
        """
    )

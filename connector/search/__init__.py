"""Search: a question in words → the query vector of the database's own model → `connector.search()` in SQL.

The SQL function (migration 0006) is the one search path; this module only embeds the question, checks that the
configured embedder is the one that made the stored vectors, and reads typed rows back. `connector search` is its
command line.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import class_row

from connector.db import queries
from connector.db.rows import EmbeddingModel
from connector.db.store import Passage, SearchHit, Store
from connector.embedders import Embedder
from connector.errors import EmbeddingModelMismatch


@dataclass(frozen=True, slots=True)
class Result:
    hit: SearchHit
    passage: Passage | None  # the hit with its neighbours, when asked for


def check_model(conn: psycopg.Connection, embedder: Embedder | type) -> None:
    """Refuse to search with another model than the one the stored vectors came from (reading only: a search never
    records a model)."""
    with conn.cursor(row_factory=class_row(EmbeddingModel)) as cur:
        model = cur.execute(queries.SELECT_EMBEDDING_MODEL).fetchone()
    conn.rollback()
    if model is not None and (model.name != embedder.name or model.dim != embedder.dim):
        raise EmbeddingModelMismatch(
            f"the stored vectors come from {model.name} ({model.dim} dimensions), the configured embedder is "
            f"{embedder.name} ({embedder.dim}): set CONNECTOR_EMBEDDER (or --embedder) to the database's model"
        )


def query_vector(embedder: Embedder, question: str):
    return embedder.embed([question]).vectors[0]


def search(
    conn: psycopg.Connection,
    embedder: Embedder,
    question: str,
    *,
    k: int,
    hybrid: bool,
    filter: dict,  # noqa: A002 - the SQL function's parameter name
    context: int,
) -> list[Result]:
    store = Store(conn)
    hits = store.search(query_vector(embedder, question), question if hybrid else None, k, filter)
    return [Result(hit, store.search_context(hit.chunk_id, context) if context else None) for hit in hits]


def vector_literal(vector) -> str:
    """The vector as pgvector's text form, for pasting into psql (`'[...]'::vector`)."""
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"

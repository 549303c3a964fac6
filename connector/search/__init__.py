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


FILTER_SHAPE = (
    '{"metadata": {...}, "source": "...", "source_key_prefix": "...", "chunk_type": "..." or [...], '
    '"document_id": 1 or [...]}'
)

MAX_QUESTION_CHARS = 8000
"""A longer question is refused: the model reads its first 256 word pieces anyway, and its text arm would look up
every word."""


def check_request(question: str, filter: dict) -> None:  # noqa: A002 - the SQL function's parameter name
    """Raise ValueError, saying what is wrong, for a question or filter the SQL function would choke on (a
    `document_id` that is not an integer fails its cast there) or silently misread."""
    if len(question) > MAX_QUESTION_CHARS:
        raise ValueError(f"the question is {len(question)} characters long; the most is {MAX_QUESTION_CHARS}")

    def ids(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63

    checks = {
        "metadata": lambda v: isinstance(v, dict),
        "source": lambda v: isinstance(v, str),
        "source_key_prefix": lambda v: isinstance(v, str),
        "chunk_type": lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
        "document_id": lambda v: ids(v) or (isinstance(v, list) and all(ids(x) for x in v)),
    }
    for key, value in filter.items():
        if key in checks and not checks[key](value):
            raise ValueError(f"filter {key!r} cannot be {str(value)[:100]!r}: {FILTER_SHAPE}")


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
    check_request(question, filter)
    return search_vector(conn, query_vector(embedder, question), question, k=k, hybrid=hybrid, filter=filter,
                         context=context)  # fmt: skip


def search_vector(
    conn: psycopg.Connection,
    vector,
    question: str,
    *,
    k: int,
    hybrid: bool,
    filter: dict,  # noqa: A002 - the SQL function's parameter name
    context: int,
) -> list[Result]:
    """`search` with the question already embedded (a server embeds before it takes a connection from its pool)."""
    check_request(question, filter)
    store = Store(conn)
    hits = store.search(vector, question if hybrid else None, k, filter)
    return [Result(hit, store.search_context(hit.chunk_id, context) if context else None) for hit in hits]


def vector_literal(vector) -> str:
    """The vector as pgvector's text form, for pasting into psql (`'[...]'::vector`)."""
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"

"""Search: a question in words → the query vector of the database's own model → `connector.search()` in SQL.

The SQL function (migration 0006) is the one search path; this module only embeds the question with the database's
active model (`search.models.ActiveModel`: after `connector reembed --switch`, the new one), and reads typed rows
back. `connector search` is its
command line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import psycopg

from connector.db import embeddings
from connector.db.store import Passage, SearchHit, Store
from connector.embedders import Embedder, ModelSpec
from connector.errors import TransientError
from connector.search.models import ActiveModel


@dataclass(frozen=True, slots=True)
class Result:
    hit: SearchHit
    passage: Passage | None  # the hit with its neighbours, when asked for


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
    if _has_nul(question) or _has_nul(filter):  # Postgres text cannot hold one
        raise ValueError("the question or filter holds a NUL character")

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


def _has_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def query_vector(embedder: Embedder, question: str):
    return embedder.embed([question]).vectors[0]


def search(
    conn: psycopg.Connection,
    models: ActiveModel,
    question: str,
    *,
    k: int,
    hybrid: bool,
    filter: dict,  # noqa: A002 - the SQL function's parameter name
    context: int,
) -> list[Result]:
    """The question embedded with the database's active model, then searched; embedded again when a switch to
    another model happened in between."""
    check_request(question, filter)
    for _ in range(3):
        spec, embedder = models.current(conn)
        results = search_vector(conn, query_vector(embedder, question), question, k=k, hybrid=hybrid, filter=filter,
                                context=context, model=spec)  # fmt: skip
        if results is not None:
            return results
    raise TransientError("the embedding model changed three times during one search: try again")


def search_vector(
    conn: psycopg.Connection,
    vector,
    question: str,
    *,
    k: int,
    hybrid: bool,
    filter: dict,  # noqa: A002 - the SQL function's parameter name
    context: int,
    model: ModelSpec | None = None,
) -> list[Result] | None:
    """`search` with the question already embedded (a server embeds before it takes a connection from its pool).
    With `model` (the one that embedded it), None when that is no longer the database's active model."""
    check_request(question, filter)
    if not np.any(vector) or not np.all(np.isfinite(vector)):
        # No direction to rank by (the `fake` model's vector of a question with no word in it, `!!!`): every cosine
        # would be NaN, a 500 at /search. Nor has such a question a term for the text arm: nothing is found.
        return []
    store = Store(conn)
    with conn.transaction():
        if model is not None:
            row = embeddings.hold_shared(conn)  # no switch until these rows are read
            if row is not None and not embeddings.same_space(row.spec, model):
                return None  # (no row: nothing is stored yet, any model finds nothing)
        hits = store.search(vector, question if hybrid else None, k, filter)
        return [Result(hit, store.search_context(hit.chunk_id, context) if context else None) for hit in hits]


def vector_literal(vector) -> str:
    """The vector as pgvector's text form, for pasting into psql (`'[...]'::vector`)."""
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"

"""SC, Size Compliance: the share of chunks whose token count lies in [min_tokens, max_tokens]."""

from __future__ import annotations

from collections.abc import Sequence

from connector.models import Chunk


def size_compliance(chunks: Sequence[Chunk], min_tokens: int = 100, max_tokens: int = 1100) -> float | None:
    if not chunks:
        return None
    return sum(1 for c in chunks if min_tokens <= c.token_count <= max_tokens) / len(chunks)

"""Selection: the candidate with the highest weighted score wins (algorithm-spec §5)."""

from __future__ import annotations

from collections.abc import Sequence

from connector.errors import DocumentError
from connector.models import Scored


def choose(scored: Sequence[Scored]) -> Scored:
    """Highest score; ties go to the strategy listed first in the settings, so the choice is deterministic."""
    best: Scored | None = None
    for s in scored:
        if s.score is not None and s.candidate.chunks and (best is None or s.score > best.score):
            best = s
    if best is None:
        errors = "; ".join(f"{s.candidate.strategy}: {s.candidate.error or 'no chunks'}" for s in scored)
        raise DocumentError(f"no chunking strategy produced chunks ({errors})")
    return best

"""Coreference backends for References Completeness: each turns a document's text into (antecedent, pronoun) pairs.

- `heuristic` (default): offline, English, deterministic, fast (see `heuristic.py`);
- `maverick`: Maverick (ACL 2024) from a local checkpoint path; an optional extra whose weights are licensed
  CC BY-NC-SA (non-commercial), so never a default.
"""

from __future__ import annotations

from connector.coref.base import CorefBackend, Pair, is_english
from connector.errors import FatalError


def load(name: str, maverick_path: str | None = None) -> CorefBackend:
    if name == "heuristic":
        from connector.coref.heuristic import HeuristicCoref

        return HeuristicCoref()
    if name == "maverick":
        from connector.coref.maverick import MaverickCoref

        if not maverick_path:
            raise FatalError("coref backend 'maverick' needs CONNECTOR_METRICS_MAVERICK_PATH (a local checkpoint)")
        return MaverickCoref.from_checkpoint(maverick_path)
    raise FatalError(f"unknown coreference backend {name!r}; known: heuristic, maverick")


__all__ = ["CorefBackend", "Pair", "is_english", "load"]

"""Maverick (Martinelli et al., ACL 2024) as a coreference backend: an optional extra, loaded from a local
checkpoint only (never a hub download). Its published weights are licensed CC BY-NC-SA 4.0: non-commercial use.

`Maverick.predict(text)` returns, among other keys, `clusters_char_offsets`: one list per cluster of
(start, end) character offsets with *inclusive* ends; a cluster may be empty. The adapter pairs each pronoun
mention with the nearest preceding non-pronoun mention of its cluster, or the cluster's first non-pronoun mention
when none precedes it (algorithm-spec §4).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from connector.coref.base import Pair, is_english
from connector.coref.heuristic import DEMONSTRATIVE, PRONOUNS
from connector.errors import FatalError


class MaverickModel(Protocol):
    def predict(self, text: str) -> dict[str, Any]: ...


class MaverickCoref:
    name = "maverick"

    def __init__(self, model: MaverickModel):
        self._model = model
        # Worker threads share one backend; Maverick wraps a Hugging Face fast tokenizer, which is not thread-safe
        # ("Already borrowed"), and a torch model that already uses every core: one document at a time.
        self._lock = threading.Lock()

    @classmethod
    def from_checkpoint(cls, path: str) -> MaverickCoref:
        try:
            from maverick import Maverick  # optional extra: pip install 'connector[maverick]'
        except ImportError as exc:
            raise FatalError("coref backend 'maverick' needs the maverick-coref package") from exc
        return cls(Maverick(hf_name_or_path=path, device="cpu"))

    def pairs(self, text: str) -> list[Pair] | None:
        if not is_english(text):
            return None
        with self._lock:
            prediction = self._model.predict(text)
        return pairs_from_clusters(text, prediction.get("clusters_char_offsets") or [])


def pairs_from_clusters(text: str, clusters: list[list[tuple[int, int]]]) -> list[Pair]:
    out: list[Pair] = []
    for cluster in clusters:
        mentions = sorted((int(start), int(end) + 1) for start, end in cluster)  # inclusive → exclusive end
        entities = [m for m in mentions if not _is_pronoun(text[m[0] : m[1]])]
        if not entities:
            continue
        for start, end in mentions:
            if not _is_pronoun(text[start:end]):
                continue
            before = [e for e in entities if e[0] < start]
            entity = before[-1] if before else entities[0]
            out.append(Pair(entity[0], entity[1], start, end))
    return sorted(out)


def _is_pronoun(mention: str) -> bool:
    word = mention.strip().lower()
    return word in PRONOUNS or word in DEMONSTRATIVE

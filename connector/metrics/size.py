"""SC, Size Compliance: the share of chunks whose token count lies in [min_tokens, max_tokens].

Measured by default on the strategy's own chunks, before the guards (the paper's Table 3): the guards re-split and
merge until nearly every chunk complies, so SC after them is 1.0 for every candidate and cannot tell two apart.
"""

from __future__ import annotations

from collections.abc import Sequence


def size_compliance(token_counts: Sequence[int], min_tokens: int, max_tokens: int) -> float | None:
    if not token_counts:
        return None
    return sum(1 for n in token_counts if min_tokens <= n <= max_tokens) / len(token_counts)

"""RC, References Completeness: the share of coreference pairs that no chunk boundary separates (algorithm-spec §4).

A pair is broken when a boundary b (the start of chunks 2..n) has lo < b ≤ hi, where [lo, hi) covers both the
antecedent and the pronoun: for the usual pair that is entity_start < b ≤ pronoun_end; a cataphor (the pronoun
first, which Maverick can report) is covered the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from connector.coref import Pair
from connector.models import Chunk


def references_completeness(pairs: Sequence[Pair] | None, chunks: Sequence[Chunk]) -> float | None:
    if not pairs:
        return None
    cuts = sorted(c.start for c in chunks[1:])
    broken = 0
    for pair in pairs:
        lo = min(pair.entity_start, pair.pronoun_start)
        hi = max(pair.entity_end, pair.pronoun_end)
        i = bisect.bisect_right(cuts, lo)  # first cut > lo
        if i < len(cuts) and cuts[i] <= hi:
            broken += 1
    return 1 - broken / len(pairs)

"""BI, Block Integrity: the share of protected units (`Document.units`: blocks bound by
the rules of `convert.structure`) that no chunk boundary cuts.

Cuts are the start offsets of chunks 2..n. A block [l, r) is broken by a cut p when l < p < r with more than
`tolerance` characters on each side: a cut that only clips whitespace or a stray character at a block edge is not
a broken block.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from connector.models import Block, Chunk

TOLERANCE = 5


def block_integrity(blocks: Sequence[Block], chunks: Sequence[Chunk], tolerance: int = TOLERANCE) -> float | None:
    if not blocks:
        return None
    cuts = sorted(c.start for c in chunks[1:])
    broken = 0
    for block in blocks:
        # Only cuts strictly inside (l + tolerance, r - tolerance) can break the block.
        lo = bisect.bisect_right(cuts, block.start + tolerance)
        if lo < len(cuts) and cuts[lo] < block.end - tolerance:
            broken += 1
    return 1 - broken / len(blocks)

"""What each cut of a candidate breaks, for the web UI's strips: the protected units Block Integrity counts (with
the kind of block the cut falls in) and the coreference pairs References Completeness counts.

The same rules as BI and RC (`blocks.TOLERANCE`, a pair broken when a cut lands in (lo, hi]), so a mark on a strip
is exactly one of the things those metrics hold against the candidate.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from connector.coref import Pair
from connector.metrics.blocks import TOLERANCE
from connector.models import Block, Chunk, Document

MAX_BREAKS = 500
"""Marks kept per candidate: beyond these a strip is all marks anyway, and the row stays small. More are merged
along the document (`thinned`), their counts summed, so the total stays exact and the marks stay spread out."""


def breaks_of(document: Document, chunks: Sequence[Chunk], pairs: Sequence[Pair] | None) -> list[dict]:
    """One entry per (cut, kind): `{"at": offset, "kind": "table"|"list"|"code"|…|"heading+paragraph"|"reference",
    "count": n}`; a cut between two blocks a unit binds is named by both (e.g. a heading cut from its text)."""
    cuts = [c.start for c in chunks[1:]]
    if not cuts:
        return []
    found: dict[tuple[int, str], int] = {}
    units = document.units or document.blocks
    starts = [b.start for b in document.blocks]
    for unit in units:
        lo = bisect.bisect_right(cuts, unit.start + TOLERANCE)
        while lo < len(cuts) and cuts[lo] < unit.end - TOLERANCE:
            at = cuts[lo]
            key = (at, _kind_at(document.blocks, starts, at))
            found[key] = found.get(key, 0) + 1
            lo += 1
    for pair in pairs or ():
        lo = min(pair.entity_start, pair.pronoun_start)
        hi = max(pair.entity_end, pair.pronoun_end)
        i = bisect.bisect_right(cuts, lo)
        if i < len(cuts) and cuts[i] <= hi:  # RC counts a pair once, at the first cut that separates it
            key = (cuts[i], "reference")
            found[key] = found.get(key, 0) + 1
    ordered = [{"at": at, "kind": kind, "count": n} for (at, kind), n in sorted(found.items())]
    return thinned(ordered, MAX_BREAKS)


def thinned(ordered: list[dict], limit: int) -> list[dict]:
    """At most `limit` marks out of `ordered` ones: consecutive runs of about equal length merged into their first
    mark, whose kind is the run's most frequent one, whose count is the run's total, and which says `merged`."""
    if len(ordered) <= limit:
        return ordered
    out = []
    for i in range(limit):
        run = ordered[i * len(ordered) // limit : (i + 1) * len(ordered) // limit]
        kinds: dict[str, int] = {}
        for b in run:
            kinds[b["kind"]] = kinds.get(b["kind"], 0) + b["count"]
        merged = {"at": run[0]["at"], "kind": max(kinds, key=kinds.get), "count": sum(kinds.values())}
        out.append(merged | {"merged": True} if len(run) > 1 or run[0].get("merged") else merged)
    return out


def _kind_at(blocks: Sequence[Block], starts: list[int], at: int) -> str:
    i = bisect.bisect_right(starts, at) - 1
    if i < 0:
        return "paragraph"
    block = blocks[i]
    if at - block.start > TOLERANCE or i == 0:  # inside this block
        return block.kind
    return f"{blocks[i - 1].kind}+{block.kind}"  # at the seam of two blocks bound into one unit

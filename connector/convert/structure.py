"""Block maps: tiling spans into blocks, and binding blocks into the units that a cut should not break.

Binding rules (algorithm-spec §1, seed 003): a heading is bound to the block after it; a footnote to the block
before it; a list to its lead-in sentence (a paragraph ending with ":"); a caption to the table it captions (before
it, or after it when it says "Table"); and consecutive short paragraphs (< `SHORT_TOKENS` tokens) are grouped
while the group stays short.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from connector import tokens
from connector.models import Block

SHORT_TOKENS = 100


def tile(text: str, spans: Sequence[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Stretch ordered, non-overlapping (start, end, kind) spans so that they tile `text`: each span is extended to
    the next one's start (the whitespace between belongs to the earlier span); the first starts at 0."""
    spans = [s for s in spans if s[1] > s[0]]
    if not spans:
        return [(0, len(text), "paragraph")] if text else []
    out = []
    for i, (start, _end, kind) in enumerate(spans):
        nxt = spans[i + 1][0] if i + 1 < len(spans) else len(text)
        out.append((0 if i == 0 else start, nxt, kind))
    return out


def join_entries(blocks: Sequence[Block], entries: Sequence[tuple[int, int]]) -> tuple[Block, ...]:
    """The blocks, with those that start inside one entry of a definition list (`entries`: ordered (start, end)
    spans, e.g. a man page's `.TP` options) joined into one block of kind "list": an option's tag, its paragraphs
    and its example are one unit to the metrics, and the boundary between two options is a place to cut. A table
    stays a block of its own: it is split by rows, and a chunk cut out of it is embedded under its header row (a
    `list` block has none), and the entry's blocks after it are joined again."""
    if not entries:
        return tuple(blocks)
    starts = [s for s, _ in entries]
    out: list[Block] = []
    current = None  # index of the entry the last block of `out` was joined from
    for block in blocks:
        if block.kind == "table":
            out.append(block)
            current = None
            continue
        i = bisect.bisect_right(starts, block.start) - 1
        inside = i if i >= 0 and block.start < entries[i][1] else None
        if inside is not None and inside == current:
            first = out[-1]
            out[-1] = Block(first.start, block.end, "list", first.section_path, first.page)
            continue
        out.append(Block(block.start, block.end, "list", block.section_path, block.page) if inside is not None
                   else block)  # fmt: skip
        current = inside
    return tuple(out)


def units(text: str, blocks: Sequence[Block], encoding: str) -> tuple[Block, ...]:
    """Protected spans: the blocks, joined wherever the binding rules forbid a split point between two of them."""
    if not blocks:
        return ()
    sizes = tokens.count_many([text[b.start : b.end] for b in blocks], encoding)
    groups: list[list[int]] = [[0]]
    group_tokens = sizes[0]  # of the last group, kept as it grows: summing it again each time is quadratic
    for i in range(1, len(blocks)):
        prev, cur = blocks[i - 1], blocks[i]
        group = groups[-1]
        bound = (
            prev.kind == "heading"
            or cur.kind == "footnote"
            or (cur.kind == "list" and prev.kind == "paragraph" and text[prev.start : prev.end].rstrip().endswith(":"))
            or (prev.kind == "caption" and cur.kind == "table")
            or (prev.kind == "table" and cur.kind == "caption" and is_table_caption(text[cur.start : cur.end]))
            or (
                cur.kind == "paragraph"
                and prev.kind == "paragraph"
                and sizes[i] < SHORT_TOKENS
                and group_tokens < SHORT_TOKENS
            )
        )
        if bound:
            group.append(i)
            group_tokens += sizes[i]
        else:
            groups.append([i])
            group_tokens = sizes[i]
    return tuple(
        Block(blocks[g[0]].start, blocks[g[-1]].end, blocks[g[-1]].kind if len(g) > 1 else blocks[g[0]].kind,
              blocks[g[0]].section_path, blocks[g[0]].page)
        for g in groups
    )  # fmt: skip


def is_table_caption(text: str) -> bool:
    return text.lstrip("*_ ").lower().startswith("table")

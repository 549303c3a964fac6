"""Plain text and reStructuredText → block map. The text is kept as is: paragraphs are the spans between blank
lines; a paragraph that is a title with an underline (and optional overline) of punctuation is a heading, its level
given by the order in which each underline style first appears (the reStructuredText rule); paragraphs whose lines
start with bullets or enumerators are lists."""

from __future__ import annotations

import re

from connector.convert.structure import tile
from connector.models import Block

_PARAGRAPH = re.compile(r"\S(?:.*\S)?(?:\n[ \t]*\S.*)*", re.MULTILINE)  # runs of non-blank lines
_RULE = re.compile(r"^([=\-~^\"'`#*+:._])\1{2,}\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\(?[0-9]{1,3}[.)]|\(?[a-z][.)])\s+\S")


def blocks(text: str) -> tuple[Block, ...]:
    spans: list[tuple[int, int, str]] = []
    titles: dict[int, tuple[str, str]] = {}
    for m in _PARAGRAPH.finditer(text):
        para = m.group(0)
        lines = para.splitlines()
        title = _heading_title(lines)
        if title is not None:
            style = ("over" if _RULE.match(lines[0]) else "") + lines[-1].strip()[0]
            titles[m.start()] = (style, title)
            spans.append((m.start(), m.end(), "heading"))
        elif len(lines) > 1 and sum(bool(_LIST_ITEM.match(line)) for line in lines) >= 2:
            spans.append((m.start(), m.end(), "list"))
        else:
            spans.append((m.start(), m.end(), "paragraph"))
    styles: list[str] = []
    path: list[tuple[int, str]] = []
    out = []
    for start, end, kind in tile(text, spans):
        if start in titles:
            style, title = titles[start]
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
        out.append(Block(start, end, kind, tuple(t for _, t in path)))
    return tuple(out)


def _heading_title(lines: list[str]) -> str | None:
    if len(lines) >= 2 and _RULE.match(lines[-1]) and not _RULE.match(lines[-2]):
        body = lines[1:-1] if _RULE.match(lines[0]) else lines[:-1]
        if 1 <= len(body) <= 2 and all(line.strip() for line in body):
            title = " ".join(line.strip() for line in body)
            if len(lines[-1].strip()) >= min(len(title), 3):
                return title
    return None

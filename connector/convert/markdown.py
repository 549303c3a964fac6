"""Markdown → block map, with markdown-it-py (CommonMark + pipe tables). The text itself is never changed: block
offsets come from the parser's line map, so `markdown[block.start:block.end]` is exactly what the user wrote."""

from __future__ import annotations

import bisect
import re

from markdown_it import MarkdownIt

from connector.convert.structure import is_table_caption, tile
from connector.models import Block

_PARSER = MarkdownIt("commonmark").enable("table")
# YAML front matter opens with a key: a page that starts with a rule (texi2html's `<hr>` above the
# chapter title) and has another further down was all "front matter", one code block without a heading.
# Hugo's and Zola's TOML front matter sits between `+++` lines, a `key = value` first.
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\n(?=[\w\"'.-][^\n:]*:(?:[ \t]|$))(?:.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)"
    r"|\A\+\+\+[ \t]*\n(?=[\w\"'.-][^\n=]*=|\[)(?:.*?\n)?\+\+\+[ \t]*(?:\n|\Z)",
    re.DOTALL | re.MULTILINE,
)
_CAPTION = re.compile(r"^(?:\*\*|_)?(?:Figure|Fig\.|Table|Listing)\s+[\dA-Z][\w.-]*[:.]", re.IGNORECASE)
_FOOTNOTE = re.compile(r"^\[\^[^\]]+\]:")

_KIND_BY_TOKEN = {
    "heading_open": "heading",
    "paragraph_open": "paragraph",
    "bullet_list_open": "list",
    "ordered_list_open": "list",
    "table_open": "table",
    "fence": "code",
    "code_block": "code",
    "html_block": "paragraph",
    "blockquote_open": "paragraph",
    "hr": "paragraph",
}


def blocks(text: str, page_starts: tuple[int, ...] = ()) -> tuple[Block, ...]:
    line_starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def offset(line: int) -> int:
        return line_starts[line] if line < len(line_starts) else len(text)

    spans: list[tuple[int, int, str]] = []
    titles: dict[int, tuple[int, str]] = {}  # span start → (level, title) for headings
    body_start = 0
    if m := _FRONT_MATTER.match(text):
        spans.append((0, m.end(), "code"))  # YAML or TOML front matter: metadata, kept whole
        body_start = m.end()
    tokens = _PARSER.parse(text[body_start:])
    first_line = text.count("\n", 0, body_start)
    for i, tok in enumerate(tokens):
        if tok.level != 0 or tok.type not in _KIND_BY_TOKEN or tok.map is None:
            continue
        start, end = offset(tok.map[0] + first_line), offset(tok.map[1] + first_line)
        kind = _KIND_BY_TOKEN[tok.type]
        if kind == "paragraph":
            inline = tokens[i + 1].content if i + 1 < len(tokens) else ""
            if _CAPTION.match(inline):
                kind = "caption"
            elif _FOOTNOTE.match(inline):
                kind = "footnote"
        if kind == "heading":
            titles[start] = (int(tok.tag[1]), heading_text(tokens[i + 1]))
        spans.append((start, end, kind))

    out: list[Block] = []
    path: list[tuple[int, str]] = []
    for start, end, kind in tile(text, spans):
        if kind == "heading" and start in titles:
            level, title = titles[start]
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
        page = max(1, bisect.bisect_right(page_starts, start)) if page_starts else None
        out.append(Block(start, end, kind, tuple(t for _, t in path), page))
    return tuple(out)


def heading_text(inline) -> str:
    """A heading's text as a reader sees it, for section paths and titles: link text without its target, code without
    its backticks, no emphasis marks or backslash escapes, entities decoded, HTML tags dropped (a type parameter such
    as `<T>`, which CommonMark also reads as a tag, kept). rustdoc's `Struct [std](../index.html)::[vec](index.html)`
    is `Struct std::vec`. The Markdown source when that leaves nothing (an image without alt text)."""
    parts: list[str] = []
    stack = list(reversed(inline.children or []))
    while stack:
        child = stack.pop()
        if child.type in ("text", "text_special", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            stack.extend(reversed(child.children or []))  # its alt text
        elif child.type == "html_inline" and not _HTML_TAG.match(child.content):
            parts.append(child.content)
    text = " ".join("".join(parts).split())
    return text or " ".join(inline.content.split())


# An HTML tag or comment, by the names HTML gives its elements: `<T>` and `<K, V>` in a generic type are text.
_HTML_TAG = re.compile(
    r"<(?:!--|/?(?:a|abbr|b|bdi|bdo|big|br|cite|code|data|del|dfn|em|font|i|img|ins|kbd|mark|q|s|samp|small|span|"
    r"strike|strong|sub|sup|time|tt|u|var|wbr|div|p|section|details|summary|center|input|label|button|picture|"
    r"source|svg|math|ruby|rt|rp)\b)",
    re.I,
)


def split_large_tables(text: str, max_tokens: int, encoding: str) -> str:
    return split_large_tables_moving(text, max_tokens, encoding, ())[0]


def split_large_tables_moving(
    text: str, max_tokens: int, encoding: str, spans: tuple[tuple[int, int], ...]
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Split every pipe table over `max_tokens` tokens by rows into parts that each repeat the header row, its
    delimiter row and the table's caption (the caption paragraph just before it or, as in most papers, just after
    it, if any), so that every part still
    says what its columns mean. For generated Markdown only (PDF, HTML): a user's own Markdown is never rewritten."""
    from connector import tokens

    found = blocks(text)
    out: list[str] = []
    moves: list[tuple[int, int]] = []  # (end of a rewritten table's text, how far what follows it moved)
    pos = 0
    for i, block in enumerate(found):
        if block.kind != "table":
            continue
        table = text[block.start : block.end].rstrip("\n")
        if tokens.count(table, encoding) <= max_tokens:
            continue
        lines = table.split("\n")
        header, rows = lines[:2], [line for line in lines[2:] if line.strip()]
        caption = _caption_of(text, found, i)
        head_tokens = tokens.count("\n".join(header), encoding) + tokens.count(caption, encoding)
        if 2 * head_tokens > max_tokens:
            # A header that fills half a part left room for a row or two: repeated over every one or two rows, it
            # multiplied the table (a CSV with a 1,000-column header, by its number of rows). Left whole.
            continue
        parts: list[list[str]] = [[]]
        used = head_tokens
        for row, n in zip(rows, tokens.count_many(rows, encoding), strict=True):
            if parts[-1] and used + n > max_tokens:
                parts.append([])
                used = head_tokens
            parts[-1].append(row)
            used += n
        rendered = ["\n".join([*header, *part]) for part in parts]
        repeated = [f"{caption}\n\n{r}" if caption else r for r in rendered[1:]]
        out.append(text[pos : block.start])
        new = "\n\n".join([rendered[0], *repeated])
        out.append(new + text[block.start + len(table) : block.end])
        moves.append((block.start + len(table), (moves[-1][1] if moves else 0) + len(new) - len(table)))
        pos = block.end
    out.append(text[pos:])

    def moved(offset: int) -> int:  # an offset inside a table (none falls there) stays; one after it moves with it
        j = bisect.bisect_right(moves, (offset, float("inf"))) - 1
        return offset + (moves[j][1] if j >= 0 else 0)

    return "".join(out), tuple((moved(a), moved(b)) for a, b in spans)


def _caption_of(text: str, spans: tuple[Block, ...], i: int) -> str:
    for j in (i - 1, i + 1):
        if 0 <= j < len(spans) and spans[j].kind == "caption":
            caption = text[spans[j].start : spans[j].end].strip()
            if j == i - 1 or is_table_caption(caption):
                return caption
    return ""


def first_title(text: str, blocks: tuple[Block, ...], max_page: int | None = None) -> str | None:
    """The document's title as its own text gives it: the first heading of its top level, when that heading comes
    before any other heading (and, for paged documents, on one of the first `max_page` pages), and either opens the
    document or is the only heading of its level. None otherwise: a wiki page of prose and then `## Example`,
    `## Using a template` is not called "Example"."""
    headings = [b for b in blocks if b.kind == "heading" and b.section_path]
    if not headings:
        return None
    first = headings[0]
    if max_page is not None and first.page is not None and first.page > max_page:
        return None
    if len(first.section_path) != 1 or re.match(r"\d+(?:\.\d+)*\.?\s", first.section_path[0]):
        return None  # "1 Introduction" is the first section, not the document's title
    level = _level(text[first.start : first.end])
    levels = [_level(text[h.start : h.end]) for h in headings[1:]]
    if level is None or any(lv is not None and lv < level for lv in levels):
        return None
    if level in levels and _words_before(text, blocks, first.start):
        return None  # one of several sections of that level, after the page's own text
    title = first.section_path[0].strip()
    return title if 0 < len(title) <= 200 else None


# What names nothing before a page's first heading: badges and logos (images, links' targets), HTML tags, ikiwiki
# directives (`[[!meta …]]`, `[[!toc]]`).
_NOT_WORDS = re.compile(r"!\[[^\]]*\]\([^)]*\)|\]\([^)]*\)|<[^>]*>|\[\[![^\]]*\]\]")


def _words_before(text: str, blocks: tuple[Block, ...], offset: int) -> bool:
    """Whether the prose before `offset` says anything: three words or more in its paragraphs and lists (front matter
    and tables, GnuTLS's table of CI badges, left out)."""
    before = (text[b.start : b.end] for b in blocks if b.start < offset and b.kind in ("paragraph", "list"))
    return len(re.findall(r"\w{2,}", _NOT_WORDS.sub(" ", " ".join(before)))) >= 3


def sole_top_heading(blocks: tuple[Block, ...]) -> str | None:
    """The first heading, when it opens the outline and no other heading shares its top level: in reStructuredText
    (and plain text) levels come from the order in which rule styles first appear, not from the rule's character,
    so Python's `***` over-and-underlined chapter titles were level 2 to `first_title` and no title at all."""
    headings = [b for b in blocks if b.kind == "heading" and b.section_path]
    if not headings or len(headings[0].section_path) != 1 or sum(len(h.section_path) == 1 for h in headings) != 1:
        return None
    title = headings[0].section_path[0].strip()
    if re.match(r"\d+(?:\.\d+)*\.?\s", title):
        return None  # "1 Introduction" is the first section, not the document's title
    return title if 0 < len(title) <= 200 else None


def _level(heading: str) -> int | None:
    m = re.match(r"\s*(#{1,6})\s", heading)
    if m:
        return len(m.group(1))
    lines = heading.strip().splitlines()  # a setext heading: underlined with = (level 1) or - (level 2)
    return (1 if lines[-1].lstrip().startswith("=") else 2) if len(lines) >= 2 else None


_FRONT_MATTER_TITLE = re.compile(
    r"^title[ \t]*(?::|(?P<toml>=))[ \t]*(?P<q>[\"']?)(?P<title>.+?)(?P=q)[ \t]*$", re.MULTILINE
)
# ikiwiki's `[[!meta title="…"]]` directive, on a line of its own (an escaped `\[[!meta …]]` shows the syntax)
_IKIWIKI_TITLE = re.compile(
    r'^\[\[!meta\s+title=(?:"""(?P<long>.+?)"""|"(?P<title>[^"\n]+)"|(?P<bare>[^\s\]"]+))', re.M | re.S
)


def front_matter_title(text: str) -> str | None:
    """`title:` of a YAML front matter block (R Markdown, Quarto, Jekyll, Hugo), `title = "…"` of TOML front matter
    (Hugo, Zola), when it is a plain string; else the title of an ikiwiki `[[!meta title="…"]]` directive."""
    m = _FRONT_MATTER.match(text)
    found = _FRONT_MATTER_TITLE.search(m.group(0)) if m else None
    if found is not None and bool(found.group("toml")) == m.group(0).startswith("+++"):
        title = " ".join(found.group("title").split())
        if title and not title.startswith(("|", ">", "!", "`r")):
            return title[:300]
    directive = _IKIWIKI_TITLE.search(text)
    title = (
        " ".join((directive.group("long") or directive.group("title") or directive.group("bare")).split())
        if directive
        else ""
    )
    return title[:300] or None

"""GNU info manuals (`makeinfo`'s output, `/usr/share/info/*.info.gz`) → their text without the reader's apparatus.

An info file is plain text made for the `info` reader: each node opens with a `File: x.info,  Node: …,  Next: …,
Up: …` line, ends (most nodes above the leaves) in a `* Menu:` of links to its child nodes, and the file carries a
directory entry, a tag table of byte offsets and a `Local Variables` trailer. Read as text, every node's navigation
line and every menu became a paragraph of its own, and the tag table a list of node names: chunks that match
queries naming a section and answer none. The headings and the prose are kept as written; `text.py` makes the
blocks (`*`, `=`, `-`, `.` underlines are the chapter, section, subsection levels).
"""

from __future__ import annotations

import re

# NOTE: the node separator (0x1F), the tag table's 0x7F and the index markers' NUL/BS are control characters that
# `sniff.decode` has already dropped; these patterns match what is left of them.
_OPENING = re.compile(r"\AThis is [^\n]*\bproduced by (?:makeinfo|texi2any)\b[^\n]*(?:\n\S+)?\n*")  # `from\nx.texi.`
_TOP = re.compile(r"^File: [^\n,]+,[ \t]+Node: Top,[^\n]*\n\n(?P<title>\S[^\n]*)\n\*+[ \t]*$", re.MULTILINE)
_NODE_LINE = re.compile(r"^File: [^\n,]+,[ \t]+Node: [^\n]*\n", re.MULTILINE)
_DIR_ENTRY = re.compile(
    r"^INFO-DIR-SECTION [^\n]*\n|^START-INFO-DIR-ENTRY\n(?:.*\n)*?END-INFO-DIR-ENTRY\n", re.MULTILINE
)
_TAG_TABLE = re.compile(r"^Tag Table:\n(?:.*\n)*?End Tag Table\n?|^Indirect:\n(?:[^\n]*: \d+\n)*", re.MULTILINE)
_TRAILER = re.compile(r"^Local Variables:\n(?:[^\n]*\n){0,5}?End:[ \t]*\n?\s*\Z", re.MULTILINE)
_INDEX_MARK = re.compile(r"^\[index\]\n", re.MULTILINE)  # `\0\b[index\0\b]`: "this node is an index"
_MENU = re.compile(r"^\* Menu:[^\n]*\n", re.MULTILINE)  # at the margin: an example of a menu is indented
_ENTRY = re.compile(r"\* [^\n]*:")  # `* Node::`, `* Name: Node.`, `* index term:  Node.  (line 12)`


def is_info(text: str) -> bool:
    return _OPENING.match(text) is not None


def title(text: str) -> str | None:
    """The Top node's heading (`Bash Features`): every chapter is underlined as it is, so neither the first
    heading nor a sole top-level one names the manual."""
    found = _TOP.search(text)
    return " ".join(found.group("title").split())[:300] if found else None


def clean(text: str, keep_menus: bool = False) -> str:
    """`text` without its opening "This is x.info, produced by makeinfo" paragraph, directory entry, node lines,
    tag table and trailer, and (unless `keep_menus`) without its menus and indexes, which are menus too."""
    drop = [m.span() for pattern in (_DIR_ENTRY, _NODE_LINE, _TAG_TABLE, _INDEX_MARK) for m in pattern.finditer(text)]
    if (opening := _OPENING.match(text)) is not None:
        drop.append(opening.span())
    if (trailer := _TRAILER.search(text)) is not None:
        drop.append(trailer.span())
    if not keep_menus:
        node_starts = sorted([m.start() for m in _NODE_LINE.finditer(text)] + [len(text)])
        drop += [_menu_span(text, m.start(), node_starts) for m in _MENU.finditer(text)]
    out: list[str] = []
    at = 0
    for start, end in sorted(drop):
        if start < at:  # inside a span already dropped (a tag table's `Node:` lines)
            at = max(at, end)
            continue
        if start > at:
            out.append(text[at:start])
        at = end
        while at < len(text) and text[at] == "\n":  # the blank lines after a dropped span go with it,
            at += 1
        if at > end and out and not out[-1].endswith("\n\n"):  # but one: bash's directory entry sits right
            at -= 1  # under its opening paragraph, and that paragraph would run into the Top node's heading
    out.append(text[at:])
    return "".join(out)


def _menu_span(text: str, start: int, node_starts: list[int]) -> tuple[int, int]:
    """From `* Menu:` to the end of its last entry (with its description's continuation lines) in the node: the
    group labels between entries ("-- The Detailed Node Listing --", a chapter's name) go with the menu, any
    paragraph after the last entry stays."""
    node_end = next(s for s in node_starts if s > start)
    end = start
    in_entry = False
    for line in re.finditer(r"[^\n]*\n?", text[start:node_end]):
        body = line.group(0)
        if not body:
            break
        if _ENTRY.match(body):
            in_entry = True
        elif not body.strip() or not (in_entry and body[0] in " \t"):  # a blank line or a group's label
            in_entry = False
            continue
        end = start + line.end()
    return start, end

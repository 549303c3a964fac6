"""Plain text, reStructuredText and lightweight markup read as text → block map. The text is kept as is:
paragraphs are the spans between blank lines; a paragraph that is a title with an underline (and optional overline)
of punctuation is a heading, its level given by the order in which each underline style first appears (the
reStructuredText rule); paragraphs whose lines start with bullets or enumerators are lists. AsciiDoc, Org and LaTeX
add their own heading lines (`== Title`, `** Title`, `\\section{Title}`)."""

from __future__ import annotations

import bisect
import re

from connector.convert.structure import tile
from connector.models import Block

_PARAGRAPH = re.compile(r"\S(?:.*\S)?(?:\n[ \t]*\S.*)*", re.MULTILINE)  # runs of non-blank lines
_RULE = re.compile(r"^([=\-~^\"'`#*+:._])\1{2,}\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\(?[0-9]{1,3}[.)]|\(?[a-z][.)])\s+\S")


# Headings of lightweight markup read as text: (pattern, level from the match). The title, level 1 in AsciiDoc and
# Org (`= Title`, `#+TITLE:`), is also the document's title.
_DIALECT_HEADINGS = {
    "asciidoc": re.compile(r"^(?P<marks>={1,6}|#{1,6})[ \t]+(?P<title>\S.*?)(?:[ \t]+=+)?[ \t]*$"),
    "org": re.compile(r"^(?P<marks>\*{1,6})[ \t]+(?P<title>\S.*?)[ \t]*$"),
    "tex": re.compile(
        r"^[ \t]*\\(?P<command>part|chapter|section|subsection|subsubsection|paragraph|frametitle)\*?[ \t]*"
        r"(?:\[[^\]\n]*\])?\{(?P<title>[^{}\n]*(?:\{[^{}\n]*\}[^{}\n]*)*)\}"
        r"|^[ \t]*\\begin\{frame\}(?:<[^>\n]*>)?(?:\[[^\]\n]*\])?\{(?P<frame>[^{}\n]+)\}"
    ),
}
_TEX_LEVELS = {"part": 1, "chapter": 2, "section": 3, "subsection": 4, "subsubsection": 5, "paragraph": 6}
_TITLES = {
    "asciidoc": re.compile(r"\A(?:[ \t]*(?://.*)?\n)*=[ \t]+(?P<title>\S.*?)[ \t]*$", re.MULTILINE),
    "org": re.compile(r"^#\+TITLE:[ \t]*(?P<title>\S.*?)[ \t]*$", re.MULTILINE | re.IGNORECASE),
    "tex": re.compile(r"\\title(?:\[[^\]\n]*\])?\{(?P<title>[^{}\n]+)\}"),
}
_ADOC_ATTRIBUTE = re.compile(r"^:(?P<name>[\w-]+):[ \t]*(?P<value>.*?)[ \t]*$", re.MULTILINE)


# Literal blocks, where a heading-like line is code: AsciiDoc's ----/..../++++//// and ``` delimiters, Org's
# #+BEGIN_x ... #+END_x, LaTeX's verbatim-like environments.
_VERBATIM = {
    "asciidoc": re.compile(r"^(?P<fence>-{4,}|\.{4,}|\+{4,}|/{4,}|```)[ \t]*$.*?^(?P=fence)[ \t]*$", re.M | re.S),
    "org": re.compile(r"^[ \t]*#\+BEGIN_(?P<kind>\w+).*?^[ \t]*#\+END_(?P=kind)\b", re.M | re.S | re.I),
    "tex": re.compile(r"\\begin\{(?P<env>verbatim\*?|Verbatim|lstlisting|minted|comment)\}.*?\\end\{(?P=env)\}", re.S),
}


class _Literal:
    """Offsets inside a dialect's literal blocks."""

    def __init__(self, text: str, dialect: str | None):
        pattern = _VERBATIM.get(dialect or "")
        spans = [(m.start(), m.end()) for m in pattern.finditer(text)] if pattern else []
        self.starts, self.ends = [a for a, _ in spans], [b for _, b in spans]

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self.starts, offset) - 1
        return i >= 0 and offset < self.ends[i]


def blocks(text: str, dialect: str | None = None) -> tuple[Block, ...]:
    """Blocks of plain text, or of a markup read as text: `dialect` "asciidoc", "org" or "tex" adds its
    headings (a heading line starts a block of its own; the lines after it are the next block), except inside its
    literal blocks."""
    pattern = _DIALECT_HEADINGS.get(dialect or "")
    literal = _Literal(text, dialect)
    spans: list[tuple[int, int, str]] = []
    titles: dict[int, tuple[str, str]] = {}
    for m in _paragraphs(text, pattern, literal):
        para = m.group(0)
        lines = para.splitlines()
        found = pattern.match(lines[0]) if pattern and m.start() not in literal else None
        if found is not None:
            head_end = m.start() + len(lines[0])
            titles[m.start()] = (_dialect_style(found), plain_title(_group(found, "title", "frame"), dialect))
            spans.append((m.start(), head_end, "heading"))
            rest = _PARAGRAPH.search(text, head_end, m.end())
            if rest is not None:
                spans.append((rest.start(), m.end(), "paragraph"))
            continue
        title = _heading_title(lines) if pattern is None else None
        if title is not None:
            style = ("over" if _RULE.match(lines[0]) else "") + lines[-1].strip()[0]
            titles[m.start()] = (style, plain_title(title, None))
            spans.append((m.start(), m.end(), "heading"))
        elif pattern is None and (title := _glued_title(para)) is not None:
            head_end = m.start() + para.index("\n", para.index("\n") + 1)
            titles[m.start()] = (para.split("\n")[1].strip()[0], plain_title(title, None))
            spans.append((m.start(), head_end, "heading"))
            rest = _PARAGRAPH.search(text, head_end, m.end())
            if rest is not None:
                spans.append((rest.start(), m.end(), _kind(rest.group(0).splitlines())))
        else:
            spans.append((m.start(), m.end(), _kind(lines)))
    styles: list[str] = []
    path: list[tuple[int, str]] = []
    out = []
    for start, end, kind in tile(text, spans):
        if start in titles:
            style, title = titles[start]
            if style.startswith("level:"):
                level = int(style[6:])
            else:
                if style not in styles:
                    styles.append(style)
                level = styles.index(style) + 1
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
        out.append(Block(start, end, kind, tuple(t for _, t in path)))
    return tuple(out)


def _kind(lines: list[str]) -> str:
    return "list" if len(lines) > 1 and sum(bool(_LIST_ITEM.match(line)) for line in lines) >= 2 else "paragraph"


def _paragraphs(text: str, heading: re.Pattern | None, literal: _Literal) -> list[re.Match]:
    """Runs of non-blank lines; with a dialect, a heading line also starts a run (Org and LaTeX put headings right
    under the text before them)."""
    out: list[re.Match] = []
    for m in _PARAGRAPH.finditer(text):
        if heading is None:
            out.append(m)
            continue
        start = m.start()
        for line in re.finditer(r"[^\n]+", m.group(0)):
            at = m.start() + line.start()
            if at > start and heading.match(line.group(0)) and at not in literal:
                out.append(_PARAGRAPH.match(text, start, at - 1) or _PARAGRAPH.search(text, start, at))
                start = at
        out.append(_PARAGRAPH.match(text, start, m.end()))
    return [m for m in out if m is not None]


def _group(m: re.Match, *names: str) -> str:
    return next((m.group(n) for n in names if n in m.re.groupindex and m.group(n)), "")


def _dialect_style(m: re.Match) -> str:
    if marks := _group(m, "marks"):
        return f"level:{len(marks)}"
    if command := _group(m, "command"):
        return f"level:{_TEX_LEVELS.get(command, 6)}"
    return "level:6"  # a beamer frame


def title(text: str, dialect: str | None) -> str | None:
    """The title a markup's own syntax gives (`= Title`, `#+TITLE:`, `\\title{}`), attributes resolved."""
    pattern = _TITLES.get(dialect or "")
    found = pattern.search(text) if pattern else None
    if found is None:
        return None
    value = found.group("title")
    if dialect == "asciidoc":
        attributes = {m.group("name"): m.group("value") for m in _ADOC_ATTRIBUTE.finditer(text)}
        value = re.sub(r"\{([\w-]+)\}", lambda a: attributes.get(a.group(1), a.group(0)), value)
    value = plain_title(value, dialect)
    return value[:300] or None


PLAIN_TITLE_MAX_CHARS = 1_000  # a longer heading keeps its markup: `"= " + "_a " * 10000` took 5.6 s to clean


def plain_title(title: str, dialect: str | None) -> str:
    """A heading's text as a reader sees it, for section paths and titles: without the inline markup of
    reStructuredText (read as text, `dialect` None), AsciiDoc or Org: ``` ``-dNEWPDF`` ``` is `-dNEWPDF`,
    `` `Sphinx <https://…>`_ `` is `Sphinx`, `[[https://…][Org]]` is `Org`. LaTeX's titles are kept as written."""
    if len(title) > PLAIN_TITLE_MAX_CHARS:  # no heading is that long; its patterns scan on from each unclosed mark
        return " ".join(title.split())
    for pattern, repl in _INLINE.get(dialect or "rst", ()):
        title = pattern.sub(repl, title)
    return " ".join(title.split())


def _emphasis(mark: str) -> tuple[re.Pattern, str]:
    """Text between `mark`s that open after a space or punctuation and close before one, around no space at either
    end: `*emphasis*` and `**strong**`, not `2 * 3 * 4` or `a*b`."""
    m = re.escape(mark)
    return re.compile(rf"(?<![\w*_=~`]){m}(?=[^\s{m[-1]}])(.+?)(?<=[^\s\\]){m}(?![\w*_=~`])"), r"\1"


_INLINE: dict[str, tuple[tuple[re.Pattern, str], ...]] = {
    "rst": (
        (re.compile(r"``(\S(?:.*?\S)?)``"), r"\1"),  # ``literal``
        (re.compile(r":[\w.+-]+(?::[\w.+-]+)*:`([^`<]*?)\s*(?:<[^`>]*>)?`"), r"\1"),  # :role:`text <target>`
        (re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?"), r"\1"),  # `text <url>`_
        (re.compile(r"`([^`]+)`(?:__?)?"), r"\1"),  # `reference`_, `interpreted`
        _emphasis("**"),
        _emphasis("*"),
    ),
    "asciidoc": (
        (re.compile(r"<<[^,>]*,\s*([^>]+)>>"), r"\1"),  # <<id,text>>
        (re.compile(r"\b(?:link:|xref:|https?://)[^\s\[]*\[([^\]]+)\]"), r"\1"),  # link:url[text]
        _emphasis("``"),
        _emphasis("`"),
        _emphasis("**"),
        _emphasis("*"),
        _emphasis("__"),
        _emphasis("_"),
    ),
    "org": (
        (re.compile(r"\[\[[^\]]*\]\[([^\]]+)\]\]"), r"\1"),  # [[target][description]]
        (re.compile(r"\[\[([^\]]+)\]\]"), r"\1"),  # [[target]]
        _emphasis("="),
        _emphasis("~"),
        _emphasis("*"),
    ),
}


def _glued_title(para: str) -> str | None:
    """The title of a paragraph that starts with a one-line title and its underline, the text right below them:
    reStructuredText and AsciiDoc need no blank line there (git's manuals: `NAME` / `----` / `git-rebase - …`).
    The underline must be about as long as the title (AsciiDoc allows two characters less; reStructuredText wants it
    at least as long), so a rule under a line of text is no underline."""
    lines = para.split("\n", 2)
    if len(lines) < 3 or _RULE.match(lines[0]) or not _RULE.match(lines[1]) or _RULE.match(lines[2]):
        return None
    title, rule = lines[0].strip(), lines[1].strip()
    if lines[0] != lines[0].lstrip() or len(rule) < max(len(title) - 2, 3) or title.endswith(":"):
        return None
    # A rule that comes again below opens a delimited block (`[NOTE]` / `====` … `====`, a `----` listing after its
    # lead-in "Example contents:"): the line above it is the block's label or attributes, no title.
    if title.startswith("[") and title.endswith("]"):
        return None
    return None if re.search(rf"^{re.escape(rule)}[ \t]*$", lines[2], re.MULTILINE) else title


def _heading_title(lines: list[str]) -> str | None:
    if len(lines) >= 2 and _RULE.match(lines[-1]) and not _RULE.match(lines[-2]):
        if _RULE.match(lines[0]):
            # Overline and underline: a title between two equal rules at least as long as each of its (one or two)
            # lines. An AsciiDoc listing (`----`, commands, `----`) is none: it made `$ git clone …` a title, and
            # one whose rules are as long as its command (git-rebase's `$ git rebase -i HEAD~5`) starts with a prompt.
            over, under, body = lines[0].strip(), lines[-1].strip(), [line.strip() for line in lines[1:-1]]
            fits = 1 <= len(body) <= 2 and all(0 < len(line) <= len(under) for line in body)
            fits = fits and not body[0].startswith("$ ")
            return " ".join(" ".join(body).split()) if over == under and fits else None
        body = lines[:-1]
        if 1 <= len(body) <= 2 and all(line.strip() for line in body):
            title = " ".join(line.strip() for line in body)
            if len(lines[-1].strip()) >= min(len(title), 3):
                return title
    return None

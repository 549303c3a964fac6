"""What the pages draw, computed from stored rows: the document's Markdown cut into pieces at the winning chunks'
boundaries, each candidate's strip (where it cuts and what its cuts break), metric bars, and search words marked in
a hit. Pure functions over offsets; the templates only lay them out.

Everything a document holds is user input: the Markdown is rendered by markdown-it with raw HTML off (so
`<script>` is text) and images off (a page loads nothing from outside the server); every other string goes through
Jinja's autoescape or `markupsafe.escape`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from connector.embedders.lexical import STOP_WORDS
from connector.metrics.breaks import thinned

COLOURS = 8
"""Chunk colours, cycled (`.c0` … `.c7` in ui.css): neighbours never share one."""

MAX_SEGMENTS = 500
"""Segments drawn per strip: past these, neighbouring chunks share one (a strip is ~1,000 pixels wide anyway)."""

MAX_MARKS = 150
"""Marks drawn per strip, merged along the document past these (`metrics.breaks.thinned`), counts summed."""

TEXT_PART_CHARS = 150_000
"""The document page renders its text a part at a time, parts of whole chunks of about this many characters:
rendering a 2 MB manual at once holds the interpreter (and so every other request) for a second."""

RENDER_MAX_CHARS = 1_000_000
"""A longer document is shown as preformatted text, with the same boundaries: rendering megabytes of Markdown
would hold a request thread for seconds."""

METRIC_LABELS = {
    "rc": "References Completeness",
    "icc": "Intrachunk Cohesion",
    "dcc": "Document Contextual Coherence",
    "bi": "Block Integrity",
    "sc": "Size Compliance",
    "rt": "Retrievability",
}

BREAK_LABELS = {
    "table": "cuts a table",
    "list": "cuts a list",
    "code": "cuts a code block",
    "reference": "separates a pronoun from what it refers to",
}

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
_markdown.disable("image")


_ALIGN = re.compile(r"text-align:(left|right|center)")
_ABSOLUTE = re.compile(r"(?i)^(https?:|mailto:)")


def _page_safe(state) -> None:
    """What the page's policy needs from the rendered document: a document's `#` is the page's h3 (the page keeps
    its h1 and h2); a table cell's alignment is a class, not a `style` attribute (the CSP refuses inline styles);
    a link that is not absolute (http, https, mailto) is shown as text, since it would resolve against the UI's
    own paths; an absolute one opens without telling the other site where it came from."""
    for token in state.tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + 2)}"
        elif token.type in ("th_open", "td_open") and (style := token.attrGet("style")):
            del token.attrs["style"]
            if m := _ALIGN.search(style):
                token.attrSet("class", f"align-{m.group(1)}")
        for child in token.children or ():
            if child.type == "link_open":
                href = child.attrGet("href") or ""
                if _ABSOLUTE.match(href):
                    child.attrSet("rel", "noopener noreferrer nofollow")
                else:
                    child.meta["dead"] = href


def _link_open(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    if "dead" in token.meta:
        env.setdefault("dead", []).append(True)
        return f'<span class="dead-link" title="{escape(token.meta["dead"])}">'
    env.setdefault("dead", []).append(False)
    return self.renderToken(tokens, idx, options, env)


def _link_close(self, tokens, idx, options, env) -> str:
    return "</span>" if env.get("dead") and env["dead"].pop() else self.renderToken(tokens, idx, options, env)


_markdown.core.ruler.push("page_safe", _page_safe)
_markdown.add_render_rule("link_open", _link_open)
_markdown.add_render_rule("link_close", _link_close)


def render_markdown(text: str) -> Markup:
    return Markup(_markdown.render(text))  # noqa: S704 - markdown-it escapes the text; raw HTML is off


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of the document: a winning chunk's own text (up to the next chunk's start), or text no chunk holds."""

    start: int
    end: int
    html: Markup
    ordinal: int | None = None  # None: text outside every chunk
    chunk_id: int | None = None
    tokens: int | None = None
    overlap: int = 0  # characters this chunk shares with the next one (shown once, in this piece)

    @property
    def colour(self) -> str:
        return "gap" if self.ordinal is None else f"c{self.ordinal % COLOURS}"


def pieces(
    markdown: str, chunks: list, begin: int = 0, end: int | None = None, next_start: int | None = None
) -> list[Piece]:
    """`chunks`: `ChunkLine`s in order, the document's or one part's (then `begin` and `end` bound the part's text,
    and `next_start` is where the next part's first chunk starts). A piece runs from a chunk's start to the next
    chunk's start (or its own end); text between two chunks that is more than whitespace, and text before the
    first or after the last, is a gap."""
    stop_at = len(markdown) if end is None else end
    render = render_markdown if stop_at - begin <= RENDER_MAX_CHARS else _preformatted
    out: list[Piece] = []
    at = begin
    for i, c in enumerate(chunks):
        start, end = max(c.start_char, at), c.end_char
        if start > at:
            _gap(out, markdown, at, start, render)
        nxt = chunks[i + 1].start_char if i + 1 < len(chunks) else next_start
        stop = min(end, nxt) if nxt is not None and nxt > start else end
        stop = max(stop, start)
        overlap = max(0, end - nxt) if nxt is not None else 0
        out.append(Piece(start, stop, render(markdown[start:stop]), c.ordinal, c.id, c.token_count, overlap))
        at = max(at, stop)
    if at < stop_at:
        _gap(out, markdown, at, stop_at, render)
    return out


def _gap(out: list[Piece], markdown: str, start: int, end: int, render) -> None:
    if markdown[start:end].strip():
        out.append(Piece(start, end, render(markdown[start:end])))


def _preformatted(text: str) -> Markup:
    return Markup("<pre>") + escape(text) + Markup("</pre>")


@dataclass(frozen=True, slots=True)
class Segment:
    x: float  # per mille of the document, for an SVG 1000 units wide
    width: float
    colour: str
    label: str
    href: str | None = None
    current: bool = False


@dataclass(frozen=True, slots=True)
class Mark:
    x: float
    kind: str  # the break's kind: table, list, code, reference, heading+paragraph, …
    label: str
    count: int = 1  # units cut or pairs separated at this cut (more when marks were merged: `metrics.breaks`)

    @property
    def css(self) -> str:
        return self.kind if self.kind in BREAK_LABELS else "unit"


@dataclass(frozen=True, slots=True)
class Strip:
    name: str
    chosen: bool
    segments: list[Segment]
    marks: list[Mark]
    note: str | None = None  # why there is nothing to draw
    chunks: int = 0  # what the segments stand for (more than one chunk each past `MAX_SEGMENTS`)

    @property
    def breaks(self) -> int:
        return sum(m.count for m in self.marks)


def strip(name: str, chosen: bool, total: int, spans: list[int] | None, breaks: list[dict]) -> Strip:
    """One candidate's chunks as coloured segments along the document, and a mark at each cut that breaks a
    protected unit or a reference pair."""
    if spans is None:
        return Strip(name, chosen, [], [], "cuts not recorded (scored before this version, or the strategy failed)")
    if not total or not spans:
        return Strip(name, chosen, [], [], "no chunks")
    pairs = list(zip(spans[::2], spans[1::2], strict=True))
    segments = []
    for g, (first, last) in enumerate(_groups(len(pairs), MAX_SEGMENTS)):
        s, e = pairs[first][0], pairs[last][1]
        label = (f"chunk {first + 1}: characters {s:,}–{e:,} ({e - s:,})" if first == last
                 else f"chunks {first + 1}–{last + 1}: characters {s:,}–{e:,}")  # fmt: skip
        segments.append(Segment(_x(s, total), max(_x(e, total) - _x(s, total), 0.4), f"c{g % COLOURS}", label))
    marks = [Mark(_x(b["at"], total), b["kind"], _break_label(b), b.get("count", 1))
             for b in thinned(breaks, MAX_MARKS)]  # fmt: skip
    return Strip(name, chosen, segments, marks, chunks=len(pairs))


def _groups(n: int, limit: int) -> list[tuple[int, int]]:
    """`n` items as at most `limit` consecutive runs of about equal length: (first, last) indices."""
    if n <= limit:
        return [(i, i) for i in range(n)]
    return [(i * n // limit, (i + 1) * n // limit - 1) for i in range(limit)]


def chunk_strip(total: int, chunks: list, current_id: int | None = None, href=None) -> Strip:
    """The stored chunks along the document (linked to their pages), one of them marked as the current one; past
    `MAX_SEGMENTS`, neighbours share a segment (linked to the first of them)."""
    segments = []
    for g, (first, last) in enumerate(_groups(len(chunks), MAX_SEGMENTS)):
        a, b = chunks[first], chunks[last]
        label = (f"chunk {a.ordinal + 1}: characters {a.start_char:,}–{a.end_char:,}, {a.token_count} tokens"
                 if first == last else
                 f"chunks {a.ordinal + 1}–{b.ordinal + 1}: characters {a.start_char:,}–{b.end_char:,}")  # fmt: skip
        current = any(c.id == current_id for c in chunks[first : last + 1])
        segments.append(Segment(_x(a.start_char, total), max(_x(b.end_char, total) - _x(a.start_char, total), 0.4),
                                f"c{(a.ordinal if first == last else g) % COLOURS}", label,
                                href(a) if href else None, current))  # fmt: skip
    return Strip("stored chunks", True, segments, [], chunks=len(chunks))


def text_parts(chunks: list) -> list[tuple[int, int]]:
    """The document page's parts: (first, last) chunk indices, whole chunks of about `TEXT_PART_CHARS`."""
    parts: list[tuple[int, int]] = []
    first, size = 0, 0
    for i, c in enumerate(chunks):
        size += c.end_char - c.start_char
        if size >= TEXT_PART_CHARS or i == len(chunks) - 1:
            parts.append((first, i))
            first, size = i + 1, 0
    return parts


def _x(offset: int, total: int) -> float:
    return round(1000 * min(max(offset, 0), total) / total, 2) if total else 0.0


def _break_label(b: dict) -> str:
    kind, n, at = b["kind"], b.get("count", 1), b["at"]
    if b.get("merged"):  # neighbouring marks drawn as one (`metrics.breaks.thinned`)
        return f"{n} breaks from character {at:,} on, most of them: {_what(kind, 1)}"
    return f"cut at character {at:,} {_what(kind, n)}"


def _what(kind: str, n: int) -> str:
    if kind == "reference":
        what = f"separates {n} pronoun{'s' if n != 1 else ''} from what {'they refer' if n != 1 else 'it refers'} to"
    elif kind in BREAK_LABELS:
        what = BREAK_LABELS[kind]
    elif "+" in kind:
        first, second = kind.split("+", 1)
        what = f"cuts a {first} from the {second} bound to it"
    else:
        what = f"cuts a {kind}"
    return what


@dataclass(frozen=True, slots=True)
class Bar:
    metric: str
    label: str
    value: float | None
    weight: float

    @property
    def width(self) -> float:
        return 0.0 if self.value is None else round(100 * min(max(self.value, 0.0), 1.0), 1)


def bars(candidate, weights: dict[str, float]) -> list[Bar]:
    """`candidate`: a `StoredCandidate`. One bar per metric with a weight, then none for the others."""
    return [Bar(m, label, getattr(candidate, m), weights.get(m, 0.0)) for m, label in METRIC_LABELS.items()]


_WORD = re.compile(r"\w+")
_QUESTION_WORDS = frozenset({"how", "what", "why", "when", "where", "which", "who", "whom", "whose", "does", "do"})


def query_words(question: str) -> list[str]:
    """The words of a question worth marking in a hit: not stop words, not single characters; longest first, so
    that a regex alternation prefers them."""
    skip = STOP_WORDS | _QUESTION_WORDS
    words = {w.lower() for w in _WORD.findall(question) if len(w) > 1 and w.lower() not in skip}
    return sorted(words, key=lambda w: (-len(w), w))


def highlight(text: str, words: list[str]) -> Markup:
    """`text` escaped, with each whole-word occurrence of `words` (any case) in `<mark>`."""
    if not words:
        return escape(text)
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)
    out = Markup()
    at = 0
    for m in pattern.finditer(text):
        out += escape(text[at : m.start()]) + Markup("<mark>") + escape(m.group()) + Markup("</mark>")
        at = m.end()
    return out + escape(text[at:])


def around(passage: str, hit: str) -> tuple[str, str, str]:
    """A hit's passage as (before, the hit, after), so that "show context" can set the hit apart from its
    neighbours; the whole passage before the hit when the hit is not found in it verbatim."""
    at = passage.find(hit) if hit else -1
    if at < 0:
        return passage, "", ""
    return passage[:at], hit, passage[at + len(hit) :]

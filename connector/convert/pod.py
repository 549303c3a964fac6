"""Perl POD (`perlfunc.pod`, the documentation in every module) → Markdown.

`=head1`..`=head6` become headings; an `=item` with a name (`=item abs VALUE`, `=item -e`) becomes a heading one
level below the section it lists in, so a function's or an option's text has its name in its section path, while
`=item *` and `=item 1.` become list items; verbatim (indented) paragraphs become fenced code. Formatting codes
(`B<>`, `C<< $a->b >>`, `L<text|perlsyn/"For Loops">`, `E<gt>`) leave their text; `X<>` index entries, `Z<>`,
`=for comment` and `=begin html` blocks, and everything outside `=pod`..`=cut` are dropped. The NAME section's line
(`perlfunc - Perl builtin functions`) is the title.
"""

from __future__ import annotations

import html.entities
import re
from dataclasses import dataclass

from connector.convert.roff import escape_line

TITLE_MAX_CHARS = 300
MAX_HEADING_LEVEL = 6

# Runs of lines that are not blank, from a line's start: unanchored, a line of spaces was tried again from each of
# its positions (100,000 spaces: 46 s).
_PARAGRAPHS = re.compile(r"^(?:[^\n]*\S[^\n]*(?:\n|$))+", re.MULTILINE)
_COMMAND = re.compile(r"=([a-zA-Z]\w*)[ \t]*(.*)", re.DOTALL)
_CODE = re.compile(r"([A-Z])(<+)")
_SHOWN_FORMATS = ("text", "markdown")  # `=begin text`: shown to every reader; html, man, latex: for their formatter


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None


def convert(source: str) -> Page:
    """The POD in `source` as Markdown, with its title (the line under `=head1 NAME`)."""
    blocks: list[str] = []
    code: list[str] = []  # verbatim paragraphs in a row: one code block
    inside = False  # in POD (between a command and `=cut`), not in Perl code
    hidden: str | None = None  # the `=end` that closes a `=begin` block for another formatter
    head_level = 0
    overs: list[int] = []  # the heading level of the items of each open `=over`
    name_next = False
    title = None

    def end_code() -> None:
        if code:
            longest = max((len(m.group(0)) for line in code for m in re.finditer(r"`+", line)), default=0)
            fence = "`" * max(3, longest + 1)
            blocks.append("\n".join([fence, *"\n\n".join(code).split("\n"), fence]))
            code.clear()

    for m in _PARAGRAPHS.finditer(source):
        paragraph = m.group(0).rstrip("\n")
        command = _COMMAND.match(paragraph) if paragraph.startswith("=") else None
        if command is None and not inside:
            continue
        if command is not None:
            name, text = command.group(1), command.group(2).strip()
            inside = name != "cut"
            if hidden is not None:
                hidden = None if name == "end" and text.split()[:1] == [hidden] else hidden
                continue
            end_code()
            if name.startswith("head") and name[4:].isdigit():
                head_level = min(max(int(name[4:]), 1), MAX_HEADING_LEVEL)
                heading = _line(text)
                blocks.append("#" * head_level + " " + heading)
                name_next = heading.upper() == "NAME" and title is None
            elif name == "over":
                overs.append(min((overs[-1] if overs else head_level) + 1, MAX_HEADING_LEVEL))
            elif name == "back":
                overs = overs[:-1]
            elif name == "item":
                label = _line(text)
                if label in ("", "*", "•", "-", "o"):
                    blocks.append("-")  # the next paragraph is the item's text
                elif re.fullmatch(r"\d+\.?", label):
                    blocks.append(label.rstrip(".") + ".")
                else:
                    blocks.append("#" * (overs[-1] if overs else head_level + 1) + " " + label)
            elif name == "begin" and text.split()[:1] and text.split()[0] not in _SHOWN_FORMATS:
                hidden = text.split()[0]
            elif name == "for" and text.split(None, 1)[0:1] and text.split()[0] in _SHOWN_FORMATS:
                blocks.append(_line(text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""))
            continue
        if hidden is not None:
            continue
        if paragraph[:1] in (" ", "\t"):
            code.append(paragraph)
            continue
        end_code()
        text = _line(paragraph)
        if not text:
            continue
        if name_next:
            title, name_next = (text if len(text) <= TITLE_MAX_CHARS else None), False
        if blocks and blocks[-1] in ("-",) or (blocks and re.fullmatch(r"\d+\.", blocks[-1])):
            blocks[-1] += " " + text  # an item's marker and its text: one list item
        else:
            blocks.append(escape_line(text, False))
    end_code()
    blocks = [b for b in blocks if b not in ("-",) and not re.fullmatch(r"\d+\.", b)]  # items with no text
    return Page("\n\n".join(blocks) + "\n" if blocks else "", title)


def _line(text: str) -> str:
    """A paragraph's text on one line, formatting codes resolved."""
    return " ".join(_codes(text, 0, None)[0].split())


def _codes(text: str, at: int, close: re.Pattern | None) -> tuple[str, int]:
    """The text from `at` with its formatting codes resolved, up to `close` (the end of a code): (text, end)."""
    out: list[str] = []
    i = at
    while i < len(text):
        if close is not None and (end := close.match(text, i)):
            return "".join(out), end.end()
        m = _CODE.match(text, i)
        if m is None:
            out.append(text[i])
            i += 1
            continue
        brackets = len(m.group(2))
        if brackets > 1 and not text[m.end() : m.end() + 1].isspace():
            brackets = 1  # `C<<x>` is `C<` then `<x`: doubled brackets need a space inside
        start = m.start() + 2 if brackets == 1 else m.end()
        inner_close = re.compile(">" if brackets == 1 else r"\s+" + ">" * brackets)
        inner, i = _codes(text, start, inner_close)
        out.append(_code(m.group(1), inner.strip() if brackets > 1 else inner))
    return "".join(out), i


def _code(letter: str, inner: str) -> str:
    if letter in ("X", "Z"):
        return ""
    if letter == "E":
        if inner.isdigit() or re.fullmatch(r"0[xX][0-9a-fA-F]+|0[0-7]+", inner):
            code = int(inner, 0) if not inner.startswith("0") or inner[1:2] in "xX" else int(inner, 8)
            return chr(code) if 32 <= code < 0x110000 and not 0xD800 <= code < 0xE000 else ""
        return {"verbar": "|", "sol": "/", "lchevron": "«", "rchevron": "»"}.get(
            inner, html.entities.html5.get(inner + ";", "")
        )
    if letter == "L":
        shown, bar, target = inner.partition("|")
        if bar:
            return shown
        if re.match(r"\w+:[^:\s]", inner):  # a URL
            return inner
        page, _, section = inner.partition("/")
        section = section.strip('"')
        return f"{section} in {page}" if page and section else section or page
    return inner  # B, I, C, F, S: the words, without their look

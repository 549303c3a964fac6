"""Man pages: roff source in the man(7) or mdoc(7) macros → Markdown.

What `man` would show, as Markdown: `.TH`/`.Dt` give a level-1 heading (`LS(1)`), `.SH`/`.Sh` and `.SS`/`.Ss`
level 2 and 3, the NAME section's line (`ls - list directory contents`) the title. Paragraph macros (`.PP`, `.TP`,
`.IP`, `.Pp`, `.It`) start a paragraph, a tagged one with its tag as first line; bullets become list items;
no-fill text (`.nf`, `.EX`, `.Bd -literal`, pod2man's `.Vb`) becomes a fenced code block, tbl tables (`.TS`) a
pipe table. Fonts, sizes and spacing are dropped (a search for `--all` must match `\\fB\\-\\-all\\fP`), escapes
become the characters they name, comments, macro definitions and `troff`-only branches are skipped. No roff
formatter is run: groff is not a Python dependency, and what a reader searches is the words, not the layout.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from connector.convert import mdoc

TITLE_MAX_CHARS = 300

_COMMENT = re.compile(r"(\\\\)|\\[\"#].*")  # `\\` first: `\\"` is a backslash and a quote, not a comment
# Bracketed names and quoted arguments are short (groff's names, sizes, motions): capped, so an unclosed `\[` on a
# long line is not scanned to its end again from every later one (`"\[" * 50000`: 21 s).
_ESCAPE = re.compile(
    r"""\\(?:
      (?P<font>f(?:\[[^\]\n]{0,64}\]|\(..|.))
     |(?P<size>s(?:[-+]?\(\d\d|[-+]?\[[^\]\n]{0,64}\]|'[^'\n]{0,64}'|[-+]?\d))
     |\((?P<char2>..)|\[(?P<char>[^\]\n]{0,64})\]|C'(?P<charq>[^'\n]{0,64})'
     |N'(?P<code>\d+)'
     |\*(?:\((?P<str2>..)|\[(?P<str>[^\]\s]{0,64})[^\]\n]{0,64}\]|(?P<str1>.))
     |(?P<drop>[nmMgFVY$](?:\(..|\[[^\]\n]{0,64}\]|.)|[hvwlLoDbxXRSZAB](?:'[^'\n]{0,64}'|\[[^\]\n]{0,64}\])|k.|[zE])
     |(?P<one>.)
    )""",
    re.VERBOSE,
)
_ONE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "t": "\t", "'": "'", "`": "`", ".": "."}
# groff_char(7): the two-letter names of the characters man pages use, each followed by its character.
_GLYPHS = (
    "em— en– hy- mi- aq' dq\" lq“ rq” oq‘ cq’ Fo« Fc» fo‹ fc› bu• co© rg® tm™ de° +-± mu× di÷ <=≤ >=≥ "
    "!=≠ ==≡ ->→ <-← ga` ha^ ti~ rs\\ sl/ ba| bv| lB[ rB] lC{ rC} la⟨ ra⟩ sc§ ps¶ dg† dd‡ eu€ Eu€ ct¢ "
    "Po£ Ye¥ pl+ eq= *** ul_ ru_ ssß fifi flfl ffff AEÆ aeæ OEŒ oeœ /oø /OØ r!¡ r?¿ 12½ 14¼ 34¾ %0‰ ..… "
    "sq□ OK✓ in∈ ni∋ if∞ no¬ sr√ ua↑ da↓ ap~ ci○ "
)
_CHARS = {glyph[:2]: glyph[2:] for glyph in _GLYPHS.split()}
_CHARS.update({"*" + latin: chr(0x3B1 + i) for i, latin in enumerate("abgdezyhiklmncoprQstufxqw") if latin != "Q"})
_ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ",": "\u0327", "o": "\u030a"}
_STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Aq": "'", "C+": "C++", "PI": "π"}

# What would start a Markdown block at a line's start; `_UNDERLINE` (setext) only under a paragraph's line.
_BLOCK_START = re.compile(r"^(?:#{1,6}(?=\s|$)|>|[-+*](?=\s|$)|([-_*])\s*(?:\1\s*){2,}$|```|~~~|<|\|)")
_UNDERLINE = re.compile(r"^(?:-+|=+)$")
_ORDERED_START = re.compile(r"^(\d{1,9})([.)])(?=\s|$)")
_BULLETS = {"•", "·", "-", "*", "o", "—", "–", "+"}
_IGNORED = {"PD", "RS", "RE", "DT", "UC", "IX", "HP", "ne", "ti", "in", "ll", "ad", "na", "hy", "nh", "ft", "ps"}
_FONT_PAIRS = {"BR", "RB", "BI", "IB", "IR", "RI", "SB"}
_FONTS = {"B", "I", "SM", "R", "CW", "CR", "CB"}


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None
    # (start, end) in `markdown` of each entry of a tagged-paragraph list (`.TP`, `.IP tag`, mdoc's `.It` in a
    # `.Bl -tag`): the tag and every paragraph, list and example indented under it, up to the next tag at its depth.
    entries: tuple[tuple[int, int], ...] = ()


def convert(source: str) -> Page:
    """The man page in `source` as Markdown, with its title (the NAME line, else `NAME(section)`)."""
    return _Reader(source).read()


class _Writer:
    """Markdown blocks, separated by blank lines: a paragraph's lines, a heading, a fenced code block."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.lines: list[str] = []
        self.code: list[str] | None = None
        self.prefix = ""  # "- " before the next paragraph's first line: a list item
        self.new_line = True  # the next line starts a line of its own (a paragraph's first, a tag's body, `.br`)
        self.tagged = False
        self.sections = 0
        self.name_line: str | None = None  # the first section's first paragraph: NAME's `ls - list ...`
        # A tag opens an entry that holds what is indented under it: `.RS`/`.Bl` nest (`depth`), a tag at the
        # entry's depth or shallower starts the next one, `.PP` there or a heading ends it. An option's third
        # paragraph is still that option's, which the Markdown (no indentation, no definition lists) cannot say.
        self.depth = 0
        self.entry_depth: int | None = None  # None: no entry open
        self.entries = 0
        self.entry_of: list[int] = []  # per block: the entry it belongs to, 0 for none
        self.bare = False  # the open entry has only had tags so far

    def text(self, line: str) -> None:
        """A line of output: in no-fill mode as it is; in fill mode joined to the paragraph's line, as roff fills
        (Markdown must not read its indentation as code), except the first line after a tag or a break."""
        if self.code is not None:
            self.code.append(line.rstrip())
            return
        line = " ".join(line.split())
        if not line:
            return
        if self.lines and not self.new_line:
            self.lines[-1] += " " + line
            return
        self.lines.append(line)
        self.new_line, self.tagged = self.tagged, False

    def tag(self) -> None:
        """The next line is a tag (`.TP`, `.IP x`): it stands alone; the body starts on the line after it."""
        self.flush()
        # An entry that is still tags without a body takes this tag too: ssh's four `-L` forms, one description.
        if self.entry_depth is None or (self.depth <= self.entry_depth and not self.bare):
            self.entries += 1
            self.entry_depth = self.depth
            self.bare = True
        self.new_line = True
        self.tagged = True

    def end_entry(self, depth: int) -> None:
        """Close the open entry if it was opened at `depth` or deeper."""
        if self.entry_depth is not None and self.entry_depth >= depth:
            self.entry_depth = None

    def indent(self, step: int) -> None:
        """`.RS`/`.Bl` (+1), `.RE`/`.El` (-1): an entry opened inside what closes ends with it."""
        self.flush()
        self.depth = max(0, self.depth + step)
        self.end_entry(self.depth + 1)

    def add(self, block: str) -> None:
        self.blocks.append(block)
        self.entry_of.append(self.entries if self.entry_depth is not None else 0)
        self.bare = self.bare and "\n" not in block  # a tag alone is one line; its body follows on the next

    def flush(self) -> None:
        if self.lines:
            if self.sections == 1 and self.name_line is None:
                self.name_line = " ".join(" ".join(self.lines).split())
            lines = [escape_line(line, i > 0) for i, line in enumerate(self.lines)]
            self.add(self.prefix + "\n".join(lines))
            self.lines, self.prefix = [], ""
        self.new_line = True

    def heading(self, level: int, title: str) -> None:
        self.end_code()
        self.flush()
        title = " ".join(title.split())
        self.depth = 0  # a heading resets the indentation and ends any list
        self.end_entry(0)
        if title:
            self.add("#" * level + " " + title.lstrip("#").strip())
            self.sections += level == 2

    def start_code(self) -> None:
        if self.code is None:
            self.flush()
            self.code = []

    def end_code(self) -> None:
        if self.code is None:
            return
        lines, self.code = self.code, None
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines:
            longest = max((len(m.group(0)) for line in lines if (m := re.match(r"\s*(`+)", line))), default=0)
            fence = "`" * max(3, longest + 1)
            self.add("\n".join([fence, *lines, fence]))

    def markdown(self) -> str:
        self.end_code()
        self.flush()
        return "\n\n".join(self.blocks) + "\n" if self.blocks else ""

    def entry_spans(self) -> tuple[tuple[int, int], ...]:
        """Where each entry lies in `markdown()`: its blocks, joined by the blank lines between them."""
        spans: dict[int, tuple[int, int]] = {}
        pos = 0
        for block, entry in zip(self.blocks, self.entry_of, strict=True):
            if entry:
                spans[entry] = (spans.get(entry, (pos, pos))[0], pos + len(block))
            pos += len(block) + 2
        return tuple(spans.values())


class _Reader:
    def __init__(self, source: str) -> None:
        self.lines = _logical_lines(source)
        self.out = _Writer()
        self.strings = dict(_STRINGS)
        self.skip_until: str | None = None  # the end of a macro definition or `.ig` block
        self.skip_depth = 0  # inside a `\{ ... \}` block whose condition is false
        self.last_condition = True
        self.pending_heading = 0
        self.title = ""
        self.mdoc = mdoc.Mdoc(self)

    def read(self) -> Page:
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            i += 1
            if self.skip_until is not None:
                if re.match(r"[.']\s*" + re.escape(self.skip_until) + r"(?:\s|$)", line):
                    self.skip_until = None
                continue
            if self.skip_depth:
                self.skip_depth += line.count("\\{") - line.count("\\}")
                continue
            if re.match(r"[.']\s*TS\b", line):
                end = next((j for j in range(i, len(self.lines)) if re.match(r"[.']\s*TE\b", self.lines[j])), None)
                self.table(self.lines[i : end if end is not None else len(self.lines)])
                i = end + 1 if end is not None else len(self.lines)
                continue
            self.line(line)
        name = self.out.name_line
        markdown = self.out.markdown()
        title = name if name and len(name) <= TITLE_MAX_CHARS else self.title
        return Page(markdown, title or None, self.out.entry_spans())

    def line(self, line: str) -> None:
        line = _COMMENT.sub(lambda m: m.group(1) or "", line)
        if line[:1] in (".", "'"):
            if parts := line[1:].strip().split(None, 1):
                self.request(parts[0], parts[1] if len(parts) > 1 else "")
            return
        if not line.strip():
            if self.out.code is not None:
                self.out.text("")
            else:
                self.out.flush()
            return
        self.emit(self.inline(line))

    def emit(self, text: str) -> None:
        if self.pending_heading:
            level, self.pending_heading = self.pending_heading, 0
            self.out.heading(level, text)
        else:
            self.out.text(text)

    def inline(self, text: str, depth: int = 0) -> str:
        def replace(m: re.Match) -> str:
            if m.group("font") or m.group("size") or m.group("drop"):
                return ""
            if (name := m.group("char2") or m.group("char") or m.group("charq")) is not None:
                return _char(name)
            if m.group("code"):
                return _printable(int(m.group("code")))
            if (name := m.group("str2") or m.group("str") or m.group("str1")) is not None:
                return self.inline(self.strings.get(name, ""), depth + 1) if depth < 8 else ""
            return _ONE.get(m.group("one"), "")

        return _ESCAPE.sub(replace, text)

    def request(self, name: str, rest: str) -> None:
        out = self.out
        args = _arguments(rest)
        if name in ("de", "de1", "am", "ig", "am1"):
            ends = args[:1] if name == "ig" else args[1:2]  # `.ig END` / `.de NAME END` end at `.END`, else `..`
            self.skip_until = ends[0] if ends else "."
        elif name in ("if", "ie", "el"):
            self.condition(name, rest)
        elif name in ("ds", "ds1", "as") and args:
            value = rest.split(None, 1)[1] if len(rest.split(None, 1)) > 1 else ""
            value = value[1:] if value.startswith('"') else value
            self.strings[args[0]] = (self.strings.get(args[0], "") if name == "as" else "") + value
        elif name == "TH":
            self.title = self.inline(args[0]) + (f"({self.inline(args[1])})" if len(args) > 1 else "") if args else ""
            out.heading(1, self.title)
        elif name in ("SH", "SS"):
            level = 2 if name == "SH" else 3
            if args:
                out.heading(level, self.inline(" ".join(args)))
            else:
                out.heading(level, "")  # ends the paragraph; the next line is the heading
                self.pending_heading = level
        elif name in ("RS", "RE"):
            out.indent(1 if name == "RS" else -1)
        elif name in ("PP", "LP", "P", "HP", "sp", "YS"):
            if out.code is not None and name == "sp":
                out.text("")
            else:
                out.flush()
                if name not in ("sp", "YS"):
                    out.end_entry(out.depth)  # back at the margin of the list: the entries end
        elif name == "TP":
            out.tag()
        elif name in ("TQ", "br"):
            out.new_line, out.tagged = True, name == "TQ"
        elif name == "IP":
            out.flush()
            tag = self.inline(args[0]).strip() if args else ""
            if tag in _BULLETS:
                out.prefix = "- "
            elif tag:
                out.tag()
                out.text(tag)
        elif name in ("nf", "EX", "Vb"):
            out.start_code()
        elif name in ("fi", "EE", "Ve"):
            out.end_code()
        elif name in _FONTS:
            if args:
                self.emit(" ".join(self.inline(a) for a in args))
        elif name in _FONT_PAIRS:
            self.emit("".join(self.inline(a) for a in args))
        elif name in ("UR", "MT"):
            self.link = self.inline(args[0]) if args else ""
        elif name in ("UE", "ME"):
            self.emit(f"<{getattr(self, 'link', '')}>{self.inline(''.join(args))}")
        elif name == "SY":
            out.flush()
            self.emit(" ".join(self.inline(a) for a in args))
        elif name == "OP":
            self.emit("[" + " ".join(self.inline(a) for a in args) + "]")
        elif name == "so" and args:
            out.text(f"(This page is the text of {self.inline(args[0])}, which is not read here.)")
        elif self.mdoc.request(name, args):
            pass
        elif name[:1].isupper() and name not in _IGNORED and args:  # a page's own macro: its arguments are text
            self.emit(" ".join(self.inline(a) for a in args))

    def condition(self, name: str, rest: str) -> None:
        """`.if n text`, `.ie t .ds X y` / `.el ...`: what `man` (nroff) shows; conditions it cannot evaluate here
        (registers, string comparisons) are false, so a page's troff-only or customisation branches drop."""
        if name == "el":
            holds, body = not self.last_condition, rest
        else:
            m = re.match(r"(!?)('[^'\n]*'[^'\n]*'|\"[^\"\n]*\"[^\"\n]*\"|\S+)\s*(.*)", rest)
            if m is None:
                return
            holds = m.group(2) in ("n", "t") and (m.group(2) == "n") != bool(m.group(1))
            body = m.group(3)
            if name == "ie":
                self.last_condition = holds
        if body.startswith("\\{"):
            body = body[2:].lstrip()
            if not holds:
                self.skip_depth = max(0, 1 + body.count("\\{") - body.count("\\}"))
                return
        if holds and body.strip():
            self.line(body.replace("\\}", ""))

    def table(self, lines: list[str]) -> None:
        """A tbl table: its options and format lines skipped, `T{ ... T}` cells joined, as a pipe table."""
        tab = "\t"
        if lines and lines[0].rstrip().endswith(";"):
            if m := re.search(r"tab\s*\((.)\)", lines[0]):
                tab = m.group(1)
            lines = lines[1:]
        rows: list[list[str]] = []
        formats = True
        cell: list[str] | None = None
        for line in lines:
            if formats:
                formats = not line.rstrip().endswith(".")
                continue
            if re.match(r"[.']\s*T&", line):
                formats = True
                continue
            if cell is not None:  # inside `T{`: lines up to `T}` are one cell
                text, end, after = line.partition("T}")
                cell.append(self.inline(text))
                if end:
                    rows[-1].append(" ".join(" ".join(cell).split()))
                    rows[-1].extend(self.inline(c).strip() for c in after.split(tab)[1:])
                    cell = None
                continue
            if line[:1] in (".", "'") or line.strip() in ("_", "=", ""):
                continue
            cells = line.split(tab)
            rows.append([self.inline(c).strip() for c in cells if c.strip() != "T{"])
            if cells[-1].strip() == "T{":
                cell = []
        rows = [r for r in rows if any(r)]
        if not rows:
            return
        self.out.end_code()
        self.out.flush()
        width = max(len(r) for r in rows)
        cells = [[c.replace("|", "\\|") for c in r] + [""] * (width - len(r)) for r in rows]
        lines = ["| " + " | ".join(r) + " |" for r in cells]
        self.out.add("\n".join([lines[0], "|" + " --- |" * width, *lines[1:]]))


def escape_line(line: str, continued: bool) -> str:
    """`line` with a backslash where its start would make Markdown begin a block (a list, a heading, a rule)."""
    if m := _ORDERED_START.match(line):  # `1. ` starts a list, even inside a paragraph
        return f"{m.group(1)}\\{m.group(2)}{line[m.end() :]}"
    if _BLOCK_START.match(line) or (continued and _UNDERLINE.match(line)):
        return "\\" + line
    return line


def _char(name: str) -> str:
    if name in _CHARS:
        return _CHARS[name]
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _ACCENTS[name[0]])
    if m := re.fullmatch(r"u([0-9A-Fa-f]{4,6})((?:_[0-9A-Fa-f]{4,6})*)", name):
        chars = [_printable(int(h, 16)) for h in (m.group(1), *m.group(2).split("_")[1:])]
        return unicodedata.normalize("NFC", "".join(chars)) if all(chars) else ""
    if m := re.fullmatch(r"char(\d+)", name):
        return _printable(int(m.group(1)))
    return ""


def _printable(code: int) -> str:
    """The character numbered `code`, or "" for a control character or a surrogate (the output has none)."""
    if code >= 0x110000 or unicodedata.category(ch := chr(code)) in ("Cc", "Cs"):
        return ""
    return ch


def _arguments(rest: str) -> list[str]:
    """A request's arguments: words (an escaped space, `\\ `, inside one), or `"quoted words"` (`""` inside quotes
    is a quote)."""
    return [q.replace('""', '"') if q else w for q, w in re.findall(r'"((?:[^"]|"")*)"?|((?:\\.|[^\s\\])+\\?)', rest)]


def _logical_lines(source: str) -> list[str]:
    """Lines, with those that end in an escaped newline (`\\` at the end) joined to the next."""
    lines: list[str] = []
    carry = ""
    for line in source.split("\n"):
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            carry += line[:-1]
            continue
        lines.append(carry + line)
        carry = ""
    if carry:
        lines.append(carry)
    return lines

"""RTF → Markdown: paragraphs, headings, lists, tables and footnotes, from what the RTF records.

No library on PyPI reads RTF's structure: striprtf gives flat text, rtfparse only frees HTML that Outlook wrapped
in RTF, pyth3 (2019) has no tables, and rtf-tokenize splits text but knows neither `\\binN` nor `\\'xx`. RTF's
grammar is small (groups, control words, control symbols, text), so this reads the tokens itself, with one regular
expression, and keeps the state of each group on a stack, never by recursion.

Structure comes from what the document records, as for DOCX: a paragraph is a heading when its `\\outlinelevelN`, or
its style's (`\\sN`, from the stylesheet, or the style it is based on), says so, or its style is named "heading N" or
"Title"; a list item has a list (`\\lsN`, Word 97+; `\\pntext`, Word 95) at level `\\ilvlN`, numbered when its
marker (`\\listtext`) is a number; table paragraphs (`\\intbl`) end cells at `\\cell` and rows at `\\row` and make a
pipe table; a footnote is a Markdown footnote after the paragraph that cites it. Hidden text (`\\v`), deleted
revisions, headers, footers, pictures, objects, fields' instructions and the tables of fonts, colours, styles
and lists are no text.

Text: `\\'xx` bytes are read in the code page of the current font's `\\fcharsetN`, or the document's (`\\ansicpgN`,
`\\mac`, `\\pc`), double-byte code pages whole; `\\uN` is a UTF-16 unit (negative above 32767, pairs for the
astral planes) followed by `\\ucN` fallback characters, skipped. A file whose groups nest deeper than `MAX_DEPTH`
fails saying so (each level holds state); `\\binN` skips its N bytes of binary data, however many it claims.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field, replace

from connector.convert.office import _document, _escape, _join, _lines, _notes_after_lists, pipe_table
from connector.errors import ConversionError
from connector.models import Document

MAX_DEPTH = 1000
"""Groups open at once: Word nests a handful (tables in tables, fields in fields: tens); each open group holds its
state, and a file of a million `{` would hold a million."""
_TOKEN = re.compile(
    r"\\([a-zA-Z]{1,32})(-?\d{1,10})? ?"  # a control word, its parameter, the space that ends it
    r"|\\'([0-9a-fA-F]{2})"  # a byte in the code page
    r"|\\([^a-zA-Z'])"  # a control symbol: \\ \{ \} \~ \- \_ \* \| \:, or a line break (\par)
    r"|([{}])"
    r"|([^\\{}\r\n]+)"  # text
    r"|[\r\n]+|\\",  # line breaks of the file (no text) or a lone backslash at the end
    re.DOTALL,
)
# Destinations whose text is not the document's (or is read apart: fonts, styles, lists, document info).
_SKIPPED = frozenset((
    "fonttbl", "colortbl", "stylesheet", "listtable", "listoverridetable", "info", "pict", "object", "themedata",
    "colorschememapping", "latentstyles", "datastore", "xmlnstbl", "rsidtbl", "generator", "header", "headerl",
    "headerr", "headerf", "footer", "footerl", "footerr", "footerf", "fldinst", "bkmkstart", "bkmkend", "pn",
    "pntxta", "pntxtb", "nonshppict", "shpinst", "sp", "sn", "sv", "filetbl", "revtbl", "listpicture", "mmathPr",
    "wgrffmtfilter", "pgdsctbl", "xe", "tc", "tcn", "template", "docvar", "userprops", "fchars", "lchars", "pgptbl",
    "protusertbl", "txe", "atnid", "atnauthor", "annotation", "atrfstart", "atrfend", "atndate", "atnref",
    "atnparent", "passwordhash", "oldpprops", "oldcprops", "oldsprops", "oldtprops", "ftnsep", "ftnsepc", "ftncn",
    "aftnsep", "aftnsepc", "aftncn", "falt", "panose", "fname", "NeXTGraphic",
))  # fmt: skip
_READ_APART = frozenset(("fonttbl", "stylesheet", "title", "listtext", "pntext", "footnote"))
_SYMBOLS = {
    "~": "\u00a0", "_": "\u2011", "-": "", "\\": "\\", "{": "{", "}": "}", "\n": "\n\0par", "\r": "\n\0par",
}  # fmt: skip
_WORDS = {
    "emdash": "\u2014", "endash": "\u2013", "bullet": "\u2022", "lquote": "\u2018", "rquote": "\u2019",
    "ldblquote": "\u201c", "rdblquote": "\u201d", "emspace": " ", "enspace": " ", "qmspace": " ", "tab": "\t",
    "line": "\n", "zwj": "", "zwnj": "", "ltrmark": "", "rtlmark": "", "zwbo": "", "zwnbo": "",
}  # fmt: skip
# \fcharsetN → code page (RTF 1.9.1 spec, "Font table"); 0 (ANSI) and 1 (default) are the document's own
_CHARSETS = {
    77: "mac_roman", 128: "cp932", 129: "cp949", 130: "johab", 134: "gbk", 136: "cp950", 161: "cp1253",
    162: "cp1254", 163: "cp1258", 177: "cp1255", 178: "cp1256", 186: "cp1257", 204: "cp1251", 222: "cp874",
    238: "cp1250", 254: "cp437", 255: "cp850",
}  # fmt: skip
_MAC_PAGES = {10000: "mac_roman", 10006: "mac_greek", 10007: "mac_cyrillic", 10029: "mac_latin2", 10079: "mac_iceland",
              10081: "mac_turkish", 10001: "shift_jis", 10008: "gb2312"}  # fmt: skip
_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_NUMBERED = re.compile(r"^\s*\(?(?:\d{1,4}|[a-zA-Z]|[ivxlcdmIVXLCDM]{1,6})[.)]")


def codepage(number: int) -> str:
    """The Python codec of a Windows or Mac code page number; Windows-1252 for one Python does not know."""
    name = _MAC_PAGES.get(number, f"cp{number}")
    try:
        codecs.lookup(name)
    except LookupError:
        return "cp1252"
    return name


@dataclass(frozen=True)
class _State:
    """What a group inherits from the group around it, and may change for itself."""

    skip: bool = False  # a destination whose text is not read
    dest: str = ""  # the destination the group's text goes to ("" the body)
    uc: int = 1  # fallback characters after each \uN
    font: int | None = None
    hidden: bool = False


@dataclass
class _Para:
    """The properties of the paragraph being read (reset by \\pard) and its text so far."""

    style: int = 0
    outline: int | None = None
    table: bool = False
    nest: int = 1
    listed: bool = False  # a list's paragraph (\lsN, or a \listtext marker)
    level: int = 0
    marker: str = ""
    text: list[str] = field(default_factory=list)


@dataclass
class _Style:
    name: str = ""
    outline: int | None = None
    based_on: int | None = None


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.codepage = "cp1252"
        self.default_font: int | None = None
        self.fonts: dict[int, str] = {}  # font number → codec of its charset
        self.styles: dict[int, _Style] = {}
        self.title: list[str] = []
        self.parts: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.notes_cited = 0
        self.notes_placed = 0  # notes already after a paragraph: counted, not recounted per paragraph (quadratic)
        self.para = _Para()
        self.rows: list[tuple[list[str], list[int]]] = []  # each row's cells and their right edges (\cellxN)
        self.edges: list[int] = []  # of the row being defined (\trowd, then a \cellxN per cell)
        self.cells: list[str] = []
        self.cell: list[str] = []
        self.pending: bytearray = bytearray()  # \'xx bytes not yet decoded (a double-byte character comes in two)
        self.pending_codec = "cp1252"
        self.unicode_skip = 0
        # what the destinations read apart collect: the font or style being defined, a list marker, a footnote
        self.apart: list[str] = []
        self.font_number: int | None = None
        self.style = _Style()
        self.style_number: int | None = None

    # --- tokens ---------------------------------------------------------------------------------------------------

    def read(self) -> None:
        stack: list[_State] = []
        state = _State()
        source, pos, end = self.source, 0, len(self.source)
        upr_depth = -1  # the depth of a \upr group, whose first group (the ANSI text) its \ud repeats as Unicode
        star = False
        while pos < end:
            m = _TOKEN.match(source, pos)
            pos = m.end()
            word, param, hexbyte, symbol, brace, text = m.groups()
            if brace == "{":
                if len(stack) >= MAX_DEPTH:
                    raise ConversionError(f"RTF groups are nested more than {MAX_DEPTH:,} deep: not a document")
                self._flush_bytes(state)
                self.unicode_skip = 0
                stack.append(state)
                if upr_depth == len(stack) - 1:
                    state = replace(state, skip=True)  # \upr's ANSI text: its \ud group follows
                    upr_depth = -2  # only its first group
                star = False
                continue
            if brace == "}":
                self._flush_bytes(state)
                self.unicode_skip = 0
                if not stack:
                    break  # the document's group closed: anything after it is no RTF
                closing, state = state, stack.pop()
                if closing.dest != state.dest:
                    self._end_destination(closing.dest, state)
                if upr_depth == len(stack):
                    upr_depth = -1
                continue
            if word is not None:
                n = int(param) if param is not None else None
                if word == "bin":
                    self._flush_bytes(state)
                    pos = min(end, pos + max(n or 0, 0))  # binary data (a picture's), however long it claims
                    continue
                if word == "u" and n is not None:
                    self._flush_bytes(state)
                    self._text(state, chr(n % 65536))
                    self.unicode_skip = state.uc
                    continue
                if self.unicode_skip:
                    self.unicode_skip -= 1
                    continue
                if star or word in _SKIPPED:
                    if word in _READ_APART:
                        state = self._start_destination(word, state)
                    elif word == "ud":
                        pass  # \upr's Unicode text: read
                    else:
                        state = replace(state, skip=True)
                    star = False
                    continue
                if word in _READ_APART:
                    state = self._start_destination(word, state)
                    continue
                if word == "upr":
                    upr_depth = len(stack)
                    continue
                state = self._word(word, n, state)
                continue
            if symbol is not None:
                if symbol == "*":
                    star = True
                    continue
                if self.unicode_skip:
                    self.unicode_skip -= 1
                    continue
                self._flush_bytes(state)
                out = _SYMBOLS.get(symbol)
                if out == "\n\0par":
                    self._par(state)
                elif out is not None:
                    self._text(state, out)
                continue
            if hexbyte is not None:
                if self.unicode_skip:
                    self.unicode_skip -= 1
                    continue
                if not state.skip and not state.hidden:
                    codec = self._codec(state)
                    if codec != self.pending_codec:
                        self._flush_bytes(state)
                        self.pending_codec = codec
                    self.pending.append(int(hexbyte, 16))
                continue
            if text is not None:
                self._flush_bytes(state)
                if self.unicode_skip:
                    skipped = min(self.unicode_skip, len(text))
                    self.unicode_skip -= skipped
                    text = text[skipped:]
                if text:
                    # 8-bit bytes written raw (no \'xx): the code page's, as a reader of the time took them
                    self._text(state, text if text.isascii() else _decode(text.encode("latin-1"), self._codec(state)))
        self._flush_bytes(state)
        self._par(state, final=True)

    def _codec(self, state: _State) -> str:
        font = state.font if state.font is not None else self.default_font
        return self.fonts.get(font, self.codepage) if font is not None else self.codepage

    def _flush_bytes(self, state: _State) -> None:
        if self.pending:
            data, self.pending = bytes(self.pending), bytearray()
            self._text(state, _decode(data, self.pending_codec))

    # --- control words --------------------------------------------------------------------------------------------

    def _word(self, word: str, n: int | None, state: _State) -> _State:
        para = self.para
        if word == "ansicpg" and n is not None:
            self.codepage = codepage(n)
        elif word in ("mac", "pc", "pca"):
            self.codepage = {"mac": "mac_roman", "pc": "cp437", "pca": "cp850"}[word]
        elif word == "deff" and n is not None:
            self.default_font = n
        elif word == "f" and n is not None:
            if state.dest == "fonttbl":
                self.font_number = n
            return replace(state, font=n)
        elif word == "fcharset" and n is not None and state.dest == "fonttbl" and self.font_number is not None:
            if n == 2:
                self.fonts[self.font_number] = "symbol"
            elif n in _CHARSETS:
                self.fonts[self.font_number] = _CHARSETS[n]
        elif word == "uc" and n is not None:
            return replace(state, uc=max(0, min(n, 10)))
        elif word == "v":
            return replace(state, hidden=n != 0)
        elif word == "deleted":
            return replace(state, skip=True)
        elif word == "plain":
            return replace(state, hidden=False)
        elif state.dest == "stylesheet":
            self._style_word(word, n)
        elif state.dest:
            if word in ("par", "cell", "row", "line", "tab"):
                self._text(state, " ")
            elif word in _WORDS:
                self._text(state, _WORDS[word])
        elif word == "par" or word in ("sect", "page") and para.text:
            self._par(state)
        elif word == "pard":
            self.para = _Para(text=para.text)
        elif word == "s" and n is not None:
            para.style = n
        elif word == "outlinelevel" and n is not None:
            para.outline = n
        elif word == "intbl":
            para.table = True
        elif word == "itap" and n is not None:
            para.table, para.nest = n > 0, max(n, 1)
        elif word == "ls" and n is not None:
            para.listed = n > 0
        elif word == "ilvl" and n is not None:
            para.level = max(0, min(n, 8))
        elif word == "cell" or (word == "nestcell" and para.nest > 1):
            self._cell(state, nested=word == "nestcell")
        elif word == "row":
            self._row()
        elif word == "trowd" and para.nest <= 1:
            self.edges = []
        elif word == "cellx" and n is not None and para.nest <= 1:
            self.edges.append(n)
        elif word == "nestrow":
            self.cell.append("; ")
        elif word in _WORDS:
            self._text(state, _WORDS[word])
        return state

    def _style_word(self, word: str, n: int | None) -> None:
        if word in ("s", "ds", "ts", "cs") and n is not None:
            self.style_number = n if word == "s" else None
            self.style = _Style()
        elif word == "outlinelevel" and n is not None:
            self.style.outline = n
        elif word == "sbasedon" and n is not None:
            self.style.based_on = n

    # --- destinations ---------------------------------------------------------------------------------------------

    def _start_destination(self, word: str, state: _State) -> _State:
        self.apart = []
        if word == "stylesheet":
            self.style_number = 0  # `{\stylesheet{Normal;}...}`: a style without \sN is style 0
            self.style = _Style()
        elif word == "footnote":
            self.notes_cited += 1
            self._text(state, f"[^{self.notes_cited}]")
        return replace(state, dest=word, skip=False)

    def _end_destination(self, dest: str, outer: _State) -> None:
        text = "".join(self.apart)
        if dest in ("listtext", "pntext"):
            self.para.marker = text.strip()
            self.para.listed = True
        elif dest == "title":
            self.title.append(text)
        elif dest == "footnote":
            self.notes.append(" ".join(text.split()))
        elif dest == "stylesheet" and self.style_number is not None:
            self.styles.setdefault(self.style_number, self.style)
        if outer.dest:  # a destination inside another (a style's group inside the stylesheet) goes on
            self.apart = []

    def _text(self, state: _State, text: str) -> None:
        if state.skip or state.hidden:
            return
        if state.dest == "stylesheet":
            # `{\s1 ... heading 1;}`: the name ends at the semicolon, and the next style may start in the group
            for piece in re.split("(;)", text):
                if piece == ";" and self.style_number is not None:
                    self.style.name = "".join(self.apart).strip()
                    self.styles[self.style_number] = self.style
                    self.style_number, self.style, self.apart = None, _Style(), []
                elif piece != ";":
                    self.apart.append(piece)
        elif state.dest == "fonttbl":
            if ";" in text:
                self.font_number = None
        elif state.dest:
            self.apart.append(text)
        elif self.para.table:
            self.cell.append(text)
        else:
            self.para.text.append(text)

    # --- paragraphs and tables ------------------------------------------------------------------------------------

    def _par(self, state: _State, final: bool = False) -> None:
        para = self.para
        if (state.skip or state.hidden) and not final:
            return
        if para.table and not final:
            self.cell.append(" ")
            return
        if self.rows or self.cells or any(c.strip() for c in self.cell):
            self._row()
            self.parts.append(("table", pipe_table(_grid(self.rows))))
            self.rows = []
        text = _clean("".join(para.text))
        para.text = []
        para.marker = ""
        if not text.strip():
            return
        level = self._heading_level(para)
        if level is not None:
            self.parts.append(("heading", "#" * level + " " + " ".join(text.split())))
        elif para.listed:
            marker = "1." if _NUMBERED.match(para.marker) else "-"
            self.parts.append(("item", "  " * min(para.level, 4) + f"{marker} {' '.join(text.split())}"))
        else:
            self.parts.append(("paragraph", _escape(_lines(text))))
        self._notes()

    def _notes(self) -> None:
        for n in range(self.notes_placed, len(self.notes)):
            if self.notes[n]:
                self.parts.append(("note", f"[^{n + 1}]: {self.notes[n]}"))
        self.notes_placed = len(self.notes)

    def _heading_level(self, para: _Para) -> int | None:
        outline = para.outline
        number, seen = para.style, 0
        while outline is None and number in self.styles and seen < 10:  # a style based on a heading style
            style = self.styles[number]
            if style.outline is not None:
                outline = style.outline
            elif style.name.lower() == "title":
                return 1
            elif m := _HEADING_STYLE.match(style.name):
                return min(int(m.group(1)), 6)
            number, seen = style.based_on, seen + 1
        return min(outline + 1, 6) if outline is not None and 0 <= outline < 9 else None

    def _cell(self, state: _State, nested: bool) -> None:
        if nested:
            self.cell.append(" ")
            return
        self.cells.append(_clean("".join(self.cell)))
        self.cell = []

    def _row(self) -> None:
        if any(c.strip() for c in self.cell):
            self._cell(_State(), nested=False)
        self.cell = []
        if self.cells:
            self.rows.append((self.cells, self.edges))
        self.cells = []


def _grid(rows: list[tuple[list[str], list[int]]]) -> list[list[str]]:
    r"""Rows placed on the table's columns: a cell merged across columns (one `\cell`, a wide `\cellxN`) has its
    text in the first column it spans and leaves the others empty, as the other rows' cells stand under them. Rows
    whose edges do not match their cells stay as they are."""
    grid = sorted({edge for _, edges in rows for edge in edges})
    column = {edge: i for i, edge in enumerate(grid)}
    out = []
    for cells, edges in rows:
        if len(edges) != len(cells) or edges != sorted(edges):
            out.append(cells)
            continue
        row = [""] * len(grid)
        for i, text in enumerate(cells):
            row[column[edges[i - 1]] + 1 if i else 0] = text
        out.append(row)
    return out


def _decode(data: bytes, codec: str) -> str:
    """Bytes in a code page; in the Symbol font (Word's list bullets), 0xB7 is its bullet."""
    if codec == "symbol":
        return "".join("\u2022" if b == 0xB7 else chr(b) for b in data)
    return data.decode(codec, "replace")


def _clean(text: str) -> str:
    """Text with UTF-16 surrogate pairs (`\\u-10179\\u-8704`) joined, lone ones replaced, and no control characters."""
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return re.sub("[\x00-\x08\x0b-\x1f\x7f\ufffc]", "", text)  # U+FFFC: where an object (a picture) was


def is_rtf(data: bytes) -> bool:
    return data[:5] == b"{\\rtf"


def convert(data: bytes) -> Document:
    """An RTF document as Markdown; `ConversionError` for what is no RTF or nests too deeply."""
    if not is_rtf(data):
        raise ConversionError("not an RTF document: it does not start with {\\rtf")
    reader = _Reader(data.decode("latin-1"))
    reader.read()
    text = _join(_notes_after_lists(reader.parts))
    return _document(text, _clean("".join(reader.title)), "RTF document")

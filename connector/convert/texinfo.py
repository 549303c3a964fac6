"""Texinfo sources (`.texi`, `.texinfo`, `.txi`: the GNU manuals' source) → Markdown, through the HTML converter.

Read as plain text, as they were, a manual kept every `@node`, `@cindex` and `@c` line and every `@code{…}`, and
no heading was found. Here the structuring commands become HTML the way `makeinfo --html` writes them (`@chapter`,
`@section`, … headings one level per command; `@itemize`/`@enumerate` lists; `@table` and `@deffn` definition
lists; `@multitable` tables; `@example`, `@lisp`, `@verbatim`, `@display` code blocks; `@quotation` quotes;
`@footnote` a Markdown footnote after its paragraph), and the HTML converter (`html.py`) writes the Markdown.
Inline commands (`texinfo_inline.py`) leave their text (`@code{x}` code, `@emph{x}` emphasis, `@uref{url, text}`
a link, `@xref{Node}` "See Node", `@dots{}` "…", `@'e` "é", `@value{VERSION}` what `@set` gave it). Nodes,
menus, index entries, comments, `@ignore` blocks, the title page, the copying notice, `@tex`/`@html` blocks and
`@include` (no file is read) show nothing. `@settitle` is the title. A macro the manual defines itself
(`@macro`) is not expanded: its arguments keep their text.
"""

from __future__ import annotations

import html as html_text
import re
from collections import Counter
from dataclasses import dataclass

from connector.convert import html
from connector.convert.texinfo_inline import Inline

_HEADINGS = {
    **dict.fromkeys(("top", "majorheading"), 1),
    **dict.fromkeys(("chapter", "unnumbered", "appendix", "chapheading", "centerchap"), 2),
    **dict.fromkeys(("section", "unnumberedsec", "appendixsec", "appendixsection", "heading"), 3),
    **dict.fromkeys(("subsection", "unnumberedsubsec", "appendixsubsec", "subheading"), 4),
    **dict.fromkeys(("subsubsection", "unnumberedsubsubsec", "appendixsubsubsec", "subsubheading"), 5),
}  # fmt: skip
_HIDDEN_BLOCKS = frozenset({
    "ignore", "menu", "detailmenu", "direntry", "titlepage", "copying", "tex", "html", "docbook", "xml", "latex",
    "iftex", "ifhtml", "ifdocbook", "ifxml", "iflatex", "macro", "rmacro", "documentdescription", "nodescription",
})  # fmt: skip
"""Blocks that show nothing in an Info or plain-text reader (the title page and copying notice are TeX's and HTML's
front matter; `@insertcopying` repeats the notice), or that define rather than show (`@macro`)."""
_CODE_BLOCKS = frozenset({"example", "smallexample", "lisp", "smalllisp", "display", "smalldisplay", "format",
                          "smallformat", "verbatim"})  # fmt: skip
_QUOTES = frozenset({"quotation", "smallquotation", "indentedblock", "smallindentedblock", "cartouche", "flushleft",
                     "flushright", "raggedright", "group", "float", "ifinfo", "ifnottex", "ifnothtml", "ifplaintext",
                     "ifnotdocbook", "ifnotxml", "ifnotlatex", "ifnotinfo", "ifnotplaintext", "ifset", "ifclear",
                     "ifcommanddefined", "ifcommandnotdefined"})  # fmt: skip
"""Blocks whose content shows as it is (`@ifset`'s too: whether a flag is set is the build's choice)."""
_LINE_COMMANDS_SHOWN = frozenset({"center", "exdent", "item", "itemx", "headitem", "tab", "caption"})
_DEF = re.compile(r"def(?:fn|un|mac|spec|var|opt|typefn|typefun|typevar|typevr|vr|tp|op|method|typemethod|"
                  r"ivar|typeivar|cv|typecv|typeop|x)?x?$")  # fmt: skip
_DEF_CATEGORY = {"defun": "Function", "defmac": "Macro", "defspec": "Special Form", "defvar": "Variable",
                 "defopt": "User Option", "deftypefun": "Function", "deftypevar": "Variable"}  # fmt: skip
_LINE = re.compile(r"@([a-zA-Z]+)(?=[\s{]|$)[ \t]*(.*)")
_COMMENT = re.compile(r"@c(?:omment)?(?:[ \t].*)?$")


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None
    entries: tuple[tuple[int, int], ...] = ()  # definition-list entries, as `html.Page.entries`


def looks_like_texinfo(source: str) -> bool:
    """Whether `source` opens as a Texinfo manual does (`\\input texinfo`), for a file whose name says nothing."""
    return source.lstrip("\ufeff \t\r\n").startswith("\\input texinfo")


def convert(source: str) -> Page:
    """The Texinfo manual `source` as Markdown, titled by its `@settitle` (else `@title`, else its first heading)."""
    writer = _Writer()
    writer.read(source.replace("\r\n", "\n").split("\n"))
    page = html.convert("<html><body>" + "".join(writer.out) + "</body></html>")
    return Page(page.markdown, writer.settitle or writer.title, page.entries)


class _Writer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.paragraph: list[str] = []
        self.stack: list[list] = []  # [block name, what closes it, whether a `<dd>`/`<li>` is open]
        # how many of each block are open: an `@end` asks without going through the stack (50,000 nested
        # `@quotation`s under 50,000 `@itemize`s, each `@end itemize` looking past every quotation: 2 MB in minutes)
        self.open: Counter[str] = Counter()
        self.inline = Inline()  # `@set` values and footnotes, shared by every paragraph
        self.title: str | None = None
        self.settitle: str | None = None
        self.top = False

    def read(self, lines: list[str]) -> None:
        self.top = any(line.startswith("@top") for line in lines)
        hidden: list[str] = []  # the blocks being skipped, innermost last
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            found = _LINE.match(line) if line.startswith("@") else None
            name, rest = (found.group(1), found.group(2)) if found else ("", "")
            if hidden:
                if name == "end" and rest.split()[:1] == [hidden[-1]]:
                    hidden.pop()
                elif name in _HIDDEN_BLOCKS:
                    hidden.append(name)
                elif name == "title" and hidden[-1] == "titlepage" and self.title is None:
                    self.title = self._plain(rest)
                continue
            if _COMMENT.match(line) or line.startswith("\\input texinfo"):
                continue
            if not found:
                if not line.strip():
                    self._flush()
                elif self.stack and self.stack[-1][0] == "multitable":
                    self._cells(line)
                else:
                    self.paragraph.append(line)
                continue
            if name in _HIDDEN_BLOCKS:
                self._flush()
                hidden.append(name)
            elif name in _CODE_BLOCKS:
                self._flush()
                body: list[str] = []
                while i < len(lines) and not re.match(rf"@end\s+{name}\s*$", lines[i]):
                    body.append(lines[i])
                    i += 1
                i += 1
                text = html_text.escape("\n".join(body), quote=False) if name == "verbatim" else self._inline("\n".join(
                    b for b in body if not _COMMENT.match(b)), code=True)  # fmt: skip
                self._open_item()
                self.out.append(f"<pre>{text}</pre>")
            elif name == "end":
                self._end(rest.strip())
            elif name in _HEADINGS:
                self._flush()
                self._close_all()
                level = _HEADINGS[name] - (0 if self.top else 1)
                text = self._inline(rest)
                if text.strip():
                    self.out.append(f"<h{max(level, 1)}>{text}</h{max(level, 1)}>")
            else:
                self._command(name, rest, line)

    def _command(self, name: str, rest: str, line: str) -> None:
        if name == "settitle":
            self.settitle = self._plain(rest)
        elif name == "set":
            key, _, value = rest.partition(" ")
            self.inline.values[key] = value.strip()
        elif name == "clear":
            self.inline.values.pop(rest.strip(), None)
        elif name in ("itemize", "enumerate"):
            self._flush()
            self._open_item()
            tag = "ul" if name == "itemize" else "ol"
            self.out.append(f"<{tag}>")
            self._push([name, f"</{tag}>", False])
        elif name in ("table", "ftable", "vtable"):
            self._flush()
            self._open_item()
            self.out.append("<dl>")
            self._push([name, "</dl>", False, rest.strip().lstrip("@")])
        elif name == "multitable":
            self._flush()
            self._open_item()
            self.out.append("<table>")
            self._push([name, "</table>", False, "td"])
        elif _DEF.match(name):
            self._definition(name, rest)
        elif name in _QUOTES:
            self._flush()
            self._open_item()
            tag = "blockquote" if "quotation" in name or "indented" in name else "div"
            self.out.append(f"<{tag}>")
            if rest.strip() and tag == "blockquote":
                self.out.append(f"<p><strong>{self._inline(rest)}:</strong></p>")
            self._push([name, f"</{tag}>", False])
        elif name in ("item", "itemx", "headitem", "tab"):
            self._item(name, rest)
        elif name in _LINE_COMMANDS_SHOWN or (name in ("noindent", "refill") and rest.strip()):
            self.paragraph.append(rest)
        elif name not in _LINE_ONLY and not name.endswith("index"):  # `@code{x} is …`, a macro of the manual's own
            # (`@cnindex`, an index the manual defines with `@defindex cn`, shows nothing, as `@cindex`)
            self.paragraph.append(line)
        # any other line command (`@node`, `@cindex`, `@setfilename`, `@printindex`, `@page`): nothing shown

    def _definition(self, name: str, rest: str) -> None:
        """`@deffn Command forward-word count`: a definition list's term, `Command: forward-word count`."""
        parts = _def_args(rest)
        base = name[:-1] if name.endswith("x") and _DEF.match(name[:-1]) else name  # `@deffnx`: one more term
        category = _DEF_CATEGORY.get(base)
        if category is None and parts:
            category, parts = parts[0], parts[1:]
        term = f"{self._inline(category or '')}: " + " ".join(self._inline(p) for p in parts)
        if base == name:  # `@deffn`, not `@deffnx`
            self._flush()
            self._open_item()
            self.out.append("<dl>")
            self._push([name, "</dl>", False])
        else:
            self._flush()
        self.out.append(f"<dt>{term}</dt>")
        if self.stack:
            self.stack[-1][2] = False

    def _item(self, name: str, rest: str) -> None:
        self._flush()
        block = self.stack[-1] if self.stack else None
        if block is None:
            self.paragraph.append(rest)
            return
        kind = block[0]
        if kind == "multitable":
            if name == "tab" and block[2]:
                self.out.append(f"</{block[3]}><{block[3]}>")
            elif name != "tab":
                if block[2]:
                    self.out.append(f"</{block[3]}></tr>")
                block[3] = "th" if name == "headitem" else "td"
                self.out.append(f"<tr><{block[3]}>")
                block[2] = True
            self._cells(rest)
        elif kind in ("table", "ftable", "vtable"):
            if block[2]:
                self.out.append("</dd>")
                block[2] = False
            style = block[3] if len(block) > 3 else ""
            term = self._inline(f"@{style}{{{rest}}}" if style and style != "asis" and rest.strip() else rest)
            self.out.append(f"<dt>{term}</dt>")
        elif kind in ("itemize", "enumerate"):
            if block[2]:
                self.out.append("</li>")
            self.out.append("<li>")
            block[2] = True
            if rest.strip():
                self.paragraph.append(rest)
        else:
            self.paragraph.append(rest)

    def _cells(self, text: str) -> None:
        """A multitable row's text: `a @tab b` is two cells (`@tab` starts a cell wherever it is on the line)."""
        first, *others = re.split(r"@tab(?![a-zA-Z])[ \t]*", text)
        self.paragraph.append(first)
        for other in others:
            self._item("tab", other)

    def _open_item(self) -> None:
        """The `<dd>` of a definition list's term, opened by the first text or block after it."""
        if self.stack and _defines(self.stack[-1][0]) and not self.stack[-1][2]:
            self.out.append("<dd>")
            self.stack[-1][2] = True

    def _end(self, name: str) -> None:
        self._flush()
        if not self.open[name]:
            return  # an `@end` of a block not opened (or hidden): nothing to close
        while self.stack:
            block = self._pop()
            self._close(block)
            if block[0] == name:
                return

    def _close(self, block: list) -> None:
        kind, closer, open_part = block[0], block[1], block[2]
        if open_part:
            self.out.append(f"</{block[3]}></tr>" if kind == "multitable" else "</li>"
                            if kind in ("itemize", "enumerate") else "</dd>")  # fmt: skip
        self.out.append(closer)

    def _close_all(self) -> None:
        while self.stack:
            self._close(self._pop())

    def _push(self, block: list) -> None:
        self.stack.append(block)
        self.open[block[0]] += 1

    def _pop(self) -> list:
        block = self.stack.pop()
        self.open[block[0]] -= 1
        return block

    def _flush(self) -> None:
        if not self.paragraph:
            return
        text = self._inline("\n".join(self.paragraph)).strip()
        self.paragraph = []
        in_table = bool(self.stack) and self.stack[-1][0] == "multitable"
        if not text and not self.inline.notes:
            return
        if in_table:
            self.out.append(text)
        else:
            self._open_item()
            self.out.append(f"<p>{text}</p>")
        for note in self.inline.notes:
            self.out.append(note if not in_table else "")
        self.inline.notes.clear()

    def _plain(self, text: str) -> str:
        return " ".join(html_text.unescape(re.sub(r"<[^>]+>", "", self._inline(text))).split()) or ""

    def _inline(self, text: str, code: bool = False) -> str:
        """`text` with its inline commands resolved, as HTML."""
        return self.inline.html(text, code)


_LINE_ONLY = frozenset({
    "node", "cindex", "findex", "vindex", "kindex", "pindex", "tindex", "printindex", "setfilename",
    "setchapternewpage", "paragraphindent", "firstparagraphindent", "exampleindent", "documentencoding",
    "documentlanguage", "syncodeindex", "synindex", "defindex", "defcodeindex", "finalout", "smallbook",
    "afourpaper", "afourlatex", "afourwide", "afivepaper", "headings", "everyheading", "everyfooting", "evenheading",
    "evenfooting", "oddheading", "oddfooting", "include", "bye", "page", "sp", "need", "noindent", "refill", "vskip",
    "insertcopying", "dircategory", "allowcodebreaks", "codequotebacktick", "codequoteundirected", "kbdinputstyle",
    "frenchspacing", "deftypefnnewline", "xrefautomaticsectiontitle", "clickstyle", "urefbreakstyle", "microtype",
    "novalidate", "validatemenus", "setcontentsaftertitlepage", "setshortcontentsaftertitlepage", "fonttextsize",
    "pagesizes", "cropmarks", "contents", "shortcontents", "summarycontents", "footnotestyle", "title",
    "subtitle", "author", "columnfractions", "listoffloats", "shorttitlepage", "alias",
    "definfoenclose", "raisesections",
    "lowersections", "oddfootingmarks", "everyheadingmarks", "everyfootingmarks", "evenheadingmarks",
    "evenfootingmarks", "oddheadingmarks", "headingsoff", "anchor", "hyphenation", "shorttitle", "sectionbreak",
})  # fmt: skip
"""Line commands that show nothing (or whose argument is handled elsewhere)."""


def _defines(block: str) -> bool:
    """Whether `block` is a definition list (`@table`, `@deffn`): its text after a term goes in a `<dd>`."""
    return block in ("table", "ftable", "vtable") or bool(_DEF.match(block))


def _def_args(text: str) -> list[str]:
    """`@deffn` arguments: words, a `{group of words}` one argument, braces of a command (`@code{f(a, b)}`) kept."""
    parts: list[str] = []
    word: list[str] = []
    depth = 0
    for c in text:
        if c.isspace() and depth == 0:
            if word:
                parts.append("".join(word))
                word = []
            continue
        depth += 1 if c == "{" else -1 if c == "}" and depth > 0 else 0
        word.append(c)
    if word:
        parts.append("".join(word))
    return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in parts]

"""Texinfo's inline commands (`@code{x}`, `@xref{Node}`, `@'e`, `@dots{}`, `@footnote{…}`) → HTML, for `texinfo.py`.

Braces nest to any depth within a paragraph; a command this module does not know (a macro of the manual's own,
`@sc{…}`, `@w{…}`) leaves the text of its argument.
"""

from __future__ import annotations

import html as html_text
import re
import unicodedata

_GLYPHS = {
    "dots": "…", "enddots": "….", "bullet": "•", "copyright": "©", "registeredsymbol": "®", "result": "⇒",
    "expansion": "↦", "print": "-|", "error": "error→", "equiv": "≡", "point": "∗", "minus": "−", "TeX": "TeX",
    "LaTeX": "LaTeX", "tie": "\xa0", "euro": "€", "pounds": "£", "textdegree": "°", "geq": "≥", "leq": "≤",
    "arrow": "→", "comma": ",", "atchar": "@", "lbracechar": "{", "rbracechar": "}", "backslashchar": "\\",
    "hashchar": "#", "exclamdown": "¡", "questiondown": "¿", "ss": "ß", "ae": "æ", "AE": "Æ", "oe": "œ",
    "OE": "Œ", "o": "ø", "O": "Ø", "l": "ł", "L": "Ł", "aa": "å", "AA": "Å", "quotedblleft": "“",
    "quotedblright": "”", "quoteleft": "‘", "quoteright": "’", "quotedblbase": "„", "quotesinglbase": "‚",
    "guillemetleft": "«", "guillemetright": "»", "guilsinglleft": "‹", "guilsinglright": "›", "ordf": "ª",
    "ordm": "º", "today": "", "dotless": "",
}  # fmt: skip
_ESCAPES = {"@": "@", "{": "{", "}": "}", "*": "\n", ".": ".", ":": "", "!": "!", "?": "?", " ": " ", "\t": " ",
            "\n": " ", "-": "", "/": "", "|": "", "&": "&", "'": "'", '"': '"'}  # fmt: skip
_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", '"': "\u0308", "~": "\u0303", "=": "\u0304",
            ",": "\u0327", "H": "\u030b", "u": "\u0306", "v": "\u030c", "dotaccent": "\u0307",
            "ringaccent": "\u030a", "ubaraccent": "\u0332", "udotaccent": "\u0323", "tieaccent": "\u0361",
            "ogonek": "\u0328"}  # fmt: skip
_CODE = frozenset({"code", "samp", "kbd", "key", "command", "option", "env", "file", "t", "indicateurl", "verb",
                   "codequoteundirected"})  # fmt: skip
_EMPHASIS = frozenset({"emph", "var", "i", "dfn", "cite", "slanted"})
_STRONG = frozenset({"strong", "b"})
_TYPOGRAPHY = re.compile(r"``|''|---|--")
_TYPOGRAPHY_CHARS = {"``": "“", "''": "”", "---": "—", "--": "–"}
_SILENT = frozenset({"anchor", "footnotestyle", "hyphenation", "indexterm", "inlineraw", "errormsg", "sortas",
                     "seeentry", "seealso", "shortcaption"})  # fmt: skip


class Inline:
    """The state inline commands share across a manual: `@set` values, and footnotes waiting for the end of their
    paragraph (each `<p>[^n]: text</p>`), numbered in order."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.notes: list[str] = []
        self.count = 0

    def html(self, text: str, code: bool = False) -> str:
        """`text` with its inline commands resolved, as HTML; `code`: inside a code block (no typography, no
        nested code or emphasis marks)."""
        return _Reader(self, text, code).run()


class _Reader:
    """One pass over a paragraph's text, resolving `@command{…}` with braces nested to any depth."""

    def __init__(self, state: Inline, text: str, code: bool) -> None:
        self.state, self.text, self.code, self.i = state, text, code, 0

    def run(self) -> str:
        return self.until(None)

    def until(self, stop: str | None) -> str:
        out: list[str] = []
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if stop is not None and c in stop:
                return "".join(out)
            if c == "{":  # a bare group: its text
                self.i += 1
                out.append(self.until("}"))
                self.i += 1
            elif c == "@":
                out.append(self.command())
            else:
                j = self.i
                while j < len(text) and text[j] not in "@{}" and (stop is None or text[j] not in stop):
                    j += 1
                if j == self.i:  # a stray `}`
                    j += 1
                words = text[self.i : j]
                if not self.code:  # TeX's quotes and dashes, as makeinfo writes them outside code
                    words = _TYPOGRAPHY.sub(lambda m: _TYPOGRAPHY_CHARS[m.group(0)], words)
                out.append(html_text.escape(words, quote=False))
                self.i = j
        return "".join(out)

    def args(self) -> list[str]:
        """The brace-enclosed arguments at `self.i` (`{a, b}`), each resolved; [] without braces."""
        if self.i >= len(self.text) or self.text[self.i] != "{":
            return []
        self.i += 1
        parts = [self.until(",}")]
        while self.i < len(self.text) and self.text[self.i] == ",":
            self.i += 1
            parts.append(self.until(",}"))
        self.i += 1
        return [p.strip() for p in parts]

    def body(self) -> str:
        """One brace-enclosed argument at `self.i`, commas and all."""
        if self.i >= len(self.text) or self.text[self.i] != "{":
            return ""
        self.i += 1
        inner = self.until("}")
        self.i += 1
        return inner

    def command(self) -> str:
        text = self.text
        self.i += 1
        if self.i >= len(text):
            return ""
        c = text[self.i]
        if c in _ESCAPES:
            self.i += 1
            if c in _ACCENTS and self.i < len(text) and (text[self.i].isalpha() or text[self.i] == "{"):
                return self.accent(_ACCENTS[c])
            return html_text.escape(_ESCAPES[c], quote=False)
        if c in _ACCENTS and not c.isalpha():  # `@^a`, `@~n`, `@=o`, `@,{c}` (`@v{c}` is a name: below)
            self.i += 1
            return self.accent(_ACCENTS[c])
        found = re.match(r"[a-zA-Z]+", text[self.i :])
        if found is None:
            return "@"
        name = found.group(0)
        self.i += len(name)
        if name == "verb" and text[self.i : self.i + 1] == "{" and self.i + 1 < len(text):
            delimiter = text[self.i + 1]
            end = text.find(delimiter + "}", self.i + 2)
            end = len(text) if end < 0 else end
            inner = text[self.i + 2 : end]
            self.i = end + 2
            return f"<code>{html_text.escape(inner, quote=False)}</code>"
        if name in _ACCENTS:
            return self.accent(_ACCENTS[name])
        if name in _GLYPHS:
            self.body()
            return html_text.escape(_GLYPHS[name], quote=False)
        if name == "value":
            key = re.sub(r"<[^>]+>", "", self.body()).strip()
            return html_text.escape(self.state.values.get(key, key), quote=False)
        if name == "footnote":
            inner = self.body().strip()
            self.state.count += 1
            number = self.state.count
            self.state.notes.append(f"<p>[^{number}]: {' '.join(inner.split())}</p>")
            return f"[^{number}]"
        if name in _SILENT:
            self.body()
            return ""
        if name in ("c", "comment"):  # a comment to the end of the line
            end = text.find("\n", self.i)
            self.i = len(text) if end < 0 else end
            return ""
        if name in ("U",):
            code = re.sub(r"<[^>]+>", "", self.body()).strip()
            return chr(int(code, 16)) if re.fullmatch(r"[0-9a-fA-F]{1,6}", code) and int(code, 16) < 0x110000 else ""
        if name in _CODE:
            outer, self.code = self.code, True
            inner = self.body()
            self.code = outer
            return inner if outer else f"<code>{inner}</code>"
        if name in _EMPHASIS:
            inner = self.body()
            return inner if self.code else f"<em>{inner}</em>"
        if name in _STRONG:
            inner = self.body()
            return inner if self.code else f"<strong>{inner}</strong>"
        if name in ("sub", "sup"):
            return f"<{name}>{self.body()}</{name}>"
        if name in ("uref", "url"):
            parts = self.args()
            url = re.sub(r"<[^>]+>", "", parts[0]) if parts else ""
            shown = parts[2] if len(parts) > 2 and parts[2] else parts[1] if len(parts) > 1 and parts[1] else url
            return f'<a href="{html_text.escape(html_text.unescape(url))}">{shown}</a>' if url else shown
        if name == "email":
            parts = self.args()
            return parts[1] if len(parts) > 1 and parts[1] else parts[0] if parts else ""
        if name in ("xref", "pxref", "ref", "inforef"):
            parts = self.args()
            node = parts[0] if parts else ""
            shown = parts[2] if len(parts) > 2 and parts[2] else node
            manual = parts[4] if len(parts) > 4 and parts[4] else parts[3] if len(parts) > 3 and parts[3] else ""
            if name == "inforef":
                manual = parts[2] if len(parts) > 2 else ""
                shown = parts[1] if len(parts) > 1 and parts[1] else node
            shown = f"{shown} in <em>{manual}</em>" if manual else shown
            return {"xref": "See ", "pxref": "see "}.get(name, "") + shown
        if name in ("acronym", "abbr"):
            parts = self.args()
            return f"{parts[0]} ({parts[1]})" if len(parts) > 1 and parts[1] else parts[0] if parts else ""
        if name == "image":
            parts = self.args()
            return parts[3] if len(parts) > 3 else ""
        if name in ("inlinefmt", "inlinefmtifelse", "inlineifset", "inlineifclear"):
            parts = self.args()
            if name == "inlinefmt":
                return parts[1] if len(parts) > 1 and parts[0] in ("info", "plaintext") else ""
            if name == "inlinefmtifelse":
                return (parts[1] if parts[0] in ("info", "plaintext") else parts[2]) if len(parts) > 2 else ""
            return parts[1] if len(parts) > 1 else ""
        # `@w{…}`, `@sc{…}`, `@r{…}`, `@math{…}`, `@titlefont{…}`, a macro of the manual's own: their text
        return self.body()

    def accent(self, mark: str) -> str:
        if self.i < len(self.text) and self.text[self.i] == "{":
            base = self.body()
        elif self.i < len(self.text):
            base = self.text[self.i]
            self.i += 1
        else:
            base = ""
        if base.startswith("@") or not base:
            return base
        return unicodedata.normalize("NFC", base[0] + mark + base[1:])

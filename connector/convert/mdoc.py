"""mdoc(7), the BSD man page macros (`.Sh`, `.Nm`, `.Fl`, `.Bl`/`.It`), for `roff.py`: the words a page shows,
its macros and their markup dropped (`.Fl a Ar file` → `-a file`), its sections as headings."""

from __future__ import annotations

import re
from typing import Protocol


class Writer(Protocol):
    lines: list[str]
    prefix: str
    new_line: bool

    def text(self, line: str) -> None: ...
    def flush(self) -> None: ...
    def tag(self) -> None: ...
    def heading(self, level: int, title: str) -> None: ...
    def start_code(self) -> None: ...
    def end_code(self) -> None: ...


class Reader(Protocol):
    """What `roff._Reader` lends: its output, its escapes, and the page title it keeps."""

    out: Writer
    title: str

    def inline(self, text: str, depth: int = 0) -> str: ...
    def emit(self, text: str) -> None: ...


_CALLABLE = (  # macros that may follow others on a line; `.Fl a Ar file`
    "Ad An Ap Ar At Bsx Bx Cd Cm Dv Dx Em Er Es Ev Fa Fl Fn Fo Fc Ft Fx Ic In Li Lk Ms Mt Nm No Ns Nx Ox "
    "Pa Pf Ql Sx Sy Ta Tn Ux Va Vt Xr St Lb Ot Fd Xo Xc"
)


class Mdoc:
    """mdoc(7), the BSD macros (`.Sh`, `.Nm`, `.Fl`, `.Bl`/`.It`): words kept, macros and their markup dropped."""

    ENCLOSE = {"Op": "[]", "Oo": "[", "Oc": "]", "Pq": "()", "Po": "(", "Pc": ")", "Dq": "“”", "Do": "“", "Dc": "”"}
    ENCLOSE |= {"Sq": "‘’", "So": "‘", "Sc": "’", "Qq": '""', "Qo": '"', "Qc": '"', "Bq": "[]", "Bo": "[", "Bc": "]"}
    ENCLOSE |= {"Brq": "{}", "Bro": "{", "Brc": "}", "Aq": "<>", "Ao": "<", "Ac": ">", "Eo": "", "Ec": ""}
    CALLABLE = set(ENCLOSE) | set(_CALLABLE.split())
    SYSTEMS = {"Ux": "UNIX", "Bx": "BSD", "At": "AT&T UNIX", "Bsx": "BSD/OS", "Fx": "FreeBSD", "Nx": "NetBSD"}
    SYSTEMS |= {"Ox": "OpenBSD", "Dx": "DragonFly"}

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.name = ""
        self.lists: list[str] = []
        self.spacing = True  # `.Sm off`: words (and lines) join without spaces until `.Sm on`
        self.unspaced = False

    def request(self, name: str, args: list[str]) -> bool:
        out = self.reader.out
        if name in ("Dd", "Os", "Bk", "Ek", "Tg"):
            return True
        if name == "Sm":
            self.spacing = args[:1] != ["off"]
            self.unspaced = False  # the first words after `.Sm off` are spaced from those before it
            return True
        if name == "Dt":
            self.reader.title = f"{args[0]}({args[1]})" if len(args) > 1 else " ".join(args)
            out.heading(1, self.reader.title)
        elif name in ("Sh", "Ss"):
            out.heading(2 if name == "Sh" else 3, self.words(args))
        elif name in ("Pp", "Lp"):
            out.flush()
        elif name == "Bd":
            out.flush()
            if "-literal" in args or "-unfilled" in args:
                out.start_code()
        elif name == "Ed":
            out.end_code()
            out.flush()
        elif name == "Bl":
            out.indent(1)
            self.lists.append(next((a for a in args if a in ("-bullet", "-dash", "-hyphen", "-enum")), "-tag"))
        elif name == "El":
            out.indent(-1)
            self.lists = self.lists[:-1]
        elif name == "It":
            out.flush()
            kind = self.lists[-1] if self.lists else "-tag"
            out.prefix = {"-enum": "1. ", "-tag": ""}.get(kind, "- ")
            if args:
                out.tag()
                out.text(self.words(args))
                out.new_line = args[-1] != "Xo"  # `.It Fl L Xo` / ... / `.Xc`: the tag runs on to `.Xc`
        elif name == "Nd":
            text = "- " + self.words(args)
            if out.lines:
                out.lines[-1] += " " + text
            else:
                out.text(text)
        elif name in ("Dl", "D1"):
            out.start_code()
            out.text(self.words(args))
            out.end_code()
        elif name == "Ex":
            out.text(f"The {self.name or 'utility'} utility exits 0 on success, and >0 if an error occurs.")
        elif name in self.CALLABLE or name in ("Rs", "Re", "%A", "%T", "%B", "%J", "%D", "%N", "%V", "%P", "%O"):
            if name == "Nm" and args and not self.name:
                self.name = args[0]
            text = self.words([name, *args])
            if text and self.unspaced and out.lines and not out.new_line:
                out.lines[-1] += text
            elif text:
                self.reader.emit(text)
            self.unspaced = not self.spacing
            if "Xc" in (name, *args):
                out.new_line = True
        else:
            return False
        return True

    def words(self, args: list[str]) -> str:
        """A line of mdoc macros and words as the words it shows: `Fl a Ar file` → `-a file`."""
        out: list[str] = []
        glue = False  # the next word joins the last one (`Ns`, opening brackets)
        closers: list[str] = []
        macro = ""
        for i, arg in enumerate(args):
            if arg in self.CALLABLE:
                macro = arg
                if arg in ("Ns", "Ap", "Pf"):
                    glue = True
                    if arg == "Ap":
                        out[-1:] = [(out[-1] if out else "") + "'"]
                elif arg in self.ENCLOSE:
                    pair = self.ENCLOSE[arg]
                    if len(pair) == 2 or arg.endswith("o"):
                        out.append(pair[:1])
                        glue = True
                        if len(pair) == 2:
                            closers.append(pair[1])
                    else:
                        out[-1:] = [(out[-1] if out else "") + pair]
                elif arg == "Nm" and self.name and (i + 1 == len(args) or args[i + 1] in self.CALLABLE):
                    out.append(self.name)
                elif arg in self.SYSTEMS:
                    out.append(self.SYSTEMS[arg])
                continue
            word = self.reader.inline(arg)
            if re.fullmatch(r"[.,;:)\]?!(\[]+", word):
                pass  # punctuation, whatever the macro
            elif macro == "Fl":
                word = "-" + word
            elif macro == "Xr" and out and re.fullmatch(r"\d\w*", word):
                out[-1] += f"({word})"
                continue
            elif macro == "In":
                word = f"<{word}>"
            if glue or (out and re.fullmatch(r"[.,;:)\]?!]+", word)):
                out[-1:] = [(out[-1] if out else "") + word]
            else:
                out.append(word)
            glue = False
        tail = ""  # closing punctuation at a line's end goes after the brackets it closes: `[:port].`
        if closers and out and (m := re.search(r"[.,;:?!]+$", out[-1])) and m.start() > 0:
            out[-1], tail = out[-1][: m.start()], m.group(0)
        text = (" " if self.spacing else "").join(out).replace("[ ", "[").replace("( ", "(").replace("“ ", "“")
        return text + "".join(reversed(closers)) + tail if text.strip() else ("-" if macro == "Fl" else "")

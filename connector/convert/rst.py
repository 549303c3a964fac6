"""reStructuredText → Markdown: docutils (the reference implementation) parses it, its HTML5 writer writes it, and
the HTML converter (`html.py`) makes the Markdown, so headings, lists, tables, literal blocks and definition lists come
out as they do for any page. Read as plain text, the stored text kept the markup itself (`.. _FAQ: http://...`,
`:ref:`, `::`), footnotes stayed where they were written (the end of a section), and headings were guessed.

Sphinx sources use directives and roles docutils does not know (`.. code-block::`, `.. toctree::`, `:ref:`,
`:func:`). docutils would answer each with an error message and drop its content; here an unknown directive keeps it
(a code directive's as a code block, any other's as text, its argument a paragraph), an unknown role its text, and
a few directives that show nothing in Sphinx's output (`toctree`, `index`, `highlight`) nothing.

Footnotes and citations become Markdown footnotes as in the office converters: `[^label]` where cited, and the note
right after the block (paragraph, list, table) that first cites it.

docutils reads no other file (`include`, `csv-table :file:`, `raw :url:` are off, and no image is embedded: a
document must not read the machine's files or the network), reads no configuration file, and never stops at an
error. Its parser is line based and slow on pathological input: a source over `MAX_CHARS` is read as plain text,
as it was before, and so is one docutils fails on (a block quote nested 200 levels deep exhausts Python's recursion
limit).
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass

from docutils import nodes
from docutils.core import publish_doctree, publish_from_doctree
from docutils.parsers.rst import Directive, Parser, directives, roles, states

from connector.convert import html

MAX_CHARS = 250_000
"""Sources longer than this are read as plain text. docutils' time grows faster than the length: Ghostscript's
manual (`Use.rst`, 165 KB, the longest of its 31 sources) takes 0.7 s, while 190 KB of nothing but sections took
6 s and 1 MB 90 s (1 MB of unknown directives: 42 s, of nested lists or grid tables: 10 to 14 s)."""

_SETTINGS = {
    "file_insertion_enabled": False,  # `include`, `csv-table :file:/:url:`, `raw :file:/:url:` read nothing
    "raw_enabled": False,  # `raw:: html` is a page's markup (buttons, scripts), not text
    "_disable_config": True,  # no docutils.conf from the working directory or the home directory
    "report_level": 5,
    "halt_level": 5,
    "warning_stream": False,
    "traceback": True,  # an internal error raises (caught below) instead of calling sys.exit
    "syntax_highlight": "none",  # code stays one text, not a span per token
    "image_loading": "link",  # an image is its reference, never the file's bytes inlined (see `_clean`)
    "math_output": "LaTeX",  # the formula's source, not MathML's markup
    "toc_backlinks": "none",  # headings are no links back to the table of contents (which is dropped)
    "doctitle_xform": True,
    "sectsubtitle_xform": False,
    "embed_stylesheet": False,
    "stylesheet_path": "",
    "output_encoding": "unicode",
    "input_encoding": "unicode",
}

_CODE_DIRECTIVES = frozenset({
    "code-block", "sourcecode", "code-cell", "testcode", "testoutput", "testsetup", "testcleanup", "doctest",
    "ipython", "jupyter-execute", "productionlist", "prompt", "console",
})  # fmt: skip
"""Sphinx's and its extensions' directives whose content is code, kept as a code block with its indentation."""
_HIDDEN_DIRECTIVES = frozenset({
    "toctree", "index", "highlight", "currentmodule", "tabularcolumns", "sectionauthor", "moduleauthor",
    "codeauthor", "literalinclude",
})  # fmt: skip
"""Directives that show no text of theirs in Sphinx's output (a toctree is the site's navigation, and a
`literalinclude` reads another file)."""
_PROBLEM = re.compile(r"^(?::[\w.:+-]+:)?`?\|?(.*?)\|?`?_{0,2}$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None
    entries: tuple[tuple[int, int], ...] = ()  # definition-list entries, as `html.Page.entries`


class ReadError(Exception):
    """docutils failed on the source: the caller reads it as plain text."""


def convert(source: str) -> Page:
    """The document as Markdown and its title; `ReadError` where docutils fails on it."""
    try:
        document = publish_doctree(source, parser=_parser(), settings_overrides=_SETTINGS)
        title = document.get("title") or None
        _clean(document)
        _place_notes(document)
        page = publish_from_doctree(document, writer_name="html5", settings_overrides=_SETTINGS)
    except MemoryError:
        raise
    except Exception as exc:  # nesting too deep for docutils, or its bugs on odd input: the text stays readable
        raise ReadError(f"{type(exc).__name__}: {exc}") from exc
    converted = html.convert(page)
    return Page(converted.markdown, " ".join(title.split()) if title else None, converted.entries)


class _AnyOption(dict):
    """An option spec that takes any option (Sphinx's `:linenos:`, `:members:`) as text."""

    def __missing__(self, key: str):
        return directives.unchanged

    def __bool__(self) -> bool:
        return True


class _Unknown(Directive):
    """A directive docutils does not know: its content kept, as code for a code directive, else as rST."""

    optional_arguments = 1
    final_argument_whitespace = True
    has_content = True
    option_spec = _AnyOption()

    def run(self) -> list[nodes.Node]:
        name = self.name.lower()
        if name in _HIDDEN_DIRECTIVES:
            return []
        if name in _CODE_DIRECTIVES:
            text = "\n".join(self.content)
            return [nodes.literal_block(text, text, classes=["code", *self.arguments[:1]])] if text.strip() else []
        out: list[nodes.Node] = [nodes.paragraph(text=self.arguments[0])] if self.arguments else []
        if self.content:
            box = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, box)
            out.append(box)
        return out


def _directive(state: states.Body, match: re.Match, **option_presets) -> tuple[list[nodes.Node], bool]:
    """`Body.directive`, with `_Unknown` for a directive docutils does not know (it would drop the content)."""
    name = match.group(1)
    found, messages = directives.directive(name, state.memo.language, state.document)
    state.parent += messages
    return state.run_directive(found or _Unknown, match, name, option_presets)


class _Lenient:
    """Mixed into each of docutils' parser states: unknown directives go to `_Unknown`, and nested parses (a list
    item, a directive's content) use these states too."""

    explicit = copy.copy(states.Body.explicit)
    explicit.constructs = [(_directive if m is states.Body.directive else m, p) for m, p in explicit.constructs]

    def __init__(self, state_machine, debug: bool = False) -> None:
        super().__init__(state_machine, debug)
        self.nested_sm_kwargs = {"state_classes": _STATE_CLASSES, "initial_state": "Body"}


_STATE_CLASSES = tuple(type(c.__name__, (_Lenient, c), {}) for c in states.state_classes)


def _interpreted(inliner: states.Inliner, rawsource: str, text: str, role: str, lineno: int):
    """`Inliner.interpreted`, where an unknown role (`:ref:`, `:func:`, `:title:`) is its text: the title of
    `:ref:`Title <target>``, the name of `:func:`~pkg.name``."""
    found, messages = roles.role(role, inliner.language, lineno, inliner.reporter) if role else (None, [])
    if found or not role:
        return states.Inliner.interpreted(inliner, rawsource, text, role, lineno)
    shown = _role_title(text)
    return [nodes.Text(shown.lstrip("~!"))], messages


def _role_title(text: str) -> str:
    """`Title <target>` → `Title`; the text itself when it names no target. Split, not matched: the pattern
    `^(.*?)\\s*<[^<>]*>$` was quadratic in a run of spaces."""
    head, bracket, target = text.rpartition("<")
    if bracket and target.endswith(">") and ">" not in target[:-1] and head.strip():
        return head.rstrip()
    return text


def _parser() -> Parser:
    # The Inliner is patched on the instance, not subclassed: it builds its patterns from its own class's attributes.
    inliner = states.Inliner()
    inliner.interpreted = functools.partial(_interpreted, inliner)
    parser = Parser(inliner=inliner)
    parser.state_classes = _STATE_CLASSES
    return parser


def _clean(document: nodes.document) -> None:
    """No error messages in the text, and markup docutils could not resolve (`name_` with no target) as its text.
    No image may be embedded: an image's own `:loading: embed` option made the HTML writer read its path whatever
    `file_insertion_enabled` says, so `.. image:: /proc/self/environ` put the sidecar's environment (the DSN's
    password) into the stored text, base64-encoded; `/dev/zero` read until memory ran out."""
    for node in document.findall(nodes.image):
        node.attributes.pop("loading", None)
    for node in list(document.findall(nodes.system_message)):
        node.parent.remove(node)
    for node in list(document.findall(nodes.problematic)):
        shown = m.group(1) if (m := _PROBLEM.match(node.astext())) else node.astext()
        node.parent.replace(node, nodes.Text(shown))
    for node in list(document.findall(nodes.topic)):
        if "contents" in node["classes"]:  # `.. contents::`: links to the headings that follow
            node.parent.remove(node)


def _place_notes(document: nodes.document) -> None:
    """Each footnote and citation as a paragraph `[^label]: text` after the block that first cites it (in place when
    nothing cites it), each reference to it `[^label]`."""
    for note in list(document.findall(lambda n: isinstance(n, nodes.footnote | nodes.citation))):
        labels = list(note.findall(nodes.label))
        label = "".join(labels[0].astext().split()) if labels else (note["names"] or ["?"])[0]
        for found in labels:
            found.parent.remove(found)
        refs = [document.ids[i] for i in note.get("backrefs", []) if i in document.ids]
        anchor = _block(refs[0]) if refs else None
        for ref in refs:
            ref.parent.replace(ref, nodes.Text(f"[^{label}]"))
        paragraph = nodes.paragraph("", f"[^{label}]: ")
        for part in note.children:
            if isinstance(part, nodes.paragraph):
                paragraph += [*part.children, nodes.Text(" ")]
            else:
                paragraph += nodes.Text(part.astext() + " ")
        if anchor is None or anchor is note or _inside(note, anchor):
            note.parent.replace(note, paragraph)
        else:
            note.parent.remove(note)
            anchor.parent.insert(anchor.parent.index(anchor) + 1, paragraph)


def _inside(node: nodes.Node, holder: nodes.Node) -> bool:
    """Whether `holder` holds `node`: its parents are walked, not the holder's tree (a list of 4,000 items, each with
    its footnote, took 21 s that way)."""
    parent = node.parent
    while parent is not None:
        if parent is holder:
            return True
        parent = parent.parent
    return False


def _block(node: nodes.Node) -> nodes.Element | None:
    """The outermost block holding `node` that sits in a section (or the document): a list, a table, a paragraph."""
    while node.parent is not None and not isinstance(node.parent, nodes.section | nodes.document):
        node = node.parent
    return node if node.parent is not None else None

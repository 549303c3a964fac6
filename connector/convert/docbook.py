"""DocBook (4 and 5) and Mallard XML → Markdown: each element is mapped to the HTML element that DocBook's and
Mallard's own stylesheets make of it (a `chapter`'s `title` a heading, `para` a paragraph, `programlisting` a code
block, `variablelist` a definition list, a CALS `table` a table, `ulink` a link), and the HTML converter (`html.py`)
writes the Markdown, as for reStructuredText. Read as plain text, as they were, a KDE handbook (`index.docbook`) or a
GNOME help page (`*.page`) kept every tag, no heading was found and no title.

The XML is untrusted: no entity is expanded and no DTD or file is read (a KDE handbook's `&commands;` pulls in a
file beside it, and nothing here reads it). An entity whose name HTML knows (`&nbsp;`, `&mdash;`) is its
character, one the document's own DTD subset declares as plain text its text, an external one nothing, and any
other, such as KDE's `&kcalc;` (declared in a DTD that is not here), its name: "The kcalc Handbook", not
"The  Handbook". Metadata (`bookinfo`, `info`: authors, copyright, revision history), index terms and remarks show
no text; an abstract does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.entities import name2codepoint

from lxml import etree

from connector.convert import html
from connector.errors import ConversionError

_OPENING = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*\?>\s*)?(?:(?:<!--(?:(?!-->).)*-->|<\?(?:(?!\?>).)*\?>)\s*)*"
    rb"(?:<!DOCTYPE\s+(?P<doctype>[\w:.-]+)(?P<dtd>(?:[^\[>]|\[[^\]]*\])*)>\s*)?"
    rb"(?:(?:<!--(?:(?!-->).)*-->|<\?(?:(?!\?>).)*\?>)\s*)*"
    rb"<(?:[\w.-]+:)?(?P<root>[\w.-]+)(?P<attributes>[^>]*)>",
    re.DOTALL,
)
_SNIFF_BYTES = 16_384
_XML_ID = "{http://www.w3.org/XML/1998/namespace}id"
_DOCBOOK_NS = "http://docbook.org/ns/docbook"
_MALLARD_NS = "http://projectmallard.org/1.0/"
_DOCBOOK_ROOTS = frozenset({
    "book", "article", "chapter", "part", "set", "preface", "appendix", "section", "sect1", "refentry",
    "reference", "glossary", "bibliography", "partintro", "slides",
})  # fmt: skip
"""Root elements that make a DocBook document when its doctype or namespace says so (`<section>` or `<article>`
alone could be any XML)."""

DOCBOOK, MALLARD = "docbook", "mallard"


def dialect(data: bytes, named: bool = False) -> str | None:
    """`DOCBOOK` or `MALLARD` when `data` opens like such a document (its root element is in the DocBook or Mallard
    namespace, or is a DocBook root under a doctype naming DocBook, or under none in a file `named` DocBook:
    `commands.docbook`, a KDE handbook's chapter), else None."""
    found = _OPENING.match(data[:_SNIFF_BYTES])
    if found is None:
        return None
    attributes = found["attributes"].decode("latin-1")
    dtd = (found["dtd"] or b"").decode("latin-1").lower()
    root = found["root"].decode("latin-1")
    if _MALLARD_NS in attributes and root == "page":
        return MALLARD
    if _DOCBOOK_NS in attributes or (root in _DOCBOOK_ROOTS and ("docbook" in dtd or (named and not dtd))):
        return DOCBOOK
    return None


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None
    entries: tuple[tuple[int, int], ...] = ()  # definition-list entries, as `html.Page.entries`


def convert(data: bytes, kind: str) -> Page:
    """The DocBook or Mallard document `data` (`kind` from `dialect`) as Markdown, and its title."""
    parser = etree.XMLParser(
        resolve_entities=False, load_dtd=False, no_network=True, recover=True, huge_tree=False,
        remove_comments=True, remove_pis=True,
    )  # fmt: skip
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError:  # not even a root element to recover: read as text by the caller
        return Page("", None)
    if root is None:
        return Page("", None)
    if any(error.type_name == "ERR_RESOURCE_LIMIT" for error in parser.error_log):
        # Past libxml2's limits (depth 256, a text node of 10 MB) the recovering parser keeps nothing more: the
        # rest of the text would be lost without a word. No real document nests so deep; a hostile one fails
        # saying why.
        raise ConversionError(
            "XML document is past the parser's limits (nested over 256 deep, or a huge text node): not read"
        )
    body = etree.Element("body")
    writer = _Writer(root, _MALLARD if kind == MALLARD else _DOCBOOK, kind)
    writer.element(root, body, 0)
    writer.flush()
    page = html.convert("<html>" + etree.tostring(body, encoding="unicode", method="html") + "</html>")
    return Page(page.markdown, writer.title, page.entries)


def _declared_entities(root: etree._Element) -> dict[str, str | None]:
    """The entities the document's internal DTD subset declares: the text of each internal one, None for each
    external one (a file, not read)."""
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is None:
        return {}
    declared: dict[str, str | None] = {}
    for entity in dtd.iterentities():
        if entity.system_url is not None:
            declared[entity.name] = None
        elif entity.content is not None and "<" not in entity.content and "&" not in entity.content:
            declared[entity.name] = entity.content
    return declared


# Element maps: the HTML element each DocBook or Mallard element becomes. `None`: shows nothing. Elements in neither
# map keep their content in place (inline words: `application`, `guimenu`, `keycap`, `acronym`).
_SECTIONS = "section"  # marker: a sectioning element, its title a heading one level down
_TITLE = "title"  # marker: a title, a heading of its section's level (else bold: a table's, an example's)
_DOCBOOK: dict[str, str | None] = {
    **dict.fromkeys((
        "book", "article", "chapter", "part", "set", "preface", "appendix", "section", "sect1", "sect2", "sect3",
        "sect4", "sect5", "simplesect", "refentry", "refsect1", "refsect2", "refsect3", "refsection", "reference",
        "glossary", "bibliography", "index", "colophon", "dedication", "acknowledgements", "partintro", "slides",
        "foil", "foilgroup", "refsynopsisdiv", "qandadiv",
    ), _SECTIONS),
    **dict.fromkeys(("title", "refentrytitle"), _TITLE),
    **dict.fromkeys((
        "bookinfo", "articleinfo", "chapterinfo", "sectioninfo", "sect1info", "sect2info", "sect3info", "info",
        "prefaceinfo", "appendixinfo", "partinfo", "refentryinfo", "refmeta", "slidesinfo", "indexterm",
        "remark", "titleabbrev", "subtitle", "beginpage", "anchor", "imageobject", "imagedata", "videoobject",
        "audioobject", "textobject", "toc", "lot", "co", "areaspec", "colspec", "spanspec", "authorgroup", "author",
        "revhistory", "copyright", "legalnotice", "keywordset", "pubdate", "releaseinfo", "date",
    ), None),
    **dict.fromkeys(("para", "simpara", "refnamediv"), "p"),
    **dict.fromkeys(("varlistentry", "glossentry", "refpurpose", "refname"), ""),  # their content in place
    **dict.fromkeys(("formalpara", "abstract", "question", "answer"), "div"),
    "member": "li",
    **dict.fromkeys(("programlisting", "screen", "literallayout", "synopsis", "cmdsynopsis", "funcsynopsis",
                     "classsynopsis", "address"), "pre"),
    **dict.fromkeys(("itemizedlist", "simplelist", "segmentedlist", "calloutlist"), "ul"),
    **dict.fromkeys(("orderedlist", "procedure", "substeps", "stepalternatives"), "ol"),
    **dict.fromkeys(("listitem", "step", "callout", "seglistitem"), "li"),
    **dict.fromkeys(("variablelist", "glosslist", "glossdiv"), "dl"),
    **dict.fromkeys(("term", "glossterm"), "dt"),
    **dict.fromkeys(("glossdef",), "dd"),
    **dict.fromkeys(("note", "warning", "tip", "caution", "important", "sidebar", "example", "informalexample",
                     "figure", "informalfigure", "equation", "informalequation", "qandaset", "qandaentry",
                     "blockquote", "epigraph", "mediaobject"), "div"),
    "tgroup": "",
    **dict.fromkeys(("table", "informaltable", "entrytbl"), "table"),
    "thead": "thead", "tbody": "tbody", "tfoot": "tfoot", "row": "tr", "tr": "tr", "td": "td", "th": "th",
    "entry": "td",
    **dict.fromkeys(("emphasis", "citetitle", "firstterm", "foreignphrase", "wordasword"), "em"),
    **dict.fromkeys(("literal", "code", "command", "filename", "option", "parameter", "varname", "function",
                     "envar", "classname", "methodname", "userinput", "computeroutput", "replaceable",
                     "systemitem", "constant", "type", "markup", "tag", "prompt", "sgmltag", "structname",
                     "structfield", "returnvalue", "errorcode", "errorname", "property", "token", "uri",
                     "varargs", "void"), "code"),
    **dict.fromkeys(("ulink", "link", "email", "olink"), "a"),
    "superscript": "sup", "subscript": "sub", "footnote": "footnote", "xref": "xref", "quote": "q",
}  # fmt: skip
_MALLARD: dict[str, str | None] = {
    **dict.fromkeys(("page", "section"), _SECTIONS),
    "title": _TITLE,
    **dict.fromkeys(("info", "links", "comment", "media", "subtitle", "desc"), None),
    **dict.fromkeys(("p",), "p"),
    **dict.fromkeys(("code", "screen", "synopsis"), "pre"),  # inline inside a `p` (see `_Writer.element`)
    **dict.fromkeys(("list", "tree"), "ul"),
    "steps": "ol", "item": "li", "terms": "dl",
    **dict.fromkeys(("note", "figure", "listing", "example", "quote", "cite"), "div"),
    "table": "table", "thead": "thead", "tbody": "tbody", "tfoot": "tfoot", "tr": "tr", "td": "td", "th": "th",
    "em": "em",
    **dict.fromkeys(("cmd", "file", "input", "output", "sys", "var"), "code"),
    "link": "a",
}  # fmt: skip
_JOINED = {"keycombo": "+", "keyseq": "+", "menuchoice": " → ", "guiseq": " → "}
"""Elements whose parts are written with a separator, as DocBook's and Mallard's stylesheets write them: `Ctrl+Z`,
`Settings → Numeral System`, not `CtrlZ`."""
_INLINE_CODE_IN = frozenset({"p", "dt", "em", "strong", "a", "code", "q", "sup", "sub"})
"""Where Mallard's `code`/`screen` (and DocBook's `synopsis`) are inline code; anywhere else, a list item's or a
section's child, they are code blocks (a file to create, shown in a step)."""


class _Writer:
    """Builds the HTML tree for one document: `element` adds what `source` becomes under `parent`."""

    def __init__(self, root: etree._Element, names: dict[str, str | None], kind: str) -> None:
        self.root = root
        self.declared = _declared_entities(root)
        self.names = names
        self.kind = kind
        self.title: str | None = None
        self.ids: dict[str, etree._Element] = {}  # for `xref`s, which point forward as often as back
        for element in root.iter(tag=etree.Element):
            if found := element.get("id") or element.get(_XML_ID):
                self.ids.setdefault(found, element)
        self.notes = 0
        # Text waiting to be written where `text` last wrote: an element's text or its last child's tail. Setting an
        # lxml element's text copies the whole string, so each piece added that way made a paragraph of n entities
        # (`&kde;`) quadratic: 100,000 of them (0.8 MB) took 89 s. Flushed before anything reads the tree.
        self.pending: tuple[etree._Element, bool, list[str]] | None = None

    def element(self, source: etree._Element, parent: etree._Element, depth: int) -> None:
        if isinstance(source, etree._Entity):
            self.text(parent, self.entity(source.name))
            self.text(parent, source.tail)
            return
        if not isinstance(source.tag, str):
            self.text(parent, source.tail)
            return
        name = etree.QName(source).localname
        mapped = self.names.get(name, "")
        if mapped is None:
            self._metadata(source, parent, depth)
            self.text(parent, source.tail)
            return
        if mapped == _SECTIONS:
            target = etree.SubElement(parent, "div")
            self.children(source, target, depth + 1)
        elif mapped == _TITLE:
            target = self._title(source, parent, depth)
            self.children(source, target, depth)
        elif mapped == "footnote":
            self.notes += 1
            self.text(parent, f"[^{self.notes}]")
            note = etree.Element("p")
            note.text = f"[^{self.notes}]: "
            holder = etree.Element("div")
            self.children(source, holder, depth)
            self.flush()
            note.text += " ".join("".join(holder.itertext()).split())
            self._after_block(parent, note)
        elif mapped == "xref":
            self.text(parent, self._xref(source))
        elif mapped == "":
            self.children(source, parent, depth)
            if name == "refname":  # `ls — list directory contents`, as a man page's NAME line
                following = source.getnext()
                local = etree.QName(following).localname if following is not None else ""
                self.text(parent, " — " if local == "refpurpose" else ", " if local == "refname" else None)
        elif mapped == "li" and parent.tag == "dl":
            self._entry(source, parent, depth)
        else:
            if mapped == "pre" and parent.tag in _INLINE_CODE_IN:
                mapped = "code"  # Mallard's `code` inside a paragraph, DocBook's `synopsis` in a list item's text
            tag = "th" if mapped == "td" and _in_head(source) else mapped
            if tag == "p" and any(self._block(child) for child in source):
                tag = "div"  # a `para` holding a list or a listing: HTML ends a `<p>` there, and the rest fell out
            target = etree.SubElement(parent, tag)
            if tag == "a":
                href = source.get("url") or source.get("href") or source.get("{http://www.w3.org/1999/xlink}href")
                if name == "email":
                    href = f"mailto:{''.join(source.itertext()).strip()}"
                if href:
                    target.set("href", href)
            if tag == "td" and source.get("morerows", "").isdigit():
                target.set("rowspan", str(int(source.get("morerows")) + 1))
            self.children(source, target, depth)
            self.flush()
            if tag == "a" and not "".join(target.itertext()).strip() and source.get("linkend"):
                target.text = self._xref(source)
        self.text(parent, source.tail)

    def _block(self, child: etree._Element) -> bool:
        if not isinstance(child.tag, str) or isinstance(child, etree._Entity):
            return False
        return self.names.get(etree.QName(child).localname) in ("ul", "ol", "dl", "table", "div", "pre", _SECTIONS)

    def _entry(self, source: etree._Element, parent: etree._Element, depth: int) -> None:
        """A definition list's entry: DocBook's `listitem` after its `term`s, Mallard's `item` holding `title`s and
        then its text: the terms `<dt>`, the rest one `<dd>`."""
        if self.kind == DOCBOOK:
            target = etree.SubElement(parent, "dd")
            self.children(source, target, depth)
            return
        definition = None
        self.text(parent, source.text)
        for child in source:
            if isinstance(child.tag, str) and etree.QName(child).localname == "title":
                self.children(child, etree.SubElement(parent, "dt"), depth)
            else:
                if definition is None:
                    definition = etree.SubElement(parent, "dd")
                self.element(child, definition, depth)

    def children(self, source: etree._Element, target: etree._Element, depth: int) -> None:
        separator = _JOINED.get(etree.QName(source).localname)
        if separator is None:
            self.text(target, source.text)
            for child in source:
                self.element(child, target, depth)
            return
        # Each key (an element, an entity, or words between them: `<key>Ctrl</key>number`) is one part.
        first = True
        for part in [source.text, *(x for child in source for x in (child, child.tail))]:
            if part is None or (isinstance(part, str) and not part.strip()):
                continue
            if not isinstance(part, str) and not (isinstance(part, etree._Entity) or isinstance(part.tag, str)):
                continue  # a comment or processing instruction
            self.text(target, None if first else separator)
            first = False
            if isinstance(part, str):
                self.text(target, part.strip())
            else:
                tail, part.tail = part.tail, None  # written as its own part
                self.element(part, target, depth)
                part.tail = tail

    def text(self, parent: etree._Element, text: str | None) -> None:
        if not text:
            return
        # the last child, found from the end: lxml's `len()` counts every child (a chapter of 40,000 paragraphs,
        # each one's tail added after it: quadratic, 3.5 MB in 118 s)
        last = next(reversed(parent), None)
        target, tail = (last, True) if last is not None else (parent, False)
        if self.pending is not None and self.pending[0] is target and self.pending[1] == tail:
            self.pending[2].append(text)
            return
        self.flush()
        self.pending = (target, tail, [text])

    def flush(self) -> None:
        """Writes the text `text` holds back into the tree."""
        if self.pending is None:
            return
        target, tail, pieces = self.pending
        self.pending = None
        if tail:
            target.tail = (target.tail or "") + "".join(pieces)
        else:
            target.text = (target.text or "") + "".join(pieces)

    def entity(self, name: str) -> str:
        if name in self.declared:
            return self.declared[name] or ""
        if name in name2codepoint:
            return chr(name2codepoint[name])
        return name.replace(".", " ")  # KDE's `&Bernd.Johannes.Wuebben;`: the name in words

    def _title(self, source: etree._Element, parent: etree._Element, depth: int) -> etree._Element:
        """A section's title as a heading of its depth (the document's own the first `<h1>` and its title); any
        other title (a table's, an example's, a note's) as a bold paragraph."""
        holder = source.getparent()
        holder_name = etree.QName(holder).localname if holder is not None else ""
        if holder_name.endswith("info") and holder is not None and holder.getparent() is not None:
            holder = holder.getparent()  # `<bookinfo><title>`: the book's title
            holder_name = etree.QName(holder).localname
        if self.names.get(holder_name) != _SECTIONS:
            return etree.SubElement(etree.SubElement(parent, "p"), "strong")
        if not self._plain(source).strip():  # `<title/>`: antiword's chapter of a Word file without headings
            return etree.Element("span")  # written nowhere: an empty heading has no name for a section path
        heading = etree.SubElement(parent, f"h{min(max(depth, 1), 6)}")
        if self.title is None and holder is self.root:
            self.title = " ".join(self._plain(source).split()) or None
        return heading

    def _metadata(self, source: etree._Element, parent: etree._Element, depth: int) -> None:
        """A metadata container shows its title (when its section has no title of its own) and its abstract."""
        name = etree.QName(source).localname
        if name == "refmeta":  # a reference page's `ls(1)`, its heading as a man page's
            self._refmeta(source, parent, depth)
            return
        if not name.endswith("info"):
            return
        holder = source.getparent()
        own_title = holder is not None and any(
            isinstance(c.tag, str) and etree.QName(c).localname == "title" for c in holder
        )
        for child in source:
            if not isinstance(child.tag, str):
                continue
            local = etree.QName(child).localname
            if (local == "title" and not own_title) or local == "abstract":
                self.element(child, parent, depth)

    def _refmeta(self, source: etree._Element, parent: etree._Element, depth: int) -> None:
        words = {etree.QName(c).localname: " ".join(self._plain(c).split()) for c in source if isinstance(c.tag, str)}
        if not words.get("refentrytitle"):
            return
        heading = etree.SubElement(parent, f"h{min(max(depth, 1), 6)}")
        volume = words.get("manvolnum")
        heading.text = words["refentrytitle"] + (f"({volume})" if volume else "")
        name = self.root.find(".//{*}refnamediv")
        if self.title is None and source.getparent() is self.root and name is not None:
            holder = etree.Element("p")
            self.element(name, holder, depth)
            self.flush()
            self.title = " ".join("".join(holder.itertext()).split()) or heading.text

    def _xref(self, source: etree._Element) -> str:
        """An `xref`'s words: its target's title (DocBook's stylesheets write the same), else the target's id."""
        linkend = source.get("linkend") or ""
        target = self.ids.get(linkend)
        if target is not None:
            for child in target.iter():
                if isinstance(child.tag, str) and etree.QName(child).localname == "title":
                    return " ".join(self._plain(child).split())
        return source.get("endterm") or linkend

    def _plain(self, source: etree._Element) -> str:
        parts = [source.text or ""]
        for child in source:
            if isinstance(child, etree._Entity):
                parts.append(self.entity(child.name))
            elif isinstance(child.tag, str) and self.names.get(etree.QName(child).localname, "") is not None:
                parts.append(self._plain(child))
            parts.append(child.tail or "")
        return "".join(parts)

    def _after_block(self, parent: etree._Element, note: etree._Element) -> None:
        """`note` right after the paragraph, list item or table that holds `parent` (a footnote after what cites it)."""
        self.flush()
        block = parent
        while block.getparent() is not None and block.tag not in ("p", "li", "table", "dd", "pre"):
            block = block.getparent()
        if block.tag == "li" or block.getparent() is None:
            block.append(note)
        else:
            block.addnext(note)
            note.tail, block.tail = block.tail, None


def _in_head(source: etree._Element) -> bool:
    return any(isinstance(a.tag, str) and etree.QName(a).localname == "thead" for a in source.iterancestors())

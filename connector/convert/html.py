"""HTML → Markdown with markdownify (visible text only; headings, tables, lists and code kept as Markdown).

markdownify walks the tree recursively, three Python frames per level, so a page nested thousands of levels deep
(100,000 `<div>`s, say) would end in a `RecursionError`. Below `MAX_DEPTH` the tree is converted as it is; an element
at that depth with deeper markup keeps only its text, one paragraph per block-level element inside it. No real page
nests that deep: what is lost there is formatting, never text.

Pages are parsed by lxml (libxml2's HTML parser), which closes the elements whose end tags HTML lets a page leave
out (`<p>`, `<li>`, `<dt>`, `<dd>`, `<td>`, ...). Python's `html.parser` closes none: a man2html page, which never
writes `</dd>`, nested 546 levels deep and came out flattened past `MAX_DEPTH`, and every `<li>` of a menu ran on
into the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, Tag
from markdownify import MarkdownConverter

from connector.convert import html_tables
from connector.visible import visible

_BLANK_RUNS = re.compile(r"\n{3,}")

MAX_DEPTH = 100
"""Element depth converted with its markup; deeper content is flattened to paragraphs of text."""
HEADING_MAX_CHARS = 150
"""A heading element with more text than this is converted as a paragraph, as a PDF's large text is a heading only up
to this length (`pdf._is_heading`): a real title is short, and a long one is markup gone wrong (sqlite's
`<h2>Keyword Index</h1>` runs on to the end of the page)."""

_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "details", "dialog", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})  # fmt: skip
"""Elements that end a paragraph of flattened text."""


# Page chrome: navigation, banners, footers, sidebars, search boxes, "skip to content" links, and the themes' own
# names for them (Sphinx: related, sphinxsidebar, footer; MkDocs/Read the Docs: wy-nav-*, md-sidebar, md-header;
# sqlite.org: logo, tagline, menu mainmenu / submenu / searchmenu, rightsidebar; Publican: docnav, the prev/next
# links; rustdoc: the hidden "Notable traits" tooltip, the "Run" links that carry each example again URL-encoded,
# "source" links). Menus by a class that ends in "menu" only: Sphinx's `menuselection` is the text of a menu path in
# the prose.
_CHROME_TAGS = ["nav", "header", "footer", "aside", "form", "button", "dialog"]
_CHROME_ROLES = re.compile(r"^(?:navigation|banner|contentinfo|complementary|search|menu|menubar|toolbar)$", re.I)
_CHROME_CLASS = re.compile(
    r"^(?:related|sphinxsidebar\w*|footer|nav\w*|breadcrumbs?|wy-nav-\w+|rst-versions|"
    r"md-(?:header|footer|sidebar|tabs|search)\w*|(?:left|right)?sidebar\w*|skip-?link|cookie\w*|"
    r"site-(?:header|footer|nav)|[\w-]*menu|logo|tagline|docnav|"
    r"notable-traits|test-arrow|srclink|(?:short)?contents-heading)$",
    re.I,
)
# Texinfo's "Table of Contents" heading (`h2.contents-heading`) goes with the table of contents under it.
# Publican's "Download the ebook" banner (the Debian handbook), doxygen's project name and logo above every page.
_CHROME_ID = re.compile(r"^(?:banner|titlearea)$", re.I)
# A list of links, not a table; sqlite.org's is `fancy_toc`. By its class a candidate only: see `_navigation`.
_TOC_CLASS = re.compile(r"^(?:toc|contents|localtoc|toctree-wrapper|fancy[_-]toc)$", re.I)
NAV_LINK_SHARE = 0.5
"""An element classed as a table of contents is one when at least this share of its text is link text: a real table
of contents (Sphinx's, Texinfo's `div.contents`, DocBook's `div.toc`) is all links, while doxygen puts the whole page
body, prose and code, in `<div class="contents">` (a tenth of it link text)."""
NAV_PAGE_SHARE = 0.9
"""... and when it holds less than this share of the text left on the page outside headings: a list of links that is
the whole page under its title (an index page, doxygen's list of files) is its content."""
# Line-number gutters beside code: rustdoc's `pre.line-numbers`, Pygments' `td.linenos` / `span.linenos`,
# doxygen's `span.lineno`. Numbers alone, they became code blocks of "1 2 3 …" and chunks of nothing else.
_GUTTER_CLASS = re.compile(r"^(?:line-numbers|linenos|linenodiv|lineno)$", re.I)
# Permalink anchors next to headings: Sphinx's "¶", MkDocs's "#", GitHub's and Docusaurus's hash links.
_PERMALINK_CLASS = re.compile(r"^(?:headerlink|anchor(?:link|js-link)?|hash-link|permalink|header-anchor)$", re.I)
_PERMALINK_TEXT = frozenset({"¶", "#", "🔗", "⚓", "◆"})  # not "§": "see § 5" links are text; ◆: doxygen's


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None
    # (start, end) in `markdown` of each entry of a definition list (`<dt>` and its `<dd>`, up to the next `<dt>` or
    # the list's end): a Sphinx configuration key, a glossary term. Nested lists belong to the entry they sit in.
    entries: tuple[tuple[int, int], ...] = ()


def to_markdown(html: str) -> str:
    return convert(html).markdown


def convert(html: str) -> Page:
    """The page's main content as Markdown, and its title (`<title>`, else its first `<h1>`). A page that is
    nothing but what looks like chrome is converted whole rather than emptied."""
    page = _convert(html, drop_chrome=True)
    return page if visible(page.markdown) else _convert(html, drop_chrome=False)


def _convert(html: str, drop_chrome: bool) -> Page:
    soup = BeautifulSoup(_keep_indents(_PROLOGUE.sub("", html, count=1)), "lxml")
    title = _title(soup)
    # A `<title>` outside `<head>` too: text before `<html>` puts the whole page in the body.
    for tag in soup(["head", "title", "script", "style", "noscript", "template", "svg"]):
        tag.decompose()
    body = _main(soup) if drop_chrome else soup.body or soup
    _drop_gutters(body)
    _doxygen(soup, body)  # first: its page title, once a heading, is not text that a table of contents is weighed by
    if drop_chrome:
        _drop_chrome(body)
    _end_headings(soup, body)
    _unwrap_layout_lists(body)
    html_tables.prepare(soup, body)
    _limit_depth(soup, body)
    # Where each entry of a definition list starts and each list ends, marked in the text as it is written (its
    # offsets are known only once markdownify and the clean-up below are done), then taken out. Not on a page
    # that holds the marks itself.
    # (In an attribute too: a link's URL or title is written into the text.)
    markup = str(body)
    marked = _ENTRY not in markup and _LIST_END not in markup
    text = _Converter(heading_style="ATX", bullets="-", escape_misc=False, mark_entries=marked).convert_soup(body)
    # No-break spaces become plain ones: people search with spaces (and embedders see them differently).
    text = _BLANK_RUNS.sub("\n\n", text.replace("\xa0", " ")).strip() + "\n"
    if not marked:
        return Page(text, title)
    text, entries = _entries(text)
    return Page(text, title, entries)


_ENTRY, _LIST_END = "\ue000", "\ue001"  # private-use characters: no font draws them, no page searches for them


def _entries(text: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """`text` without the marks, and the spans of its entries: each from its mark to the next mark of either kind."""
    parts = re.split(f"([{_ENTRY}{_LIST_END}])", text)
    out: list[str] = []
    marks: list[tuple[int, str]] = []
    pos = 0
    for i, part in enumerate(parts):
        if i % 2:
            marks.append((pos, part))
        else:
            out.append(part)
            pos += len(part)
    spans = tuple(
        (at, marks[j + 1][0] if j + 1 < len(marks) else pos) for j, (at, mark) in enumerate(marks) if mark == _ENTRY
    )
    # A mark stripped with the whitespace before it leaves an entry starting at a line's end: it starts on the next.
    text = "".join(out)
    spans = tuple((a + (len(text[a:b]) - len(text[a:b].lstrip())), b) for a, b in spans)
    return text, tuple((a, b) for a, b in spans if a < b)


# What comes before the markup: the HTTP header that a CGI program such as man2html writes before its page (saved
# with it, it was the page's first paragraph), and an XML declaration. XHTML (EPUB chapters) is read by the HTML
# parser on purpose, since it converts the same and a page that claims to be XML need not be well-formed; without
# its declaration Beautiful Soup does not warn that it looks like XML.
_PROLOGUE = re.compile(r"\A\s*(?:Content-type:[^\n]*\n\s*?\n)?\s*(?:<\?xml[^>]*>)?", re.I)


_DOXYGEN_LINE = '<div class="line">'
_BLANK_NODE = re.compile(r">([ \t]+)<")


def _keep_indents(html: str) -> str:
    """Doxygen's code listings, one `<div class="line">` a line: the spaces that indent a line sit between two tags,
    and the parser makes any such run outside `<pre>` one space. They become no-break spaces (plain spaces again in
    the Markdown). Each line is read once, up to its `</div>`, on its own line of the file: linear in the page."""
    if _DOXYGEN_LINE not in html:
        return html

    def no_break(m: re.Match) -> str:
        return ">" + "\xa0" * len(m.group(1)) + "<"

    out: list[str] = []
    pos = 0
    while (start := html.find(_DOXYGEN_LINE, pos)) != -1:
        end = html.find("</div>", start)
        if end == -1:
            break
        line = html[start:end]
        out.append(html[pos:start])
        out.append(line if "\n" in line else _BLANK_NODE.sub(no_break, line))
        pos = end
    out.append(html[pos:])
    return "".join(out)


_DD_INDENT = re.compile(r"^    ", re.MULTILINE)
_BLOCK_START = re.compile(r"```|~~~|[-*+] |\d{1,9}[.)] |>|#{1,6} |\|")
_HASHES = re.compile(r"^([ \t]*)(#{1,6})(?=[ \t]|$)", re.MULTILINE)
_INTRAWORD_ESCAPE = re.compile(r"(?<=[^\W_])\\_(?=[^\W_])")


class _Converter(MarkdownConverter):
    """markdownify, with text that stays searchable and tables and code blocks that stay whole."""

    def convert_dt(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        out = super().convert_dt(el, text, parent_tags)
        if not self.options.get("mark_entries") or "_inline" in parent_tags or "dd" in parent_tags or not out.strip():
            return out
        previous = el.find_previous_sibling()
        if previous is not None and previous.name == "dt":
            return out  # a second term (`-N file`, then `--location=file`) of the same definition
        return out.replace(out.lstrip("\n"), _ENTRY + out.lstrip("\n"), 1)  # before the term, after the blank line

    def convert_dl(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        out = super().convert_dl(el, text, parent_tags)
        if not self.options.get("mark_entries") or "_inline" in parent_tags or "dd" in parent_tags or not out.strip():
            return out
        body = out.rstrip("\n")
        return body + _LIST_END + out[len(body) :]

    def escape(self, text: str, parent_tags: set[str]) -> str:
        # markdownify escapes every underscore; one between two letters or digits cannot start or end emphasis
        # (CommonMark), and escaped it put `SDL\_CreateRenderer`, `shared\_buffers` in the stored text: what a
        # reader copies, and what a question quoting the page does not contain.
        return _INTRAWORD_ESCAPE.sub("_", super().escape(text, parent_tags))

    def convert_li(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        parent = el.parent
        text = (text or "").strip()
        if parent is None or parent.name != "ol" or not text:
            return super().convert_li(el, text, parent_tags)
        # markdownify numbers an item by counting the items before it, each time: quadratic in the list's length
        # (10,000 items took 5.5 s; an rST file of 49,000 `#.` lines ran for minutes). Counted once per list here;
        # the rest is markdownify's: the number, then the item's lines indented by its width.
        start = parent.get("start")
        bullet = f"{(int(start) if str(start).isnumeric() else 1) + self._position(parent, el)}. "
        indent = " " * len(bullet)
        text = "\n".join(indent + line if line else "" for line in text.split("\n"))
        return bullet + text[len(bullet) :] + "\n"

    def _position(self, parent: Tag, el: Tag) -> int:
        """How many `<li>` come before `el` among `parent`'s children."""
        # One converter per page, whose tree outlives it: the ids of its tags are not reused meanwhile.
        positions = self.__dict__.setdefault("_positions", {})
        if id(parent) not in positions:
            positions[id(parent)] = {id(li): n for n, li in enumerate(parent.find_all("li", recursive=False))}
        return positions[id(parent)][id(el)]

    def convert_sup(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return _script("^", el, text, parent_tags)

    def convert_sub(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return _script("_", el, text, parent_tags)

    def convert_dd(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        # markdownify indents a definition by four spaces under its `:` marker (Pandoc's definition lists); the
        # Markdown this project parses (CommonMark) has none, so a definition's second paragraph was an indented
        # code block: 13 of prose, one of 7,899 characters, on doxygen's configuration page. Its lines go back to
        # the margin: paragraphs, lists and fenced code as they were.
        out = super().convert_dd(el, text, parent_tags)
        if "_inline" in parent_tags:
            return out
        out = _DD_INDENT.sub("", out)
        # A definition that opens with a block (`:   ```` then bash's `[n]<<<word`): the marker would hold its first
        # line in a paragraph and leave its closing fence to open a code block over what follows. It goes.
        return "\n" + out[4:] if _BLOCK_START.match(out, 4) else out

    def convert_p(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        # A paragraph line that opens with `#` is an ATX heading in Markdown: SiSU sets each code line as a paragraph
        # (`<p class="code"># apt-get install live-build<br/></p>`, a root prompt), and the live manual's EPUB got a
        # false top-level heading for each, the section of what followed.
        return super().convert_p(el, _HASHES.sub(r"\1\\\2", text), parent_tags)

    def convert_td(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return super().convert_td(el, _escape_pipes(text), parent_tags)

    def convert_th(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return super().convert_th(el, _escape_pipes(text), parent_tags)

    def convert_a(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        if "_noformat" not in parent_tags and "`" not in text and text.count("[") != text.count("]"):
            text = text.replace("[", "\\[").replace("]", "\\]")  # rustdoc's `[T; N]`: `[` one link, `; N]` another
        return super().convert_a(el, text, parent_tags)

    def convert_pre(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        block = super().convert_pre(el, text, parent_tags)
        longest = max(map(len, _BACKTICKS.findall(text)), default=0)
        if longest < 3 or not (block.startswith("\n\n```") and block.endswith("```\n\n")):
            return block
        fence = "`" * (longest + 1)  # a fence closes only on a run of backticks at least as long (CommonMark)
        return f"\n\n{fence}{block[5:-5]}{fence}\n\n"


_BACKTICKS = re.compile(r"`{3,}")
_SCRIPT_WORD = re.compile(r"[-+−]?\w+|\[\w+\]")


def _script(mark: str, el: Tag, text: str, parent_tags: set[str]) -> str:
    """A superscript or subscript written as `^` or `_` and its text, as in TeX and calculators: `2<sup>64</sup>`
    is `2^64`, `10<sup>-7</sup>` `10^-7`, `H<sub>2</sub>O` `H_2O` (plain text said "264" and "H2O": other numbers).
    More than one word or sign goes in parentheses, so that `2^(n+1)` is not read as `2^n + 1`. Not `~` for
    subscripts: GitHub renders `~text~` struck through."""
    if "_noformat" in parent_tags:
        return text
    text = text.strip()
    if not text:
        return ""
    return mark + (text if _SCRIPT_WORD.fullmatch(el.get_text().strip()) else f"({text})")


def _escape_pipes(text: str) -> str:
    """A cell's text with `|` escaped, as GFM tables need (in code spans too): `x | y` made an extra column."""
    return text.replace("|", "\\|")


def _title(soup: BeautifulSoup) -> str | None:
    for tag in (soup.title, soup.find("h1")):
        if tag is not None:
            text = " ".join(tag.get_text(" ").replace("¶", " ").split())
            if text:
                return text[:300]
    return None


def _main(soup: BeautifulSoup) -> Tag:
    """The page's own main content: `<main>`, `role="main"`, or its only `<article>`; else the whole body."""
    for found in (soup.find("main"), soup.find(attrs={"role": "main"})):
        if isinstance(found, Tag) and visible(found.get_text()):  # a `<main>` of zero-width spaces is empty
            return found
    articles = soup.find_all("article")
    if len(articles) == 1 and visible(articles[0].get_text()):
        return articles[0]
    return soup.body or soup


def _drop_chrome(root: Tag) -> None:
    """Remove navigation, banners, footers and the like (by tag, role, class), then the tables of contents: an element
    with a table of contents' class is removed only when it holds what one holds (`_navigation`), judged against what
    is left of the page once the rest of its chrome is gone."""
    doomed, tocs = [], []
    for tag in root.find_all(True):
        if (
            tag.name in _CHROME_TAGS
            or _CHROME_ROLES.match(str(tag.get("role") or ""))
            or any(_CHROME_CLASS.match(c) for c in tag.get("class") or ())
            or _CHROME_ID.match(str(tag.get("id") or ""))
            or _logos(tag)
            or _permalink(tag)
            or _node_links(tag)
        ):
            doomed.append(tag)
        elif tag.name != "table" and any(_TOC_CLASS.match(c) for c in tag.get("class") or ()):
            tocs.append(tag)
    for tag in doomed:
        if tag.name in ("header", "footer") and tag.find(_HEADING):
            continue  # a section's or chapter's own header holds its heading
        if tag.name == "aside" and _note(tag):
            continue  # footnotes, admonitions
        if not tag.decomposed:
            tag.decompose()
    tocs = [tag for tag in tocs if not tag.decomposed]
    if tocs:
        page = _prose(root)
        for tag in [tag for tag in tocs if _navigation(tag, page)]:  # judged before any is removed
            if not tag.decomposed:
                tag.decompose()


def _chars(text: str) -> int:
    """The length of `text` without its white space."""
    return len("".join(text.split()))


def _prose(tag: Tag) -> int:
    """The characters of text under `tag` outside headings."""
    return _chars(tag.get_text()) - sum(_chars(h.get_text()) for h in tag.find_all(_HEADING))


def _navigation(tag: Tag, page: int) -> bool:
    """Whether `tag` is a table of contents: at least `NAV_LINK_SHARE` of its text is link text, and it holds less
    than `NAV_PAGE_SHARE` of the page's text outside headings (`page` characters)."""
    text = _chars(tag.get_text())
    links = sum(_chars(a.get_text()) for a in tag.find_all("a"))
    return links >= NAV_LINK_SHARE * text and _prose(tag) < NAV_PAGE_SHARE * page


_NODE_RELS = frozenset({"next", "prev", "previous", "up", "contents", "index", "top", "start", "first", "last"})
_BRACKETS = re.compile(r"[\s\[\]]*")


def _node_links(tag: Tag) -> bool:
    """The links to the next, previous and parent node that manuals made by Texinfo put above every node: makeinfo's
    `div.header` / `div.nav-panel` ("Next: …, Previous: …, Up: …", each link with its `rel`), and texi2html's bar of
    bracketed links (`[ << ] [ >> ] … [Top] [Contents] [Index] [ ? ]`), a table of one row. A single-page manual
    (R's, libtool's) repeated them 140 times, each chunk's first line; texi2html's bar was a pipe table."""
    classes = tag.get("class") or ()
    if tag.name == "div" and ("header" in classes or "nav-panel" in classes):
        links = tag.find_all("a")
        rels = [set(a.get("rel") or ()) for a in links]
        return bool(links) and all(rel and rel <= _NODE_RELS for rel in rels) and _unlinked(tag) <= _chars(
            "".join(a.get_text() for a in links))  # fmt: skip
    if tag.name != "table" or len(tag.find_all("tr", limit=2)) != 1 or tag.find("table") is not None:
        return False
    return len(tag.find_all("a", limit=3)) == 3 and _BRACKETS.fullmatch(_unlinked_text(tag)) is not None


def _unlinked_text(tag: Tag) -> str:
    return "".join(s for s in tag.find_all(string=True) if s.find_parent("a") is None)


def _unlinked(tag: Tag) -> int:
    """The characters of text under `tag` outside links, "Next:" and "Up:" labels included."""
    return _chars(_unlinked_text(tag))


def _logos(tag: Tag) -> bool:
    """Publican's `<p id="title">`: two logo images linking to the project's and the documentation's sites, no
    text."""
    return tag.name == "p" and tag.get("id") == "title" and not tag.get_text(strip=True)


_HEADING = re.compile(r"^h[1-6]$")
_NOTE = re.compile(r"footnote|endnote|note|admonition|warning|tip|caution|important|rearnote", re.I)


def _note(tag: Tag) -> bool:
    marks = [str(tag.get("epub:type") or ""), str(tag.get("role") or ""), *(tag.get("class") or ())]
    return any(_NOTE.search(m) for m in marks)


def _permalink(tag: Tag) -> bool:
    if tag.name != "a":
        return False
    if any(_PERMALINK_CLASS.match(c) for c in tag.get("class") or ()):
        return True
    text = tag.get_text(strip=True)
    if text in _PERMALINK_TEXT:
        return True
    in_heading = tag.parent is not None and tag.parent.name in ("h1", "h2", "h3", "h4", "h5", "h6")
    return not text and in_heading and str(tag.get("href") or "").startswith("#")


def _drop_gutters(root: Tag) -> None:
    """Remove the line numbers beside code (`_GUTTER_CLASS`). A table that held them in a cell of its own (Pygments'
    `table.highlighttable`) is layout: it becomes the code block it holds, not a one-cell pipe table."""
    for tag in root.find_all(class_=_GUTTER_CLASS):
        if tag.decomposed:
            continue
        if tag.name in ("td", "th") and (table := tag.find_parent("table")) is not None:
            table["role"] = "presentation"
        tag.decompose()


def _doxygen(soup: BeautifulSoup, root: Tag) -> None:
    """Doxygen's page title (`<div class="headertitle"><div class="title">`) becomes a heading, each member's heading
    one level below its group's, the two cells of a member's declaration one line, and code listings (`<div
    class="fragment">`, one `<div class="line">` a line, hover tooltips `div.ttc` after them) code blocks: they came
    out as paragraphs of Markdown-escaped code, one a line."""
    for title in root.select("div.headertitle > div.title"):
        title.name = "h1"
    for heading in root.find_all("h2", class_="memtitle"):
        heading.name = "h3"  # a member's documentation, under its group's `h2.groupheader` ("Function Documentation")
    for left in root.find_all("td", class_=_MEMBER_LEFT):
        right = left.find_next_sibling("td")
        if right is not None and any(_MEMBER_RIGHT.match(c) for c in right.get("class") or ()):
            if not left.get_text()[-1:].isspace():  # doxygen ends the left cell with a no-break space
                left.append(" ")  # "int" and "SDL_GetNumRenderDrivers (void)": one declaration, not two paragraphs
            left.extend(list(right.contents))
            right.decompose()
    for fragment in root.find_all("div", class_="fragment"):
        lines = fragment.find_all("div", class_="line")
        if not lines:
            continue
        code = soup.new_tag("code")
        code.string = "\n".join(line.get_text().rstrip() for line in lines)
        pre = soup.new_tag("pre")
        pre.append(code)
        fragment.replace_with(pre)


_MEMBER_LEFT = re.compile(r"^mem(?:Templ)?ItemLeft$")
_MEMBER_RIGHT = re.compile(r"^mem(?:Templ)?ItemRight$")


def _unwrap_layout_lists(root: Tag) -> None:
    """Lists whose items hold headings or sections are layout, not lists: their `<ul>`, `<ol>`, `<dl>` and items
    become `<div>`s. The javadoc doclet (JDK 9 and later) puts every section of a class's page, each method's with its
    `<h3>`, in `<ul><li><section>`: markdownify wrote `- ## Method Details`, `  - ### charAt`, which Markdown reads as
    one list holding the whole page and no heading. One walk, children before parents, as in `_block_holders`."""
    order, holds = _holding(root, _STRUCTURE)  # holds: those that are or hold a heading or a section
    for tag in order:
        if tag.name in _LISTS and id(tag) in holds:
            for item in tag.find_all(_ITEMS, recursive=False):
                item.name = "div"
            tag.name = "div"


_STRUCTURE = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "section", "article"})
_LISTS = frozenset({"ul", "ol", "dl"})
_ITEMS = ["li", "dt", "dd"]
_INNER_BLOCKS = _BLOCKS - {"br"}  # a `<br>` in a heading is a line of the heading
HEADING_MAX_INLINE_NODES = 1000
"""A heading holding a block keeps at most this many nodes before it as its text: moving more out would take time
quadratic in them (a hostile page), and no title is that long."""


def _end_headings(soup: BeautifulSoup, root: Tag) -> None:
    """End every heading under `root` before the first block it holds (an `<h2>` closed by `</h1>` holds the rest of
    the page: the parser ignores an end tag that does not match), and make one longer than `HEADING_MAX_CHARS` a
    paragraph. A heading that holds a block becomes a `<div>` that starts with a heading of what came before it."""
    holders = _block_holders(root)
    for heading in root.find_all(_HEADING):
        first = next((i for i, child in enumerate(heading.contents) if id(child) in holders), None)
        if first is not None:
            inline = heading.contents[:first] if first <= HEADING_MAX_INLINE_NODES else []
            title = soup.new_tag(heading.name)
            title.extend([child.extract() for child in inline])
            heading.name = "div"
            heading.insert(0, title)
            heading = title
        if len(" ".join(heading.get_text(" ").split())) > HEADING_MAX_CHARS:
            heading.name = "p"


def _block_holders(root: Tag) -> set[int]:
    """The ids of the elements under `root` that are blocks or hold one."""
    return _holding(root, _INNER_BLOCKS)[1]


def _holding(root: Tag, names: frozenset[str]) -> tuple[list[Tag], set[int]]:
    """The elements under `root`, each before its children, and the ids of those that are one of `names` or hold
    one: one walk, children before parents (recursion would overflow on a deep hostile page)."""
    holders: set[int] = set()
    order: list[Tag] = []
    stack = [root]
    while stack:
        tag = stack.pop()
        order.append(tag)
        stack.extend(child for child in tag.contents if isinstance(child, Tag))
    for tag in reversed(order):  # every child comes after its parent in `order`
        if tag.name in names or any(id(child) in holders for child in tag.contents):
            holders.add(id(tag))
    return order, holders


def _limit_depth(soup: BeautifulSoup, root: Tag) -> None:
    """Flatten every element at `MAX_DEPTH` below `root` that holds deeper elements (an explicit stack: no
    recursion here either)."""
    stack = [(root, 0)]
    while stack:
        tag, depth = stack.pop()
        children = [c for c in tag.children if isinstance(c, Tag)]
        if depth >= MAX_DEPTH and children:
            _flatten(soup, tag)
        else:
            stack.extend((c, depth + 1) for c in children)


def _flatten(soup: BeautifulSoup, tag: Tag) -> None:
    """Replace the content of `tag` by its text, one `<p>` per run of text between block-level elements."""
    paragraphs: list[list[str]] = [[]]
    stack: list = list(reversed(tag.contents))
    while stack:
        node = stack.pop()
        if node is None:  # the end of a block-level element
            paragraphs.append([])
        elif isinstance(node, Tag):
            if node.name in _BLOCKS:
                paragraphs.append([])
                stack.append(None)
            stack.extend(reversed(node.contents))
        elif type(node) is NavigableString:  # not comments, CDATA, doctypes
            paragraphs[-1].append(str(node))
    tag.clear()
    for words in paragraphs:
        text = " ".join("".join(words).split())
        if text:
            p = soup.new_tag("p")
            p.string = text
            tag.append(p)

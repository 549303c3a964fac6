"""HTML → Markdown with markdownify (visible text only; headings, tables, lists and code kept as Markdown).

markdownify walks the tree recursively, three Python frames per level, so a page nested thousands of levels deep
(100,000 `<div>`s, say) would end in a `RecursionError`. Below `MAX_DEPTH` the tree is converted as it is; an element
at that depth with deeper markup keeps only its text, one paragraph per block-level element inside it. No real page
nests that deep: what is lost there is formatting, never text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, Tag
from markdownify import MarkdownConverter

from connector.visible import visible

_BLANK_RUNS = re.compile(r"\n{3,}")

MAX_DEPTH = 100
"""Element depth converted with its markup; deeper content is flattened to paragraphs of text."""

_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "details", "dialog", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})  # fmt: skip
"""Elements that end a paragraph of flattened text."""


# Page chrome: navigation, banners, footers, sidebars, search boxes, "skip to content" links, and the themes' own
# names for them (Sphinx: related, sphinxsidebar, footer; MkDocs/Read the Docs: wy-nav-*, md-sidebar, md-header).
_CHROME_TAGS = ["nav", "header", "footer", "aside", "form", "button", "dialog"]
_CHROME_ROLES = re.compile(r"^(?:navigation|banner|contentinfo|complementary|search|menu|menubar|toolbar)$", re.I)
_CHROME_CLASS = re.compile(
    r"^(?:related|sphinxsidebar\w*|footer|nav\w*|breadcrumbs?|wy-nav-\w+|rst-versions|"
    r"md-(?:header|footer|sidebar|tabs|search)\w*|sidebar\w*|skip-?link|cookie\w*|site-(?:header|footer|nav))$",
    re.I,
)
_TOC_CLASS = re.compile(r"^(?:toc|contents|localtoc|toctree-wrapper)$", re.I)  # a list of links, not a table
# Permalink anchors next to headings: Sphinx's "¶", MkDocs's "#", GitHub's and Docusaurus's hash links.
_PERMALINK_CLASS = re.compile(r"^(?:headerlink|anchor(?:link|js-link)?|hash-link|permalink|header-anchor)$", re.I)
_PERMALINK_TEXT = frozenset({"¶", "#", "🔗", "⚓"})  # not "§": "see § 5" links are text


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None


def to_markdown(html: str) -> str:
    return convert(html).markdown


def convert(html: str) -> Page:
    """The page's main content as Markdown, and its title (`<title>`, else its first `<h1>`). A page that is
    nothing but what looks like chrome is converted whole rather than emptied."""
    page = _convert(html, drop_chrome=True)
    return page if visible(page.markdown) else _convert(html, drop_chrome=False)


def _convert(html: str, drop_chrome: bool) -> Page:
    soup = BeautifulSoup(html, "html.parser")
    title = _title(soup)
    for tag in soup(["head", "script", "style", "noscript", "template", "svg"]):
        tag.decompose()
    body = _main(soup) if drop_chrome else soup.body or soup
    if drop_chrome:
        _drop_chrome(body)
    _limit_depth(soup, body)
    text = MarkdownConverter(heading_style="ATX", bullets="-", escape_misc=False).convert_soup(body)
    # No-break spaces become plain ones: people search with spaces (and embedders see them differently).
    return Page(_BLANK_RUNS.sub("\n\n", text.replace("\xa0", " ")).strip() + "\n", title)


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
    doomed = [
        tag
        for tag in root.find_all(True)
        if tag.name in _CHROME_TAGS
        or _CHROME_ROLES.match(str(tag.get("role") or ""))
        or any(_CHROME_CLASS.match(c) for c in tag.get("class") or ())
        or (tag.name != "table" and any(_TOC_CLASS.match(c) for c in tag.get("class") or ()))
        or _permalink(tag)
    ]
    for tag in doomed:
        if tag.name in ("header", "footer") and tag.find(_HEADING):
            continue  # a section's or chapter's own header holds its heading
        if tag.name == "aside" and _note(tag):
            continue  # footnotes, admonitions
        if not tag.decomposed:
            tag.decompose()


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

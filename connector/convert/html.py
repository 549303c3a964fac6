"""HTML → Markdown with markdownify (visible text only; headings, tables, lists and code kept as Markdown).

markdownify walks the tree recursively, three Python frames per level, so a page nested thousands of levels deep
(100,000 `<div>`s, say) would end in a `RecursionError`. Below `MAX_DEPTH` the tree is converted as it is; an element
at that depth with deeper markup keeps only its text, one paragraph per block-level element inside it. No real page
nests that deep: what is lost there is formatting, never text.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag
from markdownify import MarkdownConverter

_BLANK_RUNS = re.compile(r"\n{3,}")

MAX_DEPTH = 100
"""Element depth converted with its markup; deeper content is flattened to paragraphs of text."""

_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "details", "dialog", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
    "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})  # fmt: skip
"""Elements that end a paragraph of flattened text."""


def to_markdown(html: str) -> str:
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["head", "script", "style", "noscript", "template", "svg"]):
        tag.decompose()
    body = soup.body or soup
    _limit_depth(soup, body)
    text = MarkdownConverter(heading_style="ATX", bullets="-", escape_misc=False).convert_soup(body)
    # No-break spaces become plain ones: people search with spaces (and embedders see them differently).
    return _BLANK_RUNS.sub("\n\n", text.replace("\xa0", " ")).strip() + "\n"


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

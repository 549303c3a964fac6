"""HTML → Markdown with markdownify (visible text only; headings, tables, lists and code kept as Markdown)."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup
from markdownify import MarkdownConverter

_BLANK_RUNS = re.compile(r"\n{3,}")


def to_markdown(html: str) -> str:
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(["head", "script", "style", "noscript", "template", "svg"]):
        tag.decompose()
    body = soup.body or soup
    text = MarkdownConverter(heading_style="ATX", bullets="-", escape_misc=False).convert_soup(body)
    # No-break spaces become plain ones: people search with spaces (and embedders see them differently).
    return _BLANK_RUNS.sub("\n\n", text.replace("\xa0", " ")).strip() + "\n"

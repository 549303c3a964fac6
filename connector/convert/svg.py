"""SVG images → their words: the `<title>`, `<desc>` and `<text>` an image holds. Path data, styles and embedded
images are what most of an SVG's bytes are, and nobody searches for `d="m 12.3,45.6 …"`."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from connector.errors import ConversionError

_WORDS = ("title", "desc", "text")


@dataclass(frozen=True, slots=True)
class Page:
    markdown: str
    title: str | None


def convert(data: bytes) -> Page:
    """The text of the SVG image `data`: its title as a heading, then its descriptions and text elements."""
    # No entities resolved, nothing fetched: an SVG is untrusted XML.
    parser = etree.XMLParser(resolve_entities=False, no_network=True, recover=True, huge_tree=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise ConversionError(f"not a readable SVG image ({exc})") from exc
    if root is None:
        raise ConversionError("not a readable SVG image (no XML element)")
    title = None
    parts: list[str] = []
    for element in root.iter():
        if not isinstance(element.tag, str) or etree.QName(element).localname not in _WORDS:
            continue
        if any(isinstance(a.tag, str) and etree.QName(a).localname == "text" for a in element.iterancestors()):
            continue  # a `<text>` inside a `<text>`: its words are its parent's
        words = " ".join("".join(element.itertext()).split())
        if not words:
            continue
        if title is None and etree.QName(element).localname == "title" and element.getparent() is root:
            title = words
            parts.append(f"# {words}")
        else:
            parts.append(words.replace("#", "\\#", 1) if words.startswith("#") else words)
    if not parts:
        raise ConversionError("SVG image has no text (no <title>, <desc> or <text>): nothing to index")
    return Page("\n\n".join(parts) + "\n", title)

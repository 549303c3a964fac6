"""ODP presentations → Markdown, as PPTX is read (`office.pptx`): a slide is a page, its title frame
(`presentation:class="title"`) a `##` heading ("Slide N" without one), its other frames in reading order (top to
bottom, then left to right) read as ODT text is (`office._odt_parts`: paragraphs, lists, tables), its speaker
notes a paragraph. Titles come from the metadata's `dc:title`, else the first heading, unless that is a made-up
"Slide N"."""

from __future__ import annotations

import re

from connector.convert.office import _ODF, _document, _escape, _guarded, _join, _odt_parts, open_odf
from connector.models import Document

_PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
_SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
_LENGTH = re.compile(r"^\s*(-?[\d.]+)\s*(cm|mm|in|pt|pc|px)?\s*$")
_UNITS = {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72, "pc": 2.54 / 6, "px": 2.54 / 96, None: 1.0}


@_guarded("ODP")
def odp(data: bytes) -> Document:
    content, _, title = open_odf(data, "ODP")
    pages, untitled = [], set()
    for number, page in enumerate(content.iterfind(".//draw:page", _ODF), 1):
        parts = _slide(page, number)
        if parts[0][1] == f"## Slide {number}":  # made up here: a slide without a title frame
            untitled.add(f"Slide {number}")
        pages.append(_join(parts))
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + 1
    return _document("\n".join(pages), title, "ODP presentation", tuple(starts), frozenset(untitled))


def _slide(page, number: int) -> list[tuple[str, str]]:
    frames = [f for f in page if isinstance(f.tag, str) and f.tag.startswith(f"{{{_ODF['draw']}}}")]
    titles = [f for f in frames if f.get(f"{{{_PRESENTATION}}}class") == "title"]
    heading = " ".join(" ".join(titles[0].itertext()).split()) if titles else ""
    notes: list[str] = []
    parts: list[tuple[str, str]] = [("heading", f"## {heading or f'Slide {number}'}")]
    for frame in sorted((f for f in frames if f not in titles), key=_position):
        if frame.tag == f"{{{_ODF['draw']}}}g":  # a group: its shapes in order
            parts += _slide(frame, number)[1:]
            continue
        parts += list(_odt_parts([frame], notes, 0, frozenset()))
    for note in page.iterfind(f"{{{_PRESENTATION}}}notes"):  # speaker notes: one paragraph, as for PPTX
        text = " ".join(" ".join(" ".join(p.itertext()) for p in note.iter(f"{{{_ODF['text']}}}p")).split())
        if text:
            parts.append(("paragraph", _escape(text)))
    return parts


def _position(frame) -> tuple[float, float]:
    return _length(frame.get(f"{{{_SVG}}}y")), _length(frame.get(f"{{{_SVG}}}x"))


def _length(value: str | None) -> float:
    m = _LENGTH.match(value or "")
    return float(m.group(1)) * _UNITS[m.group(2)] if m else 0.0

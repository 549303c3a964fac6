"""Slide decks in PDF (LaTeX beamer, exported presentations): frame titles as headings, overlay steps collapsed.

A deck is a PDF of landscape pages, most of them short. Beamer writes every overlay step of a frame (`\\pause`,
`\\item<2->`) as a page of its own, each repeating what the previous step showed: the same list four times is four
near-identical chunks. A page whose every paragraph reappears on the next page is such a step; its text goes (the
page stays, empty, so the page map is unchanged) and the last step, which shows it all, is kept.

Frame titles. Repeated over a frame's steps, a title looks like a running header to the furniture filter; with the
steps collapsed, only text on at least `REPEAT_SHARE` of the pages (the footline, the headline) is furniture. Then
the first paragraph of a page, short and in the top `TITLE_ZONE` of it, is the frame's title and becomes a heading
whatever its font size.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from connector.convert.pdf import Para

LANDSCAPE_RATIO = 1.2  # width / height of a slide page (4:3 is 1.33, 16:9 is 1.78; A4 landscape is 1.41)
DECK_PAGE_SHARE = 0.8  # share of the pages that must be landscape
MIN_PAGES = 3
MAX_WORDS_PER_PAGE = 250  # a slide's text; more on most pages is a landscape report, not a deck
REPEAT_SHARE = 0.5
TITLE_ZONE = 0.3
TITLE_MAX_CHARS = 120
OVERLAY_CHANGE = 0.2  # share of a step's text that the next step of the same frame may replace

_SPACE = re.compile(r"\s+")


def is_deck(pages: list[list[Para]]) -> bool:
    sized = [ps for ps in pages if ps and ps[0].page_height > 0]
    if len(pages) < MIN_PAGES or len(sized) < DECK_PAGE_SHARE * len(pages):
        return False
    landscape = sum(ps[0].page_width >= LANDSCAPE_RATIO * ps[0].page_height for ps in sized)
    short = sum(sum(len(p.text.split()) for p in ps) <= MAX_WORDS_PER_PAGE for ps in sized)
    return landscape >= DECK_PAGE_SHARE * len(sized) and short >= DECK_PAGE_SHARE * len(sized)


def _key(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def collapse_overlays(pages: list[list[Para]]) -> list[list[Para]]:
    """Empty every page that the next page repeats and extends: each of its paragraphs reappears there whole (an
    item list that grows), or, when the next page has the same frame title, all but `OVERLAY_CHANGE` of its text
    (an `\\only` that swaps a caption). Numbers count: pages that differ in them ("Site 1", "Site 2") differ."""
    out = [list(ps) for ps in pages]
    for i in range(len(pages) - 1):
        here, following = pages[i], pages[i + 1]
        if not here or not following:
            continue
        later = {_key(p.text) for p in following}
        size, next_size = sum(len(p.text) for p in here), sum(len(p.text) for p in following)
        missing = sum(len(p.text) for p in here if _key(p.text) not in later)
        same_frame = _title(here) is not None and _title(here) == _title(following)
        grows = next_size >= size and missing == 0
        swaps = same_frame and missing <= OVERLAY_CHANGE * size and next_size >= (1 - OVERLAY_CHANGE) * size
        if grows or swaps:
            out[i] = []
    return out


def _title_index(ps: list[Para]) -> int | None:
    candidates = [i for i, p in enumerate(ps) if _title_like(p)]
    return max(candidates, key=lambda i: (round(ps[i].size, 1), -i)) if candidates else None


def _title(ps: list[Para]) -> str | None:
    i = _title_index(ps)
    return None if i is None else _key(ps[i].text)


def frame_titles(pages: list[list[Para]]) -> list[list[Para]]:
    """Mark each page's title: of the short paragraphs near its top, the one set largest (the first of those). What
    sits above it in smaller type is the theme's headline (section and subsection names): navigation, dropped."""
    out = []
    for ps in pages:
        best = _title_index(ps)
        if best is not None:
            above = [p for p in ps[:best] if p.bottom <= ps[best].top + 1 and p.size < ps[best].size]
            ps = [p for p in ps[:best] if p not in above] + [dataclasses.replace(ps[best], frame_title=True)]
            ps += list(pages[len(out)][best + 1 :])
        out.append(ps)
    return out


def _title_like(p: Para) -> bool:
    return (
        not p.table
        and p.page_height > 0
        and p.top <= TITLE_ZONE * p.page_height
        and len(p.text) <= TITLE_MAX_CHARS
        and p.text.count("\n") <= 1
        and any(ch.isalpha() for ch in p.text)
    )

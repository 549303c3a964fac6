"""What the web UI draws, checked against the metrics it illustrates and the text it shows: a strip's marks are
exactly the units Block Integrity counts as cut and the pairs References Completeness counts as broken; the
document's pieces cover its text once, in order; marked search words never change the text or let markup through."""

from __future__ import annotations

import functools
import html
import re

from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from connector.convert import convert
from connector.coref.heuristic import HeuristicCoref
from connector.db.browse import ChunkLine
from connector.metrics.blocks import TOLERANCE, block_integrity
from connector.metrics.breaks import MAX_BREAKS, breaks_of
from connector.metrics.references import references_completeness
from connector.web.ui import views
from tests.conftest import FIXTURES
from tests.test_convert import CHUNKING
from tests.test_metrics import chunks_at


@functools.cache
def _numeric():
    """A real HTML page with tables, lists and prose, as the pipeline converts it, and its coreference pairs."""
    doc = convert((FIXTURES / "postgresql-15-datatype-numeric.html").read_bytes(), "text/html", CHUNKING)
    return doc, HeuristicCoref().pairs(doc.markdown)


@examples(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(0.0, 1.0), max_size=40))
def test_marks_are_exactly_what_bi_and_rc_count(where: list[float]) -> None:
    doc, pairs = _numeric()
    n = len(doc.markdown)
    chunks = chunks_at(doc.markdown, sorted({int(w * (n - 1)) + 1 for w in where}))
    found = breaks_of(doc, chunks, pairs)
    units = doc.units or doc.blocks
    cut_units = {i for i, u in enumerate(units) for b in found
                 if b["kind"] != "reference" and u.start + TOLERANCE < b["at"] < u.end - TOLERANCE}  # fmt: skip
    assert len(cut_units) == round((1 - block_integrity(units, chunks)) * len(units))
    broken_pairs = sum(b["count"] for b in found if b["kind"] == "reference")
    assert broken_pairs == round((1 - references_completeness(pairs, chunks)) * len(pairs))
    cuts = {c.start for c in chunks[1:]}
    assert all(b["at"] in cuts for b in found), "a mark sits on a cut"
    assert [(b["at"], b["kind"]) for b in found] == sorted({(b["at"], b["kind"]) for b in found})


def test_a_cut_through_a_table_is_marked_as_one() -> None:
    doc, pairs = _numeric()
    table = next(b for b in doc.blocks if b.kind == "table" and b.end - b.start > 200)
    middle = (table.start + table.end) // 2
    found = breaks_of(doc, chunks_at(doc.markdown, [middle]), pairs)
    assert {"at": middle, "kind": "table", "count": 1} in found
    label = views.strip("x", False, len(doc.markdown), [0, middle, middle, len(doc.markdown)], found).marks
    assert any(m.css == "table" and "cuts a table" in m.label for m in label)
    at_edge = breaks_of(doc, chunks_at(doc.markdown, [table.start]), pairs)
    assert all(b["kind"] != "table" for b in at_edge), "a cut at a table's edge breaks no table"


def test_more_breaks_than_kept_are_merged_along_the_document_keeping_the_total() -> None:
    doc, pairs = _numeric()
    chunks = chunks_at(doc.markdown, list(range(7, len(doc.markdown) - 1, 7)))
    found = breaks_of(doc, chunks, pairs)
    cuts = [c.start for c in chunks[1:]]
    units = doc.units or doc.blocks
    unit_cuts = sum(1 for u in units for c in cuts if u.start + TOLERANCE < c < u.end - TOLERANCE)
    pair_cuts = round((1 - references_completeness(pairs, chunks)) * len(pairs))
    assert len(found) == MAX_BREAKS and sum(b["count"] for b in found) == unit_cuts + pair_cuts
    assert found[-1]["at"] > 0.9 * len(doc.markdown), "the marks reach the end of the document"
    assert [b["at"] for b in found] == sorted(b["at"] for b in found)


def _draw_spans(data, n: int, least: int, most: int, past: int) -> list[tuple[int, int]]:
    """Chunks of an `n`-character text in order of their starts; each may overlap the next one by up to `past`
    characters, or stop short of it."""
    starts = sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=least, max_size=most, unique=True)))
    ends = [starts[i + 1] if i + 1 < len(starts) else n for i in range(len(starts))]
    return [(s, data.draw(st.integers(s + 1, min(n, e + past)))) for s, e in zip(starts, ends, strict=True)]


def _lines(spans: list[tuple[int, int]]) -> list[ChunkLine]:
    return [ChunkLine(i + 1, i, s, e, max(1, (e - s) // 4), [], None, None, "text") for i, (s, e) in enumerate(spans)]


@examples(max_examples=80, deadline=None)
@given(st.data())
def test_pieces_cover_the_document_once_in_order(data) -> None:
    text = data.draw(st.text(alphabet="ab \n#|-*", min_size=1, max_size=300))
    n = len(text)
    spans = _draw_spans(data, n, 1, 12, 20)
    pieces = views.pieces(text, _lines(spans))
    assert [p.ordinal for p in pieces if p.ordinal is not None] == list(range(len(spans))), "every chunk, in order"
    assert all(a.end <= b.start for a, b in zip(pieces, pieces[1:], strict=False)), "no text shown twice"
    shown = {i for p in pieces for i in range(p.start, p.end)}
    assert all(text[i].isspace() for i in range(n) if i not in shown), "what no piece shows is whitespace"
    gaps = [p for p in pieces if p.ordinal is None]
    assert all(text[p.start : p.end].strip() for p in gaps), "a gap piece shows text, not just whitespace"
    own = [p for p in pieces if p.ordinal is not None]
    for i, (p, (s, e)) in enumerate(zip(own, spans, strict=True)):
        nxt = spans[i + 1][0] if i + 1 < len(spans) else n
        assert (p.start, p.end) == (s, min(e, nxt)), "a chunk shows its text up to the next chunk's start"
        assert p.overlap == (max(0, e - nxt) if i + 1 < len(spans) else 0)


@given(st.text(max_size=200), st.lists(st.sampled_from(["flux", "a", "xj42", "<b>", "&amp;", "a.b", "(x"]), max_size=4))
def test_marked_words_keep_the_text_and_let_no_markup_through(text: str, words: list[str]) -> None:
    out = str(views.highlight(text, words))
    assert "<" not in re.sub(r"</?mark>", "", out), "only <mark> tags"
    assert html.unescape(re.sub(r"</?mark>", "", out)) == text


def test_query_words_and_marks_are_whole_words_in_any_case() -> None:
    words = views.query_words("How is the XJ42 flux capacitor calibrated?")
    assert words == ["calibrated", "capacitor", "flux", "xj42"]
    out = str(views.highlight("Calibrate the XJ42 Flux capacitor; fluxes are not flux.", words))
    assert out == "Calibrate the <mark>XJ42</mark> <mark>Flux</mark> <mark>capacitor</mark>; fluxes are not " \
        "<mark>flux</mark>."  # fmt: skip


def test_markdown_renders_without_raw_html_scripts_or_images() -> None:
    out = str(views.render_markdown("# T <script>x()</script>\n\n<img src=x onerror=y()>\n\n![i](http://e/i.png) "
                                    "[j](javascript:alert(1))\n\n| a |\n|---|\n| <b>b</b> |\n"))  # fmt: skip
    assert "<script" not in out and "<img" not in out and "<b>" not in out and 'href="javascript' not in out
    assert "&lt;script&gt;x()&lt;/script&gt;" in out and "<table>" in out


def test_rendered_links_and_tables_fit_the_pages_policy() -> None:
    out = str(views.render_markdown("[rel](datatype.html) [abs](https://example.org/x) [frag](#top) "
                                    "<mailto:a@example.org>\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n"))  # fmt: skip
    assert '<span class="dead-link" title="datatype.html">rel</span>' in out, "a relative link would hit /ui/"
    assert '<span class="dead-link" title="#top">frag</span>' in out
    assert '<a href="https://example.org/x" rel="noopener noreferrer nofollow">abs</a>' in out
    assert 'href="mailto:a@example.org"' in out
    assert "style=" not in out and '<th class="align-left">a</th>' in out and '<td class="align-right">2</td>' in out


@examples(max_examples=60, deadline=None)
@given(st.data())
def test_a_document_in_parts_shows_what_it_shows_whole(data) -> None:
    """The document page's parts, put end to end, are the pieces of the whole document (overlaps included)."""
    text = data.draw(st.text(alphabet="ab \n#", min_size=50, max_size=400))
    n = len(text)
    spans = _draw_spans(data, n, 2, 15, 15)
    chunks = _lines(spans)
    whole = [(p.start, p.end, p.ordinal, p.overlap) for p in views.pieces(text, chunks)]
    limit = data.draw(st.integers(1, n))
    original, views.TEXT_PART_CHARS = views.TEXT_PART_CHARS, limit
    try:
        parts = views.text_parts(chunks)
    finally:
        views.TEXT_PART_CHARS = original
    assert [i for a, b in parts for i in range(a, b + 1)] == list(range(len(chunks))), "each chunk in one part"
    joined = []
    for number, (a, b) in enumerate(parts, 1):  # as the document page cuts them
        begin = 0 if number == 1 else chunks[a].start_char
        later = chunks[b + 1].start_char if number < len(parts) else None
        shown = views.pieces(text, chunks[a : b + 1], begin, n if later is None else later, later)
        joined += [(p.start, p.end, p.ordinal, p.overlap) for p in shown]
    assert joined == whole


def test_strips_merge_past_their_limits_and_keep_the_totals() -> None:
    spans = [x for i in range(1200) for x in (i * 10, i * 10 + 10)]
    breaks = [{"at": i * 10, "kind": "table" if i % 3 else "reference", "count": 1 + i % 2} for i in range(1, 900)]
    s = views.strip("many", False, 12_000, spans, breaks)
    assert len(s.segments) == views.MAX_SEGMENTS and s.chunks == 1200
    assert len(s.marks) == views.MAX_MARKS and s.breaks == sum(b["count"] for b in breaks)
    assert all("breaks from character" in m.label for m in s.marks), "a merged mark says so"
    assert s.segments[0].label == "chunks 1–2: characters 0–20" and s.segments[-1].label.endswith("–12,000")
    lines = _lines([(i * 10, i * 10 + 10) for i in range(1200)])
    stored = views.chunk_strip(12_000, lines, current_id=lines[777].id, href=lambda c: f"#{c.ordinal}")
    assert len(stored.segments) == views.MAX_SEGMENTS and [g.current for g in stored.segments].count(True) == 1
    one = views.strip("one", False, 100, [0, 50, 50, 100], [{"at": 50, "kind": "reference", "count": 2}])
    assert one.marks[0].label == "cut at character 50 separates 2 pronouns from what they refer to"

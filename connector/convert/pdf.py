"""PDF → Markdown with a page map, through PyMuPDF.

Per page: the layout's text blocks in reading order, one paragraph each; short blocks set larger than the body
text become headings (`#` by size rank), small numbered blocks low on the page become footnotes, bullet glyphs
become list items. Across pages: running headers and footers (see `remove_furniture`) and bare page numbers are
removed (pages live in the page map); words hyphenated across a line break are joined; ligatures are unfolded;
Arabic presentation forms become letters; Unicode NFC. The result is parsed as Markdown for its blocks, each tagged
with its page. Long documents are extracted by two worker processes, a batch of pages at a time.

Only bytes that are a PDF get here (`sniff.is_pdf`): PyMuPDF also opens HTML, text and images, and would render them
as pages.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import re
import unicodedata
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat

from connector.convert import markdown, ocr, pdf_layout, pdf_manpage, pdf_tables, slides, sniff
from connector.errors import ConversionError
from connector.models import Document
from connector.pool import usable_cores
from connector.settings import ChunkingSettings
from connector.visible import visible

EDGE_LINES = 3  # paragraphs at the top and at the bottom of a page where running headers and footers live
MIN_REPEATS = 3  # the same text at a page edge on this many pages (and REPEAT_SHARE of them) is furniture
REPEAT_SHARE = 0.1  # ... so that a short line that often opens a page ("Examples:") in a long manual stays content
BAND_SHARE = 0.5  # a short edge paragraph at a vertical position shared by this share of pages is furniture
BAND_POINTS = 4.0  # vertical positions are compared in bands this many points high
SHORT_CHARS = 120

_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
# groff (man -Tpdf, bash.pdf) sets every "\-" of a manual page as U+2212 MINUS SIGN, so each command-line option
# ("−−login": 1,324 such signs in bash.pdf) escaped a search typed on a keyboard ("--login"). A run of them before a
# letter is written "-" (an option's dashes; "1−p" in maths, where "-" is what a keyboard types too); elsewhere
# ("−1", "a − b", a rule of them) the sign is kept, and so is the meaning of a line that starts with one (Markdown
# would read "- x" as a list item).
# From a run's start, taken whole: tried at each sign of a run that no letter follows, it was quadratic (200,000
# signs: 500 s).
_OPTION_DASHES = re.compile(r"(?<!\u2212)\u2212++(?=[^\W\d_])")
# Arabic presentation forms (a letter's initial, medial, final or isolated shape, and ligatures such as lam-alef):
# XeTeX and other shapers write the shaped glyph's code, so "العربي" is stored as "ﺍﻟﻌﺮﺑﻲ" and no query typed
# on a keyboard matches it. NFKC folds them to the letters; only these ranges, for the reason NFKC is not used
# on the whole text (see `clean`).
_PRESENTATION_FORMS = re.compile(r"[\uFB50-\uFDFF\uFE70-\uFEFE]+")
_HYPHENATED = re.compile(r"(?<=[^\W\d_])-\n(?=[^\W\d_])")
# Where `clean` took out a hyphen that ended a line before a letter: `dehyphenate` decides, seeing the
# whole document, whether it split a word ("docu-ment") or was the word's own ("shell-backward-word"). A control
# character: `clean` has dropped every one the PDF held before it writes this one.
_BREAK = "\x02"  # and not whitespace: str.split() takes \x1c-\x1f for spaces
_LETTERS = r"[^\W\d_]+"
_START = r"(?<![^\W\d_])(?<!-)"  # where a word starts: tried inside a long run of letters, a pattern is quadratic
_BROKEN = re.compile(rf"{_START}({_LETTERS}(?:-{_LETTERS})*){_BREAK}({_LETTERS}(?:-{_LETTERS})*)")
_COMPOUND = re.compile(rf"{_START}{_LETTERS}(?:-{_LETTERS})+")
_WORD = re.compile(_LETTERS)
_PAGE_NUMBER = re.compile(r"^\s*(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,6})(?:\s*(?:/|of)\s*\d{1,4})?\s*$", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_NUMBERED = re.compile(r"^\s*(?:\d{1,4}|[ivxlcdm]{1,6})\b|\b(?:\d{1,4}|[ivxlcdm]{1,6})\s*$", re.IGNORECASE)
# A running header that carries its chapter and section numbers instead of the page number (dblatex: "CHAPTER 6. THE
# DEBIAN ARCHIVES 6.3. WHAT ABOUT "SID"?", its page number in the footer): a number that ends with a dot, mid-line.
_SECTION_NUMBER = re.compile(r"(?:^|\s)\d{1,3}(?:\.\d{1,3})*\.(?=\s)")


log = logging.getLogger(__name__)
PARALLEL_MIN_PAGES = 64  # below this, starting worker processes costs more than it saves
BATCH_PAGES = 32  # pages per task: the most extracted pages a worker holds at once
HEADING_RATIO = 1.15  # a short paragraph this much larger than the body text is a heading
FOOTNOTE_RATIO = 0.9  # a paragraph this much smaller, low on the page, that starts with a marker is a footnote

BOLD = 16  # PyMuPDF span flag bit
_BOLD_FONT = re.compile(r"bold|black|heavy|^cmbx|^lmbx|\.b$|-b$", re.IGNORECASE)
# "4.3.1 Title" set in bold at body size: a heading whose level is its numbering depth
_NUMBERED_HEADING = re.compile(r"^(?:[A-Z]|\d{1,2})(?:\.\d{1,2}){0,4}\.?\s+[^\W\d_]", re.UNICODE)
WATERMARK_WORDS = 3  # a paragraph this short on at least half of the pages, anywhere, is a watermark ("DRAFT")
_BULLET = re.compile(r"^[•◦▪▸►‣∙·–]\s*", re.MULTILINE)
# A middle dot or an en dash that starts a line inside a paragraph is a product or a dash clause ("– searching for
# the maintainer –"), not an item: those two are bullets only in a paragraph that opens with a bullet.
_BULLET_GLYPH = re.compile(r"^[•◦▪▸►‣∙]\s*", re.MULTILINE)
# TeX's T1 (Cork) encoding puts its ligatures at font codes 27-31; a font without a Unicode map (R's vignettes made
# with Sweave, many older LaTeX PDFs) gives those codes as control characters, which dropped, left "dened", "rst",
# "eect" for "defined", "first", "effect". Taken for ligatures only beside a letter.
_T1_LIGATURES = {"\x1b": "ff", "\x1c": "fi", "\x1d": "fl", "\x1e": "ffi", "\x1f": "ffl"}
_CODE_LIGATURE = re.compile(r"(?<=[^\W\d_])[\x1b-\x1f]|[\x1b-\x1f](?=[^\W\d_])")
_CODE_BULLET = re.compile(r"^([ \t]*)[\x01-\x08\x0e-\x1f\x7f-\x9f](?=[ \t])", re.MULTILINE)
_FOOTNOTE_MARK = re.compile(r"^(\d{1,3}|[*†‡§¶])\s+(?=[A-Za-z“\"(])")
_MARKDOWN_START = re.compile(r"^(?=[#>|]|[-=]{3,}\s*$)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Para:
    """One layout text block of a page, with what heading and footnote detection need."""

    text: str
    top: float  # y of the block's top edge, in points
    bottom: float
    size: float = 0.0  # mean font size, weighted by characters
    page_height: float = 0.0
    table: bool = False  # text is a Markdown pipe table, rendered as it is
    page_width: float = 0.0
    frame_title: bool = False  # a slide's title: a heading whatever its size
    bold: bool = False  # every character set in a bold face
    left: float = 0.0  # x of the block's left edge, in points
    hanging: bool = False  # a short bold line over text indented further right (a man page's section name)


def _mupdf():
    """PyMuPDF, its messages kept for `_report_damage` instead of printed: MuPDF wrote each on stderr, outside the
    log's format (a JSON log got 108 bare lines for one damaged manual), without saying which document."""
    import pymupdf

    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.mupdf_display_warnings(False)
    return pymupdf


# MuPDF's note on a font whose descriptor gives odd Ascent/Descent (0 / 0 in dblatex and many TeX fonts): it lays the
# glyphs out from the font's own metrics, so no text is lost and the PDF is not damaged.
_HARMLESS = re.compile(r"bogus font ascent/descent values")
_REPEATED = re.compile(r"\.\.\. repeated \d+ times\.\.\.")  # MuPDF's fold of the message before it


def _report_damage(messages: list[str]) -> None:
    lines: list[str] = []
    harmless = False
    for line in (line for m in messages for line in m.splitlines() if line.strip()):
        harmless = harmless if _REPEATED.fullmatch(line.strip()) else bool(_HARMLESS.search(line))
        if not harmless:
            lines.append(line)
    if lines:
        log.warning("PDF is damaged: MuPDF reported %d problem(s) reading it (first: %s); text may be missing from "
                    "the pages it could not read", len(lines), lines[0])  # fmt: skip


def convert(data: bytes, settings: ChunkingSettings) -> Document:
    pymupdf = _mupdf()
    pymupdf.TOOLS.mupdf_warnings()  # what an earlier document left
    try:
        pdf = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises several types (FileDataError, RuntimeError) for broken files
        raise ConversionError(f"cannot open PDF: {exc}") from exc
    with pdf:
        if pdf.needs_pass:
            raise ConversionError("PDF is encrypted (password required)")
        count = pdf.page_count
        metadata_title = _metadata_title((pdf.metadata or {}).get("title"))
    if count == 0:
        raise ConversionError("PDF has no pages")
    try:
        pages, messages = _extract(data, count, settings.keep_navigation)
        scanned = _image_only(data, pages)
        read = ocr.read_pages(data, scanned, settings) if scanned and settings.ocr and ocr.available() else {}
    except ocr.OcrError:
        raise
    except Exception as exc:
        raise ConversionError(f"cannot read PDF: {exc}") from exc
    _report_damage([*messages, pymupdf.TOOLS.mupdf_warnings()])
    pages = [read.get(n, page) for n, page in enumerate(pages)]
    if slides.is_deck(pages):
        pages = slides.frame_titles(remove_furniture(slides.collapse_overlays(pages), slides.REPEAT_SHARE))
    else:
        pages = remove_furniture(pages, REPEAT_SHARE)
    texts = dehyphenate(render(pages, body_size(pages)))
    parts: list[str] = []
    page_starts: list[int] = []
    offset = 0
    for paragraphs in texts:
        page_starts.append(offset)
        # Pages are separated by a blank line so that a page break is also a paragraph break.
        piece = "\n\n".join(paragraphs) + "\n\n" if paragraphs else ""
        if any(p.startswith("| ") for p in paragraphs):
            # Tables never cross a page here, so splitting them page by page keeps the page map exact.
            piece = markdown.split_large_tables(piece, settings.table_max_tokens, settings.encoding)
        parts.append(piece)
        offset += len(piece)
    text = "".join(parts)
    if not visible(text):
        raise ConversionError(f"PDF has no extractable text ({count} pages{ocr.why_not(scanned, settings)})")
    starts = tuple(page_starts)
    blocks = markdown.blocks(text, starts)
    title = metadata_title or man_title(pages) or markdown.first_title(text, blocks, max_page=2)
    return Document(text, blocks, starts, title=title or title_page_title(pages, body_size(pages)))


_JUNK_TITLE = re.compile(
    r"^(?:untitled|title|document\d*|microsoft (?:word|powerpoint) - .*|.*\.(?:dvi|tex|docx?|pptx?|pdf|indd|qxd))$",
    re.IGNORECASE,
)


def _metadata_title(title: str | None) -> str | None:
    """The PDF's metadata title, unless it is empty or what a tool wrote in its place (a file name, "untitled")."""
    title = " ".join(_letters(title or "").split())
    return title if len(title) >= 3 and not _JUNK_TITLE.match(title) else None


def _extract(data: bytes, count: int, keep_navigation: bool) -> tuple[list[list[Para]], list[str]]:
    """The pages' paragraphs, and what MuPDF said in the worker processes that read them (if any)."""
    ranges = [(a, min(a + BATCH_PAGES, count)) for a in range(0, count, BATCH_PAGES)]
    if count < PARALLEL_MIN_PAGES or usable_cores() < 2:
        return [page for a, b in ranges for page in extract_pages(data, a, b, keep_navigation)], []
    # Processes, not threads: extraction is CPU-bound and holds the GIL. `spawn`, not `fork`: the sidecar process
    # may hold torch's thread pools, which do not survive a fork.
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
        batches = list(pool.map(
            _extract_batch, repeat(data), [a for a, _ in ranges], [b for _, b in ranges], repeat(keep_navigation)
        ))  # fmt: skip
        return [page for batch, _ in batches for page in batch], [said for _, said in batches]


def _extract_batch(data: bytes, first: int, last: int, keep_navigation: bool) -> tuple[list[list[Para]], str]:
    pymupdf = _mupdf()
    pymupdf.TOOLS.mupdf_warnings()
    pages = extract_pages(data, first, last, keep_navigation)
    return pages, pymupdf.TOOLS.mupdf_warnings()


def _image_only(data: bytes, pages: list[list[Para]]) -> list[int]:
    """Pages (0-based) without text that show an image: scans, to be read by OCR."""
    pymupdf = _mupdf()

    empty = [n for n, page in enumerate(pages) if not page]
    if not empty:
        return []
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        return [n for n in empty if pdf[n].get_images() and not pdf[n].get_text().strip()]


def extract_pages(data: bytes, first: int, last: int, keep_navigation: bool) -> list[list[Para]]:
    """Text blocks of pages [first, last), in reading order (runs in worker processes for long documents)."""
    pymupdf = _mupdf()

    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        return [_page_paragraphs(pdf[n], keep_navigation) for n in range(first, last)]


def _page_paragraphs(page, keep_navigation: bool, textpage=None) -> list[Para]:
    """The page's paragraphs; from `textpage` (an OCR text layer) when given."""
    paragraphs = []
    width, height = page.rect.width, page.rect.height
    found = page.get_text("dict", sort=True, textpage=textpage)["blocks"]
    blocks = [b for b in found if b.get("type") == 0]  # not images
    blocks = pdf_layout.reading_order(blocks, width, height)
    if not keep_navigation:
        blocks = pdf_layout.drop_navigation(blocks)
    for item, hanging in pdf_manpage.split_headings(pdf_tables.segment(blocks, clean), _bold):
        if isinstance(item, pdf_tables.Table):
            paragraphs.append(Para(item.text, item.top, item.bottom, 0.0, height, table=True, page_width=width))
        else:
            paragraphs += _paragraph(item, height, width, hanging)
    return paragraphs


def _paragraph(block: dict, height: float, width: float, hanging: bool) -> list[Para]:
    weighted, chars, bold = 0.0, 0, 0
    for line in block["lines"]:
        for span in line["spans"]:
            n = len(span["text"].strip())
            weighted += span["size"] * n
            chars += n
            bold += n if _bold(span) else 0
    cleaned = clean("\n".join(_row_texts(block["lines"])))
    if not cleaned:
        return []
    size, (left, top, _, bottom) = weighted / max(chars, 1), block["bbox"]
    return [Para(cleaned, top, bottom, size, height, page_width=width, bold=bold == chars > 0, left=left,
                 hanging=hanging)]  # fmt: skip


def _bold(span: dict) -> bool:
    return bool(span["flags"] & BOLD or _BOLD_FONT.search(span["font"]))


def _row_texts(raw_lines: list[dict]) -> list[str]:
    """The block's text, one line per visual row: lines that share a baseline (an enumerator set apart from its
    item, a section number from its title) are one line, joined by a space."""
    rows: list[list[dict]] = []
    for line in raw_lines:
        top, bottom = line["bbox"][1], line["bbox"][3]
        if rows:
            last = rows[-1][-1]["bbox"]
            middle, last_middle = (top + bottom) / 2, (last[1] + last[3]) / 2
            if abs(middle - last_middle) < 0.4 * max(bottom - top, 1.0) and line["bbox"][0] >= last[2] - 1:
                rows[-1].append(line)
                continue
        rows.append([line])
    return [" ".join(t for t in ("".join(s["text"] for s in line["spans"]) for line in row) if t.strip()) or ""
            for row in rows]  # fmt: skip


def body_size(pages: list[list[Para]]) -> float:
    """The font size most characters are set in."""
    sizes: Counter[float] = Counter()
    for paragraphs in pages:
        for p in paragraphs:
            if not p.table:
                sizes[_size_class(p.size)] += len(p.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _size_class(size: float) -> float:
    return round(size * 2) / 2


def render(pages: list[list[Para]], body: float) -> list[list[str]]:
    """Markdown for each paragraph: headings by font size (larger sizes, higher levels), footnotes as Markdown
    footnotes, bullets as list items; text that Markdown would misread (a line starting with #, >, |) escaped."""
    sizes = sorted(
        {_size_class(p.size) for ps in pages for p in ps if p.frame_title or _is_heading(p, body)}, reverse=True
    )
    level = {size: min(i + 1, 6) for i, size in enumerate(sizes)}
    edge, ranks = _man_sections(pages)
    out = []
    for paragraphs in pages:
        rendered = []
        for p in paragraphs:
            if p.table:
                rendered.append(p.text)
            elif p.frame_title or _is_heading(p, body):
                rendered.append("#" * level[_size_class(p.size)] + " " + " ".join(p.text.split()))
            elif _is_numbered_heading(p, body):
                depth = p.text.split(None, 1)[0].rstrip(".").count(".") + 1
                rendered.append("#" * min(len(sizes) + depth, 6) + " " + " ".join(p.text.split()))
            elif pdf_manpage.is_section(p.hanging, p.left, edge):
                rendered.append("#" * min(len(sizes) + ranks[round(p.left)] + 1, 6) + " " + " ".join(p.text.split()))
            elif _is_footnote(p, body):
                rendered.append(_FOOTNOTE_MARK.sub(lambda m: f"[^{m.group(1)}]: ", _escape(p.text), count=1))
            else:
                rendered.append((_BULLET if _BULLET.match(p.text) else _BULLET_GLYPH).sub("- ", _escape(p.text)))
        out.append(_numbered(rendered))
    return out


def _man_sections(pages: list[list[Para]]) -> tuple[float, dict[float, int]]:
    """The document's usual left edge, and the rank of each indentation man-page section names start at."""
    lefts: Counter[float] = Counter()
    for paragraphs in pages:
        for p in paragraphs:
            lefts[round(p.left)] += 0 if p.table else len(p.text)
    edge = pdf_manpage.body_left(lefts)
    starts = {round(p.left) for ps in pages for p in ps if pdf_manpage.is_section(p.hanging, p.left, edge)}
    return edge, pdf_manpage.levels(starts)


def man_title(pages: list[list[Para]]) -> str | None:
    """A manual page's title: its first section (NAME, NOM, ...: the name differs by language, never its place)
    holds one line, "ls - list directory contents". Only a running header may come before it."""
    edge, _ = _man_sections(pages)
    first = pages[0][: EDGE_LINES + 1] if pages else []
    for p, after in zip(first, first[1:], strict=False):
        if pdf_manpage.is_section(p.hanging, p.left, edge):
            title = " ".join(after.text.split())
            return title if not after.table and len(title) <= 150 else None
    return None


_COUNTED = re.compile(r"^(\d{1,2})[ \t]+(?=\S)", re.MULTILINE)


def _numbered(paragraphs: list[str]) -> list[str]:
    """Items numbered 1, 2, 3 ... without a "." (how beamer and some themes set them), in one paragraph or in
    consecutive ones, as a Markdown ordered list."""
    out = list(paragraphs)
    i = 0
    while i < len(out):
        j, expected = i, 1
        while j < len(out) and (n := _counted_from(out[j], expected)):
            expected += n
            j += 1
        if expected > 2:  # two items at least
            for k in range(i, j):
                out[k] = _COUNTED.sub(lambda m: m.group(1) + ". ", out[k])
        i = max(j, i + 1)
    return out


def _counted_from(text: str, first: int) -> int:
    """How many items numbered first, first + 1, ... `text` holds, from its start; 0 if it is not such a list."""
    numbers = [int(m.group(1)) for m in _COUNTED.finditer(text)]
    ok = text.startswith(f"{first} ") and numbers == list(range(first, first + len(numbers)))
    return len(numbers) if ok else 0


_CHAPTER = re.compile(r"^(?:chapter|part|section|appendix)\b|^\d", re.IGNORECASE)


def title_page_title(pages: list[list[Para]], body: float) -> str | None:
    """A title page's title: the largest heading on the first page, before any chapter or numbered section. A LaTeX
    report sets its title smaller than its chapter titles (GMPL's manual: 20.7 pt against 24.8 pt), so the title is
    not the top-level heading `first_title` looks for, and the document had none."""
    first = next((paragraphs for paragraphs in pages if paragraphs), [])
    candidates = []
    for p in first:
        if _is_heading(p, body) and not p.table:
            if _CHAPTER.match(p.text.strip()):
                break
            candidates.append(p)
    if not candidates:
        return None
    title = " ".join(max(candidates, key=lambda p: p.size).text.split())
    return title if visible(title) and len(title) <= 200 else None


def _is_heading(p: Para, body: float) -> bool:
    return body > 0 and p.size >= body * HEADING_RATIO and len(p.text) <= 150 and p.text.count("\n") <= 1


def _is_numbered_heading(p: Para, body: float) -> bool:
    return (
        p.bold
        and body > 0
        and p.size >= body * FOOTNOTE_RATIO
        and len(p.text) <= 100
        and p.text.count("\n") <= 1
        and not p.text.rstrip().endswith((".", ",", ":", ";"))
        and bool(_NUMBERED_HEADING.match(p.text))
    )


def _is_footnote(p: Para, body: float) -> bool:
    low = p.page_height > 0 and p.top > p.page_height * 0.6
    return body > 0 and low and p.size <= body * FOOTNOTE_RATIO and bool(_FOOTNOTE_MARK.match(p.text))


def _escape(text: str) -> str:
    return _MARKDOWN_START.sub("\\\\", text)


def clean(text: str) -> str:
    # A glyph without a Unicode mapping comes out as its font code, often a control character: at the start of a
    # line, before a space, it is a bullet (LaTeX's, in gnuplot's manual: U+0088), elsewhere a symbol we cannot name.
    text = _CODE_LIGATURE.sub(lambda m: _T1_LIGATURES[m.group()], text)
    text = sniff.drop_controls(_CODE_BULLET.sub(r"\1•", text), sequences=False)
    text = _letters(text)
    # NFKC would also fold ligatures, but it rewrites too much (superscripts, fractions): NFC plus a ligature map.
    text = unicodedata.normalize("NFC", text).translate(_LIGATURES)
    text = _OPTION_DASHES.sub(lambda m: "-" * len(m.group()), text)
    text = "\n".join(line.rstrip() for line in text.strip().splitlines())
    return _HYPHENATED.sub(_BREAK, text)


def _letters(text: str) -> str:
    return _PRESENTATION_FORMS.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def dehyphenate(texts: list[list[str]]) -> list[list[str]]:
    """The paragraphs with each hyphen `clean` took out at a line's end put back where the document writes that
    word with a hyphen (inside a line) more often than without: "shell-backward-word" or "oct-file" broken across
    lines became "shell-backwardword" and "octfile" (11 such in bash's manual, 39 in Octave's); "docu-ment" still
    joins into "document"."""
    whole = "\n".join(p for page in texts for p in page)
    if _BREAK not in whole:
        return texts
    written = _BROKEN.sub(" ", whole)  # the document's words as its lines write them
    compounds = Counter(m.lower() for m in _COMPOUND.findall(written))
    words = Counter(m.lower() for m in _WORD.findall(written))

    def join(m: re.Match) -> str:
        left, right = m.group(1), m.group(2)
        written, joined = compounds[f"{left}-{right}".lower()], words[f"{left}{right}".lower()]
        # Before a capital the hyphen is kept unless the document writes the word joined: "US-ASCII", "HP-GL" are
        # compounds, "REDIREC-TIONS" (a heading in capitals) is "redirections" everywhere else.
        hyphenated = written > joined if right[0].islower() else written >= joined
        return f"{left}-{right}" if hyphenated else left + right

    def fixed(text: str) -> str:
        return _BROKEN.sub(join, text).replace(_BREAK, "") if _BREAK in text else text

    return [[fixed(p) for p in page] for page in texts]


def remove_furniture(pages: list[list[Para]], repeat_share: float) -> list[list[Para]]:
    """Drop running headers/footers and bare page numbers from the edges of each page.

    Furniture is recognised two ways: the same text (digits ignored) near a page edge on several pages, or a short
    first or last paragraph whose vertical position recurs on most pages (a running footer such as
    "4.4. Debian changelog 21" changes its words with every section but never its place; a header may carry its
    chapter and section numbers instead of the page's). Only paragraphs at the
    edges are ever removed, peeled off from the outside in."""

    def key(text: str) -> str:
        return _DIGITS.sub("#", " ".join(text.split())).lower()

    def band(p: Para) -> tuple[int, int]:
        return round(p.top / BAND_POINTS), round(p.bottom / BAND_POINTS)

    def edge(paragraphs: list[Para]) -> list[Para]:
        return paragraphs[:EDGE_LINES] + paragraphs[-EDGE_LINES:] if len(paragraphs) > 2 * EDGE_LINES else paragraphs

    texts: Counter[str] = Counter()
    bands: Counter[tuple[int, int]] = Counter()
    for paragraphs in pages:
        texts.update({key(p.text) for p in edge(paragraphs)})
        bands.update({band(p) for p in paragraphs[:1] + paragraphs[-1:]})
    enough_pages = len(pages) >= MIN_REPEATS
    often = max(MIN_REPEATS, repeat_share * len(pages))
    repeated = {k for k, n in texts.items() if n >= often} if enough_pages else set()
    fixed = {b for b, n in bands.items() if n >= max(MIN_REPEATS, BAND_SHARE * len(pages))} if enough_pages else set()

    body = body_size(pages)

    def furniture(p: Para) -> bool:
        # A position match alone is weak evidence: it also needs the page number a running footer carries, and
        # no heading's size: a section that opens a page sits where the one on the next such page does (ieeepes's
        # "8 Figures and Tables", "10 Footnotes", "15 Discussions", each at y=125 on 3 of its 6 pages, went).
        numbered = _NUMBERED.search(p.text) or _SECTION_NUMBER.search(p.text)
        footer_like = len(p.text) <= SHORT_CHARS and p.text.count("\n") <= 1 and bool(numbered)
        footer_like = footer_like and not _is_heading(p, body)
        return bool(_PAGE_NUMBER.match(p.text)) or key(p.text) in repeated or (footer_like and band(p) in fixed)

    # A watermark ("DRAFT", "Confidential") sits mid-page, the same short text on most pages.
    short: Counter[str] = Counter()
    for paragraphs in pages:
        short.update({key(p.text) for p in paragraphs if len(p.text.split()) <= WATERMARK_WORDS and not p.table})
    watermarks = {k for k, n in short.items() if n >= max(MIN_REPEATS, 0.5 * len(pages)) and "#" not in k}
    out = []
    for paragraphs in pages:
        paragraphs = [p for p in paragraphs if key(p.text) not in watermarks]
        # Peel furniture off both ends, at most EDGE_LINES paragraphs each: a header is only ever at the top.
        kept = list(paragraphs)
        for _ in range(EDGE_LINES):
            if kept and furniture(kept[0]):
                kept.pop(0)
            if kept and furniture(kept[-1]):
                kept.pop()
        out.append(kept)
    return out

"""OCR of image-only PDF pages (scans) with Tesseract, through PyMuPDF's OCR text layer.

Optional: used when `CONNECTOR_CHUNK_OCR` is on (the default) and Tesseract is installed (Debian: `tesseract-ocr`,
plus `tesseract-ocr-<lang>` packs); a scanned PDF otherwise fails as before, saying how to have it read. Only pages
that have no text and show an image are read, at `DPI`; their text goes through the same layout steps as any page
(reading order, navigation, furniture). Tesseract takes a few seconds a page, so long scans use two processes.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from typing import TYPE_CHECKING

from connector.errors import ConversionError
from connector.pool import usable_cores
from connector.settings import ChunkingSettings

if TYPE_CHECKING:
    from connector.convert.pdf import Para

DPI = 300  # Tesseract's own recommendation for printed text
PARALLEL_MIN_PAGES = 2


class OcrError(ConversionError):
    """Tesseract is installed but could not read the pages (a language pack missing, a crash)."""


@functools.cache
def tessdata() -> str | None:
    """Tesseract's language folder, or None when Tesseract is not installed (looked up once per process)."""
    import pymupdf

    try:
        return pymupdf.get_tessdata()
    except Exception:  # RuntimeError when absent; anything else means no usable installation either
        return None


def available() -> bool:
    return tessdata() is not None


def read_pages(data: bytes, pages: list[int], settings: ChunkingSettings) -> dict[int, list[Para]]:
    """Paragraphs of the given pages (0-based), read by OCR."""
    folder = tessdata()
    chunks = [pages[i : i + 1] for i in range(len(pages))]
    try:
        if len(pages) < PARALLEL_MIN_PAGES or usable_cores() < 2:
            results = [_read(data, chunk, folder, settings.ocr_language, settings.keep_navigation) for chunk in chunks]
        else:  # `spawn`: see pdf._extract
            with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context("spawn")) as pool:
                results = list(pool.map(_read, repeat(data), chunks, repeat(folder),
                                        repeat(settings.ocr_language), repeat(settings.keep_navigation)))  # fmt: skip
    except OcrError:
        raise
    except Exception as exc:  # PyMuPDF raises RuntimeError with Tesseract's message
        raise OcrError(f"OCR failed ({settings.ocr_language}): {exc}") from exc
    return {n: paragraphs for result in results for n, paragraphs in result.items()}


def _read(data: bytes, pages: list[int], folder: str | None, language: str, keep_navigation: bool) -> dict:
    import pymupdf

    from connector.convert.pdf import _page_paragraphs

    out = {}
    with pymupdf.open(stream=data, filetype="pdf") as pdf:
        for n in pages:
            page = pdf[n]
            textpage = page.get_textpage_ocr(language=language, dpi=DPI, full=True, tessdata=folder)
            out[n] = _page_paragraphs(page, keep_navigation, textpage)
    return out


def why_not(scanned: list[int], settings: ChunkingSettings) -> str:
    """What to add to "PDF has no extractable text (N pages": why its scans were not read."""
    if not scanned:
        return ""
    if not settings.ocr:
        return f"; {len(scanned)} scanned, OCR is off: CONNECTOR_CHUNK_OCR=true reads them"
    if not available():
        return f"; {len(scanned)} scanned: install Tesseract (Debian: tesseract-ocr) to read them"
    return f"; {len(scanned)} scanned, and OCR found no text in them"

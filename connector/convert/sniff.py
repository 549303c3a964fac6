"""Bytes → text, and what a file really is when its name says PDF.

Text encodings: a byte-order mark decides (UTF-8, UTF-16 or UTF-32, either byte order); without one, UTF-16 is
recognised only where that is reliable (see `_utf16_without_bom`), and everything else must be UTF-8. No charset is
guessed beyond that: a Latin-1 or Windows-1252 file fails as "not valid UTF-8", since a guess that is wrong for a
short file stores mojibake that nobody sees, where a clear failure says what to fix.
"""

from __future__ import annotations

import codecs
import re
import unicodedata

from connector.errors import ConversionError
from connector.visible import visible

PDF_HEADER_WINDOW = 1024
"""`%PDF-` may start anywhere in the first 1024 bytes: what PDF readers accept (ISO 32000 implementation notes)."""

_BOMS = (
    # UTF-32 LE first: its mark begins with the UTF-16 LE one.
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

UTF16_MIN_NUL_SHARE = 0.7
"""BOM-less UTF-16: at least this share of code units must have a NUL high byte (Latin-script text)."""
UTF16_MAX_OTHER_NUL_SHARE = 0.01
"""... and at most this share a NUL low byte (U+0100, U+4E00, ...): random binary has NULs at both."""

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive (DOCX, ODT, EPUB, ...)"),
    (b"\x1f\x8b", "a gzip file"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office document"),
    (b"%!PS", "a PostScript file"),
    (b"{\\rtf", "an RTF document"),
    (b"\x7fELF", "an executable"),
)

# The WHATWG MIME Sniffing Standard's HTML signatures (§7.1), plus XHTML behind an XML declaration.
_HTML_START = re.compile(
    r"\s*<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)[\s>]",
    re.IGNORECASE,
)
_XHTML = re.compile(r"\s*<\?xml[^>]*>.{0,1024}?<html[\s>]", re.IGNORECASE | re.DOTALL)


class BinaryData(ConversionError):
    """Bytes that are no text in any encoding we read."""

    def __init__(self, message: str = "file contains NUL bytes: binary data, not text") -> None:
        super().__init__(message)


NOTHING_VISIBLE = "document has no visible text (only spaces, controls and format characters such as zero-width spaces)"


class EmptyText(ConversionError):
    """Text that shows nothing: empty, blank, or only invisible characters."""


_ZIP_PARTS = (
    ("word/document.xml", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("ppt/presentation.xml", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
)
_ZIP_MIMETYPES = ("application/epub+zip", "application/vnd.oasis.opendocument.text")


def container(data: bytes) -> str | None:
    """The MIME type that a file's bytes state on their own: a PDF, or a ZIP package whose parts say DOCX, PPTX,
    EPUB or ODT (OPC part names; the OCF/ODF `mimetype` entry). None for anything else."""
    if data.lstrip()[:5] == b"%PDF-":  # at the very start: other text may quote "%PDF-" in its first kilobyte
        return "application/pdf"
    if not data.startswith(b"PK\x03\x04"):
        return None
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = set(z.namelist())
            for part, mime in _ZIP_PARTS:
                if part in names and "[Content_Types].xml" in names:
                    return mime
            if "mimetype" in names:
                with z.open("mimetype") as entry:  # 100 bytes at most, whatever the entry claims to expand to
                    declared = entry.read(100).decode("ascii", "replace").strip()
                return declared if declared in _ZIP_MIMETYPES else None
    except Exception:  # a damaged, encrypted or exotic archive (RuntimeError, NotImplementedError, zlib.error)
        return None
    return None


MAX_UNZIPPED_BYTES = 512 * 1024 * 1024
MAX_UNZIP_RATIO = 200  # real office files and e-books expand 3-20 times; a zip bomb, thousands


def check_archive(data: bytes, what: str) -> None:
    """Refuse a ZIP package (DOCX, PPTX, ODT, EPUB) whose parts claim to expand beyond what any document does,
    before a library inflates it into memory."""
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            total = sum(info.file_size for info in z.infolist())
    except Exception as exc:
        raise ConversionError(f"cannot open {what}: not a readable ZIP package ({type(exc).__name__})") from exc
    if total > MAX_UNZIPPED_BYTES or total > MAX_UNZIP_RATIO * max(len(data), 64 * 1024):
        raise ConversionError(
            f"{what} expands to {total / 2**20:.0f} MiB from {len(data) / 2**20:.1f} MiB: refused as a zip bomb"
        )


def magic(data: bytes) -> str | None:
    """What a file that is not text looks like ("a PNG image"), from its first bytes; None if nothing we know."""
    return next((what for signature, what in _MAGIC if data.startswith(signature)), None)


def is_pdf(data: bytes) -> bool:
    return b"%PDF-" in data[:PDF_HEADER_WINDOW]


def looks_like_html(source: str) -> bool:
    return bool(_HTML_START.match(source) or _XHTML.match(source))


def not_a_pdf(data: bytes) -> str:
    """Text of a file labelled PDF that is not one; raises `ConversionError` naming what it looks like instead."""
    if not data.strip():
        raise ConversionError("not a PDF (looks like an empty file)")
    for magic, what in _MAGIC:
        if data.startswith(magic):
            raise ConversionError(f"not a PDF (looks like {what})")
    try:
        return decode(data)
    except BinaryData as exc:
        raise ConversionError("not a PDF (looks like binary data)") from exc
    except ConversionError as exc:
        raise ConversionError(f"not a PDF (looks like text, but {exc})") from exc


def decode(data: bytes) -> str:
    """The text of `data`, newlines normalised to "\\n"; `ConversionError` for binary data, bad or empty text."""
    codec, skip = _codec(data)
    try:
        source = data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        name = codec.upper().removesuffix("-LE").removesuffix("-BE")
        raise ConversionError(
            f"not valid {name} text (byte {data[skip + exc.start]:#04x} at offset {skip + exc.start})"
        ) from exc
    if "\x00" in source:
        raise BinaryData()
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    if not source.strip():
        raise EmptyText("document is empty")
    if not visible(source):
        raise EmptyText(NOTHING_VISIBLE)
    return source


def _codec(data: bytes) -> tuple[str, int]:
    """(codec, bytes of byte-order mark to skip)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return codec, len(bom)
    if b"\x00" not in data:
        return "utf-8", 0
    if (codec := _utf16_without_bom(data)) is not None:
        return codec, 0
    raise BinaryData()


def _utf16_without_bom(data: bytes) -> str | None:
    """ "utf-16-le" or "utf-16-be" when `data` can only be UTF-16 text without a byte-order mark, else None.

    Reliable for text mostly in Latin script, where the NUL high bytes all fall on one side of each code unit, and
    the decoded text must be printable. Other scripts without a mark are not recognised (they fail as binary data or
    as invalid UTF-8): telling them from binary data would be a guess."""
    units = len(data) // 2
    if len(data) % 2 or units < 2:
        return None
    even, odd = data[0::2].count(0), data[1::2].count(0)
    codec, high, low = ("utf-16-le", odd, even) if odd >= even else ("utf-16-be", even, odd)
    if high < UTF16_MIN_NUL_SHARE * units or low > UTF16_MAX_OTHER_NUL_SHARE * units:
        return None
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        return None
    return codec if all(_plausible(ch) for ch in set(text)) else None


def _plausible(ch: str) -> bool:
    if ch in "\t\n\r\f":
        return True
    # Control characters (Cc), surrogates (Cs), private use (Co) and unassigned code points (Cn) are not text.
    return unicodedata.category(ch) not in ("Cc", "Cs", "Co", "Cn")

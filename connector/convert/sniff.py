"""Bytes → text, and what a file really is when its name says PDF.

Text encodings: a byte-order mark decides (UTF-8, UTF-16 or UTF-32, either byte order); without one, UTF-16 is
recognised only where that is reliable (see `_utf16_without_bom`), 7-bit text that switches character sets with
ISO 2022 escapes (`ESC $ B`: Japanese mail and Emacs tutorials) is read as ISO-2022-JP/KR, which those escapes name,
and everything else is UTF-8 when it decodes as UTF-8. What does not, and is no binary data (the NUL checks come
first), is read in the charset it declares where it declares one that fits (`charset.declared`: HTML's
`<meta charset>`, XML's, Emacs's `coding:`, LaTeX's inputenc), else in the charset `charset.py` guesses
(Windows-1252, KOI8-R, EUC-JP, GB18030, ...; UTF-8 with its few stray bytes read as Windows-1252 where it is mostly
UTF-8), and the guess is logged as a warning naming the charset; where no charset fits, it fails as "not valid
UTF-8 ..., and no charset fits it". Behind a UTF-8 or UTF-16 byte-order mark nothing is guessed: bytes the mark's
encoding cannot read fail. Control characters are dropped
from the text (terminal escape sequences whole): they show nothing, and would reach a terminal that prints a search
hit. NUL is one of them where text holds a few, alone (GNU info files mark their index nodes with
`\0\b[index\0\b]`); more, or runs of them, make bytes binary data.

A gzip file (most of /usr/share/doc: `changelog.gz`, `README.gz`, man pages) is read by what it holds, decompressed
piece by piece and refused once past the document size limit (`gunzip`).
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import unicodedata
import zipfile
import zlib

from connector.convert import charset
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
TEXT_MAX_NUL_SHARE = 0.001
"""Text may hold NULs, each alone, up to this share of its characters (bash.info: 10 in 570 KB); random bytes have
0.4 %, and other binary data runs of them."""

OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
"""The signature of a Compound File (OLE2): Office 97-2003 documents, Outlook messages, MSI installers."""
LEGACY_OFFICE = "a legacy Office document"
"""What an OLE2 file is said to be when its streams name no kind we know (or its directory cannot be read)."""

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip file"),
    (b"\xfd7zXZ\x00", "an xz file"),
    (OLE2, LEGACY_OFFICE),
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


# ISO 2022 designations of a multi-byte set (G0: `ESC $ @`, `ESC $ B`, `ESC $ A`, `ESC $ ( C`, `ESC $ ( D`; the
# Korean G1 header `ESC $ ) C`), in text of 7-bit bytes: the codecs that read what those escapes announce.
_ISO2022 = re.compile(rb"\x1b\$(?:[@AB]|\([CD]|\)C)")
_ISO2022_CODECS = ("iso2022_jp_2", "iso2022_jp_ext", "iso2022_kr")
# ANSI/VT escape sequences (CSI `ESC [ ... m`, OSC `ESC ] ... BEL`, two-byte `ESC x`), then any other control
# character but tab, newline and form feed (a page break in plain text).
_ESCAPE_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[ -/]+[0-~])?")
CONTROLS = re.compile("[\x00-\x08\x0b\x0d-\x1f\x7f-\x9f]")


def drop_controls(text: str, sequences: bool = True) -> str:
    """`text` without control characters (tab, newline and form feed stay), and without the terminal escape
    sequences they start when `sequences` (not in a PDF, where ESC is a glyph's code: OT1's œ)."""
    if not CONTROLS.search(text):
        return text
    return CONTROLS.sub("", _ESCAPE_SEQUENCE.sub("", text) if sequences else text)


class BinaryData(ConversionError):
    """Bytes that are no text in any encoding we read."""

    def __init__(self, message: str = "file contains NUL bytes: binary data, not text") -> None:
        super().__init__(message)


class NotUtf8(ConversionError):
    """Bytes without a byte-order mark that are not UTF-8, where no charset was to be guessed (yet)."""

    def __init__(self, data: bytes, error: UnicodeDecodeError) -> None:
        super().__init__(f"not valid UTF-8 text (byte {data[error.start]:#04x} at offset {error.start})")
        self.error = error


NOTHING_VISIBLE = "document has no visible text (only spaces, controls and format characters such as zero-width spaces)"


class EmptyText(ConversionError):
    """Text that shows nothing: empty, blank, or only invisible characters."""


_ZIP_PARTS = (
    ("word/document.xml", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("ppt/presentation.xml", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ("xl/workbook.xml", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
)
_ZIP_MIMETYPES = (
    "application/epub+zip",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.presentation",
)


_OLE_STREAMS = (
    # the stream that holds the document: a workbook's is "Workbook" (BIFF8) or "Book" (BIFF5, Excel 5/95)
    ({"Workbook", "Book"}, "application/vnd.ms-excel"),
    ({"WordDocument"}, "application/msword"),  # Word 97-2003, read by antiword (`word.py`)
)
_OLE_KINDS = (
    ({"WordDocument"}, "a Word 97-2003 document (.doc)"),
    ({"PowerPoint Document"}, "a PowerPoint 97-2003 presentation (.ppt); save it as PPTX or PDF"),
    ({"__properties_version1.0"}, "an Outlook message (.msg); save it as .eml"),
)


def ole_streams(data: bytes) -> set[str]:
    """The names of the streams and storages in an OLE2 file's root directory (none if it is not one, or damaged)."""
    if not data.startswith(OLE2):
        return set()
    import xlrd.compdoc

    try:
        return {entry.name for entry in xlrd.compdoc.CompDoc(data, logfile=io.StringIO()).dirlist}
    except Exception:  # a damaged directory: xlrd's CompDocError, struct.error, IndexError
        return set()


def container(data: bytes) -> str | None:
    """The MIME type that a file's bytes state on their own: a PDF, a ZIP package whose parts say DOCX, PPTX,
    XLSX, EPUB, ODT, ODS or ODP (OPC part names; the OCF/ODF `mimetype` entry), or an OLE2 file holding an Excel
    workbook (XLS) or a Word document (DOC), or RTF. None for anything else."""
    if data.lstrip()[:5] == b"%PDF-":  # at the very start: other text may quote "%PDF-" in its first kilobyte
        return "application/pdf"
    if data.startswith(b"{\\rtf"):  # Word's "save as .doc" of RTF, mail attachments named `.txt`
        return "application/rtf"
    if data.startswith(OLE2):
        streams = ole_streams(data)
        return next((mime for names, mime in _OLE_STREAMS if names & streams), None)
    if not data.startswith(b"PK\x03\x04"):
        return None
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
    """What a file that is not text looks like ("a PNG image"), from its first bytes (a ZIP archive: from what its
    parts say); None if nothing we know."""
    what = next((what for signature, what in _MAGIC if data.startswith(signature)), None)
    if what == "a ZIP archive":
        return _zip_kind(data)
    if what == LEGACY_OFFICE:
        streams = ole_streams(data)
        return next((kind for names, kind in _OLE_KINDS if names & streams), what)
    if what is None and data[257:262] == b"ustar":  # POSIX tar's magic, after the first entry's name and mode
        return "a tar archive"
    return what


# ZIP packages that no converter reads, by the OpenDocument `mimetype` entry or the content types of an OPC package
# (an XLSX or ODS is read: `container` names it).
_ODF_KINDS = {
    "application/vnd.oasis.opendocument.graphics": "an ODG drawing; save it as PDF",
}
_OPC_KINDS = (
    (b"spreadsheetml", "an XLSX spreadsheet without its workbook part"),
    (b"application/vnd.ms-excel", "an Excel spreadsheet of a kind not read (macro-enabled or XLSB); save it as XLSX"),
)
_CONTENT_TYPES_WINDOW = 64 * 1024  # of `[Content_Types].xml`: a workbook's main part is declared in its first lines


def _zip_kind(data: bytes) -> str:
    """What a ZIP package that `container` did not take is: a spreadsheet, say, rather than "a ZIP archive"."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = set(z.namelist())
            if "mimetype" in names:
                with z.open("mimetype") as entry:
                    declared = entry.read(100).decode("ascii", "replace").strip()
                return _ODF_KINDS.get(declared, "a ZIP archive")
            if "[Content_Types].xml" in names:
                with z.open("[Content_Types].xml") as entry:
                    types = entry.read(_CONTENT_TYPES_WINDOW)
                return next((what for mark, what in _OPC_KINDS if mark in types), "a ZIP archive")
    except Exception:  # damaged, encrypted, exotic: as in `container`
        return "a ZIP archive"
    return "a ZIP archive"


def is_gzip(data: bytes) -> bool:
    return data.startswith(b"\x1f\x8b")


GUNZIP_STEP = 1 << 20
"""Bytes decompressed at a time: a gzip bomb is refused after at most this much past the limit."""


def gunzip(data: bytes, max_bytes: int) -> bytes:
    """What a gzip file holds (every member, as `gzip -d` reads them), decompressed a piece at a time and refused
    as "too large" once past `max_bytes`, the size limit of a document: a gzip bomb (a gigabyte of zeros packs into
    a megabyte) fails before it fills memory."""
    pieces: list[bytes] = []
    size = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while piece := f.read(GUNZIP_STEP):
                size += len(piece)
                if size > max_bytes:
                    raise ConversionError(
                        f"document too large: the gzip file decompresses to more than {max_bytes / 1e6:g} MB "
                        f"(limit {max_bytes / 1e6:g} MB)"
                    )
                pieces.append(piece)
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: cut short
        raise ConversionError(f"not a readable gzip file ({type(exc).__name__}: {exc})") from exc
    return b"".join(pieces)


def is_pdf(data: bytes) -> bool:
    return b"%PDF-" in data[:PDF_HEADER_WINDOW]


def looks_like_html(source: str) -> bool:
    return bool(_HTML_START.match(source) or _XHTML.match(source))


# A man page: roff that opens with a comment (`.\"`, `'\"`: most carry a generator's or licence note), a title or
# macro request, or is an include alone (`.so man1/other.1`); and has a man(7) or mdoc(7) heading within its first
# part (pod2man's preamble runs to 150 lines before `.TH`).
_ROFF_OPENING = re.compile(r"\A(?:[ \t]*\n)*(?:[.']\s*\\\"|\.(?:TH|Dd|Dt|de|ig|if|ds|so)[ \t])")
_ROFF_HEADING = re.compile(r"^\.(?:TH|SH|Dd|Sh)[ \t]|\A(?:[ \t]*\n)*\.so[ \t]+\S+\s*\Z", re.MULTILINE)
ROFF_WINDOW = 64 * 1024


def looks_like_roff(source: str, named: bool = False) -> bool:
    """Whether `source` is a man page's roff: by its opening and a heading request; a file `named` like one
    (`ls.1`, `ls.fr.1.gz`) needs only the heading request, whatever comes first (a rotated `syslog.1` has none)."""
    head = source[:ROFF_WINDOW]
    return bool((named or _ROFF_OPENING.match(head)) and _ROFF_HEADING.search(head))


_POD_OPENING = re.compile(r"\A(?:[ \t]*\n)*=(?:pod|head[1-6]|encoding|begin|for)\b")


def looks_like_pod(source: str) -> bool:
    """Whether `source` is Perl POD on its own: its first line is a POD command (`=head1 NAME`, `=pod`)."""
    return bool(_POD_OPENING.match(source))


# A comment's body may not run past its own end: `.*?` could, and n comments then matched 2^n ways (a 177-byte file
# with 22 of them took 4 s, and each more doubled it).
_SVG_OPENING = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*>\s*)?(?:<!--(?:(?!-->).)*-->\s*)*(?:<!DOCTYPE\s+svg[^>]*>\s*)?<svg[\s>]",
    re.DOTALL,
)


def looks_like_svg(data: bytes) -> bool:
    """Whether `data` is an SVG image: `<svg` first, after an XML declaration, comments and a doctype."""
    return bool(_SVG_OPENING.match(data[: PDF_HEADER_WINDOW * 8]))


def not_a_pdf(data: bytes) -> str:
    """Text of a file labelled PDF that is not one; raises `ConversionError` naming what it looks like instead."""
    if not data.strip():
        raise ConversionError("not a PDF (looks like an empty file)")
    if (what := magic(data)) is not None:
        raise ConversionError(f"not a PDF (looks like {what})")
    try:
        return decode(data)
    except BinaryData as exc:
        raise ConversionError("not a PDF (looks like binary data)") from exc
    except ConversionError as exc:
        raise ConversionError(f"not a PDF (looks like text, but {exc})") from exc


def decode(data: bytes, guess: bool = True) -> str:
    """The text of `data`, newlines normalised to "\\n"; `ConversionError` for binary data, bad or empty text. Bytes
    with no byte-order mark that are not UTF-8 are read in the charset `charset.guess` finds, unless not `guess`."""
    codec, skip = _codec(data)
    if codec == "utf-8" and not skip and _ISO2022.search(data) and data.isascii():
        for iso2022 in _ISO2022_CODECS:
            try:
                return _text(data.decode(iso2022))
            except UnicodeDecodeError:
                continue  # not that one's escapes: read as UTF-8 below, the escapes dropped as controls
    try:
        source = data[skip:].decode(codec)
    except UnicodeDecodeError as exc:
        if codec == "utf-8" and not skip and b"\x00" in data and not _stray_nuls(data):
            raise BinaryData() from exc  # NULs let it be tried as text, and it is not UTF-8: binary data
        if codec == "utf-8" and not skip:
            if (declared := charset.declared(data)) not in (None, "utf_8"):
                try:
                    return _text(data.decode(declared))
                except UnicodeError:
                    pass  # declared wrongly: guessed as any other text
            if guess:
                return _text(charset.guess(data, exc))
            raise NotUtf8(data, exc) from exc
        name = codec.upper().removesuffix("-LE").removesuffix("-BE")
        raise ConversionError(
            f"not valid {name} text (byte {data[skip + exc.start]:#04x} at offset {skip + exc.start})"
        ) from exc
    if "\x00" in source and not _stray_nuls(source):
        raise BinaryData()
    return _text(source)  # stray NULs are dropped there, with the other control characters


def _stray_nuls(text: str | bytes) -> bool:
    """Whether the NULs in `text` are few (`TEXT_MAX_NUL_SHARE`) and each alone, as in a GNU info file."""
    nul = "\x00" if isinstance(text, str) else b"\x00"
    return text.count(nul) <= TEXT_MAX_NUL_SHARE * len(text) and nul * 2 not in text


def _text(source: str) -> str:
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    if not source.strip():
        raise EmptyText("document is empty")
    source = drop_controls(source)
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
    if _stray_nuls(data):
        return "utf-8", 0
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

"""What a file is, from its bytes: gzip files read as what they hold (and refused past the size limit, however far
they would expand), text with a few stray NULs read as text, spreadsheets and archives named for what they are."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
import zipfile

import pytest

from connector.convert import convert, mime_for_path
from connector.errors import ConversionError, UnsupportedDocument
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES

SETTINGS = ChunkingSettings()
TEXT = (FIXTURES / "apache-2.0.txt").read_text(encoding="utf-8")
SUPPORTED = (
    "supported: PDF, DOCX, PPTX, ODT, ODP, RTF, EPUB, XLSX, XLS, ODS, HTML, Markdown, CSV and any text, "
    "each also gzipped"
)


def _zip(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def _gzip_of_zeros(size: int) -> bytes:
    out = io.BytesIO()
    zeros = bytes(1 << 20)
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0) as f:
        for _ in range(size >> 20):
            f.write(zeros)
    return out.getvalue()


def test_a_gzip_file_is_read_as_what_it_holds() -> None:
    """`README.gz`, `NEWS.gz`, `changelog.gz`: what most of /usr/share/doc is, all refused as "a gzip file"."""
    assert convert(gzip.compress(TEXT.encode()), mime_for_path("README.gz"), SETTINGS).markdown == TEXT
    page = b"<html><head><title>Notes</title></head><body><h1>Notes</h1><p>Gzipped page.</p></body></html>"
    d = convert(gzip.compress(page), mime_for_path("notes.html.gz"), SETTINGS)
    assert d.markdown == "# Notes\n\nGzipped page.\n" and d.title == "Notes"
    two_members = gzip.compress(TEXT[:5000].encode()) + gzip.compress(TEXT[5000:].encode())  # as `cat a.gz b.gz`
    assert convert(two_members, "application/gzip", SETTINGS).markdown == TEXT


def test_a_gzip_bomb_is_refused_past_the_size_limit_without_filling_memory() -> None:
    bomb = _gzip_of_zeros(256 << 20)  # 256 MiB of zeros in 250 KB
    tracemalloc.start()
    try:
        with pytest.raises(ConversionError, match=r"^document too large: the gzip file decompresses to more than 2 MB"):
            convert(bomb, mime_for_path("bomb.txt.gz"), SETTINGS, max_bytes=2_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak / 2**20:.0f} MiB held while decompressing"
    with pytest.raises(ConversionError, match=r"not a readable gzip file \(EOFError"):
        convert(gzip.compress(TEXT.encode())[:-100], "text/plain", SETTINGS)


def test_text_with_a_few_stray_nuls_is_text_and_binary_data_is_not() -> None:
    """GNU info files mark index nodes with `\\0\\b[index\\0\\b]`: bash.info failed as binary data for ten NULs."""
    marked = TEXT.replace("Definitions.", "\x00\x08[index\x00\x08]\nDefinitions.", 1)
    assert convert(marked.encode(), "application/octet-stream", SETTINGS).markdown == TEXT.replace(
        "Definitions.", "[index]\nDefinitions.", 1
    )
    for binary in (TEXT.encode() + b"\x00\x00" + TEXT.encode(), (TEXT[:500] + "\x00").encode() * 4):
        with pytest.raises(ConversionError, match="NUL bytes"):
            convert(binary, "text/plain", SETTINGS)


CONTENT_TYPES = (
    b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    b'<Override PartName="/xl/workbook.xml" '
    b'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/></Types>'
)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (_zip({"[Content_Types].xml": CONTENT_TYPES, "xl/workbook.xml": b"<workbook/>"}), "an XLSX spreadsheet"),
        (_zip({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet", "content.xml": b"<x/>"}),
         "an ODS spreadsheet"),
    ],
    ids=["xlsx", "ods"],
)  # fmt: skip
def test_a_spreadsheet_without_values_fails_saying_so(data: bytes, what: str) -> None:
    """They failed as "a ZIP archive (DOCX, ODT, EPUB, ...)", then as spreadsheets not read; now they are read
    (tests/test_convert_tabular.py), and one whose workbook holds nothing fails saying what is wrong with it."""
    with pytest.raises(ConversionError, match="^spreadsheet has no values|^cannot read (XLSX|ODS)"):
        convert(data, mime_for_path("book.xlsx"), SETTINGS)


def test_a_gzipped_tar_archive_fails_as_a_tar_archive() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("README")
        info.size = len(TEXT.encode())
        tar.addfile(info, io.BytesIO(TEXT.encode()))
    with pytest.raises(UnsupportedDocument, match=r"^unsupported file type \(looks like a tar archive\); supported"):
        convert(out.getvalue(), mime_for_path("docs.tar.gz"), SETTINGS)


def test_a_man_page_is_known_by_its_name_or_by_its_roff() -> None:
    """A man page without a `.1` (`ls.fr`, an attachment) is recognised by its opening; a rotated log named
    `syslog.1` is no man page, and one in Latin-1 is read as Windows-1252, as any text file is (`charset.py`)."""
    page = gzip.decompress((FIXTURES / "real" / "ls.fr.1.gz").read_bytes())
    for label in (mime_for_path("ls.fr"), mime_for_path("ls.fr.1")):
        d = convert(page, label, SETTINGS)
        assert d.title == "ls - Afficher le contenu de répertoires" and "\\fB" not in d.markdown
    log = b"Dec  5 09:00:01 host CRON[42]: (root) CMD (run-parts /etc/cron.hourly)\n.\n"
    assert convert(log, mime_for_path("syslog.1"), SETTINGS).markdown == log.decode()
    latin1 = page.decode().encode("latin-1", "replace")  # `é` as 0xE9; charset-normalizer's first pick: MacLatin2
    assert convert(latin1, mime_for_path("ls.fr.1"), SETTINGS).title == "ls - Afficher le contenu de répertoires"


def test_perl_pod_is_known_by_its_name_or_its_first_command() -> None:
    """`perlpod` without `.pod` opens with a POD command (`=for comment`); a `.pm` module stays source code."""
    pod = (FIXTURES / "real" / "perlpod.pod").read_bytes()
    for label in (mime_for_path("perlpod.pod"), mime_for_path("perlpod")):
        assert convert(pod, label, SETTINGS).title == "perlpod - the Plain Old Documentation format"
    module = b"package Foo;\nuse strict;\n1;\n__END__\n\n=head1 NAME\n\nFoo - a module\n\n=cut\n"
    assert convert(module, mime_for_path("Foo.pm"), SETTINGS).markdown == module.decode()


def test_an_svg_image_without_its_suffix_is_read_as_one_and_one_without_text_fails_saying_so() -> None:
    svg = (FIXTURES / "real" / "postgresql-common-dependencies.svg").read_bytes()
    assert (
        convert(svg, mime_for_path("dependencies"), SETTINGS).markdown
        == convert(svg, "image/svg+xml", SETTINGS).markdown
    )
    drawing = svg.split(b"<g", 1)[0] + b'<path d="M289.044,71c6.51,5.823,8.749,15.918,11,26"/></svg>\n'
    with pytest.raises(ConversionError, match="SVG image has no text"):
        convert(drawing, mime_for_path("drawing.svg"), SETTINGS)

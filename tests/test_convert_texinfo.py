"""Texinfo sources (`connector/convert/texinfo.py`), on a real one from a Debian package: the `gnulib-tool` chapter
of the Gnulib manual (`fixtures/real/SOURCES.md`)."""

from __future__ import annotations

import re

from connector.convert import convert, mime_for_path
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES
from tests.test_convert import assert_tiles

REAL = FIXTURES / "real"
CHUNKING = ChunkingSettings()
_COMMAND = re.compile(r"@(?:[a-z]+\b|[{}])")


def doc(name: str) -> Document:
    path = REAL / name
    return convert(path.read_bytes(), mime_for_path(path), CHUNKING)


def block_with(d: Document, text: str):
    return next(b for b in d.blocks if text in d.markdown[b.start : b.end])


def prose(d: Document) -> str:
    """The text outside code blocks (an example may show Autoconf's `@LIBOBJS@`, written `@@LIBOBJS@@`)."""
    return "".join(d.markdown[b.start : b.end] for b in d.blocks if b.kind != "code")


def test_a_texinfo_chapter_is_read_as_texinfo_not_kept_as_commands() -> None:
    d = doc("gnulib-tool.texi")
    assert_tiles(d)
    assert d.title == "Invoking gnulib-tool"  # `@chapter Invoking gnulib-tool`, the file's first heading
    text = prose(d)
    assert not _COMMAND.findall(text.replace("@@", "")), _COMMAND.findall(text)[:5]
    assert d.markdown.count("Invoking gnulib-tool") == 1  # its `@node` line shows nothing
    heading = block_with(d, "## Finding modules")
    assert heading.kind == "heading" and heading.section_path == ("Invoking gnulib-tool", "Finding modules")
    # inline commands leave their text: code, references, URLs, glyphs, `@@` an at sign
    assert "The `gnulib-tool` command is the recommended way to import\nGnulib modules." in d.markdown
    assert "follow the procedure described in section Finding POSIX substitutes." in d.markdown
    assert "<https://www.gnu.org/software/gnulib/MODULES.html>" in d.markdown
    assert "`pkgdata_DATA` (only with Automake ≥ 1.11.4)" in d.markdown
    assert "augment a variable `@LIBOBJS@`" in d.markdown
    # index entries (`@cindex initial import`, `@pindex gnulib-tool`) show nothing
    assert "invoking gnulib-tool" not in d.markdown  # `@cindex invoking @command{gnulib-tool}`
    # `@example` is a code block; an `@table @code` entry is one list block, its term in code
    example = block_with(d, "$ ln -s $HOME/gnu/src/gnulib.git/gnulib-tool $HOME/bin/gnulib-tool")
    assert example.kind == "code"
    entry = block_with(d, "`gl_MODULES`")
    assert entry.kind == "list"
    assert "The argument is a space separated list of the requested modules" in d.markdown[entry.start : entry.end]


def test_a_manual_is_texinfo_by_its_first_line_and_titled_by_settitle() -> None:
    """`manual.texi.in` (a configure template) says nothing by its name; `\\input texinfo` says what it is."""
    source = (
        b"\\input texinfo   @c -*-texinfo-*-\n@setfilename m.info\n@settitle The @sc{m} Manual\n@set VERSION 2.1\n"
        b"@copying\nCopyright notice.\n@end copying\n@node Top\n@top M\n\nVersion @value{VERSION}, caf@'e and"
        b" @samp{--}.@footnote{A note.}\n\n@multitable @columnfractions .5 .5\n@headitem Key @tab Value\n"
        b"@item @code{a} @tab 1\n@end multitable\n@bye\n"
    )
    d = convert(source, mime_for_path("manual.texi.in"), CHUNKING)
    assert d.title == "The m Manual"
    assert "Version 2.1, café and `--`.[^1]\n\n[^1]: A note." in d.markdown
    assert "| Key | Value |\n| --- | --- |\n| `a` | 1 |" in d.markdown
    assert "Copyright notice." not in d.markdown and "m.info" not in d.markdown


def test_the_end_of_a_block_under_many_open_blocks_is_found_in_linear_time() -> None:
    """Each `@end` looked through the open blocks from the outermost: n nested `@quotation`s under n `@itemize`s
    made every `@end itemize` look past every quotation (quadratic: 40,000 blocks, 0.6 MB, took 20 s)."""
    from connector.convert import texinfo
    from tests.conftest import assert_linear

    def read(n: int) -> None:
        lines = ["@quotation"] * n + ["@itemize", "@item x"] * n + ["text"] + ["@end itemize"] * n
        texinfo._Writer().read(lines + ["@end quotation"] * n)

    assert_linear(read, 1000, "nested blocks' @end")

"""reStructuredText read by docutils (`connector/convert/rst.py`), on real sources from Debian packages: docutils'
own FAQ and Ghostscript's Sphinx sources (`fixtures/real/SOURCES.md`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from connector.convert import convert, mime_for_path, rst
from connector.models import Document
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES, assert_linear
from tests.test_convert import assert_tiles

REAL = FIXTURES / "real"
CHUNKING = ChunkingSettings()
# rST markup a reader of the stored text should never see: link targets, directives, roles, `name_` references
_MARKUP = re.compile(r"^\.\. [\w|_\[]|:(?:ref|title|func|class):`|`_|\w_(?=[\s,.;:)]|$)", re.M)


def doc(name: str) -> Document:
    path = REAL / name
    return convert(path.read_bytes(), mime_for_path(path), CHUNKING)


def prose(d: Document) -> str:
    """The text outside code blocks (an rST example in a code block is the document's content)."""
    return "".join(d.markdown[b.start : b.end] for b in d.blocks if b.kind != "code")


def block_with(d: Document, text: str):
    return next(b for b in d.blocks if text in d.markdown[b.start : b.end])


def test_the_docutils_faq_is_read_as_rst_not_kept_verbatim() -> None:
    d = doc("docutils-FAQ.rst")
    assert_tiles(d)
    assert d.title == "Docutils FAQ (Frequently Asked Questions)"
    text = prose(d)
    assert not _MARKUP.findall(text), _MARKUP.findall(text)[:5]
    assert ".. _Docutils: https://docutils.sourceforge.io/" not in d.markdown  # link targets are links now
    assert "[Docutils](https://docutils.sourceforge.io/) is a system for processing plaintext" in d.markdown
    # numbered sections are headings with their path; the table of contents is not content
    heading = block_with(d, "What is Docutils?")
    assert heading.kind == "heading"
    assert heading.section_path == ("Docutils FAQ (Frequently Asked Questions)", "1 Docutils", "1.1 What is Docutils?")
    assert d.markdown.count("What is Docutils?") == 1
    assert block_with(d, "Date:").kind != "heading"


def test_a_footnote_follows_the_block_that_cites_it() -> None:
    d = doc("docutils-FAQ.rst")
    cited = block_with(d, '"text/x-rst". [^1]')
    note = d.blocks[d.blocks.index(cited) + 1]
    assert d.markdown[note.start : note.end].startswith('[^1]: The "x-" prefix means it\'s an unregistered MIME type.')
    assert note.section_path == cited.section_path
    # cited in a list item: after the list, not between its items
    item = block_with(d, "repository](docs/dev/repository.html) checkout. [^2]")
    after = d.blocks[d.blocks.index(item) + 1]
    assert d.markdown[after.start : after.end].startswith("[^2]: Working with branches is much easier with [Git]")
    assert "[#]" not in prose(d)


def test_literal_blocks_are_code_with_their_indentation() -> None:
    d = doc("docutils-FAQ.rst")
    code = block_with(d, "|yen| 600 for a complete meal?")
    assert code.kind == "code"
    assert ".. include:: <xhtml1-lat1.txt>" in d.markdown[code.start : code.end]  # an example, kept as written


def test_sphinx_directives_and_roles_keep_their_text_and_leave_no_markup() -> None:
    d = doc("ghostscript-LanguageBindingsPython.rst")
    assert_tiles(d)
    assert d.title == "Python"  # `.. title::`
    text = prose(d)
    assert not _MARKUP.findall(text), _MARKUP.findall(text)[:5]
    assert "System Message" not in d.markdown and "Unknown directive" not in d.markdown
    assert "Unknown interpreted text role" not in d.markdown
    # `:ref:`gsapi.py<python gsapi>``: its title; `:title:`GhostPDL``: its text
    assert "The Python API is provided by the file gsapi.py - this is the binding to the Ghostscript C library." in text
    assert "In the GhostPDL repository sample Python examples" in text
    # `.. code-block:: python`: a code block, the function's body still indented under it
    code = block_with(d, "def stdout_fn(caller_handle, bytes_):")
    assert code.kind == "code"
    assert "def stdout_fn(caller_handle, bytes_):\n   sys.stdout.write(bytes_.decode('latin-1'))\n" in d.markdown
    assert code.section_path[-1] == "gsapi_set_stdio(instance, stdin_fn, stdout_fn, stderr_fn)"
    # `.. list-table::` is a table, `.. note::` its text
    assert block_with(d, "| Linux / OpenBSD | libgs.so |").kind == "table"
    assert "If there are no errors then this will have validated that the Ghostscript library" in d.markdown


def test_an_include_reads_no_file_of_the_machine(tmp_path: Path) -> None:
    """`.. include:: footer.rst` would read a file beside the working directory: docutils reads nothing."""
    (tmp_path / "footer.rst").write_text("SECRET-FOOTER-TEXT\n")
    source = REAL / "ghostscript-Ps2epsi.rst"
    script = (
        "import sys; from connector.convert import convert; from connector.settings import ChunkingSettings; "
        "d = convert(open(sys.argv[1], 'rb').read(), 'text/x-rst', ChunkingSettings()); print(d.title); "
        "print(d.markdown)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", script, str(source)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out.startswith("Convert PostScript to Encapsulated PostScript Interchange Format\n")
    assert "SECRET-FOOTER-TEXT" not in out and "include::" not in out
    assert "```\nps2epsi infile.ps outfile.epi\n```" in out


def test_rst_saved_as_txt_stays_plain_text() -> None:
    """`.rst.txt` (Sphinx's `_sources`, the dev corpus) is text/plain: kept as written."""
    raw = (REAL / "docutils-FAQ.rst").read_bytes()
    assert mime_for_path("FAQ.rst.txt") == "text/plain"
    d = convert(raw, "text/plain", CHUNKING)
    assert d.markdown == raw.decode()


def test_a_source_too_long_for_docutils_is_read_as_plain_text() -> None:
    """docutils' time grows faster than the length (1 MB of sections: 90 s): past `rst.MAX_CHARS` the text is kept
    as it is, as before."""
    raw = (REAL / "docutils-FAQ.rst").read_bytes()
    many = b"\n\n".join([raw] * (rst.MAX_CHARS // len(raw) + 1))
    d = convert(many, "text/x-rst", CHUNKING)
    assert_tiles(d)
    assert d.markdown == many.decode()


def test_rst_nested_deeper_than_docutils_can_parse_or_cut_anywhere_still_converts() -> None:
    """A paragraph of the FAQ quoted 300 levels deep exhausts docutils' recursion: read as plain text, not failed.
    The FAQ cut at any point (an open literal block, a table's half) converts, its blocks tiling the text."""
    raw = (REAL / "docutils-FAQ.rst").read_text()
    paragraph = "Docutils is a system for processing plaintext documentation into useful formats."
    nested = "".join(" " * level + paragraph + "\n\n" for level in range(300))
    d = convert(nested.encode(), "text/x-rst", CHUNKING)
    assert_tiles(d)
    assert d.markdown.count(paragraph) == 300
    for cut in range(1000, len(raw), 7919):
        d = convert(raw[:cut].encode(), "text/x-rst", CHUNKING)
        assert_tiles(d)
        assert "System Message" not in d.markdown


def test_an_image_never_inlines_a_local_file(tmp_path: Path) -> None:
    """An image's own `:loading: embed` option made docutils' HTML writer read its path whatever
    `file_insertion_enabled` said: `.. image:: /proc/self/environ` stored the sidecar's environment (the DSN's
    password) base64-encoded in the text; a `.svg` path came out as plain text; `/dev/zero` read until memory ran
    out."""
    secret = tmp_path / "secret.svg"
    secret.write_text("SECRET_CONTENT_XYZ")
    plain = tmp_path / "notes.txt"
    plain.write_text("ANOTHER_SECRET_ABC")
    source = (
        "Title\n=====\n\nSome text.\n\n"
        f".. image:: {secret}\n   :loading: embed\n\n"
        f".. figure:: {plain}\n   :loading: embed\n\n   A caption.\n\n"
        ".. |x| image:: /proc/self/environ\n   :loading: embed\n\nUses |x| here.\n\n"
        ".. image:: /dev/zero\n   :loading: embed\n"
    )
    d = convert(source.encode(), "text/x-rst", CHUNKING)
    assert "SECRET_CONTENT_XYZ" not in d.markdown and "ANOTHER_SECRET_ABC" not in d.markdown
    assert "data:" not in d.markdown and "base64" not in d.markdown
    assert "A caption." in d.markdown and "Some text." in d.markdown


def test_long_numbered_lists_and_many_footnotes_convert_in_linear_work() -> None:
    """markdownify numbered each item by counting the items before it (49,000 `#.` lines ran for minutes), and each
    footnote in a list walked the whole list to find where it sat (4,000: 21 s). Counted, not timed: twice the items,
    twice the work (either step back made it 2.7 times at these sizes, and more on longer lists)."""

    def numbered(n: int) -> Document:
        return convert(("Title\n=====\n\n" + "#. x\n" * n).encode(), "text/x-rst", CHUNKING)

    def notes(n: int) -> Document:
        items = "".join(f"- item {i} [#]_\n\n  .. [#] note {i}\n\n" for i in range(n))
        return convert(("Title\n=====\n\n" + items).encode(), "text/x-rst", CHUNKING)

    assert "1000. x" in numbered(1_000).markdown
    d = notes(400)
    assert "note 399" in d.markdown and "[^" in d.markdown
    assert_linear(numbered, 500, "a numbered list")
    assert_linear(notes, 200, "a list whose items have footnotes")


def test_a_role_names_its_title_not_its_target() -> None:
    assert rst._role_title("The title <target-name>") == "The title"
    assert rst._role_title("<only-target>") == "<only-target>"
    assert rst._role_title("a < b") == "a < b"
    assert rst._role_title("x" + " " * 50_000 + "y") == "x" + " " * 50_000 + "y"

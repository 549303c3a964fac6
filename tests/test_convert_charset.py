"""Real files in legacy charsets (Debian 12's own, see fixtures/real/SOURCES.md) are read in the charset guessed,
each guess logged; binary data still fails as binary."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from connector import logs
from connector.convert import charset, convert, mime_for_path, sniff
from connector.errors import ConversionError
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES, child_env, connector_cmd
from tests.test_convert import assert_tiles

REAL = FIXTURES / "real"
SETTINGS = ChunkingSettings()

# (fixture, charset logged, words of the text that only the right charset reads)
LEGACY = [
    ("ifrench-gut-ALIRE", "windows-1252", ["système", "français", "détaillées"]),
    ("mgp-sample-fr.mgp", "windows-1252", ["précedente", "mélanger", "spécial"]),
    ("joe.ru.1.gz", "KOI8-R", ["мощный текстовый редактор"]),
    ("nkf.doc.gz", "EUC-JP", ["ネットワーク用漢字コード変換フィルタ"]),
    ("arphic-ARPHICPL-gb.txt", "GB18030", ["文鼎公众授权书", "文鼎科技开发股份有限公司"]),
    ("jed-changelog-excerpt.txt", "UTF-8, 1 stray byte(s) as windows-1252", ["Günter Milde", "Jörg Sommer", "ä, ë"]),
]


@pytest.mark.parametrize(("name", "codec", "words"), LEGACY, ids=[n for n, _, _ in LEGACY])
def test_a_real_file_in_a_legacy_charset_is_read_in_it_and_the_guess_is_logged(name, codec, words, caplog) -> None:
    """Each failed as "not valid UTF-8 (byte 0x.. at offset N)": French READMEs in Latin-1, a Russian man page in
    KOI8-R, Japanese in EUC-JP, Chinese in GB2312, a changelog in UTF-8 with one name typed in Latin-1."""
    path = REAL / name
    d = convert(path.read_bytes(), mime_for_path(path), SETTINGS)
    assert_tiles(d)
    for word in words:
        assert word in d.markdown
    assert "\ufffd" not in d.markdown and "Ã" not in d.markdown, "no mojibake"
    warnings = [r.getMessage() for r in caplog.records if r.name == "connector.convert.charset"]
    assert len(warnings) == 1 and warnings[0].startswith(f"read as {codec}: not valid UTF-8 (byte 0x")
    assert warnings[0].endswith(", charset guessed")


# (fixture, the charset it declares, words of the text that only that charset reads): each guessed wrong before.
DECLARED = [
    ("lcyw-example-koi8r.tex", "koi8_r", ["Проверка", "Все!"]),  # guessed: Hebrew windows-1255
    ("serbian-apostrophe-cp1250.tex", "cp1250", ["Sad noć smer svoj zače", "U tišinu ratnoj"]),  # windows-1252
    ("beamer-conference-talk.tex", "cp1252", ["TALKS¡!!", "Universität Tübingen"]),  # windows-1250: `TALKSˇ!!`
]


@pytest.mark.parametrize(("name", "codec", "words"), DECLARED, ids=[n for n, _, _ in DECLARED])
def test_a_real_file_is_read_in_the_charset_it_declares_and_nothing_is_guessed(name, codec, words, caplog) -> None:
    """LaTeX sources say their charset in `\\usepackage[koi8-r]{inputenc}`; short ones are where guessing fails."""
    path = REAL / name
    data = path.read_bytes()
    assert charset.declared(data) == codec
    d = convert(data, mime_for_path(path), SETTINGS)
    assert_tiles(d)
    assert d.markdown == sniff._text(data.decode(codec))
    for word in words:
        assert word in d.markdown
    assert not caplog.records, "a declaration is no guess"


@pytest.mark.parametrize(
    ("declaration", "codec"),
    [
        (b"# -*- coding: latin-1 -*-\n", "cp1252"),  # Emacs, PEP 263; Latin-1 as WHATWG reads it
        (b"#!/usr/bin/env python\n# -*- coding: iso-8859-15 -*-\n", "iso8859_15"),  # on the second line
        (b'.\\" -*- mode: nroff; coding: iso-latin-2-unix -*-\n', "iso8859_2"),  # groff's preconv; Emacs names
        (b"# vim: set fileencoding=koi8-r :\n", "koi8_r"),
        (b"=pod\n\n=encoding ISO8859-2\n\n", "iso8859_2"),
        (b"\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[utf8x,latin2]{inputenc}\n", "iso8859_2"),
        (b"\\inputencoding{ansinew}\n", "cp1252"),
    ],
)
def test_declarations_in_their_usual_places_are_read(declaration: bytes, codec: str) -> None:
    """Each in front of the same Polish text in ISO-8859-2 (where Windows-1252 reads `ł` as `³`) or Russian in
    KOI8-R, to read as that charset; the declaration's own line stays in the text."""
    text = "Zażółć gęślą jaźń.\n" if codec != "koi8_r" else "Съешь же ещё этих мягких французских булок.\n"
    if codec in ("cp1252", "iso8859_15"):
        text = "Ça coûte 5 € à l'été.\n".replace("€", "EUR" if codec == "cp1252" else "€")
    data = declaration + text.encode(codec)
    assert charset.declared(data) == codec
    assert sniff.decode(data) == sniff._text(data.decode(codec))


def test_a_declaration_the_bytes_do_not_fit_or_on_utf8_text_changes_nothing(caplog) -> None:
    """A file converted to UTF-8 whose `coding:` line was left as it was stays UTF-8; a declaration of a charset
    the bytes are not in (Shift_JIS over Latin-1 text), of no charset, or in a comment of LaTeX is passed over."""
    utf8 = "# -*- coding: latin-1 -*-\nÇa coûte à l'été.\n".encode()
    assert sniff.decode(utf8) == utf8.decode()
    french = (REAL / "ifrench-gut-ALIRE").read_bytes()
    for declaration in (
        b"-*- coding: shift_jis -*-\n",
        b"-*- coding: klingon -*-\n",
        b"% \\usepackage[koi8-r]{inputenc}\n",
    ):
        assert sniff.decode(declaration + french) == (declaration + french).decode("cp1252")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["read as windows-1252"] * 3


def test_the_word_coding_in_prose_declares_nothing(caplog) -> None:
    """Emacs reads `coding:` inside `-*-`, Python in a `#` comment: "Notes on coding: ascii art" opening a KOI8-R
    text is a sentence, and the text is still guessed as KOI8-R (it was read as Windows-1252: every Cyrillic letter
    a Latin one)."""
    russian = "Съешь же ещё этих мягких французских булок, да выпей чаю.\nВсе примеры ниже проверены.\n"
    for first in ("Notes on coding: ascii art and the rest\n", "Section 2. coding=latin text\n"):
        data = (first + russian).encode("koi8_r")
        assert charset.declared(data) is None
        assert sniff.decode(data) == sniff._text(first + russian)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["read as KOI8-R"] * 2


def test_the_russian_man_page_is_read_as_a_man_page() -> None:
    d = convert((REAL / "joe.ru.1.gz").read_bytes(), mime_for_path("joe.ru.1.gz"), SETTINGS)
    headings = [b.section_path[-1] for b in d.blocks if b.kind == "heading"]
    assert {"Название", "Использование", "Описание"} <= set(headings)


def test_a_french_text_with_lone_accents_is_no_big5() -> None:
    """charset-normalizer's first choice for mgp's French sample is Big5 (chaos 0.54 %): `pr\\xe9cedente` pairs
    `\\xe9c` into one ideograph. Where the non-ASCII bytes stand alone, no multi-byte charset is tried."""
    data = (REAL / "mgp-sample-fr.mgp").read_bytes()
    from charset_normalizer import from_bytes

    assert from_bytes(data).best().encoding == "big5", "what the library alone picks"
    assert "Page précedente" in sniff.decode(data)


def test_a_file_in_utf8_with_one_stray_byte_keeps_its_utf8() -> None:
    """Read whole in the charset `charset-normalizer` finds (windows-1250), the changelog's `Jörg` became `JĂ¶rg`;
    UTF-8 with the one stray byte read as Windows-1252 gets both right."""
    data = (REAL / "jed-changelog-excerpt.txt").read_bytes()
    assert "JĂ¶rg" in data.decode("cp1250")
    text = sniff.decode(data)
    assert text == data.decode("utf-8", "replace").replace("\ufffd", "ü")


def test_the_charset_is_guessed_from_a_sample_where_the_text_stops_being_utf8(monkeypatch) -> None:
    """The guess reads `SAMPLE_BYTES` from the line of the first byte that is not UTF-8, not the file's start (an
    English licence in ASCII tells nothing); a byte past the sample that Windows-1252 lacks (0x81: as WHATWG, a C1
    control, dropped) does not lose the file; a figlet table of all 96 high bytes, where the sample fits no
    charset, is guessed from the whole file."""
    monkeypatch.setattr(charset, "SAMPLE_BYTES", 1024)
    ascii_head = (FIXTURES / "apache-2.0.txt").read_bytes()
    assert ascii_head.isascii() and len(ascii_head) > 10 * 1024
    french = (REAL / "ifrench-gut-ALIRE").read_bytes()
    text = sniff.decode(ascii_head + french + b"\x81 fin du fichier\n")
    assert text == (ascii_head + french).decode("cp1252") + " fin du fichier\n"
    table = bytes(range(0xA0, 0x100))
    assert "¡¢£¤¥" in sniff.decode(ascii_head[:2000] + b"\n" + table + b"\n" + french)


@pytest.mark.parametrize("size", [64, 1024, 65536])
def test_random_bytes_and_compressed_data_stay_binary(size: int) -> None:
    """Random bytes without a NUL (which alone made them binary) are never read as text in any charset."""
    for _ in range(20):
        with pytest.raises(ConversionError):
            sniff.decode(os.urandom(size).replace(b"\x00", b"\x01"))
    packed = gzip.compress((REAL / "ifrench-gut-ALIRE").read_bytes())[10:]  # deflate data, no gzip header
    with pytest.raises(sniff.BinaryData):
        convert(packed, "text/plain", SETTINGS)


def test_the_guess_is_logged_with_the_document_and_no_text(capfd) -> None:
    out = logs.handler("json")
    logger = logs.logging.getLogger("connector.convert.charset")
    logger.addHandler(out)
    try:
        with logs.about(7, "doc/ifrench-gut/ALIRE"):
            convert((REAL / "ifrench-gut-ALIRE").read_bytes(), "application/octet-stream", SETTINGS)
    finally:
        logger.removeHandler(out)
    [entry] = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert entry["message"] == "read as windows-1252: not valid UTF-8 (byte 0xe8 at offset 108), charset guessed"
    assert (entry["level"], entry["document_id"], entry["source_key"]) == ("WARNING", 7, "doc/ifrench-gut/ALIRE")


def test_legacy_charset_files_ingest_end_to_end(tmp_path: Path, migrated_dsn) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, _, _ in LEGACY + DECLARED:
        (folder / name).write_bytes((REAL / name).read_bytes())
    command = connector_cmd("ingest", str(folder), "--dsn", migrated_dsn, "--embedder", "fake")
    result = subprocess.run(command, cwd=tmp_path, env=child_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(migrated_dsn) as conn:
        status = dict(conn.execute("SELECT source_key, status FROM connector.documents").fetchall())
        texts = dict(conn.execute(
            "SELECT d.source_key, string_agg(c.text, '' ORDER BY c.ordinal) FROM connector.chunks c "
            "JOIN connector.documents d ON d.id = c.document_id GROUP BY d.source_key").fetchall())  # fmt: skip
    assert status == dict.fromkeys((n for n, _, _ in LEGACY + DECLARED), "done")
    for name, _, words in LEGACY + DECLARED:
        assert all(word in texts[name] for word in words), name
    for name, codec, _ in LEGACY:
        assert f"read as {codec}: not valid UTF-8" in result.stderr, name
    assert result.stderr.count("charset guessed") == len(LEGACY), "declared charsets are not guessed"


def test_guessing_a_big_file_holds_no_object_per_stray_byte() -> None:
    """Counting the bytes that are not UTF-8 made a one-character string of each: a GB2312 text of 4 MB (every
    ideograph two stray bytes) peaked at 60 times its size, 30 MB of such bytes at 900 MB."""
    import tracemalloc

    src = (REAL / "arphic-ARPHICPL-gb.txt").read_bytes()
    data = src * (4_000_000 // len(src))
    tracemalloc.start()
    try:
        text = sniff.decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text == sniff.decode(src) * (4_000_000 // len(src))
    assert peak < 12 * len(data), f"peak {peak / len(data):.1f} times the file's size"

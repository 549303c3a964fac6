"""Text that is not UTF-8: read in the charset it most likely is, and say so.

Users' files are often in a legacy charset: READMEs and changelogs in Latin-1 or Windows-1252, man pages in
ISO-8859-1 (groff's historical input), Polish in ISO-8859-2, Russian in KOI8-R or Windows-1251, Japanese in EUC-JP
or Shift_JIS, Chinese in GB2312 or Big5. `sniff.decode` sends here what no byte-order mark, UTF-16 or ISO 2022
test, UTF-8 decoder or (for a page) declared charset reads, after its checks for binary data. Two readings:

- mostly UTF-8, with a few bytes that are not (a changelog with one name typed in Latin-1; more characters read as
  UTF-8 than bytes that are not): UTF-8, each stray byte read alone as Windows-1252. Reading the whole file in one
  single-byte charset would turn every UTF-8 character into mojibake (`ü` into `Ã¼`) to get the few strays right;
- otherwise the charset `charset-normalizer` ranks first among `CHARSETS` in `SAMPLE_BYTES` from the line of the
  first byte that is not UTF-8, the file then decoded whole in it; where none fits there, or a byte further on
  does not fit the one found, the charset it ranks first for the whole file. Multi-byte East Asian charsets are
  ruled out where most non-ASCII bytes stand alone, as accents do in Latin text: `pr\\xe9cedente` read as Big5
  pairs `\\xe9c` into one ideograph. Where several single-byte charsets score the same, Windows-1252 is taken
  (what browsers read unlabelled Western pages as).

Before any guess, a charset the file declares for itself is taken (`declared`): HTML's `<meta charset>`, XML's
`<?xml encoding>`, the `coding:` of an Emacs, Python or groff first line (or an Emacs "Local Variables" block at the
end), a Vim modeline's `fileencoding=`, LaTeX's `\\usepackage[latin1]{inputenc}` and POD's `=encoding`. Short texts
are where a guess goes wrong (a 225-byte KOI8-R LaTeX example read as Hebrew Windows-1255, a Serbian Windows-1250
one as Windows-1252) and where such a declaration is most often found. A declaration never overrides text that is
valid UTF-8 (a file converted to UTF-8 whose `coding:` line was left as it was), and one the bytes do not fit is
ignored.

A reading with more than `MAX_CONTROL_SHARE` control characters is no text. Where nothing fits, the file fails as
"not valid UTF-8 ..., and no charset fits it". Every guess is a warning in the log
(`read as windows-1252: not valid UTF-8 (byte 0xe9 at offset 309), charset guessed`), which carries the document's
id and key: the charset and the first bad byte, never the text.
"""

from __future__ import annotations

import codecs
import logging
import re

from charset_normalizer import from_bytes
from charset_normalizer.utils import is_multi_byte_encoding

from connector.errors import ConversionError

log = logging.getLogger(__name__)

SAMPLE_BYTES = 1 << 20
"""What the charset is guessed from: `charset-normalizer` took 0.5-0.9 s on an 8 MB Latin-1 file, 0.07-0.1 s on
1 MiB."""
LATIN_ALONE_SHARE = 0.5
"""Above this share of non-ASCII bytes standing alone (an ASCII byte either side), text is in a single-byte
charset: Latin-1 French and German 0.99-1.0, ISO-8859-2 Polish 0.76; Big5 0.13, Shift_JIS 0.17, EUC-JP, GB2312 and
KOI8-R 0-0.01 (Debian's own files)."""

# The legacy encodings of the WHATWG Encoding Standard (what browsers read, so what files in the wild are in), as
# Python names them: `charset-normalizer` knows 99, and ranked MacLatin2 above Windows-1252 for a French man page.
CHARSETS = (
    *("cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254", "cp1255", "cp1256", "cp1257", "cp1258"),
    *("iso8859_2", "iso8859_3", "iso8859_4", "iso8859_5", "iso8859_6", "iso8859_7", "iso8859_8", "iso8859_10"),
    *("iso8859_13", "iso8859_14", "iso8859_15", "iso8859_16", "koi8_r", "koi8_u", "cp866", "mac_roman"),
    *("mac_cyrillic", "gb18030", "gbk", "big5", "euc_jp", "shift_jis", "cp932", "euc_kr"),
)
_SINGLE_BYTE = [c for c in CHARSETS if not is_multi_byte_encoding(c)]
MAX_CONTROL_SHARE = 0.01
"""A reading with more control characters than this share is binary data: random bytes have 10 % (C0 alone), text
none but tab, newline, form feed, backspace (nroff's overstrike) and ESC (terminal colours)."""
_CONTROL = re.compile("[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_NON_ASCII_RUN = re.compile(rb"[\x80-\xff]+")


def _cp1252_bytes(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: the bytes a codec (UTF-8, Windows-1252) cannot read, each as Windows-1252 reads it, its
    five unassigned bytes as Latin-1's C1 controls, as WHATWG does (`sniff` drops those)."""
    assert isinstance(exc, UnicodeDecodeError)
    bad = exc.object[exc.start : exc.end]
    return "".join(bytes([b]).decode("cp1252", "ignore") or chr(b) for b in bad), exc.end


codecs.register_error("connector-cp1252", _cp1252_bytes)


def label(codec: str) -> str:
    """The charset's usual name: `windows-1252` for Python's `cp1252`, `ISO-8859-2`, `KOI8-R`, `GB18030`."""
    name = codecs.lookup(codec).name
    if (windows := re.fullmatch(r"cp(125\d)", name)) is not None:
        return f"windows-{windows.group(1)}"
    named = {"latin-1": "ISO-8859-1", "cp932": "Shift_JIS (Windows)", "big5": "Big5"}
    return named.get(name, name.upper().replace("_", "-").replace("ISO8859", "ISO-8859"))


def guess(data: bytes, error: UnicodeDecodeError) -> str:
    """`data`, which `error` says is not UTF-8, decoded in the charset it most likely is; `ConversionError` if none
    fits. Logs the guess."""
    where = f"(byte {data[error.start]:#04x} at offset {error.start})"
    text, charset = _read(data, error.start)
    if text is None:
        raise ConversionError(f"not valid UTF-8 text {where}, and no charset fits it")
    log.warning("read as %s: not valid UTF-8 %s, charset guessed", charset, where)
    return text


DECLARATION_WINDOW = 1024
"""Where a declaration is looked for: the first (and for Emacs's "Local Variables" and Vim's modelines, the last)
bytes, as HTML's prescan and Emacs do; a LaTeX preamble and POD's `=encoding` within `PREAMBLE_WINDOW`."""
PREAMBLE_WINDOW = 16 * 1024

_HTML_XML = re.compile(
    rb"<meta\s[^>]*?charset\s*=\s*[\"']?\s*([\w.:-]+)|<\?xml\s[^>]*?encoding\s*=\s*[\"']([\w.:-]+)", re.IGNORECASE
)
# Emacs's `-*- coding: latin-1 -*-` (also what groff's preconv reads) or PEP 263's `# … coding: latin-1` comment on
# either of the first two lines, `coding: …` in a "Local Variables:" block near the end, Vim's `fileencoding=`/`fenc=`
# in a modeline. Only inside `-*-` or a `#` comment, as Emacs and Python read it: a KOI8-R text opening "Notes on
# coding: ascii art" was read as Windows-1252.
_FIRST_LINES = re.compile(
    rb"\A(?:[^\n]*\n)?(?:[^\n]*?-\*-[^\n]*?\bcoding:[ \t]*([-\w.]+)|[ \t\f]*#[^\n]*?\bcoding[:=][ \t]*([-\w.]+))"
)
_LOCAL_VARIABLES = re.compile(rb"Local Variables:.*?\n[^\n]*?\bcoding:[ \t]*([-\w.]+)", re.DOTALL)
_VIM = re.compile(rb"\bvim?:[^\n]*?\b(?:fileencoding|fenc)=([-\w.]+)")
_INPUTENC = re.compile(rb"^[^%\n]*?\\(?:usepackage\[([^\]]*)\]\{inputenc\}|inputencoding\{([^}]*)\})", re.MULTILINE)
_POD = re.compile(rb"^=encoding[ \t]+([-\w.]+)", re.MULTILINE)

# Names Python does not know: Emacs's (`iso-latin-1`, `cyrillic-koi8`, `japanese-iso-8bit`) and LaTeX inputenc's
# (`ansinew`, `applemac`, `latin9`); Emacs's end-of-line suffixes (`-unix`, `-dos`, `-mac`) are dropped first.
_NAMES = {
    **{f"iso-latin-{n}": f"iso8859_{c}" for n, c in (("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "9"))},
    "iso-latin-9": "iso8859_15", "iso-latin-0": "iso8859_15", "latin-0": "iso8859_15", "latin-9": "iso8859_15",
    "latin9": "iso8859_15", "latin10": "iso8859_16", "latin-10": "iso8859_16", "cyrillic-koi8": "koi8_r",
    "cyrillic-iso-8bit": "iso8859_5", "cyrillic-alternativnyj": "cp866", "greek-iso-8bit": "iso8859_7",
    "hebrew-iso-8bit": "iso8859_8", "japanese-iso-8bit": "euc_jp", "japanese-shift-jis": "shift_jis",
    "sjis": "shift_jis", "chinese-iso-8bit": "gb2312", "chinese-gbk": "gbk", "chinese-big5": "big5",
    "korean-iso-8bit": "euc_kr",
    "ansinew": "cp1252", "applemac": "mac_roman", "macce": "mac_latin2", "decmulti": "cp1252", "next": "cp1252",
    "cp437de": "cp437", "x-mac-roman": "mac_roman",
}  # fmt: skip
# What WHATWG's Encoding Standard reads these labels as (the bytes 0x80-0x9F of old pages are Windows-1252's).
_WHATWG_ALIASES = {"latin_1": "cp1252", "ascii": "cp1252", "iso8859_1": "cp1252"}


def declared(data: bytes) -> str | None:
    """The Python codec of the charset `data` declares for itself, if any and known (see the module's docstring);
    never UTF-16 or UTF-32, which a document in an ASCII-compatible encoding cannot truly be (a byte-order mark says
    those)."""
    head, tail, preamble = data[:DECLARATION_WINDOW], data[-DECLARATION_WINDOW * 3 :], data[:PREAMBLE_WINDOW]
    for pattern, where in (
        (_HTML_XML, head), (_FIRST_LINES, head), (_INPUTENC, preamble), (_POD, preamble),
        (_LOCAL_VARIABLES, tail), (_VIM, head), (_VIM, tail),
    ):  # fmt: skip
        if (found := pattern.search(where)) is not None:
            labels = (found.group(1) or (found.group(2) if pattern.groups > 1 else None) or b"").split(b",")
            for label in labels:  # `\usepackage[utf8,latin1]{inputenc}`: the first a codec is known for
                if (codec := _codec(label.strip().decode("ascii", "replace"))) is not None:
                    return codec
    return None


def _codec(label: str) -> str | None:
    label = re.sub(r"-(unix|dos|mac)$", "", label.lower())
    try:
        info = codecs.lookup(_NAMES.get(label, label))
    except (LookupError, UnicodeError, ValueError):
        return None
    codec = info.name.replace("-", "_")
    # Text encodings only: not `base64`, `zip` or `rot13` (bytes-to-bytes), nor the escape codecs, which make
    # lone surrogates of `\ud800`.
    if not getattr(info, "_is_text_encoding", True) or "escape" in codec or codec.startswith(("utf_16", "utf_32")):
        return None
    return _WHATWG_ALIASES.get(codec, codec)


def _read(data: bytes, first_bad: int) -> tuple[str | None, str]:
    # Counted without a list of the strays: bytes that are mostly not UTF-8 (30 MB of them) made 10 million
    # one-character strings, 900 MB.
    valid = data.decode("utf-8", "ignore")  # what UTF-8 reads, each stray byte left out
    strays = len(data) - len(valid.encode("utf-8"))
    utf8 = len(valid) - len(valid.encode("ascii", "ignore"))  # non-ASCII characters UTF-8 did read
    del valid
    if utf8 > strays:  # chance makes a few UTF-8 sequences in East Asian text (1057 in 3470 bytes of EUC-JP), no more
        return data.decode("utf-8", "connector-cp1252"), f"UTF-8, {strays} stray byte(s) as windows-1252"
    # From the line of the first byte that is not UTF-8 (what comes before it is ASCII or UTF-8 and tells nothing),
    # to a line's end; where no charset fits there, or the one found lacks a byte further on, from the whole file.
    begin = data.rfind(b"\n", 0, first_bad) + 1
    sample = data[begin : begin + SAMPLE_BYTES]
    if begin + SAMPLE_BYTES < len(data) and (end := sample.rfind(b"\n")) > 0:
        sample = sample[: end + 1]
    for part in (sample, data) if len(sample) < len(data) else (data,):
        if (codec := _charset(part)) is None:
            continue
        try:
            text = data.decode(codec, "connector-cp1252" if codec == "cp1252" else "strict")
        except UnicodeDecodeError:
            continue
        return (text, label(codec)) if len(_CONTROL.findall(text)) <= MAX_CONTROL_SHARE * len(text) else (None, "")
    return None, ""


def _charset(data: bytes) -> str | None:
    """The Python codec `charset-normalizer` ranks first for `data` among `CHARSETS`, None if none fits."""
    runs = _NON_ASCII_RUN.findall(data)
    latin = sum(1 for run in runs if len(run) == 1) > LATIN_ALONE_SHARE * sum(map(len, runs))
    matches = list(from_bytes(data, cp_isolation=_SINGLE_BYTE if latin else list(CHARSETS)))
    if not matches:
        return None
    # Of single-byte charsets that score the same (an English text's few `é`), browsers' default.
    first = (matches[0].percent_chaos, matches[0].percent_coherence)
    tied = [m for m in matches if (m.percent_chaos, m.percent_coherence) == first]
    return "cp1252" if any("cp1252" in m.could_be_from_charset for m in tied) else matches[0].encoding

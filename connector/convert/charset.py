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

"""Token counts are tiktoken's own, whether a text is counted whole or line by line (`tokens._ADDITIVE`)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from connector import tokens
from connector.convert import convert, mime_for_path
from connector.settings import ChunkingSettings
from tests.conftest import FIXTURES

ADDITIVE = sorted(tokens._ADDITIVE)


def exact(text: str, name: str) -> int:
    return len(tokens.encoding(name).encode_ordinary(text))


@pytest.fixture(autouse=True)
def unprimed():
    """No test sees the document another one primed."""
    tokens.forget()
    yield
    tokens.forget()


@pytest.fixture
def every_span(monkeypatch):
    """Short spans too go through the primed document's table (by default they are looked up whole)."""
    monkeypatch.setattr(tokens, "_MIN_SPAN", 1)


# What could make a pre-tokenizer join or split differently across a line start: runs of spaces, tabs and newlines
# (and `\r`, Unicode spaces, and the separators Python calls blank and Rust does not), the `/` that o200k joins to a
# newline after punctuation, digits (grouped by three), contractions, capitals after lower case, marks, CJK, emoji,
# a special token's text, a word longer than any token.
PIECES = st.sampled_from(
    ["\n", "\n\n", "\r\n", " ", "  ", "\t", "\u00a0", "\u2028", "\u3000", "/", "//", ".", "...", "#", "- ", "*",
     "|", "'s", "'LL", "'", '"', "(", ")", "_", "`", "a", "word", "Word", "WORD", "12", "12345", "é", "e\u0301",
     "Ünïcödé", "数据库", "🙂", "x/y", ".\n/", "\n/", " \n", "\t\n", "\n ", "\n\t", "\r", "\x0b", "\x0c", "\x1c",
     "\x1f", "\x85", "\u2029", "\n\x1c/", "<|endoftext|>", "a" * 70, "\n     "]
)  # fmt: skip
TEXTS = st.lists(PIECES, min_size=1, max_size=80).map("".join)


@pytest.mark.parametrize("name", ADDITIVE)
@examples(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_spans_of_a_generated_document_count_as_tiktoken_counts_them(name: str, text: str, every_span) -> None:
    # The document's ids (a numpy array) are `encode_ordinary`'s: a special token's text is ordinary text.
    assert tokens.prime(text, name).tolist() == tokens.encoding(name).encode_ordinary(text)
    for a in range(0, len(text), 7):
        for e in range(a + 1, len(text) + 1, 5):
            assert tokens.count(text[a:e], name) == exact(text[a:e], name), (a, e)
            # and by place, as chunks are made (`make_chunk`): the same count without looking for the text
            assert tokens.count_span(text, a, e, name) == exact(text[a:e], name), (a, e)
    spans = [(a, min(len(text), a + 1 + a % 23)) for a in range(0, len(text), 3)]
    assert tokens.count_spans(text, spans, name) == [exact(text[a:e], name) for a, e in spans]
    assert tokens.count(text, name) == exact(text, name)


@examples(max_examples=500, deadline=None)
@given(st.text(alphabet=" \t\n\r\x0b\x1c\u3000\u2028/ab", max_size=60))
def test_the_line_starts_prime_finds_are_those_of_the_lookbehind_pattern(text: str) -> None:
    """`prime` finds line starts through the newline before each (the pattern `_LINE_START` opens with a lookbehind,
    which the regex engine tries at every position): the same starts, the same first characters."""
    reference = [(m.start(), m.end(1)) for m in tokens._LINE_START.finditer(text)]
    fast = [(m.start() + 1, m.end(1)) for m in tokens._NEWLINE_BEFORE_LINE.finditer(text)]
    assert fast == reference


@pytest.mark.parametrize("name", ADDITIVE)
def test_every_line_start_of_the_fixtures_splits_their_count_exactly(name: str) -> None:
    """Every cut `_LINE_START` makes in real documents (as files and as converted Markdown) keeps the count."""
    cuts = 0
    for path in sorted(p for p in FIXTURES.iterdir() if p.suffix in {".txt", ".md", ".html"}):
        raw = path.read_text(encoding="utf-8", errors="replace")
        markdown = convert(path.read_bytes(), mime_for_path(path), ChunkingSettings()).markdown
        for text in (raw, markdown):
            for m in tokens._LINE_START.finditer(text):
                # The text around the cut, as a text of its own (the whole of a book per cut would take hours).
                a, b, c = max(0, m.start() - 300), m.start(), m.start() + 300
                assert exact(text[a:b], name) + exact(text[b:c], name) == exact(text[a:c], name), (path.name, b)
                cuts += 1
    assert cuts > 1000


@pytest.mark.parametrize("name", ADDITIVE)
def test_spans_of_real_files_count_as_tiktoken_counts_them_primed_or_not(name: str, every_span) -> None:
    """The spans chunkers ask about start and end anywhere: mid-word, mid-line, on blank lines; a text that is not
    the primed document is encoded whole."""
    rng = random.Random(7)
    for path in sorted(p for p in FIXTURES.iterdir() if p.suffix in {".txt", ".md"}):
        text = path.read_text(encoding="utf-8", errors="replace")
        for primed in (True, False):
            if primed:
                tokens.prime(text, name)
            else:
                tokens.forget()
            for _ in range(200):
                a = rng.randrange(len(text))
                b = min(len(text), a + rng.choice([1, 40, 400, 3000, 20000]))
                assert tokens.count(text[a:b], name) == exact(text[a:b], name), (path.name, primed, a, b)


@pytest.mark.parametrize("name", ADDITIVE)
def test_a_primed_document_counts_its_spans_from_its_one_encoding_as_tiktoken_does(name: str) -> None:
    """After `prime`, the lines inside a span come from the document's one encoding: the spans still count exactly,
    and the table of tokens before each line start is tiktoken's own count of the text before it."""
    rng = random.Random(11)
    for path in sorted(p for p in FIXTURES.iterdir() if p.suffix in {".txt", ".md", ".html"}):
        text = convert(path.read_bytes(), mime_for_path(path), ChunkingSettings()).markdown
        ids = tokens.prime(text, name)
        assert list(ids) == tokens.encoding(name).encode_ordinary(text)
        assert tokens.document_ids(text, name) is ids
        primed = tokens._document.value
        assert len(primed.before) == len(primed.starts) > 10, path.name  # the table was built, not given up on
        for j in rng.sample(range(len(primed.starts)), 20):
            assert primed.before[j] == len(ids[: primed.before[j]]) == exact(text[: primed.starts[j]], name)
        for _ in range(300):
            a = rng.randrange(len(text))
            e = min(len(text), a + rng.choice([1, 40, 400, 3000, 30000]))
            assert tokens.count(text[a:e], name) == exact(text[a:e], name), (path.name, a, e)


def test_a_text_of_another_document_is_counted_whole() -> None:
    """Texts the primed document does not hold (a table's header joined anew, another thread's document) are
    encoded themselves."""
    tokens.prime("First line of one document.\nSecond line of it.\n", "cl100k_base")
    other = "A text that is nowhere in the primed document, long enough to be looked for.\nWith two lines."
    assert tokens.count(other, "cl100k_base") == exact(other, "cl100k_base")


@pytest.mark.parametrize("name", ADDITIVE)
def test_spans_inside_a_very_long_line_count_from_the_documents_tokens_within_a_token_of_tiktoken(name: str) -> None:
    """Each count of a span inside one line of 200,000 characters encoded up to the whole line again: choosing the
    chunks of 600 KB of base64 took 162 s. A partial line longer than `LONG_PARTIAL` now counts the document's own
    tokens that it overlaps: off by a token or two at a cut that splits one, never more."""
    import base64
    import json

    pdf = base64.b64encode((FIXTURES / "lppl-1.3c.pdf").read_bytes()).decode()[:200_000]
    texts = {p.name: p.read_text() for p in sorted(FIXTURES.iterdir()) if p.suffix in {".txt", ".md"}}
    one_line_json = json.dumps(texts, ensure_ascii=False)  # every fixture text as one JSON object on one line
    rng = random.Random(5)
    for text in (f"A PDF, as base64:\n{pdf}\nThe end.\n", f"Questions:\n{one_line_json}\n\nDone.\n"):
        assert max(len(line) for line in text.splitlines()) > tokens.LONG_PARTIAL
        tokens.prime(text, name)
        assert (tokens._document.value.byte_at is None) == text.isascii(), "non-ASCII: by UTF-8 offsets"
        worst = 0
        for _ in range(200):
            a = rng.randrange(len(text))
            e = min(len(text), a + rng.choice([100, 5_000, 20_000, 60_000]))
            worst = max(worst, abs(tokens.count(text[a:e], name) - exact(text[a:e], name)))
        assert worst <= 2, worst
        line = text.index("\n") + 1, text.index("\n", text.index("\n") + 1) + 1
        assert tokens.count(text[line[0] : line[1]], name) == exact(text[line[0] : line[1]], name), "whole lines"
    # A partial line takes in the next line's indentation: one of 16,380 "é" plus 10 spaces is long, and counted by
    # UTF-8 offsets, not by characters (which gave half the count).
    text = "é" * 16_380 + "\n" + " " * 10 + "x" * 100
    tokens.prime(text, name)
    assert abs(tokens.count_span(text, 0, 16_391, name) - exact(text[:16_391], name)) <= 2


def test_an_equal_copy_of_the_primed_document_is_looked_up_by_identity() -> None:
    """A long document's strategies run in processes of their own, each receiving the document unpickled anew: the
    copy was equal to the primed text but not the same object, so every span counted after it compared the two whole
    texts (a 2 MB copyright file of Debian's Boost packages: 39 s of strategies and guards there, 2 s in-process).
    The copy now becomes the primed text, and the counts are those of the original."""
    import pickle

    path = FIXTURES / "real" / "perlfunc-p1-abs-alarm.pod"
    settings = ChunkingSettings()
    text = convert(path.read_bytes(), mime_for_path(path), settings).markdown
    name = settings.encoding
    tokens.prime(text, name)
    spans = [(a, min(a + 900, len(text))) for a in range(0, len(text), 700)]
    expected = tokens.count_spans(text, spans, name)
    copy = pickle.loads(pickle.dumps(text))  # what a process of the candidate pool receives
    assert copy == text and copy is not text
    try:
        tokens.primed_for(copy, name)
        assert tokens._primed_as(copy, name).text is copy
        assert tokens.count_spans(copy, spans, name) == expected
    finally:
        tokens.forget()


@pytest.mark.parametrize("name", ADDITIVE)
def test_a_notebook_whose_json_escapes_a_lone_surrogate_is_encoded_as_encode_ordinary_encodes_it(name: str) -> None:
    """JSON may escape half a surrogate pair (`\\ud83d`: an emoji cut in two by whatever truncated an output), and
    Python reads it as a lone surrogate. tiktoken's `encode_ordinary` replaces it; its `encode_to_numpy` raised
    `UnicodeEncodeError`, so the whole notebook failed to convert."""
    notebook = json.loads((FIXTURES / "real" / "nbsphinx-code-cells-excerpt.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "code")
    lines = ["Done \ud83d\n", "pair \ud83d\ude42\n"]
    cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": lines})
    data = json.dumps(notebook, indent=1).encode("ascii")
    settings = ChunkingSettings(encoding=name)
    markdown = convert(data, "application/x-ipynb+json", settings).markdown  # primes its token ids
    assert "Done \ud83d" in markdown and "pair \U0001f642" in markdown
    ids = tokens.document_ids(markdown, name)
    assert ids.tolist() == tokens.encoding(name).encode_ordinary(markdown)
    assert tokens.count(markdown, name) == exact(markdown, name) == len(ids)
    for text in ["\ud800", "a\udfffb", "x \ud83d\ude00 y\n\ud83d", "<|endoftext|>\ud800"]:
        assert tokens.prime(text, name).tolist() == tokens.encoding(name).encode_ordinary(text), ascii(text)
        tokens.forget()
        assert tokens.document_ids(text, name).tolist() == tokens.encoding(name).encode_ordinary(text), ascii(text)

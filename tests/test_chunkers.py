"""The contract every candidate obeys after guards: exact offsets, document order, nothing lost, sizes bounded."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from connector import candidates, guards, tokens
from connector.chunkers import build
from connector.chunkers.base import make_chunk
from connector.chunkers.page import PageChunker
from connector.chunkers.recursive import RecursiveChunker, split_span
from connector.convert import convert, mime_for_path
from connector.models import Document
from connector.settings import ChunkingSettings, LLMSettings
from connector.visible import blank, visible
from tests.conftest import FIXTURES
from tests.llm_stub import ChatStub

# Every kind of strategy, and the variants of the default pool that have their own code paths.
STRATEGIES = tuple(dict.fromkeys((*ChunkingSettings().strategy_names, "langchain_4000", "recursive_1100_overlap100")))

CHUNKING = ChunkingSettings()  # the configured defaults: encoding and thresholds come from settings only

WORDS = st.sampled_from(
    ["alpha", "beta", "gamma", "delta", "Postgres", "vector", "index", "chunk", "it", "the", "of", "3.14", "x",
     '"Quoted."', "(aside.)", "e.g.", "Dr.", "“Curly.”"]
)  # fmt: skip
SENTENCE = st.builds(
    lambda ws, end: " ".join(ws) + end, st.lists(WORDS, min_size=1, max_size=25), st.sampled_from(".!?,")
)
LINE = st.one_of(
    SENTENCE,
    st.builds(lambda n, s: "#" * n + " " + s, st.integers(1, 6), SENTENCE),
    st.builds(lambda s: "- " + s, SENTENCE),
    st.builds(lambda i, s: f"{i}. {s}", st.integers(1, 30), SENTENCE),
    st.just(""),
    st.just("| a | b |\n|---|---|\n| 1 | 2 |"),
    st.just("\u200b\u2060\ufeff"),  # a line that shows nothing: no chunk may be made of it, or start or end with it
    st.builds(lambda s: "\u200b" + s + "\u00ad", SENTENCE),
)
MARKDOWN = st.lists(LINE, min_size=1, max_size=120).map("\n".join)


def recursive(size: int, overlap_tokens: int = 0) -> RecursiveChunker:
    return RecursiveChunker(size, CHUNKING.encoding, f"recursive_{size}", overlap_tokens)


def assert_contract(text: str, chunks, overlapping: bool = False) -> None:
    prev_end = prev_start = 0
    covered = [False] * len(text)
    for c in chunks:
        assert text[c.start : c.end] == c.text, "offsets must be exact"
        assert c.start >= (prev_start if overlapping else prev_end), "chunks must be in order (and not overlap)"
        assert c.start > prev_start or c is chunks[0], "no two chunks start at the same place"
        prev_start = c.start
        assert c.text and not blank(c.text[0]) and not blank(c.text[-1]), "no chunk starts or ends with blanks"
        prev_end = c.end
        for i in range(c.start, c.end):
            covered[i] = True
    lost = [i for i, ch in enumerate(text) if not blank(ch) and not covered[i]]
    assert not lost, f"visible characters lost at {lost[:5]}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MARKDOWN, st.sampled_from([20, 60, 200]))
def test_recursive_contract(text: str, size: int) -> None:
    chunks = recursive(size).split(Document(text, ())).chunks
    assert_contract(text, chunks)
    assert all(c.token_count <= size for c in chunks)


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> Iterator[LLMSettings]:
    """The llm_regex strategy's endpoint: a local stub that always proposes "split before each heading"."""
    with ChatStub("<regex>(?m)^#{1,6} </regex>") as stub:
        yield LLMSettings(base_url=stub.base_url, cache_dir=tmp_path_factory.mktemp("llm-cache"))


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "page"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MARKDOWN)
def test_every_strategy_keeps_the_contract_after_guards(strategy: str, text: str, llm: LLMSettings) -> None:
    assume(visible(text))
    cfg = ChunkingSettings(strategies=(strategy,), max_tokens=120, min_tokens=20, merge_limit=130, window_tokens=60,
                           window_overlap=10, sentences_per_chunk=3, llm=llm)  # fmt: skip
    doc = convert(text.encode(), "text/markdown", cfg)
    (candidate,) = candidates.generate(doc, build(cfg), cfg, parallel=False)
    if candidate.error:
        assert candidate.error == "skipped: document has no headings" and strategy.startswith("sections")
        return
    assert_contract(doc.markdown, candidate.chunks, overlapping=candidate.params.get("overlapping", False))
    limit = cfg.merge_limit if strategy != "langchain_4000" else cfg.merge_limit * 10
    assert all(c.token_count <= limit for c in candidate.chunks)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MARKDOWN, st.lists(st.integers(0, 10_000), max_size=6))
# Found by hypothesis: the blank line between the two chunks holds 14 tokens of zero-width characters, so merging
# them would make 91 tokens though the two count 7 + 77.
@example(
    '# alpha alpha alpha "Quoted.".\n\u200b\u2060\ufeff\n\u200b\u2060\ufeff\n# alpha alpha alpha 3.14 3.14.\n'
    "| a | b |\n|---|---|\n| 1 | 2 |\n\u200b\u2060\ufeff\nalpha alpha alpha alpha alpha 3.14.\n- alpha alpha.\n"
    '- alpha alpha alpha alpha alpha alpha 3.14 3.14 3.14 3.14 3.14 "Quoted.".',
    [],
)
def test_page_then_guards_contract(text: str, raw_starts: list[int]) -> None:
    starts = tuple(sorted({0, *(s % max(1, len(text)) for s in raw_starts)}))
    doc = Document(text, (), page_starts=starts)
    cfg = ChunkingSettings(max_tokens=80, min_tokens=15, merge_limit=90)
    chunks = guards.apply(text, PageChunker(cfg.encoding).split(doc).chunks, cfg)
    assert_contract(text, chunks)
    assert all(c.token_count <= cfg.merge_limit for c in chunks)
    if len(chunks) > 1:
        # after guards, a tiny chunk remains only when merging it either way would break the merge limit (the
        # merged span's own count: what lies between the two counts too)
        for i, c in enumerate(chunks):
            if c.token_count < cfg.min_tokens:
                neighbours = [chunks[j] for j in (i - 1, i + 1) if 0 <= j < len(chunks)]
                for n in neighbours:
                    merged = text[min(n.start, c.start) : max(n.end, c.end)]
                    assert tokens.count(merged, cfg.encoding) > cfg.merge_limit, (c, n)


def test_recursive_overlap_carries_whole_sentences_within_budget() -> None:
    sentences = [f"Sentence number {i} talks about topic {i % 5} in a few words." for i in range(200)]
    text = " ".join(sentences)
    plain = recursive(200).split(Document(text, ())).chunks
    overlapped = recursive(200, overlap_tokens=40).split(Document(text, ())).chunks
    assert_contract(text, overlapped, overlapping=True)
    assert len(overlapped) > len(plain), "repeating text takes more chunks"
    for prev, chunk in zip(overlapped, overlapped[1:], strict=False):
        shared = text[chunk.start : prev.end]
        assert shared.strip(), "each chunk repeats the end of the previous one"
        assert shared.startswith("Sentence") and shared.endswith("."), "whole sentences only"
        assert 0 < tokens.count(shared, CHUNKING.encoding) <= 40 and chunk.token_count <= 200


def test_character_fallback_splits_text_without_separators() -> None:
    text = "x" * 5000
    chunks = split_span(text, 0, len(text), 100, CHUNKING.encoding, overlap_tokens=0)
    assert_contract(text, chunks)
    assert len(chunks) > 1 and all(c.token_count <= 100 for c in chunks)


def test_heading_starts_a_new_chunk_and_stays_with_its_text() -> None:
    body = "word " * 150
    text = f"# One\n\n{body}\n\n# Two\n\n{body}"
    chunks = recursive(200).split(Document(text, ())).chunks
    assert [c.text.splitlines()[0] for c in chunks] == ["# One", "# Two"]


@pytest.mark.parametrize("name", ["apache-2.0.txt", "debian-manifesto.txt", "lppl-1.3c.pdf", "dockerfile-reference.md"])
def test_every_strategy_on_real_documents(name: str) -> None:
    cfg = ChunkingSettings(strategies=tuple(s for s in STRATEGIES if s != "llm_regex"))  # llm_regex: own tests
    doc = convert((FIXTURES / name).read_bytes(), mime_for_path(name), CHUNKING)
    pool = candidates.generate(doc, build(cfg), cfg)
    assert [c.strategy for c in pool] == list(cfg.strategy_names)
    for candidate in pool:
        if candidate.strategy == "page" and not doc.page_starts:
            assert candidate.error == "skipped: document has no pages" and candidate.chunks == ()
            continue
        if candidate.strategy.startswith("sections") and not any(b.kind == "heading" for b in doc.blocks):
            assert candidate.error == "skipped: document has no headings" and candidate.chunks == ()
            continue
        assert candidate.error is None
        chunks = candidate.chunks
        assert_contract(doc.markdown, chunks, overlapping=candidate.params.get("overlapping", False))
        assert all(c.token_count <= cfg.merge_limit for c in chunks), candidate.strategy
        if len(chunks) > 1:
            assert sum(c.token_count >= cfg.min_tokens for c in chunks) / len(chunks) >= 0.9, candidate.strategy


def test_a_failing_strategy_is_recorded_and_the_others_still_run() -> None:
    class Broken:
        name = "broken"
        params: dict = {}

        def split(self, document):
            raise ValueError("boom")

    cfg = ChunkingSettings()
    doc = convert(b"Some text. " * 50, "text/plain", CHUNKING)
    broken, recursive = candidates.generate(
        doc, [Broken(), *build(ChunkingSettings(strategies=("recursive_1100",)))], cfg
    )
    assert broken.error == "ValueError: boom" and broken.chunks == ()
    assert recursive.error is None and len(recursive.chunks) == 1


def test_unknown_strategy_is_a_configuration_error() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown chunking strategy 'nope'"):
        ChunkingSettings(strategies=("page", "nope"))
    with pytest.raises(ValidationError, match="two strategies share a name"):
        ChunkingSettings(
            strategies=("recursive_600", {"kind": "recursive", "max_tokens": 700, "name": "recursive_600"})
        )
    with pytest.raises(ValidationError, match="overlap must be smaller than size"):
        ChunkingSettings(strategies=({"kind": "token_window", "size": 50, "overlap": 50},))


def test_parallel_generation_gives_the_serial_result() -> None:
    cfg = ChunkingSettings(strategies=("recursive_1100", "sentence", "token_window", "semantic"))
    doc = convert((FIXTURES / "dockerfile-reference.md").read_bytes(), "text/markdown", CHUNKING)
    try:
        parallel = candidates.generate(doc, build(cfg), cfg, parallel=True)
    finally:
        candidates.shutdown_pool()  # no worker processes (or their threads) outlive the test
    serial = candidates.generate(doc, build(cfg), cfg, parallel=False)
    assert [(c.strategy, c.chunks) for c in parallel] == [(c.strategy, c.chunks) for c in serial]


def test_the_configured_encoding_reaches_every_strategy_and_the_pipeline(tmp_path) -> None:
    from connector.embedders import load
    from connector.models import SourceDocument
    from connector.pipeline import Pipeline
    from connector.settings import Settings

    raw = (FIXTURES / "dockerfile-reference.md").read_bytes()
    names = tuple(s for s in STRATEGIES if s != "llm_regex")
    for encoding in ("cl100k_base", "o200k_base"):
        cfg = ChunkingSettings(strategies=names, encoding=encoding)
        doc = convert(raw, "text/markdown", cfg)
        for chunker in build(cfg):
            chunks = chunker.split(doc).chunks if chunker.name != "page" else []
            assert all(c.token_count == tokens.count(c.text, encoding) for c in chunks), chunker.name
    cl100k = ChunkingSettings(strategies=("recursive_1100", "sections", "token_window"), encoding="cl100k_base")
    settings = Settings(embedder="fake", data_dir=tmp_path, chunking=cl100k)
    source = SourceDocument(1, "sql", "dockerfile", None, raw, "text/markdown", "0" * 64)
    outcome = Pipeline(settings, load("fake")).run(source)
    assert outcome.document == convert(raw, "text/markdown", cl100k)
    assert outcome.document != convert(raw, "text/markdown", CHUNKING), "the units depend on the encoding"
    # The losing candidates' chunks come as spans (`Chosen.shipped`): their texts are the document's.
    counted = [(c.token_count, outcome.document.markdown[c.start : c.end]) for s in outcome.scored
               for c in s.candidate.chunks]  # fmt: skip
    assert counted and all(n == tokens.count(text, "cl100k_base") for n, text in counted)
    assert any(tokens.count(text, "cl100k_base") != tokens.count(text, "o200k_base") for _, text in counted)


@settings(max_examples=500, deadline=None)
@example([0.0, 0.0, 0.10212996530111862, 0.7231651206043987], 90.0)  # numpy's lerp from above differs in the last bit
@example([-0.0, -0.0], 100.0)  # past the last value numpy still interpolates: 0.0, not -0.0
@example([1.0, math.inf], 100.0)  # and inf - inf: nan
@given(
    # No -0.0 beside 0.0: numpy's partition and Python's sort may put equal values in either order, and a gap's
    # distance (1 - cosine, or 1) is never -0.0.
    st.lists(st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0, math.inf]), st.floats(allow_nan=False).map(abs)),
             min_size=1, max_size=40),
    st.one_of(st.sampled_from([0.0, 50.0, 90.0, 100.0]), st.floats(0, 100)),
)  # fmt: skip
def test_semantic_threshold_is_numpys_percentile_to_the_last_bit(values, q) -> None:
    """The semantic strategy's cuts are the gaps above this threshold: a value a bit off would move a cut."""
    import struct

    import numpy as np

    from connector.chunkers.semantic import percentile

    with np.errstate(invalid="ignore"):  # inf - inf: numpy says nan, and warns
        numpys = float(np.percentile(np.asarray(values), q))
    ours = percentile(values, q)
    assert (math.isnan(ours) and math.isnan(numpys)) or struct.pack("<d", ours) == struct.pack("<d", numpys)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["Walruses ", "sleep", ".\n\n", "  ", "x" * 40, "1234567", "\t", "--", "ice "]),
             max_size=400).map("".join),
    st.sampled_from([(8, 2), (16, 0), (5, 4), (512, 50)]),
)  # fmt: skip
def test_token_windows_of_ascii_text_are_the_same_primed_or_not(text, size_overlap) -> None:
    """Window edges of an ASCII document come from the token ends `tokens.prime` summed (as a `choose` primes
    every document), or from tiktoken's bytes per window when nothing is primed: the same chunks either way, and
    each one's text is the document's at its offsets."""
    from connector.chunkers.window import TokenWindowChunker

    size, overlap = size_overlap
    chunker = TokenWindowChunker(size, overlap, "cl100k_base")
    document = Document(text, ())
    tokens.prime(text, "cl100k_base")
    primed = chunker.split(document).chunks
    tokens.forget()
    assert tokens.primed_token_ends(text, "cl100k_base") is None
    unprimed = chunker.split(document).chunks
    assert primed == unprimed
    assert all(text[c.start : c.end] == c.text for c in primed)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["e.g. ", "Dr. Who ", "A. B. ", "Prof. X ", "word. ", "Next ", "etc. ", "(see ", "3 ",
                              "\n\n", "! ", "? ", "Mrs. ", "al. ", "x.", "Vol. ", "No. 4 ", "“Q” ", "pp. 12 "]),
             max_size=60).map("".join),
)  # fmt: skip
def test_abbreviations_are_looked_for_at_the_sentences_end_only_with_the_same_cuts(text) -> None:
    """`_spans` looks for an abbreviation just before each possible cut (none is longer than "Prof."): the same
    sentences as looking for one over the whole sentence so far."""
    from connector.chunkers import sentences as s

    def reference(text: str) -> list[tuple[int, int]]:
        spans, pos = [], 0
        for m in s._BOUNDARY.finditer(text):
            cut = m.start(1) if m.group(1) is not None else m.start(2)
            if m.group(1) is not None and s._ABBREVIATION.search(text, pos, cut):
                continue
            a, b = s.trim(text, pos, cut)
            if b > a:
                spans.append((a, b))
            pos = m.end()
        a, b = s.trim(text, pos, len(text))
        return [*spans, (a, b)] if b > a else spans

    assert s._spans(text, 0, None) == reference(text)


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=" \t\n\r\x0b\u3000\u2028ab1(.)-•x#", max_size=80),
    st.data(),
)
def test_the_after_newline_separators_cut_where_their_regexes_match(text: str, data) -> None:
    """`recursive.AfterNewline` finds a list marker after a newline in linear time, `recursive.HeadingAt` a heading
    without a lookbehind; each must cut exactly where the regex it replaces matches, for any slice of any text (the
    regex's lookbehind sees before the slice)."""
    from connector.chunkers.recursive import SEPARATORS, AfterNewline, HeadingAt

    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    for finder, _ in SEPARATORS:
        if isinstance(finder, AfterNewline | HeadingAt):
            assert finder.starts(text, start, end) == [m.start() for m in finder.pattern.finditer(text, start, end)]


@pytest.mark.parametrize(
    "text",
    [
        "\n1.\n2. x\n\n  3) y\n- z\n\t\n• w", "a\n\n \n(iv). b\n-\n- c", "x\n1. \n2.\n\n\n3. d\n\n\n", "\n\n\n",
        "#\n# a\n## b\n###\n#\n\n####### c\n#\t##\u3000x\n#",
    ],
)  # fmt: skip
def test_the_after_newline_separators_cut_where_their_regexes_match_in_every_slice(text: str) -> None:
    """Lists whose markers follow one another (a match's trailing blanks end on the next line), headings of every
    level next to each other and too deep, every slice."""
    from connector.chunkers.recursive import SEPARATORS, AfterNewline, HeadingAt

    for finder, _ in SEPARATORS:
        if isinstance(finder, AfterNewline | HeadingAt):
            for start in range(len(text) + 1):
                for end in range(start, len(text) + 1):
                    found = [m.start() for m in finder.pattern.finditer(text, start, end)]
                    assert finder.starts(text, start, end) == found, (start, end)


def test_a_long_run_of_blank_lines_is_split_in_linear_time() -> None:
    """20 KB of tab-and-newline lines (85 s with the regexes' quadratic scan) against 40 KB: the cost may double,
    not quadruple. Measured as regex steps, not time: the number of characters the finder looks at."""
    from connector.chunkers.recursive import SEPARATORS, AfterNewline

    finder = next(f for f, _ in SEPARATORS if isinstance(f, AfterNewline))
    for n in (10_000, 20_000):
        text = "Start.\n" + "\t\n" * n + "End."
        assert finder.starts(text, 0, len(text)) == []
    looked = []
    blank = AfterNewline._BLANK

    class Counting:
        def match(self, text, pos, end):
            m = blank.match(text, pos, end)
            looked.append(m.end() - pos)
            return m

    finder_type = type(finder)
    original = finder_type._BLANK
    try:
        finder_type._BLANK = Counting()
        for n in (10_000, 20_000):
            looked.clear()
            text = "Start.\n" + "\t\n" * n + "End."
            finder.starts(text, 0, len(text))
            assert sum(looked) <= len(text), "each blank character is looked at once"
    finally:
        finder_type._BLANK = original


def test_two_tiny_chunks_across_a_long_invisible_run_are_not_rebalanced(monkeypatch) -> None:
    """'x', 16,000 zero-width spaces, 'y': the chunks trim to 'x' and 'y', and the tiny guard's rebalance would
    split the whole run to find two halves of at least min_tokens, which two one-token chunks cannot give (83 s
    before). It gives up without splitting."""
    text = "x" + "\u200b" * 16_000 + "y"
    tokens.prime(text, CHUNKING.encoding)
    chunks = [make_chunk(text, 0, 1, CHUNKING.encoding), make_chunk(text, len(text) - 1, len(text), CHUNKING.encoding)]

    def no_split(*args, **kwargs):
        raise AssertionError("split_span was called")

    monkeypatch.setattr(guards, "split_span", no_split)
    assert [c.text for c in guards.merge_tiny(text, chunks, CHUNKING)] == ["x", "y"]


@pytest.mark.parametrize("strategy", ["langchain_4000", "recursive_1100_overlap150", "token_window"])
@pytest.mark.parametrize(
    "text",
    ["\n".join(["7 " * 94] * 47), "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f" * 2000],
    ids=["repeated-lines", "flag-emoji"],
)
def test_overlapping_chunks_split_by_the_oversize_guard_stay_in_order(strategy: str, text: str) -> None:
    """Re-split one by one, the pieces of an overlapping chunk started before (or with) the last piece of the one
    before it (found by an adversarial helper with langchain_4000)."""
    cfg = ChunkingSettings(strategies=(strategy,))
    doc = convert(text.encode(), "text/plain", cfg)
    (candidate,) = candidates.generate(doc, build(cfg), cfg, parallel=False)
    assert_contract(doc.markdown, candidate.chunks, overlapping=candidate.params.get("overlapping", False))


def test_token_window_edges_are_tiktokens_own_offsets_on_non_ascii_real_text() -> None:
    """`char_offsets` (edges only) gives what `decode_with_offsets` gives for every token, where a token starts
    inside a character too (CJK licence text: tokens that split a character)."""
    from connector import tokens
    from connector.chunkers.window import char_offsets

    enc = tokens.encoding("cl100k_base")
    text = (FIXTURES / "real" / "arphic-ARPHICPL-gb.txt").read_text(encoding="gb18030", errors="replace") + (
        FIXTURES / "real" / "jed-changelog-excerpt.txt"
    ).read_text(errors="replace")
    ids = tokens.document_ids(text, "cl100k_base")  # as the chunker has them: a numpy array
    assert ids.tolist() == enc.encode_ordinary(text)
    _, want = enc.decode_with_offsets(ids.tolist())
    assert any(enc.decode_single_token_bytes(i)[0] in range(0x80, 0xC0) for i in ids.tolist()), "a token in a character"
    assert char_offsets(enc, ids, list(range(len(ids)))) == dict(enumerate(want))

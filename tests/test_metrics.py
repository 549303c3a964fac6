"""RC, ICC and DCC on hand-made documents whose answers are known; the coreference backends; and the sharing of
vectors between candidates."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from connector.chunkers.base import make_chunk
from connector.chunkers.sentences import sentence_spans
from connector.convert import convert
from connector.coref import Pair, load
from connector.coref.heuristic import HeuristicCoref
from connector.coref.maverick import MaverickCoref
from connector.embedders.fake import FakeEmbedder
from connector.errors import FatalError
from connector.metrics import DocumentMetrics, Resources
from connector.metrics.blocks import block_integrity
from connector.metrics.cohesion import Sentences, contextual_coherence, intrachunk_cohesion, windows
from connector.metrics.references import references_completeness
from connector.metrics.vectors import StaticEncoder, StorageEncoder, VectorCache
from connector.models import Block, Candidate, Chunk, Document
from connector.settings import Settings
from tests.conftest import FIXTURES
from tests.test_convert import CHUNKING

MUSK = "Elon Musk founded SpaceX. He wants to land on Mars with his rockets."


def chunks_at(text: str, cuts: list[int]) -> tuple[Chunk, ...]:
    bounds = [0, *cuts, len(text)]
    return tuple(c for a, b in zip(bounds, bounds[1:], strict=False) if (c := make_chunk(text, a, b, "o200k_base")))


# --- RC and the heuristic backend -------------------------------------------------------------------------------


def test_the_spec_example_a_cut_at_15_breaks_both_pairs() -> None:
    pairs = HeuristicCoref().pairs(MUSK)
    he, his = MUSK.index("He "), MUSK.index("his")
    assert pairs == [Pair(0, 9, he, he + 2), Pair(0, 9, his, his + 3)]
    assert references_completeness(pairs, chunks_at(MUSK, [15])) == 0.0
    assert references_completeness(pairs, chunks_at(MUSK, [])) == 1.0
    assert references_completeness(pairs, chunks_at(MUSK, [he + 3])) == 0.5  # between "He" and "his"
    assert references_completeness(pairs, chunks_at(MUSK, [he])) == 0.0  # a cut right before "He" separates it


def test_pleonastic_it_is_not_a_reference() -> None:
    text = "The daemon reads its configuration. It is likely that the file is missing. It seems to work."
    pairs = HeuristicCoref().pairs(text)
    pronouns = [text[p.pronoun_start : p.pronoun_end] for p in pairs]
    assert pronouns == ["its"]
    assert text[pairs[0].entity_start : pairs[0].entity_end] == "The daemon"


def test_agreement_and_sentence_initial_demonstratives() -> None:
    text = (
        "Ada Lovelace wrote the first program. The engines were never built. "
        "They stayed on paper. She published her notes. This made her famous."
    )
    found = {
        (text[p.entity_start : p.entity_end], text[p.pronoun_start : p.pronoun_end])
        for p in HeuristicCoref().pairs(text)
    }
    assert ("The engines", "They") in found  # plural to plural, not to Ada Lovelace
    assert ("Ada Lovelace", "She") in found and ("Ada Lovelace", "her") in found  # three sentences back
    assert ("Ada Lovelace", "This") in found  # what the previous sentence is about (its subject)


def test_heuristic_is_deterministic_and_english_only() -> None:
    backend = HeuristicCoref()
    assert backend.pairs(MUSK) == backend.pairs(MUSK)
    german = "Die Katze schläft im Haus, und der Hund bellt laut, weil er den Briefträger sieht."
    assert backend.pairs(german) is None
    assert references_completeness(backend.pairs(german), chunks_at(german, [20])) is None
    assert references_completeness([], chunks_at(MUSK, [20])) is None  # no pairs: undefined


def test_a_long_documents_words_are_found_again_not_kept_and_the_pairs_are_the_same(monkeypatch) -> None:
    """Every word of a long text kept (a match object and a string each) between the resolver's two passes was the
    largest thing in memory while its chunks were chosen: 237 MB of an 8 MB text's 443 MB peak. Found again in
    the second pass, the pairs are the same."""
    import tracemalloc

    from connector.coref import heuristic

    text = (FIXTURES / "austen-northanger-abbey.txt").read_text()
    backend = HeuristicCoref()
    monkeypatch.setattr(heuristic, "KEEP_TOKENS_BELOW", len(text) + 1)
    kept = backend.pairs(text)
    monkeypatch.setattr(heuristic, "KEEP_TOKENS_BELOW", len(text))
    assert backend.pairs(text) == kept and len(kept) > 1000
    monkeypatch.undo()
    long_text = text * 3  # 1.3 MB
    tracemalloc.start()
    try:
        backend.pairs(long_text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Measured: 40 MB before (30 bytes a character), 3 MB after (the pairs and one sentence's words).
    assert peak < 10 * len(long_text), f"{peak / 1e6:.0f} MB for a {len(long_text) / 1e6:.1f} MB text"


# --- the Maverick adapter, through a fake with Maverick's documented predict() output -------------------------


class FakeMaverick:
    """Returns what `Maverick.predict(text)` returns: token and character clusters, inclusive ends; an empty
    cluster, a pronoun-only cluster and a cataphor included."""

    def __init__(self, clusters: list[list[tuple[int, int]]]):
        self.clusters = clusters
        self.calls = 0

    def predict(self, text: str) -> dict:
        self.calls += 1
        return {
            "tokens": text.split(),
            "clusters_token_offsets": [[(0, 0)] * len(c) for c in self.clusters],
            "clusters_char_offsets": self.clusters,
            "clusters_token_text": [[text[a : b + 1] for a, b in c] for c in self.clusters],
            "clusters_char_text": [[text[a : b + 1] for a, b in c] for c in self.clusters],
        }


def test_maverick_output_becomes_pairs() -> None:
    he, his = MUSK.index("He "), MUSK.index("his")
    clusters = [[(0, 8), (he, he + 1), (his, his + 2)], [], [(he, he + 1)]]  # inclusive ends
    backend = MaverickCoref(FakeMaverick(clusters))
    assert backend.name == "maverick"
    assert backend.pairs(MUSK) == HeuristicCoref().pairs(MUSK) == [Pair(0, 9, he, he + 2), Pair(0, 9, his, his + 3)]


def test_maverick_cataphor_pairs_with_the_clusters_first_entity_and_rc_covers_it() -> None:
    text = "When he arrived, John Smith sat down at the table and waited for a long time in the quiet room."
    he, john = text.index("he "), text.index("John")
    backend = MaverickCoref(FakeMaverick([[(he, he + 1), (john, john + 9)]]))
    pairs = backend.pairs(text)
    assert pairs == [Pair(john, john + 10, he, he + 2)]
    assert references_completeness(pairs, chunks_at(text, [he + 5])) == 0.0  # between the pronoun and the name


def test_maverick_is_not_run_on_non_english_and_needs_a_local_path() -> None:
    fake = FakeMaverick([])
    assert MaverickCoref(fake).pairs("Die Katze schläft im Haus, und der Hund bellt laut in der Nacht.") is None
    assert fake.calls == 0
    with pytest.raises(FatalError, match="local checkpoint"):
        load("maverick", None)


# --- ICC and DCC ------------------------------------------------------------------------------------------------


def fake_vectors(text: str):
    """Span vectors of `text` from an encoder without a span path: each span embedded as its text."""
    return VectorCache(StorageEncoder(FakeEmbedder()), text).spans


def test_identical_sentences_give_icc_1() -> None:
    text = "Cats sit quietly. Cats sit quietly.\n\nDogs bark at night. Rain falls on roofs."
    sentences = Sentences(text, sentence_spans(text))
    split = text.index("Dogs")
    assert intrachunk_cohesion(chunks_at(text, [split])[:1], sentences, fake_vectors(text)) == pytest.approx(1.0)
    mixed = intrachunk_cohesion(chunks_at(text, [split])[1:], sentences, fake_vectors(text))
    assert mixed is not None and mixed < 0.9  # two unrelated sentences agree less with their chunk


def test_icc_is_undefined_without_a_chunk_of_two_sentences() -> None:
    text = "One sentence only here.\n\nAnother one there."
    sentences = Sentences(text, sentence_spans(text))
    assert intrachunk_cohesion(chunks_at(text, [text.index("Another")]), sentences, fake_vectors(text)) is None


def test_dcc_one_chunk_is_undefined_and_identical_chunks_give_1() -> None:
    text = "Apples grow on trees in the orchard. " * 3
    assert contextual_coherence(chunks_at(text, []), fake_vectors(text)) is None
    third = len(text) // 3
    assert contextual_coherence(chunks_at(text, [third, 2 * third]), fake_vectors(text)) == pytest.approx(1.0)


def test_dcc_windows_slide_one_chunk_and_hold_up_to_the_limit() -> None:
    assert windows([1000] * 5) == [(0, 3), (1, 4), (2, 5)]
    assert windows([100] * 4, limit=250) == [(0, 2), (1, 3), (2, 4)]
    assert windows([4000, 100, 100]) == [(1, 3)]  # an oversized first chunk is a window of one: not kept
    assert windows([2000, 2000]) == []
    assert windows([100, 100, 100]) == [(0, 3)]  # later windows end on the same chunk: not kept


# --- BI on a real block map ---------------------------------------------------------------------------------------


def test_a_cut_inside_a_table_lowers_bi_by_exactly_one_unit() -> None:
    text = (
        "# Sizes\n\nThe table below lists the integer types that the server knows about.\n\n"
        "| type | bytes |\n|---|---|\n| smallint | 2 |\n| integer | 4 |\n| bigint | 8 |\n\n"
        "Every type is signed.\n"
    )
    doc = convert(text.encode(), "text/markdown", CHUNKING)
    table = next(u for u in doc.units if "| bigint | 8 |" in text[u.start : u.end])
    at_table = block_integrity(doc.units, chunks_at(text, [table.start]))
    inside = block_integrity(doc.units, chunks_at(text, [text.index("| integer")]))
    assert at_table == 1.0
    assert inside == pytest.approx(1 - 1 / len(doc.units))


# --- sharing: each distinct text embedded once per document ------------------------------------------------------


class CountingEncoder:
    name = "counting"

    def __init__(self) -> None:
        self.inner = StorageEncoder(FakeEmbedder())
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return self.inner.embed(texts)


def test_candidates_share_vectors_and_each_text_is_embedded_once(tmp_path) -> None:
    doc = convert((FIXTURES / "apache-2.0.txt").read_bytes(), "text/plain", CHUNKING)
    half = doc.markdown.index("\n\n", len(doc.markdown) // 2)
    a = Candidate("a", chunks_at(doc.markdown, [half]))
    b = Candidate("b", chunks_at(doc.markdown, [half, half + 2000]))  # shares its first chunk with a
    encoder = CountingEncoder()
    settings = Settings(data_dir=tmp_path, weights={"rt": 0.2})  # every metric, RT too
    scorer = DocumentMetrics(doc, settings, Resources(encoder, HeuristicCoref()))
    scorer.prepare([a, b], pairs=True)
    first = list(encoder.texts)
    scored = [scorer.score(a), scorer.score(b)]
    assert encoder.texts == first, "scoring asked for no text that prepare() had not embedded"
    assert len(first) == len(set(first)), "no text embedded twice"
    assert a.chunks[0].text in first
    for s in scored:
        assert all(s.metrics[m] is not None for m in ("rc", "icc", "dcc", "bi", "sc", "rt"))
        assert s.rc_backend == "heuristic" and set(s.metric_ms) == {"rc", "icc", "dcc", "bi", "sc", "rt"}


def test_a_metric_weighted_zero_is_not_computed(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, weights={"rc": 0, "icc": 0, "dcc": 0, "rt": 0})
    resources = Resources.load(settings)
    assert resources.encoder is None and resources.coref is None
    doc = convert(MUSK.encode(), "text/plain", CHUNKING)
    scored = DocumentMetrics(doc, settings, resources).score(Candidate("x", chunks_at(MUSK, [15])))
    assert scored.metrics["rc"] is None and scored.metrics["icc"] is None and scored.rc_backend is None
    assert scored.metrics["rt"] is None
    assert scored.metrics["bi"] is not None


# --- the static metrics model ---

SPAN_TEXT = (FIXTURES / "dockerfile-reference.md").read_text()[
    :5000
] + "\n\nnaïve café — «quoted» ½ 日本語 x\u00a0y word\x1fjoined here https://example.com/a/b?c=d&e=f."


@functools.cache
def static_encoder(models_dir) -> StaticEncoder:
    return StaticEncoder(models_dir)


def test_static_model_is_built_once_offline_and_ranks_related_sentences_higher(models_dir) -> None:
    encoder = StaticEncoder(models_dir)
    assert (models_dir / "minilm-l6-v2-static-256" / "config.json").exists()
    a, b, c = encoder.embed(
        ["The server stores rows in tables.", "A database keeps records in relations.", "Bananas are yellow."]
    )
    assert encoder.embed(["x"]).shape == (1, 256)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert float(a @ b) > float(a @ c)
    # A text over the MiniLM window (and model2vec's default 512-token cap) is embedded whole, not truncated.
    long = "alpha beta gamma " * 400 + "zebra"
    assert not np.allclose(encoder.embed([long])[0], encoder.embed(["alpha beta gamma " * 400])[0])


def test_span_vectors_are_the_static_models_own_vectors_of_those_texts(models_dir) -> None:
    # One pass over the document must give what embedding each chunk and sentence alone gives: real text, with
    # Unicode, punctuation and words the model does not know, and spans from every strategy's cuts.
    encoder = StaticEncoder(models_dir)
    text = (FIXTURES / "austen-northanger-abbey.txt").read_text()[:40_000]
    text += "\n\nnaïve café — «quoted» ½ 日本語 x\u00a0y."
    spans = sentence_spans(text)
    spans += [(a, b) for (a, _), (_, b) in zip(spans, spans[3:], strict=False)]  # noqa: RUF005 (chunks)
    vectors = encoder.spans(text)
    vectors.prepare(spans[::2])  # half announced, half not: both ways must agree
    got = vectors(spans)
    want = encoder.embed([text[a:b] for a, b in spans])
    cosines = np.sum(got * want, axis=1)
    # model2vec rounds each text's mean to float16 (the model's dtype); the span path sums in float32/64
    assert cosines.min() > 0.999, f"worst span: {text[slice(*spans[int(cosines.argmin())])]!r}"
    assert np.allclose(encoder.spans(text)(spans[:5]), got[:5], atol=1e-6), "the word cache changes nothing"


@examples(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 400)), min_size=1, max_size=20))
def test_any_span_even_one_that_cuts_words_gets_the_vector_of_its_own_text(models_dir, spans) -> None:
    text = SPAN_TEXT
    spans = [(a, min(a + n, len(text))) for a, n in spans]
    vectors = static_encoder(models_dir).spans(text)
    vectors.prepare(spans[::3])
    got = vectors(spans)
    want = static_encoder(models_dir).embed([text[a:b] for a, b in spans])
    for (a, b), g, w in zip(spans, got, want, strict=True):
        if not np.any(w):  # nothing the model knows in that text (whitespace, punctuation it drops)
            assert not np.any(g), text[a:b]
        else:
            assert float(g @ w) > 0.999, repr(text[a:b])


def test_a_line_without_whitespace_costs_no_vector_per_piece_and_changes_no_vector(models_dir) -> None:
    """A search index on one line (rustdoc's: runs of 50,000 characters without a space, ~100,000 word pieces):
    every piece got a vector of its own, and every chunk edge inside the run had the piece it cut tokenized again:
    3 GB and 45 s for a 1.3 MB file. Now such a run is cut where BERT's tokenizer starts a word anyway, and each
    word's pieces are summed by one sparse product; the vectors are what the model gives each text."""
    import random
    import tracemalloc

    from connector.metrics.vectors import LONG_WORD_CHARS, _unit_bounds

    text = (FIXTURES / "real" / "rustdoc-search-index-excerpt.js").read_text()
    starts, ends = _unit_bounds(text)
    assert (ends - starts).max() <= LONG_WORD_CHARS + 200, "the 52,092-character run is cut"
    assert "".join(text[a:b] for a, b in zip(starts, ends, strict=True)) == "".join(text.split())
    encoder = StaticEncoder(models_dir)  # a cache of its own: every word is new to it
    encoder.spans("this thread's copy of the model, made once")
    tokenizer = encoder._model().tokenizer
    tokenizer.no_truncation()
    pieces = sum(len(e.ids) for e in tokenizer.encode_batch_fast(text.split(), add_special_tokens=False))
    tracemalloc.start()
    try:
        vectors = encoder.spans(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < pieces * encoder.dim * 4 / 2, f"{peak / 1e6:.0f} MB for {pieces} pieces"
    rng = random.Random(7)
    spans = sorted((a, a + rng.randint(1, 8000)) for a in rng.sample(range(len(text) - 8000), 200))
    want = encoder._encode([text[a:b] for a, b in spans])  # the model's own encode, text by text
    assert np.sum(vectors(spans) * want, axis=1).min() > 0.999
    whole = encoder._encode([text])[0]  # a text embedded alone (a document too long for spans) is summed too
    assert float(encoder.embed([text])[0] @ whole) > 0.9999


def test_the_word_cache_starts_again_when_full_and_changes_no_vector(models_dir, monkeypatch) -> None:
    import connector.metrics.vectors as vectors_module

    encoder = StaticEncoder(models_dir)  # a cache of its own
    spans = sentence_spans(SPAN_TEXT)
    want = encoder.embed([SPAN_TEXT[a:b] for a, b in spans])
    for limit in (10, 200, 100_000):  # smaller than one document's words, than two documents', and roomy
        monkeypatch.setattr(vectors_module, "WORD_CACHE", limit)
        for text in (SPAN_TEXT[:2000], SPAN_TEXT):  # the second reuses, or clears, what the first left
            got = encoder.spans(text)(spans if text is SPAN_TEXT else sentence_spans(text))
        assert np.min(np.sum(got * want, axis=1)) > 0.999
        assert len(encoder._local.vocab.index) <= limit
        assert len(encoder._local.vocab._matrix) <= limit, "the vectors' matrix grows no further than the cache"


def test_a_text_too_long_for_word_vectors_is_embedded_per_text(models_dir, monkeypatch) -> None:
    import connector.metrics.vectors as vectors_module

    monkeypatch.setattr(vectors_module, "SPAN_MAX_WORDS", 50)
    encoder = static_encoder(models_dir)
    text = SPAN_TEXT[:3000]
    assert encoder.spans(text) is None
    cache = VectorCache(encoder, text)
    spans = sentence_spans(text)
    monkeypatch.setattr(vectors_module, "SPAN_BATCH", 7)  # several batches
    cache.prepare_spans(spans)
    assert set(cache._span_rows) == set(spans), "kept by span"
    assert all(isinstance(key, bytes) for key in cache._rows), "no text kept, a digest of it"
    assert np.allclose(cache.spans(spans), encoder.embed([text[a:b] for a, b in spans]), atol=1e-6)
    assert np.allclose(cache.spans(spans[:1] + spans[:1]), encoder.embed([text[slice(*spans[0])]] * 2), atol=1e-6)


@pytest.mark.parametrize("weights", [{}, {"rt": 0.2, "bi": 0}, {"icc": 0, "dcc": 0, "rt": 0}])
def test_a_candidate_is_measured_on_its_weighted_metrics_in_order_and_a_skipped_one_on_none(tmp_path, weights) -> None:
    """`score` reads the weights once per document: each candidate still gets every metric weighted above 0 (and
    only those), timed in the metrics' order, and the weighted mean of them; one without chunks gets nothing."""
    from connector.metrics import METRICS, weighted_score

    doc = convert((FIXTURES / "apache-2.0.txt").read_bytes(), "text/plain", CHUNKING)
    chunks = chunks_at(doc.markdown, [doc.markdown.index(" ", len(doc.markdown) // 2)])  # a cut `explain` marks
    settings = Settings(data_dir=tmp_path, weights=weights)
    scorer = DocumentMetrics(doc, settings, Resources(CountingEncoder(), HeuristicCoref()))
    measured = Candidate("a", chunks, raw_token_counts=(50, 600))
    skipped = Candidate("b", (), error="skipped: document has no pages")
    failed = Candidate("c", chunks, error="ValueError: after its chunks")
    scorer.prepare([measured, skipped, failed], pairs=True)
    got = scorer.score(measured)
    w = settings.weights.as_dict()
    assert list(got.metric_ms) == [m for m in ("sc", "bi", "rc", "icc", "dcc", "rt") if w[m] > 0]
    assert [m for m in METRICS if got.metrics[m] is not None] == [m for m in METRICS if w[m] > 0]
    assert got.score == weighted_score(got.metrics, settings.weights) and got.rc_backend == "heuristic"
    assert got.shape and got.breaks
    nothing = scorer.score(skipped)
    assert nothing.metrics == dict.fromkeys(METRICS) and nothing.score is None and not nothing.metric_ms
    assert nothing.shape == {} and nothing.breaks == () and nothing.rc_backend is None
    unmeasured = scorer.score(failed)  # chunks but an error: no value, but `explain`'s view of its chunks
    assert unmeasured.metrics == dict.fromkeys(METRICS) and unmeasured.score is None and not unmeasured.metric_ms
    assert unmeasured.shape == got.shape and unmeasured.breaks == got.breaks


def test_candidates_with_the_same_chunks_are_scored_once_and_alike(tmp_path) -> None:
    doc = convert((FIXTURES / "apache-2.0.txt").read_bytes(), "text/plain", CHUNKING)
    half = doc.markdown.index(" ", len(doc.markdown) // 2)  # inside a paragraph: a cut `explain` marks
    same = chunks_at(doc.markdown, [half])
    a = Candidate("a", same, raw_token_counts=(50, 2000))  # its own chunks were out of range before the guards
    b = Candidate("b", same, raw_token_counts=(500, 600))
    settings = Settings(data_dir=tmp_path, models_dir=tmp_path / "unused")
    encoder = CountingEncoder()
    scorer = DocumentMetrics(doc, settings, Resources(encoder, HeuristicCoref()))
    scorer.prepare([a, b], pairs=True)
    first, second = scorer.score(a), scorer.score(b)
    for m in ("rc", "icc", "dcc", "bi"):
        assert first.metrics[m] == second.metrics[m] and second.metric_ms[m] == 0.0
    assert first.metrics["sc"] < second.metrics["sc"] == 1.0, "SC reads each strategy's own sizes"
    alone = DocumentMetrics(doc, settings, Resources(encoder, HeuristicCoref())).score(b)
    assert alone.metrics == second.metrics
    assert first.shape == second.shape == alone.shape and first.shape is not second.shape
    assert first.breaks == second.breaks == alone.breaks and first.breaks


# Texts for the fast paths' properties: words, every space `_UNIT` stops at, and Python whitespace it does not.
_SPACES_AND_NOT = " \t\n\r\u00a0\u1680\u2000\u2005\u200a\u202f\u205f\u3000\x0b\x0c\x1c\u0085\u2028"
_TEXTS = st.text(alphabet=st.sampled_from(list("ab Zé_'-9.,İ\u3001\U0001f600") + list(_SPACES_AND_NOT)), max_size=300)


@examples(max_examples=300, deadline=None)
@given(_TEXTS)
def test_word_bounds_from_numpy_are_the_unit_regex_matches(text) -> None:
    from connector.metrics.vectors import _UNIT, _unit_bounds

    starts, ends = _unit_bounds(text)
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == [m.span() for m in _UNIT.finditer(text)]


@examples(max_examples=300, deadline=None)
@given(_TEXTS, st.integers(0, 3))
def test_a_documents_words_are_the_unit_regex_matches_whichever_way_they_are_cut_out(text, long_runs) -> None:
    """`StaticEncoder.spans` takes `str.split`'s words where they are the runs `_unit_bounds` found, and slices
    them out one by one where they are not (a space only Python's whitespace has, a run cut for its length)."""
    from connector.metrics.vectors import LONG_WORD_CHARS, _unit_bounds, _words

    text += ("x" * (LONG_WORD_CHARS + 7) + "." + "y" * 40 + " ") * long_runs
    starts, ends = _unit_bounds(text)
    assert _words(text, starts, ends) == [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def test_spans_announced_twice_or_as_lists_or_arrays_are_announced_once_in_the_order_first_given(models_dir) -> None:
    """`SpanVectors.prepare` drops repeated spans before it converts them to ints: the same spans in the same order
    (the rows of one product) whatever form they came in."""
    text = SPAN_TEXT[:3000]
    spans = sentence_spans(text)
    given = [*spans[:6], *spans[2:4], (np.int64(spans[7][0]), np.int64(spans[7][1])), spans[7], spans[1]]
    want = list(dict.fromkeys(spans[:6] + spans[7:8]))
    encoder = static_encoder(models_dir)
    rows = []
    for form in (given, [list(span) for span in given], np.asarray(given)):
        vectors = encoder.spans(text)
        vectors.prepare(form)
        assert list(vectors._known) == want and all(type(a) is int for span in vectors._known for a in span)
        rows.append(vectors(want))
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2])
    assert np.array_equal(rows[0], encoder.spans(text)(want)), "the same rows as one product of those spans"


def _hashed_bow_reference(texts: list[str], dim: int, stop_words: frozenset[str]) -> np.ndarray:
    """The hashing trick word by word, as the first version computed it."""
    import hashlib
    import math
    import re

    vectors = np.zeros((len(texts), dim))
    for i, text in enumerate(texts):
        counts: dict[str, int] = {}
        for word in re.findall(r"\w+", text.lower()):
            if word not in stop_words:
                counts[word] = counts.get(word, 0) + 1
        for word, n in counts.items():
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vectors[i, h % dim] += (1.0 + math.log(n)) * (1.0 if (h >> 32) & 1 else -1.0)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


@examples(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("abcde the and İ,.")), max_size=60), max_size=8),
       st.sampled_from([4, 1024]), st.booleans())  # fmt: skip
def test_hashed_bow_is_the_word_by_word_hashing_trick(texts, dim, stop) -> None:
    """Dimension 4: words collide in a column, and their weights must add up. The fake embedder's stored vectors
    must not depend on the batch a text is embedded with."""
    from connector.embedders.lexical import STOP_WORDS, hashed_bow

    stop_words = STOP_WORDS if stop else frozenset()
    got = hashed_bow(texts, dim, stop_words)
    assert got.shape == (len(texts), dim) and got.dtype == np.float32
    # Within an ulp of float32 of the reference (its math.log and numpy's SIMD log may differ in the last bit of a
    # float64 on some CPUs), and to the bit alone or in any batch.
    assert np.allclose(got, _hashed_bow_reference(texts, dim, stop_words), rtol=0, atol=1e-7)
    for text, row in zip(texts, got, strict=True):
        assert np.array_equal(hashed_bow([text], dim, stop_words)[0], row)


@examples(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("abcdefgh the and İ,.")), max_size=80), min_size=1, max_size=8),
       st.sampled_from([4, 64, 1024]), st.booleans())  # fmt: skip
def test_compact_hashed_bow_is_the_full_one_without_its_empty_columns(texts, dim, stop) -> None:
    """The semantic strategy compares sentences with vectors of only the columns they use: the same vectors but
    for the columns that are zero in every one, so the same cosines."""
    from connector.embedders.lexical import STOP_WORDS, hashed_bow

    stop_words = STOP_WORDS if stop else frozenset()
    full = hashed_bow(texts, dim, stop_words)
    compact = hashed_bow(texts, dim, stop_words, compact=True)
    assert compact.dtype == np.float32 and compact.shape[0] == len(texts) and compact.shape[1] <= dim

    def nonzero_columns(m: np.ndarray) -> np.ndarray:  # in their order (a column whose words cancel is zero)
        return m[:, np.any(m != 0, axis=0)]

    assert np.allclose(nonzero_columns(full), nonzero_columns(compact), rtol=0, atol=1e-7)
    assert np.allclose(full @ full.T, compact @ compact.T, rtol=0, atol=1e-6)


def test_the_semantic_strategy_cuts_real_documents_where_the_full_vectors_do(monkeypatch) -> None:
    from connector.chunkers import semantic
    from connector.chunkers.sentences import sentence_spans
    from connector.embedders.lexical import LexicalEncoder

    texts = [p.read_text() for p in sorted(FIXTURES.glob("*.txt")) + sorted(FIXTURES.glob("*.md"))]
    assert len(texts) >= 3
    chunker = semantic.SemanticChunker(percentile=90, encoder="lexical", encoding="o200k_base")
    for text in texts:
        document = Document(text, (Block(0, len(text)),))
        compact = [(c.start, c.end) for c in chunker.split(document).chunks]
        monkeypatch.delattr(LexicalEncoder, "compact")  # the full 1,024 columns
        full = [(c.start, c.end) for c in chunker.split(document).chunks]
        monkeypatch.undo()
        assert compact == full and len(full) > 1, len(sentence_spans(text))


def test_span_vectors_asked_before_and_after_they_are_announced_agree(models_dir) -> None:
    encoder = static_encoder(models_dir)
    text = SPAN_TEXT[:4000]
    spans = sentence_spans(text)
    cold = encoder.spans(text)(spans)  # nothing announced: each span summed as asked
    vectors = encoder.spans(text)
    vectors.prepare(spans[::2])
    assert np.allclose(vectors(spans[::2]), cold[::2], atol=1e-6), "the announced spans, from one batch"
    assert np.allclose(vectors(spans), cold, atol=1e-6), "a mix of announced and new spans"


def test_span_vectors_summed_as_one_product_or_from_prefix_sums_agree(models_dir, monkeypatch) -> None:
    """A short document's spans are summed as one spans × words product, a long one's from prefix sums at their
    edges: both must give the model's vectors, for spans announced or not."""
    import connector.metrics.vectors as vectors_module

    encoder = static_encoder(models_dir)
    text = SPAN_TEXT[:6000]
    spans = sentence_spans(text)
    spans += [(a + 3, b - 2) for a, b in spans[::4] if b - a > 8]  # noqa: RUF005 (spans that cut words)
    dense = encoder.spans(text)
    dense.prepare(spans[::2])
    assert dense._dense(len(spans))
    by_product = dense(spans)  # the announced half from `prepare`'s product, the other half from one more
    monkeypatch.setattr(vectors_module, "DENSE_MAX_CELLS", 0)
    summed = encoder.spans(text)
    summed.prepare(spans[::2])
    assert not summed._dense(1)
    assert np.allclose(by_product, summed(spans), atol=1e-6)
    want = encoder.embed([text[a:b] for a, b in spans])
    assert np.sum(by_product * want, axis=1).min() > 0.999


def _gap_distances_reference(vectors: np.ndarray, window: int) -> np.ndarray:
    """The first version: a cumulative sum down the columns."""
    n = len(vectors)
    prefix = np.vstack([np.zeros((1, vectors.shape[1])), np.cumsum(vectors, axis=0)])
    gap = np.arange(1, n)
    left = prefix[gap] - prefix[np.maximum(0, gap - window)]
    right = prefix[np.minimum(n, gap + window)] - prefix[gap]
    denominator = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    dots = np.einsum("ij,ij->i", left, right)
    return np.where(denominator > 0, 1.0 - dots / np.where(denominator > 0, denominator, 1.0), 1.0)


@examples(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 5), st.integers(0, 2**32 - 1), st.booleans())
def test_semantic_gap_distances_are_exactly_the_cumulative_sum_ones(n, window, seed, sparse) -> None:
    from connector.chunkers.semantic import gap_distances

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 64)).astype(np.float32)
    if sparse:  # sentences with no word kept: zero vectors
        vectors[rng.random(n) < 0.3] = 0
    assert np.array_equal(gap_distances(vectors, window), _gap_distances_reference(vectors, window))


def test_hashed_bow_keeps_a_bounded_cache_of_word_codes_and_the_same_vectors(monkeypatch) -> None:
    """A batch of many distinct words (a table of numbers) must not grow the codes kept past the bound, in any
    order of batches, and what is kept or dropped must not change a vector."""
    from connector.embedders import lexical

    monkeypatch.setattr(lexical, "CODES_KEPT", 50)
    monkeypatch.setattr(lexical, "_CODES", {})
    batches = [[" ".join(f"w{i}" for i in range(k, k + n))] for k, n in ((0, 30), (25, 30), (0, 200), (10, 5), (0, 60))]
    first = [lexical.hashed_bow(texts, 64) for texts in batches]
    assert all(len(kept) <= 50 for kept in lexical._CODES.values())
    monkeypatch.setattr(lexical, "_CODES", {})
    again = [lexical.hashed_bow(texts, 64) for texts in reversed(batches)][::-1]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(np.allclose(a, _hashed_bow_reference(t, 64, frozenset()), rtol=0, atol=1e-7)
               for a, t in zip(first, batches, strict=True))  # fmt: skip


@examples(max_examples=2000, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-300]), st.floats(-2, 2, allow_nan=False)),
             min_size=1, max_size=40),
)  # fmt: skip
def test_icc_and_dccs_means_are_numpys_to_the_last_bit(values) -> None:
    """ICC and DCC average without np.mean's argument handling: the clipped mean of a candidate's scores and the
    float32 mean of a chunk's sentence cosines must be numpy's, bit for bit (a score a bit off can change a
    winner)."""
    import struct

    from connector.metrics.cohesion import _clipped_mean, _mean32

    def bits(x: float) -> bytes:
        return struct.pack("<d", x)

    assert bits(_clipped_mean(values)) == bits(float(np.clip(np.mean(values), 0.0, 1.0)))
    as32 = np.asarray(values, dtype=np.float32)
    assert bits(_mean32(as32)) == bits(float(np.mean(as32)))


@examples(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["Walruses sleep.", " ", "\n\n", "It rains!", "...", "  ok?", "x", "—", "3 seals."]),
             max_size=30).map("".join),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), min_size=1, max_size=12),
)  # fmt: skip
def test_a_chunks_sentence_pieces_are_its_sentences_clipped_and_trimmed_whoever_asked_first(text, cuts) -> None:
    """`Sentences.within` keeps each whole sentence's piece for every chunk that holds it: chunks asked for in any
    order get what clipping and trimming each sentence to the chunk gives, the pieces without a letter or digit
    left out."""
    import re

    from connector.chunkers.base import trim

    sentences = Sentences(text, sentence_spans(text))
    for a, b in cuts:
        start, end = sorted((min(a, len(text)), min(b, len(text))))
        if start == end:
            continue
        chunk = make_chunk(text, start, end, "cl100k_base")
        if chunk is None:
            continue
        expected = []
        for s, e in sentences.spans:
            if s < chunk.end and e > chunk.start:
                piece = trim(text, max(s, chunk.start), min(e, chunk.end))
                if re.search(r"[^\W_]", text[piece[0] : piece[1]]):
                    expected.append(piece)
        assert sentences.within(chunk) == expected

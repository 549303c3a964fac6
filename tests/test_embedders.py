"""Embedders: the fake is deterministic and word-sensitive; MiniLM loads offline and pools long texts by windows."""

from __future__ import annotations

import numpy as np
import pytest

from connector.embedders import load, spec
from connector.errors import FatalError
from connector.settings import EmbedSettings


def test_fake_embedder_is_deterministic_unit_length_and_word_sensitive() -> None:
    e = load("fake")
    a = e.embed(["Postgres stores vectors", "Postgres stores vectors", "bananas are yellow fruit"])
    assert a.vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(a.vectors, axis=1), 1.0)
    assert np.array_equal(a.vectors[0], a.vectors[1])
    query = e.embed(["where are vectors stored in postgres"]).vectors[0]
    assert query @ a.vectors[0] > query @ a.vectors[2]


def test_unknown_embedder_is_a_configuration_error() -> None:
    with pytest.raises(FatalError, match="unknown embedder"):
        spec("word2vec")


@pytest.fixture(scope="module")
def minilm():
    return load("minilm")  # the default runtime: ONNX, exported into the session's models folder


@pytest.fixture(scope="module")
def plain():
    """The reference: sentence-transformers on torch, as the package's model card runs it."""
    return load("minilm", EmbedSettings(runtime="torch"))._encoder.model


def test_the_default_runtime_is_onnx_with_the_torch_vectors(minilm, plain) -> None:
    assert minilm.runtime == "onnx" and minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    texts = ["Docker volumes keep data outside the container.", "The XJ42 flux capacitor needs calibration " * 60]
    torch_model = load("minilm", EmbedSettings(runtime="torch"))
    ours, reference = minilm.embed(texts), torch_model.embed(texts)
    assert ours.windows == reference.windows and ours.windows[1] >= 2
    assert np.allclose(ours.vectors, reference.vectors, atol=1e-5)
    assert all(np.allclose(a.vector, b.vector, atol=1e-5) and (a.start, a.end) == (b.start, b.end)
               for a, b in zip(ours.window_spans[1], reference.window_spans[1], strict=True))  # fmt: skip


def test_int8_is_close_to_the_model_but_a_model_of_its_own(minilm) -> None:
    int8 = load("minilm", EmbedSettings(runtime="onnx-int8"))
    assert int8.name != minilm.name and spec("minilm", EmbedSettings(runtime="onnx-int8")).name == int8.name
    texts = ["The licensor grants a perpetual, worldwide, royalty-free patent license.", "Cats purr in the sun."]
    cosines = np.sum(int8.embed(texts).vectors * minilm.embed(texts).vectors, axis=1)
    assert np.all(cosines > 0.97) and np.all(cosines < 0.99999)


def test_minilm_short_text_matches_the_plain_model(minilm, plain) -> None:
    text = "The licensor grants a perpetual, worldwide, royalty-free patent license."
    ours = minilm.embed([text])
    plain = plain.encode([text], normalize_embeddings=True)
    assert ours.windows == (1,)
    assert np.allclose(ours.vectors[0], plain[0], atol=1e-5)


def test_minilm_long_text_is_embedded_by_windows_not_truncated(minilm, plain) -> None:
    head = "Cats purr and sleep in the sun all afternoon. " * 40  # ~400 word pieces: past the 256 window
    tail = "Quarterly revenue, tax filings and accounting ledgers. " * 40
    pooled = minilm.embed([head + tail])
    assert pooled.windows[0] >= 3
    truncated = plain.encode([head + tail], normalize_embeddings=True)[0]
    tail_only = minilm.embed([tail]).vectors[0]
    # The tail influences the pooled vector; a truncated embedding never sees it.
    assert pooled.vectors[0] @ tail_only > truncated @ tail_only + 0.1
    assert np.isclose(np.linalg.norm(pooled.vectors[0]), 1.0, atol=1e-5)


def test_minilm_windows_tile_the_text_and_carry_their_own_vectors(minilm, plain) -> None:
    """Each window's span is a consecutive piece of the text, its vector is the model's vector of that piece, and
    the text's vector is their token-weighted mean (what the chunk row stores; the windows go to chunk_windows)."""
    text = "Docker volumes keep data outside the container. " * 30 + "The XJ42 flux capacitor needs calibration. " * 30
    got = minilm.embed([text, "short text"])
    windows = got.window_spans[0]
    assert got.windows == (len(windows), 1) and len(windows) >= 2
    assert windows[0].start == 0 and windows[-1].end == len(text.rstrip())
    for a, b in zip(windows, windows[1:], strict=False):
        assert a.end <= b.start and not text[a.end : b.start].strip()  # only whitespace between windows
    for w in windows:
        reference = plain.encode([text[w.start : w.end]], normalize_embeddings=True)[0]
        assert np.allclose(w.vector, reference, atol=1e-4)
    assert np.allclose(got.window_spans[1][0].vector, got.vectors[1])
    weights = [len(minilm._tokenizer(text[w.start : w.end], add_special_tokens=False)["input_ids"]) for w in windows]
    mean = sum(wt * w.vector for wt, w in zip(weights, windows, strict=True))
    assert np.allclose(got.vectors[0], mean / np.linalg.norm(mean), atol=1e-3)


_THREADS_IN_ONE_CORE = """
import os, sys
from pathlib import Path
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # a container given one core of a larger machine
from connector.embedders import load
model = load("minilm")  # ONNX Runtime: its session starts its intra-op threads
model.embed(["a sentence to embed, " * 40] * 16)
print(model._encoder._session.get_session_options().intra_op_num_threads)
"""


def test_onnx_runtime_computes_on_the_cores_this_process_may_use_not_the_machines(minilm, tmp_path) -> None:
    """os.cpu_count() counts the machine's cores; a process limited to fewer (affinity, a container's CPU quota:
    `pool.usable_cores`) that starts a thread per machine core only has them queue and spin for its own."""
    import os
    import subprocess
    import sys

    from tests.conftest import child_env

    env = {**child_env(tmp_path), "CONNECTOR_MODELS_DIR": os.environ["CONNECTOR_MODELS_DIR"]}
    out = subprocess.run([sys.executable, "-c", _THREADS_IN_ONE_CORE], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1"], "one core, one intra-op thread (the caller's own)"
    from connector.pool import usable_cores

    assert minilm._encoder._session.get_session_options().intra_op_num_threads == usable_cores()


def test_the_onnx_export_works_in_a_relative_models_folder_and_keeps_the_log_quiet(
    tmp_path, monkeypatch, caplog
) -> None:
    """`make run`'s default models folder is `.connector/models`, relative to the working directory: the export
    changed directory to quantize and then looked for its files from there (FileNotFoundError on a fresh clone).
    onnxruntime's quantizer logs a line per tensor on the root logger; the sidecar's log keeps its own line only."""
    import logging
    import os
    from pathlib import Path

    from connector.embedders.onnx import model_path

    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO):
        path = model_path(Path(".connector/models"), int8=True)
    assert path == Path(".connector/models/minilm-l6-v2-onnx-v1/model.int8.onnx")
    assert path.is_file() and path.with_name("model.onnx").is_file() and os.getcwd() == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".connector"], "nothing left in the working directory"
    assert [p.name for p in (tmp_path / ".connector/models").iterdir() if p.name.startswith(".onnx-")] == []
    said = [r.getMessage() for r in caplog.records]
    assert any("exporting the MiniLM model to ONNX once" in m for m in said)
    assert not [m for m in said if "Quantization parameters" in m or "Ignore MatMul" in m], said[:5]
    logging.getLogger().warning("after the export")  # the root logger passes records again
    assert caplog.records[-1].getMessage() == "after the export"

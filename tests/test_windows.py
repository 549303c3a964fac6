"""Multi-vector chunks (migration 0007): every model window stored with its span and vector, `connector.search()`
ranking a chunk by its best window blended with its mean, the contextual embedding text, and the migration's
backfill of chunks stored before it."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pgvector.psycopg import register_vector
from pydantic import ValidationError

from connector.db.database import connect, ensure_embedding_model, migrate
from connector.embed import _in_document, heading_prefix, suffix
from connector.embedders import load
from connector.embedders.base import Window
from connector.models import Chunk
from connector.pipeline import Pipeline
from connector.settings import EmbedSettings, Settings
from connector.worker import Worker
from tests.conftest import FIXTURES


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def _np(v) -> np.ndarray:
    return v.to_numpy() if hasattr(v, "to_numpy") else np.asarray(v)


def _insert_chunk(conn, doc: int, ordinal: int, mean, windows) -> int:
    chunk = conn.execute(
        "INSERT INTO connector.chunks (document_id, ordinal, text, token_count, start_char, end_char, embedding, "
        "strategy, embed_windows) VALUES (%s, %s, %s, 1, 0, 1, %s, 'x', %s) RETURNING id",
        (doc, ordinal, f"chunk {ordinal}", _unit(mean), len(windows)),
    ).fetchone()[0]
    for no, w in enumerate(windows if len(windows) > 1 else []):  # as the writer: one window is the chunk's vector
        conn.execute(
            "INSERT INTO connector.chunk_windows (chunk_id, window_no, start_char, end_char, embedding) "
            "VALUES (%s, %s, 0, 1, %s)",
            (chunk, no, _unit(w)),
        )
    return chunk


def test_a_chunk_is_ranked_by_its_best_window_blended_with_its_mean(migrated_dsn: str) -> None:
    """`long`: a long chunk one of whose windows is exactly the question, its mean far from it; `even`: a chunk whose
    only window (and so its mean) is fairly close. Best window only → long first; mean only → even first; the
    default blend (0.5) → long first, with the score of the blend."""
    dim = 384
    q = np.zeros(dim)
    q[0] = 1
    on, off, near = np.zeros(dim), np.zeros(dim), np.zeros(dim)
    on[0] = 1
    off[1] = 1
    near[0], near[1] = 0.8, 0.6
    long_mean = on + off  # cosine 0.71 to the question
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        register_vector(conn)
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content, status) VALUES ('d', 'x', 'done') RETURNING id"
        ).fetchone()[0]
        long_id = _insert_chunk(conn, doc, 0, long_mean, [off, on, off, off])
        even_id = _insert_chunk(conn, doc, 1, near, [near])

        def ranked(weight: float):
            return conn.execute(
                "SELECT chunk_id, score FROM connector.search(%s, NULL, 2, '{}', 0.5, %s)", (_unit(q), weight)
            ).fetchall()

        assert [r[0] for r in ranked(1.0)] == [long_id, even_id]
        assert [r[0] for r in ranked(0.0)] == [even_id, long_id]
        blend = conn.execute("SELECT chunk_id, score FROM connector.search(%s, NULL, 2)", (_unit(q),)).fetchall()
    assert [r[0] for r in blend] == [long_id, even_id]
    assert blend[0][1] == pytest.approx(0.5 * 1.0 + 0.5 * float(_unit(long_mean) @ q), abs=1e-5)
    assert blend[1][1] == pytest.approx(0.8, abs=1e-5)


def test_the_pipeline_stores_each_window_with_its_span_and_vector(settings: Settings) -> None:
    """A real document through the real pipeline and MiniLM: each chunk's windows lie inside it, in order, as many
    as `embed_windows` says; a long chunk's windows
    differ from each other and from the mean; a chunk that fits the model has no window rows (its own vector is its
    window). With a heading template, the spans are still in the document."""
    minilm = load("minilm")
    chunking = settings.chunking.forced("recursive_1100")
    text = (FIXTURES / "dockerfile-reference.md").read_text()
    for template in ("{text}", "{heading}\n\n{text}"):
        run_settings = settings.model_copy(
            update={
                "chunking": chunking,
                "embed": settings.embed.model_copy(update={"template": template}),
                "embedder": "minilm",
            }  # fmt: skip
        )
        dsn = settings.dsn.get_secret_value()
        with connect(dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE connector.documents CASCADE")
            conn.execute(
                "INSERT INTO connector.documents (source_key, title, content, mime_type) "
                "VALUES ('dockerfile', 'Dockerfile reference', %s, 'text/markdown'), "
                "('note', 'A note', %s, 'text/plain')",
                (text, "A short note that fits the model's input in one window."),
            )
            ensure_embedding_model(conn, minilm)
            Worker(conn, Pipeline(run_settings, minilm), []).drain(threading.Event())
            register_vector(conn)
            chunks = conn.execute(
                "SELECT id, start_char, end_char, embed_windows, embedding FROM connector.chunks ORDER BY ordinal"
            ).fetchall()
            windows = {
                cid: conn.execute(
                    "SELECT window_no, start_char, end_char, embedding FROM connector.chunk_windows "
                    "WHERE chunk_id = %s ORDER BY window_no",
                    (cid,),
                ).fetchall()
                for cid, *_ in chunks
            }
        assert chunks and any(n > 1 for *_, n, _ in chunks), "the fixture must have chunks past the model's input"
        assert any(n == 1 for *_, n, _ in chunks), "and chunks that fit it"
        for cid, start, end, n, mean in chunks:
            ws = windows[cid]
            if n == 1:  # searched by its own vector (migration 0013)
                assert ws == []
                continue
            assert [w[0] for w in ws] == list(range(n))
            assert all(start <= s <= e <= end for _, s, e, _ in ws)
            assert all(a[2] <= b[1] for a, b in zip(ws, ws[1:], strict=False))
            assert ws[-1][2] >= end - len(text[start:end]) + len(text[start:end].rstrip())
            if template == "{text}":
                assert ws[0][1] == start
            assert not np.allclose(_np(ws[0][3]), _np(ws[1][3]), atol=1e-3)
            cosines = [float(_np(w[3]) @ _np(mean)) for w in ws]
            assert min(cosines) > 0 and sum(cosines) / len(cosines) > 0.3, cosines


def test_the_heading_prefix_of_the_template() -> None:
    template = "{heading}\n\n{text}"
    assert heading_prefix(template, "Guide", ("Install", "Linux")) == "Guide › Install › Linux\n\n"
    assert heading_prefix(template, None, ("Install",)) == "Install\n\n"
    assert heading_prefix(template, None, ()) == ""  # no words: nothing is put before the chunk
    assert heading_prefix("{text}", "Guide", ("Install",)) == ""
    filled = heading_prefix("Document: {title}. Section: {section}.\n{text}", "G{x}", ())
    assert filled == "Document: G{x}. Section: .\n"
    assert heading_prefix("Section: {section}\n{text}", None, ()) == ""  # nothing to say: no prefix at all
    assert suffix("{text}\n\n(from {title})", "Guide", ()) == "\n\n(from Guide)"
    assert suffix("{text}\n\n(from {title})", None, ()) == ""


def test_the_template_setting_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("CONNECTOR_EMBED_TEMPLATE", "{title}\\n{text}")  # `\n` as an environment variable holds it
    assert Settings().embed_template == "{title}\n{text}"
    for bad in ("{heading}", "{text} {text}", "{text} {author}", "{text} {"):
        with pytest.raises(ValidationError, match="template"):
            EmbedSettings(template=bad)


@given(
    prefix=st.integers(0, 60),
    size=st.integers(1, 400),
    cuts=st.lists(st.integers(0, 460), max_size=6),
    start=st.integers(0, 10_000),
)
def test_window_spans_map_into_the_chunk_exactly(prefix: int, size: int, cuts: list[int], start: int) -> None:
    """Windows tiling the embedded text (heading prefix + chunk) map to consecutive spans inside the chunk that
    together cover it."""
    total = prefix + size
    bounds = sorted({0, total, *(c for c in cuts if c < total)})
    chunk = Chunk(text="x" * size, start=start, end=start + size, token_count=1)
    mapped = [_in_document(Window(a, b, None), chunk, prefix) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert all(chunk.start <= w.start <= w.end <= chunk.end for w in mapped)
    assert all(a.end == b.start for a, b in zip(mapped, mapped[1:], strict=False))
    assert mapped[0].start == chunk.start and mapped[-1].end == chunk.end


def test_migration_0007_gives_older_chunks_one_window_and_downgrades(dsn: str) -> None:
    migrate(dsn, 384, "0006")
    v = _unit(np.arange(384) + 1.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content, status) VALUES ('old', 'x', 'done') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO connector.chunks (document_id, ordinal, text, token_count, start_char, end_char, embedding, "
            "strategy, embed_windows) VALUES (%s, 0, 'old chunk', 2, 0, 9, %s, 'x', 3)",
            (doc, v),
        )
    windows = "SELECT window_no, start_char, end_char, embedding FROM connector.chunk_windows"
    migrate(dsn, 384, "0007")
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        rows = conn.execute(windows).fetchall()
        assert len(rows) == 1 and rows[0][:3] == (0, 0, 9) and np.allclose(_np(rows[0][3]), v, atol=1e-6)
        assert conn.execute("SELECT text, strategy FROM connector.search(%s)", (v,)).fetchall() == [("old chunk", "x")]
    migrate(dsn, 384)  # 0013: a single window is the chunk's own vector; it goes, the search still finds the chunk
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        assert conn.execute(windows).fetchall() == []
        found = conn.execute("SELECT text, score FROM connector.search(%s)", (v,)).fetchall()
        assert [t for t, _ in found] == ["old chunk"] and found[0][1] == pytest.approx(1.0, abs=1e-5)
    migrate(dsn, 384, "0012", downgrade=True)  # and comes back
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        rows = conn.execute(windows).fetchall()
        assert len(rows) == 1 and rows[0][:3] == (0, 0, 9) and np.allclose(_np(rows[0][3]), v, atol=1e-6)
        assert conn.execute("SELECT text FROM connector.search(%s)", (v,)).fetchall() == [("old chunk",)]
    migrate(dsn, 384, "0006", downgrade=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        assert conn.execute("SELECT text FROM connector.search(%s, 'old chunk')", (v,)).fetchall() == [("old chunk",)]
        assert conn.execute("SELECT to_regclass('connector.chunk_windows')").fetchone() == (None,)


def test_migration_0013_keeps_windows_of_long_chunks_only_in_both_slots_and_downgrades(dsn: str) -> None:
    """A short chunk (one window) and a long one (two), in the active slot and in a reembed's standby slot: 0013
    removes the short chunk's window rows from both, builds the window indexes anew, and the search still finds the
    short chunk by its own vector; the downgrade gives it its window back in both slots (from each slot's vector)."""
    migrate(dsn, 384, "0012")
    rng = np.random.default_rng(3)
    short, long_mean, w0, w1, standby = (_unit(rng.standard_normal(384)) for _ in range(5))
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content, status) VALUES ('d', 'x', 'done') RETURNING id"
        ).fetchone()[0]
        ids = {}
        for name, vector, n in (("short", short, 1), ("long", long_mean, 2)):
            ids[name] = conn.execute(
                "INSERT INTO connector.chunks (document_id, ordinal, text, token_count, start_char, end_char, "
                "embedding, strategy, embed_windows) VALUES (%s, %s, %s, 2, 0, 5, %s, 'x', %s) RETURNING id",
                (doc, n, f"{name} chunk", vector, n),
            ).fetchone()[0]
        conn.execute("ALTER TABLE connector.chunks ADD COLUMN standby_embedding vector(384)")
        conn.execute(
            "CREATE TABLE connector.standby_windows (chunk_id bigint NOT NULL REFERENCES connector.chunks (id) "
            "ON DELETE CASCADE, window_no integer NOT NULL, start_char integer NOT NULL, end_char integer NOT NULL, "
            "embedding vector(384) NOT NULL, CONSTRAINT standby_windows_pkey PRIMARY KEY (chunk_id, window_no))"
        )
        conn.execute("UPDATE connector.chunks SET standby_embedding = %s", (standby,))
        for table in ("chunk_windows", "standby_windows"):
            conn.execute(f"DELETE FROM connector.{table}")
            first = short if table == "chunk_windows" else standby
            for cid, no, vector in ((ids["short"], 0, first), (ids["long"], 0, w0), (ids["long"], 1, w1)):
                conn.execute(
                    f"INSERT INTO connector.{table} (chunk_id, window_no, start_char, end_char, embedding) "
                    "VALUES (%s, %s, 0, 5, %s)",
                    (cid, no, vector),
                )

    def windows(conn, table: str) -> list:
        return conn.execute(f"SELECT chunk_id, window_no FROM connector.{table} ORDER BY 1, 2").fetchall()

    migrate(dsn, 384)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        for table in ("chunk_windows", "standby_windows"):
            assert windows(conn, table) == [(ids["long"], 0), (ids["long"], 1)]
        found = conn.execute("SELECT chunk_id, score FROM connector.search(%s, NULL, 1)", (short,)).fetchall()
        assert found[0][0] == ids["short"] and found[0][1] == pytest.approx(1.0, abs=1e-5)
        # the long chunk is still ranked by its best window (blended with its mean)
        found = conn.execute("SELECT chunk_id, score FROM connector.search(%s, NULL, 1)", (w1,)).fetchall()
        assert found[0][0] == ids["long"]
        assert found[0][1] == pytest.approx(0.5 + 0.5 * float(long_mean @ w1), abs=1e-5)
        assert conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'chunk_windows_embedding_hnsw' AND i.indisvalid"
        ).fetchone() == (1,)
    migrate(dsn, 384, "0012", downgrade=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        for table, vector in (("chunk_windows", short), ("standby_windows", standby)):
            assert windows(conn, table) == [(ids["short"], 0), (ids["long"], 0), (ids["long"], 1)]
            back = conn.execute(
                f"SELECT embedding FROM connector.{table} WHERE chunk_id = %s", (ids["short"],)
            ).fetchone()[0]
            assert np.allclose(_np(back), vector, atol=1e-6)
        found = conn.execute("SELECT chunk_id FROM connector.search(%s, NULL, 1)", (short,)).fetchall()
        assert found == [(ids["short"],)]


REEMBED = "UPDATE connector.documents SET content_hash = NULL, status = 'pending', retries = 0 WHERE status = 'done';"


def test_the_readmes_reembed_statement_re_embeds_stored_documents(settings: Settings) -> None:
    """Documents stored with one template are embedded anew with another after the README's statement."""
    from pathlib import Path

    assert REEMBED in (Path(__file__).parents[1] / "README.md").read_text()
    dsn = settings.dsn.get_secret_value()
    fake = load("fake")
    text = "## Volumes\n\nDocker volumes keep data outside the container, and survive its removal.\n"

    def drain(template: str) -> list:
        run_settings = settings.model_copy(update={"embed": settings.embed.model_copy(update={"template": template})})
        with connect(dsn, autocommit=True) as conn:
            Worker(conn, Pipeline(run_settings, fake), []).drain(threading.Event())
            register_vector(conn)
            return [_np(r[0]) for r in conn.execute("SELECT embedding FROM connector.chunks ORDER BY id")]

    with connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO connector.documents (source_key, title, content, mime_type) "
            "VALUES ('d', 'Engine guide', %s, 'text/markdown')",
            (text,),
        )
        ensure_embedding_model(conn, fake)
    plain = drain("{text}")
    assert np.allclose(drain("{heading}\n\n{text}")[0], plain[0])  # nothing queued: the stored one is left alone
    with connect(dsn, autocommit=True) as conn:
        assert conn.execute(REEMBED).rowcount == 1
    contextual = drain("{heading}\n\n{text}")
    with psycopg.connect(dsn) as conn:
        chunk_text, section_path = conn.execute("SELECT text, section_path FROM connector.chunks").fetchone()
    assert section_path == ["Volumes"]
    expected = fake.embed([heading_prefix("{heading}\n\n{text}", "Engine guide", tuple(section_path)) + chunk_text])
    assert len(contextual) == 1 and not np.allclose(plain[0], contextual[0])
    assert np.allclose(contextual[0], expected.vectors[0], atol=1e-6)

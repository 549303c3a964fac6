"""`connector.search()` and `connector.search_context()` (migration 0006) on a real Postgres, over documents the
real pipeline stored: vector and hybrid ranking on a corpus whose answers are known, filters, neighbours, the HNSW
index on a realistic table, and `connector search` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import threading

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

from connector.db.database import connect, ensure_embedding_model
from connector.embedders import load
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.worker import Worker
from tests.conftest import FIXTURES, child_env, connector_cmd

TOPICS = {
    "volumes": "Docker volumes keep data outside the container. Mount a volume with the VOLUME instruction, and the "
    "data survives when the container is removed. Named volumes are managed by the engine.",
    "healthcheck": "The HEALTHCHECK instruction tells the engine how to test that a container still works. A "
    "failing check marks the container unhealthy after the configured number of retries.",
    "flux": "The XJ42 flux capacitor needs a calibration before first use. Calibration takes ninety seconds and is "
    "repeated after every firmware update of the capacitor board.",
    "licence": "The licence grants a perpetual, worldwide, non-exclusive, no-charge, royalty-free, irrevocable "
    "copyright licence to reproduce, prepare derivative works of, publicly display and distribute the work.",
}


def queue_corpus(dsn: str, manual_key: str = "manual/dockerfile") -> int:
    """Each topic as its own document (with metadata), plus a long real document whose chunks have neighbours;
    queued, not processed. The number of documents queued."""
    with connect(dsn, autocommit=True) as conn:
        for i, (key, text) in enumerate(TOPICS.items()):
            conn.execute(
                "INSERT INTO connector.documents (source_key, content, metadata) VALUES (%s, %s, %s)",
                (f"topics/{key}", text, Jsonb({"kind": "topic", "n": i})),
            )
        conn.execute(
            "INSERT INTO connector.documents (source_key, content, metadata, mime_type) "
            "VALUES (%s, %s, %s, 'text/markdown')",
            (manual_key, (FIXTURES / "dockerfile-reference.md").read_text(), Jsonb({"kind": "manual"})),
        )
    return len(TOPICS) + 1


@pytest.fixture
def corpus(settings: Settings) -> str:
    """The corpus above, processed by the real pipeline (fake embedder)."""
    dsn = settings.dsn.get_secret_value()
    n = queue_corpus(dsn)
    with connect(dsn, autocommit=True) as conn:
        ensure_embedding_model(conn, load("fake"))  # as `connector run` records it
        Worker(conn, Pipeline(settings, load("fake")), []).drain(threading.Event())
        assert conn.execute("SELECT count(*) FROM connector.documents WHERE status = 'done'").fetchone() == (n,)
    return dsn


def _search(dsn: str, question: str | None, k: int = 5, filter: dict | None = None, vector_of: str | None = None):
    vector = load("fake").embed([vector_of or question or ""]).vectors[0]
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        return conn.execute(
            "SELECT source_key, chunk_id, score, chunk_type FROM connector.search(%s, %s, %s, %s)",
            (vector, question, k, Jsonb(filter or {})),
        ).fetchall()


def test_vector_search_ranks_the_chunk_that_answers_first(corpus: str) -> None:
    hits = _search(corpus, None, vector_of="how do I keep data when a container is removed? mount a volume")
    assert hits[0][0] == "topics/volumes"
    scores = [h[2] for h in hits]
    assert scores == sorted(scores, reverse=True) and len(hits) == 5
    assert _search(corpus, None, vector_of="calibration of the flux capacitor")[0][0] == "topics/flux"


def test_hybrid_search_fuses_full_text_with_vectors(corpus: str) -> None:
    # The question's vector points at the licence, its words at the capacitor: fusion keeps both near the top,
    # where vectors alone never see the capacitor.
    vector_only = _search(corpus, None, k=3, vector_of="perpetual worldwide royalty-free copyright licence")
    assert "topics/flux" not in [h[0] for h in vector_only]
    with psycopg.connect(corpus) as conn:
        register_vector(conn)
        vector = load("fake").embed(["perpetual worldwide royalty-free copyright licence"]).vectors[0]
        fused = conn.execute(
            "SELECT source_key, score FROM connector.search(%s, 'XJ42 capacitor calibration', 3)", (vector,)
        ).fetchall()
    keys = [k for k, _ in fused]
    assert "topics/flux" in keys and "topics/licence" in keys
    assert all(0 < s <= 2 / 61 for _, s in fused), "reciprocal rank fusion scores"


def test_filters_narrow_by_metadata_source_prefix_and_chunk_type(corpus: str) -> None:
    question = "the container engine"
    assert {h[0] for h in _search(corpus, question, 20, {"metadata": {"kind": "topic"}})} <= {
        f"topics/{k}" for k in TOPICS
    }
    assert {h[0] for h in _search(corpus, question, 20, {"source_key_prefix": "manual/"})} == {"manual/dockerfile"}
    assert _search(corpus, question, 5, {"source": "folder"}) == []
    assert {h[3] for h in _search(corpus, question, 50, {"chunk_type": ["code", "table"]})} <= {"code", "table"}
    assert {h[3] for h in _search(corpus, question, 50, {"chunk_type": "text"})} == {"text"}
    with psycopg.connect(corpus) as conn, pytest.raises(psycopg.errors.RaiseException, match="k must be at least 1"):
        register_vector(conn)
        conn.execute("SELECT * FROM connector.search(%s, NULL, 0)", (np.ones(384, dtype=np.float32),))


def test_search_context_joins_a_hit_with_its_neighbours(corpus: str) -> None:
    with psycopg.connect(corpus) as conn:
        middle = conn.execute(
            "SELECT c.id, c.ordinal FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "WHERE d.source_key = 'manual/dockerfile' ORDER BY c.ordinal OFFSET 3 LIMIT 1"
        ).fetchone()
        expected = conn.execute(
            "SELECT substr(d.markdown, min(c.start_char) + 1, max(c.end_char) - min(c.start_char)), min(c.id), "
            "max(c.id) FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id "
            "WHERE d.source_key = 'manual/dockerfile' AND c.ordinal BETWEEN %s AND %s GROUP BY d.markdown",
            (middle[1] - 1, middle[1] + 1),
        ).fetchone()
        passage = conn.execute(
            "SELECT text, first_chunk_id, last_chunk_id FROM connector.search_context(%s)", (middle[0],)
        ).fetchone()
        alone = conn.execute("SELECT text FROM connector.search_context(%s, 0)", (middle[0],)).fetchone()
        hit_text = conn.execute("SELECT text FROM connector.chunks WHERE id = %s", (middle[0],)).fetchone()
    assert passage == expected
    assert alone == hit_text and hit_text[0] in passage[0] and len(passage[0]) > len(hit_text[0])


def test_search_uses_the_hnsw_index_on_a_realistic_table(settings: Settings) -> None:
    """20,000 chunks (40,000 windows) of random vectors: the search's vector arm is two HNSW index scans, of the
    windows and of the chunks, never a scan of all rows, with a filter or without."""
    dsn = settings.dsn.get_secret_value()
    rng = np.random.default_rng(7)
    with connect(dsn, autocommit=True) as conn:
        doc = conn.execute(
            "INSERT INTO connector.documents (source_key, content, status, markdown) VALUES ('big', 'x', 'done', 'x') "
            "RETURNING id"
        ).fetchone()[0]
        # Loaded without the HNSW indexes, which are built afterwards, as one would load a table this size: one
        # build is several times faster than 60,000 graph insertions. (The chunks' waits for a large table anyway.)
        conn.execute("DROP INDEX connector.chunk_windows_embedding_hnsw")
        assert conn.execute("SELECT to_regclass('connector.chunks_embedding_hnsw')").fetchone() == (None,)
        with conn.cursor().copy(
            "COPY connector.chunks (id, document_id, ordinal, text, token_count, start_char, end_char, embedding, "
            "strategy) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "int8", "int4", "text", "int4", "int4", "int4", "vector", "text"])
            for i in range(20_000):
                copy.write_row((i + 1, doc, i, f"chunk {i}", 2, 0, 1, rng.standard_normal(384).astype(np.float32), "x"))
        with conn.cursor().copy(
            "COPY connector.chunk_windows (chunk_id, window_no, start_char, end_char, embedding) "
            "FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int8", "int4", "int4", "int4", "vector"])
            for i in range(20_000):
                for w in range(2):
                    copy.write_row((i + 1, w, 0, 1, rng.standard_normal(384).astype(np.float32)))
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute(
            "CREATE INDEX chunk_windows_embedding_hnsw ON connector.chunk_windows "
            "USING hnsw (embedding vector_cosine_ops)"
        )
        # What a worker does once the table has CONNECTOR_SEARCH_VECTOR_INDEX_MIN_CHUNKS chunks (migration 0015).
        assert conn.execute("SELECT connector.build_vector_index(20001)").fetchone() == (False,)
        assert conn.execute("SELECT connector.build_vector_index(20000)").fetchone() == (True,)
        for table in ("chunks", "chunk_windows", "documents"):
            conn.execute(f"ANALYZE connector.{table}")
        query = rng.standard_normal(384).astype(np.float32)
        plans = {
            name: "\n".join(
                r[0]
                for r in conn.execute(
                    "EXPLAIN SELECT * FROM connector.search_windows(%s, %s, 80)", (query, Jsonb(filter))
                )
            )
            for name, filter in {"none": {}, "metadata": {"metadata": {"kind": "x"}}}.items()
        }
        hits = conn.execute("SELECT count(*) FROM connector.search(%s)", (query,)).fetchone()
        filtered = conn.execute(
            "SELECT count(*) FROM connector.search(%s, NULL, 10, %s)", (query, Jsonb({"source_key_prefix": "bi"}))
        ).fetchone()
    for plan in plans.values():  # two walks: the long chunks' windows, and every chunk by its own vector
        assert "chunk_windows_embedding_hnsw" in plan and "Seq Scan on chunk_windows" not in plan, plan
        assert "chunks_embedding_hnsw" in plan and "Seq Scan on chunks" not in plan, plan
    assert hits == (10,) and filtered == (10,)


def test_connector_search_command(corpus: str, tmp_path) -> None:
    env = child_env(tmp_path)
    out = subprocess.run(
        connector_cmd("search", "mount a volume to keep data", "--dsn", corpus, "--embedder", "fake", "--json",
                      "--k", "3", "--context", "1"),
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 3 and rows[0]["source_key"] == "topics/volumes" and rows[0]["context"]["text"]
    table = subprocess.run(
        connector_cmd("search", "flux capacitor calibration", "--dsn", corpus, "--embedder", "fake"),
        capture_output=True, text=True, env={**env, "COLUMNS": "200"}, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    first_row = next(line for line in table.stdout.splitlines() if line.startswith("│ 1 "))
    assert table.returncode == 0 and "topics/flux" in first_row, table.stdout
    # Configured for another model (minilm), it prints the vector of the model the database's vectors came from.
    literal = subprocess.run(
        connector_cmd("search", "flux capacitor calibration", "--print-vector", "--dsn", corpus,
                      "--embedder", "minilm"),
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    ).stdout.strip()  # fmt: skip
    from connector.embedders import load
    from connector.search import query_vector, vector_literal

    assert literal == vector_literal(query_vector(load("fake"), "flux capacitor calibration"))
    with psycopg.connect(corpus) as conn:  # what a user pastes into psql
        first = conn.execute(
            f"SELECT source_key FROM connector.search('{literal}'::vector, 'flux capacitor calibration', 1)"
        ).fetchone()
    assert first == ("topics/flux",)
    # Another configured model does not matter: a search embeds with the model the database's vectors came from.
    other = subprocess.run(
        connector_cmd("search", "flux capacitor calibration", "--json", "--k", "1", "--dsn", corpus,
                      "--embedder", "minilm"),
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)[0]["source_key"] == "topics/flux"


def test_the_readmes_psql_search_snippet_works_when_pasted(corpus: str, tmp_path) -> None:
    """The README's psql block, run as written (psql's `\\set` runs `.venv/bin/connector search --print-vector`)."""
    import re
    import shutil

    from tests.conftest import REPO

    if shutil.which("psql") is None:
        pytest.fail("psql (Debian's postgresql-client) is needed to check the README's psql snippet")
    readme = (REPO / "README.md").read_text()
    block = next(b for b in re.findall(r"```sql\n(.*?)```", readme, re.S) if "\\set q" in b)
    (tmp_path / "snippet.sql").write_text(block)
    env = {**child_env(tmp_path), "CONNECTOR_EMBEDDER": "fake", "CONNECTOR_DSN": corpus}  # psql's database
    with psycopg.connect(corpus, autocommit=True) as conn:  # the snippet's folder filter: give one key that prefix
        conn.execute(
            "UPDATE connector.documents SET source_key = 'manuals/dockerfile' WHERE source_key LIKE 'manual/%'"
        )
    out = subprocess.run(
        ["psql", corpus, "-v", "ON_ERROR_STOP=1", "-f", str(tmp_path / "snippet.sql")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "(5 rows)" in out.stdout and "(3 rows)" in out.stdout and "manuals/dockerfile" in out.stdout, out.stdout


def test_the_python_client_searches_with_the_databases_model(corpus: str, settings: Settings) -> None:
    import connector

    with connector.Client(corpus, settings) as client:
        results = client.search("mount a volume to keep data", 3, context=1)
        vector_only = client.search("mount a volume to keep data", 3, hybrid=False)
        only_manual = client.search("container", 5, filter={"source_key_prefix": "manual/"})
    assert results[0].hit.source_key == "topics/volumes" and results[0].passage is not None
    assert vector_only[0].hit.source_key == "topics/volumes"
    assert only_manual and {r.hit.source_key for r in only_manual} == {"manual/dockerfile"}
    # configured for another model, it still searches with the database's own (the fake one: same answers)
    with connector.Client(corpus, settings.model_copy(update={"embedder": "minilm"})) as client:
        again = client.search("mount a volume to keep data", 3, context=1)
    assert [r.hit.chunk_id for r in again] == [r.hit.chunk_id for r in results]


def test_the_langchain_retriever_returns_documents_with_their_place(corpus: str, settings: Settings) -> None:
    import connector
    from connector.integrations.langchain import ConnectorRetriever

    with connector.Client(corpus, settings) as client:
        docs = ConnectorRetriever(client=client, k=2).invoke("flux capacitor calibration")
        with_context = ConnectorRetriever(client=client, k=1, context=1, filter={"source_key_prefix": "manual/"})
        [passage] = with_context.invoke("the HEALTHCHECK instruction")
    assert docs[0].metadata["source_key"] == "topics/flux" and "XJ42" in docs[0].page_content
    assert {"chunk_id", "section_path", "page_start", "chunk_type", "score"} <= set(docs[0].metadata)
    assert passage.metadata["first_chunk_id"] < passage.metadata["last_chunk_id"]
    assert passage.metadata["source_key"] == "manual/dockerfile"


def test_the_readmes_python_search_snippets_run(corpus: str, monkeypatch, capsys) -> None:
    import re

    from tests.conftest import REPO

    blocks = [b for b in re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S) if "DSN)" in b]
    assert len(blocks) == 3, "the client, LangChain and LlamaIndex snippets"
    monkeypatch.setenv("CONNECTOR_EMBEDDER", "fake")  # the corpus was embedded with the fake model
    namespace: dict = {"DSN": corpus}
    outputs = []
    for block in blocks:
        exec(block, namespace)  # noqa: S102 - the README's own code, as a user pastes it
        outputs.append(capsys.readouterr().out)
        if "retriever" in namespace:  # each retriever snippet opens a client of its own
            namespace.pop("retriever").client.close()
    client_out, _, llama_index_out = outputs
    assert "topics/volumes" in client_out
    assert namespace["docs"] and namespace["docs"][0].page_content
    assert re.search(r"^[\d.]+ chunk:\d+ topics/volumes document:\d+$", llama_index_out, re.M), llama_index_out

"""The batch path against a real Postgres: a worker claims many rows at once and writes the finished ones in one
transaction. Each row keeps its claim token, a bad document fails alone, a reader never sees a document without
chunks, and a row whose worker died is claimed alone. Also the KEDA scaler's query, run as KEDA runs it."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

import psycopg
import pytest
import yaml

from connector.db.database import connect, ensure_embedding_model
from connector.db.rows import GivenBack
from connector.db.store import Store
from connector.embedders.fake import FakeEmbedder
from connector.errors import TransientError
from connector.pipeline import Pipeline
from connector.settings import EmbedSettings, Settings
from connector.worker import Worker
from tests.conftest import FIXTURES
from tests.dbchecks import assert_consistent, lease_ends
from tests.embed_stub import EmbeddingStub

K8S = Path(__file__).parent.parent / "docker" / "k8s"
PARAGRAPHS = [p for p in (FIXTURES / "apache-2.0.txt").read_text().split("\n\n") if len(p.split()) > 20]


def _insert(conn: psycopg.Connection, n: int, prefix: str = "row") -> list[int]:
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO connector.documents (source_key, content) VALUES (%s, %s) RETURNING id",
            [(f"{prefix}-{i:03d}", _text(i)) for i in range(n)],
            returning=True,
        )
        ids = []
        while True:
            ids.append(cur.fetchone()[0])
            if not cur.nextset():
                return ids


def _text(i: int, version: int = 0) -> str:
    return f"Row {i}, version {version}.\n\n" + "\n\n".join(PARAGRAPHS[(i + k) % len(PARAGRAPHS)] for k in range(3))


class CorruptingPipeline(Pipeline):
    """The real pipeline, except that the outcome of rows whose text says "poison" carries a NUL character in a
    chunk: Postgres refuses it (text cannot hold NUL), so that document's write fails inside the batch's."""

    def embed(self, chosen):
        outcomes = super().embed(chosen)
        for i, outcome in enumerate(outcomes):
            if "poison" in outcome.document.markdown:
                first = outcome.chunks[0]
                bad = dataclasses.replace(first, chunk=dataclasses.replace(first.chunk, text=first.chunk.text + "\x00"))
                outcomes[i] = dataclasses.replace(outcome, chunks=(bad, *outcome.chunks[1:]))
        return outcomes


def _spoil(conn: psycopg.Connection, unwritable: int, corrupt: int) -> None:
    """One row whose write fails (see `CorruptingPipeline`), one whose conversion does (a truncated PDF)."""
    conn.execute("UPDATE connector.documents SET content = content || ' poison' WHERE id = %s", (unwritable,))
    conn.execute("UPDATE connector.documents SET content = NULL, content_bytes = %s, mime_type = "
                 "'application/pdf' WHERE id = %s", (b"%PDF-1.7 truncated", corrupt))  # fmt: skip


def _status(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM connector.documents GROUP BY 1").fetchall())


def test_a_batch_is_claimed_at_once_and_written_in_one_transaction(settings: Settings, monkeypatch) -> None:
    import connector.worker

    monkeypatch.setattr(connector.worker, "FLUSH_SECONDS", 3600.0)  # a slow machine must not split a batch's write
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 12)
        worker = Worker(conn, Pipeline(settings.model_copy(update={"batch_size": 5}), FakeEmbedder()), [])
        rows = worker.store.claim_batch(60, "w", (), 5, 10**9)
        assert [r.id for r in rows] == sorted(r.id for r in rows) and len(rows) == 5
        assert len({r.attempts for r in rows}) == 1 and all(r.attempts == 1 for r in rows), "a token per row"
        worker.store.release_mine("w")
        assert worker.drain(threading.Event()) == 12
        assert _status(conn) == {"done": 12}
        # 12 rows: a batch of 5, then (that claim full: the queue is deep) one of up to 10, the other 7; a commit of
        # the documents' rows each, with its whole batch.
        batches = conn.execute(
            "SELECT count(DISTINCT processed_at) FROM connector.documents"  # now() is the transaction's start
        ).fetchone()[0]
        assert batches == 2
        assert_consistent(conn)


def test_the_byte_cap_bounds_a_batch_but_never_refuses_its_first_row(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 6)
        sizes = [n for (n,) in conn.execute("SELECT octet_length(content) FROM connector.documents ORDER BY id")]
        store = Store(conn)
        assert len(store.claim_batch(60, "a", (), 32, 1)) == 1, "one row over the cap is still a batch"
        assert len(store.claim_batch(60, "b", (), 32, sizes[1] + sizes[2])) == 2
        assert len(store.claim_batch(60, "c", (), 32, 10**9)) == 3, "what is left"


def test_the_byte_cap_counts_every_content_column_a_claim_fetches(settings: Settings) -> None:
    """A row may hold both content columns (an empty `content_bytes` beside its text, say): the claim returns both,
    so both count. Counting the first non-NULL one took 20 rows of 3 MB under a 4 MB cap."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 20)
        conn.execute("UPDATE connector.documents SET content = repeat('x', 3000000), content_bytes = ''::bytea")
        conn.execute("UPDATE connector.documents SET content_bytes = convert_to(content, 'UTF8'), content = 'y' "
                     "WHERE id = %s", (ids[1],))  # fmt: skip
        store = Store(conn)
        assert [r.id for r in store.claim_batch(60, "a", (), 32, 4_000_000)] == ids[:1]
        assert [r.id for r in store.claim_batch(60, "b", (), 32, 4_000_000)] == ids[1:2], "bytes and text both"
        assert len(store.claim_batch(60, "c", (), 32, 7_000_000)) == 2


def test_a_row_claimed_again_meanwhile_is_dropped_from_the_batch_and_the_rest_is_written(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as other:
        ids = _insert(conn, 4)
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        rows = worker.store.claim_batch(60, "w", (), 4, 10**9)
        ready = [worker.prepare(r) for r in rows]
        # Meanwhile row 2's content changes (requeued) and another worker claims and finishes it.
        other.execute("UPDATE connector.documents SET content = %s WHERE id = %s", (_text(99, 1), ids[1]))
        stolen = Store(other).claim_batch(60, "other", (), 1, 10**9)
        assert [r.id for r in stolen] == [ids[1]] and stolen[0].attempts == 2
        assert Worker(other, Pipeline(settings, FakeEmbedder()), []).process(stolen[0]) == "done"
        assert worker._write(ready) == ["done", "superseded", "done", "done"]
        joined = "SELECT document_id, string_agg(text, ' ') FROM connector.chunks GROUP BY document_id"
        texts = dict(conn.execute(joined).fetchall())
        assert "Row 99, version 1" in texts[ids[1]], "the newer pass's chunks stand"
        assert _status(conn) == {"done": 4}
        assert_consistent(conn)


def test_one_document_that_cannot_be_written_or_converted_fails_alone(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 9)
        _spoil(conn, unwritable=ids[3], corrupt=ids[6])
        s = settings.model_copy(update={"batch_size": 9, "max_attempts": 1})
        worker = Worker(conn, CorruptingPipeline(s, FakeEmbedder()), [])
        results: dict[int, str] = {}
        worker.drain(threading.Event(), lambda row, result: results.__setitem__(row.id, result))
        assert results[ids[3]] == "failed" and results[ids[6]] == "failed"
        assert [results[i] for i in ids if i not in (ids[3], ids[6])] == ["done"] * 7
        errors = dict(conn.execute("SELECT id, last_error FROM connector.documents WHERE status = 'failed'"))
        assert "0x00" in errors[ids[3]] or "NUL" in errors[ids[3]], errors[ids[3]]
        assert set(errors) == {ids[3], ids[6]}
        assert conn.execute("SELECT count(DISTINCT document_id) FROM connector.chunks").fetchone() == (7,)
        assert_consistent(conn)


def test_readers_never_see_a_done_document_without_chunks_or_a_mix_of_versions(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    stop = threading.Event()
    seen: list[tuple] = []

    def read() -> None:
        with psycopg.connect(dsn, autocommit=True) as reader:
            while not stop.is_set():
                # One snapshot: done documents without chunks, and documents whose chunks mix two versions.
                seen.append(reader.execute("""
                    SELECT (SELECT count(*) FROM connector.documents d WHERE status = 'done'
                            AND NOT EXISTS (SELECT 1 FROM connector.chunks c WHERE c.document_id = d.id)),
                           (SELECT count(*) FROM (SELECT document_id FROM connector.chunks
                                                  GROUP BY document_id
                                                  HAVING count(DISTINCT substring(text FROM 'version (\\d+)')) > 1) m)
                """).fetchone())  # fmt: skip

    with connect(dsn, autocommit=True) as conn:
        ids = _insert(conn, 30)
        worker = Worker(conn, Pipeline(settings.model_copy(update={"batch_size": 8}), FakeEmbedder()), [])
        reader = threading.Thread(target=read)
        reader.start()
        try:
            assert worker.drain(threading.Event()) == 30
            for version in (1, 2):  # every document replaced, twice, while the reader reads
                with conn.cursor() as cur:
                    cur.executemany("UPDATE connector.documents SET content = %s WHERE id = %s",
                                    [(_text(i, version), doc) for i, doc in enumerate(ids)])  # fmt: skip
                assert worker.drain(threading.Event()) == 30
        finally:
            stop.set()
            reader.join()
        assert len(seen) > 10, "the reader read while the batches were written"
        assert set(seen) == {(0, 0)}
        assert conn.execute("SELECT count(*) FROM connector.chunks WHERE text LIKE '%%version 2%%'").fetchone()[0] == 30
        assert_consistent(conn)


def test_a_batch_is_embedded_in_one_request_an_endpoint_down_requeues_it_and_a_refused_input_fails_alone(
    settings: Settings,
) -> None:
    from connector.embedders import close, load

    dsn = settings.dsn.get_secret_value()
    with EmbeddingStub(dim=384, key="sk-batch") as stub, connect(dsn, autocommit=True) as conn:
        embed = EmbedSettings(base_url=stub.base_url, api_key="sk-batch", dimensions=384, max_retries=0, batch_size=256)
        model = load("openai", embed)
        try:
            ids = _insert(conn, 10)
            s = settings.model_copy(update={"embedder": "openai", "embed": embed, "batch_size": 5,
                                            "retry_base_seconds": 60})  # fmt: skip
            ensure_embedding_model(conn, model)
            worker = Worker(conn, Pipeline(s, model), [])
            stub.requests.clear()
            assert worker.drain(threading.Event()) == 10
            chunks = conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0]
            assert len(stub.requests) == 2, "two batches of five documents: one request each"
            assert len(stub.texts) == chunks

            def requeue(version: int, poison: int | None = None) -> None:
                with conn.cursor() as cur:
                    cur.executemany("UPDATE connector.documents SET content = %s WHERE id = %s",
                                    [(_text(i, version) + (" poison" if i == poison else ""), doc)
                                     for i, doc in enumerate(ids[:5])])  # fmt: skip
                conn.execute("UPDATE connector.documents SET retry_after = NULL")  # no backoff to wait out
                stub.requests.clear()

            # The endpoint is down (500, no retries left): not any one document's fault, all five back to the queue
            # after the one request, not five more.
            requeue(1)
            stub.fail = [("500",)]
            results: list[str] = []
            worker.drain(threading.Event(), lambda _row, result: results.append(result))
            assert results[:5] == ["retry"] * 5 and len(stub.requests) == 1
            # An input the endpoint refuses: the batch is embedded again one document at a time; only that one fails.
            requeue(2, poison=2)
            stub.refuse = "poison"
            results.clear()
            worker.drain(threading.Event(), lambda row, result: results.append((row.id, result)))
            assert dict(results) == {**{doc: "done" for doc in ids[:5]}, ids[2]: "failed"}
            assert "refused" in conn.execute("SELECT last_error FROM connector.documents WHERE id = %s",
                                             (ids[2],)).fetchone()[0]  # fmt: skip
            assert _status(conn) == {"done": 9, "failed": 1}
            # A zero vector for one input (a faulty model on that text): the batch is embedded again one document
            # at a time, and only that document pays a try; before, all five did.
            stub.refuse = None
            requeue(3, poison=3)
            stub.zero = "poison"
            results.clear()
            worker.drain(threading.Event(), lambda row, result: results.append((row.id, result)))
            assert dict(results) == {**{doc: "done" for doc in ids[:5]}, ids[3]: "retry"}
            row = conn.execute("SELECT status, retries, last_error FROM connector.documents WHERE id = %s",
                               (ids[3],)).fetchone()  # fmt: skip
            assert row == ("pending", 1, "the embedding endpoint answered a zero vector, which no search can rank")
            assert conn.execute("SELECT count(*) FROM connector.documents WHERE retries > 0 AND id <> ALL(%s)",
                                ([ids[2], ids[3]],)).fetchone()[0] == 0  # fmt: skip
            assert_consistent(conn)
        finally:
            close(model)


class OutageWhileEmbedding(Pipeline):
    """The real pipeline, but the database ends the worker's connection while the batch is being embedded: the
    outage lands while the worker is busy elsewhere, before its write begins."""

    def __init__(self, *args, admin: psycopg.Connection, **kwargs):
        super().__init__(*args, **kwargs)
        self.admin = admin
        self.backend: int | None = None

    def embed(self, chosen):
        self.admin.execute("SELECT pg_terminate_backend(%s)", (self.backend,))
        return super().embed(chosen)


def test_a_connection_lost_before_the_write_costs_the_batch_no_try(settings: Settings) -> None:
    """Only the rows being written when the connection died are suspects (each claimed again alone, a try counted):
    the write itself may have ended it. An outage found at the write's BEGIN, before any of it was sent, used to be
    charged to the whole batch as well."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as admin, connect(dsn, autocommit=True) as conn:
        ids = _insert(admin, 6)
        pipeline = OutageWhileEmbedding(settings, FakeEmbedder(), admin=admin)
        pipeline.backend = conn.info.backend_pid
        worker = Worker(conn, pipeline, [], name="w")
        with pytest.raises(TransientError, match="lost before a write"):
            worker.drain(threading.Event())
        assert worker.lost_while_writing == [], "no row was being written"
    with connect(dsn, autocommit=True) as conn:  # as the sidecar does on reconnecting
        assert Store(conn).release_mine("w", worker.lost_while_writing, "lost") == GivenBack(0, 6)
        rows = conn.execute("SELECT status, retries, claimed_by FROM connector.documents WHERE id = ANY(%s)",
                            (ids,)).fetchall()  # fmt: skip
        assert rows == [("pending", 0, None)] * 6
        assert Worker(conn, Pipeline(settings, FakeEmbedder()), []).drain(threading.Event()) == 6
        assert _status(conn) == {"done": 6}
        assert_consistent(conn)


def test_a_write_that_committed_before_its_reply_was_lost_is_not_given_back(settings: Settings) -> None:
    """A partition that drops the COMMIT's reply: the write went through, the worker saw the connection lost while
    writing and, reconnected, gives back what it held, its batch's rows as suspects. They are done and stay so, and
    the count said so: the log claimed "4 being written then: each tried again alone" of 4 done documents."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn:
        ids = _insert(conn, 4)
        Store(conn).claim_batch(60, "w", [], 8, 10**9)
        conn.execute("UPDATE connector.documents SET status = 'done', lease_expires_at = NULL, claimed_by = NULL "
                     "WHERE id = ANY(%s)", (ids[:2],))  # fmt: skip  # as the batch's committed write left them
        assert Store(conn).release_mine("w", ids[:2], "lost") == GivenBack(abandoned=0, released=2)
        assert _status(conn) == {"done": 2, "pending": 2}


def test_a_reconnecting_worker_gives_back_its_rows_without_waiting_for_its_old_session(settings: Settings) -> None:
    """A replica cut off by a partition in the middle of a batch's COPY reconnects (the partition healed) while the
    server still runs its old session, waiting for the rest of the COPY with the batch's rows locked. Giving back
    what it held waited for those locks: measured, the reconnected worker sat in that UPDATE, claiming nothing, for
    as long as the old session lived (the server's keepalives: two hours by default). It now gives back the rows it
    can and leaves the locked ones to their lease, as the claim and the heartbeat do."""
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as old:
        ids = _insert(conn, 4)
        rows = Store(conn).claim_batch(60, "w", [], 8, 10**9)
        assert [r.id for r in rows] == ids
        old.execute("BEGIN")  # the session of before the loss, mid-write: two of the rows locked
        old.execute("SELECT id FROM connector.documents WHERE id = ANY(%s) FOR UPDATE", (ids[:2],))
        given: list[int] = []
        back = threading.Thread(target=lambda: given.append(Store(conn).release_mine("w", ids[:1] + ids[2:3], "lost")))
        back.start()
        back.join(30)
        stalled = back.is_alive()
        old.rollback()  # the server ends it at last
        back.join()
        assert not stalled, "giving back waited for the old session's locks"
        assert given == [GivenBack(1, 1)]
        found = conn.execute("SELECT id, status, claimed_by, lease_expires_at < now() FROM connector.documents "
                             "ORDER BY id").fetchall()  # fmt: skip
        assert found == [
            (ids[0], "processing", "w", False),  # locked: left to its lease
            (ids[1], "processing", "w", False),
            (ids[2], "processing", None, True),  # a suspect, abandoned: claimed again alone
            (ids[3], "pending", None, None),
        ]


def test_a_row_whose_worker_died_is_claimed_alone(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 6)
        store = Store(conn)
        dead = store.claim_batch(1, "dies", (), 4, 10**9)  # then the process is killed: no heartbeat, no result
        assert len(dead) == 4
        conn.execute("UPDATE connector.documents SET lease_expires_at = now() - interval '1 s' "
                     "WHERE status = 'processing'")  # fmt: skip
        for expected in dead:  # each abandoned row on its own: one of them may be what killed the worker
            again = store.claim_batch(60, "next", (), 4, 10**9)
            assert [(r.id, r.retries) for r in again] == [(expected.id, 1)]
        assert len(store.claim_batch(60, "next", (), 4, 10**9)) == 2, "then batches again"


def test_the_keda_scalers_query_counts_what_status_calls_ready(settings: Settings) -> None:
    manifests = list(yaml.safe_load_all((K8S / "keda-scaledobject.yaml").read_text()))
    scaled = next(m for m in manifests if m["kind"] == "ScaledObject")
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "postgresql"
    query = trigger["metadata"]["query"]
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 9)
        store = Store(conn)
        store.claim_batch(60, "busy", (), 2, 10**9)  # processing, leased
        conn.execute("UPDATE connector.documents SET status = 'pending', retry_after = now() + interval '1 h' "
                     "WHERE id = %s", (ids[2],))  # backing off  # fmt: skip
        conn.execute("UPDATE connector.documents SET status = 'failed' WHERE id = %s", (ids[3],))
        conn.execute("UPDATE connector.documents SET status = 'done' WHERE id = %s", (ids[4],))
        conn.execute("UPDATE connector.documents SET retry_after = now() - interval '1 s' WHERE id = %s", (ids[5],))
        # A file, which only a sidecar watching its folder claims: these --no-watch replicas never would.
        conn.execute("UPDATE connector.documents SET source = 'folder', file_path = '/inbox/a.txt' WHERE id = %s",
                     (ids[6],))  # fmt: skip
        lease_ends(conn, ids[0])  # its holder died: claimable again
        depth = store.queue_depth()
        # KEDA runs the query as it stands, as a plain SELECT, and reads one integer.
        (value,) = conn.execute(query).fetchone()
        assert value == depth["ready"] == 4, (value, depth)
        assert depth == {"ready": 4, "ready_files": 1, "backing_off": 1, "processing": 1, "done": 1, "failed": 1}
        claimed = 0  # what a --no-watch replica claims now (the dead one's row alone, then the others)
        while batch := store.claim_batch(60, "replica", (), 100, 10**9):
            claimed += len(batch)
        assert claimed == value


def _strict(schema: dict) -> dict:
    """A CRD's schema as the API server applies it with strict field validation (kubectl's default since 1.27):
    a field the schema does not name is an error, except where it keeps unknown fields."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        keeps_unknown = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in schema and not keeps_unknown:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


def test_the_kubernetes_manifests_are_valid_for_the_api_server_and_keda() -> None:
    """The Deployment and the Secret against Kubernetes' own schemas (kubernetes-validate, strict: no unknown
    field); KEDA's objects against the CRDs KEDA installs (tests/fixtures/keda, v2.20.2)."""
    import jsonschema
    import kubernetes_validate

    crds = {}
    for path in sorted((FIXTURES / "keda").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            crds[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = version["schema"]
    checked = []
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert all((K8S / name).is_file() for name in kustomization["resources"])
    for path in sorted(set(K8S.glob("*.yaml")) - {K8S / "kustomization.yaml"}):
        for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
            key = (doc["apiVersion"], doc["kind"])
            if key in crds:
                jsonschema.validate(doc, _strict(crds[key]["openAPIV3Schema"]))
            else:
                kubernetes_validate.validate(doc, "1.33", strict=True)
            checked.append(doc["kind"])
    assert sorted(checked) == ["Deployment", "ScaledObject", "Secret", "TriggerAuthentication"]
    # The checks can fail: a misspelt field is refused by each.
    so = next(
        d for p in K8S.glob("keda*.yaml") for d in yaml.safe_load_all(p.read_text()) if d["kind"] == "ScaledObject"
    )
    so["spec"]["minReplicas"] = so["spec"].pop("minReplicaCount")
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        jsonschema.validate(so, _strict(crds[("keda.sh/v1alpha1", "ScaledObject")]["openAPIV3Schema"]))
    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.33", strict=True)


def test_the_kubernetes_manifests_use_settings_and_commands_that_exist() -> None:
    from typer.main import get_command

    from connector.cli import app

    docs = [d for f in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    known = {f"CONNECTOR_{name.upper()}" for name in Settings.model_fields}
    commands = get_command(app).commands
    for container in spec["containers"] + spec["initContainers"]:
        assert container["args"][0] in commands, container["args"]
        for env in container.get("env", []):
            assert env["name"] in known or env["name"].startswith("CONNECTOR_EMBED_"), env["name"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    grace = int(env["CONNECTOR_SHUTDOWN_GRACE_SECONDS"])
    assert spec["terminationGracePeriodSeconds"] > grace, "the batch in hand is finished or handed back before SIGKILL"
    probe = spec["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["path"] == "/health"
    # Liveness asks nothing of the database (see test_http_search: /live answers 200 while it is down): on /health,
    # an outage restarted every replica into crash-loop backoff.
    from connector.web.app import PATHS

    assert spec["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/live" and "/live" in PATHS
    # The longest document allowed fits the memory limit beside the models (a pod OOM-killed on each of its tries
    # otherwise): measured ~40 MB of the replica's memory per MB of text at its peak (1,943 MB for 50 MB), ~700 MB
    # for the sidecar and two pool processes loaded.
    limit = spec["containers"][0]["resources"]["limits"]["memory"]
    limit_mb = int(limit.removesuffix("Gi")) * 1024 if limit.endswith("Gi") else int(limit.removesuffix("Mi"))
    assert 40 * float(env["CONNECTOR_MAX_DOCUMENT_MB"]) + 700 <= limit_mb


@pytest.mark.parametrize("size", [1, 7])
def test_the_ingest_path_still_writes_one_document_per_transaction(settings: Settings, size: int) -> None:
    # `connector ingest` and `eval` call Worker.process row by row: the same write, a batch of one.
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, size)
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        while (row := worker.store.claim_next(60, "w")) is not None:
            assert worker.process(row) == "done"
            assert worker.held == []
        assert _status(conn) == {"done": size}
        assert_consistent(conn)


def test_a_worker_back_from_an_outage_takes_the_other_replicas_expired_rows_without_counting_a_try(
    settings: Settings, caplog
) -> None:
    """A database outage longer than the lease ends every replica's leases; the first replica back claimed the
    others' rows as its dead peers' (each alone, a try counted) while those peers were still reconnecting: five such
    outages failed innocent rows. For a while after reconnecting (the lease and the longest reconnection wait), a
    worker takes such rows without counting a try; after that, a row whose holder died costs one again."""
    from connector.embedders.fake import FakeEmbedder
    from connector.pipeline import Pipeline
    from connector.worker import Worker

    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 4)
        peer = Store(conn).claim_batch(60, "peer", (), 2, 10**9)  # the other replica, cut off by the outage
        for i in ids[:2]:
            lease_ends(conn, i)
        back = Worker(conn, Pipeline(settings, FakeEmbedder()), [], name="back")
        back.forgive_abandoned_until = time.monotonic() + 60  # what the sidecar sets on a reconnection
        with caplog.at_level(logging.INFO, logger="connector.worker"):
            assert back.drain(threading.Event()) == 4
        rows = conn.execute("SELECT id, status FROM connector.documents ORDER BY id").fetchall()
        assert rows == [(i, "done") for i in ids], rows
        processing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("processing")]
        assert len(processing) == 4 and not [m for m in processing if "(try" in m], processing  # no try counted
        assert len(peer) == 2
        # Later, a row whose holder died costs a try again.
        conn.execute("UPDATE connector.documents SET status = 'pending' WHERE id = %s", (ids[0],))
        Store(conn).claim_batch(60, "peer", (), 1, 10**9)
        lease_ends(conn, ids[0])
        back.forgive_abandoned_until = time.monotonic()
        [row] = back.store.claim_batch(60, "back", (), 4, 10**9, time.monotonic() >= back.forgive_abandoned_until)
        assert (row.id, row.retries, row.abandoned) == (ids[0], 1, True)


def test_a_suspect_row_costs_its_try_even_right_after_a_reconnection(settings: Settings) -> None:
    """What a worker gives up on purpose (a write cut short by a lost connection: `abandon`, no holder named) counts
    its try however soon it is claimed: forgiving it too let a row that kills the connection loop for good."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        ids = _insert(conn, 2)
        store = Store(conn)
        suspect, other = store.claim_batch(60, "w", (), 2, 10**9)
        assert store.abandon(suspect, "the database connection was lost while it was being written")
        lease_ends(conn, other.id)  # its holder, named, still reconnecting
        first = store.claim_batch(60, "back", (), 4, 10**9, count_abandoned=False)
        second = store.claim_batch(60, "back", (), 4, 10**9, count_abandoned=False)
        assert [(r.id, r.retries, r.abandoned) for r in first + second] == [(ids[0], 1, True), (ids[1], 0, True)]


def test_claims_grow_while_the_queue_is_deep_and_start_again_small_when_it_is_not(settings: Settings) -> None:
    """A batch's own costs (its claim, a dozen statements, a commit) were a fifth of a short row's: a worker whose
    claims come back full asks for twice as many next time, up to four times the batch size; a claim that comes
    back short starts again from the batch size, so that a few rows are still spread over workers and replicas."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        _insert(conn, 100)
        worker = Worker(conn, Pipeline(settings.model_copy(update={"batch_size": 8}), FakeEmbedder()), [])
        claims: list[tuple[int, int]] = []  # (asked for, got)
        claim = worker.store.claim_batch

        def recorded(lease, name, roots, limit, max_bytes, counts):
            rows = claim(lease, name, roots, limit, max_bytes, counts)
            claims.append((limit, len(rows)))
            return rows

        worker.store.claim_batch = recorded
        assert worker.drain(threading.Event()) == 100
        # 8 + 16 + 32 + 32 = 88 rows, then 12 of the 32 asked for, then none (from the batch size again).
        assert claims == [(8, 8), (16, 16), (32, 32), (32, 32), (32, 12), (8, 0)], claims
        _insert(conn, 5, "late")
        assert worker.drain(threading.Event()) == 5
        assert claims[-2:] == [(8, 5), (8, 0)], "a shallow queue: claims stay at the batch size"
        assert _status(conn) == {"done": 105}
        assert_consistent(conn)

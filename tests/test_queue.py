"""The shared queue in-process against a real Postgres: leases and heartbeats, transient failures with backoff and a
try cap, `retry`, rows that requeue on content changes, and users' tables watched through triggers."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psycopg
import pytest

from connector.db.database import connect
from connector.db.rows import DocumentKey
from connector.db.store import Store
from connector.embedders.base import Embeddings
from connector.embedders.fake import FakeEmbedder
from connector.errors import TransientError
from connector.ingest import ingest, select
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.sources import folder
from connector.sources import table as tables
from connector.worker import Worker
from tests.dbchecks import assert_consistent, backoff_ends, backoff_left, lease_ends
from tests.test_batches import _status

TEXT = "The queue is a table. Workers claim rows from it with SKIP LOCKED and a lease. " * 20


class TimingOutEmbedder(FakeEmbedder):
    """An embedding endpoint that times out the first `failures` calls (fault injection; the math is FakeEmbedder's)."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    def embed(self, texts: list[str]) -> Embeddings:
        if self.failures > 0:
            self.failures -= 1
            raise TransientError("embedding endpoint timed out after 30 s")
        return super().embed(texts)


class SlowEmbedder(FakeEmbedder):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def embed(self, texts: list[str]) -> Embeddings:
        time.sleep(self.seconds)
        return super().embed(texts)


def _insert(conn: psycopg.Connection, key: str, text: str = TEXT) -> int:
    return conn.execute(
        "INSERT INTO connector.documents (source_key, content) VALUES (%s, %s) RETURNING id", (key, text)
    ).fetchone()[0]


def _row(conn: psycopg.Connection, doc_id: int) -> tuple:
    return conn.execute(
        "SELECT status, retries, last_error, retry_after > now(), attempts FROM connector.documents WHERE id = %s",
        (doc_id,),
    ).fetchone()


def test_transient_failures_back_off_then_fail_after_max_attempts_and_retry_requeues(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = _insert(conn, "flaky")
        worker = Worker(conn, Pipeline(settings.model_copy(update={"max_attempts": 3, "retry_base_seconds": 60}),
                                TimingOutEmbedder(3)), [])  # fmt: skip
        store = worker.store
        assert worker.process(store.claim_next(60, "w")) == "retry"
        status, retries, error, waiting, _ = _row(conn, doc)
        assert (status, retries, waiting) == ("pending", 1, True) and "timed out" in error
        assert 55 < backoff_left(conn, doc) <= 60
        assert store.claim_next(60, "w") is None, "backing off: not claimable yet"
        backoff_ends(conn, doc)
        assert worker.process(store.claim_next(60, "w")) == "retry"  # second try: the backoff doubles
        assert 115 < backoff_left(conn, doc) <= 120
        assert store.claim_next(60, "w") is None
        backoff_ends(conn, doc)
        assert worker.process(store.claim_next(60, "w")) == "failed"  # third try: the cap
        status, retries, error, _, attempts = _row(conn, doc)
        assert (status, retries, attempts) == ("failed", 3, 3) and "timed out" in error
        assert store.claim_next(60, "w") is None

        assert store.retry_failed(str(doc)) == [DocumentKey(doc, "flaky")]
        assert _row(conn, doc)[:2] == ("pending", 0)
        assert worker.process(store.claim_next(60, "w")) == "done"  # the endpoint is back
        assert_consistent(conn)


def test_a_dead_workers_lease_expires_counts_as_a_try_and_a_poison_document_is_given_up(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = _insert(conn, "poison")
        # An error from an earlier try (the database restarted under it): not why the workers that died since did.
        conn.execute("UPDATE connector.documents SET last_error = 'database error: terminating connection'")
        store = Store(conn)
        for expected_retries in range(3):
            row = store.claim_next(60, "dies")  # claimed, then the worker "dies": no heartbeat, no result
            assert row.retries == expected_retries
            assert store.claim_next(60, "other") is None, "leased: nobody else may take it"
            lease_ends(conn, doc)
        row = store.claim_batch(60, "w", [], 32, 10**9)[0]  # as a worker's loop claims
        assert row.retries == 3 and row.abandoned
        assert (
            Worker(conn, Pipeline(settings.model_copy(update={"max_attempts": 3}), FakeEmbedder()), []).process(row)
            == "failed"
        )
        status, _, error, _, _ = _row(conn, doc)
        assert status == "failed" and "gave up after 3 tries" in error
        assert "terminating connection" not in error, "a worker that died said nothing: no older error is its reason"


def test_a_document_given_up_with_a_reason_fails_with_it_once_out_of_tries(settings: Settings) -> None:
    """A worker that gives a document up says why (its CPU pool process was stopped past its deadline, say): the
    document that runs out of tries that way fails with that reason, not only "gave up after N tries"."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = _insert(conn, "hangs")
        store = Store(conn)
        for expected_retries in range(2):
            row = store.claim_batch(60, "w", [], 32, 10**9)[0]
            assert row.retries == expected_retries
            assert store.abandon(row, "it ran past its deadline (300 s) and its CPU pool process was stopped")
        row = store.claim_batch(60, "w", [], 32, 10**9)[0]
        assert row.retries == 2 and row.abandoned
        worker = Worker(conn, Pipeline(settings.model_copy(update={"max_attempts": 2}), FakeEmbedder()), [])
        assert worker.process(row) == "failed"
        status, _, error, _, _ = _row(conn, doc)
        assert status == "failed" and error.startswith("gave up after 2 tries")
        assert error.endswith("the last time: it ran past its deadline (300 s) and its CPU pool process was stopped")


def test_the_heartbeat_keeps_a_long_document_leased(settings: Settings) -> None:
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as conn, connect(dsn, autocommit=True) as other:
        doc = _insert(conn, "slow")
        worker = Worker(conn, Pipeline(settings.model_copy(update={"lease_seconds": 1}), SlowEmbedder(2.5)), [])
        row = worker.store.claim_next(1, "slow-worker")
        result: list[str] = []
        thread = threading.Thread(target=lambda: result.append(worker.process(row)))
        thread.start()
        stolen = []
        while thread.is_alive():  # the lease is 1 s; the document takes 2.5 s
            stolen.append(Store(other).claim_next(1, "thief"))
            time.sleep(0.2)
        thread.join()
        assert result == ["done"] and not any(stolen)
        assert _row(conn, doc)[4] == 1, "claimed once"


def test_content_updates_requeue_other_updates_do_not_and_delete_removes_chunks(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        doc = _insert(conn, "row")
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])
        assert worker.drain(threading.Event()) == 1
        conn.execute("UPDATE connector.documents SET title = 'renamed', metadata = '{\"a\": 1}' WHERE id = %s", (doc,))
        assert _row(conn, doc)[0] == "done"
        conn.execute("UPDATE connector.documents SET content = %s WHERE id = %s", (TEXT + " More.", doc))
        assert _row(conn, doc)[0] == "pending"
        assert worker.drain(threading.Event()) == 1
        assert conn.execute("SELECT count(*) FROM connector.chunks WHERE text LIKE '%%More.%%'").fetchone()[0] == 1
        conn.execute("DELETE FROM connector.documents WHERE id = %s", (doc,))
        assert conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0] == 0


HTML = "<h1>Queue</h1>\n<p>" + TEXT + "</p>\n<h2>Leases</h2>\n<p>" + TEXT + "</p>\n"


class RetypedWhileChosen(Pipeline):
    """The real pipeline, except that the row's type is corrected by someone else while its chunks are chosen."""

    def embed(self, chosen):
        with psycopg.connect(self.settings.dsn.get_secret_value(), autocommit=True) as other:
            other.execute("UPDATE connector.documents SET mime_type = 'text/html' WHERE mime_type = 'text/plain'")
        return super().embed(chosen)


@pytest.mark.parametrize("when", ["after", "while processing"])
def test_a_row_whose_type_is_corrected_is_converted_again(settings: Settings, when: str) -> None:
    """Changing a row's `mime_type` requeues it, but its bytes hash as before: the worker found it "unchanged" and
    the HTML stored as text kept its chunks with the tags in them, however often the type was corrected."""
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        insert = "INSERT INTO connector.documents (source_key, content_bytes, mime_type) VALUES ('page', %s, %s)"
        doc = conn.execute(insert + " RETURNING id", (HTML.encode(), "text/plain")).fetchone()[0]
        pipeline = (RetypedWhileChosen if when != "after" else Pipeline)(settings, FakeEmbedder())
        once = threading.Event()  # one pass: the drain would take the requeued row again at once
        assert Worker(conn, pipeline, []).drain(once, lambda *_: once.set()) == 1
        tags = "SELECT count(*) FROM connector.chunks WHERE document_id = %s AND text LIKE '%%<h1>%%'"
        assert conn.execute(tags, (doc,)).fetchone()[0] == 1, "read as text, the tags are in the chunks"
        if when == "after":
            conn.execute("UPDATE connector.documents SET mime_type = 'text/html' WHERE id = %s", (doc,))
        assert _row(conn, doc)[0] == "pending"
        results: list[str] = []
        Worker(conn, Pipeline(settings, FakeEmbedder()), []).drain(threading.Event(), lambda _, r: results.append(r))
        assert results == ["done"], "converted again, not found unchanged"
        assert conn.execute(tags, (doc,)).fetchone()[0] == 0, "read as HTML: no tag left"
        assert conn.execute("SELECT markdown LIKE '# Queue%%' FROM connector.documents").fetchone()[0]
        assert_consistent(conn)


def test_a_watched_table_flows_into_the_queue(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA app")
        conn.execute("CREATE TABLE app.articles (id int PRIMARY KEY, body text, headline text, lang text, views int)")
        conn.execute("INSERT INTO app.articles VALUES (1, %s, 'One', 'en', 0)", (TEXT,))
        watched = tables.watch(conn, "app.articles", "id", "body", "headline", ["lang"])
        assert (watched.table, watched.queued) == ("app.articles", 1)
        assert tables.watch(conn, "app.articles", "id", "body", "headline", ["lang"]).queued == 1  # idempotent
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [])

        def docs() -> dict[str, tuple]:
            rows = conn.execute(
                "SELECT source_key, status, title, metadata ->> 'lang' FROM connector.documents WHERE source = 'table'"
            ).fetchall()
            return {k: rest for k, *rest in rows}

        conn.execute("INSERT INTO app.articles VALUES (2, %s, 'Two', 'de', 0)", (TEXT + " Zwei.",))
        assert worker.drain(threading.Event()) == 2
        assert docs() == {
            "app.articles:1": ["done", "One", "en"],
            "app.articles:2": ["done", "Two", "de"],
        }
        conn.execute("UPDATE app.articles SET views = views + 1")  # not a watched column
        assert {s for s, *_ in docs().values()} == {"done"}
        conn.execute("UPDATE app.articles SET body = body || ' Changed.' WHERE id = 1")
        assert docs()["app.articles:1"][0] == "pending"
        assert worker.drain(threading.Event()) == 1
        conn.execute("UPDATE app.articles SET headline = 'Uno' WHERE id = 1")  # watched, text unchanged
        assert docs()["app.articles:1"][:2] == ["done", "Uno"]
        conn.execute("DELETE FROM app.articles WHERE id = 2")
        assert set(docs()) == {"app.articles:1"}
        conn.execute("TRUNCATE app.articles")
        assert docs() == {} and conn.execute("SELECT count(*) FROM connector.chunks").fetchone()[0] == 0

        assert tables.unwatch(conn, "app.articles") == ("app.articles", 0)
        conn.execute("INSERT INTO app.articles VALUES (3, 'after', 'Three', 'en', 0)")
        assert docs() == {}
        triggers = conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'app.articles'::regclass")
        assert triggers.fetchone()[0] == 0


def test_a_table_name_carrying_sql_injects_nothing(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("CREATE TABLE victims (id int)")
        conn.execute('CREATE TABLE "odd ""name"" x" (id int, "the text" text)')
        for evil in ("victims; DROP TABLE victims", "victims(id); DROP TABLE victims; --", 'public."victims"'):
            with pytest.raises(tables.WatchError, match="no such table"):
                tables.watch(conn, evil, "id", "id")
        with pytest.raises(tables.WatchError, match="no column"):
            tables.watch(conn, "victims", "id", "body); DROP TABLE victims; --")
        assert conn.execute("SELECT to_regclass('victims')").fetchone()[0] is not None
        # A real table whose name needs quoting works, columns with spaces too.
        conn.execute('INSERT INTO "odd ""name"" x" VALUES (7, %s)', (TEXT,))
        watched = tables.watch(conn, 'public.odd "name" x', "id", "the text")
        assert watched.queued == 1
        key = conn.execute("SELECT source_key FROM connector.documents WHERE source = 'table'").fetchone()[0]
        assert key == 'public."odd ""name"" x":7'


def test_a_file_deleted_between_its_event_and_its_read_fails_with_a_clear_message(settings: Settings, tmp_path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    path = inbox / "gone.txt"
    path.write_text(TEXT)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        assert store.enqueue_file("gone.txt", path, "text/plain", "some-hash") is not None
        path.unlink()
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox])
        assert worker.process(store.claim_next(60, "w", [inbox])) == "failed"
        status, _, error, _, _ = conn.execute(
            "SELECT status, retries, last_error, retry_after, attempts FROM connector.documents"
        ).fetchone()
        assert status == "failed" and "file no longer exists" in error


def test_a_worker_serving_only_the_table_leaves_folder_rows_to_the_watchers(settings: Settings, tmp_path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text(TEXT)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        store.enqueue_file("a.txt", inbox / "a.txt", "text/plain", "h")
        assert store.claim_next(60, "table-only worker", []) is None, "a --no-watch worker must not fail it"
        row = store.claim_next(60, "watcher", [inbox])
        assert row is not None and row.source_key == "a.txt"


def test_a_sidecar_leaves_the_files_of_folders_it_does_not_read_to_those_that_do(settings: Settings, tmp_path) -> None:
    """A file `connector ingest` read from elsewhere, queued again (`connector retry`, the README's re-embed UPDATE),
    was claimed by the sidecar watching its own folder and failed: "outside the folders this connector reads" (the
    last error overwritten, the try counted). Replicas watching different folders did the same to each other's."""
    inbox, other, sibling = tmp_path / "inbox", tmp_path / "elsewhere", tmp_path / "inbox2"
    for where in (inbox, other, sibling):
        where.mkdir()
        (where / "a.txt").write_text(TEXT)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        pipeline = Pipeline(settings, FakeEmbedder())
        selection = select([other / "a.txt"])
        assert ingest(conn, pipeline, selection).counts["done"] == 1
        conn.execute("UPDATE connector.documents SET status = 'pending', content_hash = NULL WHERE status = 'done'")
        store.enqueue_file("sibling/a.txt", sibling / "a.txt", "text/plain", "h")  # `inbox` is no prefix of `inbox2`
        before = conn.execute("SELECT source_key, attempts FROM connector.documents ORDER BY 1").fetchall()
        watcher = Worker(conn, pipeline, [inbox])
        assert watcher.drain(threading.Event()) == 0
        assert store.claim_batch(60, "inbox's", [inbox], 32, 10**9) == []
        assert conn.execute("SELECT source_key, attempts FROM connector.documents ORDER BY 1").fetchall() == before
        assert _status(conn) == {"pending": 2}, "waiting, untried, for a process that reads their folder"
        # Whoever reads the folder takes it: `connector ingest` again, a sidecar on that folder (by any spelling).
        assert ingest(conn, pipeline, selection).counts["done"] == 1
        assert Worker(conn, pipeline, [sibling / ".." / "inbox2"]).drain(threading.Event()) == 1
        assert _status(conn) == {"done": 2}
        assert_consistent(conn)


def test_a_watched_folder_found_at_another_path_takes_its_waiting_rows_along(settings: Settings, tmp_path) -> None:
    """Rows queued under /srv/a, the sidecar restarted on the same folder at /srv/b: its rescan found the same bytes
    (nothing to queue), so the rows kept their old paths, and no worker would claim them (they used to fail as
    "outside the folders" and be queued again)."""
    old, new = tmp_path / "a" / "inbox", tmp_path / "b" / "inbox"
    old.mkdir(parents=True)
    new.parent.mkdir()
    (old / "x.txt").write_text(TEXT)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        assert folder.handle(store, old, old / "x.txt", 10**7) is not None
        old.rename(new)
        assert folder.handle(store, new, new / "x.txt", 10**7) is None, "the same bytes: nothing queued again"
        assert Worker(conn, Pipeline(settings, FakeEmbedder()), [new]).drain(threading.Event()) == 1
        assert _status(conn) == {"done": 1}


def test_a_folder_renamed_while_its_rows_are_held_is_read_where_it_went(settings: Settings, tmp_path) -> None:
    """A worker holding a batch read each file at the path it was claimed with: a folder renamed meanwhile (the
    watcher moving the rows' keys and paths) failed them all, "file no longer exists", at their new keys and for
    good (a rescan took them for read). Now it reads them where they went; a rescan looks again at a row that
    failed before its file was read."""
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    for i in range(3):
        (inbox / "sub" / f"f{i}.txt").write_text(f"File {i} of a folder about to be renamed. " * 20)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        for i in range(3):
            folder.handle(store, inbox, inbox / "sub" / f"f{i}.txt", 10**7)
        rows = store.claim_batch(60, "w", [inbox], 32, 10**9)
        (inbox / "sub").rename(inbox / "renamed")  # the watcher's move event, applied:
        assert len(store.rename_folder_documents(inbox, "sub", "renamed")) == 3
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox])
        assert [worker.process(row) for row in rows] == ["done"] * 3
        assert _status(conn) == {"done": 3}
        keys = conn.execute("SELECT source_key FROM connector.documents ORDER BY 1").fetchall()
        assert keys == [(f"renamed/f{i}.txt",) for i in range(3)]
        assert_consistent(conn)

        # Renamed before the watcher saw it: the worker finds no file anywhere and fails the row, unread.
        (inbox / "renamed" / "f0.txt").write_text("New bytes. " * 30)
        assert folder.handle(store, inbox, inbox / "renamed" / "f0.txt", 10**7) is not None
        claimed = store.claim_next(60, "w", [inbox])
        (inbox / "renamed" / "f0.txt").rename(inbox / "renamed" / "elsewhere.tmp")
        assert worker.process(claimed) == "failed"
        (inbox / "renamed" / "elsewhere.tmp").rename(inbox / "renamed" / "f0.txt")  # back, and the event lost
        touched: list[Path] = []
        folder.rescan(store, inbox, False, touched.append)
        assert touched == [inbox / "renamed" / "f0.txt"], "a rescan looks at it again, and at nothing else"
        assert folder.handle(store, inbox, inbox / "renamed" / "f0.txt", 10**7) is not None, "queued again"


def test_bytes_replaced_at_the_same_size_and_mtime_while_nobody_watched_are_read_again(settings: Settings) -> None:
    """`rsync -a`, `cp -p`, `tar x` replace a file's bytes and set its mtime back: at the same size, a rescan took it
    for unchanged and the database kept the old content for good. Its ctime, which no tool sets back, gives it away;
    a file left alone is still not read, nor queued."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    (inbox / "kept.txt").write_text("A file nobody touches while the sidecar is down. " * 40)
    synced = inbox / "synced.txt"
    synced.write_text("The first version of the release notes. " * 40)
    assert folder.scan(settings, dsn) == 2
    with connect(dsn, autocommit=True) as conn:
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox])
        assert worker.drain(threading.Event()) == 2

        old = synced.stat()
        synced.write_text("The final version of the release notes. " * 40)  # the sidecar is down
        os.utime(synced, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert (synced.stat().st_size, synced.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
        assert folder.scan(settings, dsn) == 1, "the replaced file is queued again, the one left alone is not"
        pending = conn.execute("SELECT source_key FROM connector.documents WHERE status = 'pending'").fetchall()
        assert pending == [("synced.txt",)]
        assert worker.drain(threading.Event()) == 1
        markdown = conn.execute("SELECT markdown FROM connector.documents WHERE source_key = 'synced.txt'").fetchone()
        assert "final version" in markdown[0] and "first version" not in markdown[0]
        assert_consistent(conn)

        touched: list[Path] = []
        folder.rescan(Store(conn), inbox.resolve(), False, touched.append)
        assert touched == [], "an unchanged folder is rescanned without reading its files"


def test_rows_hashed_before_the_ctime_was_recorded_are_hashed_once_not_queued(settings: Settings) -> None:
    """Rows written before migration 0017 have no ctime: the next rescan reads their files once, records it, and
    queues nothing whose bytes are the row's."""
    dsn = settings.dsn.get_secret_value()
    inbox = settings.watch_dir
    inbox.mkdir(parents=True)
    (inbox / "old.txt").write_text("A file hashed by a connector that did not record ctimes. " * 40)
    assert folder.scan(settings, dsn) == 1
    with connect(dsn, autocommit=True) as conn:
        assert Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox]).drain(threading.Event()) == 1
        conn.execute("UPDATE connector.documents SET file_ctime_ns = NULL")
        store = Store(conn)
        touched: list[Path] = []
        folder.rescan(store, inbox.resolve(), False, touched.append)
        assert touched == [inbox.resolve() / "old.txt"], "read once"
        assert folder.scan(settings, dsn) == 0, "the same bytes: nothing queued"
        assert _status(conn) == {"done": 1}
        ctime = conn.execute("SELECT file_ctime_ns FROM connector.documents").fetchone()[0]
        assert ctime == (inbox / "old.txt").stat().st_ctime_ns
        touched.clear()
        folder.rescan(store, inbox.resolve(), False, touched.append)
        assert touched == [], "and not again"


def test_only_their_owner_can_attach_the_watch_functions(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        grants = conn.execute(
            "SELECT count(*) FROM information_schema.routine_privileges "
            "WHERE routine_schema = 'connector' AND routine_name LIKE 'watch_%%' AND grantee = 'PUBLIC'"
        ).fetchone()
        assert grants == (0,)
        conn.execute("CREATE ROLE intruder LOGIN")
        conn.execute("CREATE TABLE public.intruders_table (id int, body text)")
        conn.execute("ALTER TABLE public.intruders_table OWNER TO intruder")
        conn.execute("GRANT USAGE ON SCHEMA connector TO intruder")
        conn.execute("SET ROLE intruder")
        try:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "CREATE TRIGGER forge AFTER INSERT ON public.intruders_table FOR EACH ROW "
                    "EXECUTE FUNCTION connector.watch_row('public.guarded', 'id', 'body', '')"
                )
        finally:
            conn.execute("RESET ROLE")
            conn.execute("DROP TABLE public.intruders_table")
            conn.execute("REVOKE ALL ON SCHEMA connector FROM intruder")
            conn.execute("DROP ROLE intruder")


def test_log_lines_carry_the_document_in_text_and_json() -> None:
    import json
    import logging

    from connector.logs import formatter

    record = logging.LogRecord("connector.worker", logging.INFO, __file__, 1, "done %s", ("a.txt",), None)
    record.document_id, record.source_key = 7, "a.txt"
    assert formatter("text").format(record).endswith("done a.txt [document_id=7 source_key=a.txt]")
    entry = json.loads(formatter("json").format(record))
    assert entry["message"] == "done a.txt" and entry["document_id"] == 7 and entry["source_key"] == "a.txt"
    plain = logging.LogRecord("connector", logging.INFO, __file__, 1, "sidecar stopped", (), None)
    assert "document_id" not in json.loads(formatter("json").format(plain))


def test_rescans_count_a_crashed_try_and_keep_a_backoff(settings: Settings, tmp_path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.txt").write_text(TEXT)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        doc = store.enqueue_file("a.txt", inbox / "a.txt", "text/plain", "h1")
        store.claim_next(60, "dies", [inbox])  # the process dies holding it; it restarts and rescans the folder
        store.enqueue_file("a.txt", inbox / "a.txt", "text/plain", "h1")
        assert _row(conn, doc)[:2] == ("processing", 0), "a rescan leaves a row in flight to its lease"
        conn.execute("UPDATE connector.documents SET lease_expires_at = now() - interval '1 s' WHERE id = %s", (doc,))
        claimed = store.claim_next(60, "w", [inbox])
        assert claimed.retries == 1, "the crash counted as a try (its lease ran out)"
        store.release(claimed)
        assert _row(conn, doc)[:2] == ("pending", 1)
        conn.execute("UPDATE connector.documents SET retry_after = now() + interval '1 hour' WHERE id = %s", (doc,))
        store.enqueue_file("a.txt", inbox / "a.txt", "text/plain", "h1")  # a cron `run --once` rescans
        assert _row(conn, doc)[:4] == ("pending", 1, None, True), "backoff and budget kept"
        store.enqueue_file("a.txt", inbox / "a.txt", "text/plain", "h1")
        assert store.claim_next(60, "w", [inbox]) is None


def test_a_partitioned_table_can_be_watched(settings: Settings) -> None:
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int, region text, body text) PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE notes_eu PARTITION OF notes FOR VALUES IN ('eu')")
        conn.execute("CREATE TABLE notes_us PARTITION OF notes FOR VALUES IN ('us')")
        assert tables.watch(conn, "notes", "id", "body").table == "public.notes"
        conn.execute("INSERT INTO notes VALUES (1, 'eu', 'one'), (2, 'us', 'two')")
        keys = {r[0] for r in conn.execute("SELECT source_key FROM connector.documents WHERE source = 'table'")}
        assert keys == {"public.notes:1", "public.notes:2"}
        conn.execute("DELETE FROM notes WHERE id = 2")
        conn.execute("TRUNCATE notes")
        assert conn.execute("SELECT count(*) FROM connector.documents").fetchone() == (0,)


def test_rows_are_written_when_no_heartbeat_thread_can_be_started(settings: Settings, monkeypatch) -> None:
    """A sidecar near its memory limit (right after a row too large for it) could not start the thread that renews
    the leases while a batch is embedded and written ("can't start new thread"): every row written meanwhile failed,
    for good, as an internal error. The step now goes on without it."""
    start = threading.Thread.start

    def no_heartbeat(thread: threading.Thread) -> None:
        if thread.name.startswith("heartbeat-"):
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", no_heartbeat)
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        docs = [_insert(conn, f"row-{n}") for n in range(5)]
        results: list[str] = []
        Worker(conn, Pipeline(settings, FakeEmbedder()), []).drain(threading.Event(), lambda _, r: results.append(r))
        assert results == ["done"] * 5
        assert [_row(conn, d)[0] for d in docs] == ["done"] * 5
        assert_consistent(conn)

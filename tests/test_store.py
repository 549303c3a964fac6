"""The store's guarantees, in-process against a real Postgres: atomic replacement, claim tokens, file roots."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from connector.db.database import connect, redact
from connector.db.store import Store
from connector.embedders import load
from connector.errors import DocumentError
from connector.pipeline import Pipeline
from connector.settings import Settings
from connector.worker import Worker
from tests.conftest import FIXTURES


def _pipeline(settings: Settings) -> Pipeline:
    return Pipeline(settings, load("fake"))


def test_readers_see_the_old_chunks_or_the_new_ones_never_a_mix(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    path = folder / "doc.txt"
    versions = [(FIXTURES / "apache-2.0.txt").read_text(), (FIXTURES / "debian-manifesto.txt").read_text() * 3]
    dsn = settings.dsn.get_secret_value()
    seen: list[tuple[str, ...]] = []
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                rows = conn.execute("SELECT text FROM connector.chunks ORDER BY document_id, ordinal").fetchall()
                seen.append(tuple(r[0] for r in rows))

    expected: list[tuple[str, ...]] = []
    with connect(dsn, autocommit=True) as conn:
        store, worker = Store(conn), Worker(conn, _pipeline(settings), [folder])
        reader = threading.Thread(target=read)
        for i in range(6):
            path.write_text(versions[i % 2])
            row = store.ingest_file("doc.txt", path, "text/plain", f"hash-{i}", 60)
            assert worker.process(row) == "done"
            texts = tuple(r[0] for r in conn.execute("SELECT text FROM connector.chunks ORDER BY ordinal"))
            expected.append(texts)
            if i == 0:
                reader.start()
        stop.set()
        reader.join()
    assert len(set(expected)) == 2 and len(seen) > 10
    assert () not in seen, "a reader saw the document without chunks during a replacement"
    assert set(seen) == set(expected), "a reader saw a mixture of two versions (or never saw both)"


def test_a_result_from_a_stale_claim_is_dropped(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    path = folder / "doc.txt"
    path.write_text((FIXTURES / "apache-2.0.txt").read_text())
    dsn = settings.dsn.get_secret_value()
    with connect(dsn, autocommit=True) as a, connect(dsn, autocommit=True) as b:
        first = Store(a).ingest_file("doc.txt", path, "text/plain", "h1", 60)
        second = Store(b).ingest_file("doc.txt", path, "text/plain", "h2", 60)  # e.g. after the lease ran out
        assert second.attempts == first.attempts + 1
        assert Worker(a, _pipeline(settings), [folder]).process(first) == "superseded"
        assert a.execute("SELECT count(*) FROM connector.chunks").fetchone() == (0,)
        assert Worker(b, _pipeline(settings), [folder]).process(second) == "done"
        assert a.execute("SELECT status FROM connector.documents").fetchone() == ("done",)


def test_folder_rows_are_read_only_under_the_workers_roots(settings: Settings, tmp_path: Path, db) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("CONNECTOR_DSN=postgresql://admin:hunter2@db/prod\n" * 20)
    db.execute(
        "INSERT INTO connector.documents (source, source_key, file_path) VALUES ('folder', 'x.txt', %s)",
        (str(secret),),
    )
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        worker = Worker(conn, _pipeline(settings), [inbox])
        assert worker.drain(threading.Event()) == 0, "not claimed: it is no file of the folders it reads"
    status, attempts, chunks = db.execute(
        "SELECT status, attempts, (SELECT count(*) FROM connector.chunks) FROM connector.documents"
    ).fetchone()
    assert (status, attempts, chunks) == ("pending", 0, 0), "never read, never tried"


def test_claimed_row_refuses_a_path_outside_its_roots(tmp_path: Path) -> None:
    from connector.db.store import ClaimedRow

    row = ClaimedRow(1, "folder", "k", None, None, None, "text/plain", "/etc/hostname", None, 1)
    with pytest.raises(DocumentError, match="outside the folders"):
        row.load([tmp_path], 10_000_000)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://user:s3cret@db.example:5432/app",
        "postgresql://user@db.example/app?password=s3cret",
        "host=db.example password='s3cret and more' dbname=app",
    ],
)
def test_redact_never_shows_the_password(dsn: str) -> None:
    shown = redact(dsn)
    assert "s3cret" not in shown and "more" not in shown
    assert "db.example" in shown


def test_a_title_changed_while_its_row_is_processed_is_kept(settings) -> None:
    """The worker wrote the title its claim had read: an application's new title, set while the row was being
    processed, was reverted; so was a renamed file's new name. A file's own title (its first heading) is still
    written whatever happened."""
    from connector.embedders.fake import FakeEmbedder

    inbox = settings.watch_dir
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "plain.txt").write_text("Nothing here names itself.\n\nJust two short paragraphs of text.\n")
    (inbox / "own.md").write_text("# The Own Title\n\nA document that says what it is called.\n")
    with connect(settings.dsn.get_secret_value(), autocommit=True) as conn:
        store = Store(conn)
        conn.execute("INSERT INTO connector.documents (source_key, title, content) VALUES "
                     "('app-titled', 'old title', 'Text.'), ('untitled', NULL, '# Its Title\n\nText.')")  # fmt: skip
        store.enqueue_file("plain.txt", inbox / "plain.txt", "text/plain", "hash-1")
        store.enqueue_file("own.md", inbox / "own.md", "text/markdown", "hash-2")
        worker = Worker(conn, Pipeline(settings, FakeEmbedder()), [inbox])
        rows = store.claim_batch(60, "w", [inbox], 8, 10_000_000)
        conn.execute(
            "UPDATE connector.documents SET title = 'NEW title' WHERE source_key IN ('app-titled', 'untitled')"
        )
        (inbox / "plain.txt").rename(inbox / "renamed.txt")
        (inbox / "own.md").rename(inbox / "own-renamed.md")
        store.rename_folder_documents(inbox, "plain.txt", "renamed.txt")
        store.rename_folder_documents(inbox, "own.md", "own-renamed.md")
        assert [worker.process(r) for r in rows] == ["done"] * 4
        titles = dict(conn.execute("SELECT source_key, title FROM connector.documents"))
        assert worker.drain(threading.Event()) == 0
    assert titles == {"app-titled": "NEW title", "untitled": "NEW title", "renamed.txt": "renamed.txt",
                      "own-renamed.md": "The Own Title"}  # fmt: skip

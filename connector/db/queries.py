"""All SQL the connector runs, in one place, but that of the embedding models, their cache and `connector
reembed`, which lives with its typed functions in embeddings.py. The schema name is the constant `connector`
(see settings.SCHEMA).
Statements that name a user's table or columns are `psycopg.sql` templates, filled with `sql.Identifier`.
The rows of the reads are the dataclasses of rows.py, in the same order; a column's name (or alias) is its field's."""

from psycopg import sql

# The Alembic revision the schema is at (`connector run --no-migrate` refuses any other than the code's head).
SCHEMA_REVISION = "SELECT version_num FROM connector.alembic_version"

# A watched file is (re)queued when it is new or its bytes differ from the ones the row stands for: the bytes it was
# queued with while it waits or is being processed, the bytes its chunks came from once done, the bytes that failed.
# The same bytes again (a second replica, a restarting one, a rescan) change nothing: no NOTIFY, no try counted, the
# running worker keeps its lease (a worker that died is the claim query's business, through its lease). New bytes
# while processing: pending with a fresh budget, so the running worker's result does not mark it done.
ENQUEUE_FILE = """
INSERT INTO connector.documents AS d
    (source, source_key, title, mime_type, file_path, status, queued_hash, file_size, file_mtime_ns, file_ctime_ns)
VALUES ('folder', %(key)s, %(title)s, %(mime)s, %(path)s, 'pending', %(hash)s, %(size)s, %(mtime)s, %(ctime)s)
ON CONFLICT (source, source_key) DO UPDATE
    SET status = 'pending', mime_type = EXCLUDED.mime_type, file_path = EXCLUDED.file_path, updated_at = now(),
        queued_hash = EXCLUDED.queued_hash, file_size = EXCLUDED.file_size, file_mtime_ns = EXCLUDED.file_mtime_ns,
        file_ctime_ns = EXCLUDED.file_ctime_ns,
        -- already waiting: its budget and backoff as they were; otherwise new bytes get a fresh budget
        retries = CASE WHEN d.status = 'pending' THEN d.retries ELSE 0 END,
        retry_after = CASE WHEN d.status = 'pending' THEN d.retry_after END
    WHERE CASE d.status WHEN 'done' THEN d.content_hash WHEN 'failed' THEN d.failed_hash ELSE d.queued_hash END
          IS DISTINCT FROM %(hash)s
RETURNING id
"""

# The same bytes found at another path under the same key (the watched folder moved, or mounted elsewhere, while the
# sidecar was down): the row follows the file, or no worker reading the folder where it is now would claim it.
REPOINT_FILE = """
UPDATE connector.documents SET file_path = %(path)s, updated_at = now()
WHERE source = 'folder' AND source_key = %(key)s AND file_path IS DISTINCT FROM %(path)s
"""

# The file was hashed and nothing needed queueing (its bytes are the row's: touched, chmod-ed, renamed back, or a row
# from before 0017 without a ctime): remember its signature, so the next rescan does not read it again.
# Waiting rows are left untouched (an update would NOTIFY again); they are read again at the next rescan.
REFRESH_FILE_SIGNATURE = """
UPDATE connector.documents
SET file_size = %(size)s, file_mtime_ns = %(mtime)s, file_ctime_ns = %(ctime)s, queued_hash = %(hash)s
WHERE source = 'folder' AND source_key = %(key)s AND status <> 'pending'
  AND (file_size, file_mtime_ns, file_ctime_ns, queued_hash)
      IS DISTINCT FROM (%(size)s::bigint, %(mtime)s::bigint, %(ctime)s::bigint, %(hash)s::text)
"""

# A file in the watched folder that will not be processed as it is (unreadable, too large, unsupported type, a name
# that is not UTF-8): a failed row with the reason, so it is visible (`connector status`) and its chunks, if it had
# any, stay searchable. A row being processed is left to its worker, which reads the file itself. RETURNING only when
# something changed, so each reason is logged once, across rescans and replicas.
RECORD_FILE_FAILURE = """
INSERT INTO connector.documents AS d
    (source, source_key, title, mime_type, file_path, status, last_error, file_size, file_mtime_ns, file_ctime_ns)
VALUES ('folder', %(key)s, %(title)s, %(mime)s, %(path)s, 'failed', %(error)s, %(size)s, %(mtime)s, %(ctime)s)
ON CONFLICT (source, source_key) DO UPDATE
    SET status = 'failed', last_error = EXCLUDED.last_error, failed_hash = NULL, queued_hash = NULL,
        mime_type = EXCLUDED.mime_type, file_path = EXCLUDED.file_path, file_size = EXCLUDED.file_size,
        file_mtime_ns = EXCLUDED.file_mtime_ns, file_ctime_ns = EXCLUDED.file_ctime_ns, retry_after = NULL,
        updated_at = now()
    WHERE d.status <> 'processing'
      AND (d.status <> 'failed' OR d.last_error IS DISTINCT FROM EXCLUDED.last_error OR d.failed_hash IS NOT NULL)
RETURNING id
"""

# A rescan's view of the folder rows: a file whose size, mtime and ctime match a row that was read with them is not
# read again (a row without a ctime, hashed before migration 0017, is read once more). `read` is false for rows whose
# bytes were never hashed (unreadable, too large, unsupported, older rows), and for rows that failed before their
# bytes were read (the file was not there when its worker looked: renamed away, say), which a rescan looks at again
# instead of leaving them failed for good.
FOLDER_SIGNATURES = """
SELECT source_key, file_path, file_size, file_mtime_ns, file_ctime_ns,
       CASE WHEN status = 'failed' THEN failed_hash IS NOT NULL
            ELSE queued_hash IS NOT NULL OR failed_hash IS NOT NULL END AS read
FROM connector.documents
WHERE source = 'folder' AND left(file_path, length(%(root)s) + 1) = %(root)s || '/'
"""

# Where a claimed row's file is now (the watcher moves the key and path of a renamed file or folder), while ours.
ROW_FILE = "SELECT source_key, file_path FROM connector.documents WHERE id = %(id)s AND attempts = %(token)s"

# A row's content comes with its claim only up to INLINE_BYTES; a larger one is read after the claim has committed
# (`ROW_CONTENT`): a row too large for the process's memory then fails its tries like any document, where reading it
# inside the claim rolled the claim back (no try counted) and stopped every replica that claimed it, the queue
# stuck behind it. octet_length reads a stored value's header, not the value.
INLINE_BYTES = 4_000_000


def _claimed(t: str) -> str:
    """The claim's columns (`t`: the table's alias and a dot, or nothing)."""
    text = f"{t}content_bytes IS NULL AND octet_length({t}content) <= {INLINE_BYTES}"
    return (
        f"{t}id, {t}source, {t}source_key, {t}title, CASE WHEN {text} THEN {t}content END AS content, "
        f"CASE WHEN octet_length({t}content_bytes) <= {INLINE_BYTES} THEN {t}content_bytes END AS content_bytes, "
        f"{t}mime_type, {t}file_path, {t}content_hash, {t}attempts, "
        f"coalesce(octet_length({t}content_bytes), octet_length({t}content)) AS content_size, {t}file_size"
    )


_CLAIMED_COLUMNS = _claimed("")

# A claimed row's content that did not come with its claim, while the row is ours.
ROW_CONTENT = "SELECT content, content_bytes FROM connector.documents WHERE id = %(id)s AND attempts = %(token)s"

# `connector ingest`: queue and claim in one statement, so no running sidecar takes the file in between. Failed
# documents are retried (the user asked for it); documents stored with these exact bytes are left alone.
INGEST_FILE = f"""
INSERT INTO connector.documents AS d
    (source, source_key, title, mime_type, file_path, status, attempts, lease_expires_at, claimed_by, heartbeat_at,
     queued_hash)
VALUES ('folder', %(key)s, %(title)s, %(mime)s, %(path)s, 'processing', 1, now() + make_interval(secs => %(lease)s),
        %(worker)s, now(), %(hash)s)
ON CONFLICT (source, source_key) DO UPDATE
    SET status = 'processing', attempts = d.attempts + 1, lease_expires_at = EXCLUDED.lease_expires_at,
        mime_type = EXCLUDED.mime_type, file_path = EXCLUDED.file_path, updated_at = now(),
        claimed_by = %(worker)s, heartbeat_at = now(), retries = 0, retry_after = NULL, queued_hash = %(hash)s
    WHERE NOT (d.status = 'done' AND d.content_hash = %(hash)s)
RETURNING {_CLAIMED_COLUMNS}
"""

# Pending rows (unless backing off after a transient failure), and rows whose claim lease ran out (their worker
# died: that counts as a try), oldest first; folder rows only for workers that read their folder (`roots`: the
# folders' paths, each ending in a separator): not `--no-watch` ones, and not a sidecar watching another folder,
# which could only fail them (a file `connector ingest` read from elsewhere, a replica with its own folder).
# SKIP LOCKED lets any number of workers claim concurrently without waiting on each other. `attempts` is the claim
# token: a worker's writes only land while the row still carries the attempt number it claimed, so a worker that
# lost its lease can never overwrite a newer result.
CLAIM_NEXT = f"""
UPDATE connector.documents
SET status = 'processing', attempts = attempts + 1, updated_at = now(), claimed_by = %(worker)s,
    heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => %(lease)s),
    retries = retries + CASE WHEN status = 'processing' THEN 1 ELSE 0 END
WHERE id = (
    SELECT id FROM connector.documents
    WHERE ((status = 'pending' AND (retry_after IS NULL OR retry_after <= now()))
           OR (status = 'processing' AND lease_expires_at < now()))
      AND (source <> 'folder' OR EXISTS (SELECT FROM unnest(%(roots)s::text[]) AS r WHERE starts_with(file_path, r)))
    ORDER BY id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
RETURNING {_CLAIMED_COLUMNS}, retries
"""

# A batch: the oldest claimable rows, up to `limit` rows and `max_bytes` of content (the first row always, however
# large), each with its own claim token as CLAIM_NEXT gives it. A row whose last holder died (its lease ran out) is
# claimed alone: if it is what kills workers, it must not take a batch of innocent rows (and their tries) with it.
# Its try is counted unless `count_abandoned` is false: a worker back from a database outage longer than the lease
# finds every other replica's lease run out too, their holders alive and still reconnecting (`Worker.drain`). A
# row given up on purpose (`ABANDON`, `ABANDON_MINE`: no holder named; a suspect) counts its try in any case.
# Rows left out were locked by the subquery only until this statement's transaction ends.
CLAIM_BATCH = f"""
WITH candidates AS (
    -- What the claim brings into memory: both content columns (it returns both), or the file the worker reads.
    SELECT id, coalesce(octet_length(content_bytes), 0) + coalesce(octet_length(content), 0) + coalesce(file_size, 0)
               AS bytes,
           status = 'processing' AS abandoned,
           -- given up by a holder that said why (`ABANDON`, `ABANDON_MINE` clear the holder): its reason is current
           status = 'processing' AND claimed_by IS NULL AS said_why
    FROM connector.documents
    WHERE ((status = 'pending' AND (retry_after IS NULL OR retry_after <= now()))
           OR (status = 'processing' AND lease_expires_at < now()))
      AND (source <> 'folder' OR EXISTS (SELECT FROM unnest(%(roots)s::text[]) AS r WHERE starts_with(file_path, r)))
    ORDER BY id
    FOR UPDATE SKIP LOCKED
    LIMIT %(limit)s
), picked AS (
    SELECT id, said_why, sum(bytes) OVER (ORDER BY id) AS upto, row_number() OVER (ORDER BY id) AS n,
           min(id) FILTER (WHERE abandoned) OVER () AS first_abandoned
    FROM candidates
)
UPDATE connector.documents d
SET status = 'processing', attempts = attempts + 1, updated_at = now(), claimed_by = %(worker)s,
    heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => %(lease)s),
    retries = retries + CASE WHEN status = 'processing' AND (%(count_abandoned)s OR claimed_by IS NULL) THEN 1
                             ELSE 0 END
FROM picked p
WHERE d.id = p.id
  AND CASE WHEN p.first_abandoned IS NULL THEN p.n = 1 OR p.upto <= %(max_bytes)s ELSE p.id = p.first_abandoned END
RETURNING {_claimed("d.")}, d.retries,
          -- why its last holder gave it up, when that holder said so (a holder that died said nothing, and the row's
          -- last error may be older than its death): the reason it fails with once out of tries
          CASE WHEN p.said_why THEN d.last_error END AS last_error,
          p.first_abandoned IS NOT NULL AS abandoned
"""

# The leases of a batch, one statement; the ids still ours come back. A row another session holds locked (an
# application's open transaction, a forgotten psql) is skipped, not waited for: waiting held the batch's other rows
# locked and the worker stalled with them, for as long as that session kept its lock. Skipped, it still counts as
# ours when its committed state says so (the statement's snapshot ignores locks); its next beat extends it.
HEARTBEAT_MANY = """
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::int[]) AS held(id, token)
), free AS (
    SELECT d.id FROM connector.documents d JOIN held ON d.id = held.id
    WHERE d.attempts = held.token AND d.status = 'processing'
    FOR NO KEY UPDATE OF d SKIP LOCKED
), beat AS (
    UPDATE connector.documents d SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => %(lease)s)
    FROM free WHERE d.id = free.id
)
SELECT d.id FROM connector.documents d JOIN held ON d.id = held.id
WHERE d.attempts = held.token AND d.status = 'processing'
"""

# A batch's write: which of its rows still carry our claim token (locked until the batch commits). Waiting for a
# row another session keeps locked ends after LOCK_WAIT (the write is then retried one document at a time, and the
# locked one left to its lease), not when that session ends. Only the rows' locks: the table's own lock is taken
# first without a limit (a migration queued behind a long query makes every write wait, as it should, not give up),
# and the role's or database's own lock_timeout is restored after.
LOCK_TABLE_FIRST = "LOCK TABLE connector.documents IN ROW SHARE MODE"
# The same bounded wait for a worker's own update of one claimed row (failed, retry, unchanged, released).
LOCK_TABLE_TO_UPDATE = "LOCK TABLE connector.documents IN ROW EXCLUSIVE MODE"
LOCK_TIMEOUT_NOW = "SELECT current_setting('lock_timeout')"
SET_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"
LOCK_DOCUMENTS = "SELECT id, attempts FROM connector.documents WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
LOCK_WAIT = "5s"
DELETE_CHUNKS_OF = "DELETE FROM connector.chunks WHERE document_id = ANY(%s)"
DELETE_CANDIDATES_OF = "DELETE FROM connector.candidates WHERE document_id = ANY(%s)"
# The BM25 postings of the documents' chunks (migration 0008), from the tsvector Postgres generated for each.
INSERT_CHUNK_TERMS_OF = """
INSERT INTO connector.chunk_terms (term, chunk_id, tf, chunk_len)
SELECT t.lexeme, c.id, coalesce(array_length(t.positions, 1), 1), c.token_count
FROM connector.chunks c CROSS JOIN LATERAL unnest(c.search_tsv) t
WHERE c.document_id = ANY(%s)
"""

# The sessions of this sidecar's replicas (same database, role and application name) stuck in the middle of a
# statement of a write, waiting for their client to send the rest (a COPY's rows, the next statement of a pipeline)
# for longer than `stuck` seconds, while holding rows of the queue locked (the ROW SHARE lock that a write's
# `FOR UPDATE` takes): a replica frozen mid-write (SIGSTOP, `docker pause`, a paused VM) or cut off from the
# database. The server waits for such a client as long as it is frozen, or until its TCP keepalive gives up (two
# hours by default): neither statement_timeout nor idle_in_transaction_session_timeout ends a session waiting for
# a COPY's data, and every other replica skips the locked rows though their leases ran out. A session is ended only
# when it is found so a second time with nothing received meanwhile: the same statement (`since`) and, in a COPY,
# the same count of bytes (`received`, -1 outside a COPY), as in `%(pids)s`, `%(since)s`, `%(received)s` (what the
# previous call returned, `ended` NULL): a replica alive but slow to send a long COPY (a large batch over a slow
# link) waits for its client too, between its sends, and is left to finish. The replica, if it comes back, finds its
# connection closed, reconnects, and its stale claims are worthless (the claim token). A role may end its own
# sessions without any grant.
END_STUCK_WRITERS = """
SELECT a.pid, a.client_addr::text AS client, extract(epoch FROM now() - a.query_start)::float8 AS stuck_s,
       a.query_start AS since, coalesce(p.bytes_processed, -1) AS received,
       CASE WHEN (a.pid, a.query_start, coalesce(p.bytes_processed, -1)) IN (
                 SELECT * FROM unnest(%(pids)s::int[], %(since)s::timestamptz[], %(received)s::int8[]))
            THEN pg_terminate_backend(a.pid) END AS ended
FROM pg_stat_activity a LEFT JOIN pg_stat_progress_copy p ON p.pid = a.pid
WHERE a.datname = current_database() AND a.usename = current_user
  AND a.application_name = current_setting('application_name') AND a.pid <> pg_backend_pid()
  AND a.state = 'active' AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
  AND a.query_start < now() - make_interval(secs => %(stuck)s)
  AND EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid AND l.granted AND l.mode = 'RowShareLock'
              AND l.relation = 'connector.documents'::regclass)
"""
# Before Postgres 14 there is no `pg_stat_progress_copy`: a COPY's progress cannot be seen, and a session is ended
# when found in the same statement twice.
END_STUCK_WRITERS_BEFORE_14 = END_STUCK_WRITERS.replace(
    "LEFT JOIN pg_stat_progress_copy p ON p.pid = a.pid", ""
).replace("coalesce(p.bytes_processed, -1)", "-1::int8")

# Migration 0015: the chunks' HNSW index, once the table has this many chunks (true once it exists).
BUILD_VECTOR_INDEX = "SELECT connector.build_vector_index(%s)"

# While a worker processes a document it extends its lease; a crashed worker stops doing so.
HEARTBEAT = """
UPDATE connector.documents SET heartbeat_at = now(), lease_expires_at = now() + make_interval(secs => %(lease)s)
WHERE id = %(id)s AND attempts = %(token)s AND status = 'processing'
"""

# A transient failure: back off (exponentially, computed by the caller), or give up after the configured tries.
# `counted` false: the failure is not the document's (the database's disk is full), no try is spent on it.
RETRY_LATER = """
UPDATE connector.documents
SET status = CASE WHEN status = 'pending' THEN 'pending'
                  WHEN %(counted)s AND retries + 1 >= %(max)s THEN 'failed' ELSE 'pending' END,
    failed_hash = CASE WHEN status <> 'pending' AND %(counted)s AND retries + 1 >= %(max)s THEN %(hash)s
                       ELSE failed_hash END,
    -- requeued with new content meanwhile (status already pending): its fresh budget and schedule stay
    retries = CASE WHEN status = 'pending' OR NOT %(counted)s THEN retries ELSE retries + 1 END,
    last_error = %(error)s,
    retry_after = CASE WHEN status = 'pending' THEN retry_after ELSE now() + make_interval(secs => %(delay)s) END,
    lease_expires_at = NULL, claimed_by = NULL, updated_at = now()
WHERE id = %(id)s AND attempts = %(token)s
RETURNING status
"""

# `connector retry`: failed documents (or one, by id or source key) back to the queue with a fresh try budget.
RETRY_FAILED = """
UPDATE connector.documents
SET status = 'pending', retries = 0, retry_after = NULL, failed_hash = NULL, updated_at = now()
WHERE status = 'failed' AND (%(ref)s::text IS NULL OR id::text = %(ref)s OR source_key = %(ref)s)
RETURNING id, source_key
"""

# A worker reconnecting after a lost connection gives back what it held under its previous connection. No try is
# counted: a row cannot have caused a loss it was not being written during (the database restarted, a proxy or the
# network dropped the connection), and counting one per outage failed innocent rows of a flapping database.
# A row another session keeps locked is skipped, not waited for, and left to its lease: that session may be the
# worker's own from before the loss, which the server has not ended yet (still in a batch's COPY when the network
# went: it ends when the server's keepalives give up on it), or an application's open transaction. Waiting held up
# the reconnected worker, claiming nothing, for as long as that session lived.
RELEASE_MINE = """
UPDATE connector.documents d
SET status = 'pending', attempts = attempts + 1, lease_expires_at = NULL, claimed_by = NULL, updated_at = now()
FROM (SELECT id FROM connector.documents WHERE claimed_by = %(worker)s AND status = 'processing'
      FOR NO KEY UPDATE SKIP LOCKED) mine
WHERE d.id = mine.id
"""

# ...except the rows whose write was on the wire when the connection died: one of them may be what ended it (a
# server process that crashes on its data). They are abandoned, as if their worker had died (`ABANDON`):
# `CLAIM_BATCH` takes each alone and counts the try, so the culprit fails on its own and the others go through.
ABANDON_MINE = """
UPDATE connector.documents d
SET lease_expires_at = now() - interval '1 second', last_error = %(error)s, updated_at = now(), claimed_by = NULL
FROM (SELECT id FROM connector.documents WHERE id = ANY(%(ids)s) AND claimed_by = %(worker)s AND status = 'processing'
      FOR NO KEY UPDATE SKIP LOCKED) mine
WHERE d.id = mine.id
"""

# Ready: what a worker would claim now (`CLAIM_BATCH`): pending rows not backing off, and rows whose holder's lease
# ran out (it died or stalled). Rows of the queue table and watched tables apart from files, which only a sidecar
# watching their folder claims: KEDA's query (docker/k8s) counts the first kind, which its `--no-watch` replicas
# serve; counting files there kept replicas up for rows none of them would ever take.
QUEUE_DEPTH = """
SELECT count(*) FILTER (WHERE source <> 'folder' AND ready),
       count(*) FILTER (WHERE source = 'folder' AND ready),
       count(*) FILTER (WHERE status = 'pending' AND retry_after > now()),
       count(*) FILTER (WHERE status = 'processing' AND NOT ready),
       count(*) FILTER (WHERE status = 'done'),
       count(*) FILTER (WHERE status = 'failed')
FROM (SELECT source, status, retry_after,
             (status = 'pending' AND (retry_after IS NULL OR retry_after <= now()))
             OR (status = 'processing' AND lease_expires_at < now()) AS ready
      FROM connector.documents) AS d
"""

IN_FLIGHT = """
SELECT id, source_key, claimed_by, attempts, heartbeat_at, lease_expires_at FROM connector.documents
WHERE status = 'processing' ORDER BY id
"""

ALLOCATE_CHUNK_IDS = """
SELECT nextval(pg_get_serial_sequence('connector.chunks', 'id')) FROM generate_series(1, %s)
"""

COPY_CHUNKS = """
COPY connector.chunks (id, document_id, ordinal, text, token_count, start_char, end_char, page_start, page_end,
                       section_path, chunk_type, prev_chunk_id, next_chunk_id, embedding, embed_windows, strategy)
FROM STDIN (FORMAT BINARY)
"""
COPY_CHUNKS_TYPES = [
    "int8", "int8", "int4", "text", "int4", "int4", "int4", "int4", "int4",
    "text[]", "text", "int8", "int8", "vector", "int4", "text",
]  # fmt: skip

COPY_WINDOWS = """
COPY connector.chunk_windows (chunk_id, window_no, start_char, end_char, embedding) FROM STDIN (FORMAT BINARY)
"""
COPY_WINDOWS_TYPES = ["int8", "int4", "int4", "int4", "vector"]


COPY_CANDIDATES = """
COPY connector.candidates (document_id, strategy, params, chunk_count, rc, icc, dcc, bi, sc, rt, score, chosen,
                           elapsed_ms, error, rc_backend, metric_ms, shape, spans, breaks)
FROM STDIN
"""  # text format: the lines of `candidate_rows`, each after its document's id

# If the document was requeued while we worked (its file changed again, its row got new content or a new type), it
# stays pending for another pass, with no `content_hash`: what its chunks came from is no longer what the row says
# (with the claimed bytes' hash, a type changed meanwhile found the next pass "unchanged", the old conversion kept).
# `metadata` is the user's (or the watched table's columns): never written here; the page count has its own column.
# The title: a file's own (what it calls itself) always; otherwise ours only where nobody changed the row's title
# or key since the claim: an application's new title, or a renamed file's new name (`RENAME_FOLDER_DOCUMENTS`),
# was overwritten with what the claim had read. One statement for a batch's documents, each a row of the arrays (a
# statement each cost the server 0.06 ms a 600-character row, and the writer as much in parameters). Sent binary:
# psycopg escapes every quote and backslash of a text array's elements in its text format.
MARK_DONE = """
UPDATE connector.documents d
SET status = CASE WHEN d.status = 'pending' THEN 'pending' ELSE 'done' END,
    markdown = v.markdown, blocks = v.blocks, failed_hash = NULL, strategy = v.strategy, score = v.score,
    content_hash = CASE WHEN d.status = 'pending' THEN NULL ELSE v.hash END, last_error = NULL,
    lease_expires_at = NULL, processed_at = now(), updated_at = now(),
    page_count = v.page_count, claimed_by = NULL, retries = 0, retry_after = NULL,
    title = CASE WHEN v.own_title THEN v.title
                 WHEN d.title IS NOT DISTINCT FROM v.claimed_title AND d.source_key = v.claimed_key
                 THEN COALESCE(v.title, d.title)
                 ELSE d.title END
FROM unnest(%(id)b::int8[], %(token)b::int4[], %(markdown)b::text[], %(blocks)b::jsonb[], %(hash)b::text[],
            %(strategy)b::text[], %(score)b::float8[], %(page_count)b::int4[], %(title)b::text[],
            %(own_title)b::bool[], %(claimed_title)b::text[], %(claimed_key)b::text[])
     AS v(id, token, markdown, blocks, hash, strategy, score, page_count, title, own_title, claimed_title, claimed_key)
WHERE d.id = v.id AND d.attempts = v.token
"""

MARK_UNCHANGED = """
UPDATE connector.documents
SET status = CASE WHEN status = 'pending' THEN 'pending' ELSE 'done' END,
    failed_hash = NULL, last_error = NULL, lease_expires_at = NULL, updated_at = now(), claimed_by = NULL,
    retries = 0, retry_after = NULL
WHERE id = %(id)s AND attempts = %(token)s
"""

MARK_FAILED = """
UPDATE connector.documents
SET status = CASE WHEN status = 'pending' THEN 'pending' ELSE 'failed' END,
    failed_hash = %(hash)s, last_error = %(error)s, lease_expires_at = NULL, updated_at = now(), claimed_by = NULL
WHERE id = %(id)s AND attempts = %(token)s
"""

# A worker that stops mid-document hands it back at once instead of leaving it to the lease.
RELEASE = """
UPDATE connector.documents
SET status = 'pending', attempts = attempts + 1, lease_expires_at = NULL, claimed_by = NULL, updated_at = now()
WHERE id = %(id)s AND attempts = %(token)s AND status = 'processing'
"""

# The lease ends now (`CLAIM_BATCH` takes an expired row alone and counts the try). Nobody holds it any more (a
# reconnecting worker's `RELEASE_MINE` must not make it an ordinary pending row).
ABANDON = """
UPDATE connector.documents
SET lease_expires_at = now() - interval '1 second', last_error = %(error)s, updated_at = now(), claimed_by = NULL
WHERE id = %(id)s AND attempts = %(token)s AND status = 'processing'
"""

STATUS_COUNTS = "SELECT status, count(*) AS documents FROM connector.documents GROUP BY status ORDER BY status"

LAST_ERRORS = """
SELECT id, source, source_key, attempts, last_error, updated_at FROM connector.documents
WHERE status = 'failed' ORDER BY updated_at DESC LIMIT %s
"""

ERRORS_OF = "SELECT id, source_key, last_error FROM connector.documents WHERE id = ANY(%s) ORDER BY id"

# `connector eval`: the query a user would write, restricted to the documents the QA set names.
NEAREST_CHUNKS = """
SELECT d.source_key, c.text
FROM connector.chunks c JOIN connector.documents d ON d.id = c.document_id
WHERE c.document_id = ANY(%(documents)s)
ORDER BY c.embedding <=> %(query)s
LIMIT %(k)s
"""

# pgvector >= 0.8: keep scanning the HNSW graph until LIMIT rows pass the WHERE clause, in exact distance order.
ITERATIVE_SCAN = "SET hnsw.iterative_scan = strict_order"

DOCUMENTS_BY_KEY = """
SELECT id, source, source_key, title, content, content_bytes, mime_type, file_path
FROM connector.documents WHERE status = 'done' ORDER BY id
"""

COPY_SQL_DOCUMENT = """
INSERT INTO connector.documents (source, source_key, title, content, content_bytes, mime_type)
VALUES ('sql', %s, %s, %s, %s, %s)
"""

CHUNK_STATS = """
SELECT count(DISTINCT document_id) AS documents, count(*) AS chunks, coalesce(avg(token_count), 0) AS mean_tokens
FROM connector.chunks WHERE document_id = ANY(%s)
"""

WINNERS = """
SELECT strategy, count(*) AS wins FROM connector.documents WHERE status = 'done' AND id = ANY(%s)
GROUP BY 1 ORDER BY 2 DESC, 1
"""

# `connector explain`: a document by id or by source key (any source), and its candidates, best first.
FIND_DOCUMENT = """
SELECT id, source, source_key, status, strategy, score, last_error FROM connector.documents
WHERE id::text = %(ref)s OR source_key = %(ref)s
ORDER BY (id::text = %(ref)s) DESC, id
"""

CANDIDATES_OF = """
SELECT strategy, chunk_count, rc, icc, dcc, bi, sc, rt, score, elapsed_ms, chosen, error, params, rc_backend,
       metric_ms, shape
FROM connector.candidates WHERE document_id = %s
ORDER BY chosen DESC, score DESC NULLS LAST, strategy
"""

# `connector report`: the paper's Table 3 layout over every document done: per strategy the documents it ran on,
# its wins and its mean metrics; then the adaptive row (the chosen candidate of each document).
STRATEGY_REPORT = """
WITH done AS (
    SELECT c.* FROM connector.candidates c JOIN connector.documents d ON d.id = c.document_id
    WHERE d.status = 'done' AND c.error IS NULL AND c.chunk_count > 0
)
SELECT strategy, count(*) AS documents, count(*) FILTER (WHERE chosen) AS wins,
       avg(rc) AS rc, avg(icc) AS icc, avg(dcc) AS dcc, avg(bi) AS bi, avg(sc) AS sc, avg(rt) AS rt,
       avg(score) AS score, avg(chunk_count) AS chunks
FROM done GROUP BY strategy
UNION ALL
SELECT 'adaptive', count(*), count(*), avg(rc), avg(icc), avg(dcc), avg(bi), avg(sc), avg(rt), avg(score),
       avg(chunk_count)
FROM done WHERE chosen
ORDER BY 1
"""

# Folder sync. A file deleted from the watched folder takes its document (and, by cascade, chunks) with it; a file
# renamed keeps its document, chunks and embeddings under the new key. Keys are compared by prefix with left(),
# never LIKE, so a file name holding % or _ matches only itself.
DELETE_FOLDER_DOCUMENTS = """
DELETE FROM connector.documents
WHERE source = 'folder' AND (source_key = %(key)s OR left(source_key, length(%(key)s) + 1) = %(key)s || '/')
RETURNING id, source_key
"""

DELETE_REPLACED = """
DELETE FROM connector.documents
WHERE source = 'folder' AND source_key = %(new)s
  AND EXISTS (SELECT 1 FROM connector.documents WHERE source = 'folder' AND source_key = %(old)s)
RETURNING id, source_key
"""

RENAME_FOLDER_DOCUMENTS = """
UPDATE connector.documents AS d
SET source_key = %(new)s || substr(d.source_key, length(%(old)s) + 1),
    file_path = %(root)s || '/' || %(new)s || substr(d.source_key, length(%(old)s) + 1),
    -- the file's name was its title (it had none of its own): the new name is; a title of its own stays
    title = CASE WHEN d.source_key = %(old)s AND d.title IS NOT DISTINCT FROM %(old_title)s THEN %(title)s
                 ELSE d.title END, updated_at = now()
WHERE d.source = 'folder' AND (d.source_key = %(old)s OR left(d.source_key, length(%(old)s) + 1) = %(old)s || '/')
  AND NOT EXISTS (
      SELECT 1 FROM connector.documents o
      WHERE o.source = 'folder' AND o.source_key = %(new)s || substr(d.source_key, length(%(old)s) + 1))
RETURNING id, source_key
"""

FOLDER_FILES_UNDER = """
SELECT source_key, file_path FROM connector.documents
WHERE source = 'folder' AND left(file_path, length(%(root)s) + 1) = %(root)s || '/'
"""

# `connector watch-table` (see sources/table.py).
RESOLVE_TABLE = """
SELECT c.oid::int AS oid, format('%%I.%%I', n.nspname, c.relname) AS qualified, n.nspname AS schema,
       c.relname AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%s) AND c.relkind IN ('r', 'p')
"""

TABLE_COLUMNS = "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped"

CREATE_ROW_TRIGGER = sql.SQL(
    "CREATE TRIGGER {trigger} AFTER INSERT OR DELETE OR UPDATE OF {columns} ON {table} "
    "FOR EACH ROW EXECUTE FUNCTION connector.watch_row({args})"
)

CREATE_TRUNCATE_TRIGGER = sql.SQL(
    "CREATE TRIGGER {trigger} AFTER TRUNCATE ON {table} "
    "FOR EACH STATEMENT EXECUTE FUNCTION connector.watch_truncate({prefix})"
)

DROP_TRIGGER = sql.SQL("DROP TRIGGER IF EXISTS {} ON {}")

# With the table's oid and its named columns' numbers, by which the trigger finds a column renamed since
# (`connector.watch_column`, migration 0018).
REGISTER_WATCH = """
INSERT INTO connector.watched_tables (table_name, id_column, text_column, title_column, metadata_columns, relid,
                                      attnums)
VALUES (%(table)s, %(id)s, %(text)s, %(title)s, %(meta)s, %(relid)s::oid,
        (SELECT jsonb_object_agg(attname, attnum) FROM pg_attribute
         WHERE attrelid = %(relid)s::oid AND NOT attisdropped AND attname = ANY (%(columns)s::text[])))
ON CONFLICT (table_name) DO UPDATE SET id_column = EXCLUDED.id_column, text_column = EXCLUDED.text_column,
    title_column = EXCLUDED.title_column, metadata_columns = EXCLUDED.metadata_columns, relid = EXCLUDED.relid,
    attnums = EXCLUDED.attnums, installed_at = now()
"""

UNREGISTER_WATCH = "DELETE FROM connector.watched_tables WHERE table_name = %s"

# Watched tables that no longer feed the queue: dropped (and maybe re-created, without the trigger), or the trigger
# dropped with a column (`DROP COLUMN … CASCADE`). Their documents stay; their rows are read no more.
UNREAD_WATCHED_TABLES = """
SELECT w.table_name FROM connector.watched_tables w
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t
                  -- by name first: restored from a dump, the table has another oid (the stored one: renamed since)
                  WHERE t.tgrelid = coalesce(to_regclass(w.table_name), w.relid) AND t.tgname = %s)
ORDER BY w.table_name
"""

# Documents of the table whose rows are gone (it was dropped and re-created, or rows deleted while it was
# unwatched): watching it again removes them, as the trigger would have.
PRUNE_TABLE_DOCUMENTS = sql.SQL(
    """
DELETE FROM connector.documents AS d
WHERE d.source = 'table' AND left(d.source_key, length(%(prefix)s) + 1) = %(prefix)s || ':'
  AND NOT EXISTS (SELECT 1 FROM {table} AS t
                  WHERE connector.watch_key(%(prefix)s, to_jsonb(t) ->> %(id)s) = d.source_key)
"""
)

# Rows already in a newly watched table are queued like inserts: the same upsert as connector.watch_row().
BACKFILL_TABLE = sql.SQL(
    """
INSERT INTO connector.documents AS d (source, source_key, title, content, mime_type, metadata)
SELECT 'table', connector.watch_key(%(prefix)s, r ->> %(id)s), CASE WHEN %(title)s <> '' THEN r ->> %(title)s END,
       r ->> %(text)s, 'text/plain',
       coalesce((SELECT jsonb_object_agg(k, r -> k) FROM unnest(%(meta)s::text[]) AS k), '{{}}'::jsonb)
FROM (SELECT to_jsonb(t) AS r FROM {table} AS t) AS rows
WHERE r ->> %(id)s IS NOT NULL  -- not queued, like the trigger does (`watch` counts them)
ON CONFLICT (source, source_key) DO UPDATE
    SET content = EXCLUDED.content, title = EXCLUDED.title, metadata = d.metadata || EXCLUDED.metadata
"""
)

COUNT_NULL_IDS = sql.SQL("SELECT count(*) FROM {table} AS t WHERE to_jsonb(t) ->> %(id)s IS NULL")

PURGE_TABLE_DOCUMENTS = """
DELETE FROM connector.documents
WHERE source = 'table' AND left(source_key, length(%(prefix)s) + 1) = %(prefix)s || ':'
"""

# `connector search` and every other reader: the SQL function of migration 0006 is the one search path.
SEARCH = "SELECT * FROM connector.search(%(embedding)s, %(text)s, %(k)s, %(filter)s)"

SEARCH_CONTEXT = "SELECT * FROM connector.search_context(%(chunk_id)s, %(neighbours)s)"

# What README's *Roles* grants the runtime role and this role lacks: every row of every table of the schema (the
# revision table is only read), the sequences' ids. One privilege at a time: `has_table_privilege` with a list is
# true when any of them is held.
MISSING_PRIVILEGES = """
SELECT c.relname, p.privilege
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL unnest(CASE WHEN c.relkind = 'S' THEN ARRAY['USAGE']
                               WHEN c.relname = 'alembic_version' THEN ARRAY['SELECT']
                               ELSE ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'] END)
     WITH ORDINALITY AS p(privilege, i)
WHERE n.nspname = 'connector' AND c.relkind IN ('r', 'p', 'S') AND NOT c.relispartition
  -- The schema's own objects, made by its migrations: not an admin's backup table there, nor a partition (read
  -- through its parent), which a GRANT by the schema's owner could not fix if another role made them.
  AND c.relowner = (SELECT d.relowner FROM pg_class d WHERE d.relnamespace = n.oid AND d.relname = 'documents')
  AND NOT CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(c.oid, p.privilege)
               ELSE has_table_privilege(c.oid, p.privilege) END
ORDER BY c.relname, p.i
"""


# The server's TCP keepalives and user timeout for this session, as the client's (`database.configure_session`):
# only those the server, role or database left at their default, and only over TCP.
SERVER_KEEPALIVES = """
SELECT set_config(s.name, ours.value, false)
FROM (VALUES ('tcp_keepalives_idle', %(idle)s), ('tcp_keepalives_interval', %(interval)s),
             ('tcp_keepalives_count', %(count)s), ('tcp_user_timeout', %(user_timeout)s)) AS ours (name, value)
JOIN pg_settings s ON s.name = ours.name
WHERE s.source = 'default' AND inet_client_addr() IS NOT NULL
"""

# This connection's server session, as `stall` looks it up later from another connection: its process id (behind a
# pooler, not the one the connection was given at its start) and when it started (a process id is used again).
OWN_SESSION = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"

# What the server says a session is doing (`stall`: one of ours whose statement heard nothing back for a while).
SESSION_STATE = """
SELECT state, wait_event, state_change FROM pg_stat_activity WHERE pid = %s AND backend_start = %s
"""

# End that session, unless it changed state since it was looked at (its answer was sent meanwhile). A role may end
# its own sessions without any grant.
END_OWN_SESSION = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = %s AND backend_start = %s AND state_change IS NOT DISTINCT FROM %s
"""

"""A persistent cache of judge replies in one SQLite file.

The key is a hash of the complete request body (model, messages with the image bytes, sampling and logprob
settings), the judge's version string and a sample index (and, for panel members that share a model name on
two servers, the member's normalised endpoint: `JudgeConfig.cache_scope`). The sample index is what makes
repeated sampling at temperature > 0 possible on purpose: the same request with another index is another
cache row. The API key is not part of the body, so it never reaches the file. What a judge's own server says
about the model it serves is part of the key too (capjudge.judges.client.served_judges).

SQLite in WAL mode gives many readers and one writer at a time across threads and processes; each thread
holds its own connection (sqlite3 connections must not cross threads) and a busy timeout turns a
concurrent write into a short wait instead of an error.

That holds on one machine: a cache on a network file system, or a file that is not a usable cache, is refused
when it is opened (capjudge.judges.client.cache_files); node caches are joined by `capjudge cache merge`
(capjudge.judges.client.cache_merge). A single unreadable row is a cache miss that is reported, and its new
reply replaces it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Mapping

from capjudge.judges.client.cache_files import CacheError, cache_name, close_open_connections, connect, open_cache_file
from capjudge.judges.client.reply_codec import UnreadableReply, reply_from_json, reply_to_json
from capjudge.judges.types import JudgeReply

log = logging.getLogger(__name__)


def request_key(
    body: Mapping[str, Any], judge_version: str, sample_index: int, judge: Mapping[str, Any] | None = None,
    endpoint: str | None = None,
) -> str:
    """The cache key of one request. `judge`: what the server says about the model it serves (None: nothing
    beyond the model name in the body). `endpoint`: the server's normalised address, given only where two
    judges share a model name (panel members on two servers; `JudgeConfig.cache_scope`). With neither, the key
    is the one capjudge has always computed."""
    identity: dict[str, Any] = {"body": body, "judge_version": judge_version, "sample_index": sample_index}
    if judge:
        identity["judge"] = judge
    if endpoint:
        identity["endpoint"] = endpoint
    return hashlib.sha256(canonical_json(identity).encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_WRITER_IDLE_SECONDS = 1.0

Row = tuple[str, str, "str | None", float, str]  # key, judge_version, model, created, reply JSON


class ReplyCache:
    """Replies by request key. Writes are handed to one writer thread, which commits whatever has queued up
    in one transaction: a reply is readable in this process (`get`, through any ReplyCache on the same file)
    as soon as it is put, and on disk a moment later.

    Why not write in the judging thread: SQLite admits one writer at a time, and a writer thread must also
    get the GIL back to finish. With 64 judging threads each committing its own reply, every commit waited
    on the GIL behind the others while holding the file's write lock, and the judging threads queued behind
    it (measured: ~60 ms per item at 64 in flight, against a 200 ms judge). One writer and one commit per
    group removes the queue. What a kill -9 can lose is only the group not yet committed: those requests
    are asked again on the rerun, as any request in flight would be. `flush()` (also run at exit and by
    `close()`) waits until everything put is on disk."""

    # Unreadable rows reported one by one, per cache; after that only counted (a badly damaged file would
    # otherwise print a line per item).
    REPORTED_UNREADABLE = 5

    def __init__(self, path: Path | str, *, name: str | None = None):
        self.path = Path(path)
        self.name = name or cache_name(self.path)
        self._local = threading.local()
        self._local.conn = open_cache_file(self.path, self.name)
        self._writes = _PendingWrites.for_file(self.path)
        self.unreadable = 0
        self._unreadable_lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path)
        return conn

    def get(self, key: str) -> JudgeReply | None:
        """The reply cached under `key`; None when there is none, or when the row cannot be read (reported,
        and the next reply put under the key replaces it)."""
        row = self._writes.pending(key)
        if row is not None:
            return reply_from_json(row[4])
        try:
            stored = self._connection().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as error:  # a damaged page: this row is lost, the run is not
            self._report_unreadable(key, f"SQLite: {error}")
            return None
        if not stored:
            return None
        try:
            return reply_from_json(stored[0])
        except UnreadableReply as error:
            self._report_unreadable(key, str(error))
            self._writes.replace_on_write(key)
            return None

    def put(self, key: str, judge_version: str, reply: JudgeReply) -> None:
        self._writes.put((key, judge_version, reply.model, time.time(), reply_to_json(reply)))

    def _report_unreadable(self, key: str, problem: str) -> None:
        with self._unreadable_lock:
            self.unreadable += 1
            count = self.unreadable
        if count <= self.REPORTED_UNREADABLE:
            more = " (further unreadable rows are counted, not listed)" if count == self.REPORTED_UNREADABLE else ""
            log.warning("%s: the reply cached under key %s cannot be read (%s): taken as not cached, so the request "
                        "is sent again and its reply replaces the row%s", self.name, key[:16], problem, more)

    # -- which judge answered (see capjudge.judges.client.served_judges) --------------------------------

    def remember_judge(self, judge: Mapping[str, Any]) -> None:
        """Record that replies are keyed under this served-model identity (once per identity and file)."""
        text = canonical_json(judge)
        self._connection().execute(
            "INSERT OR IGNORE INTO judges (digest, identity, first_seen) VALUES (?, ?, ?)",
            (hashlib.sha256(text.encode("utf-8")).hexdigest(), text, time.time()),
        )

    def other_judges(
        self, body: Mapping[str, Any], judge_version: str, sample_index: int, judge: Mapping[str, Any] | None,
        endpoint: str | None = None,
    ) -> list[Mapping[str, Any]]:
        """The other judges whose reply to this request is cached (`judge`'s own is not, or it would have been
        found): their identities, {} for a reply cached without one (before identities were recorded, or from a
        server that said nothing about its model). Keys are looked up as this judge keys them (`endpoint`)."""
        candidates: list[tuple[Mapping[str, Any], str]] = []
        if judge:
            candidates.append(({}, request_key(body, judge_version, sample_index, None, endpoint)))
        for (text,) in self._connection().execute("SELECT identity FROM judges"):
            other = json.loads(text)
            if other != judge:
                candidates.append((other, request_key(body, judge_version, sample_index, other, endpoint)))
        return [other for other, key in candidates
                if self._connection().execute("SELECT 1 FROM replies WHERE key = ?", (key,)).fetchone()]

    def flush(self) -> None:
        """Return when every reply put so far (in this process, to this file) is committed to the file."""
        self._writes.flush()

    def __len__(self) -> int:
        self.flush()
        return self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        """Write everything queued, end the writer thread and close this thread's connection: after it, this
        process holds the file open only through other threads' connections (none, in the judging stage
        before it forks its workers: SQLite's rule is no connection open across a fork)."""
        self._writes.flush()
        self._writes.stop_writer()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None



class _PendingWrites:
    """The replies put in this process for one cache file and not yet committed, and the one thread that
    commits them. Every ReplyCache on that file in this process shares it, so a reply put through one (a
    task's client) is found through another (the next client on the same file) before it is on disk."""

    # Weak: a file's entry goes with its last ReplyCache once nothing is queued (the writer thread holds it
    # while it has rows to commit).
    _by_file: "weakref.WeakValueDictionary[str, _PendingWrites]" = weakref.WeakValueDictionary()
    _by_file_lock = threading.Lock()

    @classmethod
    def for_file(cls, path: Path) -> "_PendingWrites":
        with cls._by_file_lock:
            name = str(path.resolve())
            writes = cls._by_file.get(name)
            # After a failed write the old queue keeps its error (its caches keep reporting it); a cache opened
            # afterwards starts clean, as it would in a new process.
            if writes is None or writes._write_error is not None:
                writes = cls._by_file[name] = cls(path)
            return writes

    def __init__(self, path: Path):
        self.path = path
        # key -> row, from put() until committed (_unwritten: queued; _in_write: the group being committed).
        self._unwritten: dict[str, Row] = {}
        self._in_write: dict[str, Row] = {}
        self._changed = threading.Condition()
        self._writer: threading.Thread | None = None
        self._writer_waiting = False
        self._stopping = False
        self._write_error: BaseException | None = None
        # Keys whose stored row could not be read: their next reply replaces the row instead of being ignored.
        self._replacing: set[str] = set()

    def replace_on_write(self, key: str) -> None:
        with self._changed:
            self._replacing.add(key)

    def pending(self, key: str) -> Row | None:
        with self._changed:
            return self._unwritten.get(key) or self._in_write.get(key)

    def put(self, row: Row) -> None:
        key = row[0]
        with self._changed:
            self._raise_write_error()
            # The first reply for a key stays, in memory as on disk (INSERT OR IGNORE below).
            if key not in self._in_write:
                self._unwritten.setdefault(key, row)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="capjudge-cache-writer", daemon=True)
                self._writer.start()
            elif self._writer_waiting:  # a busy writer finds this row when its commit is done: no wake-up call
                self._writer_waiting = False
                self._changed.notify_all()

    def flush(self) -> None:
        with self._changed:
            while (self._unwritten or self._in_write) and self._write_error is None:
                self._changed.wait(0.5)
            self._raise_write_error()

    def stop_writer(self) -> None:
        """End the writer thread once the queue is empty (the next put starts another)."""
        with self._changed:
            writer, self._stopping = self._writer, True
            self._changed.notify_all()
        if writer is not None:
            writer.join()
        with self._changed:
            self._stopping = False

    def _write_loop(self) -> None:
        connection = None
        while True:
            with self._changed:
                if not self._unwritten and not self._stopping:
                    self._writer_waiting = True
                    self._changed.wait(_WRITER_IDLE_SECONDS)
                    self._writer_waiting = False
                if not self._unwritten:  # idle: the thread ends, and the next put starts another
                    self._writer = None
                    if connection is not None:
                        connection.close()
                    return
                group = self._in_write = self._unwritten
                self._unwritten = {}
                repairs = self._replacing & group.keys()
                self._replacing -= repairs
            try:
                connection = connection or connect(self.path)
                connection.execute("BEGIN IMMEDIATE")
                for verb, rows in (("INSERT OR IGNORE", [r for k, r in group.items() if k not in repairs]),
                                   ("INSERT OR REPLACE", [group[k] for k in repairs])):
                    connection.executemany(
                        f"{verb} INTO replies (key, judge_version, model, created, reply) VALUES (?, ?, ?, ?, ?)", rows
                    )
                connection.execute("COMMIT")
            except BaseException as error:  # noqa: BLE001 - reported to the next put/flush, not lost
                # Give the file back (the failed transaction held its write lock, and the stored error's
                # traceback would keep this connection alive with it).
                if connection is not None:
                    try:
                        connection.rollback()
                    finally:
                        connection.close()
                with self._changed:
                    self._write_error = error.with_traceback(None)
                    self._writer = None
                    self._changed.notify_all()
                return
            with self._changed:
                self._in_write = {}
                self._changed.notify_all()

    def _raise_write_error(self) -> None:
        if self._write_error is not None:
            raise CacheError(f"the judge reply cache {self.path} could not be written: {self._write_error}")


def _forget_inherited_writes() -> None:
    # A forked child never writes the parent's queued replies: the parent does (its writer thread was not
    # forked), and the child's own caches start their own.
    _PendingWrites._by_file = weakref.WeakValueDictionary()
    _PendingWrites._by_file_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_writes)


def flush_open_caches() -> None:
    """Write every reply still queued in this process (at exit; also before an exit that skips atexit)."""
    for writes in list(_PendingWrites._by_file.values()):
        try:
            writes.flush()
        except CacheError as error:  # at exit there is nobody left to raise to
            print(f"capjudge: {error}", file=sys.stderr)


@atexit.register
def _write_and_close_at_exit() -> None:
    """At exit: every queued reply written, the writer threads ended, every cache connection closed, so that
    SQLite folds the write-ahead log into the file and removes the -wal and -shm files beside it."""
    flush_open_caches()
    for writes in list(_PendingWrites._by_file.values()):
        writes.stop_writer()
    close_open_connections()

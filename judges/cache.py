"""A persistent cache of judge replies in one SQLite file.

The key is a hash of the complete request body (model, messages with the image bytes, sampling and logprob
settings), the judge's version string and a sample index. The sample index is what makes repeated sampling
at temperature > 0 possible on purpose: the same request with another index is another cache row. The API
key is not part of the body, so it never reaches the file.

SQLite in WAL mode gives many readers and one writer at a time across threads and processes; each thread
holds its own connection (sqlite3 connections must not cross threads) and a busy timeout turns a
concurrent write into a short wait instead of an error.

That holds on one machine. SQLite's locks are not reliable on network file systems (NFS, SMB, Lustre, ...),
where several nodes writing one file can corrupt it: a cache there is refused with a clear error. Several
nodes each keep a node-local cache (CAPJUDGE_CACHE) and `capjudge cache merge` joins them afterwards.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Mapping

from capjudge.judges.config import ConfigError
from capjudge.judges.types import JudgeReply, TokenLogprob, Usage

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    judge_version TEXT NOT NULL,
    model TEXT,
    created REAL NOT NULL,
    reply TEXT NOT NULL
)
"""


def request_key(body: Mapping[str, Any], judge_version: str, sample_index: int) -> str:
    canonical = json.dumps(
        {"body": body, "judge_version": judge_version, "sample_index": sample_index},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def reply_to_json(reply: JudgeReply) -> str:
    # Built field by field rather than with dataclasses.asdict, which deep-copies every logprob entry: on a
    # judge reply with top-20 logprobs that was a fifth of the client's CPU per request (profiled at 64 in
    # flight). The JSON is the same as asdict's, minus `cached`.
    logprobs = None if reply.logprobs is None else [
        {"token": item.token, "logprob": item.logprob, "top": [[token, logprob] for token, logprob in item.top]}
        for item in reply.logprobs
    ]
    usage = reply.usage
    data = {
        "content": reply.content,
        "logprobs": logprobs,
        "finish_reason": reply.finish_reason,
        "model": reply.model,
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "requests": usage.requests},
        "refusal": reply.refusal,
    }
    return json.dumps(data, ensure_ascii=False)


def reply_from_json(text: str) -> JudgeReply:
    data = json.loads(text)
    logprobs = data.get("logprobs")
    return JudgeReply(
        content=data.get("content"),
        logprobs=None
        if logprobs is None
        else tuple(
            TokenLogprob(item["token"], item["logprob"], tuple((t, lp) for t, lp in item.get("top", ())))
            for item in logprobs
        ),
        finish_reason=data.get("finish_reason"),
        model=data.get("model"),
        usage=Usage(**data.get("usage", {})),
        cached=True,
        refusal=data.get("refusal"),
    )


# File systems on which SQLite's locking cannot be trusted across machines.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "afs", "9p",
    "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs", "fuse.juicefs", "fuse.rclone",
})


class CacheError(ConfigError):
    """The cache file cannot be used safely where it is; the message says where to put it instead."""


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system holding `path` (the longest mount point containing it, from
    /proc/mounts), or None where that cannot be told (not Linux)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text(encoding="utf-8")
        except OSError:
            return None
    target = Path(path).resolve()
    best: tuple[int, str] | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = Path(fields[1].replace("\\040", " "))
        if target == mount_point or mount_point in target.parents:
            depth = len(mount_point.parts)
            if best is None or depth > best[0]:
                best = (depth, fields[2])
    return best[1] if best else None


def check_local_filesystem(path: Path, mounts: str | None = None) -> None:
    kind = filesystem_type(Path(path).parent, mounts)
    if kind in NETWORK_FILESYSTEMS:
        raise CacheError(
            f"the judge reply cache {path} is on a network file system ({kind}), where SQLite's locks are not "
            "safe for writers on several machines. Set CAPJUDGE_CACHE to a node-local path (e.g. local disk or "
            "/tmp) on each node, and join the node caches afterwards with `capjudge cache merge NODE_CACHES... "
            "--into CACHE`"
        )


def merge_caches(sources: list[Path], destination: Path) -> dict[str, int]:
    """Copy every reply of `sources` into `destination` (created if missing); a key already there keeps its
    reply (as two processes judging the same request do). Returns, per source, how many replies were new."""
    for source in sources:
        if not Path(source).is_file():
            raise CacheError(f"{source}: no such cache file")
        if Path(source).resolve() == Path(destination).resolve():
            raise CacheError(f"{source}: merging a cache into itself")
    cache = ReplyCache(destination)
    connection = cache._connection()
    added: dict[str, int] = {}
    for source in sources:
        before = len(cache)
        connection.execute("ATTACH DATABASE ? AS source", (str(source),))
        try:
            try:
                connection.execute(
                    "INSERT OR IGNORE INTO replies (key, judge_version, model, created, reply) "
                    "SELECT key, judge_version, model, created, reply FROM source.replies"
                )
            except sqlite3.DatabaseError as error:
                raise CacheError(f"{source}: not a capjudge reply cache ({error})") from None
        finally:
            connection.execute("DETACH DATABASE source")
        added[str(source)] = len(cache) - before
    return added


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

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_local_filesystem(self.path)
        self._local = threading.local()
        with self._connection() as conn:
            conn.execute(SCHEMA)
        self._writes = _PendingWrites.for_file(self.path)

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path)
        return conn

    def get(self, key: str) -> JudgeReply | None:
        row = self._writes.pending(key)
        if row is not None:
            return reply_from_json(row[4])
        stored = self._connection().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return reply_from_json(stored[0]) if stored else None

    def put(self, key: str, judge_version: str, reply: JudgeReply) -> None:
        self._writes.put((key, judge_version, reply.model, time.time(), reply_to_json(reply)))

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


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None)
    enable_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


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
            try:
                connection = connection or connect(self.path)
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(
                    "INSERT OR IGNORE INTO replies (key, judge_version, model, created, reply) VALUES (?, ?, ?, ?, ?)",
                    list(group.values()),
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


@atexit.register
def flush_open_caches() -> None:
    """Write every reply still queued in this process (at exit; also before an exit that skips atexit)."""
    for writes in list(_PendingWrites._by_file.values()):
        try:
            writes.flush()
        except CacheError as error:  # at exit there is nobody left to raise to
            print(f"capjudge: {error}", file=sys.stderr)


def enable_wal(conn: sqlite3.Connection, patience: float = 60.0) -> None:
    """Switch the file to WAL (persistent: done once per file). Two processes opening a new cache at the same
    moment can both try; SQLite then answers "database is locked" at once, without waiting on the busy
    timeout (it cannot wait inside that lock upgrade without risking a deadlock), so wait and try again."""
    deadline = time.monotonic() + patience
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


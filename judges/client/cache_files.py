"""Whether a file can be the judge reply cache, and opening it: one clear error when it cannot.

SQLite's locks are not reliable on network file systems (NFS, SMB, Lustre, ...), where several nodes writing one
file can corrupt it: a cache there is refused with a clear error. Several nodes each keep a node-local cache
(CAPJUDGE_CACHE) and `capjudge cache merge` (capjudge.judges.client.cache_merge) joins them afterwards.

A file that is not a usable cache (a folder, unwritable, damaged, another program's database) is refused when
the cache is opened, with one message that names the file, what is wrong and what to do; it is never changed,
moved or replaced.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from capjudge.judges.client.config import ConfigError

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    judge_version TEXT NOT NULL,
    model TEXT,
    created REAL NOT NULL,
    reply TEXT NOT NULL
)
"""
REPLY_COLUMNS = frozenset({"key", "judge_version", "model", "created", "reply"})
# Every served-model identity that has keyed a reply in this file (see capjudge.judges.client.served_judges). A
# table of its own, so files stay readable and writable by capjudge versions from before it.
JUDGES_SCHEMA = """
CREATE TABLE IF NOT EXISTS judges (
    digest TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    first_seen REAL NOT NULL
)
"""
CACHE_VARIABLE = "CAPJUDGE_CACHE"


class CacheError(ConfigError):
    """The cache file cannot be used (where it is, or as it is); the message names it and says what to do."""


# File systems on which SQLite's locking cannot be trusted across machines.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "afs", "9p",
    "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs", "fuse.juicefs", "fuse.rclone",
})


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


# ------------------------------------------------------------------------------------------------------------
# Opening a cache file: usable, or one clear error


def cache_name(path: Path) -> str:
    """How messages name the judge's cache: the file and the variable that sets it."""
    return f"the judge reply cache {path} ({CACHE_VARIABLE})"


def open_cache_file(path: Path, name: str) -> sqlite3.Connection:
    """A connection to the reply cache at `path` (created if missing, in WAL mode), or CacheError: one line with
    `name`, what is wrong and what to do. An existing file is written to only once it is known to be a reply
    cache; a bad one is left exactly as it is."""
    check_local_filesystem(path)
    _check_writable(path, name)
    conn = connect_plain(path, name)
    _once_a_cache(conn, path, name, _prepare_for_writing)
    return conn


def _prepare_for_writing(conn: sqlite3.Connection) -> None:
    enable_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(SCHEMA)
    conn.execute(JUDGES_SCHEMA)


def _once_a_cache(conn: sqlite3.Connection, path: Path, name: str, then: Callable[[sqlite3.Connection], T]) -> T:
    """`then(conn)`, run only once the file is known to be a reply cache (or still empty); otherwise the
    connection is closed and the CacheError says what the file is, with nothing in it changed."""
    try:
        problem = schema_problem(conn)
        result = then(conn) if problem is None else None
    except sqlite3.DatabaseError as error:
        conn.close()
        raise _database_error(path, name, error) from None
    if problem is not None:
        conn.close()
        raise CacheError(f"{name} {problem}. Nothing in it was changed: {_what_to_do(path)}")
    return result  # type: ignore[return-value]


def check_cache_file(path: Path, name: str | None = None) -> None:
    """Raise CacheError unless `path` can be used as the judge's reply cache (at task load, before any request:
    a run fails there, not after its generation). Creates the file when missing."""
    open_cache_file(Path(path), name or cache_name(Path(path))).close()


def open_cache_read_only(path: Path, name: str) -> sqlite3.Connection | None:
    """A read-only connection to the reply cache at `path`, for a dry run that only looks replies up; None when
    there is no file, or a file with no replies table yet (nothing is cached). Never creates, converts or writes
    it (closing it folds SQLite's write-ahead log into it, as closing any connection does, and leaves no -wal or
    -shm file: `_opened_for_reading`); a file that is not a usable cache is the same CacheError a run gives."""
    path = Path(path)
    if path.is_dir():
        raise CacheError(f"{name} is a folder, not a file: use a file path, e.g. {path / 'judge_cache.sqlite'}")
    if not path.exists():
        return None
    try:
        conn = _opened_for_reading(path)
    except sqlite3.Error as error:
        raise CacheError(f"{name} cannot be opened: {error}") from None
    empty = _once_a_cache(conn, path, name, lambda checked: checked.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'replies'").fetchone() is None)
    if empty:
        conn.close()
        return None
    return conn


def _check_writable(path: Path, name: str) -> None:
    if path.is_dir():
        raise CacheError(f"{name} is a folder, not a file: use a file path, e.g. {path / 'judge_cache.sqlite'}")
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise CacheError(f"{name} cannot be created: {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CacheError(f"{name} cannot be created: its folder {folder}: {error.strerror or error}") from None
    # SQLite writes the file and, in WAL mode, two files beside it (-wal, -shm): both must be writable.
    for target, what in ((path, "the file"), (folder, f"its folder {folder}")):
        if target.exists() and not os.access(target, os.W_OK):
            raise CacheError(f"{name} cannot be written ({what} is read-only for this user): use a writable path")


class _CacheConnection(sqlite3.Connection):
    """A reply-cache connection this process closes itself at exit (`close_open_connections`). SQLite checkpoints
    the write-ahead log and removes the -wal and -shm files beside the cache when the last connection to it
    closes; a connection left to the end of the process is never closed, so both files stayed behind
    (`capjudge demo` left judge_cache.sqlite-wal and -shm in its output folder). Each connection is still used
    by the one thread that opened it; check_same_thread=False only lets the exit handler close it."""


# Weak: a connection closed and dropped by its owner leaves the set by itself (sqlite3.Connection itself cannot be
# weakly referenced; its subclass can).
_open_connections: "weakref.WeakSet[_CacheConnection]" = weakref.WeakSet()
_open_connections_lock = threading.Lock()


def _opened(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None, factory=_CacheConnection,
                           check_same_thread=False)
    with _open_connections_lock:
        _open_connections.add(conn)
    return conn


def _opened_for_reading(path: Path) -> sqlite3.Connection:
    """A connection that cannot change the cache, and leaves no -wal or -shm file behind when it closes.

    A WAL file's reader needs the -wal and -shm files, and SQLite makes them when they are missing; a `mode=ro`
    connection may not checkpoint, so it never removes them again (`capjudge sensitivity --dry-run` left both
    beside the cache). So a file this user may write is opened read-write but `query_only` (SQLite refuses any
    statement that writes): closing it as the last connection folds the log in and removes both files, under
    SQLite's own locks, so a writer in another process keeps its files. `mode=rw` never creates a missing file.
    A file this user cannot write is opened `mode=ro`, as before (SQLite cannot tidy up after it there either).
    Registered like a run's connections, so one left open is closed at exit too."""
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode={'rw' if writable else 'ro'}", uri=True, timeout=60.0,
                           factory=_CacheConnection, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only=ON")
    except sqlite3.Error:
        conn.close()
        raise
    with _open_connections_lock:
        _open_connections.add(conn)
    return conn


def close_open_connections() -> None:
    """Close every reply-cache connection this process opened (at exit, after the queued replies are written)."""
    with _open_connections_lock:
        connections = list(_open_connections)
        _open_connections.clear()
    for conn in connections:
        try:
            conn.close()
        except sqlite3.Error:  # at exit there is nobody to tell; the file itself is committed
            pass


def _forget_inherited_connections() -> None:
    # A forked child must never close its parent's connections: that close could checkpoint and remove the
    # write-ahead log the parent is still writing (SQLite: no connection across a fork).
    global _open_connections, _open_connections_lock
    _open_connections = weakref.WeakSet()
    _open_connections_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_connections)


def connect_plain(path: Path, name: str) -> sqlite3.Connection:
    try:
        return _opened(path)
    except sqlite3.Error as error:
        raise CacheError(f"{name} cannot be opened: {error}") from None


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """What makes an SQLite file something other than a reply cache (None: a cache, or an empty file)."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "replies" not in tables:
        others = sorted(tables - {"judges"})
        return f"is an SQLite database but not a capjudge reply cache (its tables: {', '.join(others)})" if others else None
    missing = REPLY_COLUMNS - {row[1] for row in conn.execute("PRAGMA table_info(replies)")}
    if missing:
        return f"is not a capjudge reply cache (its table `replies` has no column {', '.join(sorted(missing))})"
    return None


def _database_error(path: Path, name: str, error: sqlite3.DatabaseError) -> CacheError:
    if isinstance(error, sqlite3.OperationalError):  # could not open, read-only, locked, I/O: not the file's content
        return CacheError(f"{name} cannot be used: SQLite says {error!s}. Check the path and its permissions")
    # SQLITE_NOTADB ("file is not a database"), SQLITE_CORRUPT ("database disk image is malformed"): the content.
    return CacheError(
        f"{name} is damaged or not a capjudge reply cache (SQLite says: {error}). Nothing in it was changed: "
        f"{_what_to_do(path)}; `sqlite3 {path} .recover` may salvage a damaged cache's replies"
    )


def _what_to_do(path: Path) -> str:
    return (
        f"move it aside (with its -wal and -shm files, if any: `mv {path} {path}.broken`) to start an empty cache, "
        "or use another file"
    )


def connect(path: Path) -> sqlite3.Connection:
    conn = _opened(path)
    enable_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


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

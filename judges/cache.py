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

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import asdict
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
    data = asdict(reply)
    data.pop("cached")
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


class ReplyCache:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_local_filesystem(self.path)
        self._local = threading.local()
        with self._connection() as conn:
            conn.execute(SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> JudgeReply | None:
        row = self._connection().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return reply_from_json(row[0]) if row else None

    def put(self, key: str, judge_version: str, reply: JudgeReply) -> None:
        # INSERT OR IGNORE: when two processes judged the same request at once, the first row stays.
        self._connection().execute(
            "INSERT OR IGNORE INTO replies (key, judge_version, model, created, reply) VALUES (?, ?, ?, ?, ?)",
            (key, judge_version, reply.model, time.time(), reply_to_json(reply)),
        )

    def __len__(self) -> int:
        return self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()[0]


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


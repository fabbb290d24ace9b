"""A persistent cache of judge replies in one SQLite file.

The key is a hash of the complete request body (model, messages with the image bytes, sampling and logprob
settings), the judge's version string and a sample index (and, for panel members that share a model name on
two servers, the member's normalised endpoint: `JudgeConfig.cache_scope`). The sample index is what makes
repeated sampling at temperature > 0 possible on purpose: the same request with another index is another
cache row. The API key is not part of the body, so it never reaches the file.

SQLite in WAL mode gives many readers and one writer at a time across threads and processes; each thread
holds its own connection (sqlite3 connections must not cross threads) and a busy timeout turns a
concurrent write into a short wait instead of an error.

That holds on one machine. SQLite's locks are not reliable on network file systems (NFS, SMB, Lustre, ...),
where several nodes writing one file can corrupt it: a cache there is refused with a clear error. Several
nodes each keep a node-local cache (CAPJUDGE_CACHE) and `capjudge cache merge` joins them afterwards.

Which judge answered. A server of our own (vLLM, llama.cpp, `capjudge serve-local`) can serve a different model
under the same name from one run to the next. What it says about the model behind the name (its GET /models
entry: llama.cpp's metadata, vLLM's model path, serve-local's GGUF sha256) is part of the key, so two judges
never share replies, and the `judges` table remembers every such identity so that a run can say when the
cache holds replies to its requests from another judge. OpenAI and Azure name dated models, so their keys
(and caches made before identities were recorded) are unchanged; a server that says nothing beyond the name
keeps its old keys too. A server that does identify its model does not reuse replies cached before (their
judge is unknown): the run says so, and asks again.

A file that is not a usable cache (a folder, unwritable, damaged, another program's database) is refused when
the cache is opened, with one message that names the file, what is wrong and what to do; it is never changed,
moved or replaced. A single unreadable row is a cache miss that is reported, and its new reply replaces it;
in `capjudge cache merge`, a readable copy of it from any source replaces it.
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
from typing import Any, Callable, Mapping

from capjudge.judges.client.config import ConfigError
from capjudge.judges.types import JudgeReply, TokenLogprob, Usage

log = logging.getLogger(__name__)

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
# Every served-model identity that has keyed a reply in this file (see the module docstring). A table of its
# own, so files stay readable and writable by capjudge versions from before it.
JUDGES_SCHEMA = """
CREATE TABLE IF NOT EXISTS judges (
    digest TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    first_seen REAL NOT NULL
)
"""
CACHE_VARIABLE = "CAPJUDGE_CACHE"


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


class UnreadableReply(ValueError):
    """A stored reply that is not the JSON `reply_to_json` writes (a damaged row, or one edited by hand)."""


def reply_from_json(text: str) -> JudgeReply:
    """The reply a row holds; UnreadableReply when it is not one. Checked field by field: a wrongly typed field
    let through would fail later, inside a judge's parser, mid-run. Fields this version does not know (from a
    newer capjudge sharing the file) are ignored, not taken for damage."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        logprobs = data.get("logprobs")
        usage = data.get("usage") or {}
        return JudgeReply(
            content=_text_or_none(data, "content"),
            logprobs=None if logprobs is None else tuple(_token_logprob(item) for item in logprobs),
            finish_reason=_text_or_none(data, "finish_reason"),
            model=_text_or_none(data, "model"),
            usage=Usage(**{name: _count(usage, name) for name in ("prompt_tokens", "completion_tokens", "requests")}),
            cached=True,
            refusal=_text_or_none(data, "refusal"),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise UnreadableReply(f"{type(error).__name__}: {str(error)[:120]}") from None


def _text_or_none(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name!r} is {type(value).__name__}, not text")
    return value


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"usage {name!r} is {type(value).__name__}, not a count")
    return value


def _token_logprob(item: Mapping[str, Any]) -> TokenLogprob:
    token, logprob = item["token"], item["logprob"]
    if not isinstance(token, str) or not isinstance(logprob, (int, float)):
        raise TypeError("a logprob entry without a text token and a number")
    return TokenLogprob(token, float(logprob), tuple((str(t), float(lp)) for t, lp in item.get("top", ())))


# File systems on which SQLite's locking cannot be trusted across machines.
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "afs", "9p",
    "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs", "fuse.juicefs", "fuse.rclone",
})


class CacheError(ConfigError):
    """The cache file cannot be used (where it is, or as it is); the message names it and says what to do."""


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
# Which judge: what a server says about the model it serves

# The fields of a GET /models entry that say which model a name stands for and stay the same while that model is
# served: vLLM's `root` (the weights' path or hub id) and `parent` (a LoRA's base model), llama.cpp's `meta`
# (parameter count, size, vocabulary), serve-local's `meta` (the GGUF's sha256). Never `created` (vLLM answers
# the current time) or `permission`: they would change every key at every start of an unchanged server.
IDENTITY_FIELDS = ("id", "root", "parent", "meta")


def served_judge(listing: Any, model: str) -> dict[str, Any] | None:
    """What a model listing (the JSON of GET /models) says about the model served as `model`: its entry, else
    the one model a single-model server lists (llama.cpp answers any name with it). None when it says nothing
    beyond the name itself."""
    entries = listing.get("data") if isinstance(listing, Mapping) else None
    entries = [entry for entry in entries if isinstance(entry, Mapping)] if isinstance(entries, list) else []
    named = [entry for entry in entries if entry.get("id") == model]
    entry = named[0] if named else entries[0] if len(entries) == 1 else None
    if entry is None:
        return None
    identity = {name: entry[name] for name in IDENTITY_FIELDS if entry.get(name) not in (None, "", [], {})}
    return None if identity in ({}, {"id": model}) else identity


def asks_for_identity(config: Any) -> bool:
    """Whether the judge's server is asked what it serves: any OpenAI-compatible server but OpenAI's own. OpenAI
    and Azure names are dated snapshots and deployments; they are asked nothing, and their keys never change."""
    if config.api_type != "openai" or not config.base_url:
        return False
    from urllib.parse import urlparse

    return (urlparse(config.base_url).hostname or "") != "api.openai.com"


class ServedJudges:
    """The judge server's model listing, asked once when the client is built, and what follows from it: each
    request's cache key, and the one-time notice when the cache holds a request's reply from another judge."""

    def __init__(self, listing: Any = None, endpoint: str = "", scope: str | None = None):
        self._listing = listing
        self._endpoint = endpoint
        self._scope = scope  # JudgeConfig.cache_scope: the endpoint keys carry, when they must
        self._identities: dict[str, dict[str, Any] | None] = {}
        self._remembered: set[str] = set()
        self._reported: set[str] = set()
        self._lock = threading.Lock()
        self.other_judge_replies = 0  # requests asked again because only another judge's reply was cached

    @classmethod
    def ask(cls, config: Any, sdk: Any, redact: Callable[[str], str]) -> "ServedJudges":
        """What the server at `config` serves, asked through the judge's own SDK client (`sdk`: its key, its
        base URL), with one GET /models (nothing for OpenAI or Azure). The listing passes through `redact` (the
        client's) first: what it says goes into the cache file and into messages, and a server may echo the key."""
        endpoint, scope = config.endpoint_label, config.cache_scope
        if not asks_for_identity(config):
            return cls(endpoint=endpoint, scope=scope)
        import httpx

        try:
            listing = json.loads(redact(sdk.get("/models", cast_to=httpx.Response).read().decode("utf-8")))
        except Exception as error:  # noqa: BLE001 - any failure means the same: the server says nothing
            # The status or the kind of failure only: a server's error text may quote the key.
            status = getattr(error, "status_code", None)
            log.warning("capjudge: could not ask %s which model it serves (GET /models: %s): its cached replies are "
                        "matched by model name only", endpoint, f"HTTP {status}" if status else type(error).__name__)
            return cls(endpoint=endpoint, scope=scope)
        return cls(listing, endpoint, scope)

    def identity(self, model: str) -> dict[str, Any] | None:
        with self._lock:
            if model not in self._identities:
                self._identities[model] = served_judge(self._listing, model)
            return self._identities[model]

    def request_key(self, body: Mapping[str, Any], judge_version: str, sample_index: int) -> str:
        return request_key(body, judge_version, sample_index, self.identity(str(body.get("model"))), self._scope)

    def before_asking(self, cache: "ReplyCache", body: Mapping[str, Any], judge_version: str, sample_index: int) -> None:
        """On a cache miss, before the request: record this judge in the cache, and say (once per other judge)
        when the cache holds this request's reply from another one, which is not reused."""
        model = str(body.get("model"))
        judge = self.identity(model)
        try:
            if judge and model not in self._remembered:
                cache.remember_judge(judge)
                self._remembered.add(model)
            others = cache.other_judges(body, judge_version, sample_index, judge, self._scope)
        except (sqlite3.Error, ValueError) as error:  # a notice, never a reason to stop judging
            log.debug("capjudge: no judge-identity check in %s: %s", cache.name, error)
            return
        with self._lock:
            self.other_judge_replies += bool(others)
            new = [other for other in others if canonical_json(other) not in self._reported]
            self._reported.update(canonical_json(other) for other in new)
        for other in new:
            log.warning("capjudge: %s", self._other_judge_notice(cache, model, judge, other))

    def _other_judge_notice(self, cache: "ReplyCache", model: str, judge: Mapping[str, Any] | None,
                            other: Mapping[str, Any]) -> str:
        this = f"{self._endpoint} serves {_describe(judge)} as {model!r}" if judge else \
            f"{self._endpoint} does not say which model it serves as {model!r}"
        cached = f"another judge ({_describe(other)})" if other else (
            "a judge of unknown identity (cached before capjudge recorded which model a server serves, or from a "
            "server that did not say)")
        return (f"{cache.name} holds replies to this run's requests from {cached}; {this}. They are not reused: "
                "those requests are asked again (further ones from that judge are not listed)")


def _describe(identity: Mapping[str, Any] | None) -> str:
    text = canonical_json(identity or {})
    return text if len(text) <= 240 else text[:240] + "..."


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
    conn = _connect_plain(path, name)
    try:
        problem = _schema_problem(conn)
        if problem is None:
            enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(SCHEMA)
            conn.execute(JUDGES_SCHEMA)
    except sqlite3.DatabaseError as error:
        conn.close()
        raise _database_error(path, name, error) from None
    if problem is not None:
        conn.close()
        raise CacheError(f"{name} {problem}. Nothing in it was changed: {_what_to_do(path)}")
    return conn


def check_cache_file(path: Path, name: str | None = None) -> None:
    """Raise CacheError unless `path` can be used as the judge's reply cache (at task load, before any request:
    a run fails there, not after its generation). Creates the file when missing."""
    open_cache_file(Path(path), name or cache_name(Path(path))).close()


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


def _connect_plain(path: Path, name: str) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, timeout=60.0, isolation_level=None)
    except sqlite3.Error as error:
        raise CacheError(f"{name} cannot be opened: {error}") from None


def _schema_problem(conn: sqlite3.Connection) -> str | None:
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


# ------------------------------------------------------------------------------------------------------------
# Merging node caches


def merge_caches(sources: list[Path], destination: Path) -> dict[str, int]:
    """Copy every reply of `sources` into `destination` (created if missing); a key already there keeps its
    reply (as two processes judging the same request do), unless that reply cannot be read and the source's
    can: then the readable copy replaces it. Returns, per source, how many replies were new (replacements of
    unreadable ones included).

    Every source is checked (a reply cache, readable to its last page) before the destination is created or
    touched, so a bad source is one error and no empty or half-merged destination is left behind; each source
    is then copied in one statement (all its replies or none)."""
    destination = Path(destination)
    for source in sources:
        _check_source(Path(source), destination)
    existed = destination.exists()
    cache = ReplyCache(destination, name=f"--into {destination}")
    try:
        added = {str(source): _merge_one(cache, Path(source)) for source in sources}
    except BaseException:
        cache.close()
        if not existed:  # nothing of it was there before: leave nothing behind
            for leftover in (destination, *(destination.with_name(destination.name + end) for end in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
        raise
    cache.close()
    return added


def _check_source(source: Path, destination: Path) -> None:
    if not source.is_file():
        raise CacheError(f"{source}: no such cache file")
    if _same_file(source, destination):
        raise CacheError(f"{source} is the same file as --into {destination} (the same path, or a hard or symbolic "
                         "link to it): merging a cache into itself; nothing was merged")
    conn = _connect_plain(source, str(source))
    try:
        problem = _schema_problem(conn)
        if problem is None and "replies" not in _tables(conn):
            problem = "is empty: not a capjudge reply cache"
        if problem is None:
            # The whole file is read by the merge anyway: find a damaged page now, before anything is written.
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if verdict != "ok":
                raise sqlite3.DatabaseError(f"damaged: {verdict}")
    except sqlite3.DatabaseError as error:
        raise CacheError(f"{source} is damaged or not a capjudge reply cache (SQLite says: {error}); "
                         "nothing was merged") from None
    finally:
        conn.close()
    if problem is not None:
        raise CacheError(f"{source} {problem}; nothing was merged")


def _same_file(source: Path, destination: Path) -> bool:
    """Whether `source` is `destination` under another name: the same path once links are resolved, or the same
    file (device and inode) through a hard link, which no path comparison sees. SQLite would then attach the
    destination to itself and answer a misleading "database is locked"."""
    if source.resolve() == destination.resolve():
        return True
    try:
        return destination.exists() and os.path.samefile(source, destination)
    except OSError:  # one of them vanished or cannot be looked at: then they cannot be compared, nor be one
        return False


def _tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    return {row[0] for row in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}


def _merge_one(cache: "ReplyCache", source: Path) -> int:
    connection = cache._connection()
    before = len(cache)
    connection.execute("ATTACH DATABASE ? AS source", (str(source),))
    try:
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                "INSERT OR IGNORE INTO replies (key, judge_version, model, created, reply) "
                "SELECT key, judge_version, model, created, reply FROM source.replies"
            )
            repaired = _replace_unreadable_rows(connection)
            if "judges" in _tables(connection, "source"):  # absent from caches older than judge identities
                connection.execute("INSERT OR IGNORE INTO judges SELECT digest, identity, first_seen FROM source.judges")
            connection.execute("COMMIT")
        except sqlite3.DatabaseError as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise CacheError(f"{source}: not a capjudge reply cache ({error}); nothing of it was merged") from None
    finally:
        connection.execute("DETACH DATABASE source")
    return len(cache) - before + repaired


def _replace_unreadable_rows(connection: sqlite3.Connection) -> int:
    """Inside a merge (the source attached as `source`): where the destination's reply under a key cannot be
    read and the source's reply under it can, the source's row replaces it; returns how many did. Without
    this, INSERT OR IGNORE kept whichever copy came first, so a damaged row from an earlier source (issue 36)
    hid a good copy from a later one, and the key would be asked again. Read as bytes: an undecodable row
    must not stop the comparison."""
    differing = connection.execute(
        "SELECT mine.key, CAST(mine.reply AS BLOB), CAST(theirs.reply AS BLOB) FROM main.replies AS mine "
        "JOIN source.replies AS theirs ON theirs.key = mine.key WHERE theirs.reply IS NOT mine.reply"
    ).fetchall()
    keys = [(key,) for key, mine, theirs in differing if not _readable_reply(mine) and _readable_reply(theirs)]
    connection.executemany(
        "INSERT OR REPLACE INTO main.replies (key, judge_version, model, created, reply) "
        "SELECT key, judge_version, model, created, reply FROM source.replies WHERE key = ?", keys
    )
    return len(keys)


def _readable_reply(stored: bytes | None) -> bool:
    """Whether a stored reply (its bytes) is one `ReplyCache.get` can read."""
    try:
        reply_from_json(bytes(stored or b"").decode("utf-8"))
    except (UnicodeDecodeError, UnreadableReply):
        return False
    return True


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

    # -- which judge answered (see the module docstring) ------------------------------------------------

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


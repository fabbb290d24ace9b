"""`capjudge cache merge`: the replies of several node caches joined into one.

A key already in the destination keeps its reply, as two processes judging the same request do, unless that
reply cannot be read (capjudge.judges.client.reply_codec): then a readable copy of it from any source replaces
it. Every source is checked before the destination is created or touched.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from capjudge.judges.client.cache import ReplyCache
from capjudge.judges.client.cache_files import CacheError, connect_plain, schema_problem
from capjudge.judges.client.reply_codec import UnreadableReply, reply_from_json


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
    conn = connect_plain(source, str(source))
    try:
        problem = schema_problem(conn)
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

"""Writing output files so that no reader ever sees half a file, and a file written by another run is never
replaced.

Every file is written to a temporary file beside it and then moved into place in one step: a reader (a
leaderboard built while `capjudge judge` writes, a rerun after a kill) sees the old file, the whole new one, or
none. `publish_new` never replaces a file that exists (two runs finishing in the same second each keep their
own); `publish_replacing` is for a command's own outputs (leaderboard.md, report.html), which a rerun updates.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

_PARTIAL_SUFFIX = ".partial"
# Filesystems that cannot hard-link (some network and FUSE mounts) say so with one of these.
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV}


class OutputError(ValueError):
    """An output folder cannot be written; the message names the flag and the folder."""


def writable_folder(path: Path, flag: str = "--out") -> Path:
    """`path` made (with its parents) and checked by creating a file in it, before any work is done; a file,
    or a folder that cannot be made or written, is an OutputError naming `flag` and the path."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".capjudge-write-check-"):
            pass
    except OSError as error:
        raise OutputError(f"{flag} {path}: cannot write there ({error.strerror or error})") from None
    return path


def stage(path: Path, chunks: Iterable[str | bytes]) -> Path:
    """Write `chunks` to a new temporary file beside `path` (flushed to disk) and return it; nothing is
    visible under `path` yet. The temporary file is removed if writing fails."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.", suffix=_PARTIAL_SUFFIX)
    staged = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                out.write(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def publish_new(staged: Path, path: Path) -> bool:
    """Put `staged`'s content at `path` unless `path` exists (then False); `staged` stays, for another name or
    for `discard`. Atomic where the filesystem can hard-link; elsewhere a check, then a copy moved into place,
    which only another writer of the very same name in the same instant can race."""
    try:
        os.link(staged, path)
        return True
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno not in _NO_HARD_LINKS:
            raise
    if path.exists():
        return False
    with staged.open("rb") as source:
        os.replace(stage(path, iter(lambda: source.read(1 << 20), b"")), path)
    return True


def publish_replacing(staged: Path, path: Path) -> None:
    os.replace(staged, path)


def write_replacing(path: Path, content: str | bytes) -> None:
    """`path` holds `content`, written whole or not at all (the old file stays until the new one is complete)."""
    publish_replacing(stage(path, [content]), path)


def discard(*staged: Path) -> None:
    for path in staged:
        path.unlink(missing_ok=True)

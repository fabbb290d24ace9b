"""Writing files so that no reader ever sees half a file, and a file written by another run is never replaced.

Every file is written to a temporary file beside it and then moved into place in one step: a reader (a
leaderboard built while `capjudge judge` writes, a rerun after a kill, a launcher waiting for a server's ready
file) sees the old file, the whole new one, or none. `publish_new` never replaces a file that exists (two runs
finishing in the same second each keep their own); `publish_replacing` is for a command's own outputs
(leaderboard.md, report.html), which a rerun updates.

A temporary file's name says who writes it (`.NAME.<host>-<pid>.<random>.partial`): a writer killed before it
could remove its own (SIGKILL, power loss) leaves one behind, and `sweep_stale_partials` removes those whose
writer, on this host, is no longer running; a file of a live writer, or of another host on a shared folder, is
left alone.

Judge-neutral and standard library only, in the bottom layer so that every layer writes through it (the
local judge's ready file and weights, the runs, the leaderboards, the reports).
"""

from __future__ import annotations

import errno
import os
import re
import socket
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

_PARTIAL_SUFFIX = ".partial"
# .NAME.<host>-<pid>.<random>.partial, as `stage` names its temporary files.
_PARTIAL_NAME = re.compile(r"^\..*\.(?P<host>[A-Za-z0-9_-]{1,64})-(?P<pid>[0-9]{1,10})\.[^.]+\.partial$")
# Filesystems that cannot hard-link (some network and FUSE mounts) say so with one of these.
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV}


def stage(path: Path, chunks: Iterable[str | bytes], *, private: bool = False) -> Path:
    """Write `chunks` to a new temporary file beside `path` (flushed to disk) and return it; nothing is
    visible under `path` yet. The temporary file is removed if writing fails.

    The file gets the mode the user's umask gives any new file (0644 under the usual 022), as lmms-eval's own
    files do: leaderboards, reports and runs are made to be shared. `private=True` keeps it owner-only (0600),
    for files that may hold what only the user should read (a batch job's state)."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:80]}.{_writer()}.", suffix=_PARTIAL_SUFFIX)
    staged = Path(name)
    try:
        if not private:  # mkstemp makes every file 0600 whatever the umask
            os.fchmod(handle, 0o666 & ~current_umask())
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                out.write(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status; elsewhere set and restored at
    once, which another thread creating a file in that instant could notice)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _writer() -> str:
    """This process, as temporary file names spell it: the host's short name (made safe) and the pid."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0])[:64] or "host"
    return f"{host}-{os.getpid()}"


# A temporary file lives for the seconds its writer needs to fill it. One older than this whose writer's pid is
# not running here was left by a killed writer: the age also spares a live writer that this process cannot see
# (another PID namespace under the same host name, e.g. containers sharing the host's network and a folder).
STALE_AFTER_SECONDS = 3600.0


def sweep_stale_partials(folder: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary files in `folder` that a writer on this host left when it was killed (its pid is no
    longer running, and the file is older than STALE_AFTER_SECONDS); return them. Others' files (a live
    writer's, another host's, one we may not remove) are left as they are."""
    import time

    this_host = _writer().rsplit("-", 1)[0]
    now = time.time() if now is None else now
    removed = []
    for path in Path(folder).glob(f".*{_PARTIAL_SUFFIX}"):
        match = _PARTIAL_NAME.match(path.name)
        if match is None or match["host"] != this_host or _running(int(match["pid"])):
            continue
        try:
            if now - path.stat().st_mtime < STALE_AFTER_SECONDS:
                continue
            path.unlink()
        except OSError:  # gone meanwhile, or not ours to remove (a shared folder): leave it
            continue
        removed.append(path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: running
        return True
    return True


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


def write_replacing(path: Path, content: str | bytes, *, private: bool = False) -> None:
    """`path` holds `content`, written whole or not at all (the old file stays until the new one is complete)."""
    publish_replacing(stage(path, [content], private=private), path)


def discard(*staged: Path) -> None:
    for path in staged:
        path.unlink(missing_ok=True)


def write_replacing_with(path: Path, write: Callable[[Path], object], *, private: bool = False) -> None:
    """`path` as `write(temporary)` fills it, whole or not at all: for a writer that only takes a path (a
    third party's, which opens and writes the file itself). The temporary file is `stage`'s (named after this
    writer, so a kill leaves nothing `sweep_stale_partials` cannot tell apart; the umask's mode unless
    `private`), `write` truncates and fills it, and it is flushed to disk before it is moved into place."""
    staged = stage(path, [], private=private)
    try:
        write(staged)
        with staged.open("rb+") as written:
            os.fsync(written.fileno())
        publish_replacing(staged, path)
    except BaseException:
        discard(staged)
        raise

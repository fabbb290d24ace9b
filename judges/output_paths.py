"""The names a command or API writer puts its files under, checked before anything is written: a name taken by
a symbolic link, a folder (or another non-file), or, for a writer that stamps its files, a file another run
wrote is one error naming the path and the problem, and nothing is written, replaced or left half-written.

Why each is refused: writing through a symbolic link replaces the link with a plain file (the user's link is
gone in silence) or writes where the link points; a folder under a file's name is a traceback after the files
before it were written; another run's file is another run's result. A plain file under the name is the
writer's own output, which a rerun replaces, unless the writer says how to tell whose it is (`Found`).

The error is `OutputError`, defined here beside the guard so that the guard raises it itself; the commands catch
it (capjudge.metrics.files.outputs, which checks output folders, names it too). Judge-neutral and standard
library only, in the bottom layer beside `atomic_files`, so that every writer checks its names through it (the
leaderboard, the sensitivity and arena reports, the item pages).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


class OutputError(ValueError):
    """An output cannot be written where it was asked for (a folder that cannot be made or written, a name taken
    by a link, a folder or another run's file); the message names the path and the flag."""


@dataclass(frozen=True)
class Found:
    """Who wrote an existing file, as far as it says: its run's stamp (None: no output of this writer's) and a
    few words naming it for the message."""

    stamp: str | None
    described: str


# How a stamping writer reads an existing file's stamp; None: a plain file there is the writer's own.
Reader = Callable[[Path], Found]


def output_problem(path: Path, found: Reader | None = None, stamp: str | None = None) -> str | None:
    """Why the writer may not put its own file at `path`, or None when it may (nothing there, a plain file the
    writer replaces, or with `found`, the file of the run stamped `stamp`)."""
    if path.is_symlink():
        return "is a symbolic link, where capjudge would write a file of its own"
    if not path.exists():
        return None
    if not path.is_file():
        return "is a folder (or another non-file), where capjudge would write a file of its own"
    if found is None:
        return None
    existing = found(path)
    if existing.stamp == stamp:
        return None
    return f"already holds {existing.described}, which this run would replace"


def check_output_paths(outputs: Iterable[tuple[Path, Reader | None]], *,
                       error: Callable[[str], Exception] = OutputError, stamp: str | None = None,
                       flag: str = "--out") -> None:
    """Every (path, reader) may be written (`output_problem`); otherwise an OutputError of one line naming the
    first path that may not, the problem and `flag` (the command's option, or the API's parameter).

    `error`: another exception class for a caller that raises its own (capjudge's writers all use OutputError)."""
    for path, found in outputs:
        problem = output_problem(path, found, stamp)
        if problem is not None:
            raise error(f"{path}: {problem}; give another {flag} (or move it away) so that nothing is replaced")

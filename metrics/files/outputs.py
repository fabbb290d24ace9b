"""Output folders, checked before any work is done: made (with their parents) and proved writable, or one
OutputError naming the flag and the folder. Files in them are written whole by `capjudge.judges.atomic_files`,
under names checked by `capjudge.judges.output_paths`, where OutputError is defined (the guard raises it; the
commands import it from here with `writable_folder`).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from capjudge.judges.output_paths import OutputError

__all__ = ["OutputError", "folder_argument", "writable_folder"]


def folder_argument(text: str) -> Path:
    """argparse `type` of an output folder flag: an empty value is refused (Path("") is ".", so `--out ""`,
    e.g. an unset shell variable, would write into whatever folder the command was started in)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: name a folder (`.` for the current one)")
    return Path(text)


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

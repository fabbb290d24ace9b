"""Reading JSON Lines files: one object per line, errors that name the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def numbered_objects(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of `path`.

    A line that is not JSON, or not a JSON object, raises `error` naming `what` (default: the path) and the
    line number, so the caller's own exception type reaches the user.
    """
    label = what or str(path)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as decode_error:
                raise error(f"{label}, line {number}: not JSON ({decode_error.msg})") from None
            if not isinstance(value, dict):
                raise error(f"{label}, line {number}: expected a JSON object, got {type(value).__name__}")
            yield number, value


def read_objects(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> list[dict[str, Any]]:
    return [value for _, value in numbered_objects(path, error, what)]

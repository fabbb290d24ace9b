"""Reading JSON and JSON Lines files with errors that name the file (and line), in the caller's error type."""

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
    for number, line in enumerate(read_text(path, error, what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as decode_error:
            raise error(f"{label}, line {number}: not JSON ({decode_error.msg})") from None
        if not isinstance(value, dict):
            raise error(f"{label}, line {number}: expected a JSON object, got {type(value).__name__}")
        if _has_lone_surrogate(value):
            # JSON's \ud83d escapes can spell text that is not Unicode; it would crash whatever writes it later.
            item = f" (item {value['id']!r})" if isinstance(value.get("id"), (str, int)) else ""
            raise error(f"{label}, line {number}{item}: text with an unpaired surrogate escape (not valid Unicode)")
        yield number, value


def read_text(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> str:
    """The file's text as UTF-8; a file in another encoding is `error` naming it, not a bare decode error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as decode_error:
        raise error(f"{what or path}: not UTF-8 text (byte {decode_error.start}: {decode_error.reason})") from None


def read_json(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> Any:
    """A whole JSON document; invalid JSON or encoding is `error` naming the file."""
    try:
        value = json.loads(read_text(path, error, what))
    except json.JSONDecodeError as decode_error:
        raise error(f"{what or path}: not valid JSON ({decode_error})") from None
    if _has_lone_surrogate(value):
        raise error(f"{what or path}: text with an unpaired surrogate escape (not valid Unicode)")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= character <= "\udfff" for character in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def read_objects(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> list[dict[str, Any]]:
    return [value for _, value in numbered_objects(path, error, what)]

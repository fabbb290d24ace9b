"""Reading JSON and JSON Lines files with errors that name the file (and line), in the caller's error type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


def numbered_objects(path: str | Path, error: type[Exception] = ValueError, what: str = "", *,
                     unique_keys: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of `path`.

    A line that is not JSON, or not a JSON object, raises `error` naming `what` (default: the path) and the
    line number, so the caller's own exception type reaches the user. With `unique_keys`, so does a line with
    a key twice in one object (see `read_json`).
    """
    label = what or str(path)
    for number, line in enumerate(json_lines(read_text(path, error, what)), start=1):
        if not line.strip():
            continue
        try:
            value = decode_json(line, unique_keys)
        except json.JSONDecodeError as decode_error:
            raise error(f"{label}, line {number}: not JSON ({decode_error.msg})") from None
        except DuplicateKey as duplicate:
            raise error(f"{label}, line {number}: {duplicate.describe('key', 'in the object')}") from None
        if not isinstance(value, dict):
            raise error(f"{label}, line {number}: expected a JSON object, got {type(value).__name__}")
        if has_lone_surrogate(value):
            # JSON's \ud83d escapes can spell text that is not Unicode; it would crash whatever writes it later.
            item = f" (item {value['id']!r})" if isinstance(value.get("id"), (str, int)) else ""
            raise error(f"{label}, line {number}{item}: text with an unpaired surrogate escape (not valid Unicode)")
        yield number, value


def json_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text, split at "\n" only (a "\r" before it is JSON whitespace). str.splitlines
    also splits at U+2028, U+2029, U+0085 and other separators, which JSON allows raw inside a string: a
    caption holding one would be read as two broken lines."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_text(path: str | Path, error: type[Exception] = ValueError, what: str = "") -> str:
    """The file's text as UTF-8; a file in another encoding is `error` naming it, not a bare decode error. So is
    a FIFO, socket or device, whose read could wait forever (a folder is left to the caller's OSError)."""
    file = Path(path)
    if file.exists() and not file.is_file() and not file.is_dir():
        raise error(f"{what or path}: not a regular file (a FIFO, socket or device)")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as decode_error:
        raise error(f"{what or path}: not UTF-8 text (byte {decode_error.start}: {decode_error.reason})") from None


def read_json(path: str | Path, error: type[Exception] = ValueError, what: str = "", *,
              unique_keys: bool = False, top_level_key: str = "key", not_json: type[Exception] | None = None) -> Any:
    """A whole JSON document; invalid JSON or encoding is `error` naming the file (text that is not one JSON
    document is `not_json` when given: a caller that accepts JSON lines too tells it apart from the rest).

    With `unique_keys`, a key that appears twice in one object is `error` too, naming the file and the key
    (`top_level_key` says what the document's own keys are, e.g. "clip id"): JSON readers keep the last copy
    and drop the other without a word, so a file with one clip twice would be scored on whichever came last.
    """
    try:
        value = decode_json(read_text(path, error, what), unique_keys)
    except json.JSONDecodeError as decode_error:
        raise (not_json or error)(f"{what or path}: not valid JSON ({decode_error})") from None
    except DuplicateKey as duplicate:
        raise error(f"{what or path}: {duplicate.describe(top_level_key)}") from None
    if has_lone_surrogate(value):
        raise error(f"{what or path}: text with an unpaired surrogate escape (not valid Unicode)")
    return value


class DuplicateKey(ValueError):
    """A key twice in one JSON object; `nested` is False for the document's own (top-level) keys."""

    def __init__(self, key: str, nested: bool) -> None:
        super().__init__(key)
        self.key, self.nested = key, nested

    def describe(self, top_level_key: str, top_level: str = "in the file") -> str:
        where = "in a nested object" if self.nested else top_level
        name = "key" if self.nested else top_level_key
        shown = repr(self.key) if len(self.key) <= 80 else repr(self.key[:77] + "...")
        return (f"{name} {shown} appears more than once {where} (a JSON reader would keep only the last "
                "copy and drop the others silently)")


BOM = "\ufeff"
# JSON text may not begin with one (RFC 8259, 8.1), and Python's own words for it ("Unexpected UTF-8 BOM (decode
# using utf-8-sig)") name no fix a user can make. An editor on Windows adds one when it saves a file "as UTF-8".
BOM_PROBLEM = ("it starts with a UTF-8 byte order mark (BOM), which JSON may not begin with: save the file as UTF-8 "
               "without a BOM")


def decode_json(text: str, unique_keys: bool = True) -> Any:
    """json.loads, refusing a key twice in one object when `unique_keys` (raises DuplicateKey, a ValueError), and
    text that starts with a byte order mark with a JSONDecodeError that says so (`BOM_PROBLEM`)."""
    if text.startswith(BOM):
        raise json.JSONDecodeError(BOM_PROBLEM, text, 0)
    if not unique_keys:
        return json.loads(text)
    # The hook sees every object's (key, value) pairs before they collapse into a dict. Inner objects are
    # decoded before the object holding them, so the top-level object is the last one built: a duplicate is
    # known to be nested when more objects are built after it.
    duplicates: list[tuple[str, int]] = []
    built = 0

    def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal built
        built += 1
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen and not duplicates:
                duplicates.append((key, built))
            seen.add(key)
        return dict(pairs)

    value = json.loads(text, object_pairs_hook=unique_object)
    if duplicates:
        key, at = duplicates[0]
        raise DuplicateKey(key, nested=at != built or not isinstance(value, dict))
    return value


def decode_problem(error: BaseException, where: str) -> str:
    """What stopped `decode_json`, for a one-line message: the key given twice (`where`: "in the header"), the
    byte order mark, or JSON's own words."""
    if isinstance(error, DuplicateKey):
        return error.describe("key", where)
    if isinstance(error, json.JSONDecodeError):
        return error.msg if error.msg == BOM_PROBLEM else f"not JSON ({error.msg}, column {error.colno})"
    if isinstance(error, RecursionError):
        return "not JSON that can be read (nested too deeply)"
    return f"not JSON that can be read ({error})"


def has_lone_surrogate(value: Any) -> bool:
    """Does decoded JSON hold text with an unpaired surrogate (JSON's \\ud800 escapes can spell text that is not
    Unicode, which crashes whatever writes it later)?"""
    if isinstance(value, str):
        return any("\ud800" <= character <= "\udfff" for character in value)
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_lone_surrogate(v) for v in value)
    return False


def read_objects(path: str | Path, error: type[Exception] = ValueError, what: str = "", *,
                 unique_keys: bool = False) -> list[dict[str, Any]]:
    return [value for _, value in numbered_objects(path, error, what, unique_keys=unique_keys)]

"""The files a sensitivity report is written to (sensitivity_<task>.json, .png and the per-item .html), checked
before any judging starts: a name taken by a folder, a symbolic link or a file another command or another run
wrote is one OutputError naming the file and the flag, and nothing is judged, written or left half-written.

Which run wrote a file is its stamp: a hash of what makes two runs the same run, the task, the judge, the
command and every item's id and original caption. A rerun of the same command on the same captions with the
same judge (how a run with unjudged captions is completed, all else from the cache) replaces its own files;
another run's (other captions, flags or judge), or a file that is no sensitivity output at all (a leaderboard's
page, a user's file), is never replaced without saying so. The JSON's stamp is computed from its fields, the
page carries it as the first key of its data, the plot as a PNG text chunk. The check itself is every writer's
(`capjudge.judges.output_paths`); this module says how a sensitivity output tells whose it is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from capjudge.judges.output_paths import Found, check_output_paths

STAMP_KEY = "run"  # the page data's first key, and the plot's PNG text chunk ("capjudge-run")
PLOT_STAMP_KEY = "capjudge-run"
# The page's data block starts after its styles: far inside this many bytes (the data may be hundreds of MB).
_PAGE_HEAD_BYTES = 4 * 2**20
_PAGE_STAMP = re.compile(rb'<script type="application/json" id="report-data">\{"run": "([0-9a-f]{64})"')
# capjudge's plots are tens of KB; a larger PNG under the name is not one, and is not decoded to find out.
_MAX_PLOT_BYTES = 64 * 2**20


def run_stamp(task: str, judge: str, command: str, originals: Iterable[tuple[str, str]]) -> str:
    """The stamp of a run: task, judge, command and (item id, original caption) of every item, in order."""
    canonical = json.dumps([task, judge, command, [list(pair) for pair in originals]], ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def report_found(path: Path) -> Found:
    """An existing sensitivity_<task>.json: the stamp of the run that wrote it, from its own fields."""
    from capjudge.judges.jsonl import DuplicateKey, decode_json

    try:
        document = decode_json(path.read_text(encoding="utf-8"))
        items = [(item["item_id"], item["original"]["text"]) for item in document["items"]]
        fields = (document["task"], document["judge"], document["command"])
        if not all(isinstance(value, str) for value in (*fields, *(part for pair in items for part in pair))):
            raise TypeError("not texts")
    except (OSError, UnicodeDecodeError, DuplicateKey, ValueError, RecursionError, KeyError, TypeError):
        return Found(None, "a file that is not a sensitivity report")
    return Found(run_stamp(*fields, items), f"a report of another run (`{_short(document['command'])}`)")


def page_found(path: Path) -> Found:
    """An existing page: the stamp its data starts with (only a sensitivity page of this capjudge has one)."""
    try:
        with path.open("rb") as page:
            head = page.read(_PAGE_HEAD_BYTES)
    except OSError:
        return Found(None, "a file that cannot be read")
    match = _PAGE_STAMP.search(head)
    if match is None:
        return Found(None, "a page that is not a sensitivity page (another command's, or an older capjudge's)")
    return Found(match.group(1).decode("ascii"), "the page of another run's report")


def plot_found(path: Path) -> Found:
    """An existing PNG: the stamp in its text chunk (read from the header, the image is not decoded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        if path.stat().st_size > _MAX_PLOT_BYTES:
            return Found(None, "a file that is not a capjudge sensitivity plot")
        with Image.open(path) as image:
            stamp = image.info.get(PLOT_STAMP_KEY)
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError):
        return Found(None, "a file that is not a PNG image")
    if not isinstance(stamp, str):
        return Found(None, "an image that is not a capjudge sensitivity plot")
    return Found(stamp, "the plot of another run")


def check_outputs(outputs: Iterable[tuple[Path, Callable[[Path], Found]]], stamp: str, flag: str = "--out") -> None:
    """Every (path, reader) may be written by the run stamped `stamp`: free, or holding that run's own file.
    Otherwise one OutputError naming the file, what holds it and `flag` (`check_output_paths`)."""
    check_output_paths(outputs, stamp=stamp, flag=flag)


def _short(text: Any) -> str:
    """A command from a file, for one line of a message: untrusted, so no line break or terminal control."""
    text = "".join(character if character.isprintable() else "?" for character in str(text))
    return text if len(text) <= 600 else text[:597] + "..."

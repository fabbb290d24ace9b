"""Where a task's items come from, and where each item's video is.

lmms-eval task YAMLs are static, but the benchmark data lives wherever the user put it. So each task names
its data source in `metadata` and uses `class: !function utils.<Task>` — a `SourcedTask` — whose `download`
loads the items from, in order of precedence:

1. a local file named by an environment variable (`metadata.data_env`, e.g. CAPJUDGE_MSVD_EVAL_JSON),
2. a Hugging Face hub dataset named by an environment variable (`metadata.hub_env`), loaded with `datasets`,
3. a file shipped inside this package (`metadata.default_data`, relative to the tasks folder: the demo data).

With none of them available the task fails once, at load, with a message naming the variables to set.
Videos are resolved against the folder named by `metadata.videos_env` (or, for a file, the file's own
folder); every row carries its folder. Every record, whichever the source, goes through the task's
`ItemFormat` (`metadata.item_format`, a dotted path), which owns the dataset's quirks and raises
`DatasetError` naming the bad item.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.client.config import ConfigError
from capjudge.judges.jsonl import read_objects

from capjudge.tasks import TASKS_DIR

log = logging.getLogger(__name__)

# The key under which every row carries its videos folder (so worker threads never read the environment).
VIDEOS_DIR_KEY = "_videos_dir"
# The key under which every row names the variable that sets its videos folder (for error messages).
VIDEOS_ENV_KEY = "_videos_env"

class DatasetError(ValueError):
    """A dataset file or row is unusable; the message names the file and the item."""


# ----------------------------------------------------------------------------------------------------------
# Where the items come from


@dataclass(frozen=True)
class DataSource:
    kind: str  # "local", "hub" or "packaged"
    location: str
    videos_dir: Path | None
    videos_env: str | None = None

    def describe(self) -> str:
        return f"{self.kind}:{self.location}"


@dataclass(frozen=True)
class ItemFormat:
    """How one dataset's records are read from a file and turned into task rows.

    `read_file(path)` returns the raw records (each with its id, in file order); `parse_record(record,
    position)` validates one raw record (from a file or a hub row) and returns the row the task works on,
    raising DatasetError naming the item.
    """

    name: str
    read_file: Callable[[Path], list[dict[str, Any]]]
    parse_record: Callable[[Mapping[str, Any], int], dict[str, Any]]


def resolve_source(metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> DataSource:
    env = os.environ if env is None else env
    videos_env = metadata.get("videos_env")
    videos_dir = Path(env[videos_env]).expanduser() if videos_env and env.get(videos_env) else None
    data_env = metadata.get("data_env")
    if data_env and env.get(data_env):
        path = Path(env[data_env]).expanduser()
        if not path.is_file():
            raise DatasetError(f"{data_env}={path}: no such file")
        return DataSource("local", str(path), videos_dir or path.parent, videos_env)
    hub_env = metadata.get("hub_env")
    if hub_env and env.get(hub_env):
        return DataSource("hub", env[hub_env], videos_dir, videos_env)
    default = metadata.get("default_data")
    if default:
        path = TASKS_DIR / default
        if not path.is_file():
            raise DatasetError(f"packaged task data {path} is missing (is the package installed completely?)")
        return DataSource("packaged", str(path), videos_dir or path.parent, videos_env)
    wanted = " or ".join(name for name in (data_env, hub_env) if name)
    raise DatasetError(f"task data not found: set {wanted} (see README, 'Running on the real benchmarks')")


def load_rows(source: DataSource, item_format: ItemFormat, split: str) -> list[dict[str, Any]]:
    """Every record of the source as a task row, each carrying its videos folder."""
    if source.kind == "hub":
        import datasets

        records = [dict(row) for row in datasets.load_dataset(source.location, split=split)]
    else:
        records = item_format.read_file(Path(source.location))
    if not records:
        raise DatasetError(f"{item_format.name} at {source.describe()}: no items")
    rows = []
    for position, record in enumerate(records):
        try:
            row = item_format.parse_record(record, position)
        except DatasetError as error:
            raise DatasetError(f"{item_format.name} at {source.describe()}: {error}") from None
        row[VIDEOS_DIR_KEY] = str(source.videos_dir) if source.videos_dir else ""
        row[VIDEOS_ENV_KEY] = source.videos_env or ""
        rows.append(row)
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            raise DatasetError(f"{item_format.name} at {source.describe()}: item id {row['id']!r} occurs twice")
        seen.add(row["id"])
    return rows


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """A JSONL file as a list of objects; a bad line is a DatasetError naming the file and line."""
    return read_objects(path, DatasetError, unique_keys=True)  # JSON keeps the last of a key given twice, silently


def record_id(record: Mapping[str, Any], position: int) -> str:
    """The record's id as a string (ids are compared as strings everywhere), or a DatasetError."""
    value = record.get("id")
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise DatasetError(f"record {position + 1}: no usable 'id' (got {value!r})")
    return str(value)


def import_dotted(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


# ----------------------------------------------------------------------------------------------------------
# Videos


def video_path(doc: Mapping[str, Any], field: str = "video") -> Path | None:
    """The absolute path of the item's video, or None when the item names none."""
    name = doc.get(field)
    if not name:
        return None
    path = Path(name)
    if not path.is_absolute() and doc.get(VIDEOS_DIR_KEY):
        path = Path(doc[VIDEOS_DIR_KEY]) / path
    return path


def missing_video_problem(doc: Mapping[str, Any], field: str = "video") -> str | None:
    """Why the item's video cannot be used (naming the item and the path), or None when the file exists."""
    path = video_path(doc, field)
    item = doc.get("id")
    if path is None:
        return f"item {item}: names no video"
    if not path.is_absolute():
        variable = doc.get(VIDEOS_ENV_KEY) or "the task's videos variable"
        return f"item {item}: no videos folder for {path} (set {variable})"
    if not path.is_file():
        return f"item {item}: video file not found: {path}"
    return None


def check_videos(task: str, rows: Sequence[Mapping[str, Any]], field: str = "video", shown: int = 5) -> None:
    """Before generation: no item's video found is one `ConfigError` naming the variable and the folder
    searched; some missing is one warning with the count and the first ids (those items end `video_missing`)."""
    missing = [row for row in rows if missing_video_problem(row, field) is not None]
    if not missing or not rows:
        return
    first = missing[0]
    variable = first.get(VIDEOS_ENV_KEY) or "the task's videos variable"
    folder = first.get(VIDEOS_DIR_KEY)
    where = f"in {folder}" if folder else "(no videos folder is set)"
    ids = ", ".join(str(row.get("id")) for row in missing[:shown]) + (", ..." if len(missing) > shown else "")
    if len(missing) == len(rows):
        raise ConfigError(
            f"task {task!r}: none of the {len(rows)} items' videos was found {where} (e.g. {missing_video_problem(first, field)}). "
            f"Set {variable} to the folder that holds the videos"
        )
    log.warning(
        "task %r: %d of %d items' videos were not found %s (first: %s); those items will be unjudged (video_missing)",
        task, len(missing), len(rows), where, ids,
    )


def doc_to_video(doc: Mapping[str, Any]) -> list[str]:
    """lmms-eval `doc_to_visual`: the item's video path, or nothing when it is missing.

    A missing file is logged here for the model's sake (it gets no video); the judge side reports the item
    unjudged with failure kind "video_missing" where it needs the video.
    """
    problem = missing_video_problem(doc)
    if problem is not None:
        log.warning("%s; the model is given no video", problem)
        return []
    return [str(video_path(doc))]

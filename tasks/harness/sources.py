"""Where a task's items come from, and where each item's video is.

lmms-eval task YAMLs are static, but the benchmark data lives wherever the user put it. So each task names
its data source in `metadata` and uses `class: !function utils.<Task>` — a `SourcedTask` — whose `download`
loads the items from, in order of precedence:

1. a local file named by an environment variable (`metadata.data_env`, e.g. CAPJUDGE_MSVD_EVAL_JSON),
2. a Hugging Face hub dataset named by an environment variable (`metadata.hub_env`), loaded with `datasets`,
3. a file shipped with the task (`metadata.default_data`, relative to the task's data folder: capjudge's
   tasks folder, where the demo data is).

With none of them available the task fails once, at load, with a message naming the variables to set.
Videos are resolved against the folder named by `metadata.videos_env` (or, for a file, the file's own
folder); every row carries its folder. Every record, whichever the source, goes through the dataset's
`ItemFormat` (`metadata.dataset`, see `capjudge.judges.datasets`), which owns the dataset's quirks and raises
`DatasetError` naming the bad item.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capjudge.judges.client.config import ConfigError
from capjudge.judges.datasets.items import VIDEOS_DIR_KEY, VIDEOS_ENV_KEY, DataSource, DatasetError
from capjudge.tasks import TASKS_DIR

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------
# Where the items come from


def resolve_source(metadata: Mapping[str, Any], env: Mapping[str, str] | None = None, data_folder: Path = TASKS_DIR) -> DataSource:
    """The source the metadata names, first of: the file in `data_env`, the hub dataset in `hub_env`, the
    `default_data` file (relative to `data_folder`). Raises DatasetError naming the variables to set."""
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
        path = data_folder / default
        if not path.is_file():
            raise DatasetError(f"packaged task data {path} is missing (is the package installed completely?)")
        return DataSource("packaged", str(path), videos_dir or path.parent, videos_env)
    wanted = " or ".join(name for name in (data_env, hub_env) if name)
    raise DatasetError(f"task data not found: set {wanted} (see README, 'Running the real benchmarks')")


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

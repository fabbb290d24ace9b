"""What every dataset shares: the `ItemFormat` a dataset module declares, the one loader that turns a source's
records into task rows through it, and the small readers the formats are built from.

A task row is a dict with at least a string `id` (unique in the dataset) and, for a video dataset, `video`
(a file name, resolved against the row's videos folder); each dataset adds its own fields. Every row carries
its videos folder (`VIDEOS_DIR_KEY`) and the variable that sets it (`VIDEOS_ENV_KEY`), so worker threads never
read the environment and an error can name what to set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.jsonl import read_objects

# The key under which every row carries its videos folder (so worker threads never read the environment).
VIDEOS_DIR_KEY = "_videos_dir"
# The key under which every row names the variable that sets its videos folder (for error messages).
VIDEOS_ENV_KEY = "_videos_env"


class DatasetError(ValueError):
    """A dataset file or row is unusable; the message names the file and the item."""


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


@dataclass(frozen=True)
class DataSource:
    """Where a task's records are: a local file, a hub dataset or a file shipped with the task; and the
    folder its videos are in (None: not known), with the variable that sets that folder."""

    kind: str  # "local", "hub" or "packaged"
    location: str
    videos_dir: Path | None
    videos_env: str | None = None

    def describe(self) -> str:
        return f"{self.kind}:{self.location}"


def load_rows(source: DataSource, item_format: ItemFormat, split: str) -> list[dict[str, Any]]:
    """Every record of the source as a task row, each carrying its videos folder; a bad record or an id twice
    is one DatasetError naming the format, the source and the item."""
    if source.kind == "hub":
        import datasets  # Hugging Face's: imported only for a hub source (it takes a second to import)

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


def record_id(record: Any, position: int) -> str:
    """The id of a record that must be an object, as a string (ids are compared as strings everywhere), or a
    DatasetError naming the record's position."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    value = record.get("id")
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise DatasetError(f"record {position + 1}: no usable 'id' (got {value!r})")
    return str(value)

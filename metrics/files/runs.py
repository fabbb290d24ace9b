"""Reading lmms-eval runs for leaderboards: which results files, what each run is called and when it started,
and one run per model.

Input: the folders lmms-eval writes with `--output_path DIR --log_samples` — per model a subfolder holding
`<date>_results.json` (aggregated) and `<date>_samples_<task>.jsonl` (one line per item). Each task of a run
(its metrics, each item's value and the judge of each item) is read by `capjudge.metrics.files.task_run`.

A run's name is data: `capjudge judge` records it whole (`config.model_name`), so a name with a comma, a
slash or a newline comes back exactly as it was given. When one model's runs hold the same task twice, the
run started last is used (see `run_start` and `read_runs`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from capjudge.judges.jsonl import read_json
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.task_run import TaskRun, read_task

RESULTS_SUFFIX = "_results.json"
# What `capjudge judge` records in its results file: the run's exact name, and the instant it started (ISO 8601
# with its UTC offset). lmms-eval records its start as `date`, a `%Y%m%d_%H%M%S` stamp in the time zone of its
# `--timezone` option (default Asia/Singapore), kept in `config.resolved_cli_args.timezone`.
RUN_NAME_FIELD = "model_name"
STARTED_FIELD = "started_at"
# The capjudge release that wrote a `capjudge judge` results file (each item's judge record names it too).
CAPJUDGE_VERSION_FIELD = "capjudge_version"
LMMS_EVAL_STAMP = "%Y%m%d_%H%M%S"
LMMS_EVAL_DEFAULT_TIMEZONE = "Asia/Singapore"
_YEAR_3000 = 32_503_680_000  # seconds since the epoch: a `date` number beyond it is not an instant


@dataclass(frozen=True)
class Run:
    """One model (or caption set) on one or more tasks, from one results file or several merged by name."""

    name: str
    results_paths: tuple[Path, ...]  # oldest first
    model: str
    model_args: str
    date: str  # of the newest results file
    tasks: Mapping[str, TaskRun]
    # When the newest run started (seconds since the epoch), and how that is known (see `run_start`).
    started: float = 0.0
    started_from: str = ""
    written: float = 0.0  # when the newest results file was last written (its modification time)

    @property
    def results_path(self) -> Path:
        return self.results_paths[-1]

    @property
    def started_to_the_second(self) -> bool:
        """The start is lmms-eval's date stamp, known to the second only: it lies in [started, started + 1)."""
        return self.started_from.startswith(_FROM_LMMS_EVAL_STAMP)


def parse_run_argument(argument: str) -> tuple[str | None, Path]:
    """`PATH` or `NAME=PATH` (the name labels the row instead of the one derived from the run)."""
    name, sep, path = argument.partition("=")
    if sep and name and not Path(argument).exists():
        return name, Path(path)
    return None, Path(argument)


def find_results_files(path: Path) -> list[Path]:
    """A results JSON itself, or every `*_results.json` under a folder (an output path or a model subfolder)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise RunFileError(f"{path}: no such file or folder")
    found = sorted(p for p in path.rglob(f"*{RESULTS_SUFFIX}") if p.is_file())
    if not found:
        raise RunFileError(f"{path}: no lmms-eval results file (*{RESULTS_SUFFIX}) in this folder")
    return found


def read_runs(arguments: Sequence[str]) -> tuple[list[Run], list[str]]:
    """Every model named by the arguments, and warnings.

    Results files with the same model name are merged into one row, because a model is often run one task
    at a time. When two of them hold the same task, the run started last wins (from the instant each run
    records, `run_start`), with a warning naming the run used, the run left out and when each started.

    lmms-eval records its start to the second only: a `capjudge judge` run that started at 12:00:05.3 and an
    lmms-eval run stamped 12:00:05 cannot be told apart by their starts (the lmms-eval run may have started
    at 12:00:05.9). Runs that started in a second in which such a stamp falls are ordered by when their results
    files were written (then by path), and the warning says so, instead of taking the stamp for an instant and
    silently using the run that started first.
    """
    runs: list[Run] = []
    for argument in arguments:
        name, path = parse_run_argument(argument)
        files = find_results_files(path)
        if name is not None and len(files) > 1:
            raise RunFileError(f"{argument}: a NAME= label needs one run, but {path} holds {len(files)} results files")
        runs.extend(read_run(file, name=name) for file in files)
    warnings: list[str] = []
    merged: dict[str, Run] = {}
    used: dict[tuple[str, str], Run] = {}  # (name, task) -> the run whose task is used so far
    stamped_seconds = {math.floor(run.started) for run in runs if run.started_to_the_second}

    def started_order(run: Run) -> tuple[int, tuple[float, str]]:
        second = math.floor(run.started)
        within = run.written if second in stamped_seconds else run.started
        return second, (within, str(run.results_path))

    for run in sorted(runs, key=started_order):
        for task in run.tasks:
            earlier = used.get((run.name, task))
            if earlier is not None:
                second = math.floor(run.started)
                same_second = second in stamped_seconds and math.floor(earlier.started) == second
                rule = ("both started in the same second, which is all lmms-eval's date stamp records: the run "
                        "written last is used" if same_second else "the run started last is used")
                warnings.append(
                    f"{run.name}: {task} was run more than once; using {run.results_path} ({_start_note(run)}), "
                    f"not {earlier.results_path} ({_start_note(earlier)}): {rule}"
                )
            used[(run.name, task)] = run
        earlier_run = merged.get(run.name)
        merged[run.name] = run if earlier_run is None else Run(
            name=run.name,
            results_paths=earlier_run.results_paths + run.results_paths,
            model=run.model,
            model_args=run.model_args,
            date=run.date,
            tasks={**earlier_run.tasks, **run.tasks},
            started=run.started,
            started_from=run.started_from,
            written=run.written,
        )
    order = list(dict.fromkeys(run.name for run in runs))
    return [merged[name] for name in order], warnings


def _start_note(run: Run) -> str:
    instant = datetime.fromtimestamp(run.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"started {instant} by {run.started_from}"


# How `run_start` says it read lmms-eval's date stamp, which records the start to the second only.
_FROM_LMMS_EVAL_STAMP = "lmms-eval's date stamp"


def run_start(results: Mapping[str, Any], results_path: Path) -> tuple[float, str]:
    """When the run started, as seconds since the epoch, and how that is known.

    File names cannot say: lmms-eval stamps them in its `--timezone` (UTC+8 by default), `capjudge judge` in
    local time (before it recorded `started_at`). So: `started_at` (capjudge judge: ISO 8601 with its
    offset); else lmms-eval's `date` stamp read in its recorded time zone (`config.resolved_cli_args.timezone`,
    lmms-eval's default when a file of lmms-eval's own does not record one) or an epoch number; else, for a
    file that records no start, the file's modification time."""
    recorded = results.get(STARTED_FIELD)
    if isinstance(recorded, str):
        try:
            instant = datetime.fromisoformat(recorded)
        except ValueError:
            instant = None
        if instant is not None and instant.tzinfo is not None:
            return instant.timestamp(), f"its {STARTED_FIELD}"
    stamp = results.get("date")
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and 0 <= stamp < _YEAR_3000:
        return float(stamp), "its date in seconds since the epoch"
    zone = _lmms_eval_timezone(results)
    if isinstance(stamp, str) and zone is not None:
        try:
            from zoneinfo import ZoneInfo

            instant = datetime.strptime(stamp, LMMS_EVAL_STAMP).replace(tzinfo=ZoneInfo(zone))
        except (ValueError, LookupError):  # another format, or a zone this machine does not know
            instant = None
        if instant is not None:
            return instant.timestamp(), f"{_FROM_LMMS_EVAL_STAMP} {stamp} in {zone}"
    return results_path.stat().st_mtime, "the file's modification time, as it records no start"


def _lmms_eval_timezone(results: Mapping[str, Any]) -> str | None:
    config = results.get("config") if isinstance(results.get("config"), Mapping) else {}
    cli = config.get("resolved_cli_args") if isinstance(config.get("resolved_cli_args"), Mapping) else {}
    if isinstance(cli.get("timezone"), str) and cli["timezone"]:
        return cli["timezone"]
    return LMMS_EVAL_DEFAULT_TIMEZONE if "lmms_eval_version" in results else None


def task_samples_files(path: Path, task: str) -> list[Path]:
    """The samples files (`<date>_samples_<task>.jsonl`) of `task` beside every results file under `path`."""
    found = (samples_path(results, task) for results in find_results_files(path))
    return [samples for samples in found if samples.is_file()]


def samples_path(results_path: Path, task: str) -> Path:
    """Where lmms-eval writes the samples of `task` for the run of `results_path` (`<date>_results.json`)."""
    return results_path.parent / f"{_date_id(results_path)}_samples_{task}.jsonl"


def sampled_tasks(results_path: Path) -> list[str]:
    """The tasks whose samples lie beside `results_path` (the `samples_path` files there), sorted."""
    prefix = f"{_date_id(results_path)}_samples_"
    return sorted(path.name[len(prefix):-len(".jsonl")] for path in results_path.parent.glob(f"{prefix}*.jsonl")
                  if path.name.startswith(prefix) and path.is_file())


def _date_id(results_path: Path) -> str:
    name = results_path.name
    return name[: -len(RESULTS_SUFFIX)] if name.endswith(RESULTS_SUFFIX) else results_path.stem


def read_run(results_path: Path, name: str | None = None) -> Run:
    results_path = Path(results_path)
    try:
        results = read_json(results_path, RunFileError, f"{results_path} (lmms-eval results)")
    except OSError as error:
        raise RunFileError(f"{results_path}: cannot read lmms-eval results ({error.strerror or error})") from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise RunFileError(f"{results_path}: not an lmms-eval results file (no 'results' object)")
    config = results.get("config") if isinstance(results.get("config"), Mapping) else {}
    date_id = _date_id(results_path)
    configs = results.get("configs") or {}
    # Leaf tasks have a config; group entries in "results" do not.
    task_names = [task for task in results["results"] if task in configs] or list(results["results"])
    tasks = {
        task: read_task(
            task,
            results["results"].get(task) or {},
            configs.get(task) or {},
            (results.get("higher_is_better") or {}).get(task) or {},
            samples_path(results_path, task),
            f"{results_path}: results.{task}",
        )
        for task in task_names
    }
    model_args = config.get("model_args") or ""
    if not isinstance(model_args, str):
        model_args = json.dumps(model_args, sort_keys=True)
    started, started_from = run_start(results, results_path)
    try:
        written = results_path.stat().st_mtime
    except OSError as error:
        raise RunFileError(f"{results_path}: cannot read lmms-eval results ({error.strerror or error})") from None
    return Run(
        name=name or run_display_name(results),
        results_paths=(results_path,),
        model=str(config.get("model") or results.get("model_source") or "unknown"),
        model_args=model_args,
        date=date_id,
        tasks=tasks,
        started=started,
        started_from=started_from,
        written=written,
    )


def run_display_name(results: Mapping[str, Any]) -> str:
    """A row name: the name `capjudge judge` recorded whole (`config.model_name`); else `model_name=` from
    the model arguments; else lmms-eval's model name (a caption file's stem for a path); else the model with
    its arguments."""
    config = results.get("config") if isinstance(results.get("config"), Mapping) else {}
    recorded = config.get(RUN_NAME_FIELD)
    if isinstance(recorded, str) and recorded:
        return recorded
    model_args = config.get("model_args") if isinstance(config.get("model_args"), str) else ""
    explicit = _model_arg(model_args or "", "model_name")
    if explicit:
        return explicit
    tracked = str(results.get("model_name") or "")
    if tracked:
        path = Path(tracked)
        return path.stem if path.suffix.lower() in (".json", ".jsonl") else tracked
    model = str(config.get("model") or "unknown")
    return f"{model}({model_args})" if model_args else model


def _model_arg(model_args: str, key: str) -> str | None:
    for part in model_args.split(","):
        name, sep, value = part.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None

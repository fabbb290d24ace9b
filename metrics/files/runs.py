"""Reading lmms-eval runs for leaderboards: results files, per-item values and the judge of each item.

Input: the folders lmms-eval writes with `--output_path DIR --log_samples` — per model a subfolder holding
`<date>_results.json` (aggregated) and `<date>_samples_<task>.jsonl` (one line per item). Nothing here is
specific to one task: the metrics are whatever the task's `metric_list` (or its results) names, and each
item's value is read from the samples line under the metric's name. A value is

- a number (bool included): the item's value;
- None: the item was not judged (a judge failure, or a per-type metric on an item of another type). It is
  left out of that metric's mean and CI — never counted as 0 — and the `*_failed` rates report it;
- a dict: its `score` field (the task's lmms-eval `score_key`), else `value`. A metric with no per-item
  number at all (a corpus-level one, such as a correlation) shows lmms-eval's aggregate, without a CI.

Anything else where a number belongs (a string, NaN, an infinity, `10**400`, `-1e308`: see
`capjudge.metrics.files.values`) is refused, naming the file, the line, the item and the metric: a model is never
ranked on a log it cannot be ranked on.

Items are identified across runs by the logged record's `item_id` if the task logs one, else by lmms-eval's
`doc_id` together with the logged `target` (lmms-eval's own `doc_hash` is the same for every line in 0.7.x,
so it identifies nothing). Runs on different data therefore show up as different item sets.

A run's name is data: `capjudge judge` records it whole (`config.model_name`), so a name with a comma, a
slash or a newline comes back exactly as it was given. When one model's runs hold the same task twice, the
run started last is used (see `run_start`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
from capjudge.judges.known_judges import judge_descriptor
from capjudge.judges.record import (
    ITEM_ID_KEY,
    JUDGE_KEY,
    RECORD_METRIC,
    JudgedRecord,
    Judgment,
    LoggedJudge,
    RecordError,
)
from capjudge.metrics.files.jsonl import numbered_objects, read_json
from capjudge.metrics.files.values import NotANumber, item_number

# Fields every lmms-eval samples line has; whatever else a line holds came from the task's process_results.
_LMMS_SAMPLE_FIELDS = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "token_counts", "doc_hash", "input", "input_media"}
)
# capjudge's tasks log each item's record (`capjudge.judges.record.JudgedRecord`) as the value of one metric,
# `judged`; runs written before that layout, and other tasks, may carry `item_id` and `judge` at the top of
# the line instead (`JudgedRecord.in_line` reads both).
_RESULTS_SUFFIX = "_results.json"
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


class LeaderboardError(ValueError):
    """The runs cannot make a leaderboard; the message names the run, file or metric."""


# ---------------------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeInfo:
    """Which judge scored an item, as the task logged it (or as the task config declares it)."""

    model: str | None
    judge_version: str | None = None
    settings: str | None = None  # canonical JSON of the settings, so two infos compare by value
    capjudge_version: str | None = None  # None for records written before capjudge logged its version

    @classmethod
    def from_logged(cls, judge: LoggedJudge | None) -> JudgeInfo | None:
        if judge is None:
            return None
        settings = judge.settings
        return cls(
            model=judge.model,
            judge_version=judge.judge_version,
            settings=json.dumps(settings, sort_keys=True, default=str) if settings is not None else None,
            capjudge_version=judge.capjudge_version,
        )

    def label(self) -> str:
        parts = [self.model or "unknown model"]
        if self.judge_version:
            parts.append(self.judge_version)
        if self.capjudge_version:
            parts.append(f"capjudge {self.capjudge_version}")
        if self.settings:
            parts.append(self.settings)
        return " · ".join(parts)


@dataclass(frozen=True)
class TaskRun:
    """One task of one run: per-item values of every metric, aligned with `item_keys`."""

    task: str
    metric_names: tuple[str, ...]  # in the task's order
    higher_is_better: Mapping[str, bool]
    harness_values: Mapping[str, float]  # lmms-eval's own aggregate, for runs without samples
    item_keys: tuple[str, ...] | None  # None: no samples file (run without --log_samples)
    values: Mapping[str, np.ndarray]  # metric -> (n_items,) float, NaN = no value for that item
    bool_valued: Mapping[str, bool]  # metric -> every logged value was a bool
    judges: Mapping[JudgeInfo, int]  # judge -> number of items it scored
    judge_source: Literal["samples", "config", "unknown"]
    samples_path: Path | None
    # What judging cost, summed over the logged records (requests and tokens as the API reported them; items
    # answered from the cache counted apart). Empty for runs whose records carry no usage.
    usage: Mapping[str, int] = field(default_factory=dict)
    # Metrics the task declares descriptive (`metadata.descriptive_metrics`, e.g. caption length): shown with
    # a CI, never ranked, charted or tested, since a higher value is not a better model.
    descriptive: frozenset[str] = frozenset()

    @property
    def has_samples(self) -> bool:
        return self.item_keys is not None

    @property
    def n_items(self) -> int | None:
        return None if self.item_keys is None else len(self.item_keys)


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

    @property
    def results_path(self) -> Path:
        return self.results_paths[-1]


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
        raise LeaderboardError(f"{path}: no such file or folder")
    found = sorted(p for p in path.rglob(f"*{_RESULTS_SUFFIX}") if p.is_file())
    if not found:
        raise LeaderboardError(f"{path}: no lmms-eval results file (*{_RESULTS_SUFFIX}) in this folder")
    return found


def read_runs(arguments: Sequence[str]) -> tuple[list[Run], list[str]]:
    """Every model named by the arguments, and warnings.

    Results files with the same model name are merged into one row, because a model is often run one task
    at a time. When two of them hold the same task, the run started last wins (from the instant each run
    records, `run_start`; files started in the same second are ordered by path), with a warning naming the
    run used, the run left out and when each started.
    """
    runs: list[Run] = []
    for argument in arguments:
        name, path = parse_run_argument(argument)
        files = find_results_files(path)
        if name is not None and len(files) > 1:
            raise LeaderboardError(f"{argument}: a NAME= label needs one run, but {path} holds {len(files)} results files")
        runs.extend(read_run(file, name=name) for file in files)
    warnings: list[str] = []
    merged: dict[str, Run] = {}
    used: dict[tuple[str, str], Run] = {}  # (name, task) -> the run whose task is used so far
    for run in sorted(runs, key=lambda r: (r.started, str(r.results_path))):
        for task in run.tasks:
            earlier = used.get((run.name, task))
            if earlier is not None:
                warnings.append(
                    f"{run.name}: {task} was run more than once; using {run.results_path} ({_start_note(run)}), "
                    f"not {earlier.results_path} ({_start_note(earlier)}): the run started last is used"
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
        )
    order = list(dict.fromkeys(run.name for run in runs))
    return [merged[name] for name in order], warnings


def _start_note(run: Run) -> str:
    instant = datetime.fromtimestamp(run.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"started {instant} by {run.started_from}"


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
            return instant.timestamp(), f"lmms-eval's date stamp {stamp} in {zone}"
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


def _date_id(results_path: Path) -> str:
    name = results_path.name
    return name[: -len(_RESULTS_SUFFIX)] if name.endswith(_RESULTS_SUFFIX) else results_path.stem


def read_run(results_path: Path, name: str | None = None) -> Run:
    results_path = Path(results_path)
    try:
        results = read_json(results_path, LeaderboardError, f"{results_path} (lmms-eval results)")
    except OSError as error:
        raise LeaderboardError(f"{results_path}: cannot read lmms-eval results ({error.strerror or error})") from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise LeaderboardError(f"{results_path}: not an lmms-eval results file (no 'results' object)")
    config = results.get("config") if isinstance(results.get("config"), Mapping) else {}
    date_id = _date_id(results_path)
    configs = results.get("configs") or {}
    # Leaf tasks have a config; group entries in "results" do not.
    task_names = [task for task in results["results"] if task in configs] or list(results["results"])
    tasks = {
        task: _read_task(
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
    return Run(
        name=name or run_display_name(results),
        results_paths=(results_path,),
        model=str(config.get("model") or results.get("model_source") or "unknown"),
        model_args=model_args,
        date=date_id,
        tasks=tasks,
        started=started,
        started_from=started_from,
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


def _read_task(
    task: str,
    task_results: Mapping[str, Any],
    task_config: Mapping[str, Any],
    higher_is_better: Mapping[str, Any],
    samples_path: Path,
    results_where: str,
) -> TaskRun:
    harness_values: dict[str, float] = {}
    for key, value in task_results.items():
        metric, _, _filter = key.partition(",")
        if "_stderr" in metric or metric == "alias" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        harness_values.setdefault(metric, _aggregate(value, f"{results_where}[{key!r}]"))
    listed = [entry.get("metric") for entry in task_config.get("metric_list") or [] if isinstance(entry, Mapping)]
    metric_names = [str(m) for m in listed if m and m != RECORD_METRIC] or [m for m in harness_values if m != RECORD_METRIC]
    directions = {m: bool(higher_is_better.get(m, True)) for m in metric_names}
    for entry in task_config.get("metric_list") or []:
        if isinstance(entry, Mapping) and entry.get("metric") in directions and "higher_is_better" in entry:
            directions[entry["metric"]] = bool(entry["higher_is_better"])
    score_key = str(task_config.get("score_key") or "score")
    metadata = task_config.get("metadata") if isinstance(task_config.get("metadata"), Mapping) else {}
    descriptive = frozenset(str(m) for m in metadata.get("descriptive_metrics") or ())
    if not samples_path.is_file():
        config_judge = _judge_from_config(task_config)
        return TaskRun(
            task, tuple(metric_names), directions, harness_values, None, {}, {},
            {config_judge: 0} if config_judge else {}, "config" if config_judge else "unknown", None, descriptive,
        )
    numbered = list(numbered_objects(samples_path, LeaderboardError))
    lines = [line for _, line in numbered]
    if not metric_names:  # no config and no results: take what the task logged
        metric_names = sorted({k for line in lines for k in line if k not in _LMMS_SAMPLE_FIELDS and k not in (ITEM_ID_KEY, JUDGE_KEY, RECORD_METRIC)})
    values = {metric: np.full(len(lines), np.nan) for metric in metric_names}
    bool_valued = {metric: True for metric in metric_names}
    seen_value = {metric: False for metric in metric_names}
    keys: list[str] = []
    judges: Counter[JudgeInfo] = Counter()
    usage: Counter[str] = Counter()
    for position, (line_number, line) in enumerate(numbered):
        record = logged_record(line, f"{samples_path}, line {line_number}")
        keys.append(_item_key(line, record))
        judge = JudgeInfo.from_logged(record.judge if record is not None else None)
        if judge is not None:
            judges[judge] += 1
        _add_usage(usage, record.judgment if record is not None else None)
        for metric in metric_names:
            raw = line.get(metric)
            try:
                number = _number(raw, score_key)
            except NotANumber as problem:
                raise LeaderboardError(
                    f"{samples_path}, line {line_number} ({_item_label(line, record)}): {metric}: {problem}"
                ) from None
            if number is None:
                continue
            values[metric][position] = number
            seen_value[metric] = True
            bool_valued[metric] = bool_valued[metric] and _is_bool(raw, score_key)
    duplicates = [key for key, count in Counter(keys).items() if count > 1]
    if duplicates:
        raise LeaderboardError(f"{samples_path}: item ids repeat ({', '.join(duplicates[:5])}); cannot pair items across runs")
    judge_source: Literal["samples", "config", "unknown"] = "samples"
    if not judges:
        config_judge = _judge_from_config(task_config)
        judges = Counter({config_judge: len(lines)}) if config_judge else Counter()
        judge_source = "config" if config_judge else "unknown"
    return TaskRun(
        task=task,
        metric_names=tuple(metric_names),
        higher_is_better=directions,
        harness_values=harness_values,
        item_keys=tuple(keys),
        values=values,
        bool_valued={m: bool_valued[m] and seen_value[m] for m in metric_names},
        judges=dict(judges),
        usage=dict(usage),
        judge_source=judge_source,
        descriptive=descriptive,
        samples_path=samples_path,
    )


def _add_usage(usage: Counter[str], judgment: Judgment | None) -> None:
    if judgment is None or judgment.usage is None:
        return
    usage["items"] += 1
    usage["cached_items"] += int(bool(judgment.cache_hit))
    usage["requests"] += judgment.requests or 0
    usage["prompt_tokens"] += judgment.usage.prompt_tokens
    usage["completion_tokens"] += judgment.usage.completion_tokens


def read_records(samples_path: Path) -> list[JudgedRecord | None]:
    """The logged record of every line of a samples file (None: the line logs none)."""
    return [logged_record(line, f"{samples_path}, line {number}")
            for number, line in numbered_objects(samples_path, LeaderboardError)]


def logged_record(line: Mapping[str, Any], where: str) -> JudgedRecord | None:
    """The item's logged record (None: the line logs none); a malformed one is a LeaderboardError naming
    `where` (the samples file and line) and what is wrong."""
    try:
        record = JudgedRecord.in_line(line)
        if record is not None:
            judge_descriptor(record.judge)  # its logged judge facts must read back too, or the record is refused
        return record
    except RecordError as problem:
        raise LeaderboardError(f"{where}: the logged record: {problem}") from None


def _item_key(line: Mapping[str, Any], record: JudgedRecord | None) -> str:
    if record is not None and record.item_id is not None:
        return f"id:{record.item_id}"
    target = line.get("target")
    return f"doc:{line.get('doc_id')}:{json.dumps(target, sort_keys=True, default=str)}"


def _item_label(line: Mapping[str, Any], record: JudgedRecord | None) -> str:
    if record is not None and record.item_id is not None:
        return f"item {record.item_id}"
    return f"doc_id {line.get('doc_id')}"


def _number(raw: Any, score_key: str) -> float | None:
    """The item's value: None when it has none (null, or an object with neither `score_key` nor `value`: a
    corpus-level metric's item); raises NotANumber for anything else that is not a usable number."""
    if isinstance(raw, Mapping):
        raw = raw.get(score_key, raw.get("value"))
    return item_number(raw)


def _aggregate(value: float, where: str) -> float:
    """lmms-eval's aggregate of a metric: NaN (its mean over no items) and infinities are kept as "no value"
    (the leaderboard shows none); a number beyond what a score can be is refused, naming where it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    try:
        number = item_number(value)
    except NotANumber as problem:
        raise LeaderboardError(f"{where}: {problem}") from None
    assert number is not None
    return number


def _is_bool(raw: Any, score_key: str) -> bool:
    if isinstance(raw, Mapping):
        raw = raw.get(score_key, raw.get("value"))
    return isinstance(raw, bool)


def _judge_from_config(task_config: Mapping[str, Any]) -> JudgeInfo | None:
    metadata = task_config.get("metadata")
    if isinstance(metadata, list):  # some lmms-eval YAMLs write metadata as a list of one-key dicts
        metadata = {k: v for entry in metadata if isinstance(entry, Mapping) for k, v in entry.items()}
    if not isinstance(metadata, Mapping):
        return None
    if metadata.get("judge") is not None:
        try:
            return JudgeInfo.from_logged(LoggedJudge.from_logged(metadata["judge"]))
        except RecordError as problem:
            raise LeaderboardError(f"the task config's metadata.judge: {problem}") from None
    model = metadata.get("judge_model") or metadata.get("gpt_eval_model_name")
    return JudgeInfo(str(model), _str_or_none(metadata.get("judge_version"))) if model else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)

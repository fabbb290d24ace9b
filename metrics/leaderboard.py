"""Leaderboards from lmms-eval runs: per-model metric estimates with item-bootstrap CIs, ranks, and paired tests.

Input: the folders lmms-eval writes with `--output_path DIR --log_samples` — per model a subfolder holding
`<date>_results.json` (aggregated) and `<date>_samples_<task>.jsonl` (one line per item). Nothing here is
specific to one task: the metrics are whatever the task's `metric_list` (or its results) names, and each
item's value is read from the samples line under the metric's name. A value is

- a number (bool included): the item's value;
- None: the item was not judged (a judge failure, or a per-type metric on an item of another type). It is
  left out of that metric's mean and CI — never counted as 0 — and the `*_failed` rates report it;
- a dict: its `score` field (the task's lmms-eval `score_key`), else `value`. A metric with no per-item
  number at all (a corpus-level one, such as a correlation) shows lmms-eval's aggregate, without a CI.

Kinds of metric, decided from the data: a *rate* has only 0/1 values and is either bool-valued or declared
`higher_is_better: false` (failure and length-capped rates); every other metric is a *score*. A rate whose
name ends in `failed`/`failure`/`failures` is a failure rate (warned about above 2%). A score defined on as
many items as the task's best-covered score is a *main* metric (overall and per-dimension scores; per-type
scores such as AnyCap's `anycap_brief` cover only their own items and stay in the table only).

Items are identified across runs by a sample's `item_id` field if the task logs one, else by lmms-eval's
`doc_id` together with the logged `target` (lmms-eval's own `doc_hash` is the same for every line in 0.7.x,
so it identifies nothing). Runs on different data therefore show up as different item sets.

Statistics (all seeded; see `LeaderboardSettings`):
- CI of a mean: percentile interval of the item bootstrap (items resampled with replacement,
  `capjudge.metrics.bootstrap.draw_item_indices`), vectorised over resamples.
- Difference from the top model: on the items both models have a value for, the mean per-item difference,
  its paired item-bootstrap CI, and a paired permutation test (per-item sign flips, `scipy.stats.
  permutation_test`, exact when 2^n is within the permutation budget). p-values are Holm-corrected across
  the models compared with the top one in that column; "differs" means corrected p < alpha.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from capjudge.metrics.jsonl import read_objects
from capjudge.metrics.bootstrap import (
    BootstrapDistribution,
    draw_item_indices,
    percentile_interval,
)

# Fields every lmms-eval samples line has; whatever else a line holds came from the task's process_results.
_LMMS_SAMPLE_FIELDS = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "token_counts", "doc_hash", "input", "input_media"}
)
ITEM_ID_FIELD = "item_id"
JUDGE_FIELD = "judge"
_FAILURE_NAME = re.compile(r"(failed|failure|failures)$")
_RESULTS_SUFFIX = "_results.json"


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

    @classmethod
    def from_logged(cls, value: Any) -> JudgeInfo | None:
        if isinstance(value, Mapping):
            settings = value.get("settings")
            return cls(
                model=_str_or_none(value.get("model")),
                judge_version=_str_or_none(value.get("judge_version") or value.get("version")),
                settings=json.dumps(settings, sort_keys=True, default=str) if settings is not None else None,
            )
        if isinstance(value, str) and value:
            return cls(model=value)
        return None

    def label(self) -> str:
        parts = [self.model or "unknown model"]
        if self.judge_version:
            parts.append(self.judge_version)
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
    at a time. When two of them hold the same task, the newer (by lmms-eval's date stamp) wins, with a
    warning naming the file left out.
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
    for run in sorted(runs, key=lambda r: r.date):
        earlier = merged.get(run.name)
        if earlier is None:
            merged[run.name] = run
            continue
        for task in sorted(set(earlier.tasks) & set(run.tasks)):
            warnings.append(f"{run.name}: {task} was run more than once; using {run.results_path}, not {_source_of(earlier, task)}")
        merged[run.name] = Run(
            name=run.name,
            results_paths=earlier.results_paths + run.results_paths,
            model=run.model,
            model_args=run.model_args,
            date=run.date,
            tasks={**earlier.tasks, **run.tasks},
        )
    order = list(dict.fromkeys(run.name for run in runs))
    return [merged[name] for name in order], warnings


def _source_of(run: Run, task: str) -> Path:
    samples = run.tasks[task].samples_path
    return samples.parent if samples is not None else run.results_path


def read_run(results_path: Path, name: str | None = None) -> Run:
    results_path = Path(results_path)
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise LeaderboardError(f"{results_path}: cannot read lmms-eval results ({error})") from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise LeaderboardError(f"{results_path}: not an lmms-eval results file (no 'results' object)")
    config = results.get("config") or {}
    date_id = results_path.name[: -len(_RESULTS_SUFFIX)] if results_path.name.endswith(_RESULTS_SUFFIX) else results_path.stem
    configs = results.get("configs") or {}
    # Leaf tasks have a config; group entries in "results" do not.
    task_names = [task for task in results["results"] if task in configs] or list(results["results"])
    tasks = {
        task: _read_task(
            task,
            results["results"].get(task) or {},
            configs.get(task) or {},
            (results.get("higher_is_better") or {}).get(task) or {},
            results_path.parent / f"{date_id}_samples_{task}.jsonl",
        )
        for task in task_names
    }
    model_args = config.get("model_args") or ""
    if not isinstance(model_args, str):
        model_args = json.dumps(model_args, sort_keys=True)
    return Run(
        name=name or run_display_name(results),
        results_paths=(results_path,),
        model=str(config.get("model") or results.get("model_source") or "unknown"),
        model_args=model_args,
        date=date_id,
        tasks=tasks,
    )


def run_display_name(results: Mapping[str, Any]) -> str:
    """A row name: `model_name=` from the model arguments; else lmms-eval's model name (a caption file's
    stem for a path); else the model with its arguments."""
    config = results.get("config") or {}
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
) -> TaskRun:
    harness_values: dict[str, float] = {}
    for key, value in task_results.items():
        metric, _, _filter = key.partition(",")
        if "_stderr" in metric or metric == "alias" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        harness_values.setdefault(metric, float(value))
    listed = [entry.get("metric") for entry in task_config.get("metric_list") or [] if isinstance(entry, Mapping)]
    metric_names = [str(m) for m in listed if m] or list(harness_values)
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
    lines = _read_samples(samples_path)
    if not metric_names:  # no config and no results: take what the task logged
        metric_names = sorted({k for line in lines for k in line if k not in _LMMS_SAMPLE_FIELDS and k not in (ITEM_ID_FIELD, JUDGE_FIELD)})
    values = {metric: np.full(len(lines), np.nan) for metric in metric_names}
    bool_valued = {metric: True for metric in metric_names}
    seen_value = {metric: False for metric in metric_names}
    keys: list[str] = []
    judges: Counter[JudgeInfo] = Counter()
    for position, line in enumerate(lines):
        keys.append(_item_key(line))
        judge = JudgeInfo.from_logged(line.get(JUDGE_FIELD))
        if judge is not None:
            judges[judge] += 1
        for metric in metric_names:
            raw = line.get(metric)
            number = _number(raw, score_key)
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
        judge_source=judge_source,
        descriptive=descriptive,
        samples_path=samples_path,
    )


def _read_samples(path: Path) -> list[dict[str, Any]]:
    return read_objects(path, LeaderboardError)


def _item_key(line: Mapping[str, Any]) -> str:
    if line.get(ITEM_ID_FIELD) is not None:
        return f"id:{line[ITEM_ID_FIELD]}"
    target = line.get("target")
    return f"doc:{line.get('doc_id')}:{json.dumps(target, sort_keys=True, default=str)}"


def _number(raw: Any, score_key: str) -> float | None:
    if isinstance(raw, Mapping):
        raw = raw.get(score_key, raw.get("value"))
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, (int, float)) and math.isfinite(raw):
        return float(raw)
    return None


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
        return JudgeInfo.from_logged(metadata["judge"])
    model = metadata.get("judge_model") or metadata.get("gpt_eval_model_name")
    return JudgeInfo(str(model), _str_or_none(metadata.get("judge_version"))) if model else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# ---------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaderboardSettings:
    n_resamples: int = 2000  # item-bootstrap resamples for CIs
    n_permutations: int = 9999  # permutation-test budget (exact enumeration when 2^n fits)
    seed: int = 0
    confidence: float = 0.95
    alpha: float = 0.05
    failure_warn_rate: float = 0.02

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.n_resamples < 0 or self.n_permutations < 1:
            raise ValueError("n_resamples must be >= 0 and n_permutations >= 1")


@dataclass(frozen=True)
class Estimate:
    """A metric's value for one model: mean over the items with a value, and its CI (None when it cannot be
    computed: fewer than 2 items, no resamples, or no per-sample log)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int  # items with a value
    source: Literal["samples", "harness", "missing"]


@dataclass(frozen=True)
class Comparison:
    """This model minus the reference (the column's top model) on their common items."""

    reference: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None  # Holm, across the models compared with the same reference
    n_common: int
    significant: bool | None  # None: not testable (no common items or no per-sample log)


@dataclass(frozen=True)
class MetricColumn:
    task: str
    metric: str
    kind: Literal["score", "rate", "descriptive"]
    higher_is_better: bool
    main: bool
    is_failure: bool
    label: str

    @property
    def key(self) -> str:
        return f"{self.task}/{self.metric}"


@dataclass(frozen=True)
class LeaderboardRow:
    name: str
    results_paths: tuple[Path, ...]
    rank: int | None
    estimates: Mapping[str, Estimate]  # column key -> estimate
    comparisons: Mapping[str, Comparison]  # score column key -> comparison with that column's top model
    judges: Mapping[str, tuple[str, ...]]  # task -> judge labels
    n_items: Mapping[str, int | None]  # task -> items in the samples log

    def comparison_for(self, column: MetricColumn) -> Comparison | None:
        return self.comparisons.get(column.key)


@dataclass(frozen=True)
class Leaderboard:
    columns: tuple[MetricColumn, ...]
    rank_column: MetricColumn | None
    rows: tuple[LeaderboardRow, ...]  # ranked
    warnings: tuple[str, ...]
    settings: LeaderboardSettings
    method: str  # one paragraph naming the CI and the test, for every rendering

    @property
    def main_columns(self) -> tuple[MetricColumn, ...]:
        return tuple(c for c in self.columns if c.main)

    def top(self, column: MetricColumn) -> str | None:
        """The model the column's comparisons refer to; without comparisons, the best value."""
        for row in self.rows:
            comparison = row.comparisons.get(column.key)
            if comparison is not None:
                return comparison.reference
        valued = [row for row in self.rows if row.estimates[column.key].value is not None]
        if not valued:
            return None
        sign = 1.0 if column.higher_is_better else -1.0
        return max(valued, key=lambda row: sign * row.estimates[column.key].value).name  # type: ignore[operator]


def mean_estimate(values: np.ndarray, settings: LeaderboardSettings) -> Estimate:
    """Mean over the finite values, with the item-bootstrap percentile CI."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return Estimate(None, None, None, 0, "samples")
    value = float(finite.mean())
    interval = _bootstrap_mean_interval(finite, settings)
    if interval is None:
        return Estimate(value, None, None, int(finite.size), "samples")
    return Estimate(value, interval[0], interval[1], int(finite.size), "samples")


def _bootstrap_mean_interval(values: np.ndarray, settings: LeaderboardSettings) -> tuple[float, float] | None:
    if values.size < 2 or settings.n_resamples < 2:
        return None
    rng = np.random.default_rng(settings.seed)
    # Bounded memory: resample in chunks of rows; one generator keeps the draws identical to one big matrix.
    rows_per_chunk = max(1, 4_000_000 // values.size)
    means = []
    for start in range(0, settings.n_resamples, rows_per_chunk):
        rows = min(rows_per_chunk, settings.n_resamples - start)
        means.append(values[draw_item_indices(values.size, rows, rng)].mean(axis=1))
    distribution = BootstrapDistribution(float(values.mean()), np.concatenate(means), np.empty(0), 0)
    interval = percentile_interval(distribution, settings.confidence)
    if interval is None:
        return None
    # Percentiles of a constant sample can differ from the mean by round-off; keep the estimate inside.
    estimate = distribution.estimate
    return min(interval.low, estimate), max(interval.high, estimate)


def paired_comparison(
    values: np.ndarray, reference: np.ndarray, reference_name: str, settings: LeaderboardSettings
) -> Comparison:
    """`values - reference` on the items where both are finite (arrays aligned item by item)."""
    from scipy.stats import permutation_test

    both = np.isfinite(values) & np.isfinite(reference)
    n_common = int(both.sum())
    if n_common == 0:
        return Comparison(reference_name, None, None, None, None, None, 0, None)
    differences = values[both] - reference[both]
    difference = float(differences.mean())
    interval = _bootstrap_mean_interval(differences, settings)
    if n_common < 2 or not np.any(differences):
        p_value = 1.0 if n_common >= 2 else None
    else:
        result = permutation_test(
            (values[both], reference[both]),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=settings.n_permutations,
            alternative="two-sided",
            rng=np.random.default_rng(settings.seed),
        )
        p_value = float(result.pvalue)
    return Comparison(
        reference=reference_name,
        difference=difference,
        ci_low=interval[0] if interval else None,
        ci_high=interval[1] if interval else None,
        p_value=p_value,
        p_adjusted=p_value,
        n_common=n_common,
        significant=None if p_value is None else p_value < settings.alpha,
    )


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (controls the family-wise error rate)."""
    m = len(p_values)
    order = np.argsort(p_values, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()


METHOD_TEMPLATE = (
    "Values are means over the items each model has a value for (unjudged items are left out, never counted "
    "as 0); rates are shares, in %: failures of all items, other rates (e.g. length-capped) of the judged "
    "items. Brackets: {confidence:.0%} percentile CI from an item bootstrap ({n_resamples} resamples, seed {seed}). Each model is compared with the column's top model on "
    "the items both have a value for: mean per-item difference with its paired item-bootstrap CI, and a paired "
    "permutation test (per-item sign flips, {n_permutations} permutations or exact enumeration when fewer "
    "suffice); p-values are Holm-corrected across the models compared; significant means corrected p < "
    "{alpha:g}."
)


def build_leaderboard(
    runs: Sequence[Run],
    settings: LeaderboardSettings = LeaderboardSettings(),
    rank_by: str | None = None,
    warnings: Iterable[str] = (),
) -> Leaderboard:
    """Rank `runs` by `rank_by` (`metric` or `task/metric`; default the first main score) and compare each
    with the top model in every score column."""
    if not runs:
        raise LeaderboardError("no runs to compare")
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        repeated = sorted(name for name, count in Counter(names).items() if count > 1)
        raise LeaderboardError(f"several runs are named {repeated}; label them NAME=PATH")
    columns = _columns(runs)
    notes = list(warnings)
    estimates = {run.name: {c.key: _estimate(run, c, settings) for c in columns} for run in runs}
    rank_column = _rank_column(columns, rank_by)
    comparisons: dict[str, dict[str, Comparison]] = {run.name: {} for run in runs}
    for column in columns:
        if column.kind != "score":
            continue
        for name, comparison in _compare_with_top(runs, column, estimates, settings).items():
            comparisons[name][column.key] = comparison
    ranks = _ranks(runs, rank_column, estimates)
    rows = [
        LeaderboardRow(
            name=run.name,
            results_paths=run.results_paths,
            rank=ranks.get(run.name),
            estimates=estimates[run.name],
            comparisons=comparisons[run.name],
            judges={task: tuple(sorted(j.label() for j in t.judges)) for task, t in run.tasks.items()},
            n_items={task: t.n_items for task, t in run.tasks.items()},
        )
        for run in runs
    ]
    rows.sort(key=lambda row: (row.rank is None, row.rank or 0, row.name))
    notes.extend(_consistency_warnings(runs, columns, estimates, settings))
    notes.extend(_unranked_warnings(rows, columns, rank_column))
    return Leaderboard(
        columns=columns,
        rank_column=rank_column,
        rows=tuple(rows),
        warnings=tuple(notes),
        settings=settings,
        method=METHOD_TEMPLATE.format(**vars(settings)),
    )


def _columns(runs: Sequence[Run]) -> tuple[MetricColumn, ...]:
    tasks: list[str] = []
    for run in runs:
        tasks.extend(task for task in run.tasks if task not in tasks)
    metric_tasks: Counter[str] = Counter()
    specs: list[tuple[str, str]] = []
    for task in tasks:
        metrics: list[str] = []
        for run in runs:
            if task in run.tasks:
                metrics.extend(m for m in run.tasks[task].metric_names if m not in metrics)
        specs.extend((task, metric) for metric in metrics)
        metric_tasks.update(metrics)
    columns: list[MetricColumn] = []
    for task in tasks:
        task_runs = [run.tasks[task] for run in runs if task in run.tasks]
        kinds = {metric: _kind(task_runs, metric) for t, metric in specs if t == task}
        coverage = {metric: max((_coverage(t, metric) for t in task_runs), default=0) for metric in kinds}
        best_score_coverage = max((coverage[m] for m, k in kinds.items() if k == "score"), default=0)
        for metric, kind in kinds.items():
            higher = next((t.higher_is_better[metric] for t in task_runs if metric in t.higher_is_better), True)
            columns.append(
                MetricColumn(
                    task=task,
                    metric=metric,
                    kind=kind,
                    higher_is_better=higher,
                    main=kind == "score" and coverage[metric] >= best_score_coverage,
                    is_failure=kind == "rate" and bool(_FAILURE_NAME.search(metric)),
                    label=metric if metric_tasks[metric] == 1 else f"{task}/{metric}",
                )
            )
    return tuple(columns)


def _kind(task_runs: Sequence[TaskRun], metric: str) -> Literal["score", "rate", "descriptive"]:
    if any(metric in t.descriptive for t in task_runs):
        return "descriptive"
    observed = [t for t in task_runs if metric in t.values and np.isfinite(t.values[metric]).any()]
    if not observed:
        return "score"
    binary = all(set(np.unique(t.values[metric][np.isfinite(t.values[metric])])) <= {0.0, 1.0} for t in observed)
    declared_lower = any(t.higher_is_better.get(metric) is False for t in observed)
    all_bool = all(t.bool_valued.get(metric, False) for t in observed)
    return "rate" if binary and (all_bool or declared_lower) else "score"


def _coverage(task_run: TaskRun, metric: str) -> int:
    if metric in task_run.values:
        return int(np.isfinite(task_run.values[metric]).sum())
    return 1 if metric in task_run.harness_values else 0


def _estimate(run: Run, column: MetricColumn, settings: LeaderboardSettings) -> Estimate:
    task_run = run.tasks.get(column.task)
    if task_run is None:
        return Estimate(None, None, None, 0, "missing")
    per_item = task_run.values.get(column.metric)
    # No per-item numbers: a run without --log_samples, or a corpus-level metric (e.g. a correlation, whose
    # items are {"judge": ..., "human": ...}); lmms-eval's aggregate is then the only value there is.
    if per_item is None or not np.isfinite(per_item).any():
        value = task_run.harness_values.get(column.metric)
        # lmms-eval writes NaN for the mean of a metric no item has (every item unjudged): no value at all.
        if value is None or not math.isfinite(value):
            return Estimate(None, None, None, 0, "missing")
        return Estimate(value, None, None, 0, "harness")
    return mean_estimate(per_item, settings)


def _rank_column(columns: Sequence[MetricColumn], rank_by: str | None) -> MetricColumn | None:
    if rank_by is None:
        return next((c for c in columns if c.main), next((c for c in columns if c.kind == "score"), None))
    matches = [c for c in columns if rank_by in (c.key, c.metric)]
    if len(matches) != 1:
        known = ", ".join(c.key for c in columns)
        problem = "matches several columns" if matches else "is not a metric of these runs"
        raise LeaderboardError(f"--rank-by {rank_by!r} {problem}; columns: {known}")
    return matches[0]


def _ranks(runs: Sequence[Run], column: MetricColumn | None, estimates: Mapping[str, Mapping[str, Estimate]]) -> dict[str, int]:
    """Competition ranking (1, 2, 2, 4) by the point estimate; models without a value get no rank."""
    if column is None:
        return {}
    from scipy.stats import rankdata

    named = [(run.name, estimates[run.name][column.key].value) for run in runs]
    named = [(name, value) for name, value in named if value is not None and math.isfinite(value)]
    if not named:
        return {}
    signed = np.array([-value if column.higher_is_better else value for _, value in named])
    return {name: int(rank) for (name, _), rank in zip(named, rankdata(signed, method="min"))}


def _aligned(runs: Sequence[Run], task: str, metric: str, first: str, second: str) -> tuple[np.ndarray, np.ndarray]:
    """The two runs' values on their common items, in one order."""
    by_name = {run.name: run.tasks[task] for run in runs if task in run.tasks}
    a, b = by_name[first], by_name[second]
    assert a.item_keys is not None and b.item_keys is not None
    position_in_b = {key: i for i, key in enumerate(b.item_keys)}
    pairs = [(i, position_in_b[key]) for i, key in enumerate(a.item_keys) if key in position_in_b]
    if not pairs:
        return np.empty(0), np.empty(0)
    index_a, index_b = (np.array(side) for side in zip(*pairs))
    return a.values[metric][index_a], b.values[metric][index_b]


def _compare_with_top(
    runs: Sequence[Run], column: MetricColumn, estimates: Mapping[str, Mapping[str, Estimate]], settings: LeaderboardSettings
) -> dict[str, Comparison]:
    # Only models with per-item values can be paired; the top model is the best of those.
    testable = [
        run.name for run in runs
        if estimates[run.name][column.key].source == "samples" and estimates[run.name][column.key].value is not None
    ]
    if len(testable) < 2:
        return {}
    sign = 1.0 if column.higher_is_better else -1.0
    top = max(testable, key=lambda name: (sign * estimates[name][column.key].value, -testable.index(name)))  # type: ignore[operator]
    compared = {
        name: paired_comparison(*_aligned(runs, column.task, column.metric, name, top), top, settings)
        for name in testable if name != top
    }
    tested = [name for name, c in compared.items() if c.p_value is not None]
    adjusted = holm_adjust([compared[name].p_value for name in tested])  # type: ignore[misc]
    result: dict[str, Comparison] = {}
    for name, comparison in compared.items():
        if name in tested:
            p_adjusted = adjusted[tested.index(name)]
            comparison = _with_adjusted(comparison, p_adjusted, settings.alpha)
        result[name] = comparison
    return result


def _with_adjusted(comparison: Comparison, p_adjusted: float, alpha: float) -> Comparison:
    return Comparison(
        comparison.reference, comparison.difference, comparison.ci_low, comparison.ci_high,
        comparison.p_value, p_adjusted, comparison.n_common, p_adjusted < alpha,
    )


def _consistency_warnings(
    runs: Sequence[Run], columns: Sequence[MetricColumn], estimates: Mapping[str, Mapping[str, Estimate]], settings: LeaderboardSettings
) -> list[str]:
    notes: list[str] = []
    tasks = list(dict.fromkeys(c.task for c in columns))
    for task in tasks:
        present = [run for run in runs if task in run.tasks]
        absent = [run.name for run in runs if task not in run.tasks]
        if absent:
            notes.append(f"{task}: not run for {', '.join(absent)}")
        without_samples = [run.name for run in present if not run.tasks[task].has_samples]
        if without_samples:
            notes.append(
                f"{task}: no per-sample log for {', '.join(without_samples)} (run lmms-eval with --log_samples); "
                "their values are lmms-eval's aggregates, with no CI and no test"
            )
        notes.extend(_item_set_warnings(task, [run for run in present if run.tasks[task].has_samples], columns))
        notes.extend(_judge_warnings(task, present))
    for column in columns:
        if not column.is_failure:
            continue
        for run in runs:
            estimate = estimates[run.name][column.key]
            if estimate.value is not None and estimate.value > settings.failure_warn_rate:
                notes.append(
                    f"{run.name}: {column.label} is {estimate.value:.1%} (above {settings.failure_warn_rate:.0%}); "
                    "its scores cover only the items the judge scored"
                )
    return notes


def _item_set_warnings(task: str, runs: Sequence[Run], columns: Sequence[MetricColumn]) -> list[str]:
    if len(runs) < 2:
        return []
    notes = []
    item_sets = {run.name: set(run.tasks[task].item_keys or ()) for run in runs}
    if len({frozenset(s) for s in item_sets.values()}) > 1:
        common = set.intersection(*item_sets.values())
        sizes = ", ".join(f"{name} {len(items)}" for name, items in item_sets.items())
        notes.append(
            f"{task}: models were run on different item sets ({sizes} items; {len(common)} in common); "
            "paired tests use only the common items"
        )
    main = next((c for c in columns if c.task == task and c.main), None)
    if main is not None:
        judged = {}
        for run in runs:
            task_run = run.tasks[task]
            values = task_run.values.get(main.metric)
            if values is not None:
                judged[run.name] = {key for key, v in zip(task_run.item_keys or (), values) if np.isfinite(v)}
        if len({frozenset(s) for s in judged.values()}) > 1 and len({frozenset(s) for s in item_sets.values()}) == 1:
            sizes = ", ".join(f"{name} {len(items)}" for name, items in judged.items())
            notes.append(f"{task}: models were judged on different item sets ({main.metric} present for: {sizes})")
    return notes


def _judge_warnings(task: str, runs: Sequence[Run]) -> list[str]:
    notes = []
    per_run = {run.name: run.tasks[task].judges for run in runs}
    for name, judges in per_run.items():
        if len(judges) > 1:
            labels = "; ".join(f"{j.label()} ({count} items)" for j, count in judges.items())
            notes.append(f"{task}: {name} was judged by more than one judge or setting: {labels}")
    unknown = [name for name, judges in per_run.items() if not judges]
    known = {name: frozenset(judges) for name, judges in per_run.items() if judges}
    if len(set(known.values())) > 1:
        labels = "; ".join(f"{name}: {', '.join(sorted(j.label() for j in judges))}" for name, judges in known.items())
        notes.append(f"{task}: models were judged by different judge models or settings ({labels})")
    if unknown and len(runs) > 1:
        notes.append(f"{task}: the judge is not recorded for {', '.join(unknown)}; cannot check it matches the others")
    return notes


def _unranked_warnings(
    rows: Sequence[LeaderboardRow], columns: Sequence[MetricColumn], rank_column: MetricColumn | None
) -> list[str]:
    """A model with no value for the rank metric (typically: the judge failed on every item) is listed, last
    and without a rank, with its failure rate, so a dead judge shows up as such and never as a low score."""
    if rank_column is None:
        return []
    failure_columns = [c for c in columns if c.task == rank_column.task and c.is_failure]
    notes = []
    for row in rows:
        if row.rank is not None:
            continue
        rates = [
            f"{c.label} {row.estimates[c.key].value:.1%}" for c in failure_columns
            if row.estimates[c.key].value is not None
        ]
        failure = f" ({'; '.join(rates)})" if rates else ""
        notes.append(f"{row.name}: unranked, no judged item has a value for {rank_column.label}{failure}")
    return notes

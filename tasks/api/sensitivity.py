"""What fools a judge, from Python: `capjudge sensitivity` without its files, the report returned instead.

The run is the command's own (capjudge.tasks.runs.sensitivity.judging): the task built as lmms-eval builds it, every
original caption and each controlled perturbation judged through the task's `judge_all` (the client, reply
cache, rate budget, pre-flight probe and panel of the environment's judge configuration, as every run), then the
paired shifts with clip-bootstrap intervals (capjudge.metrics.sensitivity). A rerun asks nothing: every
judgment is a cache hit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capjudge.metrics.sensitivity.report import SensitivityReport


def run_sensitivity(task: str, *, captions: str | os.PathLike[str] | None = None,
                    run: str | os.PathLike[str] | None = None, candidates: bool = False,
                    perturbations: Sequence[str] | None = None, limit: int | None = None, seed: int = 0,
                    resamples: int | None = None, confidence: float = 0.95,
                    include_path: str | os.PathLike[str] | None = None) -> SensitivityReport:
    """Judge the captions of `task` (a capjudge task: `gveval_demo`, `gveval`, `anycap_style`, ...) and their
    perturbations, and measure the shifts, as `capjudge sensitivity --task TASK` does.

    One caption source: `captions` (a captions JSONL/JSON keyed by item id), `run` (an lmms-eval output with its
    samples) or `candidates=True` (the task's own rated candidates: MSVD-Eval, VATEX-EVAL). `perturbations`:
    their names (default every one: padding, hallucination, truncation, shuffle, mismatch); `limit`: the first
    N items; `seed`; `resamples` (default the command's); `include_path`: task folders (default capjudge's).
    Unjudged judgments are counted in `report.counts.unjudged`, never scored. Raises SensitivityError,
    PerturbationError, JudgeStageError, ConfigError, DatasetError or CaptionsFileError (all ValueErrors) naming
    the argument, file or item, before any judgment where the command does.
    """
    from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, perturbation_named
    from capjudge.tasks import TASKS_DIR
    from capjudge.tasks.cli.bounds import MAX_ITEMS, MAX_RESAMPLES, MAX_SEED
    from capjudge.tasks.runs.sensitivity.run import DEFAULT_RESAMPLES, MIN_RESAMPLES
    from capjudge.tasks.runs.judging.stage import load_judged_task
    from capjudge.tasks.runs.sensitivity.judging import SensitivityError, judge_planned, original_captions, plan

    resamples = DEFAULT_RESAMPLES if resamples is None else resamples
    for name, value, low, high in (("limit", limit, 1, MAX_ITEMS), ("seed", seed, 0, MAX_SEED),
                                   ("resamples", resamples, MIN_RESAMPLES, MAX_RESAMPLES)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            raise SensitivityError(f"{name} must be a whole number from {low:,} to {high:,}, got {value!r}")
    names = [perturbations] if isinstance(perturbations, str) else \
        list(perturbations) if perturbations is not None else [each.name for each in PERTURBATIONS]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SensitivityError(f"perturbations: {repeated[0]!r} given twice")
    chosen = [perturbation_named(name) for name in names]
    judged_task = load_judged_task(task, Path(include_path) if include_path is not None else TASKS_DIR)
    pairs = original_captions(judged_task, task, _path(run), _path(captions), candidates, limit)
    planned = plan(pairs, chosen, seed)
    return judge_planned(judged_task, planned, chosen, n_resamples=resamples, seed=seed, confidence=confidence)


def _path(value: Any) -> Path | None:
    return None if value is None else Path(value)

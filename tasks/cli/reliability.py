"""`capjudge reliability RUN --task T`: judge noise (test-retest) of a run judged with k > 1 replies per item.

    CAPJUDGE_JUDGE_SAMPLES=3 capjudge judge --captions my_model.jsonl --task gveval --out results/k3
    capjudge reliability results/k3 --task gveval --score accuracy --score mean
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def register(groups: Any) -> None:
    parser = groups.top.add_parser("reliability", help="judge noise from k replies per item (ICC, alpha, per-item SD)",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="an lmms-eval (or capjudge judge) output folder or results file")
    parser.add_argument("--task", required=True, help="the task whose samples to read")
    parser.add_argument("--score", action="append", help="a score of the replies (default: all of them)")
    parser.add_argument("--share", type=float, default=0.1,
                        help="replies needed for judge noise to be at most this share of the variance (default 0.1)")
    parser.add_argument("--resamples", type=int, default=1000, help="item-bootstrap resamples for the CIs")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(func=_run)
    agreement = groups.top.add_parser(
        "agreement", help="two judges (or settings) on the same runs: tau-b, Spearman, mean difference, ranking",
        description="Judge against judge: the same models and items judged twice.")
    agreement.add_argument("first", type=Path, help="runs judged by the first judge (a folder of model runs)")
    agreement.add_argument("second", type=Path, help="the same runs judged by the second judge")
    agreement.add_argument("--task", required=True)
    agreement.add_argument("--metric", required=True, help="a per-item metric of the task, e.g. gveval_mean")
    agreement.add_argument("--resamples", type=int, default=1000)
    agreement.add_argument("--seed", type=int, default=0)
    agreement.set_defaults(func=_agreement)


def _agreement(args: argparse.Namespace) -> int:
    from capjudge.metrics.statistics.reliability import ReliabilityError, judge_agreement
    from capjudge.metrics.files.runs import LeaderboardError

    problem = _resampling_problem(args)
    if problem:
        print(f"capjudge agreement: {problem}", file=sys.stderr)
        return 2
    try:
        sides = [_judged_values(folder, args.task, args.metric) for folder in (args.first, args.second)]
        result = judge_agreement(sides[0].per_model, sides[1].per_model, args.metric,
                                 higher_is_better=sides[1].higher_is_better,
                                 n_resamples=args.resamples, seed=args.seed)
    except (ReliabilityError, LeaderboardError) as error:
        print(f"capjudge agreement: {error}", file=sys.stderr)
        return 2
    print(f"# {args.metric}: {args.first} vs {args.second}\n")
    print("| model | common items | Kendall tau-b | Spearman | mean, first | mean, second | difference (second - first) |")
    print("|---|---|---|---|---|---|---|")
    for m in result.models:
        print(f"| {m.model} | {m.n_common} | {m.kendall_b.text()} | {m.spearman.text()} | {m.first_mean:.3f} | "
              f"{m.second_mean:.3f} | {m.mean_difference.text()} |")
    change = "CHANGES" if result.ranking_changes else "is the same"
    print(f"\nModel ranking {change}: first judge {' > '.join(result.first_ranking)}; "
          f"second judge {' > '.join(result.second_ranking)}")
    left_out = [note for side in sides for note in side.left_out]
    if left_out:
        print("\nLeft out (no value of the metric: unjudged): " + "; ".join(left_out) + ".")
    return 0


@dataclass(frozen=True)
class JudgedValues:
    """One side of `capjudge agreement`: model -> item -> the metric's value, and what was left out."""

    per_model: dict[str, dict[str, float]]
    higher_is_better: bool
    left_out: tuple[str, ...]  # "<samples file>: k of n items" per run with items without a value


def _judged_values(folder: Path, task_name: str, metric: str) -> JudgedValues:
    """Every run's per-item values under `folder`. An item without a value (logged null: unjudged) is left out
    and counted; a run with no value at all is an error naming its samples file. A value that is no number
    (text, NaN, 10**400, -1e308) is refused by `read_runs`, naming the file, line and item."""
    from capjudge.metrics.statistics.reliability import ReliabilityError
    from capjudge.metrics.files.runs import read_runs

    runs, _ = read_runs([str(folder)])
    per_model: dict[str, dict[str, float]] = {}
    higher, left_out = True, []
    for run in runs:
        task = run.tasks.get(task_name)
        if task is None or not task.has_samples:
            continue
        if metric not in task.values:
            raise ReliabilityError(f"{folder}: {run.name} has no per-item metric {metric!r}")
        higher = task.higher_is_better.get(metric, True)
        values = dict(zip(task.item_keys or (), (float(v) for v in task.values[metric])))
        judged = {key: value for key, value in values.items() if math.isfinite(value)}
        if not judged:
            raise ReliabilityError(f"{task.samples_path}: no item has a value of {metric!r} (all {len(values)} "
                                   "unjudged): nothing to compare")
        if len(judged) < len(values):
            left_out.append(f"{task.samples_path}: {len(values) - len(judged)} of {len(values)} items")
        per_model[run.name] = judged
    if not per_model:
        raise ReliabilityError(f"{folder}: no run of task {task_name!r} with per-item samples (--log_samples)")
    return JudgedValues(per_model, higher, tuple(left_out))


def _resampling_problem(args: argparse.Namespace) -> str | None:
    """--resamples and --seed name themselves when negative (numpy's own error would name neither)."""
    for flag, value in (("--resamples", args.resamples), ("--seed", args.seed)):
        if value < 0:
            return f"{flag} must be 0 or more, got {value}"
    return None


def _scores_to_measure(lines: list[dict[str, Any]], asked: list[str] | None, samples: Path) -> list[str]:
    """The --score names, each one the replies have; without --score, the judge's own scores. Never none:
    a table without a row would say nothing and look like success."""
    from capjudge.metrics.statistics.reliability import ReliabilityError, replies_per_item, reply_scores

    replies_per_item(lines)  # a run judged once per item is refused as such, whatever --score says
    found = reply_scores(lines)
    have = ", ".join(found.fields) or "none"
    unknown = [name for name in asked or () if name not in found.fields]
    if unknown:
        raise ReliabilityError(f"--score {unknown[0]}: no reply in {samples} has that score (have: {have})")
    names = list(dict.fromkeys(asked or found.defaults))
    if not names:
        raise ReliabilityError(f"{samples}: the replies of judge {found.judge or '(unnamed)'} carry no score "
                               "capjudge knows; name one with --score")
    return names


def _run(args: argparse.Namespace) -> int:
    from capjudge.metrics.files.jsonl import read_objects
    from capjudge.metrics.statistics.reliability import ReliabilityError, retest_statistics, sample_matrix
    from capjudge.metrics.files.runs import LeaderboardError, find_results_files

    problem = _resampling_problem(args)
    if problem:
        print(f"capjudge reliability: {problem}", file=sys.stderr)
        return 2
    try:
        found = []
        for results in find_results_files(args.run):
            samples = results.with_name(f"{results.name.removesuffix('_results.json')}_samples_{args.task}.jsonl")
            if samples.is_file():
                found.append(samples)
        if len(found) != 1:
            raise ReliabilityError(f"{args.run}: {len(found)} samples files of task {args.task!r} (need exactly one; "
                                   "run lmms-eval with --log_samples)")
        lines = read_objects(found[0], ReliabilityError)
        names = _scores_to_measure(lines, args.score, found[0])
        reports = []
        for name in names:
            matrix, k, left_out = sample_matrix(lines, name)
            reports.append(retest_statistics(matrix, score=name, left_out=left_out, share=args.share,
                                       n_resamples=args.resamples, seed=args.seed))
    except (ReliabilityError, LeaderboardError) as error:
        print(f"capjudge reliability: {error}", file=sys.stderr)
        return 2
    print(f"# Judge noise: {found[0]}\n")
    print("| score | items (left out) | replies | per-item SD | ICC(1,1) | ICC(1,k) | Krippendorff alpha | noise share of one reply | replies for share <= {:.0%} |".format(args.share))
    print("|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        needed = "not measurable" if r.replies_needed is None else str(r.replies_needed)
        print(f"| {r.score} | {r.items} ({r.left_out}) | {r.replies} | {r.item_sd.text(2)} | {r.icc_single.text()} | "
              f"{r.icc_mean.text()} | {r.alpha.text()} | {r.noise_share_of_one:.1%} | {needed} |")
    print(f"\n95% CIs: item bootstrap, {args.resamples} resamples, seed {args.seed} (each item's replies kept together).")
    return 0

"""`capjudge agreement FIRST SECOND --task T --metric M`: two judges (or one judge under two settings) on the
same runs: per model Kendall tau-b, Spearman and the mean difference with CIs, and whether the ranking changes.

    capjudge agreement results/gpt4o results/local --task gveval_demo --metric gveval_mean
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.tasks.cli.bounds import MAX_RESAMPLES, MAX_SEED, count_argument


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "agreement", help="two judges (or settings) on the same runs: tau-b, Spearman, mean difference, ranking",
        description="Judge against judge: the same models and items judged twice.")
    parser.add_argument("first", type=Path, help="runs judged by the first judge (a folder of model runs)")
    parser.add_argument("second", type=Path, help="the same runs judged by the second judge")
    parser.add_argument("--task", required=True)
    parser.add_argument("--metric", required=True, help="a per-item metric of the task, e.g. gveval_mean")
    count_argument(parser, "--resamples", low=0, high=MAX_RESAMPLES, default=1000,
                   help="item-bootstrap resamples for the CIs (default 1000)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0, help="the resamples' seed (default 0)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from capjudge.metrics.files.run_file_error import RunFileError
    from capjudge.metrics.statistics.judge_agreement import AgreementError, judge_agreement, judged_values

    try:
        sides = [judged_values(folder, args.task, args.metric) for folder in (args.first, args.second)]
        result = judge_agreement(sides[0].per_model, sides[1].per_model, args.metric,
                                 higher_is_better=sides[1].higher_is_better,
                                 n_resamples=args.resamples, seed=args.seed)
    except (AgreementError, RunFileError) as error:
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

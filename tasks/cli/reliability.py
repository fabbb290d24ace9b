"""`capjudge reliability RUN --task T`: judge noise (test-retest) of a run judged with k > 1 replies per item.

    CAPJUDGE_JUDGE_SAMPLES=3 capjudge judge --captions my_model.jsonl --task gveval --out results/k3
    capjudge reliability results/k3 --task gveval --score accuracy --score mean
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.tasks.cli.bounds import MAX_RESAMPLES, MAX_SEED, count_argument


def register(groups: Any) -> None:
    parser = groups.top.add_parser("reliability", help="judge noise from k replies per item (ICC, alpha, per-item SD)",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="an lmms-eval (or capjudge judge) output folder or results file")
    parser.add_argument("--task", required=True, help="the task whose samples to read")
    parser.add_argument("--score", action="append", help="a score of the replies (default: all of them)")
    parser.add_argument("--share", type=float, default=0.1,
                        help="replies needed for judge noise to be at most this share of the variance (default 0.1)")
    count_argument(parser, "--resamples", low=0, high=MAX_RESAMPLES, default=1000,
                   help="item-bootstrap resamples for the CIs (default 1000)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0, help="the resamples' seed (default 0)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from capjudge.metrics.files.run_file_error import RunFileError
    from capjudge.metrics.statistics.reliability import ReliabilityError, run_noise

    try:
        noise = run_noise(args.run, args.task, args.score, share=args.share, n_resamples=args.resamples, seed=args.seed)
    except (ReliabilityError, RunFileError) as error:
        print(f"capjudge reliability: {error}", file=sys.stderr)
        return 2
    print(f"# Judge noise: {noise.samples_path}\n")
    print("| score | items (left out) | replies | per-item SD | ICC(1,1) | ICC(1,k) | Krippendorff alpha | noise share of one reply | replies for share <= {:.0%} |".format(args.share))
    print("|---|---|---|---|---|---|---|---|---|")
    for r in noise.reports:
        needed = "not measurable" if r.replies_needed is None else str(r.replies_needed)
        print(f"| {r.score} | {r.items} ({r.left_out}) | {r.replies} | {r.item_sd.text(2)} | {r.icc_single.text()} | "
              f"{r.icc_mean.text()} | {r.alpha.text()} | {r.noise_share_of_one:.1%} | {needed} |")
    print(f"\n95% CIs: item bootstrap, {args.resamples} resamples, seed {args.seed} (each item's replies kept together).")
    return 0

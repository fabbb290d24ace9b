"""`capjudge demo`: the whole product, offline, on the demo split shipped in tasks/demo/.

The parser only; the pipeline (local judge, lmms-eval per caption set, report and leaderboard) is
capjudge.tasks.runs.demo_pipeline.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks.cli.bounds import MAX_ITEMS, count_argument
from capjudge.tasks.runs.demo_pipeline import CAPTION_SETS, DemoOptions, run_demo


def register(groups: Any) -> None:
    parser = groups.top.add_parser("demo", help="run the demo end to end: local judge, both tasks, leaderboard")
    parser.add_argument("--out", type=folder_argument, default=Path("results/demo"), help="where results go (default results/demo)")
    parser.add_argument("--remote-judge", action="store_true",
                        help="judge with the backend configured in the environment instead of the local model")
    count_argument(parser, "--limit", low=1, high=MAX_ITEMS, default=None, help="items per task (default: all)")
    parser.add_argument("--caption-sets", nargs="+", default=list(CAPTION_SETS), choices=CAPTION_SETS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_demo(DemoOptions(out=args.out, remote_judge=args.remote_judge, limit=args.limit,
                                caption_sets=tuple(args.caption_sets)))

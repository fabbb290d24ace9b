"""`capjudge estimate`: what judging a task will cost, before a single request is made.

The parser only: the flags are checked (prices, rates, --limit) and passed to
capjudge.tasks.runs.judging.estimate.estimate_task, which builds and counts every request.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.tasks import TASKS_DIR
from capjudge.tasks.cli import dry_run_flags
from capjudge.tasks.cli.bounds import MAX_ITEMS, count_argument
from capjudge.tasks.runs.judging.estimate import DEFAULT_OUTPUT_TOKENS, EstimateError


def register(groups: Any) -> None:
    parser = groups.top.add_parser("estimate", help="what judging a task will cost (requests, tokens, price); sends nothing",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, help="an lmms-eval --predict_only output (else references stand in)")
    parser.add_argument("--captions", type=Path, help="instead of RUN: a captions JSONL/JSON keyed by item id")
    parser.add_argument("--task", required=True, help="the capjudge task (e.g. gveval, anycap_style)")
    count_argument(parser, "--limit", low=1, high=MAX_ITEMS, help="build only the first N items' requests and scale up")
    parser.add_argument("--reask-rate", type=float, default=0.0, help="expected share of replies asked again (default 0)")
    parser.add_argument("--output-tokens", type=float, default=DEFAULT_OUTPUT_TOKENS,
                        help=f"expected tokens per reply (default {DEFAULT_OUTPUT_TOKENS})")
    parser.add_argument("--price-input", type=str, help="USD per 1M input tokens")
    parser.add_argument("--price-output", type=str, help="USD per 1M output tokens")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="task folders (default: capjudge's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from capjudge.judges.client.charge import BudgetFileError
    from capjudge.judges.client.config import ConfigError
    from capjudge.judges.datasets.items import DatasetError
    from capjudge.tasks.runs.judging.estimate import estimate_task
    from capjudge.tasks.runs.judging.stage import JudgeStageError
    from capjudge.models.captions_file import CaptionsFileError

    try:
        prices = dry_run_flags.prices(args.price_input, args.price_output)
        dry_run_flags.check_reask_rate(args.reask_rate)
        dry_run_flags.check_output_tokens(args.output_tokens)
        estimate = estimate_task(args.task, args.include_path, args.run, args.captions, limit=args.limit,
                                 reask_rate=args.reask_rate, output_tokens=args.output_tokens, prices=prices)
    except (EstimateError, JudgeStageError, ConfigError, DatasetError, CaptionsFileError, BudgetFileError) as error:
        print(f"capjudge estimate: {error}", file=sys.stderr)
        return 2
    print("\n".join(estimate.lines()))
    return 0

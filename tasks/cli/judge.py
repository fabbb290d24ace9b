"""`capjudge judge`: judging as its own stage, outside lmms-eval's process_results.

The parser only: the flags become a `CaptionSource`, `BatchOptions` and a process count, and the stage
(capjudge.tasks.runs.judging.stage, with batch_stage and processes) does the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.cli.batch_flags import add_batch_arguments, batch_options
from capjudge.tasks.cli.bounds import MAX_PROCESSES, count_argument


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "judge", help="judge captions that already exist (an lmms-eval --predict_only output, or a captions file)",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("run", nargs="?", type=Path, help="an lmms-eval output folder or *_results.json with samples")
    parser.add_argument("--captions", type=Path, help="instead of RUN: a captions JSONL/JSON keyed by item id")
    parser.add_argument("--model-name", help="the output run's name (default: the run's, or the captions file stem)")
    parser.add_argument("--task", required=True, help="the capjudge task to judge with (e.g. gveval, anycap_style)")
    parser.add_argument("--out", type=folder_argument, required=True, help="output folder (a subfolder per model is made)")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="task folders (default: capjudge's)")
    count_argument(parser, "--processes", low=1, high=MAX_PROCESSES, default=None,
                   help="judging processes on this machine (default: one per 32 requests in flight "
                             "(CAPJUDGE_MAX_CONCURRENCY), at most one per core and one per 200 items; "
                             "see capjudge.tasks.runs.judging.processes)")
    add_batch_arguments(parser, "the items")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `capjudge --help` should not load the client machinery and lmms-eval.
    from capjudge.judges.client.config import ConfigError
    from capjudge.judges.run_outcome import EXIT_STATUS, failure_rate_problem
    from capjudge.judges.datasets.items import DatasetError
    from capjudge.tasks.runs.judging.batch_stage import BatchStageError
    from capjudge.tasks.runs.judging.stage import JudgeStageError, caption_source, judge_stage
    from capjudge.models.captions_file import CaptionsFileError

    try:
        batch = batch_options(args)
    except ValueError as error:
        print(f"capjudge judge: {error}", file=sys.stderr)
        return 2
    if args.processes is not None and (args.processes < 1 or (args.batch and args.processes > 1)):
        print(f"capjudge judge: --processes {args.processes}: give a number >= 1 (and 1 with --batch, whose "
              "replies come from the Batch API)", file=sys.stderr)
        return 2
    try:
        source = caption_source(args.run, args.captions, args.task, args.model_name)
        outcome = judge_stage(source, args.task, args.out, args.include_path, batch, processes=args.processes)
    except (JudgeStageError, ConfigError, DatasetError, CaptionsFileError, BatchStageError) as error:
        print(f"capjudge judge: {error}", file=sys.stderr)
        return 2
    if outcome.results_path is None:
        print(f"capjudge judge: {outcome.open_batches} batch(es) still running; run the same command again to "
              "collect them (nothing is submitted twice)")
        return 0
    for report in outcome.workers:
        print(f"capjudge judge: process {report.index + 1}/{len(outcome.workers)} (pid {report.pid}): {report.items} "
              f"items, {report.failed} failed, {report.requests} requests", file=sys.stderr)
    failed, total = outcome.failed, outcome.total
    print(f"capjudge judge: {total - failed} of {total} items judged; wrote {outcome.results_path}")
    problem = failure_rate_problem(failed, total)
    if problem is not None:
        print(f"capjudge judge: {problem}", file=sys.stderr)
        return EXIT_STATUS
    return 0

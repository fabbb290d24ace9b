"""`capjudge judge`: judging as its own stage, outside lmms-eval's process_results.

The parser only: the flags become a `CaptionSource`, `BatchOptions` and a process count, and the stage
(capjudge.tasks.runs.judging.stage, with batch_stage and processes) does the rest.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.cli.bounds import MAX_BATCH_BYTES, MAX_BATCH_REQUESTS, MAX_PROCESSES, count_argument


# Between two status checks of a batch: above 0 (0 would poll the API in a tight loop; a test's local batch
# server is polled every 0.05 s), at most an hour (batches complete within 24 h; NaN or inf would end in a
# traceback after the batches were paid for).
MIN_POLL_SECONDS = 0.01
MAX_POLL_SECONDS = 3600


def poll_seconds(text: str) -> float:
    """--poll-seconds, checked while the command line is parsed, before anything is submitted."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and MIN_POLL_SECONDS <= value <= MAX_POLL_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be from {MIN_POLL_SECONDS:g} to {MAX_POLL_SECONDS:,} seconds, got {text!r}")
    return value


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
    batch = parser.add_argument_group("Batch API (OpenAI / Azure OpenAI): half the price, replies within 24 h")
    batch.add_argument("--batch", action="store_true", help="judge through the Batch API; rerun the same command to re-attach")
    batch.add_argument("--no-wait", action="store_true", help="submit (or check) and exit; rerun later to collect")
    batch.add_argument("--poll-seconds", type=poll_seconds, default=60.0,
                       help=f"seconds between status checks (default 60; allowed {MIN_POLL_SECONDS:g} to {MAX_POLL_SECONDS:,})")
    batch.add_argument("--retry-online", action="store_true",
                       help="ask what the batch left (unparsable replies, failed lines) online instead of in another batch")
    count_argument(parser, "--batch-max-requests", group=batch, low=1, high=MAX_BATCH_REQUESTS, default=MAX_BATCH_REQUESTS,
                   help="requests per input file (default: the API's limit)")
    count_argument(parser, "--batch-max-bytes", group=batch, low=1, high=MAX_BATCH_BYTES, default=MAX_BATCH_BYTES,
                   help="bytes per input file (default: the API's limit, 200 MB)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `capjudge --help` should not load the client machinery and lmms-eval.
    from capjudge.judges.client.config import ConfigError
    from capjudge.tasks.run_outcome import EXIT_STATUS, failure_rate_problem
    from capjudge.judges.datasets.items import DatasetError
    from capjudge.tasks.runs.judging.batch_stage import BatchOptions, BatchStageError
    from capjudge.tasks.runs.judging.stage import JudgeStageError, caption_source, judge_stage
    from capjudge.models.captions_file import CaptionsFileError

    batch = None
    if args.batch:
        from capjudge.judges.client.batch import BatchLimits

        batch = BatchOptions(wait=not args.no_wait, poll_seconds=args.poll_seconds, retry_online=args.retry_online,
                             limits=BatchLimits(args.batch_max_requests, args.batch_max_bytes))
    elif args.no_wait or args.retry_online:
        print("capjudge judge: --no-wait and --retry-online go with --batch", file=sys.stderr)
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

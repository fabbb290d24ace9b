"""The Batch API flags of the commands that can judge through it (`capjudge judge`, `capjudge arena`): one
definition, one check, so both take the same flags with the same bounds and the same messages.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from capjudge.tasks.cli.bounds import MAX_BATCH_BYTES, MAX_BATCH_REQUESTS, count_argument

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


def add_batch_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--batch and its companions; `what` is what the command judges (for --batch's help)."""
    batch = parser.add_argument_group("Batch API (OpenAI / Azure OpenAI): half the price, replies within 24 h")
    batch.add_argument("--batch", action="store_true",
                       help=f"judge {what} through the Batch API; rerun the same command to re-attach")
    batch.add_argument("--no-wait", action="store_true", help="submit (or check) and exit; rerun later to collect")
    batch.add_argument("--poll-seconds", type=poll_seconds, default=60.0,
                       help=f"seconds between status checks (default 60; allowed {MIN_POLL_SECONDS:g} to {MAX_POLL_SECONDS:,})")
    batch.add_argument("--retry-online", action="store_true",
                       help="ask what the batch left (unparsable replies, failed lines) online instead of in another batch")
    count_argument(parser, "--batch-max-requests", group=batch, low=1, high=MAX_BATCH_REQUESTS, default=MAX_BATCH_REQUESTS,
                   help="requests per input file (default: the API's limit)")
    count_argument(parser, "--batch-max-bytes", group=batch, low=1, high=MAX_BATCH_BYTES, default=MAX_BATCH_BYTES,
                   help="bytes per input file (default: the API's limit, 200 MB)")


def batch_options(args: argparse.Namespace) -> Any:
    """The flags as `BatchOptions`, None without --batch; a ValueError (the message for the user) when a
    companion flag is given without --batch."""
    if not args.batch:
        if args.no_wait or args.retry_online:
            raise ValueError("--no-wait and --retry-online go with --batch")
        return None
    from capjudge.judges.client.batch import BatchLimits
    from capjudge.tasks.runs.judging.batch_stage import BatchOptions

    return BatchOptions(wait=not args.no_wait, poll_seconds=args.poll_seconds, retry_online=args.retry_online,
                        limits=BatchLimits(args.batch_max_requests, args.batch_max_bytes))

"""The pricing flags of the commands that can price themselves before judging (`capjudge sensitivity --dry-run`,
`capjudge arena --dry-run`; `capjudge estimate` reads the same --price-* pair): one definition, one check, the
same messages.
"""

from __future__ import annotations

import argparse
import math

from capjudge.tasks.runs.judging.estimate import DEFAULT_OUTPUT_TOKENS, EstimateError

# Upper bounds far above any real value: a price or token count beyond them is a typo (1e300 priced to $inf,
# and printed infinite tokens, or JSON with Infinity in it), refused before anything is read.
MAX_PRICE = 100_000  # USD per 1M tokens
MAX_OUTPUT_TOKENS = 1_000_000  # tokens per reply
MAX_REASK_RATE = 10  # replies asked again per reply


def add_dry_run_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--dry-run, --price-input/--price-output and --output-tokens; `what` is what the dry run lists."""
    dry = parser.add_argument_group("Before a run: what it asks and costs (nothing is sent)")
    dry.add_argument("--dry-run", action="store_true", help=f"print the {what}, requests, tokens and cost; judge nothing")
    dry.add_argument("--price-input", type=str, help="USD per 1M input tokens")
    dry.add_argument("--price-output", type=str, help="USD per 1M output tokens")
    dry.add_argument("--output-tokens", type=float, default=DEFAULT_OUTPUT_TOKENS,
                     help=f"expected tokens per reply (default {DEFAULT_OUTPUT_TOKENS})")


def prices(price_input: str | None, price_output: str | None) -> tuple[float, float] | None:
    """(input, output) USD per 1M tokens, both or neither; anything else is an EstimateError naming the flag."""
    if (price_input is None) != (price_output is None):
        raise EstimateError("give both --price-input and --price-output (USD per 1M tokens), or neither")
    if price_input is None:
        return None
    values = []
    for name, text in (("--price-input", price_input), ("--price-output", price_output)):
        try:
            value = float(text)  # type: ignore[arg-type]
        except ValueError:
            raise EstimateError(f"{name} must be a number of USD per 1M tokens, got {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise EstimateError(f"{name} must be a non-negative number, got {text!r}")
        if value > MAX_PRICE:
            raise EstimateError(f"{name} {text}: at most {MAX_PRICE:,} USD per 1M tokens")
        values.append(value)
    return values[0], values[1]


def dry_run_prices(args: argparse.Namespace) -> tuple[float, float] | None:
    """With --dry-run: the prices, and --output-tokens checked (an EstimateError naming the flag). Without it,
    --price-* are a mistake (nothing would be priced): an EstimateError too."""
    if not args.dry_run:
        if args.price_input or args.price_output:
            raise EstimateError("--price-input and --price-output go with --dry-run")
        return None
    given = prices(args.price_input, args.price_output)
    check_output_tokens(args.output_tokens)
    return given


def check_output_tokens(value: float) -> None:
    """--output-tokens: a number from 0 to MAX_OUTPUT_TOKENS; an EstimateError naming the flag otherwise."""
    if not math.isfinite(value) or value < 0:
        raise EstimateError(f"--output-tokens must be a number >= 0, got {value}")
    if value > MAX_OUTPUT_TOKENS:
        raise EstimateError(f"--output-tokens {value:g}: at most {MAX_OUTPUT_TOKENS:,} tokens per reply")


def check_reask_rate(value: float) -> None:
    """--reask-rate: a number from 0 to MAX_REASK_RATE; an EstimateError naming the flag otherwise."""
    if not math.isfinite(value) or not 0 <= value <= MAX_REASK_RATE:
        raise EstimateError(f"--reask-rate must be a number from 0 to {MAX_REASK_RATE}, got {value}")

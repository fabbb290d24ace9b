"""The bounds of every number a user gives `capjudge` as a count (resamples, permutations, processes, items, tokens,
seeds, ports): one place, shared by every command.

Why: an unbounded count is a request for unbounded work. `capjudge vatex --resamples 10000000` once ran for
minutes and ended in a MemoryError traceback; on 8 clips it ran with no sign of progress until killed. Each
bound below is far above any useful value and low enough that the work it allows finishes on one machine. The
bounds are checked right after the command line is parsed, before any file is read (`count_problem`, called by
`capjudge.tasks.cli.main.main`): a value outside them is one line naming the flag, the value and the bound,
exit 2. Each flag's --help states its bound.

A command adds such a flag with `count_argument` (instead of `add_argument(..., type=int)`), or, for a flag
another layer defines (serve-local's, from capjudge.judges.local.llama_server), records it with `bound_flag`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# Bootstrap resamples (vatex, correlate --bootstrap, leaderboard, reliability, agreement): 10,000 is where
# the usual advice for BCa intervals stops. Memory and time grow with resamples x items: an item bootstrap
# draws a (resamples, items) index matrix at once, 8 bytes each, so 100,000 resamples of a VATEX-sized run's
# 18,000 items (reliability, agreement, correlate) would be 14.4 GB before any statistic. Measured here,
# `capjudge vatex` on the full VATEX-EVAL file (3,000 clips, no scorer) at 10,000 resamples: 790 MB peak,
# 264 s (2,000: 600 MB, 43 s).
MAX_RESAMPLES = 10_000
# Permutation-test budget of the leaderboard's paired tests (default 9,999, p resolved to 1e-4). scipy draws
# them all at once: permutations x items x 8 bytes, 1.4 GB for 18,000 items at this bound.
MAX_PERMUTATIONS = 10_000
# Seeds are recorded with every interval so a run can be repeated; 32 bits is what every numpy seeding
# interface (legacy RandomState included) accepts, so a recorded seed can always be used again.
MAX_SEED = 2**32 - 1
# Judging processes on one machine: each holds a judge client and lmms-eval's task (hundreds of MB); more than
# this only adds memory, as the rate budget (CAPJUDGE_MAX_CONCURRENCY) is shared among them anyway.
MAX_PROCESSES = 64
# --limit (items per task): more than any task holds (VATEX-EVAL: 18,000 candidates), so it never cuts a real
# task short; a larger number is a typo.
MAX_ITEMS = 1_000_000
# --pairs-per-clip (capjudge vatex): a VATEX-EVAL clip has 6 rated candidates, so 15 pairs; more is a typo.
MAX_PAIRS_PER_CLIP = 15
# --human-index: an element of each annotator's list (MSVD-Eval's has 5); negative counts from the end.
MAX_HUMAN_INDEX = 1_000
# A rendered request's max_tokens: above any model's context length.
MAX_REPLY_TOKENS = 1_000_000
# The OpenAI Batch API's own limits per input file (the defaults): more is refused by the API after upload.
MAX_BATCH_REQUESTS = 50_000
MAX_BATCH_BYTES = 200_000_000
# The embedded judge (serve-local): a TCP port; a context its KV cache can hold in memory (no judge prompt
# needs a tenth of it); threads (a CPU's cores, generously); a process id (Linux's PID_MAX_LIMIT).
MAX_PORT = 65_535
MAX_CONTEXT_TOKENS = 131_072
MAX_THREADS = 512
MAX_PID = 4_194_304

_BOUNDS_DEFAULT = "_count_bounds"  # where a parser keeps its bounded flags (a parser default, never a flag)


@dataclass(frozen=True)
class CountBound:
    """A flag's allowed range, inclusive, and the command it belongs to (for the one-line message)."""

    command: str
    flag: str
    dest: str
    low: int
    high: int

    def problem(self, value: int | list[int] | None) -> str | None:
        # None: not given and no default; a list: a repeatable flag (action="append"), each value checked.
        for each in value if isinstance(value, list) else ([] if value is None else [value]):
            if each > self.high:
                return f"{self.flag} {each}: more than {self.high:,}, the most capjudge allows (see {self.command} --help)"
            if each < self.low:
                return f"{self.flag} must be {self.low:,} or more, got {each}"
        return None


def count_argument(parser: argparse.ArgumentParser, flag: str, *, low: int, high: int, help: str = "",
                   group: argparse._ArgumentGroup | None = None, **options) -> argparse.Action:
    """`parser.add_argument(flag, type=int, ...)` (in `group` of it, if given) with its range stated in its
    --help and recorded on `parser` for `count_problem`."""
    action = (group or parser).add_argument(flag, type=int, help=help, **options)
    _record(parser, action, flag, low, high)
    return action


def bound_flag(parser: argparse.ArgumentParser, flag: str, *, low: int, high: int) -> None:
    """Bound an integer flag that is already on `parser` (added by another layer's add_arguments)."""
    action = next(action for action in parser._actions if flag in action.option_strings)
    _record(parser, action, flag, low, high)


def _record(parser: argparse.ArgumentParser, action: argparse.Action, flag: str, low: int, high: int) -> None:
    action.help = _with_range(action.help or "", low, high)
    bounds = parser.get_default(_BOUNDS_DEFAULT) or ()
    parser.set_defaults(**{_BOUNDS_DEFAULT: (*bounds, CountBound(parser.prog, flag, action.dest, low, high))})


def _with_range(help: str, low: int, high: int) -> str:
    """The help with "allowed LOW to HIGH" added inside its closing parenthesis, or in one of its own."""
    allowed = f"allowed {low:,} to {high:,}"  # no percent sign: argparse formats help with %
    if help.endswith(")"):
        return f"{help[:-1]}; {allowed})"
    return f"{help} ({allowed})".lstrip()


def count_problem(args: argparse.Namespace) -> str | None:
    """The first bounded flag of the parsed command outside its bounds, as one line
    ("capjudge vatex: --resamples 10000000: more than the bound 100,000 ..."); None when all are inside."""
    for bound in getattr(args, _BOUNDS_DEFAULT, None) or ():
        problem = bound.problem(getattr(args, bound.dest, None))
        if problem:
            return f"{bound.command}: {problem}"
    return None

"""`capjudge sensitivity`: what fools the configured judge. Judges a task's captions and controlled perturbations
of them (padding, hallucination, truncation, shuffle, mismatch) and reports, per perturbation and score, the
mean paired shift with a clip-bootstrap CI, the share of items moved the sound way, and a verdict.

    capjudge sensitivity --task gveval_demo --captions tasks/demo/captions_good.jsonl --out results/sensitivity
    capjudge sensitivity --task gveval_references --candidates --limit 30 --out results/sensitivity   # MSVD-Eval's
    capjudge sensitivity ... --dry-run --price-input 2.50 --price-output 10.00   # judgments, tokens, cost; sends nothing

The parser only: the run is capjudge.tasks.runs.sensitivity.run, the judging capjudge.tasks.runs.sensitivity.judging
(through the task's own judge_all: the same client, cache, budget and panel as `capjudge judge`), the statistics
capjudge.metrics.sensitivity.
Writes OUT/sensitivity_<task>.json (every text the judge saw, both judgments per pair with the replies, every
shift), OUT/sensitivity_<task>.png (the shifts with their CIs) and OUT/sensitivity_<task>.html (per item, the
original and each perturbed caption side by side with every judgment and shift, wrong-way moves marked; read
back from the JSON, as `capjudge report --sensitivity FILE` renders it); prints the table (or `--format json`:
the same without the items). The three names are checked before the first judgment (a folder, a link, or
a file another command or run wrote is refused: `capjudge.metrics.sensitivity.outputs`); a rerun of the same
command replaces its own. Exit status: 2 bad input, 3 above CAPJUDGE_MAX_FAILURE_RATE unjudged (the files are
written first).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.cli.bounds import MAX_ITEMS, MAX_RESAMPLES, MAX_SEED, count_argument
from capjudge.tasks.cli.dry_run_flags import add_dry_run_arguments, dry_run_prices
from capjudge.tasks.runs.sensitivity.run import DEFAULT_RESAMPLES, MIN_RESAMPLES, SensitivityRun


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "sensitivity", help="what fools the judge: judge captions and controlled perturbations, report the shifts",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path, help="an lmms-eval output folder or *_results.json with samples")
    parser.add_argument("--captions", type=Path, help="instead of RUN: a captions JSONL/JSON keyed by item id")
    parser.add_argument("--candidates", action="store_true",
                        help="instead of RUN: the task's own rated candidates (MSVD-Eval, VATEX-EVAL)")
    parser.add_argument("--task", required=True, help="the capjudge task whose items and judge to use")
    parser.add_argument("--out", type=folder_argument,
                        help="output folder for sensitivity_<task>.json (not needed with --dry-run)")
    parser.add_argument("--perturbation", action="append", metavar="NAME",
                        help="a perturbation to apply (repeatable; default: every one)")
    count_argument(parser, "--limit", low=1, high=MAX_ITEMS, help="only the first N items, in the task's order")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0,
                   help="seed of the perturbations and of the resamples (default 0)")
    count_argument(parser, "--resamples", low=MIN_RESAMPLES, high=MAX_RESAMPLES, default=DEFAULT_RESAMPLES,
                   help=f"clip-bootstrap resamples per CI (default {DEFAULT_RESAMPLES})")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="what to print (default table)")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="task folders (default: capjudge's)")
    add_dry_run_arguments(parser, "judgments")
    parser.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    """The command as it can be typed again (what the report records)."""
    words = ["capjudge", "sensitivity", *([str(args.run)] if args.run else [])]
    words += ["--task", args.task]
    if args.captions:
        words += ["--captions", str(args.captions)]
    if args.candidates:
        words.append("--candidates")
    if args.out:
        words += ["--out", str(args.out)]
    for name in args.perturbation or ():
        words += ["--perturbation", name]
    if args.limit:
        words += ["--limit", str(args.limit)]
    words += ["--seed", str(args.seed), "--resamples", str(args.resamples)]
    if args.include_path != TASKS_DIR:
        words += ["--include-path", str(args.include_path)]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    # Imported here: `capjudge --help` should not load the client machinery and lmms-eval.
    from capjudge.judges.client.charge import BudgetFileError
    from capjudge.judges.client.config import ConfigError
    from capjudge.metrics.files.outputs import OutputError, writable_folder
    from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, PerturbationError, perturbation_named
    from capjudge.models.captions_file import CaptionsFileError
    from capjudge.tasks.harness.sources import DatasetError
    from capjudge.tasks.runs.judging.estimate import EstimateError
    from capjudge.tasks.runs.judging.stage import JudgeStageError
    from capjudge.tasks.runs.sensitivity.judging import SensitivityError
    from capjudge.tasks.runs.sensitivity.run import dry_run, judge_into

    try:
        names = args.perturbation or [p.name for p in PERTURBATIONS]
        if len(set(names)) != len(names):
            raise SensitivityError(f"--perturbation: {sorted(n for n in names if names.count(n) > 1)[0]!r} given twice")
        try:
            perturbations = [perturbation_named(name) for name in names]
        except PerturbationError as error:
            raise SensitivityError(f"--perturbation: {error}") from None
        prices = dry_run_prices(args)
        if args.dry_run:
            return dry_run(_run_options(args), perturbations, prices, args.output_tokens)
        if args.out is None:
            raise SensitivityError("--out is required: the report (every text the judge saw) is written there")
        out = writable_folder(args.out)
        return judge_into(_run_options(args), perturbations, out)
    except (SensitivityError, PerturbationError, JudgeStageError, ConfigError, DatasetError, CaptionsFileError,
            OutputError, EstimateError, BudgetFileError) as error:
        print(f"capjudge sensitivity: {error}", file=sys.stderr)
        return 2


def _run_options(args: argparse.Namespace) -> SensitivityRun:
    return SensitivityRun(task=args.task, include_path=args.include_path, run=args.run, captions=args.captions,
                          candidates=args.candidates, limit=args.limit, seed=args.seed, resamples=args.resamples,
                          output_format=args.format, command=command_line(args))

"""`capjudge vatex VATEX_FILE [SCORER]`: a scorer's VATEX-EVAL correlation under both published protocols.

    capjudge vatex ../shared/data/vatex_eval/vid_cans_score_dict.json results/ [--metric gveval_mean]
    capjudge vatex vid_cans_score_dict.json scores.jsonl --format json
    capjudge vatex vid_cans_score_dict.json [SCORER] --baselines [--cache-dir DIR]

SCORER is a run folder (or results JSON) of a VATEX task (gveval_vatex_references, gveval_vatex, ...), or a JSONL
of {"clip_id": ..., "candidate_index": ..., "score": ...}. Without it, caption length and the human ceiling
only. Printed: EMScore's per-annotator protocol (tau-b, Spearman), G-VEval's pooled protocol (tau-b, tau-c), the
mean-rating variant, caption length as a sanity row and the human ceiling, each with a bootstrap interval
clustered by clip (metrics/human_correlation/vatex_report.py); then agreement with the humans' preferences on
the same-clip pairs the raters do not tie: each scorer's concordance beside the raters' leave-one-out ceiling
(metrics/human_correlation/vatex_preferences.py; --pairs-per-clip K bounds the pairs; --arena-verdicts FILE adds
a pairwise judge's row from `capjudge arena --candidates`' verdict file, on the same pairs). --baselines adds BLEU-1, BLEU-4, METEOR, ROUGE-L
and CIDEr with 1 and with 9 references (pycocoevalcap, as the field computes them), computed once per content
and cached in --cache-dir (metrics/human_correlation/baseline_cache.py). Exit codes: 0 success; 1 the
baselines cannot be computed here (pycocoevalcap or Java missing); 2 bad input, in one line naming the file
(and line or item) or flag and the problem.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.tasks.cli.bounds import MAX_PAIRS_PER_CLIP, MAX_RESAMPLES, MAX_SEED, count_argument

EXIT_UNAVAILABLE = 1
EXIT_BAD_INPUT = 2


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "vatex", help="VATEX-EVAL correlation: EMScore's and G-VEval's protocols, clip-clustered CIs, human ceiling",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, metavar="VATEX_FILE", help="VATEX-EVAL's vid_cans_score_dict.json")
    parser.add_argument("scorer", type=Path, nargs="?", metavar="SCORER",
                        help="a VATEX task's run folder, or a JSONL of {clip_id, candidate_index, score}")
    parser.add_argument("--metric", default="gveval_mean", help="with a run: the per-item metric (default gveval_mean)")
    parser.add_argument("--task", help="with a run holding several VATEX tasks: which one")
    count_argument(parser, "--resamples", low=0, high=MAX_RESAMPLES, default=1000,
                   help="clip-clustered bootstrap resamples (0: no CIs; default 1000)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0, help="the resamples' seed (default 0)")
    count_argument(parser, "--pairs-per-clip", low=1, high=MAX_PAIRS_PER_CLIP, default=None, metavar="K",
                   help="the human-preference table on at most K of each clip's preferred pairs, drawn with --seed "
                        "(default: all)")
    parser.add_argument("--arena-verdicts", type=Path, metavar="FILE",
                        help="a pairwise judge's row in the human-preference table: the arena_<task>.jsonl of "
                             "`capjudge arena --candidates` on this file's candidates (same --pairs-per-clip, --seed)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--baselines", action="store_true",
                        help="add BLEU-1/4, METEOR, ROUGE-L, CIDEr with 1 and 9 references (cached by content)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where --baselines caches its scores (default ~/.cache/capjudge/baselines)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from capjudge.judges.pairwise.record import ArenaFileError
    from capjudge.metrics.arena.errors import ArenaError
    from capjudge.metrics.human_correlation.vatex_arena import VatexArenaError, read_vatex_arena_verdicts
    from capjudge.metrics.files.outputs import OutputError
    from capjudge.metrics.human_correlation.baselines import BaselineUnavailable
    from capjudge.metrics.human_correlation.baseline_cache import DEFAULT_CACHE_DIR
    from capjudge.metrics.human_correlation.vatex_baselines import baseline_scorers
    from capjudge.judges.datasets.vatex_eval import VatexEvalError, load_vatex_eval
    from capjudge.metrics.human_correlation.vatex_report import (
        VatexReportError, build_vatex_report, read_scorer, vatex_report_to_json, report_to_table,
    )
    from capjudge.metrics.statistics.correlation import BootstrapSettings

    if args.cache_dir is not None and not args.baselines:
        print("capjudge vatex: --cache-dir applies to --baselines", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if not args.data.is_file():
            raise VatexReportError(f"{args.data}: no such file")
        candidates = load_vatex_eval(args.data)
        scorer = read_scorer(args.scorer, candidates, metric=args.metric, task=args.task) if args.scorer else None
        arena = (read_vatex_arena_verdicts(args.arena_verdicts, candidates, str(args.data))
                 if args.arena_verdicts is not None else None)
        baselines = (baseline_scorers(candidates, args.cache_dir or DEFAULT_CACHE_DIR, str(args.data), say=_say)
                     if args.baselines else [])
        report = build_vatex_report(args.data, candidates, scorer, BootstrapSettings(n_resamples=args.resamples, seed=args.seed),
                              baselines, pairs_per_clip=args.pairs_per_clip, arena=arena)
    except VatexEvalError as error:  # names the clip; the file is named here when the message does not
        message = str(error)
        print(f"capjudge vatex: {message if message.startswith(str(args.data)) else f'{args.data}: {message}'}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except (VatexReportError, OutputError, ArenaError, ArenaFileError, VatexArenaError) as error:
        print(f"capjudge vatex: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BaselineUnavailable as error:
        print(f"capjudge vatex: baselines unavailable: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    sys.stdout.write(vatex_report_to_json(report) + "\n" if args.format == "json" else report_to_table(report))
    return 0


def _say(line: str) -> None:
    """Progress and cache notes go to stderr: stdout is the report (JSON with --format json)."""
    print(f"capjudge vatex: {line}", file=sys.stderr, flush=True)

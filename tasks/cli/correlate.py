"""`capjudge correlate`: judge-human correlation tables from a JSONL file or from MSVD-Eval.

    capjudge correlate FILE.jsonl --judge FIELD [--judge FIELD ...] --human FIELD [--human-index K ...]
                       [--annotators expand|mean] [--group-by FIELD] [--bootstrap N] [--seed S] [--format json|markdown]
    capjudge correlate --msvd-eval PATH [--judge-scores FILE] [--run RUN [--task T]] [--baselines [--cache-dir DIR]] [...]
    (--run: a judged run's scores; a panel run gives the panel and each member as scorers)
    (--baselines are computed once per content and cached: capjudge.metrics.human_correlation.baseline_cache)
    either form: [--plot DIR]  scatter plots, a tau-b chart (PNG) and correlation.html showing them

Heavy imports (numpy, scipy, pycocoevalcap) happen inside the handler so that other subcommands start fast.
Exit codes: 0 success; 2 bad input, in one line naming the flag, or the file, line and field: wrong arguments,
data that cannot be used (a score that is not a finite number of plausible size, a --judge or --human field
no line has), an --output or --plot path that cannot be written; 1 the classic baselines cannot run here.
--output and --plot create missing folders; the report is written whole or not at all.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.atomic_files import write_replacing
from capjudge.judges.jsonl import numbered_objects
from capjudge.tasks.cli.bounds import MAX_HUMAN_INDEX, MAX_RESAMPLES, MAX_SEED, count_argument

EXIT_OK, EXIT_UNAVAILABLE, EXIT_BAD_INPUT = 0, 1, 2


class CorrelateInputError(ValueError):
    """The input file cannot be used as asked; the message names the file and line."""


@dataclass(frozen=True)
class ScoredItems:
    """What is correlated: per-item scores of each scorer and each human target, before any pairing."""

    scorers: dict[str, Any]
    targets: dict[str, Any]
    item_ids: list[str]
    judges: list[str]  # the scorers under study; the others are classic baselines
    groups: list[str] | None = None
    comparisons: Sequence[tuple[str, str]] = ()


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "correlate",
        help="judge-human correlation (Kendall tau-b/c, Pearson, Spearman) with bootstrap CIs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", metavar="FILE.jsonl", help="one JSON object per line")
    parser.add_argument("--judge", action="append", default=[], metavar="FIELD",
                        help="field holding a scorer's score (repeatable); with --judge-scores, restricts its fields")
    parser.add_argument("--human", metavar="FIELD",
                        help="field holding the human score: a number, a list of annotators' numbers, "
                             "or a list of per-annotator lists (then give --human-index)")
    count_argument(parser, "--human-index", low=-MAX_HUMAN_INDEX, high=MAX_HUMAN_INDEX, action="append", metavar="K",
                   help="element of each annotator's list to use (repeatable: one target per index)")
    parser.add_argument("--annotators", choices=("expand", "mean"), default="expand",
                        help="expand: one pair per annotator (G-VEval protocol, default); mean: average per item")
    parser.add_argument("--group-by", metavar="FIELD", help="also report within each value of this field")
    count_argument(parser, "--bootstrap", low=0, high=MAX_RESAMPLES, default=1000, metavar="N",
                   help="item resamples (0: no bootstrap; default 1000)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0, metavar="S", help="the resamples' seed (default 0)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--ci-method", choices=("bca", "percentile"), default="bca")
    parser.add_argument("--format", choices=("json", "markdown"), default="markdown")
    parser.add_argument("--msvd-eval", metavar="PATH", help="G-VEval's MSVD-Eval.json (targets: mean and each ACCR dimension)")
    parser.add_argument("--judge-scores", metavar="FILE", help='with --msvd-eval: JSONL of {"id": ..., "<field>": score}')
    parser.add_argument("--run", metavar="RUN", type=Path,
                        help="with --msvd-eval: a judged run (folder or *_results.json); its judge's main score "
                             "(e.g. gveval_mean) is a scorer against every human target, or for a panel run the "
                             "panel's and each member's")
    parser.add_argument("--task", help="with --run: the run's task (default gveval)")
    parser.add_argument("--baselines", action="store_true", help="with --msvd-eval: BLEU-1/4, METEOR, ROUGE-L, CIDEr")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where --baselines caches its scores, by content (default ~/.cache/capjudge/baselines)")
    parser.add_argument("--compare", action="store_true",
                        help="paired differences (bootstrap CI, Williams' test) between the scorers")
    parser.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    parser.add_argument("--plot", metavar="DIR",
                        help="also write judge-vs-human scatter plots, a tau-b chart (PNG) and correlation.html here")
    parser.set_defaults(func=handle_correlate)


def handle_correlate(args: argparse.Namespace) -> int:
    usage_problem = _usage_problem(args)
    if usage_problem:
        print(f"capjudge correlate: {usage_problem}", file=sys.stderr)
        return EXIT_BAD_INPUT

    from capjudge.metrics.human_correlation.baselines import BaselineUnavailable
    from capjudge.metrics.statistics.correlation import BootstrapSettings, HumanScoreError
    from capjudge.judges.datasets.msvd_eval import MsvdEvalError
    from capjudge.metrics.human_correlation.correlation_report import build_report, report_to_json, report_to_markdown

    # Before the work, which can take a while, so an unusable --output or --plot fails at once.
    try:
        if args.output:
            prepare_output_file(args.output)
        if args.plot:
            from capjudge.metrics.human_correlation.plots import prepare_plot_dir

            prepare_plot_dir(args.plot)
    except (CorrelateInputError, OSError) as error:
        print(f"capjudge correlate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

    settings = BootstrapSettings(n_resamples=args.bootstrap, seed=args.seed, confidence=args.confidence, ci_method=args.ci_method)
    try:
        if args.msvd_eval:
            scored, title = _msvd_items(args), "Correlation with MSVD-Eval human judgements"
        else:
            scored, title = _jsonl_items(args), f"Correlation with human scores in {args.file}"
        report = build_report(
            scored.scorers, scored.targets, groups=scored.groups, group_field=args.group_by,
            annotators=args.annotators, settings=settings, item_ids=scored.item_ids, comparisons=scored.comparisons,
        )
    except (CorrelateInputError, HumanScoreError, MsvdEvalError, OSError, ValueError) as error:
        print(f"capjudge correlate: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BaselineUnavailable as error:
        print(f"capjudge correlate: baselines unavailable: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    for judge in scored.judges:
        if all(score is None for score in scored.scorers[judge]):
            print(f"capjudge correlate: --judge {judge}: no item has a score (all null or NaN), so its coefficients "
                  "are undefined", file=sys.stderr)

    if args.format == "json":
        text = json.dumps(report_to_json(report), indent=2, allow_nan=False) + "\n"
    else:
        text = report_to_markdown(report, title)
    if args.output:
        try:
            write_replacing(Path(args.output), text)  # whole or not at all, with the umask's mode
        except OSError as error:
            print(f"capjudge correlate: --output {args.output}: cannot write it ({error.strerror or error})",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        sys.stdout.write(text)
    if args.plot:
        return _write_plots(args.plot, report, scored, title)
    return EXIT_OK


def prepare_output_file(path: str | Path) -> Path:
    """Create --output's folder (as lmms-eval does its output folders) and prove a file can be written there;
    a path that is a folder, or under a file, is a CorrelateInputError naming it."""
    target = Path(path)
    if target.is_dir():
        raise CorrelateInputError(f"--output {path}: is a folder; give a file name")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as error:
        raise CorrelateInputError(f"--output {path}: cannot write there ({error.strerror or error})") from None
    return target


def _write_plots(directory: str, report: Any, scored: ScoredItems, title: str) -> int:
    from capjudge.metrics.human_correlation.plots import write_plots

    try:
        files = write_plots(directory, report, scorers=scored.scorers, targets=scored.targets, judges=scored.judges,
                            item_ids=scored.item_ids, title=title)
    except OSError as error:
        print(f"capjudge correlate: --plot {directory}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in files.notes:
        print(f"capjudge correlate: {note}", file=sys.stderr)
    print(f"capjudge correlate: plots in {files.html}", file=sys.stderr)
    return EXIT_OK


def _usage_problem(args: argparse.Namespace) -> str | None:
    if not 0 < args.confidence < 1:
        return "--confidence must be between 0 and 1"
    if args.msvd_eval:
        if args.file:
            return "give either FILE.jsonl or --msvd-eval, not both"
        if not (args.baselines or args.judge_scores or args.run):
            return "--msvd-eval needs --baselines, --judge-scores FILE and/or --run RUN"
        if args.task is not None and args.run is None:
            return "--task applies to --run"
        if args.judge and not args.judge_scores:
            # Ignored before: a --run's scorer is its judge's main score, whatever --judge said.
            return ("--judge selects fields of --judge-scores FILE (or of FILE.jsonl); a --run's scorer is its "
                    "judge's main score (e.g. gveval_mean) against every human target")
        if args.group_by or args.human or args.human_index:
            return "--group-by, --human and --human-index apply to FILE.jsonl, not --msvd-eval"
        if args.cache_dir is not None and not args.baselines:
            return "--cache-dir applies to --baselines"
        return None
    if not args.file:
        return "give FILE.jsonl (with --judge and --human) or --msvd-eval PATH"
    if not args.judge or not args.human:
        return "FILE.jsonl needs at least one --judge FIELD and a --human FIELD"
    if args.judge_scores or args.baselines or args.cache_dir is not None or args.run or args.task:
        return "--judge-scores, --run, --task, --baselines and --cache-dir apply to --msvd-eval"
    return None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Objects of a JSONL file, each with its `_line` number; anything but objects is an error."""
    # unique_keys: a line scoring one field twice ({"good": 1, "good": 5}) would be read as its last value.
    return [{**row, "_line": number} for number, row in numbered_objects(path, CorrelateInputError, unique_keys=True)]


def _number_or_none(row: dict[str, Any], field: str, where: str) -> float | None:
    """The field's score, None when missing (null, NaN or absent); a value that is no score is an error."""
    import math

    from capjudge.metrics.statistics.correlation import checked_score

    number = checked_score(row.get(field), f"{where}, field {field!r}", CorrelateInputError)
    return None if math.isnan(number) else number


def _check_fields_exist(rows: list[dict[str, Any]], fields: list[str], path: str | Path) -> None:
    """A --judge field that no line has is a misspelt flag, not a scorer without scores (null on every line)."""
    present = {key for row in rows for key in row if key != "_line"}
    for field in fields:
        if field not in present:
            known = ", ".join(sorted(present)[:12]) or "none"
            raise CorrelateInputError(f"--judge {field}: no line of {path} has the field {field!r} (fields: {known})")


def _jsonl_items(args: argparse.Namespace) -> ScoredItems:
    from capjudge.metrics.statistics.correlation import HumanScoreError, ScoreValueError, as_human_matrix

    rows = read_jsonl(args.file)
    if not rows:
        raise CorrelateInputError(f"{args.file}: no JSON objects")
    _check_fields_exist(rows, args.judge, args.file)
    ids = [str(row.get("id", f"line {row['_line']}")) for row in rows]
    wheres = [f"{args.file}, line {row['_line']}" for row in rows]
    scorers = {field: [_number_or_none(row, field, where) for row, where in zip(rows, wheres)] for field in args.judge}
    human_values = [row.get(args.human) for row in rows]
    if all(value is None for value in human_values):
        raise CorrelateInputError(f"{args.file}: no line has the human field {args.human!r}")
    try:
        if args.human_index:
            targets = {f"{args.human}[{k}]": as_human_matrix(human_values, k, wheres)[0] for k in args.human_index}
        else:
            targets = {args.human: as_human_matrix(human_values, None, wheres)[0]}
    except ScoreValueError as error:
        raise CorrelateInputError(str(error)) from None
    except HumanScoreError as error:
        hint = "" if args.human_index else " (give --human-index K for per-annotator lists)"
        raise CorrelateInputError(f"{error}{hint}") from error
    groups = None
    if args.group_by:
        groups = [str(row[args.group_by]) if row.get(args.group_by) is not None else "(missing)" for row in rows]
    return ScoredItems(
        scorers, targets, ids, judges=list(scorers), groups=groups,
        comparisons=_comparisons(list(scorers), list(scorers), args.compare),
    )


def _comparisons(firsts: list[str], all_scorers: list[str], wanted: bool) -> list[tuple[str, str]]:
    """Each of `firsts` (the judges) against every other scorer, each unordered pair once."""
    if not wanted:
        return []
    pairs: list[tuple[str, str]] = []
    for first, second in itertools.product(firsts, all_scorers):
        if first != second and (second, first) not in pairs:
            pairs.append((first, second))
    return pairs


def load_judge_scores(path: str | Path, known_ids: set[str], fields: list[str]) -> dict[str, dict[str, float | None]]:
    """field -> {item id -> score} from a JSONL of {"id": ..., "<field>": score}."""
    rows = read_jsonl(path)
    if fields:
        _check_fields_exist(rows, fields, path)
    else:
        fields = sorted({key for row in rows for key in row if key not in ("id", "_line")})
    if not fields:
        raise CorrelateInputError(f"{path}: no score fields besides 'id'")
    scores: dict[str, dict[str, float | None]] = {field: {} for field in fields}
    for row in rows:
        where = f"{path}, line {row['_line']}"
        if "id" not in row:
            raise CorrelateInputError(f"{where}: missing 'id'")
        item_id = str(row["id"])
        if item_id not in known_ids:
            raise CorrelateInputError(f"{where}: id {item_id!r} is not an item of the MSVD-Eval file")
        for field in fields:
            if item_id in scores[field]:
                raise CorrelateInputError(f"{where}: a second score for id {item_id!r}")
            scores[field][item_id] = _number_or_none(row, field, where)
    return scores


def _msvd_items(args: argparse.Namespace) -> ScoredItems:
    from capjudge.metrics.human_correlation.baseline_cache import DEFAULT_CACHE_DIR, cached_baselines
    from capjudge.judges.gveval.parser import SCORE_NAMES
    from capjudge.judges.datasets.msvd_eval import MEAN_INDEX, human_matrix, load_msvd_eval

    items = load_msvd_eval(args.msvd_eval)
    ids = [item.item_id for item in items]
    scorers: dict[str, list[float | None]] = {}
    if args.baselines:
        cached = cached_baselines(
            items, "msvd_eval_baselines", args.cache_dir or DEFAULT_CACHE_DIR, data=str(args.msvd_eval),
            say=lambda line: print(f"capjudge correlate: {line}", file=sys.stderr),
            computing=(f"computing the classic baselines over {len(items)} items (pycocoevalcap, Java: about 20 s); "
                       f"cached in {Path(args.cache_dir or DEFAULT_CACHE_DIR).expanduser()}"))
        scorers.update({name: list(values) for name, values in cached.baselines.scores.items()})
    judges: list[str] = []
    if args.judge_scores:
        for field, by_id in load_judge_scores(args.judge_scores, set(ids), args.judge).items():
            if field in scorers:
                raise CorrelateInputError(f"{args.judge_scores}: field {field!r} clashes with a baseline's name")
            scorers[field] = [by_id.get(item_id) for item_id in ids]
            judges.append(field)
    if args.run:
        from capjudge.metrics.files.run_scores import run_scores

        scored_run = run_scores(args.run, args.task or "gveval")
        known = set(ids)
        for name, by_id in scored_run.scores.items():
            unknown = next((item_id for item_id in by_id if item_id not in known), None)
            if unknown is not None:
                raise CorrelateInputError(f"{scored_run.samples}: item {unknown!r} is not an item of the MSVD-Eval file")
            if name in scorers:
                raise CorrelateInputError(f"--run {args.run}: scorer {name!r} clashes with a baseline's or a "
                                          "--judge-scores field's name")
            scorers[name] = [by_id.get(item_id) for item_id in ids]
            judges.append(name)
    # The mean (the column G-VEval's tables use) first, then the four ACCR dimensions.
    target_names = [SCORE_NAMES[MEAN_INDEX], *(d for d in SCORE_NAMES if d != SCORE_NAMES[MEAN_INDEX])]
    targets = {name: human_matrix(items, name) for name in target_names}
    return ScoredItems(scorers, targets, ids, judges=judges, comparisons=_comparisons(judges, list(scorers), args.compare))

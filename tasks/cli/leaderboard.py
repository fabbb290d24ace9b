"""`capjudge leaderboard RUN ... --out DIR`: compare models from their lmms-eval output folders."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks.cli.bounds import MAX_PERMUTATIONS, MAX_RESAMPLES, MAX_SEED, count_argument

if TYPE_CHECKING:
    from pathlib import Path


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "leaderboard",
        help="rank models from lmms-eval output folders, with bootstrap CIs and paired tests",
        description=(
            "Read lmms-eval output folders (results JSON and, from --log_samples, per-sample JSONL) of several "
            "models on the same tasks; write leaderboard.md, .csv, .html and .png, per task with a "
            "length-controlled column leaderboard_length_<task>.png, and per task with an arena (Elo ratings from "
            "the per-item battles of its main score) leaderboard_arena_<task>.png."
        ),
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN",
        help="an lmms-eval --output_path folder, a model subfolder, or a *_results.json; NAME=PATH labels the row",
    )
    parser.add_argument("--out", type=folder_argument, default="results/leaderboard", help="output folder (default: results/leaderboard)")
    parser.add_argument("--rank-by", help="metric (or task/metric) to rank by; default: the first task's main score")
    count_argument(parser, "--resamples", low=0, high=MAX_RESAMPLES, default=2000,
                   help="bootstrap resamples for CIs (default 2000)")
    count_argument(parser, "--permutations", low=1, high=MAX_PERMUTATIONS, default=9999,
                   help="permutation-test budget (default 9999)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0, help="the resamples' seed (default 0)")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm correction")
    parser.add_argument(
        "--no-length-control", dest="length_control", action="store_false",
        help="leave out the length-controlled column and its plot (each task's main score re-predicted at the "
             "reference caption length; shown by default beside the raw mean, which still ranks)",
    )
    parser.add_argument(
        "--no-arena", dest="arena", action="store_false",
        help="leave out the arena (Bradley-Terry ratings on the Elo scale from every pair of models' per-item "
             "battles on each task's main score, with item-bootstrap CIs; shown by default, no judging needed)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="what to print: one summary line (text, default) or the board with its arenas as JSON")
    parser.add_argument(
        "--report-url", metavar="TEMPLATE",
        help="link each row of the HTML to the model's items in `capjudge report`'s page, e.g. "
             "'report/report.html#task={task}&model={model}' ({task} and {model} are filled in, URL-quoted); "
             "default: OUT/report/report.html when one is there (as `capjudge demo` lays them out), else no links",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from capjudge.metrics.leaderboard.board import LeaderboardSettings, build_leaderboard
    from capjudge.metrics.leaderboard.render import check_leaderboard_names, write_leaderboard
    from capjudge.metrics.files.outputs import OutputError, writable_folder
    from capjudge.metrics.files.run_file_error import RunFileError
    from capjudge.metrics.files.runs import read_runs

    try:
        # Before the runs are read and the statistics made: the folder, and the four names every board writes.
        check_leaderboard_names(writable_folder(Path(args.out)))
        settings = LeaderboardSettings(
            n_resamples=args.resamples, n_permutations=args.permutations, seed=args.seed,
            confidence=args.confidence, alpha=args.alpha, length_control=args.length_control, arena=args.arena,
        )
        runs, notes = read_runs(args.runs)
        board = build_leaderboard(runs, settings, rank_by=args.rank_by, warnings=notes,
                                  report_url=_rows_link(args.report_url, Path(args.out)))
    except (RunFileError, OutputError, ValueError) as error:
        print(f"capjudge leaderboard: {error}", file=sys.stderr)
        return 2
    try:  # the plots' names are known from the board only; all are checked again before any is written
        files = write_leaderboard(board, Path(args.out), flag="--out")
    except OutputError as error:  # the one line, without the board's warnings: nothing was written
        print(f"capjudge leaderboard: {error}", file=sys.stderr)
        return 2
    for warning in board.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.format == "json":
        import json

        from capjudge.metrics.leaderboard.board_json import leaderboard_json

        print(json.dumps(leaderboard_json(board, vars(files)), indent=2, ensure_ascii=False))
        return 0
    ranked = ", ".join(f"{row.rank or '—'}. {row.name}" for row in board.rows)
    written = ", ".join(str(path) for path in (files.markdown, files.csv, files.html, files.png, *files.length_plots,
                                               *files.arena_plots))
    print(f"{len(board.rows)} models ({ranked}); wrote {written}")
    return 0


def _rows_link(template: str | None, out: Path):
    """Where each row links: --report-url, or else the item report beside the leaderboard (OUT/report/report.html,
    the layout `capjudge demo` writes and the README's loop makes), said on one line; else no links."""
    from capjudge.metrics.item_report.report import PAGE_NAME, items_link

    if template is not None:
        return _report_url(template)
    beside = out / "report" / PAGE_NAME
    if not beside.is_file():
        return None
    print(f"capjudge leaderboard: rows link to the item report beside the leaderboard, {beside} "
          "(--report-url TEMPLATE for another)", file=sys.stderr)
    return lambda task, model: f"report/{items_link(task, model)}"


def _report_url(template: str):
    """(task, model) -> the template with both filled in, URL-quoted; a template without either is an error."""
    from urllib.parse import quote

    if "{task}" not in template and "{model}" not in template:
        raise ValueError(f"--report-url {template!r} has neither {{task}} nor {{model}}: every row would link to one place")
    return lambda task, model: template.replace("{task}", quote(task, safe="")).replace("{model}", quote(model, safe=""))

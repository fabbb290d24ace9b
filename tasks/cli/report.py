"""`capjudge report`: one HTML page showing every item of a set of runs, as each judge saw and scored it.

    capjudge report RUN [RUN ...] --out DIR [--videos FOLDER]
    capjudge report --sensitivity OUT/sensitivity_TASK.json --out DIR
    capjudge report --arena OUT/arena_TASK.jsonl --out DIR

RUN is an lmms-eval output folder (or results JSON) written with --log_samples, or a `capjudge judge` output;
`NAME=RUN` names its column. Writes DIR/report.html and DIR/frames/ (the judges' visual input, re-rendered
from the logged videos; --videos finds clips that have moved, by file name). A leaderboard row links to its
items as report.html#task=TASK&model=MODEL.
With --sensitivity, the per-item page of a `capjudge sensitivity` report instead (`capjudge sensitivity` writes
it beside its JSON too): DIR/sensitivity_TASK.html, each perturbed caption beside its original with every
judgment, shift and wrong-way move.
Exit codes: 0 written, 1 the runs cannot make a report (the message names the run, the file and the item),
2 wrong arguments (an --out that is a file or cannot be written is found before any run is read) or a
--sensitivity file that is not a sensitivity report (the message names the file and the problem), or whose
page name is taken (by a folder, another command's page, or the page of another run's report: a sensitivity
page is replaced only by the page of the same run).
With --arena, the report of a `capjudge arena` verdict file, recomputed from the file alone (no judge, no
request; `capjudge arena` writes it beside the file too): DIR/arena_TASK.html, each battle with both captions
and both orders' verdicts and replies, position-inconsistent verdicts marked, failed orders shown failed; and
DIR/arena_TASK.md/.json/.png, each judge's position bias and Bradley-Terry rankings (raw and length-controlled).
Exit 2 for a file that is not an arena verdict file as capjudge wrote it (edited, duplicate keys) or whose
report names are taken, as for --sensitivity.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capjudge.judges.text import plural
from capjudge.metrics.files.outputs import folder_argument

EXIT_OK, EXIT_DATA_ERROR, EXIT_USAGE = 0, 1, 2
# Pages other commands write into folders a sensitivity page may share: the item report's (`capjudge report
# RUN`) and the leaderboard's. A sensitivity file named after one would take, or later lose, its name.
OTHER_COMMANDS_PAGES = {"report.html": "an item report's page", "leaderboard.html": "a leaderboard's page"}


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "report", help="per-item HTML report: frames, captions, judge replies, scores, length rule, failures",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="*", metavar="RUN", help="lmms-eval output folder or results JSON (NAME=RUN to name it)")
    parser.add_argument("--out", type=folder_argument, required=True, metavar="DIR",
                        help="folder for report.html and frames/")
    parser.add_argument("--videos", type=Path, metavar="FOLDER",
                        help="where to look for a clip (by file name) that is no longer at its logged path")
    parser.add_argument("--sensitivity", type=Path, metavar="FILE",
                        help="instead of RUNs: a `capjudge sensitivity` report (sensitivity_TASK.json) to show per item")
    parser.add_argument("--arena", type=Path, metavar="FILE",
                        help="instead of RUNs: a `capjudge arena` verdict file (arena_TASK.jsonl): its battles and report")
    parser.set_defaults(func=handle_report)


def handle_report(args: argparse.Namespace) -> int:
    from capjudge.judges.output_paths import check_output_paths
    from capjudge.metrics.item_report.page import write_page
    from capjudge.metrics.item_report.report import PAGE_NAME, ReportError, build_item_report
    from capjudge.metrics.files.outputs import OutputError, writable_folder

    if args.arena is not None:
        return _arena_report(args)
    if args.sensitivity is not None or not args.runs:
        return _sensitivity_page(args)
    if args.videos is not None and not args.videos.is_dir():
        print(f"capjudge report: --videos {args.videos}: no such folder", file=sys.stderr)
        return EXIT_DATA_ERROR
    try:  # a folder or link under report.html: one line now, not a traceback after the frames were written
        check_output_paths([(writable_folder(args.out) / PAGE_NAME, None)])
    except OutputError as error:
        print(f"capjudge report: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = build_item_report(args.runs, args.out, args.videos)
    except ReportError as error:
        print(f"capjudge report: {error}", file=sys.stderr)
        return EXIT_DATA_ERROR
    page = write_page(report, args.out)
    items = sum(len(section.items) for section in report.sections)
    unshown = sum(1 for section in report.sections for item in section.items if item.visual.problem)
    print(f"wrote {page}: {plural(len(report.sections), 'task')}, {plural(items, 'item')}, "
          f"{plural(len(report.runs), 'run')}" + (f"; frames not shown for {plural(unshown, 'item')} (see the page)"
                                                  if unshown else ""))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _sensitivity_page(args: argparse.Namespace) -> int:
    from capjudge.metrics.files.outputs import OutputError, writable_folder
    from capjudge.metrics.sensitivity.items_file import SensitivityFileError, read_sensitivity_file
    from capjudge.metrics.sensitivity.items_page import file_stamp, page_path, write_sensitivity_page
    from capjudge.metrics.sensitivity.outputs import check_outputs, page_found

    problem = ("give RUN [RUN ...], --sensitivity FILE or --arena FILE" if args.sensitivity is None and not args.runs else
               "give RUN [RUN ...] or --sensitivity FILE, not both" if args.runs else
               "--videos goes with RUNs (a sensitivity page shows no frames)" if args.videos is not None else None)
    try:
        if problem is not None:
            raise OutputError(problem)
        report = read_sensitivity_file(args.sensitivity)
        out = writable_folder(args.out)
    except (OutputError, SensitivityFileError) as error:
        print(f"capjudge report: {error}", file=sys.stderr)
        return EXIT_USAGE
    # The page is named after the file, never after what the file says (its task is untrusted text).
    target = page_path(out / args.sensitivity.name)
    if target.resolve() == args.sensitivity.resolve():
        print(f"capjudge report: --sensitivity {args.sensitivity}: the page would replace the file itself "
              "(name it .json, or give another --out)", file=sys.stderr)
        return EXIT_USAGE
    if target.name in OTHER_COMMANDS_PAGES:  # a folder of both must keep both
        print(f"capjudge report: --sensitivity {args.sensitivity}: the page would be {target}, the name of "
              f"{OTHER_COMMANDS_PAGES[target.name]} (rename the file, or give another --out)", file=sys.stderr)
        return EXIT_USAGE
    try:  # a folder there, or a page this file's run did not write: refused, never replaced
        check_outputs([(target, page_found)], file_stamp(report))
    except OutputError as error:
        print(f"capjudge report: {error}", file=sys.stderr)
        return EXIT_USAGE
    page = write_sensitivity_page(report, target)
    print(f"wrote {page.path}: {page.items} items x (1 original + {len(report.perturbations)} perturbations), "
          f"{len(report.scorers)} scorers; {page.items_moved_wrong_way} items moved the wrong way in some score")
    return EXIT_OK


def _arena_report(args: argparse.Namespace) -> int:
    from capjudge.judges.pairwise.record import ArenaFileError
    from capjudge.metrics.arena.verdict_outputs import arena_report, report_files
    from capjudge.metrics.arena.verdict_text import report_terminal
    from capjudge.metrics.files.outputs import OutputError, writable_folder

    problem = ("give --arena FILE alone, not with RUNs or --sensitivity" if args.runs or args.sensitivity is not None
               else "--videos goes with RUNs (an arena page shows no frames)" if args.videos is not None else None)
    try:
        if problem is not None:
            raise OutputError(problem)
        out = writable_folder(args.out)
        # The files are named after the verdict file, never after what it says (its task is untrusted text).
        files = report_files(out / args.arena.name)
        if args.arena.resolve() in {path.resolve() for path in files.all()}:
            raise OutputError(f"--arena {args.arena}: the report would replace the file itself (name it .jsonl, "
                              "or give another --out)")
        taken = [path.name for path in files.all() if path.name in OTHER_COMMANDS_PAGES or path.stem == "leaderboard"]
        if taken:
            raise OutputError(f"--arena {args.arena}: the report would take {taken[0]}, a name of another command's "
                              "files (rename the file, or give another --out)")
        report, files = arena_report(args.arena, out)
    except (OutputError, ArenaFileError) as error:
        print(f"capjudge report: {error}", file=sys.stderr)
        return EXIT_USAGE
    inconsistent = sum(member.overall.bias.inconsistent_ties for member in report.members)
    print(f"wrote {files.page}: {plural(report.n_pairs, 'battle')} x {plural(len(report.members), 'judge')}, "
          f"{inconsistent} position-inconsistent; the report {files.markdown} (.json, .png)\n")
    print(report_terminal(report), end="")  # the file keeps its Markdown escapes; the terminal shows names as they are
    return EXIT_OK

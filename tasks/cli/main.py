"""The `capjudge` command line.

One module per command in this package, each with a `register(groups)` function that adds its subcommands
and a thin handler that calls the command's logic in its own layer; this file only assembles them. Command
modules import their heavy dependencies inside the handlers, so `capjudge parse ...` starts fast.
"""

from __future__ import annotations

import argparse
import sys

from capjudge.tasks import capjudge_version
from capjudge.tasks.cli import (
    agreement, anycap, arena, cache, correlate, demo, estimate, gveval, judge, leaderboard, reliability, report,
    sensitivity, serve_local, tasks_folder, vatex,
)
from capjudge.tasks.cli.bounds import count_problem
from capjudge.tasks.cli.command_groups import CommandGroups

EXIT_BAD_COUNT = 2  # as argparse exits for any other unusable flag

# The modules that contribute subcommands, in the order their help appears. Imported statically: a command
# that cannot import fails every `capjudge` call with its traceback, never silently vanishes.
COMMAND_MODULES = (
    gveval, anycap, correlate, vatex, leaderboard, report, reliability, agreement, serve_local, demo, judge, cache,
    estimate, sensitivity, arena, tasks_folder,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capjudge", description="Rubric LLM judges for video captions.")
    parser.add_argument("--version", action="version", version=f"capjudge {capjudge_version()}")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render = top.add_parser("render", help="write the exact judge request for one caption; no request is made")
    parse = top.add_parser("parse", help="parse judge replies (stdin, or --jsonl FILE for batches)")
    groups = CommandGroups(
        top=top,
        render=render.add_subparsers(dest="judge", required=True, metavar="JUDGE"),
        parse=parse.add_subparsers(dest="judge", required=True, metavar="JUDGE"),
    )
    for module in COMMAND_MODULES:
        module.register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Every count's bound (capjudge.tasks.cli.bounds) before the command starts any work.
    problem = count_problem(args)
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_BAD_COUNT
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

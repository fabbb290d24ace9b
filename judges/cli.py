"""The `capjudge` command line.

Each feature keeps its own subcommands next to its code, in a module with a `register(groups)` function;
this file only assembles them. Feature modules import their heavy dependencies inside the handlers, so
`capjudge parse ...` starts fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

# Modules that contribute subcommands, in the order their help appears.
COMMAND_MODULES = (
    "capjudge.judges.gveval_cli",
    "capjudge.judges.anycap_cli",
    "capjudge.metrics.correlate_cli",
    "capjudge.metrics.leaderboard_cli",
    "capjudge.metrics.item_report_cli",
    "capjudge.metrics.reliability_cli",
    "capjudge.judges.local_server",
    "capjudge.tasks.demo_run",
    "capjudge.tasks.judge_stage",
    "capjudge.judges.cache_cli",
    "capjudge.tasks.estimate",
)


@dataclass(frozen=True)
class CommandGroups:
    """Where a feature module hangs its subcommands: top level, or under `render` / `parse`."""

    top: argparse._SubParsersAction
    render: argparse._SubParsersAction
    parse: argparse._SubParsersAction


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capjudge", description="Rubric LLM judges for video captions.")
    top = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render = top.add_parser("render", help="write the exact judge request for one caption; no request is made")
    parse = top.add_parser("parse", help="parse judge replies (stdin, or --jsonl FILE for batches)")
    groups = CommandGroups(
        top=top,
        render=render.add_subparsers(dest="judge", required=True, metavar="JUDGE"),
        parse=parse.add_subparsers(dest="judge", required=True, metavar="JUDGE"),
    )
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:  # a real import error inside the module: surface it
                raise
            continue  # feature not present in this build
        module.register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

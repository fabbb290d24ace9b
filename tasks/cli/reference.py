"""The README's CLI reference table, made from the argument parsers themselves.

A table written by hand drifts: commands are added (`tasks-folder`, `vatex`) and flags grow (`demo --out`)
while the table stays as it was. Here every row is one subcommand's own usage line and help text, so the
table can only say what `capjudge COMMAND --help` says. tests/tasks/cli/test_cli_reference.py fails when the README's
table and this output differ; `python -m capjudge.tasks.cli.reference --write README.md` rewrites it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

# The table sits between these two lines in README.md.
START = "<!-- cli-reference: made by `python -m capjudge.tasks.cli.reference --write README.md`; do not edit -->"
END = "<!-- cli-reference: end -->"


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """(command words, its parser, its one-line help) for every leaf subcommand, in the order of `--help`."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            words = (*path, name)
            if any(isinstance(inner, argparse._SubParsersAction) for inner in sub._actions):
                yield from subcommands(sub, words)
            else:
                yield words, sub, helps.get(name, "")


def usage_line(sub: argparse.ArgumentParser) -> str:
    """The subcommand's usage on one line, without `[-h]` (every command has it)."""
    text = " ".join(sub.format_usage().split())
    text = re.sub(r"^usage: ", "", text)
    return text.replace(" [-h]", "")


def table() -> str:
    from capjudge.tasks.cli.main import build_parser

    # argparse wraps usage at the terminal's width; the table must not depend on who runs this.
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "10000"
    try:
        rows = [(usage_line(sub), help_text) for _, sub, help_text in subcommands(build_parser())]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| `{_cell(usage)}` | {_cell(help_text)} |" for usage, help_text in rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def readme_with_table(readme: str) -> str:
    """README text with the part between START and END replaced by `table()`; ValueError without markers."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError("the README must hold the CLI reference markers once each, start before end")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capjudge.tasks.cli.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, metavar="README", help="rewrite the table in this README in place")
    args = parser.parse_args(argv)
    if args.write is None:
        print(table())
        return 0
    try:
        updated = readme_with_table(args.write.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"capjudge reference: {args.write}: {error}", file=sys.stderr)
        return 2
    args.write.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's CLI reference is the parsers' own: a command or flag added without the table fails here."""

from __future__ import annotations

import subprocess
import sys

from capjudge.tasks.cli.main import build_parser
from capjudge.tasks.cli.reference import END, START, subcommands, table
from tests.support.paths import REPO_ROOT

README = REPO_ROOT / "README.md"


def _readme_table() -> str:
    text = README.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_the_readme_table_is_the_one_the_parsers_make():
    assert _readme_table() == table(), (
        "README.md's CLI reference differs from the parsers: run "
        "`.venv/bin/python -m capjudge.tasks.cli.reference --write README.md`"
    )


def test_every_subcommand_has_a_row_with_its_help_and_every_flag():
    rows = _readme_table().splitlines()[2:]
    leaves = list(subcommands(build_parser()))
    assert len(rows) == len(leaves)
    for (words, parser, help_text), row in zip(leaves, rows):
        assert row.startswith(f"| `capjudge {' '.join(words)}"), row
        assert help_text and help_text.replace("|", "\\|") in row, (words, row)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in row or any(other in row for other in action.option_strings), (words, flag)
    # The commands the installed-user section relies on, and the ones the hand-written table once missed.
    commands = {" ".join(words) for words, _, _ in leaves}
    assert {"tasks-folder", "vatex", "demo", "sensitivity", "estimate"} <= commands
    demo_row = next(row for row in rows if row.startswith("| `capjudge demo "))
    assert "--out" in demo_row and "--caption-sets" in demo_row


def test_the_writer_refuses_a_readme_without_exactly_one_pair_of_markers(tmp_path):
    for name, text in {
        "no_markers.md": "# x\n",
        "two_starts.md": f"{START}\n{START}\n{END}\n",
        "end_first.md": f"{END}\n{START}\n",
    }.items():
        readme = tmp_path / name
        readme.write_text(text, encoding="utf-8")
        done = subprocess.run([sys.executable, "-m", "capjudge.tasks.cli.reference", "--write", str(readme)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (name, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and str(readme) in done.stderr, done.stderr
        assert readme.read_text(encoding="utf-8") == text  # untouched


def test_the_writer_replaces_only_the_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{START}\nold table\n{END}\nafter\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "capjudge.tasks.cli.reference", "--write", str(readme)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert readme.read_text(encoding="utf-8") == f"before\n{START}\n{table()}\n{END}\nafter\n"

"""What `capjudge arena` and `capjudge report --arena` print to the terminal (issue #63 item 6): names as they
are, without the Markdown escapes of the .md file (`captions\\_good` was printed), yet still one printable line
each (a control character from a file name is shown as `?`, never sent to the terminal), and counts in words
("1 item", "1 pair", "1 battle x 1 judge", not "1 items"). The .md file keeps its escapes.

Through the real CLI against the test server, with the scripted `fair` pairwise judge, on one item of two caption
sets, one of them in a file whose name holds an escape sequence (the model's name is the file's).
"""

from __future__ import annotations

import shutil

import pytest
from tests.support.arena_runs import DEMO, arena, caption_flags
from tests.support.harness_runs import judge_server, run_capjudge
from tests.support.scripted_pairwise_judges import PairwiseWorld

pytestmark = pytest.mark.slow
TASK = "gveval_demo"
ODD_NAME = "my_good\x1b[31mset"  # an ANSI colour sequence in a file name, as a name from a file can hold
SHOWN = "my_good?[31mset"  # on the terminal: printable, on one line, no escape sequence
ESCAPED = "my\\_good?\\[31mset"  # in the Markdown file


def test_the_terminal_prints_names_unescaped_on_one_line_and_counts_in_words(tmp_path):
    odd = tmp_path / f"{ODD_NAME}.jsonl"
    shutil.copy(DEMO / "captions_good.jsonl", odd)
    out = tmp_path / "out"
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", "--task", TASK, "--captions", str(odd), *caption_flags("poor"),
                     "--limit", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    assert "\x1b" not in printed and "\\" not in printed  # no escape sequence reached the terminal, no Markdown escape
    assert "; 2 models, 1 item, 1 pair, each asked in both orders" in printed.splitlines()[0]
    header = next(line for line in printed.splitlines() if line.startswith("2 models ("))
    assert SHOWN in header and "captions_poor" in header and ", 1 item, 1 pair per judge" in header
    assert f"## Arena report: {TASK}, " in printed

    # The Markdown file keeps its escapes (a name cannot break its tables), and no escape sequence either.
    markdown = (out / f"arena_{TASK}.md").read_text(encoding="utf-8")
    assert ESCAPED in markdown and "captions\\_poor" in markdown and "\x1b" not in markdown

    # `capjudge report --arena` prints the same report as the arena run did, and its own counts in words.
    again = run_capjudge("report", "--arena", str(out / f"arena_{TASK}.jsonl"), "--out", str(tmp_path / "page"))
    assert again.returncode == 0, again.stderr[-3000:]
    first, report = again.stdout.split("\n\n", 1)
    assert ": 1 battle x 1 judge, " in first
    assert "\x1b" not in again.stdout and "\\" not in report
    assert report.strip() == printed[printed.index(f"## Arena report: {TASK}, "):].strip()

"""The leaderboard's files are safe to open whatever a model is called: no live spreadsheet formula in the CSV,
no markup, broken table or broken line in the Markdown, nothing unescaped in the HTML, no mathtext in the chart.

Material: one real `capjudge judge` run (the demo G-VEval task, judged by the test server), copied once per
hostile name with the name written into the copy's results file, read by the real `capjudge leaderboard`.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# No commas: lmms-eval's model_args cannot hold one, and the copies name themselves there too (see _named_copy).
HOSTILE_NAMES = (
    '=HYPERLINK("http://evil.example/";"click me")',
    "+SUM(1;2)",
    "-2+3",
    "@SUM(A1:A2)",
    "\tIMPORTXML",
    "'quoted",
    "<script>alert(1)</script> | a\\|b\nsecond line",
    "$\\notacommand$ & &amp; <b>bold</b>",
)


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    """The leaderboard folder of the hostile copies of one real run (the CLI's exit checked)."""
    root = tmp_path_factory.mktemp("export_safety")
    with judge_server() as judge:
        env = harness_env(judge.base_url, cache_path=root / "judge.sqlite", datasets_cache=root / "hf_datasets_cache")
        done = run_capjudge("judge", "--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK,
                            "--out", str(root / "judged"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = [path.parent for path in (root / "judged").rglob("*_results.json")]
    copies = [_named_copy(run, root / "copies" / f"model{index}", name) for index, name in enumerate(HOSTILE_NAMES)]
    made = run_capjudge("leaderboard", *map(str, copies), "--out", str(root / "board"))
    assert made.returncode == 0, made.stderr[-3000:]
    return root / "board"


def _named_copy(run: Path, destination: Path, name: str) -> Path:
    shutil.copytree(run, destination)
    (results_file,) = destination.glob("*_results.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results["config"]["model_name"] = name
    results["config"]["model_args"] = f"model_name={name}"
    results["model_name"] = name
    results_file.write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")
    return destination


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_csv_cells_never_start_a_formula_and_names_come_back_by_dropping_one_apostrophe(board):
    with (board / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    live = [(row[1], cell) for row in rows for cell in row
            if cell.startswith(FORMULA_START) and not _is_number(cell)]
    assert live == []
    models = [row[header.index("model")] for row in body]
    assert sorted(model.removeprefix("'") for model in models) == sorted(HOSTILE_NAMES)
    assert "'=HYPERLINK(\"http://evil.example/\";\"click me\")" in models and "''quoted" in models
    # Numbers stay numbers: a negative difference from the top model is not turned into text.
    differences = [row[header.index(f"{TASK}/gveval_mean_diff_vs_top")] for row in body]
    assert all(cell == "" or _is_number(cell) for cell in differences)


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


def test_markdown_has_no_markup_and_every_table_row_stays_one_row(board):
    markdown = (board / "leaderboard.md").read_text(encoding="utf-8")
    assert "<script>" not in markdown and "<b>" not in markdown and "&amp;amp;" in markdown
    assert "&lt;script>alert(1)&lt;/script>" in markdown
    assert not [line for line in markdown.splitlines() if line.startswith("second line")]
    tables, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    assert tables
    for table in tables:
        assert len({_unescaped_pipes(line) for line in table}) == 1, table
    # The newline inside a name is shown, not obeyed; the pipe inside it is escaped.
    assert "a\\\\\\|b␊second" in markdown


def test_html_and_chart_show_the_names_as_text(board):
    page = (board / "leaderboard.html").read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert (board / "leaderboard.png").read_bytes().startswith(b"\x89PNG")

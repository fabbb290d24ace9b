"""Leaderboards built from real lmms-eval runs of the captions_file model, judged by the test server.

The module fixture runs lmms-eval twice on the real `gveval_demo` task (10 generated clips, frames strip and
references sent to the judge): a strong caption set (long, specific captions) and a weak one (short captions,
some "wrong"), both from JSONL files; the test server's rubric scores the first far higher. Everything else
reads those real output folders, or copies of them edited the way real runs go wrong (fewer items, another
judge, judge failures, no --log_samples).
"""

from __future__ import annotations

import base64
import csv
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from tests.support.harness_runs import REPO_TASKS, judge_server, run_lmms_eval

from capjudge.tasks.cli.main import main as capjudge_main
from capjudge.metrics.leaderboard.board import build_leaderboard
from capjudge.metrics.leaderboard.stats import LeaderboardSettings
from capjudge.metrics.leaderboard.stats import holm_adjust, mean_estimate, paired_comparison
from capjudge.metrics.files.runs import read_runs
from capjudge.metrics.leaderboard.render import render_html, render_markdown, write_leaderboard

TASK = "gveval_demo"
N_ITEMS = 10
MAIN_SCORES = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance")


def _item_ids() -> list[str]:
    lines = (REPO_TASKS / "demo" / "gveval_demo.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"] for line in lines if line.strip()]


def _weak_captions() -> list[dict]:
    weak = ["a dog", "wrong video", "a man walks", "something happens", "wrong", "people", "a car", "wrong scene", "a cat sits", "outside"]
    return [{"id": item_id, "caption": weak[i]} for i, item_id in enumerate(_item_ids())]


def _strong_captions() -> list[dict]:
    return [
        {"id": item_id, "caption": f"A woman in a blue coat walks her brown dog along the busy harbour at dusk while boats pass behind them, scene {i}"}
        for i, item_id in enumerate(_item_ids())
    ]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("leaderboard_runs")
    (root / "captions").mkdir()
    strong_file = _write_jsonl(root / "captions" / "strong.jsonl", _strong_captions())
    weak_file = _write_jsonl(root / "captions" / "weak_set.jsonl", _weak_captions())
    output = root / "out"
    with judge_server() as judge:
        common = {"tasks": TASK, "output_path": output, "judge_base_url": judge.base_url,
                  "cache_path": root / "judge_cache.sqlite"}
        strong = run_lmms_eval(model="captions_file", model_args=f"path={strong_file}", **common)
        weak = run_lmms_eval(model="captions_file", model_args=f"path={weak_file},model_name=weak", **common)
        judge_requests = len(judge.completions)
    return {"root": root, "output": output, "strong": strong, "weak": weak, "judge_requests": judge_requests}


def _copy_run(run, destination: Path) -> Path:
    """A copy of one run's folder, to edit the way real runs go wrong."""
    shutil.copytree(run.run_dir, destination)
    return destination


def _samples_file(folder: Path) -> Path:
    return next(folder.glob(f"*_samples_{TASK}.jsonl"))


def _rewrite_samples(folder: Path, edit) -> None:
    path = _samples_file(folder)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("".join(json.dumps(line) + "\n" for line in edit(lines)), encoding="utf-8")


def _build(*arguments: str):
    found, notes = read_runs(list(arguments))
    return build_leaderboard(found, LeaderboardSettings(), warnings=notes)


def _cli(capsys, out: Path, *arguments: str) -> tuple[int, str, str]:
    code = capjudge_main(["leaderboard", *arguments, "--out", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _markdown_rows(markdown: str) -> list[list[str]]:
    """The cells of every Markdown table row (header and rule rows included), padding stripped."""
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in markdown.splitlines() if line.startswith("| ")]


def _csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


# ---------------------------------------------------------------------------------------------------------
# The real runs
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_both_runs_judged_every_item_through_the_server(runs):
    assert runs["judge_requests"] > 0
    for name in ("strong", "weak"):
        samples = runs[name].samples(TASK)
        assert len(samples) == N_ITEMS
        assert all(isinstance(s["gveval_mean"], float) and s["gveval_failed"] == 0 for s in samples)
        assert all(s["judged"]["judge"]["model"] == "test-judge" for s in samples)
    # The weak run returned exactly the weak file's captions, matched by item id.
    by_id = {row["id"]: row["caption"] for row in _weak_captions()}
    assert [s["filtered_resps"] for s in runs["weak"].samples(TASK)] == [by_id[s["judged"]["item_id"]] for s in runs["weak"].samples(TASK)]
    assert runs["weak"].run_dir.name == "weak"


@pytest.mark.slow
def test_cli_ranks_the_strong_set_first_and_flags_the_weak_one(runs, tmp_path, capsys):
    code, _, err = _cli(capsys, tmp_path / "board", str(runs["output"]))
    assert code == 0, err
    rows = _csv_rows(tmp_path / "board" / "leaderboard.csv")
    # Row names: the caption file's stem, and model_name= for the field run.
    assert set(rows) == {"strong", "weak"}
    assert rows["strong"]["rank"] == "1" and rows["weak"]["rank"] == "2"
    column = f"{TASK}/gveval_mean"
    assert float(rows["strong"][column]) > float(rows["weak"][column]) + 20
    assert rows["weak"][f"{column}_differs_from_top"] == "true"
    # 10 items, all differences of one sign: the exact sign-flip p-value is 2 / 2**10.
    assert float(rows["weak"][f"{column}_p_vs_top"]) == pytest.approx(2 / 2**10)
    assert rows["strong"][f"{column}_differs_from_top"] == ""  # the top model is not compared with itself
    assert rows["weak"]["top_model"] == "strong"
    assert rows["weak"][f"items_{TASK}"] == str(N_ITEMS)
    assert "permutation" in rows["weak"]["test"]
    markdown = (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    table_rows = _markdown_rows(markdown)
    assert ["1", "strong"] in [cells[:2] for cells in table_rows] and ["2", "weak"] in [cells[:2] for cells in table_rows]
    assert "permutation test" in markdown and "Holm" in markdown
    assert "Warnings" not in markdown and "warning:" not in err  # same items, same judge, no failures
    # What judging cost, from the per-item records: one request per item, tokens as the server reported them.
    assert rows["weak"][f"requests_{TASK}"] == str(N_ITEMS) and int(rows["weak"][f"prompt_tokens_{TASK}"]) > 0
    assert rows["weak"][f"cached_items_{TASK}"] == "0"
    assert "## Judge usage" in markdown and ["weak", TASK, str(N_ITEMS), "0", str(N_ITEMS)] in [r[:5] for r in table_rows]


@pytest.mark.slow
def test_every_interval_contains_its_estimate(runs):
    board = _build(str(runs["output"]))
    checked = constant = 0
    for row in board.rows:
        for column in board.columns:
            estimate = row.estimates[column.key]
            if estimate.ci_low is None:  # the small-sample rule (issue #60): only a zero-width one is left out,
                # i.e. every item has the same value (the strong set's conciseness is 95 on all ten)
                values = {sample[column.metric] for sample in runs[row.name].samples(TASK)}
                assert len(values) == 1 and estimate.ci_high is None, (row.name, column.key, values)
                constant += 1
            else:
                assert estimate.ci_low <= estimate.value <= estimate.ci_high
            checked += 1
        for comparison in row.comparisons.values():
            assert comparison.ci_low <= comparison.difference <= comparison.ci_high
            assert comparison.ci_high < 0  # the weak set is below the strong one on every score
    assert checked == 2 * len(board.columns) and constant < checked / 2
    assert {c.metric for c in board.main_columns} == set(MAIN_SCORES)
    failed = next(c for c in board.columns if c.metric == "gveval_failed")
    assert failed.kind == "rate" and failed.is_failure and not failed.main


@pytest.mark.slow
def test_intervals_narrow_with_more_items(runs):
    values = np.array([s["gveval_mean"] for s in runs["weak"].samples(TASK)])
    settings = LeaderboardSettings()
    small, large = mean_estimate(values, settings), mean_estimate(np.tile(values, 4), settings)
    assert large.value == pytest.approx(small.value)
    assert large.n == 4 * small.n
    # Four copies of every item: the mean's standard error halves, and so (roughly) does the interval.
    assert (large.ci_high - large.ci_low) < 0.65 * (small.ci_high - small.ci_low)


@pytest.mark.slow
def test_same_captions_twice_are_tied_and_not_significant(runs, tmp_path, capsys):
    strong = str(runs["strong"].results_file)
    code, _, err = _cli(capsys, tmp_path / "board", f"first={strong}", f"second={strong}")
    assert code == 0, err
    rows = _csv_rows(tmp_path / "board" / "leaderboard.csv")
    assert rows["first"]["rank"] == rows["second"]["rank"] == "1"
    column = f"{TASK}/gveval_mean"
    compared = rows["second"]
    assert float(compared[f"{column}_diff_vs_top"]) == 0.0
    assert float(compared[f"{column}_p_vs_top"]) == 1.0
    assert compared[f"{column}_differs_from_top"] == "false"


@pytest.mark.slow
def test_runs_are_found_from_an_output_folder_a_model_folder_or_a_results_file(runs):
    from_root, _ = read_runs([str(runs["output"])])
    from_parts, _ = read_runs([str(runs["strong"].run_dir), str(runs["weak"].results_file)])
    assert sorted(r.name for r in from_root) == sorted(r.name for r in from_parts) == ["strong", "weak"]
    weak = next(r for r in from_root if r.name == "weak")
    assert weak.model == "captions_file" and "model_name=weak" in weak.model_args
    assert weak.tasks[TASK].judge_source == "samples"


# ---------------------------------------------------------------------------------------------------------
# Warnings, on edited copies of the real runs
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_different_items_judges_and_failures_are_warned_everywhere(runs, tmp_path, capsys):
    fewer = _copy_run(runs["weak"], tmp_path / "runs" / "fewer")
    _rewrite_samples(fewer, lambda lines: lines[:7])
    other_judge = _copy_run(runs["weak"], tmp_path / "runs" / "other_judge")
    _rewrite_samples(other_judge, lambda lines: [{**line, "judged": {**line["judged"], "judge": {**line["judged"]["judge"], "model": "gpt-4o-2024-05-13"}}} for line in lines])
    failing = _copy_run(runs["weak"], tmp_path / "runs" / "failing")

    def fail_first(lines):
        first = {**lines[0], "gveval_failed": True, **{metric: None for metric in MAIN_SCORES}}
        return [first, *lines[1:]]

    _rewrite_samples(failing, fail_first)
    code, _, err = _cli(
        capsys, tmp_path / "board",
        f"strong={runs['strong'].results_file}", f"fewer={fewer}", f"other_judge={other_judge}", f"failing={failing}",
    )
    assert code == 0
    markdown = (tmp_path / "board" / "leaderboard.md").read_text(encoding="utf-8")
    page = (tmp_path / "board" / "leaderboard.html").read_text(encoding="utf-8")
    expected = ("different item sets", "different judge models or settings", "gpt-4o-2024-05-13", "gveval_failed is 10.0%")
    for text in expected:
        assert text in markdown, text
        assert text in page, text
        assert text in err, text
    rows = _csv_rows(tmp_path / "board" / "leaderboard.csv")
    column = f"{TASK}/gveval_mean"
    assert rows["fewer"][f"{column}_n"] == "7"
    # The failed item is left out of the score (never a 0) and counted in the failure rate.
    assert rows["failing"][f"{column}_n"] == "9"
    assert float(rows["failing"][f"{TASK}/gveval_failed"]) == pytest.approx(0.1)
    weak_values = [s["gveval_mean"] for s in runs["weak"].samples(TASK)]
    assert float(rows["failing"][column]) == pytest.approx(np.mean(weak_values[1:]))


@pytest.mark.slow
def test_a_run_without_samples_keeps_the_harness_value_without_ci(runs, tmp_path):
    bare = _copy_run(runs["weak"], tmp_path / "bare")
    _samples_file(bare).unlink()
    board = _build(f"strong={runs['strong'].results_file}", f"bare={bare}")
    column = next(c for c in board.columns if c.metric == "gveval_mean")
    row = next(r for r in board.rows if r.name == "bare")
    estimate = row.estimates[column.key]
    harness_value = runs["weak"].results()["results"][TASK]["gveval_mean,none"]
    assert estimate.value == pytest.approx(harness_value) and estimate.source == "harness"
    assert estimate.ci_low is None and column.key not in row.comparisons
    assert any("no per-sample log for bare" in w for w in board.warnings)
    assert "(no CI)" in render_markdown(board)


@pytest.mark.slow
def test_runs_of_one_model_on_separate_tasks_merge_into_one_row(runs, tmp_path):
    # The same model run again on another task (here: the strong run's files renamed to task "other").
    other = _copy_run(runs["strong"], tmp_path / "other_task")
    results_file = next(other.glob("*_results.json"))
    results = json.loads(results_file.read_text(encoding="utf-8"))
    for section in ("results", "configs", "higher_is_better"):
        results[section] = {"other": results[section][TASK]}
    results_file.write_text(json.dumps(results), encoding="utf-8")
    samples = _samples_file(other)
    samples.rename(samples.with_name(samples.name.replace(f"_samples_{TASK}", "_samples_other")))
    found, notes = read_runs([str(runs["strong"].run_dir), str(other)])
    assert [run.name for run in found] == ["strong"] and notes == []
    assert set(found[0].tasks) == {TASK, "other"} and len(found[0].results_paths) == 2
    board = build_leaderboard(found)
    assert {c.label for c in board.columns if c.metric == "gveval_mean"} == {f"{TASK}/gveval_mean", "other/gveval_mean"}
    # The same task twice: the newer file wins, and the older one is named in a warning.
    again = _copy_run(runs["strong"], tmp_path / "again")
    _, notes = read_runs([str(runs["strong"].run_dir), str(again)])
    assert len(notes) == 1 and f"{TASK} was run more than once" in notes[0]


@pytest.mark.slow
def test_judge_falls_back_to_the_task_config(runs, tmp_path):
    unlogged = _copy_run(runs["weak"], tmp_path / "unlogged")
    _rewrite_samples(unlogged, lambda lines: [{**line, "judged": {k: v for k, v in line["judged"].items() if k != "judge"}} for line in lines])
    found, _ = read_runs([f"unlogged={unlogged}"])
    assert found[0].tasks[TASK].judge_source == "unknown"
    board = build_leaderboard([*read_runs([str(runs["strong"].run_dir)])[0], *found])
    assert any("the judge is not recorded for unlogged" in w for w in board.warnings)
    results_file = next(unlogged.glob("*_results.json"))
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results["configs"][TASK]["metadata"]["judge_model"] = "gpt-4o-2024-05-13"
    results_file.write_text(json.dumps(results), encoding="utf-8")
    found, _ = read_runs([f"unlogged={unlogged}"])
    task = found[0].tasks[TASK]
    assert task.judge_source == "config" and [j.model for j in task.judges] == ["gpt-4o-2024-05-13"]


@pytest.mark.slow
def test_a_corpus_level_metric_shows_the_harness_aggregate(runs, tmp_path):
    # A correlation metric: its per-item values are {"judge", "human"} pairs, its value only exists overall.
    folder = _copy_run(runs["weak"], tmp_path / "with_correlation")
    _rewrite_samples(folder, lambda lines: [{**line, "gveval_kendall_b": {"judge": line["gveval_mean"], "human": [3, 4]}} for line in lines])
    results_file = next(folder.glob("*_results.json"))
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results["results"][TASK]["gveval_kendall_b,none"] = 0.42
    results["configs"][TASK]["metric_list"].append({"metric": "gveval_kendall_b", "higher_is_better": True})
    results_file.write_text(json.dumps(results), encoding="utf-8")
    board = _build(f"strong={runs['strong'].results_file}", f"weak={folder}")
    column = next(c for c in board.columns if c.metric == "gveval_kendall_b")
    estimate = next(r for r in board.rows if r.name == "weak").estimates[column.key]
    assert (estimate.value, estimate.source, estimate.ci_low) == (0.42, "harness", None)
    assert not column.main and board.rank_column.metric == "gveval_mean"


@pytest.mark.slow
def test_unknown_rank_metric_is_one_clear_error(runs, tmp_path, capsys):
    code, _, err = _cli(capsys, tmp_path / "board", str(runs["output"]), "--rank-by", "cider")
    assert code == 2
    assert "'cider' is not a metric of these runs" in err and f"{TASK}/gveval_mean" in err


# ---------------------------------------------------------------------------------------------------------
# The HTML page stands alone
# ---------------------------------------------------------------------------------------------------------


class _PageAudit(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.external: list[str] = []
        self.script_sources: list[str] = []
        self.images: list[str] = []
        self.tables: list[tuple[list[int], list[int]]] = []  # per table: cells of its header rows, of its body rows
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attributes = dict(attrs)
        for name, value in attrs:
            if value and value.strip().lower().startswith(("http://", "https://", "//")):
                self.external.append(f"{tag} {name}={value}")
        if tag == "script" and "src" in attributes:
            self.script_sources.append(attributes["src"])
        if tag == "img":
            self.images.append(attributes.get("src", ""))
        if tag == "table":
            self.tables.append(([], []))
        if tag == "thead":
            self._in_head = True
        if tag == "tbody":
            self._in_head = False
        if tag == "tr":
            (self.tables[-1][0] if self._in_head else self.tables[-1][1]).append(0)
        if tag in ("th", "td"):
            (self.tables[-1][0] if self._in_head else self.tables[-1][1])[-1] += 1


@pytest.mark.slow
def test_html_page_has_no_external_resources(runs, tmp_path, capsys):
    code, _, _ = _cli(capsys, tmp_path / "board", str(runs["output"]))
    assert code == 0
    page = (tmp_path / "board" / "leaderboard.html").read_text(encoding="utf-8")
    audit = _PageAudit()
    audit.feed(page)
    assert audit.external == []
    assert "link" not in audit.tags and "iframe" not in audit.tags
    assert audit.script_sources == [] and audit.tags.count("script") == 1
    assert "@import" not in page and "url(" not in page
    # The chart (last, under the method), the task's length-controlled plot (two models with logged captions, so
    # it has one) and its arena's ratings (issue #60 item 8: it was a link to the file beside the page): all
    # inline PNGs, each the file written beside the page.
    assert len(audit.images) == 3 and all(src.startswith("data:image/png;base64,") for src in audit.images)
    inlined = [base64.b64decode(src.split(",", 1)[1]) for src in audit.images]
    assert inlined[2] == (tmp_path / "board" / "leaderboard.png").read_bytes()
    assert inlined[0] == (tmp_path / "board" / f"leaderboard_length_{TASK}.png").read_bytes()
    assert inlined[1] == (tmp_path / "board" / f"leaderboard_arena_{TASK}.png").read_bytes()
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in inlined)
    # Per task a main table, an other-metrics table and the arena's two (ratings, win rates: issue #49), then
    # the usage table: one header row each, every body row as wide as it, one row per model.
    assert len(audit.tables) == 5
    for header_rows, body_rows in audit.tables:
        assert len(header_rows) == 1 and body_rows == [header_rows[0]] * 2
    assert "addEventListener(\"click\"" in page and 'data-sort="' in page


@pytest.mark.slow
def test_chart_has_one_panel_per_main_metric(runs, tmp_path):
    from PIL import Image

    board = _build(str(runs["output"]))
    page = render_html(board, b"not-a-png")  # the page embeds whatever chart it is given
    assert "data:image/png;base64,bm90LWEtcG5n" in page
    files = write_leaderboard(board, tmp_path / "board")
    with Image.open(files.png) as image:
        width, height = image.size
    # Five main metrics: three panels per row, two rows.
    assert width > height > 400


# ---------------------------------------------------------------------------------------------------------
# Statistics on their own
# ---------------------------------------------------------------------------------------------------------


def test_unjudged_items_are_left_out_not_counted_as_zero():
    estimate = mean_estimate(np.array([80.0, np.nan, 60.0, 70.0]), LeaderboardSettings())
    assert estimate.value == pytest.approx(70.0) and estimate.n == 3
    assert mean_estimate(np.array([np.nan, np.nan]), LeaderboardSettings()).value is None


def test_paired_test_is_exact_and_uses_only_common_items():
    better = np.array([5.0, 6.0, 7.0, 8.0, 9.0, 6.0, np.nan])
    worse = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 2.0, 0.0])
    comparison = paired_comparison(worse, better, "better", LeaderboardSettings())
    assert comparison.n_common == 6
    assert comparison.difference == pytest.approx(-4.0)
    assert comparison.p_value == pytest.approx(2 / 2**6)  # exact: only all-minus and all-plus are as extreme
    assert comparison.significant is True
    # Every item differs by exactly 4: a zero-width interval, not shown (the small-sample rule, issue #60: the
    # leaderboard printed '+0.0 [+0.0, +0.0]'); with differences that vary, the interval holds the difference.
    assert (comparison.ci_low, comparison.ci_high) == (None, None)
    varied = paired_comparison(worse + np.array([0.0, 1.0, -1.0, 2.0, 0.5, 0.0, 0.0]), better, "better",
                               LeaderboardSettings())
    assert varied.ci_low < varied.difference < varied.ci_high < 0


def test_bootstrap_is_seeded():
    values = np.random.default_rng(3).normal(50, 10, size=40)
    first = mean_estimate(values, LeaderboardSettings(seed=7))
    again = mean_estimate(values, LeaderboardSettings(seed=7))
    other = mean_estimate(values, LeaderboardSettings(seed=8))
    assert (first.ci_low, first.ci_high) == (again.ci_low, again.ci_high)
    assert (first.ci_low, first.ci_high) != (other.ci_low, other.ci_high)


def test_holm_adjustment_matches_the_step_down_rule():
    # Sorted p: 0.01 (x3 -> 0.03), 0.02 (x2 -> 0.04), 0.04 (x1 -> 0.04, monotone).
    assert holm_adjust([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize(("value", "shown"), [(150, "150"), (-5, "-5"), (True, "true"), (100.5, "100.5")])
def test_a_score_outside_the_judges_range_is_one_line_naming_the_item(runs, tmp_path, capsys, value, shown):
    # G-VEval's scores run 0-100: a logged 150, -5, 100.5 or true is no score it gives; read as a number it
    # moved a mean, a rank and a battle in silence (an independent probe found true counted as 1).
    folder = _copy_run(runs["weak"], tmp_path / "edited")

    def edit(lines):
        lines[3]["gveval_mean"] = value
        return lines

    _rewrite_samples(folder, edit)
    code, out, err = _cli(capsys, tmp_path / "board", str(folder))
    assert code == 2 and out == ""
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert f"{_samples_file(folder)}, line 4 (item " in line
    assert f"gveval_mean: {shown} is not a score of judge 'gveval', whose scores run from 0 to 100" in line

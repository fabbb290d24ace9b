"""Leaderboards a person can read: per task one section, its main metric first, the judge once per task, and
leaderboard.md within 120 columns for 10 models on both tasks' full metric lists (G-VEval with its per-
dimension scores and judge-human correlations, AnyCap with its per-type scores, rates and caption length).

The runs are built in memory with the shapes `capjudge.metrics.files.runs` reads from lmms-eval (the real-run
path is tests/metrics/leaderboard/test_leaderboard.py); every file is written by the real writers and read back.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from capjudge.metrics.leaderboard.board import build_leaderboard
from capjudge.metrics.leaderboard.stats import LeaderboardSettings
from capjudge.metrics.leaderboard.render import MARKDOWN_WIDTH, MODEL_NAME_WIDTH, short_names, write_leaderboard
from capjudge.metrics.files.runs import Run
from capjudge.judges.record import LoggedJudge
from capjudge.metrics.files.task_run import TaskRun

SETTINGS = LeaderboardSettings(n_resamples=300, n_permutations=300)
N_ITEMS = 40
GVEVAL, ANYCAP = "gveval_references", "anycap_style"
GVEVAL_SCORES = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance")
# Corpus-level judge-human correlations: one aggregate per run, no per-item number.
KENDALL = tuple(f"gveval_kendall_b_{d}{s}" for d in ("mean", "accuracy", "completeness", "conciseness", "relevance")
                for s in ("", "_ci_low", "_ci_high"))
ANYCAP_TYPES = ("brief", "detail", "poem", "narrative", "style")
GVEVAL_JUDGE = LoggedJudge(None, "gpt-4o-2024-05-13", judge_version="gveval-accr-video/1", settings=
    {"constrained_output": False, "max_tries": 3, "mode": "frames", "scoring": "expected",
     "sampling": {"logprobs": True, "temperature": 1, "top_logprobs": 5, "top_p": 1}})
ANYCAP_JUDGE = LoggedJudge(None, "gpt-4o-2024-08-06", judge_version="anycap-style-video/1", settings=
    {"constrained_output": False, "instruction_rule": False, "max_tries": 5, "tolerance": 10,
     "sampling": {"max_tokens": 4096, "temperature": 0.7}})
# Ten models, three with names longer than a Markdown column gets, two of them alike for 30 characters.
MODELS = (
    "llava-onevision-qwen2-72b-ov-chat-hf", "llava-onevision-qwen2-72b-ov-sft-hf", "qwen2.5-vl-7b",
    "internvl3-8b-instruct-with-a-long-run-label", "gemma-3-27b", "idefics3", "minicpm-v-2.6", "phi-4-mm",
    "video-llama3", "weak",
)


def _gveval_run(quality: float, rng: np.random.Generator) -> TaskRun:
    values = {m: np.clip(rng.normal(100 * quality, 12, N_ITEMS), 0, 100) for m in GVEVAL_SCORES}
    failed = np.zeros(N_ITEMS, dtype=bool)  # failures (and their warnings) are tests/metrics/leaderboard/test_leaderboard.py's
    for metric in GVEVAL_SCORES:
        values[metric][failed] = np.nan
    values["gveval_failed"] = failed.astype(float)
    metrics = (*GVEVAL_SCORES, "gveval_failed", *KENDALL)
    return TaskRun(
        task=GVEVAL, metric_names=metrics,
        higher_is_better={m: m != "gveval_failed" for m in metrics},
        harness_values={**{m: float(np.nanmean(values[m])) for m in GVEVAL_SCORES}, **_correlations(rng)},
        item_keys=tuple(f"id:msvd{i}" for i in range(N_ITEMS)), values=values,
        bool_valued={m: m == "gveval_failed" for m in metrics},
        judges={GVEVAL_JUDGE: N_ITEMS}, judge_source="samples", samples_path=None,
    )


def _correlations(rng: np.random.Generator) -> dict[str, float]:
    found = {}
    for name in KENDALL[::3]:
        tau = float(rng.uniform(0.1, 0.5))
        found.update({name: tau, f"{name}_ci_low": tau - 0.1, f"{name}_ci_high": tau + 0.1})
    return found


def _anycap_run(quality: float, rng: np.random.Generator) -> TaskRun:
    types = np.array(ANYCAP_TYPES)[np.arange(N_ITEMS) % len(ANYCAP_TYPES)]
    score = np.clip(np.rint(rng.normal(4 * quality, 1, N_ITEMS)), 0, 4)
    values = {"anycap_score": score, "anycap_avg_of_types": score.copy()}
    for caption_type in ANYCAP_TYPES:
        values[f"anycap_{caption_type}"] = np.where(types == caption_type, score, np.nan)
    values["anycap_length_capped"] = (rng.random(N_ITEMS) < 0.2).astype(float)
    values["anycap_failed"] = np.zeros(N_ITEMS)
    values["anycap_output_words"] = rng.normal(40, 10, N_ITEMS).round()
    metrics = tuple(values)
    lower = ("anycap_length_capped", "anycap_failed")
    return TaskRun(
        task=ANYCAP, metric_names=metrics, higher_is_better={m: m not in lower for m in metrics},
        harness_values={m: float(np.nanmean(v)) for m, v in values.items()},
        item_keys=tuple(f"id:anycap{i}" for i in range(N_ITEMS)), values=values,
        bool_valued={m: False for m in metrics},
        judges={ANYCAP_JUDGE: N_ITEMS}, judge_source="samples", samples_path=None,
        descriptive=frozenset({"anycap_output_words"}),
    )


def _runs() -> list[Run]:
    rng = np.random.default_rng(11)
    runs = []
    for index, name in enumerate(MODELS):
        # G-VEval quality falls with the index; AnyCap's rises, so the two tasks rank the models differently.
        tasks = {GVEVAL: _gveval_run(0.8 - 0.05 * index, rng), ANYCAP: _anycap_run(0.3 + 0.06 * index, rng)}
        runs.append(Run(name, (Path(f"/runs/{index}/results.json"),), "captions_file", f"model_name={name}",
                        "2026-11-25", tasks))
    return runs


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    board = build_leaderboard(_runs(), SETTINGS, report_url=lambda task, model: f"report/index.html#{task}/{model}")
    out = tmp_path_factory.mktemp("board")
    write_leaderboard(board, out)
    return board, out


def _tables(markdown: str, task: str) -> list[list[list[str]]]:
    """The Markdown tables of one task's section, as rows of cells (header first, rule row dropped)."""
    section = markdown.split(f"## {task}\n", 1)[1].split("\n## ", 1)[0]
    tables, current = [], []
    for line in section.splitlines() + [""]:
        if line.startswith("|"):
            if not set(line) <= set("|-: "):
                current.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_markdown_fits_a_120_column_terminal_for_ten_models(written):
    board, out = written
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    too_wide = [line for line in markdown.splitlines() if len(line) > MARKDOWN_WIDTH]
    assert too_wide == []
    assert len(board.rows) == 10
    # Every model is in every table of both tasks, once.
    for task in (GVEVAL, ANYCAP):
        for table in _tables(markdown, task):
            assert len(table) == 1 + len(MODELS)
    # The long names are cut in the middle in the tables (their ends tell 72b-ov-chat from 72b-ov-sft), and
    # spelled out in full under them.
    assert "| llava-onevi…b-ov-chat-hf |" in markdown and "| llava-onevi…2b-ov-sft-hf |" in markdown
    for name in MODELS:
        assert name in markdown


def test_shortened_names_stay_distinct_and_short():
    names = ["a" * 12 + "X" * 20 + "b" * 12, "a" * 12 + "Y" * 20 + "b" * 12, "a" * 12 + "Z" * 20 + "b" * 12, "short"]
    shorts = short_names(names)
    assert shorts["short"] == "short"
    assert len(set(shorts.values())) == 4 and max(len(s) for s in shorts.values()) <= MODEL_NAME_WIDTH
    assert shorts[names[1]].endswith("#2") and shorts[names[2]].endswith("#3")


def test_one_section_per_task_with_its_main_metric_first(written):
    board, out = written
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert markdown.count(f"## {GVEVAL}\n") == 1 and markdown.count(f"## {ANYCAP}\n") == 1
    # Headers drop the prefix all of a task's metrics share; a correlation's logged bounds become its interval.
    gveval_others = [m.removeprefix("gveval_") for m in GVEVAL_SCORES[1:] + KENDALL[::3] + ("gveval_failed",)]
    anycap_others = [m.removeprefix("anycap_") for m in ("anycap_avg_of_types", "anycap_brief", "anycap_failed")]
    for task, main_metric, others in ((GVEVAL, "mean", gveval_others), (ANYCAP, "score", anycap_others)):
        tables = _tables(markdown, task)
        header = tables[0][0]
        assert header[:3] == ["#", "Model", f"{main_metric} [95% CI]"]
        assert header[3:5] == ["Δ vs top [95% CI]", "p (Holm)"]
        # Every other metric of the task comes after, once.
        later = [cell.split(" (%)")[0] for table in tables[1:] for cell in table[0][2:]]
        assert sorted(later) == sorted(set(later))
        assert set(others) <= set(later)
        assert not any(cell.endswith(("_ci_low", "_ci_high")) for cell in later)
        # Rows in the task's own order: by its main metric, best first.
        ranks = [int(row[0]) for row in tables[0][1:]]
        assert ranks == sorted(ranks) and ranks[0] == 1
        values = [float(row[2].split()[0]) for row in tables[0][1:]]
        assert values == sorted(values, reverse=True)
    # The two tasks rank the models in opposite orders (see _runs), and each section shows its own.
    first_rows = {task: _tables(markdown, task)[0][1][1] for task in (GVEVAL, ANYCAP)}
    assert first_rows[GVEVAL].startswith("llava") and first_rows[ANYCAP] in ("weak", "video-llama3")
    assert "Ranked by gveval_mean (higher is better); 40 items." in markdown
    # The correlation's bounds, logged as two more metrics, are its interval.
    correlation = next(c for c in _tables(markdown, GVEVAL)[1][0] + _tables(markdown, GVEVAL)[2][0]
                       if c.startswith("kendall_b_mean"))
    assert correlation == "kendall_b_mean"


def test_rates_and_descriptive_values_come_after_the_scores(written):
    _, out = written
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    headers = [cell for table in _tables(markdown, ANYCAP)[1:] for cell in table[0][2:]]
    positions = {cell.split(" ")[0]: i for i, cell in enumerate(headers)}
    assert max(positions[t] for t in ANYCAP_TYPES) < positions["length_capped"]
    assert positions["failed"] < positions["output_words"]
    assert "length_capped (%)" in headers


def test_the_judge_is_named_once_per_task(written):
    board, out = written
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    page = (out / "leaderboard.html").read_text(encoding="utf-8")
    for judge in (GVEVAL_JUDGE, ANYCAP_JUDGE):
        assert markdown.count(judge.model) == 1
        assert page.count(judge.model) == 1
    # Wrapped, the footnote still carries the settings in full.
    flat = re.sub(r"\s+", " ", markdown)
    assert f"Judge (all 10 models): {GVEVAL_JUDGE.label()}" in flat
    assert not board.warnings  # one judge per task, same items, no failure rate above 2%


def test_different_judges_within_a_task_are_listed_per_model(tmp_path):
    runs = _runs()[:3]
    other = LoggedJudge(None, "local-gemma", judge_version="gveval-accr-video/1")
    moved = runs[2].tasks[GVEVAL]
    runs[2] = Run(runs[2].name, runs[2].results_paths, "captions_file", "", "2026-11-25",
                  {**runs[2].tasks, GVEVAL: TaskRun(**{**moved.__dict__, "judges": {other: N_ITEMS}})})
    board = build_leaderboard(runs, SETTINGS)
    write_leaderboard(board, tmp_path)
    markdown = (tmp_path / "leaderboard.md").read_text(encoding="utf-8")
    section = re.sub(r"\s+", " ", markdown.split(f"## {GVEVAL}\n", 1)[1].split("\n## ", 1)[0])
    assert "Judges differ: " in section and f"{runs[2].name}: local-gemma" in section
    assert any("different judge models or settings" in w for w in board.warnings)


def test_the_csv_stays_complete(written):
    board, out = written
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(MODELS)
    row = rows["weak"]
    for column in board.columns:
        for suffix in ("", "_ci_low", "_ci_high", "_n", "_replies", "_judge_noise_share"):
            assert f"{column.key}{suffix}" in row, column.key + suffix
    assert row[f"judge_{GVEVAL}"] == GVEVAL_JUDGE.label() and row[f"judge_{ANYCAP}"] == ANYCAP_JUDGE.label()
    assert row[f"rank_{ANYCAP}"] == "1" and row["results_paths"] == "/runs/9/results.json"
    assert float(row[f"{GVEVAL}/gveval_kendall_b_mean"]) > 0 and row[f"{GVEVAL}/gveval_kendall_b_mean_ci_low"] != ""
    # One reply per item: nothing is two-level, the judge-noise share is left empty, k is 1.
    assert row[f"{GVEVAL}/gveval_mean_replies"] == "1" and row[f"{GVEVAL}/gveval_mean_judge_noise_share"] == ""
    assert row[f"report_url_{GVEVAL}"] == f"report/index.html#{GVEVAL}/weak"


def test_rows_link_to_the_report_when_a_report_url_is_given(written, tmp_path):
    _, out = written
    page = (out / "leaderboard.html").read_text(encoding="utf-8")
    for task in (GVEVAL, ANYCAP):
        assert f'<a href="report/index.html#{task}/weak">weak</a>' in page
    unlinked = build_leaderboard(_runs()[:2], SETTINGS)
    write_leaderboard(unlinked, tmp_path)
    assert "<a href" not in (tmp_path / "leaderboard.html").read_text(encoding="utf-8")


def test_one_reply_per_item_shows_no_judge_noise_column(written):
    board, out = written
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert "Judge noise" not in markdown and "two-level" not in board.method


# ---------------------------------------------------------------------------------------------------------
# In a real browser (tests/support/browser.py: headless Chromium at 1366 x 900, a laptop screen)
# ---------------------------------------------------------------------------------------------------------


def test_the_page_fits_a_laptop_screen_in_a_real_browser(written, open_page, tmp_path):
    _, out = written
    visit = open_page(out / "leaderboard.html")
    page = visit.page
    assert visit.script_errors == []
    assert visit.offsite_requests() == []
    # The chart and each task's arena figure (inline since issue #60 item 8), decoded.
    assert visit.image_count() == 1 + visit.page.locator("figure.arena-figure img").count() and visit.broken_images() == []
    assert visit.page.locator("figure.arena-figure img").count() >= 1
    viewport = page.evaluate("() => document.documentElement.clientWidth")
    assert viewport == 1366
    # The main-metric tables fit, and nothing makes the page itself scroll sideways (the other-metrics
    # tables scroll inside their own box if they must).
    main_right = page.evaluate("() => Array.from(document.querySelectorAll('table.main')).map(t => t.getBoundingClientRect().right)")
    assert len(main_right) == 2 and max(main_right) <= viewport
    assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport
    # Sorting a main table by its main metric, ascending, puts the weakest model first; its rows link to the
    # model's items in the report.
    table = page.locator(f'table.main[data-task="{GVEVAL}"]')
    table.locator("th").nth(2).click()
    values = [float(text.split()[0]) for text in table.locator("tbody tr td:nth-child(3) .value").all_inner_texts()]
    assert values == sorted(values) and len(values) == 10
    assert table.locator("tbody tr").first.locator("a").get_attribute("href") == f"report/index.html#{GVEVAL}/weak"
    shot = visit.screenshot(tmp_path / "leaderboard.png")
    assert shot.read_bytes().startswith(b"\x89PNG")

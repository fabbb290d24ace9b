"""Small samples shown as if they were results (issue 46, item 9; HOSTILE.md class 10), through the real
lmms-eval runs and the real `capjudge leaderboard` command, judged by the test server.

- Two items, as a new user gets them from `capjudge demo --limit 2` (the demo's three caption sets on both demo
  tasks): a regression with an effect per item and per model fits two items exactly, and its bootstrap then
  keeps the half of the resamples that identify beta, all alike (it printed 134.2 [134.2, 134.2] on a 0-100
  score, "967 resamples undefined", and a change of order). The length-controlled column must say "not
  identified" with no number, the note must say why and claim no order change, the CSV must leave the
  figures empty, and no plot is drawn (the page says why in its place).
- The same with enough items but beta carried by one item alone (every other item's captions one length per
  model): over a third of the resamples leave beta undefined, more than the stated 10%.
- Ten items judged by a steep length-loving judge, whose scores extrapolated to the references' length fall
  below 0: beta is identified, and every length-controlled score outside G-VEval's 0-100 scale is flagged (⚠)
  in the Markdown, the CSV (`outside_scale`) and the page (checked in headless Chromium), never a plain number.
- A value outside the scale from a results file (lmms-eval's aggregate of a run without samples) is flagged too.
- AnyCap's per-type means that no item of a two-item subset has: lmms-eval's warning names the task, the metric
  and which items it counts, once per metric (it said "no judged item among 2: the mean is undefined (NaN)"
  four times, naming nothing).
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_server, run_lmms_eval
from tests.support.openai_server import prompt_text, with_logprobs

DEMO = REPO_ROOT / "tasks" / "demo"
SETS = ("good", "fair", "poor")
GVEVAL, ANYCAP = "gveval_demo", "anycap_style_demo"
NOT_IDENTIFIED = "not identified"


def _leaderboard(out: Path, *arguments: str):
    return run_capjudge("leaderboard", *arguments, "--out", str(out))


def _csv(out: Path) -> dict[str, dict[str, str]]:
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def _flat(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def _section(markdown: str, task: str) -> str:
    """The task's part of leaderboard.md (up to the next section)."""
    return markdown.split(f"\n## {task}\n", 1)[1].split("\n## ", 1)[0]


def _main_table(section: str) -> list[dict[str, str]]:
    """The task's first table as header -> cell rows."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| #"))
    table = [line for line in lines[start:start + lines[start:].index("")]]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in table[2:]]


# ---------------------------------------------------------------------------------------------------------
# Two items: `capjudge demo --limit 2`'s runs
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_items(tmp_path_factory):
    """The demo's three caption sets on both demo tasks, --limit 2 (the demo's own lmms-eval command), judged
    by the test server's rubric judge."""
    root = tmp_path_factory.mktemp("two_items")
    outcomes = {}
    with judge_server() as server:
        for name in SETS:
            outcomes[name] = run_lmms_eval(
                model="captions_file", model_args=f"path={DEMO / f'captions_{name}.jsonl'},model_name={name}",
                tasks=f"{GVEVAL},{ANYCAP}", output_path=root / "runs", judge_base_url=server.base_url,
                cache_path=root / "cache.sqlite", limit=2).outcome
    return root / "runs", outcomes


def test_two_items_identify_no_length_coefficient_and_no_order_change_is_claimed(two_items, tmp_path):
    runs, _ = two_items
    out = tmp_path / "board"
    done = _leaderboard(out, str(runs))
    assert done.returncode == 0, done.stderr
    assert "leaderboard_length_" not in done.stdout  # no plot is written, so none is announced
    assert not list(out.glob("leaderboard_length_*.png"))
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    board = _csv(out)
    assert set(board) == set(SETS)
    for task in (GVEVAL, ANYCAP):
        section = _section(markdown, task)
        flat = " ".join(section.split())
        # The column is there, and says so in every row: no number is shown as a result.
        rows = _main_table(section)
        assert len(rows) == 3 and {row["length-controlled [95% CI]"] for row in rows} == {NOT_IDENTIFIED}, rows
        assert "Length coefficient beta not identified (6 captions of 2 items): too few items" in flat
        assert "fewer than 5 judged items with captions for 3 of 3 models (fair: 2, good: 2, poor: 2)" in flat
        assert "no change of order is claimed" in flat
        assert "Order changes" not in flat and "beta =" not in flat and "resamples undefined" not in flat
        assert "orders every pair of models as the raw one does" not in flat  # not claimed either way
        assert "No length-controlled plot for this task: the data do not identify its length coefficient" in flat
        # The CSV, for programs: the figures left empty, the reason given, no flip.
        for name, row in board.items():
            for figure in ("length_controlled", "length_beta"):
                for end in ("", "_ci_low", "_ci_high"):
                    assert row[f"{task}/{figure}{end}"] == "", (name, figure, end, row[f"{task}/{figure}{end}"])
            assert row[f"length_order_flips_{task}"] == ""
            assert row[f"length_not_identified_{task}"].startswith("too few items: fewer than 5"), row
    # The rule is stated with the method.
    assert "beta counts as identified when every model has at least 5 judged items" in " ".join(markdown.split())


def test_two_items_on_the_page_say_not_identified_with_no_plot(two_items, tmp_path, open_page):
    runs, _ = two_items
    out = tmp_path / "board"
    assert _leaderboard(out, str(runs)).returncode == 0
    visit = open_page(out / "leaderboard.html")
    assert visit.script_errors == [] and visit.broken_images() == []
    for task in (GVEVAL, ANYCAP):
        table = visit.page.locator(f'table.main[data-task="{task}"]')
        assert table.locator("th").nth(3).inner_text().replace("\u200b", "").replace("\n", " ").startswith(
            "length-controlled")
        cells = [row.locator("td").nth(3) for row in table.locator("tbody tr").all()]
        assert [cell.inner_text() for cell in cells] == [NOT_IDENTIFIED] * 3
        assert "too few items" in cells[0].get_attribute("title")
        note = visit.page.locator(f"#task-{task} p.note.length-control")
        assert note.is_visible() and "beta not identified" in note.inner_text()
        assert visit.page.locator(f"#task-{task} p.no-length-plot").is_visible()
        assert visit.page.locator(f"#task-{task} figure.length-plot").count() == 0
    # The chart, and each task's arena figure, inline since issue #60 item 8 (a self-contained page): no length plot.
    assert visit.page.locator("figure.arena-figure img").count() == 2 and visit.image_count() == 1 + 2


def test_an_undefined_per_type_mean_names_its_task_metric_and_items(two_items):
    _, outcomes = two_items
    for name, outcome in outcomes.items():
        warnings = [line for line in outcome.stderr.splitlines() if "its mean is undefined (NaN)" in line]
        # The two items are both brief captions: the four other types' means are undefined, each said once.
        named = sorted(re.search(r"anycap_style_demo: (anycap_\w+) has no judged item among 2 \(it counts "
                                 r"(\w+) items only\): its mean is undefined \(NaN\)", line).groups()
                       for line in warnings)
        assert named == [("anycap_detail", "detail"), ("anycap_narrative", "narrative"), ("anycap_poem", "poem"),
                         ("anycap_style", "style")], (name, outcome.stderr[-3000:])
        assert "no judged item among 2: the mean is undefined" not in outcome.stderr  # the unnamed one is gone
        results = json.loads(next((outcome.output_path / name).rglob("*_results.json")).read_text())
        assert math.isnan(results["results"][ANYCAP]["anycap_poem,none"])  # still NaN, never 0


# ---------------------------------------------------------------------------------------------------------
# Ten items, a steep length-loving judge: beta identified, the length-controlled scores off the 0-100 scale
# ---------------------------------------------------------------------------------------------------------

WORDS = {"short": (20, 7, 15), "middle": (30, 5, 20), "long": (40, 3, 20)}  # base + (step * i) % spread


def _item_ids() -> list[str]:
    lines = (DEMO / "gveval_demo.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"] for line in lines if line.strip()]


def steep_score(caption: str) -> int:
    """60 points per e-fold of words: 20-60 words score 20-86, and a caption of the references' ~12 words would
    score about -11, off the scale: a length-controlled score is an extrapolation there."""
    words = caption.split()
    return max(0, min(100, round(60 * math.log(len(words)) - 160 - 5 * words.count("wrong"))))


def _steep_judge(body):
    text = prompt_text(body)
    caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
    s = steep_score(caption)
    return with_logprobs(f"The Accuracy score is α{s}α.\nThe Completeness score is β{s}β.\n"
                         f"The Conciseness score is ψ{s}ψ.\nThe Relevance score is δ{s}δ.")


@pytest.fixture(scope="module")
def steep(tmp_path_factory):
    root = tmp_path_factory.mktemp("steep")
    with judge_server(responder=_steep_judge) as server:
        for kind, (base, step, spread) in WORDS.items():
            captions = root / f"{kind}.jsonl"
            captions.write_text("".join(
                json.dumps({"id": item, "caption": " ".join(["wrong"] * (i % 2) + [f"w{j}" for j in range(
                    base + (step * i) % spread - i % 2)])}) + "\n" for i, item in enumerate(_item_ids())),
                encoding="utf-8")
            run_lmms_eval(model="captions_file", model_args=f"path={captions},model_name={kind}", tasks=GVEVAL,
                          output_path=root / "runs", judge_base_url=server.base_url, cache_path=root / "cache.sqlite")
    return root / "runs"


def test_length_controlled_scores_off_the_scale_are_flagged_everywhere(steep, tmp_path, open_page):
    out = tmp_path / "board"
    done = _leaderboard(out, str(steep))
    assert done.returncode == 0, done.stderr
    board = _csv(out)
    assert (out / f"leaderboard_length_{GVEVAL}.png").exists()  # identified: the plot is drawn, saying so
    from capjudge.metrics.files.runs import read_runs
    from capjudge.metrics.leaderboard.board import build_leaderboard
    from capjudge.metrics.leaderboard.length_plot import draw_length_plot, length_plots

    drawn = draw_length_plot(length_plots(build_leaderboard(read_runs([str(steep)])[0]))[GVEVAL])
    assert drawn.png() == (out / f"leaderboard_length_{GVEVAL}.png").read_bytes()
    title = drawn.figure.subfigs[0]._suptitle.get_text()
    assert "3 length-controlled scores outside the 0-100 scale (dashed: its ends)" in title, title
    lc = {name: float(row[f"{GVEVAL}/length_controlled"]) for name, row in board.items()}
    assert all(value < 0 for value in lc.values()), lc  # as built: the extrapolation leaves 0-100
    for name, row in board.items():
        assert row[f"length_not_identified_{GVEVAL}"] == ""
        flagged = row["outside_scale"].split("; ")
        assert f"{GVEVAL}/length_controlled" in flagged, row["outside_scale"]
        # Only what is outside: the raw mean and its interval are on the scale.
        assert f"{GVEVAL}/gveval_mean" not in flagged and f"{GVEVAL}/gveval_mean_ci_low" not in flagged
        assert 0 <= float(row[f"{GVEVAL}/gveval_mean"]) <= 100
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    section = _section(markdown, GVEVAL)
    for row in _main_table(section):
        assert row["length-controlled [95% CI]"].endswith("⚠"), row
        assert not row["mean [95% CI]"].endswith("⚠"), row
    flat = " ".join(section.split())
    listed = flat.split("⚠ Outside the 0-100 scale of gveval_mean (no score the judge can give", 1)[1].split(". ")[0]
    for name, value in lc.items():
        assert re.search(rf"{name}, length-controlled \[95% CI\]: {value:.1f} \[[^]]*\]", listed), (name, flat)
    # The page, in the real browser: the flag beside each length-controlled value, its reason as a tooltip, and
    # the sentence under the table.
    visit = open_page(out / "leaderboard.html")
    assert visit.script_errors == [] and visit.broken_images() == []
    table = visit.page.locator(f'table.main[data-task="{GVEVAL}"]')
    for row in table.locator("tbody tr").all():
        flag = row.locator("td").nth(3).locator("span.out-of-scale")
        assert flag.count() == 1 and flag.is_visible() and flag.inner_text() == "⚠"
        assert flag.get_attribute("title") == ("the value and its whole interval outside the 0-100 scale of "
                                               "gveval_mean: no score the judge can give")
        assert row.locator("td").nth(2).locator("span.out-of-scale").count() == 0
    note = visit.page.locator(f"#task-{GVEVAL} p.note.out-of-scale")
    assert note.is_visible() and "Outside the 0-100 scale of gveval_mean" in note.inner_text()
    assert visit.page.evaluate("() => document.documentElement.scrollWidth") <= 1366


def test_beta_carried_by_one_item_is_not_identified(steep, tmp_path):
    """Every item's captions but the first's one length per model: only that item tells length from model, so
    every resample that misses it (about (9/10)^10 = 35% of them) leaves beta undefined."""
    copy = tmp_path / "runs"
    shutil.copytree(steep, copy)
    for kind, (base, _, _) in WORDS.items():
        samples = next(copy.glob(f"{kind}/*_samples_{GVEVAL}.jsonl"))
        lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
        for i, line in enumerate(lines):
            words = base + (3 if i == 0 and kind == "short" else 0)
            line["judged"]["judgment"]["caption"] = " ".join(["w"] * words)
        samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "board"
    done = _leaderboard(out, str(copy))
    assert done.returncode == 0, done.stderr
    table = _main_table(_section((out / "leaderboard.md").read_text(encoding="utf-8"), GVEVAL))
    section = " ".join(_section((out / "leaderboard.md").read_text(encoding="utf-8"), GVEVAL).split())
    match = re.search(r"beta not identified \(30 captions of 10 items\): (\d+) of 2000 bootstrap resamples "
                      r"\((\d+)%, more than 10%\) leave beta undefined", section)
    assert match and 25 <= int(match.group(2)) <= 45, section
    assert "no change of order is claimed" in section and "Order changes" not in section
    assert {row["length-controlled [95% CI]"] for row in table} == {NOT_IDENTIFIED}
    assert not list(out.glob("leaderboard_length_*.png"))
    for row in _csv(out).values():
        assert row[f"{GVEVAL}/length_controlled"] == "" and row[f"{GVEVAL}/length_beta_ci_low"] == ""
        assert "bootstrap resamples" in row[f"length_not_identified_{GVEVAL}"]


def test_an_aggregate_off_the_scale_in_a_results_file_is_flagged(steep, tmp_path):
    """A run without its samples log is shown by lmms-eval's aggregate; one of 250 on a 0-100 score is no mean
    a model can have: flagged, beside the other runs' real ones."""
    copy = tmp_path / "runs"
    shutil.copytree(steep, copy)
    for samples in copy.glob(f"long/*_samples_{GVEVAL}.jsonl"):
        samples.unlink()
    results = next(copy.glob("long/*_results.json"))
    logged = json.loads(results.read_text(encoding="utf-8"))
    logged["results"][GVEVAL]["gveval_mean,none"] = 250.0
    results.write_text(json.dumps(logged), encoding="utf-8")
    out = tmp_path / "board"
    done = _leaderboard(out, str(copy), "--no-length-control")
    assert done.returncode == 0, done.stderr
    board = _csv(out)
    assert board["long"]["outside_scale"] == f"{GVEVAL}/gveval_mean"
    assert board["short"]["outside_scale"] == board["middle"]["outside_scale"] == ""
    section = _section((out / "leaderboard.md").read_text(encoding="utf-8"), GVEVAL)
    long_row = next(row for row in _main_table(section) if row["Model"] == "long")
    assert long_row["mean [95% CI]"] == "250.0 (no CI) ⚠"
    assert ("⚠ Outside the 0-100 scale of gveval_mean (no score the judge can give: an extrapolation, or an "
            "interval of a few items): long, mean [95% CI]: 250.0 (no CI).") in " ".join(section.split())


@pytest.mark.parametrize("logged", [[100, 0], ["0", "100"], [0, float("inf")], [True, 4], "0-100"])
def test_a_logged_scale_that_is_no_range_is_refused_naming_the_file(two_items, tmp_path, logged):
    """A judge capjudge does not ship is read from its logged facts: a `score_range` there that is not two
    finite numbers, low before high, is refused in one line naming the samples file (never a traceback, never a
    scale to flag against)."""
    runs, _ = two_items
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    samples = next(copy.glob(f"fair/*_samples_{GVEVAL}.jsonl"))
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line["judged"]["judge"]["name"] = "a-judge-from-elsewhere"
        line["judged"]["judge"]["descriptor"]["name"] = "a-judge-from-elsewhere"
        line["judged"]["judge"]["descriptor"]["score_range"] = logged
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = _leaderboard(tmp_path / "out", str(copy))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert samples.name in lines[0] and "score_range" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "leaderboard.md").exists()

"""The leaderboard's length-controlled column, on real lmms-eval runs judged by scripted judges of known
behaviour (the OpenAI-compatible test server with a responder of this module).

Three caption sets of the real `gveval_demo` task (10 items): `terse` (4-8 words, no error), `medium` (10-18
words, one wrong detail) and `verbose` (20-34 words, two wrong details); lengths vary within each set from
item to item, which is what identifies the length coefficient apart from the models. Two judges score them:
the length-blind judge sees only the wrong details (70 - 10 per error, a small fixed jitter), so it ranks
terse > medium > verbose; the length-loving judge adds 25 x ln(words) - 40 to the same scores, so its raw
ranking follows length (verbose > medium > terse). Each set is run through lmms-eval once per judge.
The column's plot (leaderboard_length_<task>.png, on the page beside the column) is checked on the same runs:
the numbers its artists carry against the table's, its place on the page in headless Chromium, its absence.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from capjudge.tasks.cli.main import main as capjudge_main
from tests.support.harness_runs import REPO_TASKS, judge_server, run_lmms_eval
from tests.support.openai_server import prompt_text, with_logprobs

TASK = "gveval_demo"
METRIC = "gveval_mean"
SETS = ("terse", "medium", "verbose")
ERRORS = {"terse": 0, "medium": 1, "verbose": 2}
WRONG_DETAILS = ("purple", "elephant")
LC = f"{TASK}/length_controlled"
BETA = f"{TASK}/length_beta"


def _item_ids() -> list[str]:
    lines = (REPO_TASKS / "demo" / "gveval_demo.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"] for line in lines if line.strip()]


def _caption(kind: str, i: int) -> str:
    words = {"terse": 4 + i % 5, "medium": 10 + (3 * i) % 9, "verbose": 20 + (7 * i) % 15}[kind]
    details = list(WRONG_DETAILS[: ERRORS[kind]])
    filler = [f"w{j}" for j in range(words - len(details))]
    return " ".join(details + filler)


def _jitter(caption: str) -> int:
    return int(hashlib.sha256(caption.encode()).hexdigest()[:8], 16) % 5 - 2


def blind_score(caption: str) -> int:
    errors = sum(caption.split().count(word) for word in WRONG_DETAILS)
    return 70 - 10 * errors + _jitter(caption)


def loving_score(caption: str) -> int:
    return max(0, min(100, round(blind_score(caption) - 40 + 25 * math.log(len(caption.split())))))


def _responder(score):
    def respond(body):
        text = prompt_text(body)
        caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
        s = score(caption)
        return with_logprobs(f"The Accuracy score is α{s}α.\nThe Completeness score is β{s}β.\n"
                             f"The Conciseness score is ψ{s}ψ.\nThe Relevance score is δ{s}δ.")
    return respond


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("length_runs")
    files = {}
    for kind in SETS:
        files[kind] = root / f"{kind}.jsonl"
        files[kind].write_text("".join(json.dumps({"id": item, "caption": _caption(kind, i)}) + "\n"
                                       for i, item in enumerate(_item_ids())), encoding="utf-8")
    outputs = {}
    for judge, score in (("blind", blind_score), ("loving", loving_score)):
        outputs[judge] = root / judge
        with judge_server(responder=_responder(score)) as server:
            for kind in SETS:
                run_lmms_eval(model="captions_file", model_args=f"path={files[kind]},model_name={kind}", tasks=TASK,
                              output_path=outputs[judge], judge_base_url=server.base_url,
                              cache_path=root / f"{judge}.sqlite")
    return outputs


def _leaderboard(capsys, out: Path, *arguments: str) -> tuple[int, str]:
    code = capjudge_main(["leaderboard", *arguments, "--out", str(out)])
    return code, capsys.readouterr().err


def _csv(out: Path) -> dict[str, dict[str, str]]:
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def _board(capsys, tmp_path, judge_output: Path, name: str) -> dict[str, dict[str, str]]:
    code, err = _leaderboard(capsys, tmp_path / name, str(judge_output))
    assert code == 0 and "warning" not in err, err
    return _csv(tmp_path / name)


def _ranking(rows: dict[str, dict[str, str]], column: str) -> list[str]:
    return sorted(rows, key=lambda name: -float(rows[name][column]))


# ---------------------------------------------------------------------------------------------------------
# (a) a length-loving judge, (b) a length-blind judge
# ---------------------------------------------------------------------------------------------------------


def test_a_length_loving_judge_is_undone_by_the_length_controlled_ranking(judged, tmp_path, capsys):
    blind = _board(capsys, tmp_path, judged["blind"], "blind")
    loving = _board(capsys, tmp_path, judged["loving"], "loving")
    raw = f"{TASK}/{METRIC}"
    # The worlds are as built: the blind judge prefers the short correct set, the loving one the long set.
    assert _ranking(blind, raw) == ["terse", "medium", "verbose"]
    assert _ranking(loving, raw) == ["verbose", "medium", "terse"]
    # Length control recovers the blind judge's order, and names the bias with an interval above 0.
    assert _ranking(loving, LC) == _ranking(blind, raw)
    row = loving["terse"]
    assert float(row[f"{BETA}_ci_low"]) > 0 and float(row[BETA]) > 0
    # The flips are listed: every pair of models changes order.
    assert loving["terse"][f"length_order_flips_{TASK}"] == "medium; verbose"
    markdown = (tmp_path / "loving" / "leaderboard.md").read_text(encoding="utf-8")
    assert "verbose above terse raw, terse above verbose length-controlled" in " ".join(markdown.split())


def test_a_length_blind_judge_shows_no_length_coefficient(judged, tmp_path, capsys):
    blind = _board(capsys, tmp_path, judged["blind"], "blind")
    row = blind["terse"]
    assert float(row[f"{BETA}_ci_low"]) < 0 < float(row[f"{BETA}_ci_high"])
    for name, values in blind.items():
        raw = float(values[f"{TASK}/{METRIC}"])
        assert float(values[f"{LC}_ci_low"]) <= raw <= float(values[f"{LC}_ci_high"]), name


# ---------------------------------------------------------------------------------------------------------
# (c) where it is shown, and an independent recomputation
# ---------------------------------------------------------------------------------------------------------


def _observations(output: Path):
    """(model, item, score, words, reference words) straight from the samples files, with plain numpy."""
    rows = []
    for samples in sorted(output.glob(f"*/*_samples_{TASK}.jsonl")):
        for line in samples.read_text(encoding="utf-8").splitlines():
            logged = json.loads(line)
            caption = logged["judged"]["judgment"]["caption"]
            references = ast.literal_eval(logged["target"])
            score = math.nan if logged[METRIC] is None else float(logged[METRIC])
            rows.append((samples.parent.name, logged["judged"]["item_id"], score,
                         len(caption.split()), float(np.median([len(r.split()) for r in references]))))
    return rows


def _fit(rows):
    """Dummy-variable OLS (every model and item a dummy, one item left out) and the LC formula."""
    models = sorted({r[0] for r in rows})
    items = sorted({r[1] for r in rows})
    y = np.array([r[2] for r in rows])
    logs = np.log(np.array([r[3] for r in rows], dtype=float))
    z = (logs - logs.mean()) / logs.std()
    z_ref = (np.log(np.array([r[4] for r in rows])) - logs.mean()) / logs.std()
    design = np.column_stack([[r[0] == m for r in rows] for m in models]
                             + [[r[1] == i for r in rows] for i in items[1:]] + [z]).astype(float)
    beta = np.linalg.lstsq(design, y, rcond=None)[0][-1]
    lc = {m: y[mask].mean() - beta * (z - z_ref)[mask].mean()
          for m in models for mask in [np.array([r[0] == m for r in rows])]}
    return beta, lc


def _bootstrap(rows, n_resamples: int, seed: int):
    """Materialised item resamples (each drawn copy of an item a new item), the fit redone on each."""
    items = sorted({r[1] for r in rows})
    draws = np.random.default_rng(seed).integers(0, len(items), size=(n_resamples, len(items)))
    betas, lcs = [], {m: [] for m in sorted({r[0] for r in rows})}
    for drawn in draws:
        resample = [(r[0], f"{copy}", *r[2:]) for copy, index in enumerate(drawn) for r in rows if r[1] == items[index]]
        # z is standardised once on the full sample, as the leaderboard does: carry the full sample's scale.
        beta, lc = _fit_on_scale(resample, rows)
        betas.append(beta)
        for m, values in lcs.items():
            values.append(lc[m])
    return np.array(betas), {m: np.array(v) for m, v in lcs.items()}


def _fit_on_scale(rows, scale_rows):
    logs_all = np.log(np.array([r[3] for r in scale_rows], dtype=float))
    models = sorted({r[0] for r in rows})
    items = sorted({r[1] for r in rows})
    y = np.array([r[2] for r in rows])
    z = (np.log(np.array([r[3] for r in rows], dtype=float)) - logs_all.mean()) / logs_all.std()
    z_ref = (np.log(np.array([r[4] for r in rows])) - logs_all.mean()) / logs_all.std()
    design = np.column_stack([[r[0] == m for r in rows] for m in models]
                             + [[r[1] == i for r in rows] for i in items[1:]] + [z]).astype(float)
    beta = np.linalg.lstsq(design, y, rcond=None)[0][-1]
    return beta, {m: y[mask].mean() - beta * (z - z_ref)[mask].mean()
                  for m in models for mask in [np.array([r[0] == m for r in rows])]}


def test_the_numbers_equal_an_independent_numpy_recomputation(judged, tmp_path, capsys):
    code, err = _leaderboard(capsys, tmp_path / "board", str(judged["loving"]), "--resamples", "300", "--seed", "7")
    assert code == 0, err
    board = _csv(tmp_path / "board")
    rows = _observations(judged["loving"])
    assert len(rows) == 30
    beta, lc = _fit(rows)
    assert float(board["terse"][BETA]) == pytest.approx(beta, rel=1e-9)
    for model, value in lc.items():
        assert float(board[model][LC]) == pytest.approx(value, rel=1e-9)
    betas, lcs = _bootstrap(rows, 300, 7)
    assert float(board["terse"][f"{BETA}_ci_low"]) == pytest.approx(np.percentile(betas, 2.5), rel=1e-9)
    assert float(board["terse"][f"{BETA}_ci_high"]) == pytest.approx(np.percentile(betas, 97.5), rel=1e-9)
    for model, values in lcs.items():
        assert float(board[model][f"{LC}_ci_low"]) == pytest.approx(np.percentile(values, 2.5), rel=1e-9)
        assert float(board[model][f"{LC}_ci_high"]) == pytest.approx(np.percentile(values, 97.5), rel=1e-9)


def test_the_column_and_note_are_in_the_markdown_csv_and_page(judged, tmp_path, capsys, open_page):
    board = _board(capsys, tmp_path, judged["loving"], "board")
    out = tmp_path / "board"
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    header = next(line for line in markdown.splitlines() if line.startswith("| #"))
    cells = [cell.strip() for cell in header.strip("|").split("|")]
    # Right beside the main score.
    assert cells[2].startswith("mean [95% CI]") and cells[3] == "length-controlled [95% CI]"
    flat = " ".join(markdown.split())
    beta = float(board["terse"][BETA])
    # The task's scale: one decimal when some mean is 10 or more (as every other score of the task shows).
    places = 1 if any(abs(float(v[f"{TASK}/{METRIC}"])) >= 10 for v in board.values()) else 2
    assert f"Length coefficient beta = {beta:+.{places}f}" in flat
    assert "median word count of the item's reference captions" in flat
    terse_row = next(line for line in markdown.splitlines() if line.startswith("| ") and " terse " in line)
    assert f"{float(board['terse'][LC]):.{places}f} [{float(board['terse'][LC + '_ci_low']):.{places}f}," in terse_row
    # The page, in the real browser: the column in the main table, the note under it.
    visit = open_page(out / "leaderboard.html")
    assert visit.script_errors == []
    table = visit.page.locator(f'table.main[data-task="{TASK}"]')
    assert table.locator("th").nth(3).inner_text().replace("\u200b", "").replace("\n", " ") == "length-controlled [95% CI]"
    shown = {row.locator("td").nth(1).inner_text(): row.locator("td").nth(3).locator(".value").inner_text()
             for row in table.locator("tbody tr").all()}
    assert shown == {name: f"{float(values[LC]):.{places}f}" for name, values in board.items()}
    note = visit.page.locator(f'#task-{TASK} p.note.length-control')
    assert note.is_visible() and f"beta = {beta:+.{places}f}" in note.inner_text()
    assert visit.page.evaluate("() => document.documentElement.scrollWidth") <= 1366


def test_the_column_can_be_turned_off(judged, tmp_path, capsys):
    code, err = _leaderboard(capsys, tmp_path / "off", str(judged["loving"]), "--no-length-control")
    assert code == 0, err
    text = "".join((tmp_path / "off" / name).read_text(encoding="utf-8") for name in ("leaderboard.md", "leaderboard.csv"))
    assert "length-controlled" not in text.lower() and "length_beta" not in text and "Length coefficient" not in text


# ---------------------------------------------------------------------------------------------------------
# (d) hostile inputs
# ---------------------------------------------------------------------------------------------------------


def _edited_copy(judged, tmp_path, edit) -> Path:
    """A copy of the loving judge's runs with the verbose run's samples edited line by line."""
    copy = tmp_path / "edited"
    shutil.copytree(judged["loving"], copy)
    samples = next(copy.glob(f"verbose/*_samples_{TASK}.jsonl"))
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    samples.write_text("".join(json.dumps(edit(i, line)) + "\n" for i, line in enumerate(lines)), encoding="utf-8")
    return copy


@pytest.mark.parametrize("how", ["caption null", "caption key gone", "no record"])
def test_a_run_without_its_captions_loses_the_column_with_a_warning(judged, tmp_path, capsys, how):
    def edit(i, line):
        if i == 3:
            if how == "caption null":
                line["judged"]["judgment"]["caption"] = None
            elif how == "caption key gone":
                del line["judged"]["judgment"]["caption"]
            else:
                del line["judged"]
        return line

    copy = _edited_copy(judged, tmp_path, edit)
    code, err = _leaderboard(capsys, tmp_path / "out", str(copy))
    assert code == 0
    warnings = [line for line in err.splitlines() if "length-controlled" in line]
    assert len(warnings) == 1 and "'verbose'" in warnings[0] and "line 4" in warnings[0], err
    text = "".join((tmp_path / "out" / name).read_text(encoding="utf-8")
                   for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html"))
    assert "length_controlled" not in text and "length-controlled [" not in text and "Length coefficient" not in text
    assert "no length-controlled column" in text  # the warning is on the pages too


@pytest.mark.parametrize("bad", [5, ["a", "list"], {"text": "x"}])
def test_a_caption_that_is_not_text_is_refused_naming_the_file_and_line(judged, tmp_path, capsys, bad):
    def edit(i, line):
        if i == 2:
            line["judged"]["judgment"]["caption"] = bad
        return line

    copy = _edited_copy(judged, tmp_path, edit)
    code, err = _leaderboard(capsys, tmp_path / "out", str(copy))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert re.search(r"_samples_gveval_demo\.jsonl, line 3", lines[0]) and "caption" in lines[0]
    assert not (tmp_path / "out" / "leaderboard.md").exists()


def test_an_unjudged_item_is_left_out_for_its_model_not_counted_as_zero(judged, tmp_path, capsys):
    def edit(i, line):
        if i == 0:
            line[METRIC] = None
        return line

    copy = _edited_copy(judged, tmp_path, edit)
    code, err = _leaderboard(capsys, tmp_path / "out", str(copy), "--resamples", "0")
    assert code == 0, err
    rows = [r for r in _observations(copy) if not (r[0] == "verbose" and r[1] == _item_ids()[0])]
    rows = [r for r in rows if not math.isnan(r[2])]
    assert len(rows) == 29
    beta, lc = _fit(rows)
    board = _csv(tmp_path / "out")
    assert float(board["verbose"][BETA]) == pytest.approx(beta, rel=1e-9)
    assert float(board["verbose"][LC]) == pytest.approx(lc["verbose"], rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# The statistic itself, on an unbalanced panel (some models lack some items)
# ---------------------------------------------------------------------------------------------------------


def test_the_statistic_equals_dummy_ols_when_models_lack_items():
    from capjudge.metrics.statistics.length_control import length_controlled

    rng = np.random.default_rng(3)
    rows = []
    for m, name in enumerate(("a", "b", "c", "d")):
        for i in range(25):
            if (m + i) % 6 == 0:  # every model misses some items, each its own
                continue
            words = int(rng.integers(4, 30)) * (m + 1)
            rows.append((name, f"i{i:02d}", 5.0 * m + 0.4 * i + 3.0 * math.log(words) + rng.normal(), words,
                         float(rng.integers(8, 15))))
    # The same reference length for every candidate of an item.
    references = {r[1]: r[4] for r in rows}
    rows = [(*r[:4], references[r[1]]) for r in rows]
    fit = length_controlled([r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows],
                            [r[0] for r in rows], [r[1] for r in rows], n_resamples=200, seed=5)
    beta, lc = _fit(rows)
    assert fit.beta.value == pytest.approx(beta, rel=1e-9)
    assert {m: v.value for m, v in fit.scores.items()} == pytest.approx(lc, rel=1e-9)
    betas, lcs = _bootstrap(rows, 200, 5)
    assert (fit.beta.ci_low, fit.beta.ci_high) == pytest.approx(tuple(np.percentile(betas, [2.5, 97.5])), rel=1e-9)
    for m, values in lcs.items():
        assert (fit.scores[m].ci_low, fit.scores[m].ci_high) == pytest.approx(
            tuple(np.percentile(values, [2.5, 97.5])), rel=1e-9)


def test_the_statistic_refuses_what_defines_no_coefficient():
    from capjudge.metrics.statistics.length_bias import LengthBiasError
    from capjudge.metrics.statistics.length_control import length_controlled

    with pytest.raises(LengthBiasError, match="two scores for one item"):
        length_controlled([1, 2, 3], [3, 4, 5], [4, 4, 4], ["a", "a", "b"], ["i", "i", "i"])
    # Each model always writes the same length: length and model cannot be told apart.
    with pytest.raises(LengthBiasError, match="length coefficient is undefined"):
        length_controlled([1, 2, 3, 4], [3, 3, 9, 9], [4, 4, 4, 4], ["a", "a", "b", "b"], ["i", "j", "i", "j"])


# ---------------------------------------------------------------------------------------------------------
# The plot: leaderboard_length_<task>.png, on the page beside the column
# ---------------------------------------------------------------------------------------------------------

PLOT = f"leaderboard_length_{TASK}.png"


def _drawn(arguments: list[str], settings):
    """The task's plot drawn from a board built through the library on the same runs (what the CLI draws)."""
    from capjudge.metrics.files.runs import read_runs
    from capjudge.metrics.leaderboard.board import build_leaderboard
    from capjudge.metrics.leaderboard.length_plot import draw_length_plot, length_plots

    runs, notes = read_runs(arguments)
    board = build_leaderboard(runs, settings, warnings=notes)
    return board, draw_length_plot(length_plots(board)[TASK])


def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()
    with Image.open(path) as image:
        return image.size


def _points(container) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An errorbar's marker x and y, and its whiskers' (low, high) ends, as matplotlib holds them."""
    xy = container.lines[0].get_xydata()
    ends = np.array([[segment[0][0], segment[1][0]] for segment in container.lines[2][0].get_segments()])
    return xy[:, 0], xy[:, 1], ends


def test_the_plot_draws_the_tables_numbers(judged, tmp_path, capsys):
    from capjudge.metrics.leaderboard.stats import LeaderboardSettings

    out = tmp_path / "board"
    code, err = _leaderboard(capsys, out, str(judged["loving"]), "--resamples", "300", "--seed", "7")
    assert code == 0, err
    board_csv = _csv(out)
    width, height = _png_size(out / PLOT)
    assert 500 <= width <= 1200 and 300 <= height <= 1200
    _, drawn = _drawn([str(judged["loving"])], LeaderboardSettings(n_resamples=300, seed=7))
    assert drawn.png() == (out / PLOT).read_bytes()  # the file is this figure
    # Top to bottom in the length-controlled ranking of the table, each label naming both of the table's ranks.
    order = _ranking(board_csv, LC)
    assert [label.split("\n")[0] for label in drawn.labels] == order == ["terse", "medium", "verbose"]
    raw_order = _ranking(board_csv, f"{TASK}/{METRIC}")
    for label, name in zip(drawn.labels, order):
        assert label.split("\n")[1] == f"raw #{raw_order.index(name) + 1} → LC #{order.index(name) + 1}"
    axes = drawn.raw.lines[0].axes
    assert [t.get_text() for t in axes.get_yticklabels()] == list(drawn.labels)
    # Every pair changes order here: every label is marked.
    assert {t.get_color() for t in axes.get_yticklabels()} == {"#c0392b"}
    for container, column in ((drawn.controlled, LC), (drawn.raw, f"{TASK}/{METRIC}")):
        x, y, ends = _points(container)
        assert list(y) == sorted(y, reverse=True)  # the first model on top
        assert x == pytest.approx([float(board_csv[name][column]) for name in order], rel=1e-12)
        assert ends == pytest.approx(np.array([[float(board_csv[name][f"{column}_ci_low"]),
                                                float(board_csv[name][f"{column}_ci_high"])] for name in order]), rel=1e-12)
    x, _, ends = _points(drawn.beta)
    row = board_csv["terse"]
    assert x == pytest.approx([float(row[BETA])], rel=1e-12)
    assert ends == pytest.approx(np.array([[float(row[f"{BETA}_ci_low"]), float(row[f"{BETA}_ci_high"])]]), rel=1e-12)
    beta = float(row[BETA])
    assert drawn.beta_title.get_text().startswith(f"beta = {beta:+.1f} [") and "CI above 0" in drawn.beta_title.get_text()
    # leaderboard.md shows it under the column's note and says what it is.
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert f"![length-controlled plot]({PLOT})" in markdown.splitlines()
    assert max(len(line) for line in markdown.splitlines()) <= 120


def test_the_page_shows_the_plot_beside_the_column(judged, tmp_path, capsys, open_page):
    import base64

    out = tmp_path / "board"
    code, err = _leaderboard(capsys, out, str(judged["loving"]))
    assert code == 0 and (out / PLOT).exists(), err
    visit = open_page(out / "leaderboard.html")
    page = visit.page
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.broken_images() == []
    image = page.locator(f"#task-{TASK} figure.length-plot img")
    assert image.count() == 1 and image.is_visible()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert natural == list(_png_size(out / PLOT)) and natural[0] > 0
    src = image.get_attribute("src")
    assert base64.b64decode(src.split(",", 1)[1]) == (out / PLOT).read_bytes()  # inline: the page stands alone
    # Beside the main table, whose fourth column is the length-controlled one; the page does not scroll sideways.
    table = page.locator(f'table.main[data-task="{TASK}"]')
    assert table.locator("th").nth(3).inner_text().replace("\u200b", "").replace("\n", " ").startswith("length-controlled")
    table_box, image_box = table.bounding_box(), image.bounding_box()
    assert image_box["x"] >= table_box["x"] + table_box["width"]
    assert image_box["y"] < table_box["y"] + table_box["height"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1366
    caption = page.locator(f"#task-{TASK} figure.length-plot figcaption").inner_text()
    assert PLOT in caption and "ordered by the length-controlled ranking" in caption
    shot = visit.screenshot(tmp_path / "page.png")
    shot_width, shot_height = _png_size(shot)
    assert shot_width == 1366 and shot_height >= image_box["y"] + image_box["height"]
    figure_shot = tmp_path / "figure.png"
    page.locator(f"#task-{TASK} figure.length-plot").screenshot(path=str(figure_shot))
    figure_width, figure_height = _png_size(figure_shot)
    assert figure_width >= round(image_box["width"]) and figure_height >= round(image_box["height"])


def test_no_plot_and_no_link_when_length_control_is_off(judged, tmp_path, capsys):
    out = tmp_path / "board"
    code, err = _leaderboard(capsys, out, str(judged["loving"]))
    assert code == 0 and (out / PLOT).exists(), err
    # Again into the same folder, turned off: the earlier plot goes with the column.
    code, err = _leaderboard(capsys, out, str(judged["loving"]), "--no-length-control")
    assert code == 0, err
    # The arena's plot (issue #49, on by default) stays: only the length plot goes with its column.
    assert sorted(path.name for path in out.iterdir()) == ["leaderboard.csv", "leaderboard.html", "leaderboard.md",
                                                           "leaderboard.png", "leaderboard_arena_gveval_demo.png"]
    page = (out / "leaderboard.html").read_text(encoding="utf-8")
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    for text in (page, markdown):
        assert "leaderboard_length" not in text and 'class="length-plot' not in text and "length-controlled" not in text
    # The chart and the arena's figure (inline since issue #60 item 8), no length plot.
    assert page.count("<img") == 2 and page.count('<figure class="arena-figure"') == 1


@pytest.mark.parametrize("how", ["captions not logged", "one length per model"])
def test_a_task_without_length_controlled_values_says_so_instead_of_a_plot(judged, tmp_path, capsys, open_page, how):
    copy = tmp_path / "edited"
    shutil.copytree(judged["loving"], copy)
    words = {"terse": 5, "medium": 12, "verbose": 25}
    for kind in SETS:
        samples = next(copy.glob(f"{kind}/*_samples_{TASK}.jsonl"))
        lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
        for i, line in enumerate(lines):
            if how == "captions not logged" and kind == "verbose" and i == 3:
                line["judged"]["judgment"]["caption"] = None
            elif how == "one length per model":  # length cannot be told from the model: beta is undefined
                line["judged"]["judgment"]["caption"] = " ".join(["w"] * words[kind])
        samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "out"
    code, err = _leaderboard(capsys, out, str(copy))
    assert code == 0, err
    assert not list(out.glob("leaderboard_length_*"))
    why = "see the warnings" if how == "captions not logged" else "its length coefficient is undefined"
    markdown = " ".join((out / "leaderboard.md").read_text(encoding="utf-8").split())
    assert "No length-controlled plot for this task:" in markdown and why in markdown
    visit = open_page(out / "leaderboard.html")
    note = visit.page.locator(f"#task-{TASK} p.no-length-plot")
    assert note.is_visible() and why in note.inner_text()
    # The chart and the arena's figure (inline since issue #60 item 8); no empty plot, no dangling link.
    assert visit.image_count() == 2 and visit.page.locator("figure.arena-figure img").count() == 1 and visit.broken_images() == []


HOSTILE_NAME = '<script>pwned()</script> "quoted" \'single\'\nsecond line $\\alpha$ cost $5 ' + "x" * 300


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. matplotlib's "Glyph 13 missing": a name drawn raw
def test_hostile_model_names_are_drawn_and_shown_as_text(judged, tmp_path, capsys, open_page):
    from capjudge.metrics.files.model_names import LABEL_WIDTH
    from capjudge.metrics.leaderboard.stats import LeaderboardSettings

    names = {"terse": HOSTILE_NAME, "medium": "<b>medium</b>&amp;", "verbose": "$x^2$ \"v\"\r\n"}
    arguments = [f"{names[kind]}={judged['loving'] / kind}" for kind in SETS]
    out = tmp_path / "out"
    code, err = _leaderboard(capsys, out, *arguments)
    assert code == 0, err
    assert _png_size(out / PLOT)[0] > 0
    _, drawn = _drawn(arguments, LeaderboardSettings())
    assert drawn.png() == (out / PLOT).read_bytes()
    shown = [label.split("\n")[0] for label in drawn.labels]
    assert len(shown) == 3 and all(len(label) <= LABEL_WIDTH for label in shown)
    assert all("\r" not in label and label.count("\n") == 1 for label in drawn.labels)  # only the ranks' line
    assert '$x^2$ "v"↵↵' in shown
    assert shown[0].startswith("<script>") and shown[0].endswith("x" * 10) and "…" in shown[0]
    assert "<b>medium</b>&amp;" in shown
    visit = open_page(out / "leaderboard.html")
    assert visit.script_errors == [] and visit.broken_images() == []  # pwned() was never called: not a script
    assert visit.page.locator("b").count() == 0 and visit.page.locator("script").count() == 1
    cells = visit.page.locator(f'table.main[data-task="{TASK}"] td.model').all_text_contents()
    # The names exactly, as text (an HTML parser reads a CR LF in text as one LF).
    assert sorted(cells) == sorted(name.replace("\r\n", "\n") for name in names.values())
    assert visit.page.locator(f"#task-{TASK} figure.length-plot img").count() == 1


def test_runs_the_leaderboard_refuses_get_no_plot(judged, tmp_path, capsys):
    # A NAME= label on a folder of three runs: refused as before, in one line, and nothing is written.
    out = tmp_path / "out"
    code, err = _leaderboard(capsys, out, f"{HOSTILE_NAME.splitlines()[0]}={judged['loving']}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "a NAME= label needs one run" in lines[0], err
    assert not list(out.glob("leaderboard*"))


def test_task_names_become_safe_distinct_file_names(judged, tmp_path):
    """A task's name is data (a results file's key): its plot's file stays in --out, one per task."""
    import dataclasses

    from capjudge.metrics.leaderboard.length_plot import file_names, render_length_pngs
    from capjudge.metrics.leaderboard.render import write_leaderboard
    from capjudge.metrics.leaderboard.stats import LeaderboardSettings

    board, _ = _drawn([str(judged["loving"])], LeaderboardSettings(n_resamples=50))
    tasks = ['../../escape "<b>" $x$', "a/b", "a?b", "x" * 300]
    control, column = board.length_control[TASK], board.task_rank_columns[TASK]
    renamed = dataclasses.replace(board, length_control={task: control for task in tasks},
                                  task_rank_columns={**board.task_rank_columns, **{task: column for task in tasks}})
    names = file_names(renamed)
    assert list(names.values()) == ["leaderboard_length_.._.._escape___b____x_.png", "leaderboard_length_a_b.png",
                                    "leaderboard_length_a_b_2.png", f"leaderboard_length_{'x' * 60}.png"]
    assert set(render_length_pngs(renamed)) == set(names.values())
    out = tmp_path / "out"
    files = write_leaderboard(renamed, out)
    assert sorted(path.name for path in files.length_plots) == sorted(names.values())
    assert all(path.parent == out for path in files.length_plots)
    # and the arena's plot of the board's real task (issue #49: on by default; the renamed tasks have no arena)
    assert sorted(path.name for path in tmp_path.rglob("*.png")) == sorted([*names.values(), "leaderboard.png",
                                                                            "leaderboard_arena_gveval_demo.png"])

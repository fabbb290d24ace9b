"""`capjudge leaderboard` with the arena (issue #49 items 1 and 6), through the real command line on three real
lmms-eval runs of the demo task judged by the test server (tests/metrics/arena/test_arena_runs.py's fixture): the column
"arena (Elo, 95% CI)" in the main table of leaderboard.md, .csv and .html equal to a logistic regression fitted
here on the samples files, the arena's own part (win rates counted here, order changes, method, the linked
PNG), `--format json`, `--no-arena`, the page in real headless Chromium (also copied alone to another folder: every
figure inline), output names refused before anything is written, and the tasks no arena can be made for
(one model; two runs of disjoint items) given one line while the rest of the leaderboard stands."""

from __future__ import annotations

import base64
import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from capjudge.tasks.cli.main import main as capjudge_main
from PIL import Image
from tests.metrics.arena.test_arena_ratings import independent_elo
from tests.metrics.arena.test_arena_runs import RUN_SETS, _direct_scores, _run_name, runs_folder  # noqa: F401 (the fixture)
from tests.metrics.leaderboard.test_leaderboard_length import METRIC, TASK

pytestmark = pytest.mark.slow  # real lmms-eval runs (about 40 s for the three)

HEADER = "arena (Elo, 95% CI)"
PLOT = f"leaderboard_arena_{TASK}.png"


def _leaderboard(capsys, out: Path, *arguments: str) -> tuple[int, str, str]:
    code = capjudge_main(["leaderboard", *arguments, "--out", str(out), "--resamples", "200"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _csv(out: Path) -> dict[str, dict[str, str]]:
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def _section(markdown: str, title: str) -> str:
    return markdown.split(title, 1)[1].split("\n## ", 1)[0]


def _win_rates(direct: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """a's share of the points against b over the items both have (ties half), counted item by item."""
    found = {}
    for a in direct:
        for b in direct:
            shared = sorted(set(direct[a]) & set(direct[b]))
            if a != b and shared:
                found[(a, b)] = sum(1.0 if direct[a][k] > direct[b][k] else 0.5 if direct[a][k] == direct[b][k] else 0.0
                                    for k in shared) / len(shared)
    return found


@pytest.fixture(scope="module")
def expected(runs_folder):  # noqa: F811
    direct = _direct_scores(runs_folder)
    elo = independent_elo(direct)
    means = {m: sum(v.values()) / len(v) for m, v in direct.items()}
    by_mean = sorted(means, key=lambda m: -means[m])
    differs = {(a, b) for i, a in enumerate(by_mean) for b in by_mean[i + 1:] if elo[b] > elo[a]}
    return {"direct": direct, "elo": elo, "means": means, "differs": differs, "wins": _win_rates(direct)}


def test_the_arena_is_a_column_beside_the_mean_and_a_part_of_its_own(runs_folder, expected, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "board"
    code, printed, err = _leaderboard(capsys, out, str(runs_folder))
    assert code == 0, err
    assert str(out / PLOT) in printed  # the summary line names the plot it wrote
    rows = _csv(out)
    elo = expected["elo"]
    ranking = sorted(elo, key=lambda m: -elo[m])
    for model, value in elo.items():
        assert float(rows[model][f"{TASK}/arena_elo"]) == pytest.approx(value, abs=0.01)
        assert float(rows[model][f"{TASK}/arena_elo_ci_low"]) <= value <= float(rows[model][f"{TASK}/arena_elo_ci_high"])
        assert rows[model][f"arena_rank_{TASK}"] == str(ranking.index(model) + 1)
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    # The main table (cut in two at 120 columns, each part after rank and model): the column after the mean
    # score's comparison, each model's rating rounded.
    headers = [cell.strip() for line in markdown.split("### Arena", 1)[0].splitlines() if line.startswith("| #")
               for cell in line.strip("|").split("|")[2:]]
    assert headers[headers.index("p (Holm)") + 1] == HEADER
    main_rows = [line for line in markdown.split("### Arena", 1)[0].split("Other metrics", 1)[0].splitlines()
                 if line.startswith("|") and HEADER not in line]
    for model, value in elo.items():
        assert any(f"| {model} " in line and f"| {value:.0f} [" in " ".join(line.split()) for line in main_rows), model
    arena = _section(markdown, "### Arena\n")
    # The win-rate matrix, rows and columns in rating order, each cell the share counted here.
    after_header = arena.split("| vs #1 ", 1)[1].splitlines()[2:]
    matrix = [line for line in after_header if line.startswith("|")][:3]
    assert len(matrix) == 3
    for line, a in zip(matrix, ranking):
        shares = [cell.strip() for cell in line.strip("|").split("|")][2:]
        assert shares == ["—" if a == b else f"{100 * expected['wins'][(a, b)]:.0f}%" for b in ranking], line
    for a, b in expected["differs"]:
        assert f"{a} above {b} by mean {METRIC}" in " ".join(arena.split())
    if not expected["differs"]:
        assert "The arena orders every pair of models as the mean score does." in arena
    assert f"![arena ratings]({PLOT})" in arena and "Bradley-Terry" in arena and "200 resamples" in " ".join(arena.split())
    image = Image.open(io.BytesIO((out / PLOT).read_bytes()))
    assert image.format == "PNG" and image.size[0] > 100


def test_the_json_output_carries_the_arena(runs_folder, expected, tmp_path, capsys):  # noqa: F811
    code, printed, err = _leaderboard(capsys, tmp_path / "board", str(runs_folder), "--format", "json")
    assert code == 0, err
    document = json.loads(printed)
    arena = document["arena"][TASK]
    assert list(arena["ratings"]) == sorted(expected["elo"], key=lambda m: -expected["elo"][m])
    for model, value in expected["elo"].items():
        assert arena["ratings"][model]["elo"] == pytest.approx(value, abs=0.01)
        assert arena["ratings"][model]["mean_score"] == pytest.approx(expected["means"][model])
    for (a, b), share in expected["wins"].items():
        assert arena["win_rates"][a][b] == pytest.approx(share)
    assert {tuple(pair) for pair in arena["order_differs"]} == expected["differs"]
    assert document["arena_not_made"] == {} and document["files"]["arena_plots"] == [str(tmp_path / "board" / PLOT)]
    assert {m["name"]: m["task_ranks"][TASK] for m in document["models"]} == {
        m: sorted(expected["means"], key=lambda x: -expected["means"][x]).index(m) + 1 for m in expected["means"]}


def test_no_arena_leaves_the_column_the_part_and_the_plot_out(runs_folder, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "board"
    assert _leaderboard(capsys, out, str(runs_folder))[0] == 0 and (out / PLOT).exists()
    code, _, err = _leaderboard(capsys, out, str(runs_folder), "--no-arena")
    assert code == 0, err
    assert not (out / PLOT).exists()  # the earlier plot goes with the arena
    for name in ("leaderboard.md", "leaderboard.html", "leaderboard.csv"):
        text = (out / name).read_text(encoding="utf-8").replace(str(runs_folder), "RUNS")  # its path says arena_runs
        assert "arena" not in text.lower(), name


def test_the_page_shows_the_arena_in_a_real_browser(runs_folder, expected, tmp_path, capsys, open_page):  # noqa: F811
    out = tmp_path / "board"
    assert _leaderboard(capsys, out, str(runs_folder))[0] == 0
    visit = open_page(out / "leaderboard.html")
    page = visit.page
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.broken_images() == []
    viewport = page.evaluate("() => document.documentElement.clientWidth")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport
    main = page.locator(f'table.main[data-task="{TASK}"]')
    headers = main.locator("thead th").all_inner_texts()
    column = headers.index(HEADER) + 1
    assert headers[column - 2] == "p (Holm)"
    shown = dict(zip(main.locator("tbody td.model").all_inner_texts(),
                     main.locator(f"tbody td:nth-child({column}) .value").all_inner_texts()))
    assert shown == {m: f"{v:.0f}" for m, v in expected["elo"].items()}
    assert main.evaluate("t => t.getBoundingClientRect().right") <= viewport
    # Sorting the main table by the arena column, descending after two clicks, gives the rating order.
    main.locator("thead th").nth(column - 1).click()
    main.locator("thead th").nth(column - 1).click()
    by_rating = sorted(expected["elo"], key=lambda m: -expected["elo"][m])
    assert main.locator("tbody td.model").all_inner_texts() in (by_rating, by_rating[::-1])
    arena = page.locator(f"#task-{TASK} div.arena")
    assert arena.count() == 1 and arena.locator("h3").inner_text() == "Arena"
    assert arena.locator("table.arena tbody tr").count() == 3 and arena.locator("table.arena-wins tbody tr").count() == 3
    assert arena.locator("table.arena tbody td.model").all_inner_texts() == by_rating
    # The figure is the file written beside the page, inline (issue #60 item 8: it was a link to that file).
    figure = arena.locator("figure.arena-figure img")
    source = figure.get_attribute("src")
    assert figure.count() == 1 and source.startswith("data:image/png;base64,")
    assert base64.b64decode(source.split(",", 1)[1]) == (out / PLOT).read_bytes()
    assert figure.evaluate("image => image.naturalWidth") > 0
    changes = arena.locator("ul.arena-order li")
    assert {(changes.nth(k).get_attribute("data-above-by-mean"), changes.nth(k).get_attribute("data-above-by-rating"))
            for k in range(changes.count())} == expected["differs"]
    assert "Bradley-Terry" in arena.locator("p.arena-method").inner_text()
    assert visit.screenshot(tmp_path / "arena.png").read_bytes().startswith(b"\x89PNG")


def test_the_page_copied_alone_shows_every_figure(runs_folder, tmp_path, capsys, open_page):  # noqa: F811
    """Issue #60 item 8: the page moved (or mailed) without the PNGs beside it still shows every image."""
    out = tmp_path / "board"
    assert _leaderboard(capsys, out, str(runs_folder))[0] == 0
    alone = tmp_path / "elsewhere" / "leaderboard.html"
    alone.parent.mkdir()
    shutil.copy(out / "leaderboard.html", alone)
    visit = open_page(alone)
    images = visit.page.locator("img")
    # The chart, the task's length-controlled plot and its arena's figure, each decoded to a picture.
    assert images.count() == 3 and visit.broken_images() == []
    assert all(width > 0 for width in images.evaluate_all("all => all.map(image => image.naturalWidth)"))
    # Nothing asked for but the page itself and inline data: no file beside it, nothing off the machine.
    assert [url for url in visit.requests if not url.startswith("data:") and url != alone.resolve().as_uri()] == []


def _listing(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): "link" if path.is_symlink() else "folder" if path.is_dir()
            else path.read_bytes().hex()[:64] for path in sorted(folder.rglob("*"))}


def test_a_name_taken_under_the_out_folder_is_one_line_and_nothing_is_written(runs_folder, tmp_path, capsys):  # noqa: F811
    """Issue #60 item 7: a folder under the arena plot's name (known once the board is built) and a symbolic
    link under leaderboard.csv are each one line and exit 2, with nothing written; the link is kept."""
    out, mine = tmp_path / "board", tmp_path / "mine.csv"
    (out / PLOT).mkdir(parents=True)
    before = _listing(out)
    code, printed, err = _leaderboard(capsys, out, str(runs_folder))
    assert (code, printed) == (2, "") and _listing(out) == before
    assert err.splitlines() == [f"capjudge leaderboard: {out / PLOT}: is a folder (or another non-file), where capjudge "
                                "would write a file of its own; give another --out (or move it away) so that nothing "
                                "is replaced"]
    (out / PLOT).rmdir()
    mine.write_text("the user's own table\n", encoding="utf-8")
    (out / "leaderboard.csv").symlink_to(mine)
    code, printed, err = _leaderboard(capsys, out, str(runs_folder))
    assert (code, printed) == (2, "") and _listing(out) == {"leaderboard.csv": "link"}
    assert len(err.splitlines()) == 1 and f"{out / 'leaderboard.csv'}: is a symbolic link" in err
    assert mine.read_text(encoding="utf-8") == "the user's own table\n"


def test_one_model_gets_one_line_and_an_intact_leaderboard(runs_folder, tmp_path, capsys):  # noqa: F811
    terse = next(path.parent for path in runs_folder.rglob(f"*_samples_{TASK}.jsonl") if _run_name(path) == "terse")
    out = tmp_path / "board"
    code, printed, err = _leaderboard(capsys, out, str(terse))
    assert code == 0, err
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    arena = _section(markdown, "### Arena\n").strip().splitlines()
    assert arena == [f"No arena: task {TASK}: an arena needs at least two models, got 1 ('terse')"]
    assert HEADER not in markdown and "| 1 | terse" in " ".join(markdown.split()).replace("  ", " ")
    assert not (out / PLOT).exists() and "leaderboard_arena" not in printed


def _disjoint_copy(runs_folder: Path, destination: Path) -> Path:  # noqa: F811
    """Two of the runs, the second's items renamed: the same task, no item judged for both models."""
    kept = [path.parent for path in runs_folder.rglob(f"*_samples_{TASK}.jsonl") if _run_name(path) in ("terse", "verbose")]
    for folder in kept:
        shutil.copytree(folder, destination / folder.name)
    samples = next(path for path in destination.rglob(f"*_samples_{TASK}.jsonl") if _run_name(path) == "verbose")
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line["judged"]["item_id"] = f"{line['judged']['item_id']}-elsewhere"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return destination


def test_two_runs_of_disjoint_items_get_one_line_and_an_intact_leaderboard(runs_folder, tmp_path, capsys):  # noqa: F811
    folder = _disjoint_copy(runs_folder, tmp_path / "runs")
    out = tmp_path / "board"
    code, _, err = _leaderboard(capsys, out, str(folder))
    assert code == 0, err
    markdown = (out / "leaderboard.md").read_text(encoding="utf-8")
    # One paragraph (wrapped at 120 columns as all of leaderboard.md's prose), the one line of the CSV and page.
    paragraphs = _section(markdown, "### Arena\n").strip().split("\n\n")
    lines = [" ".join(paragraphs[0].split())]
    assert len(paragraphs) == 1 and lines[0].startswith("No arena: ") and "share no items" in lines[0]
    # The rest stands: both models ranked by their means, the warning about different items, every file.
    rows = _csv(out)
    assert set(rows) == {"terse", "verbose"} and {rows[m]["rank"] for m in rows} == {"1", "2"}
    assert rows["terse"][f"arena_not_made_{TASK}"] == lines[0].removeprefix("No arena: ")
    assert HEADER not in markdown and f"{TASK}/arena_elo" not in rows["terse"]
    assert "warning:" in err and not (out / PLOT).exists()
    page = (out / "leaderboard.html").read_text(encoding="utf-8")
    assert '<p class="note no-arena">No arena: ' in page and page.count('class="arena"') == 1
    code, printed, err = _leaderboard(capsys, tmp_path / "json", str(folder), "--format", "json")
    document = json.loads(printed)
    assert code == 0 and document["arena"] == {} and "share no items" in document["arena_not_made"][TASK]

"""`capjudge correlate --plot DIR`: the scatter plots, the tau-b chart and the page, on JSONL written here and on
the real MSVD-Eval (../shared).

What is checked against what: point counts against pairs counted here from the raw input; plotted positions
against the raw scores (un-jittered by rounding to the score grid); titles and whiskers against the JSON report
the same command printed; images by decoding them with Pillow.
"""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from capjudge.metrics.statistics.correlation import BootstrapSettings
from capjudge.metrics.human_correlation.plots import (
    JITTER_FRACTION,
    draw_scatter,
    draw_tau_chart,
    scatter_panels,
    tau_entries,
    tie_jitter,
)
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.judges.datasets.msvd_eval import human_matrix, load_msvd_eval
from capjudge.metrics.human_correlation.correlation_report import build_report, report_to_json
from tests.support.paths import shared_path
from tests.support.harness_runs import run_capjudge

SETTINGS = BootstrapSettings(n_resamples=200, seed=3)


def expected_tau_text(cell: dict) -> str:
    """The tau-b as the JSON report holds it, written the way a reader sees it in a title."""
    value, (low, high) = cell["value"], cell["ci"]
    return f"τb {value:.3f} [{low:.3f}, {high:.3f}]"


def png_size(data: bytes) -> tuple[int, int]:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.verify()  # raises on a truncated or corrupt file
    return Image.open(io.BytesIO(data)).size


def assert_sane_png(path: Path) -> tuple[int, int]:
    width, height = png_size(path.read_bytes())
    assert 300 <= width <= 4000 and 250 <= height <= 4000, (path.name, width, height)
    return width, height


class PageImages(HTMLParser):
    """Every <img> and <figure> of the page with its attributes, and any URL that would leave the machine."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str]] = []
        self.figures: list[dict[str, str]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "img":
            self.images.append(attributes)
        if tag == "figure":
            self.figures.append(attributes)
        for key in ("src", "href"):
            if attributes.get(key, "").startswith(("http:", "https:", "//")):
                self.external.append(attributes[key])


def read_page(directory: Path) -> tuple[str, PageImages]:
    text = (directory / "correlation.html").read_text(encoding="utf-8")
    page = PageImages()
    page.feed(text)
    return text, page


def assert_page_inlines_every_png(directory: Path, page: PageImages) -> None:
    """Each image is a data URI holding exactly the PNG written beside the page; nothing is fetched."""
    assert not page.external
    written = sorted(p.name for p in directory.glob("*.png"))
    assert sorted(image["data-file"] for image in page.images) == written
    for image in page.images:
        prefix = "data:image/png;base64,"
        assert image["src"].startswith(prefix)
        assert base64.b64decode(image["src"][len(prefix):]) == (directory / image["data-file"]).read_bytes()


# ---------------------------------------------------------------------------------------------------------
# FILE.jsonl form
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture()
def scores_jsonl(tmp_path):
    """60 items, two annotators each; a continuous judge, an integer judge (ties), one with a null, one all null,
    and a per-annotator-list human field whose element 1 only one item has."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(60):
        truth = float(rng.integers(1, 6))
        rows.append({
            "id": f"v{i}",
            "smooth": truth + float(rng.normal(scale=0.6)),
            "stepped": int(np.clip(truth + rng.integers(-1, 2), 1, 5)),
            "patchy": None if i % 7 == 0 else truth + float(rng.normal(scale=1.5)),
            "silent": None,
            "human": [truth, float(np.clip(truth + rng.integers(-1, 2), 1, 5))],
            "dims": [[truth, 4.0 if i == 0 else None], [truth, None]],
        })
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, rows


def test_jsonl_plots_match_the_json_report(scores_jsonl, tmp_path):
    path, rows = scores_jsonl
    out = tmp_path / "plots"
    done = run_capjudge("correlate", str(path), "--judge", "smooth", "--judge", "stepped", "--judge", "patchy",
                        "--human", "human", "--bootstrap", "200", "--seed", "3", "--format", "json",
                        "--plot", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    scatters = {f"scatter_{judge}__human.png" for judge in ("smooth", "stepped", "patchy")}
    assert {p.name for p in out.glob("*.png")} == scatters | {"tau_b.png"}
    for png in out.glob("*.png"):
        assert_sane_png(png)

    text, page = read_page(out)
    assert_page_inlines_every_png(out, page)
    figures = {f["data-scorer"]: f for f in page.figures if "data-scorer" in f}
    assert set(figures) == {"smooth", "stepped", "patchy"}
    # Pairs counted here: two annotators per item, patchy has no score on every 7th item.
    counted = {judge: 2 * sum(row[judge] is not None for row in rows) for judge in figures}
    assert counted["patchy"] == 2 * (60 - 9)
    for judge, figure in figures.items():
        assert int(figure["data-points"]) == counted[judge] == report[judge]["human"]["n"]
        assert expected_tau_text(report[judge]["human"]["kendall_b"]) in text
        assert f"{counted[judge]} pairs from" in text
    assert "not measurable" not in text


def test_jsonl_scatter_points_are_the_scored_pairs(scores_jsonl):
    """Offsets read back from the drawn figure: one per pair, each within the jitter of its true position."""
    _, rows = scores_jsonl
    scorers = {judge: [row[judge] for row in rows] for judge in ("smooth", "stepped", "patchy")}
    targets = {"human": [row["human"] for row in rows]}
    ids = [row["id"] for row in rows]
    report = build_report(scorers, targets, settings=SETTINGS, item_ids=ids)
    as_json = report_to_json(report)
    for panel in scatter_panels(report, scorers, targets, list(scorers), ids):
        drawn = draw_scatter(panel, report.annotators)
        offsets = np.asarray(drawn.points.get_offsets())
        kept = [row for row in rows if row[panel.scorer] is not None]
        expected_judge = sorted(float(row[panel.scorer]) for row in kept for _ in row["human"])
        expected_human = sorted(score for row in kept for score in row["human"])
        assert offsets.shape == (len(expected_judge), 2) == (as_json[panel.scorer]["human"]["n"], 2)
        # Human scores are integers 1..5 (gap 1): the jitter stays under JITTER_FRACTION, so rounding undoes it.
        assert np.all(np.abs(offsets[:, 1] - np.round(offsets[:, 1])) <= JITTER_FRACTION)
        assert sorted(np.round(offsets[:, 1])) == expected_human
        assert panel.human_jittered
        if panel.scorer == "stepped":  # integer judge scores tie, so they are jittered too and round back
            assert panel.judge_jittered and sorted(np.round(offsets[:, 0])) == expected_judge
        else:  # continuous scores never tie: drawn exactly where they are
            assert not panel.judge_jittered and sorted(offsets[:, 0]) == pytest.approx(expected_judge)
        title = drawn.figure.axes[0].get_title()
        assert expected_tau_text(as_json[panel.scorer]["human"]["kendall_b"]) in title
        assert f"n = {len(expected_judge)} pairs" in title


def test_without_bootstrap_no_whiskers_and_no_interval_claimed(scores_jsonl):
    _, rows = scores_jsonl
    scorers = {"smooth": [row["smooth"] for row in rows]}
    targets = {"human": [row["human"] for row in rows]}
    ids = [row["id"] for row in rows]
    settings = BootstrapSettings(n_resamples=0)
    report = build_report(scorers, targets, settings=settings, item_ids=ids)
    (panel,) = scatter_panels(report, scorers, targets, ["smooth"], ids)
    title = draw_scatter(panel, report.annotators).figure.axes[0].get_title()
    value = report_to_json(report)["smooth"]["human"]["kendall_b"]["value"]
    assert f"τb {value:.3f} (no CI: no bootstrap resamples)" in title
    chart = draw_tau_chart(tau_entries(report, ["smooth"]), settings)
    panel_axes = [axes for axes in chart.figure.axes if axes.get_title()]
    containers = [c for axes in panel_axes for c in axes.containers]
    assert len(containers) == 2  # smooth and the annotator pair
    assert all(container.lines[2] == () for container in containers)  # no whisker segments at all
    assert "no confidence intervals" in chart.figure.get_suptitle()


def test_jitter_is_seeded_and_keeps_distinct_values_apart():
    values = np.repeat([1.0, 1.25, 1.5, 3.0], 50)
    items = np.arange(values.size)
    first = tie_jitter(values, items, np.random.default_rng(0))
    assert np.array_equal(first, tie_jitter(values, items, np.random.default_rng(0)))
    assert not np.array_equal(first, tie_jitter(values, items, np.random.default_rng(1)))
    assert np.abs(first - values).max() <= JITTER_FRACTION * 0.25
    assert np.abs(first - values).max() > 0
    # The order of distinct values survives: every jittered 1.25 lies above every jittered 1.0.
    assert first[values == 1.0].max() < first[values == 1.25].min()
    # No two items share a value: drawn as is, even when one item's pairs repeat its value (expand mode).
    distinct = np.array([0.1, 0.1, 0.7, 0.7, 0.2, 0.2])
    assert np.array_equal(tie_jitter(distinct, np.repeat([0, 1, 2], 2), np.random.default_rng(0)), distinct)


def test_not_measurable_target_and_all_missing_scorer(scores_jsonl, tmp_path):
    path, rows = scores_jsonl
    out = tmp_path / "plots"
    done = run_capjudge("correlate", str(path), "--judge", "smooth", "--judge", "silent", "--human", "dims",
                        "--human-index", "0", "--human-index", "1", "--bootstrap", "100", "--format", "json",
                        "--plot", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["smooth"]["dims[1]"]["kendall_b"]["value"] is None  # one item has element 1
    assert "scatter smooth vs dims[1]: not measurable" in done.stderr
    assert "scatter silent vs dims[0]: not measurable" in done.stderr
    for png in out.glob("*.png"):
        assert_sane_png(png)
    text, page = read_page(out)
    assert_page_inlines_every_png(out, page)
    flagged = {(f["data-scorer"], f["data-target"]) for f in page.figures if "not-measurable" in f.get("class", "")}
    assert flagged == {("smooth", "dims[1]"), ("silent", "dims[0]"), ("silent", "dims[1]")}
    figures = {(f["data-scorer"], f["data-target"]): f for f in page.figures if "data-scorer" in f}
    assert figures[("silent", "dims[0]")]["data-points"] == "0"
    assert figures[("smooth", "dims[1]")]["data-points"] == "1"
    assert expected_tau_text(report["smooth"]["dims[0]"]["kendall_b"]) in text

    # The drawn figures: a red "not measurable" box and no number where tau-b is undefined.
    scorers = {judge: [row[judge] for row in rows] for judge in ("smooth", "silent")}
    targets = {f"dims[{k}]": [[a[k] for a in row["dims"]] for row in rows] for k in (0, 1)}
    ids = [row["id"] for row in rows]
    built = build_report(scorers, targets, settings=SETTINGS, item_ids=ids)
    for panel in scatter_panels(built, scorers, targets, list(scorers), ids):
        axes = draw_scatter(panel, built.annotators).figure.axes[0]
        texts = " ".join(t.get_text() for t in axes.texts)
        measurable = (panel.scorer, panel.target) == ("smooth", "dims[0]")
        assert ("not measurable" in texts) is not measurable
        assert ("not measurable" in axes.get_title()) is not measurable
        assert ("[" in axes.get_title().split("\n")[1]) is measurable  # no CI shown for an undefined tau-b

    chart = draw_tau_chart(tau_entries(built, list(scorers)), SETTINGS)
    for axes in chart.figure.axes:
        if not axes.get_title():
            continue
        target = axes.get_title().removeprefix("human: ")
        n_points = sum(1 for _ in axes.containers)
        n_flags = sum(t.get_text() == "not measurable" for t in axes.texts)
        # dims[0]: smooth and the annotator pair (both annotators agree) drawn, silent flagged; dims[1]: nothing
        # measurable (one score in the column), all three rows flagged.
        assert (n_points, n_flags) == ((2, 1) if target == "dims[0]" else (0, 3)), target


def test_plot_directory_that_cannot_be_written(scores_jsonl, tmp_path):
    path, _ = scores_jsonl
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for target in (blocker, blocker / "plots"):
        done = run_capjudge("correlate", str(path), "--judge", "smooth", "--human", "human", "--plot", str(target))
        assert done.returncode == 2
        assert f"--plot {target}: cannot write plots there" in done.stderr
        assert done.stdout == ""  # refused before any work, not after printing a report
    assert blocker.read_text() == "not a directory"


# ---------------------------------------------------------------------------------------------------------
# --msvd-eval form, on the real MSVD-Eval
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def msvd_items():
    path = shared_path("data", "msvd_eval", "MSVD-Eval.json")
    return path, load_msvd_eval(path)


def words_judge(items) -> dict[str, int | None]:
    """A judge that scores a caption by its word count (ties galore), silent on every 10th item."""
    return {item.item_id: None if n % 10 == 0 else len(item.candidate.split()) for n, item in enumerate(items)}


@pytest.fixture(scope="module")
def msvd_cli_run(msvd_items, tmp_path_factory, run_baseline_cache):
    path, items = msvd_items
    work = tmp_path_factory.mktemp("msvd")
    judge_file = work / "judge.jsonl"
    judge_file.write_text("".join(json.dumps({"id": k, "words": v}) + "\n" for k, v in words_judge(items).items()))
    out = work / "plots"
    done = run_capjudge("correlate", "--msvd-eval", str(path), "--baselines", "--cache-dir", str(run_baseline_cache),
                        "--judge-scores", str(judge_file), "--bootstrap", "200", "--format", "json", "--plot", str(out),
                        timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), out


def test_msvd_plots_per_dimension(msvd_cli_run, msvd_items):
    report, out = msvd_cli_run
    _, items = msvd_items
    scored = [item for item, score in zip(items, words_judge(items).values()) if score is not None]
    n_pairs = sum(len(item.human_scores) for item in scored)
    assert n_pairs == 2 * (197 - 20)
    # Only the judge is scattered; the baselines appear in the chart.
    assert {p.name for p in out.glob("*.png")} == {f"scatter_words__{d}.png" for d in SCORE_NAMES} | {"tau_b.png"}
    for png in out.glob("*.png"):
        assert_sane_png(png)
    chart_width, _ = assert_sane_png(out / "tau_b.png")
    assert chart_width >= 900  # five panels side by side in rows of three
    text, page = read_page(out)
    assert_page_inlines_every_png(out, page)
    for dimension in SCORE_NAMES:
        cell = report["words"][dimension]
        assert cell["n"] == n_pairs
        assert expected_tau_text(cell["kendall_b"]) in text
    figures = [f for f in page.figures if "data-scorer" in f]
    assert {f["data-target"] for f in figures} == set(SCORE_NAMES)
    assert all(int(f["data-points"]) == n_pairs for f in figures)


def test_msvd_chart_whiskers_are_the_report_cis(msvd_items):
    """One point per scorer and per annotator pair in each dimension's panel; whisker ends = the JSON CI."""
    _, items = msvd_items
    ids = [item.item_id for item in items]
    judge = words_judge(items)
    scorers = {"words": [judge[i] for i in ids], "shortness": [None if judge[i] is None else -judge[i] for i in ids]}
    targets = {d: human_matrix(items, d) for d in SCORE_NAMES}
    report = build_report(scorers, targets, settings=SETTINGS, item_ids=ids)
    as_json = report_to_json(report)
    chart = draw_tau_chart(tau_entries(report, ["words"]), SETTINGS)
    panels = [axes for axes in chart.figure.axes if axes.get_title()]
    assert sorted(a.get_title().removeprefix("human: ") for a in panels) == sorted(SCORE_NAMES)
    row_labels = [t.get_text() for t in panels[0].get_yticklabels()]
    assert row_labels == ["words", "shortness", "annotators 0~1"]
    for axes in panels:
        target = axes.get_title().removeprefix("human: ")
        expected = {
            "words": as_json["words"][target]["kendall_b"],
            "shortness": as_json["shortness"][target]["kendall_b"],
            "annotators 0~1": as_json["_ceiling"][target]["kendall_b_between_annotators"]["0~1"],
        }
        assert len(axes.containers) == len(expected)
        for container in axes.containers:
            data_line, _, (whiskers,) = container.lines
            y = int(data_line.get_ydata()[0])
            cell = expected.pop(row_labels[y])
            assert data_line.get_xdata()[0] == pytest.approx(cell["value"])
            (low, _), (high, _) = whiskers.get_segments()[0]
            assert (low, high) == pytest.approx(tuple(cell["ci"]))
        assert not expected
    # The judge's value is scipy's tau-b on the expanded pairs, so the chart shows the published statistic.
    kept = [n for n, i in enumerate(ids) if judge[i] is not None]
    human = targets["mean"][kept]
    x = np.repeat([judge[ids[n]] for n in kept], human.shape[1])
    assert as_json["words"]["mean"]["kendall_b"]["value"] == pytest.approx(stats.kendalltau(x, human.ravel()).statistic)


def test_msvd_scatter_points_are_the_annotators_scores(msvd_items):
    _, items = msvd_items
    ids = [item.item_id for item in items]
    judge = words_judge(items)
    scorers = {"words": [judge[i] for i in ids]}
    targets = {"conciseness": human_matrix(items, "conciseness")}
    report = build_report(scorers, targets, settings=SETTINGS, item_ids=ids)
    (panel,) = scatter_panels(report, scorers, targets, ["words"], ids)
    offsets = np.asarray(draw_scatter(panel, report.annotators).points.get_offsets())
    expected_human = sorted(s.conciseness for item in items if judge[item.item_id] is not None for s in item.human_scores)
    expected_judge = sorted(float(judge[item.item_id]) for item in items if judge[item.item_id] is not None
                            for _ in item.human_scores)
    assert len(offsets) == len(expected_human) == 354
    # Conciseness is scored in whole steps here, word counts are integers: rounding undoes the jitter.
    assert sorted(np.round(offsets[:, 1])) == expected_human
    assert sorted(np.round(offsets[:, 0])) == expected_judge


def test_msvd_page_in_a_real_browser(msvd_cli_run, open_page, tmp_path):
    """Headless Chromium opens the page: every image decodes at the size of the PNG beside it, nothing is fetched,
    no script fails, the page needs no horizontal scrolling; a screenshot is kept."""
    _, out = msvd_cli_run
    visit = open_page(out / "correlation.html")
    assert visit.image_count() == len(list(out.glob("*.png"))) == len(SCORE_NAMES) + 1
    assert visit.broken_images() == []
    decoded = visit.page.evaluate(
        "() => Array.from(document.images).map(img => [img.dataset.file, img.naturalWidth, img.naturalHeight])"
    )
    for file_name, width, height in decoded:
        assert (width, height) == png_size((out / file_name).read_bytes()), file_name
    assert visit.offsite_requests() == []
    assert visit.script_errors == []
    assert visit.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert len(visit.visible("figure")) == len(SCORE_NAMES) + 1
    shot = visit.screenshot(tmp_path / "correlation-page.png")
    assert png_size(shot.read_bytes())[0] >= 1000

"""The leaderboard of runs judged by a panel of judges (#28 item 5): each member's ranking beside the panel's,
the pairs of models whose order changes between members, and the members' agreement (alpha, each pair's
tau-b, each member's offset), in leaderboard.md, .csv and .html.

Real runs: lmms-eval on the real `gveval_demo` task (6 items) for three caption sets, each judged by the test
server's three scripted judges (tests/support/openai_server.py `panel_responder`: harsh, lenient, and long, which
prefers long captions). `good` is the demo's good captions; `fair` short correct ones; `verbose` long
captions with the word "wrong", which every member scores low except that "long" still adds its length bias.
So every member ranks `good` first, harsh and lenient rank `fair` above `verbose`, and long the other way: the
one pair that flips. A fourth run, judged by one judge, shows what a board without a panel looks like.
Everything asserted is checked against the runs' own results JSON.
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
from tests.support.openai_server import PANEL_MODELS, panel_responder

TASK = "gveval_demo"
MAIN = "gveval_mean"
LIMIT = 6
MODELS = ("good", "fair", "verbose")
DEMO = REPO_ROOT / "tasks" / "demo"
FAST = ("--resamples", "200", "--permutations", "99")  # the statistics are not what is tested here
ENDS = ("", "_ci_low", "_ci_high")  # a panel figure and its interval's ends
PAIRS = tuple(f"{a}~{b}" for i, a in enumerate(PANEL_MODELS) for b in PANEL_MODELS[i + 1:])  # panel file's order


def _captions(name: str) -> list[dict]:
    if name in ("good", "fair"):
        return [json.loads(line) for line in (DEMO / f"captions_{name}.jsonl").read_text().splitlines() if line.strip()]
    filler = "a description that goes on about the frame and the shapes and colours in it, none of which the clip shows"
    return [{"id": row["id"], "caption": f"This is the wrong video, clip {row['id']}: {filler}."}
            for row in _captions("good")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel_leaderboard")
    folders = {}
    with judge_server(responder=panel_responder) as judge:
        members = [{"name": model, "model": model, "base_url": judge.base_url} for model in PANEL_MODELS]
        panel_file = root / "panel.yaml"
        panel_file.write_text(json.dumps({"members": members}))
        for name in (*MODELS, "single"):
            captions = root / f"{name}.jsonl"
            rows = _captions("good" if name == "single" else name)
            captions.write_text("".join(json.dumps(row) + "\n" for row in rows))
            env = {} if name == "single" else {"CAPJUDGE_PANEL": str(panel_file)}
            run = run_lmms_eval(model="captions_file", model_args=f"path={captions},model_name={name}", tasks=TASK,
                                output_path=root / "out", judge_base_url=judge.base_url, limit=LIMIT,
                                cache_path=root / "cache.sqlite", env=env)
            folders[name] = run
    board = root / "board"
    done = run_capjudge("leaderboard", *(str(folders[name].run_dir) for name in MODELS), "--out", str(board), *FAST)
    assert done.returncode == 0, done.stderr
    results = {name: folders[name].results()["results"][TASK] for name in MODELS}
    return {"root": root, "folders": folders, "board": board, "results": results}


def _section(markdown: str) -> str:
    """The `### Judge panel` part of the task's section."""
    return markdown.split("### Judge panel", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def _tables(text: str) -> dict[str, dict[str, str]]:
    """Every Markdown table in `text`, merged by model: model -> header -> cell."""
    merged: dict[str, dict[str, str]] = {}
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if not header:
            header = cells
        elif not set(line) <= set("|-: "):
            merged.setdefault(cells[1], {}).update(zip(header, cells))
    return merged


def _csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def _ranks(values: dict[str, float]) -> dict[str, int]:
    """Competition ranking, higher is better: 1 + the number of models strictly above."""
    return {name: 1 + sum(other > value for other in values.values()) for name, value in values.items()}


def _kendall(figures: dict, pair: str) -> list[float | None]:
    """A pair of members' tau-b and its interval's ends, as the run's results JSON holds them (None: NaN, the
    run could not compute it: a member gave every item the same score)."""
    values = [figures[f"panel_kendall_b{end}@{pair},none"] for end in ENDS]
    return [None if math.isnan(value) else value for value in values]


def _csv_kendall(row: dict[str, str], pair: str) -> list[float | None]:
    return [float(cell) if cell else None for cell in (row[f"{TASK}/panel_kendall_b{end}@{pair}"] for end in ENDS)]


def _kendall_text(figure: list[float | None]) -> str:
    """The value, and its interval where the run logged one (none from fewer than 5 items: the small-sample rule)."""
    if figure[0] is None:
        return "—"
    return f"{figure[0]:.2f}" + ("" if figure[1] is None else f" [{figure[1]:.2f}, {figure[2]:.2f}]")


def _flipped_pairs(results: dict[str, dict]) -> set[frozenset[str]]:
    """The pairs of models some member orders one way and another member the other way, from the results."""
    flipped = set()
    for position, first in enumerate(MODELS):
        for second in MODELS[position + 1:]:
            signs = {(results[first][f"{MAIN}@{m},none"] > results[second][f"{MAIN}@{m},none"]) for m in PANEL_MODELS}
            if len(signs) == 2:
                flipped.add(frozenset((first, second)))
    return flipped


@pytest.mark.slow
def test_each_members_values_and_ranks_are_its_results(runs):
    results = runs["results"]
    markdown = (runs["board"] / "leaderboard.md").read_text(encoding="utf-8")
    assert markdown.count("### Judge panel") == 1
    standings = _tables(_section(markdown).split("Agreement among the members", 1)[0])
    csv_rows = _csv_rows(runs["board"] / "leaderboard.csv")
    assert set(standings) == set(MODELS) == set(csv_rows)
    panel_values = {name: results[name][f"{MAIN},none"] for name in MODELS}
    for name, rank in _ranks(panel_values).items():
        assert standings[name]["#"] == str(rank)
        assert float(standings[name]["mean (panel)"]) == pytest.approx(panel_values[name], abs=0.05 + 1e-9)
    for member in PANEL_MODELS:
        values = {name: results[name][f"{MAIN}@{member},none"] for name in MODELS}
        for name, rank in _ranks(values).items():
            assert float(standings[name][f"mean@{member}"]) == pytest.approx(values[name], abs=0.05 + 1e-9)
            assert standings[name][f"# {member}"] == str(rank)
            # The CSV keeps the exact value the run aggregated.
            assert float(csv_rows[name][f"{TASK}/{MAIN}@{member}"]) == values[name]
            assert csv_rows[name][f"rank_{TASK}@{member}"] == str(rank)
    # The scripts' design, as the results show it: every member puts good first; long puts verbose above fair.
    assert all(standings["good"][f"# {m}"] == "1" for m in PANEL_MODELS)
    assert [standings["fair"][f"# {m}"] for m in PANEL_MODELS] == ["2", "2", "3"]


@pytest.mark.slow
def test_the_pair_whose_order_flips_is_flagged_with_the_members_on_each_side(runs):
    results = runs["results"]
    assert _flipped_pairs(results) == {frozenset(("fair", "verbose"))}
    section = _section((runs["board"] / "leaderboard.md").read_text(encoding="utf-8"))
    flips = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(flips) == 1 and "Pairs of models whose order changes between members" in section
    text = " ".join(section.split("- fair vs verbose:", 1)[1].split("\n\n", 1)[0].split())

    def value(name: str, member: str) -> str:
        return f"{results[name][f'{MAIN}@{member},none']:.1f}"

    assert (f"fair above by harsh ({value('fair', 'harsh')} vs {value('verbose', 'harsh')}), "
            f"lenient ({value('fair', 'lenient')} vs {value('verbose', 'lenient')})") in text
    assert f"verbose above by long ({value('verbose', 'long')} vs {value('fair', 'long')})" in text
    assert "the panel puts fair above" in text  # the panel's mean: fair above verbose
    assert "good vs" not in section  # every member ranks good above both others
    rows = _csv_rows(runs["board"] / "leaderboard.csv")
    assert {name: rows[name][f"order_flips_{TASK}"] for name in MODELS} == {"good": "", "fair": "verbose",
                                                                             "verbose": "fair"}


@pytest.mark.slow
def test_agreement_per_model_is_the_runs_alpha_and_offsets(runs):
    results = runs["results"]
    section = _section((runs["board"] / "leaderboard.md").read_text(encoding="utf-8"))
    agreement = _tables(section.split("Agreement among the members", 1)[1])
    rows = _csv_rows(runs["board"] / "leaderboard.csv")
    for name in MODELS:
        figures = results[name]
        alpha = [figures[f"panel_alpha{end},none"] for end in ENDS]
        assert agreement[name]["alpha [95% CI]"] == f"{alpha[0]:.2f} [{alpha[1]:.2f}, {alpha[2]:.2f}]"
        assert [float(rows[name][f"{TASK}/panel_alpha{end}"]) for end in ENDS] == alpha
        for member in PANEL_MODELS:
            offset = [figures[f"panel_offset{end}@{member},none"] for end in ENDS]
            shown = f"{offset[0]:+.1f} [{offset[1]:+.1f}, {offset[2]:+.1f}]"
            assert agreement[name][f"offset@{member} [95% CI]"] == shown
            assert [float(rows[name][f"{TASK}/panel_offset{end}@{member}"]) for end in ENDS] == offset
        for pair in PAIRS:
            kendall = _kendall(figures, pair)
            assert agreement[name][f"tau-b {pair} [95% CI]"] == _kendall_text(kendall)
            assert _csv_kendall(rows[name], pair) == kendall
    # harsh gives every verbose caption 0: its tau-b with anyone is undefined there, and shown as such.
    assert [_kendall(results["verbose"], pair)[0] is None for pair in PAIRS] == [True, True, False]
    # Defined for good and fair; an interval for each, but where the two members order those items exactly alike
    # (tau-b 1 in every resample: a zero-width interval, not shown under the small-sample rule since issue #60).
    for name, pair in ((name, pair) for name in ("good", "fair") for pair in PAIRS):
        value, low, high = _kendall(results[name], pair)
        assert value is not None, (name, pair)
        assert (low is None and high is None and abs(value) == pytest.approx(1.0)) or low < high, (name, pair, value)
    assert all(float(rows[name][f"{TASK}/panel_offset@harsh"]) < 0 for name in MODELS)
    # The tau-b columns come after every column the panel part had before them (the flips last among those).
    header = next(csv.reader((runs["board"] / "leaderboard.csv").open(encoding="utf-8")))
    kendall_columns = [f"{TASK}/panel_kendall_b{end}@{pair}" for pair in PAIRS for end in ENDS]
    assert header[-len(kendall_columns) - 1:] == [f"order_flips_{TASK}", *kendall_columns]


@pytest.mark.slow
def test_the_page_shows_the_panel_and_the_flip_in_a_real_browser(runs, open_page):
    visit = open_page(runs["board"] / "leaderboard.html")
    page = visit.page
    assert visit.script_errors == [] and visit.offsite_requests() == []
    panel = page.locator(f"#panel-{TASK}")
    assert panel.count() == 1 and panel.is_visible()
    assert panel.locator("table.panel tbody tr td.model").all_inner_texts() == ["good", "fair", "verbose"]
    flips = panel.locator("ul.flips li")
    assert flips.count() == 1
    assert (flips.first.get_attribute("data-first"), flips.first.get_attribute("data-second")) == ("fair", "verbose")
    assert "verbose above by long" in flips.first.inner_text()
    # Its tables sort like the others: by long's rank, ascending, verbose comes before fair.
    table = panel.locator("table.panel")
    headers = table.locator("th").all_inner_texts()
    table.locator("th").nth(headers.index("# long")).click()
    assert table.locator("tbody tr td.model").all_inner_texts() == ["good", "verbose", "fair"]
    agreement = panel.locator("table.panel-agreement")
    assert agreement.locator("tbody tr").count() == 3
    # Each pair's tau-b, the value with its interval under it, as the run's results hold them.
    headers = agreement.locator("th").all_inner_texts()
    for pair in PAIRS:
        column = headers.index(f"tau-b {pair} [95% CI]")
        for row, name in enumerate(MODELS):
            cell = agreement.locator("tbody tr").nth(row).locator("td").nth(column)
            kendall = _kendall(runs["results"][name], pair)
            assert cell.is_visible()
            if kendall[0] is None:
                assert cell.locator(".value").inner_text() == "—" and cell.locator(".ci").count() == 0
                continue
            assert cell.locator(".value").inner_text() == f"{kendall[0]:.2f}"
            if kendall[1] is None:  # logged without an interval (the small-sample rule): the page shows none
                assert cell.locator(".ci").count() == 0
                continue
            assert cell.locator(".ci").inner_text() == f"[{kendall[1]:.2f}, {kendall[2]:.2f}]"


@pytest.mark.slow
def test_a_board_without_a_panel_has_no_panel_part_and_a_mixed_one_names_the_single_judged_model(runs, tmp_path):
    single = runs["folders"]["single"]
    assert "judged@harsh" not in single.samples(TASK)[0]
    alone = tmp_path / "alone"
    done = run_capjudge("leaderboard", str(single.run_dir), "--out", str(alone), *FAST)
    assert done.returncode == 0, done.stderr
    assert "Judge panel" not in (alone / "leaderboard.md").read_text(encoding="utf-8")
    assert 'class="panel"' not in (alone / "leaderboard.html").read_text(encoding="utf-8")
    assert not any("@" in column or "flips" in column
                   for column in next(csv.reader((alone / "leaderboard.csv").open(encoding="utf-8"))))
    mixed = tmp_path / "mixed"
    done = run_capjudge("leaderboard", *(str(runs["folders"][name].run_dir) for name in ("good", "single")),
                        "--out", str(mixed), *FAST)
    assert done.returncode == 0, done.stderr
    section = _section((mixed / "leaderboard.md").read_text(encoding="utf-8"))
    assert "Judged by one judge, not a panel, and so not in this part: single." in " ".join(section.split())
    assert set(_tables(section)) == {"good"}


@pytest.mark.slow
def test_runs_judged_by_different_panels_are_compared_on_the_members_they_share(runs, tmp_path):
    # verbose's run, as if its third member had been another judge ("longer"): its results name that member.
    copy = shutil.copytree(runs["folders"]["verbose"].run_dir, tmp_path / "verbose")
    results_file = next(copy.glob("*_results.json"))
    results_file.write_text(re.sub(r"@long\b", "@longer", results_file.read_text(encoding="utf-8")), encoding="utf-8")
    # fair's run, as if its panel file had listed lenient before harsh: its results name the pair the other way.
    fair = shutil.copytree(runs["folders"]["fair"].run_dir, tmp_path / "fair")
    fair_results = next(fair.glob("*_results.json"))
    text = fair_results.read_text(encoding="utf-8")
    assert text.count("@harsh~lenient,") == len(ENDS)
    fair_results.write_text(text.replace("@harsh~lenient,", "@lenient~harsh,"), encoding="utf-8")
    out = tmp_path / "board"
    done = run_capjudge("leaderboard", str(runs["folders"]["good"].run_dir), str(fair), str(copy),
                        "--out", str(out), *FAST)
    assert done.returncode == 0, done.stderr
    section = " ".join(_section((out / "leaderboard.md").read_text(encoding="utf-8")).split())
    assert ("Runs were judged by different panels (good: harsh, lenient, long; fair: harsh, lenient, long; "
            "verbose: harsh, lenient, longer); only the members every panel run has are compared "
            "(harsh, lenient).") in section
    # harsh and lenient order every pair alike: said plainly.
    assert "No pair of models changes order between members" in section
    assert "# long" not in section and "offset@long" not in section
    header = next(csv.reader((out / "leaderboard.csv").open(encoding="utf-8")))
    assert f"rank_{TASK}@harsh" in header and f"rank_{TASK}@long" not in header
    # tau-b of the shared pair only, for every run, whichever order its panel file named the pair in.
    assert [c for c in header if "kendall" in c] == [f"{TASK}/panel_kendall_b{end}@harsh~lenient" for end in ENDS]
    assert "tau-b harsh~lenient [95% CI]" in section and "harsh~long" not in section
    rows = _csv_rows(out / "leaderboard.csv")
    assert all(_csv_kendall(rows[name], "harsh~lenient") == _kendall(runs["results"][name], "harsh~lenient")
               for name in MODELS)
    assert None not in _csv_kendall(rows["fair"], "harsh~lenient")  # read from its `lenient~harsh`

"""Published VATEX-EVAL figures: every one carries its source, and `capjudge vatex` prints them apart from its own
(never as if computed here), in the table and in --format json."""

from __future__ import annotations

import json
import math

from capjudge.metrics.human_correlation.vatex_published import published_figures, published_to_table
from tests.support.paths import shared_path
from tests.support.harness_runs import run_capjudge


def test_every_published_figure_names_its_source_setting_and_protocol():
    figures = published_figures()
    assert figures, "the data file lists no figure"
    for figure in figures:
        assert figure.citation and figure.where and figure.references and figure.protocol, figure
        assert "github.com/" in figure.where or "arxiv.org/" in figure.where, figure.where  # a place a reader can open
        values = [v for v in (figure.kendall_b, figure.spearman) if v is not None]
        assert values and all(math.isfinite(v) and -100 <= v <= 100 for v in values), figure
    # The G-VEval row is the published judge itself (as VC-Inspector's table quotes it): tau-b only.
    gveval = next(f for f in figures if f.scorer.startswith("G-VEval"))
    assert (gveval.kendall_b, gveval.spearman) == (39.40, None)
    table = published_to_table(figures)
    assert table.count("source: ") == len({f.citation for f in figures})
    assert "not computed here" in table


def test_the_vatex_command_prints_the_published_figures_apart_from_its_own(tmp_path):
    data = shared_path("data", "vatex_eval", "vid_cans_score_dict.json")
    table = run_capjudge("vatex", str(data), "--resamples", "0")
    assert table.returncode == 0, table.stderr
    ours, _, published = table.stdout.partition("Published VATEX-EVAL figures")
    assert published and "caption length" in ours and "G-VEval (GPT-4o)" in published and "39.40" in published
    as_json = run_capjudge("vatex", str(data), "--resamples", "0", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert [row["scorer"] for row in report["published"]] == [f.scorer for f in published_figures()]
    assert all(row["citation"] for row in report["published"])

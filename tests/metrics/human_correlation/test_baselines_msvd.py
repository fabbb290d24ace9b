"""MSVD-Eval loader and the pycocoevalcap baselines (real Java tokenizer and METEOR)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from capjudge.metrics.human_correlation.baseline_cache import cached_baselines
from capjudge.metrics.human_correlation.baselines import BASELINE_SCORERS, BaselineUnavailable, caption_metric_scores, check_requirements
from capjudge.judges.datasets.msvd_eval import AccrScores, MsvdEvalError, MsvdItem, human_matrix, load_msvd_eval
from tests.support.paths import SHARED

MSVD_PATH = SHARED / "data" / "msvd_eval" / "MSVD-Eval.json"


@pytest.fixture(scope="module")
def msvd_items():
    if not MSVD_PATH.is_file():
        pytest.skip(f"shared data not present: {MSVD_PATH}")
    return load_msvd_eval(MSVD_PATH)


@pytest.fixture(scope="module")
def baseline_scores(msvd_items, run_baseline_cache):
    """MSVD-Eval's baselines as `capjudge correlate --baselines` computes them (computed once per test run,
    whichever test needs them first; test_correlate_cli checks a cached rerun equals the computation)."""
    return cached_baselines(msvd_items, "msvd_eval_baselines", run_baseline_cache).baselines


def test_loader_returns_typed_items(msvd_items):
    assert len(msvd_items) == 197
    first = msvd_items[0]
    assert isinstance(first, MsvdItem) and first.item_id == "vid1301"
    assert first.video_name == "eyhzdC936uk_15_27.avi"
    assert len(first.references) >= 25 and isinstance(first.candidate, str)
    assert first.human_scores == (AccrScores(4, 3, 4, 5, 4.0), AccrScores(4, 3, 4, 4, 3.75))
    matrix = human_matrix(msvd_items, "mean")
    assert matrix.shape == (197, 2) and matrix[0].tolist() == [4.0, 3.75]
    assert human_matrix(msvd_items, "relevance")[0].tolist() == [5.0, 4.0]


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "msvd.json"
    path.write_text(json.dumps(data))
    return path


GOOD_ROW = {"vname": "a.avi", "ref": ["a cat"], "candidate": "a cat", "human_score": [[4, 3, 4, 5, 4.0]]}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({**GOOD_ROW, "human_score": [[4, 3, 4, 5]]}, r"item 'bad', annotator 0: expected a list of 5"),
        ({k: v for k, v in GOOD_ROW.items() if k != "ref"}, r"item 'bad': missing key 'ref'"),
        ({**GOOD_ROW, "human_score": [[4, 3, 4, 5, 2.0]]}, r"item 'bad', annotator 0: mean column 2.0 differs"),
        ({**GOOD_ROW, "human_score": [[4, "x", 4, 5, 4.0]]}, r"item 'bad', annotator 0: scores must be finite"),
        ({**GOOD_ROW, "ref": []}, r"item 'bad': 'ref' must be a non-empty list"),
        ("not an object", r"item 'bad': expected an object"),
    ],
)
def test_malformed_rows_name_the_item(tmp_path, row, message):
    path = _write(tmp_path, {"good": GOOD_ROW, "bad": row})
    with pytest.raises(MsvdEvalError, match=message):
        load_msvd_eval(path)


def test_candidate_is_optional(tmp_path):
    row = {k: v for k, v in GOOD_ROW.items() if k != "candidate"}
    (item,) = load_msvd_eval(_write(tmp_path, {"x": row}))
    assert item.candidate is None


def test_baselines_score_every_item_in_range(baseline_scores, msvd_items):
    assert tuple(baseline_scores.scores) == BASELINE_SCORERS
    assert baseline_scores.item_ids == tuple(item.item_id for item in msvd_items)
    for name, values in baseline_scores.scores.items():
        array = np.array(values, dtype=float)
        assert array.shape == (197,) and np.isfinite(array).all(), name
        assert array.min() >= 0.0 and array.std() > 0, name
        if name != "CIDEr":
            assert array.max() <= 1.0, name
    # BLEU-4 can never exceed BLEU-1 for the same candidate.
    assert (np.array(baseline_scores.scores["BLEU-4"]) <= np.array(baseline_scores.scores["BLEU-1"]) + 1e-9).all()


def test_cider_uses_corpus_idf_but_bleu_is_per_item(baseline_scores, msvd_items):
    subset = list(msvd_items[:12])
    # One item without a candidate: scored as missing (None), not as 0.
    no_candidate = MsvdItem("none", "x.avi", ("a dog runs",), None, msvd_items[0].human_scores)
    small = caption_metric_scores([*subset, no_candidate])
    assert small.scores["BLEU-1"][:12] == pytest.approx(baseline_scores.scores["BLEU-1"][:12])
    assert small.scores["METEOR"][:12] == pytest.approx(baseline_scores.scores["METEOR"][:12], abs=1e-6)
    # Document frequencies over 12 items instead of 197 change the CIDEr weights.
    assert small.scores["CIDEr"][:12] != pytest.approx(baseline_scores.scores["CIDEr"][:12], rel=1e-3)
    assert all(values[12] is None for values in small.scores.values())


def test_missing_java_is_reported_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no `java` on PATH
    with pytest.raises(BaselineUnavailable, match="'java' is not on PATH"):
        check_requirements()

"""`capjudge vatex --baselines` on a real 20-clip subset of VATEX-EVAL (../shared): BLEU-1, BLEU-4, METEOR,
ROUGE-L and CIDEr with 1 and 9 references as report rows, computed once by pycocoevalcap (Java) and then read
from the content-keyed cache; a cache file that is corrupt or belongs to other content is recomputed, never used.

The subset and its first computation are tests/support/vatex_baselines_subset.py's, once per test run."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from capjudge.metrics.human_correlation.baselines import BASELINE_SCORERS
from capjudge.metrics.human_correlation.vatex_baselines import (
    REFERENCE_SETTINGS,
    baseline_name,
    cache_path,
    vatex_baselines,
)
from capjudge.judges.datasets.vatex_eval import (
    load_vatex_eval,
    ratings_matrix,
)
from tests.support.harness_runs import run_capjudge
from tests.support.vatex_baselines_subset import baselines_json as _baselines_json
from tests.support.vatex_baselines_subset import baselines_subset, subset_clips
from scipy.stats import kendalltau

pytestmark = pytest.mark.slow

NAMES = [baseline_name(metric, n) for n in REFERENCE_SETTINGS for metric in BASELINE_SCORERS]


def _vatex(tmp, name: str, clips: dict):
    path = tmp / name
    path.write_text(json.dumps(clips), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def subset(tmp_path_factory, worker_id):
    built = baselines_subset(tmp_path_factory, worker_id)
    return built.data, built.cache_dir, built.first


def _rows(report: dict) -> dict[str, list]:
    """Each baseline's protocols by name (its source names the cache folder, which differs between tests)."""
    return {row["name"]: row["protocols"] for row in report["baselines"]}


def test_every_baseline_is_a_row_under_both_protocols(subset):
    _, cache_dir, first = subset
    report = json.loads(first.stdout)
    assert (report["n_candidates"], report["n_clips"]) == (120, 20)
    assert [row["name"] for row in report["baselines"]] == NAMES
    for row in report["baselines"]:
        assert [p["protocol"] for p in row["protocols"]] == ["emscore_per_annotator", "gveval_pooled", "gveval_mean_rating"]
        assert "pycocoevalcap" in row["source"] and str(cache_dir) in row["source"]
    # Each setting was computed once (one announcement each) and then cached in one file each.
    assert first.stderr.count("computing the classic baselines") == 2, first.stderr
    assert sorted(p.name.split("_")[2] for p in cache_dir.glob("*.json")) == ["1ref", "9ref"]
    # The scorer and caption length rows are still there, unchanged in shape.
    assert [s["name"] for s in report["scorers"]] == ["caption length (words)"]


def test_the_rows_correlate_the_cached_scores_and_9_refs_differ_from_1(subset):
    data, cache_dir, first = subset
    candidates = load_vatex_eval(data)
    one, nine = (vatex_baselines(candidates, n, cache_dir) for n in REFERENCE_SETTINGS)
    assert one.from_cache and nine.from_cache
    assert not np.array_equal(one.scores["BLEU-1"], nine.scores["BLEU-1"])
    # 9 references share more words with a candidate than its clip's first one alone: BLEU-1 rises on average.
    assert nine.scores["BLEU-1"].mean() > one.scores["BLEU-1"].mean()
    ratings = ratings_matrix(candidates)
    rows = _rows(json.loads(first.stdout))
    for name, values in {**one.named(), **nine.named()}.items():
        emscore_tau = rows[name][0]["statistics"][0]
        assert emscore_tau["name"] == "kendall_b"
        assert emscore_tau["value"] == pytest.approx(np.mean([kendalltau(values, ratings[:, a]).statistic for a in range(3)]),
                                                     abs=1e-12)


def test_a_rerun_reads_the_cache_without_pycocoevalcap(subset, tmp_path):
    """With pycocoevalcap made unimportable, the cached rerun still gives the same rows; the same run with an
    empty cache cannot (it would have to import pycocoevalcap): so the first result came from the cache."""
    data, cache_dir, first = subset
    hidden = tmp_path / "hide" / "pycocoevalcap"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError('pycocoevalcap hidden by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(hidden.parent), os.environ.get("PYTHONPATH")]))}
    cached = _baselines_json(data, cache_dir, env=env, warm=False)
    assert cached.returncode == 0, cached.stderr
    assert "computing" not in cached.stderr and "not used" not in cached.stderr
    assert _rows(json.loads(cached.stdout)) == _rows(json.loads(first.stdout))
    uncached = _baselines_json(data, tmp_path / "empty_cache", env=env, warm=False)
    assert uncached.returncode == 1, uncached.stdout
    assert uncached.stderr.strip().endswith(
        "capjudge vatex: baselines unavailable: the Python package 'pycocoevalcap' is not installed"), uncached.stderr


def test_a_corrupt_cache_file_is_recomputed_and_replaced(subset, tmp_path):
    data, cache_dir, first = subset
    cache = tmp_path / "cache"
    shutil.copytree(cache_dir, cache)
    corrupt = cache_path(cache, load_vatex_eval(data), 9)
    corrupt.write_text('{"format": 1, "key": "tru', encoding="utf-8")
    rerun = _baselines_json(data, cache)
    assert rerun.returncode == 0, rerun.stderr
    notes = [line for line in rerun.stderr.splitlines() if "not used" in line]
    assert notes == [(f"capjudge vatex: {corrupt}: cache file is unreadable or corrupt (JSONDecodeError); "
                      "not used: recomputed and replaced")], rerun.stderr
    assert rerun.stderr.count("computing the classic baselines with 9") == 1
    assert "computing the classic baselines with 1 " not in rerun.stderr  # the 1-ref file was fine
    assert _rows(json.loads(rerun.stdout)) == _rows(json.loads(first.stdout))
    assert json.loads(corrupt.read_text(encoding="utf-8"))["n_items"] == 120  # one per candidate


def test_a_cache_file_of_other_content_is_not_used(subset, tmp_path):
    """Another 20 clips, with the first subset's 1-ref cache file put where theirs belongs (as a file copied
    by hand would be): its key is not theirs, so it is recomputed, and their rows are their own."""
    data, cache_dir, _ = subset
    other = _vatex(tmp_path, "other.json", subset_clips(offset=7))
    other_candidates = load_vatex_eval(other)
    cache = tmp_path / "cache"
    cache.mkdir()
    planted = cache_path(cache, other_candidates, 1)
    shutil.copy(cache_path(cache_dir, load_vatex_eval(data), 1), planted)
    result = _baselines_json(other, cache)
    assert result.returncode == 0, result.stderr
    note = (f"capjudge vatex: {planted}: cache file belongs to other content (its key is not this data's); "
            "not used: recomputed and replaced")
    assert note in result.stderr.splitlines(), result.stderr
    reread = vatex_baselines(other_candidates, 1, cache)
    assert reread.from_cache
    assert not np.array_equal(reread.scores["CIDEr"], vatex_baselines(load_vatex_eval(data), 1, cache_dir).scores["CIDEr"])
    ratings = ratings_matrix(other_candidates)
    tau = _rows(json.loads(result.stdout))["CIDEr (1 ref)"][0]["statistics"][0]["value"]
    assert tau == pytest.approx(np.mean([kendalltau(reread.scores["CIDEr"], ratings[:, a]).statistic for a in range(3)]),
                                abs=1e-12)


def test_the_table_prints_the_baselines_as_rows(subset):
    data, cache_dir, _ = subset
    result = run_capjudge("vatex", str(data), "--baselines", "--cache-dir", str(cache_dir), "--resamples", "20")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("classic baseline"))
    assert header.split() == ["classic", "baseline", "EMScore", "tau-b", "EMScore", "rho", "pooled", "tau-b", "pooled",
                              "tau-c", "mean", "rating", "tau-b", "mean", "rating", "tau-c"]
    names = [line.split("  ")[0] for line in lines[lines.index(header) + 2:][:len(NAMES)]]
    assert names == NAMES
    assert sum(line.startswith("baselines: pycocoevalcap") for line in lines) == 2  # one source line per setting
    assert any(line.startswith("human ceiling: tau-b") for line in lines)


def test_an_unwritable_cache_folder_is_one_line_and_exit_2(subset, tmp_path):
    data, _, _ = subset
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    result = run_capjudge("vatex", str(data), "--baselines", "--cache-dir", str(not_a_folder), "--resamples", "0")
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    assert result.stderr.strip() == f"capjudge vatex: --cache-dir {not_a_folder}: is a file, not a folder"


@pytest.mark.parametrize("bad", ["Infinity", "NaN", "1e999"])
def test_a_cache_file_with_a_non_finite_score_is_not_used(tmp_path, bad):
    """A file under the right key whose scores hold a value no baseline gives (json reads Infinity, NaN, 1e999)
    is not read as scores: reading it says what is wrong (and vatex_baselines then recomputes and replaces it)."""
    from capjudge.metrics.human_correlation.baseline_cache import CACHE_FORMAT, pycocoevalcap_version, read_cache, sealed
    from capjudge.metrics.human_correlation.vatex_baselines import vatex_cache_key
    from capjudge.judges.datasets.vatex_eval import VatexCandidate

    candidates = [VatexCandidate("clip_a", i, f"a caption {i}", ("a reference",), (3, 4, 5)) for i in range(2)]
    key = vatex_cache_key(candidates, 1, pycocoevalcap_version())
    scores = {name: [0.5, 0.25] for name in BASELINE_SCORERS}
    path = tmp_path / "cache.json"
    # Sealed with its digest, as the cache writes it: a file without one is stale (tests/metrics/human_correlation/test_hostile_vatex.py).
    path.write_text(json.dumps(sealed({"format": CACHE_FORMAT, "key": key, "scores": scores})))
    ids = ("clip_a#0", "clip_a#1")
    assert read_cache(path, key, ids)[0] is not None  # the same file with finite scores is read
    path.write_text(path.read_text().replace("0.25", bad, 1))
    cached, problem = read_cache(path, key, ids)
    assert cached is None and "finite numbers" in problem, problem

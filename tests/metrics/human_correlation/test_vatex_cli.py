"""`capjudge vatex` on the real VATEX-EVAL ratings (../shared) with a synthetic scorer: every protocol's point
estimate against an independent scipy computation, the clustered intervals and their method in the output, the
table, a partial scorer, and bad inputs (one line naming the file or item, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from capjudge.judges.datasets.vatex_eval import load_vatex_eval, ratings_matrix
from tests.support.paths import shared_path
from tests.support.harness_runs import run_capjudge
from tests.support.once_per_run import built_once
from scipy.stats import kendalltau, spearmanr

VATEX = ("data", "vatex_eval", "vid_cans_score_dict.json")
RESAMPLES = "30"  # the point estimates do not depend on it; the intervals only need to exist


@pytest.fixture(scope="module")
def vatex():
    path = shared_path(*VATEX)
    return path, load_vatex_eval(path)


def _synthetic_scores(candidates) -> np.ndarray:
    """Mean rating plus noise, so the coefficients are far from 0 and from 1 (and ties are rare)."""
    noise = np.random.default_rng(7).normal(0, 1.0, len(candidates))
    return ratings_matrix(candidates).mean(axis=1) + noise


def _write_scorer(path, candidates, scores):
    path.write_text("".join(json.dumps({"clip_id": c.clip_id, "candidate_index": c.candidate_index, "score": float(s)}) + "\n"
                            for c, s in zip(candidates, scores)))
    return path


def _expected(scores: np.ndarray, ratings: np.ndarray) -> dict[str, dict[str, float]]:
    """Each protocol computed here with scipy alone, from its published definition."""
    tau = lambda x, y, variant="b": kendalltau(x, y, variant=variant).statistic  # noqa: E731
    others = [np.delete(ratings, a, axis=1).mean(axis=1) for a in range(3)]
    return {
        "emscore_per_annotator": {"kendall_b": np.mean([tau(scores, ratings[:, a]) for a in range(3)]),
                                  "spearman": np.mean([spearmanr(scores, ratings[:, a]).statistic for a in range(3)])},
        "gveval_pooled": {"kendall_b": tau(np.repeat(scores, 3), ratings.ravel()),
                          "kendall_c": tau(np.repeat(scores, 3), ratings.ravel(), "c")},
        "gveval_mean_rating": {"kendall_b": tau(scores, ratings.mean(axis=1)), "kendall_c": tau(scores, ratings.mean(axis=1), "c")},
        "human_ceiling": {"kendall_b": np.mean([tau(others[a], ratings[:, a]) for a in range(3)]),
                          "kendall_c": np.mean([tau(others[a], ratings[:, a], "c") for a in range(3)]),
                          "spearman": np.mean([spearmanr(others[a], ratings[:, a]).statistic for a in range(3)])},
    }


def _check(protocol: dict, expected: dict[str, float]) -> None:
    assert {s["name"] for s in protocol["statistics"]} == set(expected)
    for statistic in protocol["statistics"]:
        assert statistic["value"] == pytest.approx(expected[statistic["name"]], abs=1e-12), (protocol["protocol"], statistic["name"])
        assert statistic["ci_low"] <= statistic["value"] <= statistic["ci_high"]
        assert statistic["n_resamples"] == int(RESAMPLES)


@pytest.fixture(scope="module")
def full_report(vatex, tmp_path_factory, worker_id):
    """The report on all 18,000 candidates, made once per test run (tests/support/once_per_run.py): its tests
    may run on different workers."""
    path, candidates = vatex
    scores = _synthetic_scores(candidates)

    def build(folder):
        scorer = _write_scorer(folder / "synthetic.jsonl", candidates, scores)
        result = run_capjudge("vatex", str(path), str(scorer), "--format", "json", "--resamples", RESAMPLES, "--seed",
                              "3", timeout=600)
        assert result.returncode == 0, result.stderr
        (folder / "report.json").write_text(result.stdout, encoding="utf-8")

    folder = built_once(tmp_path_factory, worker_id, "vatex_cli_full_report", build)
    return json.loads((folder / "report.json").read_text(encoding="utf-8")), scores


def test_every_protocol_matches_scipy_on_the_real_ratings(full_report, vatex):
    report, scores = full_report
    _, candidates = vatex
    ratings = ratings_matrix(candidates)
    assert (report["n_candidates"], report["n_clips"], report["n_unscored"]) == (18_000, 3_000, 0)
    synthetic, length = report["scorers"]
    assert synthetic["name"] == "synthetic" and length["name"] == "caption length (words)"
    expected = _expected(scores, ratings)
    for protocol in synthetic["protocols"]:
        _check(protocol, expected[protocol["protocol"]])
    words = np.array([len(c.caption.split()) for c in candidates], dtype=float)
    for protocol in length["protocols"]:
        _check(protocol, _expected(words, ratings)[protocol["protocol"]])
    _check(report["human_ceiling"], expected["human_ceiling"])
    assert [p["n_rows"] for p in synthetic["protocols"]] == [18_000, 54_000, 18_000]
    # The per-annotator protocol keeps the 3 values it averages.
    emscore_tau = synthetic["protocols"][0]["statistics"][0]
    assert emscore_tau["per_annotator"] == pytest.approx([kendalltau(scores, ratings[:, a]).statistic for a in range(3)])


def test_the_interval_method_is_stated(full_report):
    report, _ = full_report
    assert report["ci_method"].startswith(f"bootstrap clustered by clip: {RESAMPLES} resamples of the 3000 clips")
    assert "seed 3" in report["ci_method"]


def test_the_table_prints_every_protocol_with_its_interval_and_method(vatex, tmp_path):
    path, candidates = vatex
    scorer = _write_scorer(tmp_path / "half.jsonl", candidates[:600], _synthetic_scores(candidates[:600]))
    result = run_capjudge("vatex", str(path), str(scorer), "--resamples", "20")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "600 candidates of 100 clips, 3 annotators; 17,400 candidates without a score left out" in out
    assert "bootstrap clustered by clip: 20 resamples of the 100 clips" in out
    for label in ("EMScore (per annotator, mean of 3)", "G-VEval pooled", "vs mean rating", "human ceiling: tau-b"):
        assert label in out
    header = next(line for line in out.splitlines() if line.startswith("protocol"))
    assert header.split() == ["protocol", "coef", "half", "caption", "length", "(words)"]
    ratings = ratings_matrix(candidates[:600])
    expected = 100 * np.mean([kendalltau(_synthetic_scores(candidates[:600]), ratings[:, a]).statistic for a in range(3)])
    row = next(line for line in out.splitlines() if line.startswith("EMScore") and " tau-b " in line)
    assert row.split("tau-b")[1].split()[0] == f"{expected:.1f}"


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (['{"clip_id": "nope", "candidate_index": 0, "score": 1}'], "line 1: clip 'nope' candidate 0 is not in the VATEX-EVAL file"),
        (['{"clip_id": "--07WQ2iBlw_000001_000011", "candidate_index": 0, "score": 1}',
          '{"clip_id": "--07WQ2iBlw_000001_000011", "candidate_index": 0, "score": 2}'], "line 2: clip '--07WQ2iBlw_000001_000011' candidate 0 is scored twice"),
        (['{"clip_id": "--07WQ2iBlw_000001_000011", "candidate_index": 0, "score": "high"}'], "line 1: 'score': 'high' is"),
        (['{"clip_id": "--07WQ2iBlw_000001_000011", "score": 1}'], "line 1: needs a string 'clip_id' and an integer 'candidate_index'"),
        (['not json'], "line 1"),
        (['{"clip_id": "--07WQ2iBlw_000001_000011", "candidate_index": 0, "score": 4}',
          '{"clip_id": "--07WQ2iBlw_000001_000011", "candidate_index": 1, "score": 4}'], "scorer values are all 4"),
    ],
)
def test_a_bad_scorer_file_is_one_line_naming_it_and_exit_2(vatex, tmp_path, lines, problem):
    path, _ = vatex
    scorer = tmp_path / "scores.jsonl"
    scorer.write_text("\n".join(lines) + "\n")
    result = run_capjudge("vatex", str(path), str(scorer), "--resamples", "0")
    assert result.returncode == 2, result.stdout
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"capjudge vatex: {scorer}") and problem in result.stderr, result.stderr


def test_a_bad_vatex_file_names_the_file_and_the_clip(tmp_path):
    data = tmp_path / "vatex.json"
    data.write_text(json.dumps({"clipA": {"cands": ["a man runs"], "scores": "[[1, 2]]", "refs": [["a man is running"]]}}))
    result = run_capjudge("vatex", str(data))
    assert result.returncode == 2
    assert result.stderr.strip() == f"capjudge vatex: {data}: clip 'clipA', candidate 0: expected 3 annotator ratings, got [1, 2]"
    missing = run_capjudge("vatex", str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and missing.stderr.strip() == f"capjudge vatex: {tmp_path / 'absent.json'}: no such file"


def test_bad_arguments_exit_2(vatex, tmp_path):
    path, _ = vatex
    negative = run_capjudge("vatex", str(path), "--resamples", "-1")
    assert negative.returncode == 2 and negative.stderr.strip() == "capjudge vatex: --resamples must be 0 or more, got -1"
    folder = tmp_path / "no_runs"
    folder.mkdir()
    empty = run_capjudge("vatex", str(path), str(folder), "--resamples", "0")
    assert empty.returncode == 2 and str(folder) in empty.stderr and len(empty.stderr.strip().splitlines()) == 1


def test_cache_dir_without_baselines_is_a_usage_error(vatex, tmp_path):
    path, _ = vatex
    result = run_capjudge("vatex", str(path), "--cache-dir", str(tmp_path), "--resamples", "0")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == "capjudge vatex: --cache-dir applies to --baselines"
    assert list(tmp_path.iterdir()) == []  # nothing computed, nothing cached


def _standardised_log_words(words: np.ndarray) -> np.ndarray:
    logs = np.log(np.maximum(words, 1.0))
    return (logs - logs.mean()) / logs.std()


def _fixed_effects_slope(scores: np.ndarray, z: np.ndarray, clips: np.ndarray) -> float:
    """OLS slope of scores on z with a dummy column per clip, by numpy's least squares (the textbook design)."""
    _, index = np.unique(clips, return_inverse=True)
    design = np.zeros((len(scores), index.max() + 2))
    design[np.arange(len(scores)), index] = 1.0
    design[:, -1] = z
    return float(np.linalg.lstsq(design, scores, rcond=None)[0][-1])


def _demeaned_slope(scores: np.ndarray, z: np.ndarray, clips: np.ndarray) -> float:
    """The same slope from the within-clip demeaned data (Frisch-Waugh-Lovell)."""
    _, index = np.unique(clips, return_inverse=True)
    counts = np.bincount(index)
    zd = z - (np.bincount(index, weights=z) / counts)[index]
    yd = scores - (np.bincount(index, weights=scores) / counts)[index]
    return float(zd @ yd / (zd @ zd))


def test_the_length_bias_rows_are_the_within_clip_slopes_and_their_difference(full_report, vatex):
    report, scores = full_report
    _, candidates = vatex
    bias = report["length_bias"]
    human = ratings_matrix(candidates).mean(axis=1)
    z = _standardised_log_words(np.array([len(c.caption.split()) for c in candidates], dtype=float))
    clips = np.array([c.clip_id for c in candidates])
    for side, values in (("judge", scores), ("human", human)):
        assert bias[side]["slope"] == pytest.approx(_demeaned_slope(values / values.std(), z, clips), rel=1e-9)
        assert bias[side]["interval"]["low"] <= bias[side]["slope"] <= bias[side]["interval"]["high"]
        assert (bias[side]["n_candidates"], bias[side]["n_clusters"]) == (18_000, 3_000)
    assert bias["excess"] == pytest.approx(bias["judge"]["slope"] - bias["human"]["slope"], abs=1e-12)
    # The demeaned form is the fixed-effects OLS slope: checked against the dummy design on 200 clips.
    subset = slice(0, 1200)
    assert _fixed_effects_slope(human[subset], z[subset], clips[subset]) == pytest.approx(
        _demeaned_slope(human[subset], z[subset], clips[subset]), rel=1e-9)


@pytest.mark.parametrize(("kind", "verdict"), [("length_loving", "rewards length beyond the raters"),
                                               ("mean_rating", "no excess length bias shown")])
def test_a_length_loving_scorer_is_named_and_the_raters_own_mean_shows_no_excess(vatex, tmp_path, kind, verdict):
    path, candidates = vatex
    chosen = candidates[:3000]  # 500 clips
    human = ratings_matrix(chosen).mean(axis=1)
    logs = np.log([max(len(c.caption.split()), 1) for c in chosen])
    scores = human + (human.std() * (logs - logs.mean()) / logs.std() if kind == "length_loving" else 0.0)
    scorer = _write_scorer(tmp_path / f"{kind}.jsonl", chosen, scores)
    result = run_capjudge("vatex", str(path), str(scorer), "--resamples", "200", "--format", "json")
    assert result.returncode == 0, result.stderr
    bias = json.loads(result.stdout)["length_bias"]
    if kind == "length_loving":
        assert bias["interval"]["low"] > 0
    else:  # the scorer is the humans' mean itself: the same slope, to rounding
        assert bias["excess"] == pytest.approx(0.0, abs=1e-9)
    table = run_capjudge("vatex", str(path), str(scorer), "--resamples", "200")
    assert table.returncode == 0, table.stderr
    assert "Length bias (within-clip slope on standardised log words" in table.stdout and verdict in table.stdout

"""`capjudge correlate` end to end, as a subprocess, on JSONL written here and on the real MSVD-Eval."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from capjudge.metrics.human_correlation.baselines import BASELINE_SCORERS
from tests.support.harness_runs import run_capjudge
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.judges.datasets.msvd_eval import human_matrix, load_msvd_eval
from tests.support.paths import SHARED

MSVD_PATH = SHARED / "data" / "msvd_eval" / "MSVD-Eval.json"
COEFFICIENT_KEYS = {"kendall_b", "kendall_c", "pearson", "spearman"}


def run_cli(*args: str):
    return run_capjudge("correlate", *args, timeout=300)


@pytest.fixture()
def scores_jsonl(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        truth = float(rng.integers(1, 6))
        annotators = [[truth, min(5.0, truth + 1), truth], [truth, truth, max(1.0, truth - 1)]]
        rows.append({
            "id": f"v{i}",
            "type": "brief" if i % 2 else "detail",
            "good": truth + float(rng.normal(scale=0.5)),
            "poor": None if i == 5 else truth + float(rng.normal(scale=2.0)),
            "human": [a[0] for a in annotators],
            "human_dims": annotators,
        })
    path = tmp_path / "scores.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path, rows


def test_jsonl_json_output_per_judge_and_group(scores_jsonl):
    path, rows = scores_jsonl
    done = run_cli(str(path), "--judge", "good", "--judge", "poor", "--human", "human", "--group-by", "type",
                   "--bootstrap", "200", "--seed", "1", "--format", "json", "--compare")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    good = report["good"]["human"]
    assert set(good) == COEFFICIENT_KEYS | {"n"} and good["n"] == 120
    x = np.repeat([r["good"] for r in rows], 2)
    y = np.array([r["human"] for r in rows], dtype=float).ravel()
    assert good["kendall_b"]["value"] == pytest.approx(stats.kendalltau(x, y, variant="b").statistic)
    assert good["kendall_c"]["value"] == pytest.approx(stats.kendalltau(x, y, variant="c").statistic)
    low, high = good["pearson"]["ci"]
    assert low < good["pearson"]["value"] < high
    # The null judge score is dropped and counted.
    assert report["poor"]["human"]["n"] == 118
    assert report["_details"]["poor"]["human"]["missing"]["judge_missing"] == 1
    groups = report["_groups"]
    assert set(groups) == {"type=brief", "type=detail"}
    assert groups["type=brief"]["good"]["human"]["n"] == 60
    brief = [r for r in rows if r["type"] == "brief"]
    assert groups["type=brief"]["good"]["human"]["spearman"]["value"] == pytest.approx(
        stats.spearmanr(np.repeat([r["good"] for r in brief], 2), np.ravel([r["human"] for r in brief])).statistic
    )
    assert "human" in report["_ceiling"]
    comparison = report["_comparisons"][0]["differences"]
    assert {d["coefficient"] for d in comparison} == COEFFICIENT_KEYS
    assert all(d["first"] == "good" and d["second"] == "poor" and d["ci"][0] > 0 for d in comparison)


def test_jsonl_human_index_mean_mode_markdown(scores_jsonl):
    path, rows = scores_jsonl
    done = run_cli(str(path), "--judge", "good", "--human", "human_dims", "--human-index", "1", "--human-index", "2",
                   "--annotators", "mean", "--bootstrap", "100", "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "## Target `human_dims[1]`" in done.stdout and "## Target `human_dims[2]`" in done.stdout
    assert "| good |" in done.stdout and "60 (60)" in done.stdout
    expected = stats.kendalltau([r["good"] for r in rows], [np.mean([a[2] for a in r["human_dims"]]) for r in rows])
    assert f"| good | {100 * expected.statistic:.1f} [" in done.stdout.split("## Target `human_dims[2]`")[1]


def test_errors_name_the_line_and_bad_usage_exits_2(tmp_path, scores_jsonl):
    path, _ = scores_jsonl
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"good": 1, "human": 2}\n{"good": "high", "human": 3}\n')
    done = run_cli(str(broken), "--judge", "good", "--human", "human")
    assert done.returncode == 2 and "line 2" in done.stderr and "'good'" in done.stderr
    nested = run_cli(str(path), "--judge", "good", "--human", "human_dims")
    assert nested.returncode == 2 and "annotator index" in nested.stderr and "--human-index" in nested.stderr
    assert run_cli(str(path), "--judge", "good").returncode == 2
    assert run_cli("--msvd-eval", str(path)).returncode == 2


@pytest.fixture(scope="module")
def msvd_json_report(tmp_path_factory, run_baseline_cache):
    if not MSVD_PATH.is_file():
        pytest.skip(f"shared data not present: {MSVD_PATH}")
    items = load_msvd_eval(MSVD_PATH)
    judge_file = tmp_path_factory.mktemp("judge") / "judge.jsonl"
    lengths = {item.item_id: len(item.candidate.split()) for item in items}
    judge_file.write_text("".join(json.dumps({"id": k, "words": v}) + "\n" for k, v in lengths.items()))
    done = run_cli("--msvd-eval", str(MSVD_PATH), "--baselines", "--cache-dir", str(run_baseline_cache),
                   "--judge-scores", str(judge_file), "--bootstrap", "200", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), items, lengths, judge_file


def test_msvd_baselines_are_cached_by_content(msvd_json_report, run_baseline_cache, tmp_path):
    """A rerun reads the cached baselines (no computation) and reports the same (test_baselines_msvd compares
    the cached scores with a direct computation); a cache folder that is a file is one line, exit 2."""
    report, _, _, judge_file = msvd_json_report
    args = ("--msvd-eval", str(MSVD_PATH), "--baselines", "--judge-scores", str(judge_file), "--bootstrap", "200",
            "--format", "json")
    rerun = run_cli(*args, "--cache-dir", str(run_baseline_cache))
    assert rerun.returncode == 0, rerun.stderr
    assert "computing" not in rerun.stderr and "not used" not in rerun.stderr, rerun.stderr
    assert json.loads(rerun.stdout) == report
    (cache_file,) = run_baseline_cache.glob("msvd_eval_baselines_*.json")
    assert json.loads(cache_file.read_text())["n_items"] == 197

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    refused = run_cli(*args, "--cache-dir", str(not_a_folder))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == f"capjudge correlate: --cache-dir {not_a_folder}: is a file, not a folder"
    unused = run_cli(str(MSVD_PATH), "--judge", "x", "--human", "y", "--cache-dir", str(tmp_path))
    assert unused.returncode == 2 and "--cache-dir apply to --msvd-eval" in unused.stderr, unused.stderr
    # --judge selects nothing without --judge-scores (a --run's scorer is its main score): it was ignored.
    for extra in (("--run", str(tmp_path)), ("--baselines",)):
        ignored = run_cli("--msvd-eval", str(MSVD_PATH), *extra, "--judge", "gveval_conciseness")
        assert ignored.returncode == 2 and ignored.stdout == "", ignored.stderr
        assert ignored.stderr.strip().startswith("capjudge correlate: --judge selects fields of --judge-scores FILE")


def test_msvd_baseline_json_shape(msvd_json_report):
    report, _, _, _ = msvd_json_report
    scorers = {key for key in report if not key.startswith("_")}
    assert scorers == set(BASELINE_SCORERS) | {"words"}
    for scorer in scorers:
        assert set(report[scorer]) == set(SCORE_NAMES)
        for target, cell in report[scorer].items():
            assert set(cell) == COEFFICIENT_KEYS | {"n"} and cell["n"] == 394
            for name in COEFFICIENT_KEYS:
                assert set(cell[name]) == {"value", "ci"}
                value, (low, high) = cell[name]["value"], cell[name]["ci"]
                assert -1 <= low < high <= 1 and -1 <= value <= 1, (scorer, target, name)
    assert set(report["_ceiling"]) == set(SCORE_NAMES)
    assert 0 < report["_ceiling"]["mean"]["krippendorff_alpha_interval"]["value"] < 1


def test_msvd_judge_scores_match_scipy_on_expanded_pairs(msvd_json_report):
    report, items, lengths, _ = msvd_json_report
    for dimension in ("mean", "conciseness"):
        human = human_matrix(items, dimension)
        x = np.repeat([lengths[item.item_id] for item in items], 2)
        expected = stats.kendalltau(x, human.ravel(), variant="c").statistic
        assert report["words"][dimension]["kendall_c"]["value"] == pytest.approx(expected)

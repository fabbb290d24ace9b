"""Judge noise against known truth: k replies per item from a test server whose replies for each item are drawn
from a known distribution (the item's true score + Gaussian noise of a known SD), judged by the real
`capjudge judge` (G-VEval, text scoring, CAPJUDGE_JUDGE_SAMPLES=4) and measured by `capjudge.metrics.
reliability`. Over several seeds, the reported per-item SD and ICC(1,1) cover the true values with their CIs.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading

import numpy as np
import pytest
from capjudge.judges.record import JudgedRecord
from capjudge.metrics.statistics.reliability import ReliabilityError, retest_statistics, sample_matrix
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_synthetic_msvd
from tests.support.openai_server import OpenAITestServer, Reply, prompt_text

pytestmark = pytest.mark.slow

N_ITEMS, K, NOISE_SD = 150, 4, 8.0
TASK = "gveval_references"


def true_score(item: int) -> float:
    """The item's true score, 25..75, known to the test and the server alike."""
    return 25 + 50 * int(hashlib.sha256(str(item).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def noisy_responder(seed: int):
    """Replies drawn from the item's true score + N(0, NOISE_SD) per dimension, rounded. The j-th request for an
    item draws from a generator seeded by (seed, item, j), so the run is the same whatever order the judge's
    threads send in."""
    calls: dict[int, int] = {}
    lock = threading.Lock()

    def respond(body):
        item = int(re.search(r"caption for item (\d+)", prompt_text(body)).group(1))
        with lock:
            call = calls.get(item, 0)
            calls[item] = call + 1
        rng = np.random.default_rng([seed, item, call])
        a, b, c, d = np.clip(np.rint(true_score(item) + rng.normal(0, NOISE_SD, 4)), 0, 100).astype(int)
        return Reply(f"Judged. The Accuracy score is α{a}α. The Completeness score is β{b}β. "
                     f"The Conciseness score is ψ{c}ψ. The Relevance score is δ{d}δ.")

    return respond


def _judge(tmp_path, server, samples: int):
    out = judge_synthetic_msvd(tmp_path, server.base_url, n_items=N_ITEMS, samples=samples)
    (path,) = list(out.rglob(f"*_samples_{TASK}.jsonl"))
    return out, [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reported_noise_and_icc_recover_the_true_values(tmp_path, seed):
    with OpenAITestServer(responder=noisy_responder(seed)) as server:
        _, lines = _judge(tmp_path, server, K)
        assert len(server.log) == N_ITEMS * K  # k independent replies per item, each its own request
    record = lines[0]["judged"]["judgment"]
    assert len(record["samples"]) == K and set(record["spread"]) >= {"accuracy", "mean"}
    # The item's score is the mean of its k replies.
    for line in lines[:5]:
        replies = [s["scores"]["accuracy"] for s in line["judged"]["judgment"]["samples"]]
        assert line["gveval_accuracy"] == pytest.approx(np.mean(replies))
    matrix, k, left_out = sample_matrix([JudgedRecord.in_line(line) for line in lines], "accuracy")
    assert (matrix.shape, k, left_out) == ((N_ITEMS, K), K, 0)
    report = retest_statistics(matrix, score="accuracy", n_resamples=1000, seed=seed)
    truth = np.array([true_score(int(line["judged"]["item_id"][4:])) for line in lines])
    true_sd = np.sqrt(NOISE_SD**2 + 1 / 12)  # the replies are rounded to integers
    true_icc = truth.var(ddof=1) / (truth.var(ddof=1) + true_sd**2)
    assert report.item_sd.ci_low <= true_sd <= report.item_sd.ci_high, report.item_sd
    assert report.icc_single.ci_low <= true_icc <= report.icc_single.ci_high, (report.icc_single, true_icc)
    assert report.alpha.ci_low <= true_icc <= report.alpha.ci_high
    import krippendorff  # the closed form for complete data equals the package's general computation

    assert report.alpha.value == pytest.approx(krippendorff.alpha(reliability_data=matrix.T, level_of_measurement="interval"))
    true_noise_share = true_sd**2 / (truth.var(ddof=1) + true_sd**2)
    assert abs(report.noise_share_of_one - true_noise_share) < 0.1


def test_the_reliability_command_reports_it_and_a_single_reply_run_is_not_measurable(tmp_path):
    with OpenAITestServer(responder=noisy_responder(7)) as server:
        out, _ = _judge(tmp_path / "k3", server, 3)
        single, _ = _judge(tmp_path / "k1", server, 1)
    result = run_capjudge("reliability", str(out), "--task", TASK, "--score", "accuracy", "--resamples", "200")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("| accuracy |"))
    assert f"| {N_ITEMS} (0) | 3 |" in row
    refused = run_capjudge("reliability", str(single), "--task", TASK)
    assert refused.returncode == 2 and "not measurable" in refused.stderr and "CAPJUDGE_JUDGE_SAMPLES" in refused.stderr
    with pytest.raises(ReliabilityError, match="share"):
        retest_statistics(np.ones((5, 2)), share=1.5)


def test_the_intervals_cover_the_truth_at_their_level_in_simulation():
    """200 simulated runs (150 items x 4 replies, known truth): the 95% CIs of the pooled per-item SD and of
    ICC(1,1) each cover the true value in at least 90% of them (BCa; a plain percentile interval of the SD
    covered 88% at 60 items)."""
    truth = np.array([true_score(i) for i in range(N_ITEMS)])
    true_sd = np.sqrt(NOISE_SD**2 + 1 / 12)
    true_icc = truth.var(ddof=1) / (truth.var(ddof=1) + true_sd**2)
    covered_sd = covered_icc = 0
    runs = 200
    for seed in range(runs):
        noise = np.random.default_rng(seed).normal(0, NOISE_SD, (N_ITEMS, K))
        report = retest_statistics(np.rint(truth[:, None] + noise), n_resamples=500, seed=seed)
        covered_sd += report.item_sd.ci_low <= true_sd <= report.item_sd.ci_high
        covered_icc += report.icc_single.ci_low <= true_icc <= report.icc_single.ci_high
    assert covered_sd / runs >= 0.9 and covered_icc / runs >= 0.9, (covered_sd, covered_icc)



def test_two_judges_on_the_same_runs_agreement_and_ranking(tmp_path):
    """Two judges (the rubric responder, and a harsher one that takes 20 off every score) on the same two
    caption sets: tau-b and Spearman equal scipy's on the common items, the mean difference is about -20, and
    the ranking (good over poor) does not change."""
    from tests.support.harness_runs import run_lmms_eval
    from tests.support.openai_server import rubric_responder
    from scipy import stats

    def harsh(body):
        reply = rubric_responder(body)
        text = re.sub(r"([αβψδ])(\d+)\1", lambda m: f"{m.group(1)}{max(0, int(m.group(2)) - 20)}{m.group(1)}", reply.content)
        return Reply(text)

    folders = {}
    for judge_name, responder in (("rubric", None), ("harsh", harsh)):
        options = {"responder": responder} if responder else {}
        with OpenAITestServer(**options) as server:
            for captions in ("good", "poor"):
                run_lmms_eval(model="captions_file", model_args=f"path={REPO_ROOT / 'tasks/demo' / f'captions_{captions}.jsonl'}",
                              tasks="gveval_demo", output_path=tmp_path / judge_name, judge_base_url=server.base_url,
                              cache_path=tmp_path / f"{judge_name}.sqlite",
                              env={"CAPJUDGE_GVEVAL_SCORING": "text"})
        folders[judge_name] = tmp_path / judge_name
    result = run_capjudge("agreement", str(folders["rubric"]), str(folders["harsh"]), "--task", "gveval_demo",
                          "--metric", "gveval_accuracy", "--resamples", "300")
    assert result.returncode == 0, result.stderr
    assert "Model ranking is the same: first judge captions_good > captions_poor" in result.stdout
    good = next(line for line in result.stdout.splitlines() if line.startswith("| captions_good |"))
    cells = [cell.strip() for cell in good.strip("|").split("|")]
    assert cells[1] == "10"
    assert float(cells[6].split()[0]) == pytest.approx(float(cells[5]) - float(cells[4]), abs=1e-3)
    assert float(cells[6].split()[0]) < -10  # the harsher judge scores lower

    def per_item(folder):
        (path,) = [p for p in folder.rglob("*_samples_gveval_demo.jsonl") if "good" in str(p)]
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return {line["judged"]["item_id"]: line["gveval_accuracy"] for line in lines}

    a, b = per_item(folders["rubric"]), per_item(folders["harsh"])
    items = sorted(a)
    expected = stats.kendalltau([a[i] for i in items], [b[i] for i in items]).statistic
    assert float(cells[2].split()[0]) == pytest.approx(expected, abs=1e-3)
    disjoint = run_capjudge("agreement", str(folders["rubric"]), str(tmp_path / "nowhere"), "--task", "gveval_demo",
                            "--metric", "gveval_accuracy")
    assert disjoint.returncode == 2 and "nowhere" in disjoint.stderr

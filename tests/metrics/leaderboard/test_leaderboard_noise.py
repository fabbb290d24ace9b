"""Noise-aware leaderboards (#17 item 3): with k > 1 judge replies per item, CIs and differences come from the
two-level bootstrap (items, then replies within items) and each model's judge-noise share of its CI width is
reported; with k = 1 nothing changes.

Against known truth: item effects of SD sigma_b and judge noise of SD sigma_w, k replies per item. The k-reply
mean of n items varies as (sigma_b^2 + sigma_w^2 / k) / n; a noise-free judge would leave sigma_b^2 / n; so the
true share of the CI's width that is judge noise is 1 - sqrt(sigma_b^2 / (sigma_b^2 + sigma_w^2 / k)).
Then end to end: real `capjudge judge` runs with k = 3 replies from a test server whose replies are the
item's known score plus noise of a known SD, read by the real `capjudge leaderboard`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import threading

import numpy as np
import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_synthetic_msvd, run_capjudge_cli
from tests.support.openai_server import OpenAITestServer, Reply, prompt_text

from capjudge.metrics.leaderboard.stats import LeaderboardSettings, mean_estimate, paired_comparison

N = 200
# The bootstrap's own Monte Carlo error of the share at 2,000 resamples, measured over 30 bootstrap seeds on
# one data set (share 0.15): SD 0.010. Added to the sampling error below.
MONTE_CARLO_SD = 0.010


def _true_share(sigma_b: float, sigma_w: float, inverse_k: float) -> float:
    return 1 - np.sqrt(sigma_b**2 / (sigma_b**2 + sigma_w**2 * inverse_k))


def _sampling_sd(sigma_b: float, sigma_w: float, k: int, n: int) -> float:
    """Delta-method SD of the estimated share 1 - sqrt(1 - W / V) from n items of k replies: W = s2_w / k and
    V = s2_m (variance of the item means) are independent under normality (within and between sums of
    squares), Var(s2_w) = 2 sigma_w^4 / (n (k - 1)) and Var(s2_m) = 2 V^2 / (n - 1)."""
    w = sigma_w**2 / k
    v = sigma_b**2 + w
    var_w = 2 * sigma_w**4 / (n * (k - 1) * k**2)
    var_v = 2 * v**2 / (n - 1)
    return float(np.sqrt((var_w + (w / v) ** 2 * var_v) / (4 * (1 - w / v) * v**2)))


def _simulated(seed: int, sigma_b: float, sigma_w: float, k: int, n: int = N, missing: float = 0.0) -> np.ndarray:
    """(n, k) replies: item mean + noise; with `missing`, that share of replies failed (NaN), one kept per item."""
    rng = np.random.default_rng(seed)
    replies = rng.normal(50, sigma_b, n)[:, None] + rng.normal(0, sigma_w, (n, k))
    if missing:
        failed = rng.random((n, k)) < missing
        failed[:, 0] = False
        replies[failed] = np.nan
    return replies


# ---------------------------------------------------------------------------------------------------------
# The statistics against known truth
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sigma_b", "sigma_w", "k"), [(10, 5, 3), (10, 10, 3), (8, 12, 3), (10, 15, 2)])
def test_the_judge_noise_share_tracks_the_truth(sigma_b, sigma_w, k):
    """20 seeded data sets per setting (true shares 0.04 to 0.31): each estimate within 4.5 SDs of the truth
    (SD: the delta method's sampling SD and the bootstrap's Monte Carlo SD together; at 4.5 SDs a correct
    estimator fails about once in 150,000), and their mean within 3 SDs of the mean plus 0.01 (the
    nonlinear share's small upward bias: 0.002 to 0.019 over 40 seeds in these settings)."""
    truth = _true_share(sigma_b, sigma_w, 1 / k)
    sd = float(np.hypot(_sampling_sd(sigma_b, sigma_w, k, N), MONTE_CARLO_SD))
    errors = []
    for seed in range(20):
        replies = _simulated(seed, sigma_b, sigma_w, k)
        estimate = mean_estimate(replies.mean(axis=1), LeaderboardSettings(seed=seed), replies)
        assert estimate.replies == k and estimate.noise_share is not None
        errors.append(estimate.noise_share - truth)
    errors = np.array(errors)
    assert np.abs(errors).max() <= 4.5 * sd, (truth, errors)
    assert abs(errors.mean()) <= 3 * sd / np.sqrt(len(errors)) + 0.01, (truth, errors.mean())


def test_more_noise_means_a_larger_share_and_none_means_zero():
    shares = []
    for sigma_w in (0.0, 4.0, 8.0, 16.0):
        replies = _simulated(5, 10, sigma_w, 3)
        shares.append(mean_estimate(replies.mean(axis=1), LeaderboardSettings(), replies).noise_share)
    assert shares[0] == 0.0 and shares == sorted(shares) and shares[-1] > 0.25


def test_failed_replies_leave_fewer_replies_and_the_truth_still_holds():
    """A third of the replies failed (each item keeps at least one): the noise of an item's mean is
    sigma_w^2 / k_i, so the truth uses the mean of 1 / k_i."""
    sigma_b, sigma_w, k = 10, 12, 4
    errors = []
    for seed in range(10):
        replies = _simulated(seed, sigma_b, sigma_w, k, missing=1 / 3)
        values = np.nanmean(replies, axis=1)
        truth = _true_share(sigma_b, sigma_w, float(np.mean(1 / np.isfinite(replies).sum(axis=1))))
        errors.append(mean_estimate(values, LeaderboardSettings(seed=seed), replies).noise_share - truth)
    sd = float(np.hypot(_sampling_sd(sigma_b, sigma_w, 3, N), MONTE_CARLO_SD))  # about 2.7 replies per item
    assert np.abs(errors).max() <= 4.5 * sd, errors


def test_the_two_level_interval_counts_the_noise_once_and_covers_the_mean():
    """An item's mean of k replies already carries the noise; resampling its replies on top, unadjusted,
    would widen the CI by sqrt(1 + s2_w (k-1) / k^2 / s2_m) (here about 13%). The adjusted two-level CI is as
    wide as the items-only one (the k-reply means' variance is the whole truth) and covers the true mean (50)
    at its level: over 200 data sets of 60 items, at least 90% (a correct 95% CI falls below 90% with
    probability under 0.2%)."""
    sigma_b, sigma_w, k, n = 10, 15, 3, 60
    settings = LeaderboardSettings(n_resamples=1000)
    ratios, naive_ratios, covered = [], [], 0
    for seed in range(200):
        replies = _simulated(seed, sigma_b, sigma_w, k, n)
        values = replies.mean(axis=1)
        two_level = mean_estimate(values, settings, replies)
        items_only = mean_estimate(values, settings)
        ratios.append((two_level.ci_high - two_level.ci_low) / (items_only.ci_high - items_only.ci_low))
        covered += two_level.ci_low <= 50 <= two_level.ci_high
        if seed < 20:  # the unadjusted version, for contrast: item means plus resampled raw residuals
            rng = np.random.default_rng(seed)
            items = rng.integers(0, n, (1000, n))
            residuals = replies - values[:, None]
            drawn = residuals[items[..., None], rng.integers(0, k, (1000, n, k))].mean(axis=-1)
            naive = values[items].mean(axis=1) + drawn.mean(axis=1)
            naive_ratios.append(np.subtract(*np.percentile(naive, [97.5, 2.5])) / (items_only.ci_high - items_only.ci_low))
    assert 0.96 <= np.mean(ratios) <= 1.04, np.mean(ratios)
    assert np.mean(naive_ratios) > 1.08  # the check above can tell the two apart
    assert covered / 200 >= 0.9, covered


def test_a_difference_carries_both_models_noise():
    """Two models on the same items, each judged k = 3 times: the paired difference's two-level CI is as wide
    as the items-only CI of the per-item differences, and contains the true difference (5) for this seed."""
    rng = np.random.default_rng(3)
    item = rng.normal(50, 10, N)
    better = item[:, None] + 5 + rng.normal(0, 12, (N, 3))
    worse = item[:, None] + rng.normal(0, 12, (N, 3))
    settings = LeaderboardSettings()
    two_level = paired_comparison(worse.mean(axis=1), better.mean(axis=1), "better", settings, worse, better)
    items_only = paired_comparison(worse.mean(axis=1), better.mean(axis=1), "better", settings)
    assert two_level.difference == items_only.difference
    assert two_level.p_value == items_only.p_value  # the sign-flip test works on the k-reply means either way
    width = two_level.ci_high - two_level.ci_low
    assert 0.9 <= width / (items_only.ci_high - items_only.ci_low) <= 1.1
    assert two_level.ci_low <= -5 <= two_level.ci_high and two_level.ci_high < 0


def test_one_reply_per_item_changes_nothing():
    values = np.random.default_rng(4).normal(50, 10, 80)
    values[3] = np.nan
    settings = LeaderboardSettings()
    plain = mean_estimate(values, settings)
    single = mean_estimate(values, settings, values[:, None])
    assert single == plain and single.noise_share is None and single.replies == 1
    other = values[::-1].copy()
    assert paired_comparison(values, other, "x", settings, values[:, None], other[:, None]) == \
        paired_comparison(values, other, "x", settings)


def test_identical_replies_are_no_noise_and_the_same_interval():
    values = np.random.default_rng(6).normal(50, 10, 50)
    replies = np.repeat(values[:, None], 3, axis=1)
    settings = LeaderboardSettings()
    estimate = mean_estimate(values, settings, replies)
    plain = mean_estimate(values, settings)
    assert estimate.noise_share == 0.0 and estimate.replies == 3
    assert (estimate.ci_low, estimate.ci_high) == (plain.ci_low, plain.ci_high)


# ---------------------------------------------------------------------------------------------------------
# End to end: `capjudge judge` with k = 3, then `capjudge leaderboard`
# ---------------------------------------------------------------------------------------------------------

TASK = "gveval_references"
N_ITEMS, K, NOISE_SD, BETTER_BY = 60, 3, 15.0, 10


def true_score(item: int) -> float:
    """The item's true score for the plain captions, 30..70, known to the test and the server alike."""
    return 30 + 40 * int(hashlib.sha256(f"lb{item}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def noisy_responder(seed: int):
    """Each reply: the item's true score (BETTER_BY more for the "better" captions) + N(0, NOISE_SD) per
    dimension, rounded; the j-th request for an (item, caption) draws from a generator seeded by (seed, item,
    caption, j), so a run is the same whatever order the judge's threads send in."""
    calls: dict[tuple[int, bool], int] = {}
    lock = threading.Lock()

    def respond(body):
        found = re.search(r"(better )?caption for item (\d+)", prompt_text(body))
        better, item = bool(found.group(1)), int(found.group(2))
        with lock:
            call = calls.get((item, better), 0)
            calls[(item, better)] = call + 1
        rng = np.random.default_rng([seed, item, int(better), call])
        mean = true_score(item) + (BETTER_BY if better else 0)
        a, b, c, d = np.clip(np.rint(mean + rng.normal(0, NOISE_SD, 4)), 0, 100).astype(int)
        return Reply(f"Judged. The Accuracy score is α{a}α. The Completeness score is β{b}β. "
                     f"The Conciseness score is ψ{c}ψ. The Relevance score is δ{d}δ.")

    return respond


def _judge(folder, server, captions: str, samples: int):
    return judge_synthetic_msvd(folder, server.base_url, n_items=N_ITEMS, samples=samples, caption_prefix=captions,
                                annotators=1)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("noise_runs")
    with OpenAITestServer(responder=noisy_responder(5)) as server:
        runs = {
            "better": _judge(root / "better", server, "better ", K),
            "plain": _judge(root / "plain", server, "", K),
            "single": _judge(root / "single", server, "", 1),
        }
        assert len(server.log) == N_ITEMS * (2 * K + 1)
    return root, runs


def _board(root, name: str, *runs: str, options: tuple[str, ...] = ()) -> tuple[dict[str, dict[str, str]], str, str]:
    out = root / name
    result = run_capjudge("leaderboard", *runs, "--out", str(out), "--resamples", "2000", *options)
    assert result.returncode == 0, result.stderr
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    return rows, (out / "leaderboard.md").read_text(encoding="utf-8"), result.stderr


@pytest.mark.slow
def test_the_leaderboard_reports_judge_noise_for_k_replies(judged):
    root, runs = judged
    rows, markdown, err = _board(root, "k3", f"better={runs['better']}", f"plain={runs['plain']}")
    assert "warning:" not in err
    truth = np.array([true_score(i) for i in range(N_ITEMS)])
    noise_variance = NOISE_SD**2 + 1 / 12  # replies are rounded to integers
    true_share = _true_share(float(truth.std(ddof=1)), float(np.sqrt(noise_variance)), 1 / K)
    # The sampling SD at 60 items (0.05 here) and the Monte Carlo SD: 4.5 SDs.
    tolerance = 4.5 * float(np.hypot(_sampling_sd(truth.std(ddof=1), np.sqrt(noise_variance), K, N_ITEMS), MONTE_CARLO_SD))
    for model in ("better", "plain"):
        for metric in ("gveval_mean", "gveval_accuracy"):
            key = f"{TASK}/{metric}"
            assert rows[model][f"{key}_replies"] == str(K)
            share = float(rows[model][f"{key}_judge_noise_share"])
            if metric == "gveval_accuracy":  # the mean of four dimensions averages their noise away
                assert abs(share - true_share) <= tolerance, (model, share, true_share)
            else:
                assert 0 <= share < true_share
        # Rates are whole-item outcomes: one value per item, no replies behind them.
        assert rows[model][f"{TASK}/gveval_failed_replies"] == "1"
        assert rows[model][f"{TASK}/gveval_failed_judge_noise_share"] == ""
    plain = rows["plain"]
    assert plain[f"{TASK}/gveval_accuracy_differs_from_top"] == "true"
    assert float(plain[f"{TASK}/gveval_accuracy_diff_ci_low"]) <= -BETTER_BY <= float(plain[f"{TASK}/gveval_accuracy_diff_ci_high"])
    # The page says how: a Judge noise column beside the main metric, and the method text.
    header = next(line for line in markdown.splitlines() if line.startswith("| #") and "[95% CI]" in line)
    assert "Judge noise" in header
    assert re.search(r"\| +\d+% \(k=3\) \|", markdown)
    flat = re.sub(r"\s+", " ", markdown)
    assert "two-level bootstrap: items resampled, then each drawn item's k replies resampled within it" in flat
    assert "Judge noise = 1 - s0 / s" in flat
    assert max(len(line) for line in markdown.splitlines()) <= 120


@pytest.mark.slow
def test_one_reply_per_item_reports_no_judge_noise(judged):
    root, runs = judged
    rows, markdown, _ = _board(root, "k1", f"single={runs['single']}", f"better={runs['better']}")
    single = rows["single"]
    assert single[f"{TASK}/gveval_accuracy_replies"] == "1" and single[f"{TASK}/gveval_accuracy_judge_noise_share"] == ""
    assert re.search(r"\| +— \(k=1\) \|", markdown)  # beside a k = 3 model: shown as not measurable
    alone, markdown, _ = _board(root, "k1_alone", f"single run={runs['single']}",
                                options=("--report-url", "report/report.html#task={task}&model={model}"))
    assert "Judge noise" not in markdown and "two-level" not in markdown
    assert alone["single run"][f"{TASK}/gveval_accuracy_judge_noise_share"] == ""
    # The hook for the per-item report (`capjudge report`'s address scheme, capjudge.metrics.item_report.report.
    # items_link): each row links to the model's items of the task, URL-quoted.
    from capjudge.metrics.item_report.report import items_link

    page = (root / "k1_alone" / "leaderboard.html").read_text(encoding="utf-8")
    expected = "report/" + items_link(TASK, "single run")
    assert f'<a href="{expected.replace("&", "&amp;")}">single run</a>' in page
    refused = run_capjudge("leaderboard", str(runs["single"]), "--out", str(root / "x"), "--report-url", "report.html")
    assert refused.returncode == 2 and "neither {task} nor {model}" in refused.stderr


@pytest.mark.slow
def test_rows_link_to_an_item_report_beside_the_leaderboard_without_the_flag(judged):
    """As `capjudge demo` lays them out (OUT/report/report.html): the README's lmms-eval loop makes the same
    page with `capjudge report runs --out OUT/report` and gets the same links with no --report-url."""
    from capjudge.metrics.item_report.report import items_link

    root, runs = judged
    (root / "beside" / "report").mkdir(parents=True)
    (root / "beside" / "report" / "report.html").write_text("<!doctype html><title>items</title>", encoding="utf-8")
    _, _, said = _board(root, "beside", f"single run={runs['single']}")
    page = (root / "beside" / "leaderboard.html").read_text(encoding="utf-8")
    expected = "report/" + items_link(TASK, "single run")
    assert f'<a href="{expected.replace("&", "&amp;")}">single run</a>' in page
    assert f"rows link to the item report beside the leaderboard, {root / 'beside' / 'report' / 'report.html'}" in said
    # No report there: no links, and nothing said about one.
    _, _, said = _board(root, "alone", f"single run={runs['single']}")
    assert '<a href="report/' not in (root / "alone" / "leaderboard.html").read_text(encoding="utf-8")
    assert "item report" not in said
    # A folder named report.html is not a report.
    (root / "odd" / "report" / "report.html").mkdir(parents=True)
    _board(root, "odd", f"single run={runs['single']}")
    assert '<a href="report/' not in (root / "odd" / "leaderboard.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_replies_that_do_not_average_to_the_metric_are_named(judged, tmp_path):
    """A samples log whose item value no longer equals its replies' mean (edited): the metric keeps an
    items-only CI, and a warning names the run and the metric."""
    import shutil

    root, runs = judged
    edited = tmp_path / "edited"
    shutil.copytree(runs["plain"], edited)
    (samples,) = list(edited.rglob(f"*_samples_{TASK}.jsonl"))
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    lines[0]["gveval_accuracy"] += 7
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    rows, _, err = _board(tmp_path, "board", f"edited={edited}")
    assert "edited was judged with 3 replies per item, but no reply value averages to gveval_accuracy" in err
    assert rows["edited"][f"{TASK}/gveval_accuracy_judge_noise_share"] == ""
    assert rows["edited"][f"{TASK}/gveval_accuracy_replies"] == "3"  # logged, but not behind this value
    assert float(rows["edited"][f"{TASK}/gveval_mean_judge_noise_share"]) > 0  # the other metrics are unaffected


@pytest.mark.slow
def test_anycap_scores_are_traced_to_the_final_score_of_each_reply(tmp_path):
    """AnyCap with k = 3 on the demo clips (real frames, real `capjudge judge`): replies with random scores,
    and brief captions far over their length range, so the length rule caps some replies (judge score 4,
    final score lower). The leaderboard must resample the final scores (what anycap_score averages), not the
    judge's, for the score and each caption type; the caption's length is the same in every reply (no judge
    noise); rates are whole-item outcomes."""
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def respond(body):
        output = prompt_text(body).split("Model Output:", 1)[1].split("Reference:", 1)[0].strip()
        with lock:
            call = calls.get(output, 0)
            calls[output] = call + 1
        score = 4 if call == 0 else int(np.random.default_rng([len(output), call]).integers(0, 5))
        return Reply(json.dumps({"score": score, "reason": "test judge"}))

    items = [json.loads(line) for line in (REPO_ROOT / "tasks/demo/anycap_demo.jsonl").read_text().splitlines() if line.strip()]
    long_caption = " ".join(["a red ball rolls slowly across a wide grey floor while the light changes"] * 5)
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(
        json.dumps({"id": item["id"], "caption": long_caption if item["caption_type"] == "brief" else f"{item['reference']} {i}"}) + "\n"
        for i, item in enumerate(items)))
    with OpenAITestServer(responder=respond) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "MODEL_VERSION": "test-judge",
               "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "CAPJUDGE_JUDGE_SAMPLES": "3",
               "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
               "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        result = run_capjudge_cli(["judge", "--captions", str(captions),
                                   "--task", "anycap_style_demo", "--out", str(tmp_path / "out")],
                                  env=env, cwd=REPO_ROOT, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    (samples,) = list((tmp_path / "out").rglob("*_samples_anycap_style_demo.jsonl"))
    replies = [s for line in samples.read_text().splitlines() for s in json.loads(line)["judged"]["judgment"]["samples"]]
    assert any(r["capped_by"] is not None and r["judge_score"] > r["final_score"] for r in replies)

    from capjudge.metrics.leaderboard.replies import task_replies
    from capjudge.metrics.files.runs import read_runs

    (run,), _ = read_runs([str(tmp_path / "out")])
    task_run = run.tasks["anycap_style_demo"]
    found = task_replies(task_run, ["anycap_score", "anycap_brief", "anycap_poem", "anycap_output_words"])
    assert found.replies_per_item == 3 and found.unmatched == ()
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    final = np.array([[s["final_score"] for s in line["judged"]["judgment"]["samples"]] for line in lines], dtype=float)
    assert np.array_equal(found.matrices["anycap_score"], final)
    brief = np.isfinite(task_run.values["anycap_brief"])
    assert np.array_equal(found.matrices["anycap_brief"][brief], final[brief])
    rows, _, _ = _board(tmp_path, "board", str(tmp_path / "out"))
    (row,) = rows.values()
    key = "anycap_style_demo/anycap"
    assert row[f"{key}_score_replies"] == "3" and float(row[f"{key}_score_judge_noise_share"]) > 0
    # The brief captions are fewer than 5 items: no interval, so no share of one (the small-sample rule, issue #60).
    assert brief.sum() < 5 and row[f"{key}_brief_replies"] == "3" and row[f"{key}_brief_judge_noise_share"] == ""
    assert float(row[f"{key}_output_words_judge_noise_share"]) == 0.0
    assert row[f"{key}_length_capped_replies"] == "1" and row[f"{key}_length_capped_judge_noise_share"] == ""


@pytest.mark.slow
def test_ten_noisy_models_still_fit_a_terminal_and_a_laptop_screen(judged, open_page):
    """Ten models judged k = 3 times (the two runs under ten long labels): the Judge noise column joins the
    main table, leaderboard.md stays within 120 columns and the page's main table within 1366 px."""
    root, runs = judged
    labels = [f"{'better' if i % 2 else 'plain'}-captioner-with-a-long-label-{i}={runs['better' if i % 2 else 'plain']}"
              for i in range(10)]
    rows, markdown, _ = _board(root, "ten", *labels)
    assert len(rows) == 10 and all(row[f"{TASK}/gveval_mean_replies"] == "3" for row in rows.values())
    assert max(len(line) for line in markdown.splitlines()) <= 120
    main_header = next(line for line in markdown.splitlines() if line.startswith("| #") and "[95% CI]" in line)
    assert main_header.rstrip(" |").endswith("Judge noise")
    assert len(re.findall(r"\| +\d+% \(k=3\) \|", markdown)) == 10
    visit = open_page(root / "ten" / "leaderboard.html")
    viewport = visit.page.evaluate("() => document.documentElement.clientWidth")
    right = visit.page.evaluate("() => document.querySelector('table.main').getBoundingClientRect().right")
    assert right <= viewport and visit.page.evaluate("() => document.documentElement.scrollWidth") <= viewport
    assert visit.broken_images() == [] and visit.offsite_requests() == []

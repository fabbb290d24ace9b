"""`capjudge reliability` measures the noise of BOTH judges (#30 item 1): k = 5 replies per item from a test
server whose replies for each item are drawn from a known distribution, judged by the real `capjudge judge`
(anycap_style_demo and gveval_demo on the demo clips, the good captions), measured by the real
`capjudge reliability`. The true per-item SD and ICC(1,1) lie inside the reported 95% CIs for each judge.

Before the fix the AnyCap run printed a table with no row and exited 0: the command looked for a `scores`
mapping that only G-VEval replies log (AnyCap's score is each reply's `final_score`).

Truth. AnyCap: an item's replies are its true score t (1, 2 or 3) plus -1, 0 or +1 with probabilities
1/4, 1/2, 1/4 (noise variance 1/2, no rounding; the captions are within their length range, so the length rule
caps nothing and final = judge score). G-VEval: each dimension is rint(t + N(0, 8)), t in 25..75 (noise
variance 64 + 1/12 with the rounding; the mean of the four has a quarter of it). True ICC(1,1) =
var(t) / (var(t) + noise variance), var(t) over the run's items. Ten items per task: with these designs the
CIs covered the truth in 86% (G-VEval SD) to 97% of 200 simulated runs; the draws here are seeded (item, reply
number), so the run is the same every time.

The same two runs then check every reader of the typed record (capjudge.judges.record) on both judges:
`capjudge agreement`, the leaderboard's noise share, the item report's spread, and the runs rewritten in the
unversioned shape of the capjudge before record versions (they must measure and show the same).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server
from tests.support.openai_server import Reply, prompt_text

pytestmark = pytest.mark.slow

K = 5
SEED = 30
CAPTIONS_FILE = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
CAPTIONS = {row["id"]: row["caption"] for row in map(json.loads, CAPTIONS_FILE.read_text().splitlines()) if row}
ANYCAP, GVEVAL = "anycap_style_demo", "gveval_demo"
ANYCAP_NOISE_VARIANCE = 0.5  # -1, 0, +1 with probabilities 1/4, 1/2, 1/4
GVEVAL_NOISE_SD = 8.0
GVEVAL_NOISE_VARIANCE = GVEVAL_NOISE_SD**2 + 1 / 12  # rounded to integers


def _fraction(item: str) -> float:
    return int(hashlib.sha256(item.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def anycap_truth(item: str) -> int:
    return 1 + int(3 * _fraction(item))


def gveval_truth(item: str) -> float:
    return 25 + 50 * _fraction(item)


def known_noise_responder():
    """Both judges' prompts: the item is found by its caption; its j-th reply is drawn from a generator seeded by
    (SEED, item, j), whatever order the judge's threads send in."""
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def item_of(caption: str) -> str:
        (item,) = [item for item, text in CAPTIONS.items() if text.strip() == caption.strip()]
        return item

    def next_generator(item: str) -> np.random.Generator:
        with lock:
            call = calls.get(item, 0)
            calls[item] = call + 1
        return np.random.default_rng([SEED, int(item[1:]), ord(item[0]), call])

    def respond(body):
        text = prompt_text(body)
        if "Model Output:" in text:  # AnyCap
            item = item_of(text.split("Model Output:", 1)[1].split("Reference:", 1)[0])
            score = anycap_truth(item) + int(next_generator(item).choice([-1, 0, 0, 1]))
            return Reply(json.dumps({"score": score, "reason": "known noise"}))
        item = item_of(text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0])
        a, b, c, d = np.clip(np.rint(gveval_truth(item) + next_generator(item).normal(0, GVEVAL_NOISE_SD, 4)), 0, 100).astype(int)
        return Reply(f"Judged. The Accuracy score is α{a}α. The Completeness score is β{b}β. "
                     f"The Conciseness score is ψ{c}ψ. The Relevance score is δ{d}δ.")

    return respond


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One k = 5 `capjudge judge` run per judge, both against the known-noise server (run side by side)."""
    root = tmp_path_factory.mktemp("k5_runs")
    with judge_server(responder=known_noise_responder()) as server:
        def judge(task: str):
            env = harness_env(server.base_url, cache_path=root / task / "cache.sqlite", datasets_cache=root / "hf",
                              extra={"CAPJUDGE_JUDGE_SAMPLES": str(K), "CAPJUDGE_GVEVAL_SCORING": "text"})
            return run_capjudge("judge", "--captions", str(CAPTIONS_FILE), "--model-name", "good", "--task", task,
                                "--out", str(root / task), env=env, timeout=300)

        with ThreadPoolExecutor(2) as pool:
            done = dict(zip((ANYCAP, GVEVAL), pool.map(judge, (ANYCAP, GVEVAL))))
        for task, result in done.items():
            assert result.returncode == 0, (task, result.stderr[-3000:])
        assert len(server.log) == 2 * 10 * K  # ten items per task, each its k own requests
    return {task: root / task for task in (ANYCAP, GVEVAL)}


def _lines(run: Path, task: str) -> list[dict]:
    (samples,) = list(run.rglob(f"*_samples_{task}.jsonl"))
    return [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]


def _table(run: Path, task: str, *options: str) -> dict[str, list[str]]:
    """`capjudge reliability` on the run: exit 0, and its table's rows (score -> cells)."""
    result = run_capjudge("reliability", str(run), "--task", task, "--resamples", "1000", "--seed", "0", *options)
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and not line.startswith("| score |"):
            rows[cells[0]] = cells
    return rows


def _interval(cell: str) -> tuple[float, float, float]:
    value, low, high = map(float, re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell).groups())
    return value, low, high


def _assert_covers(row: list[str], true_sd: float, true_icc: float) -> None:
    """The row's per-item SD and ICC(1,1) CIs (columns 3 and 4) hold the truth."""
    _, sd_low, sd_high = _interval(row[3])
    _, icc_low, icc_high = _interval(row[4])
    assert sd_low <= true_sd <= sd_high, (row, true_sd)
    assert icc_low <= true_icc <= icc_high, (row, true_icc)


def test_anycap_noise_is_measured_from_each_replys_final_score(runs):
    lines = _lines(runs[ANYCAP], ANYCAP)
    replies = [line["judged"]["judgment"]["samples"] for line in lines]
    assert len(lines) == 10 and all(len(r) == K for r in replies)
    # The length rule capped nothing: what the judge said is the final score, and the truth is about both.
    assert all(s["capped_by"] is None and s["final_score"] == s["judge_score"] for r in replies for s in r)
    truth = np.array([anycap_truth(line["judged"]["item_id"]) for line in lines], dtype=float)
    assert truth.var(ddof=1) > 0
    true_icc = truth.var(ddof=1) / (truth.var(ddof=1) + ANYCAP_NOISE_VARIANCE)

    rows = _table(runs[ANYCAP], ANYCAP)  # no --score: the judge's own scores
    assert list(rows) == ["final_score", "judge_score"]
    for row in rows.values():
        assert row[1:3] == ["10 (0)", str(K)]
        _assert_covers(row, np.sqrt(ANYCAP_NOISE_VARIANCE), true_icc)
    # The issue's own command: --score final_score, the value anycap_score averages.
    assert list(_table(runs[ANYCAP], ANYCAP, "--score", "final_score")) == ["final_score"]


def test_gveval_noise_is_measured_per_dimension_and_for_the_mean(runs):
    lines = _lines(runs[GVEVAL], GVEVAL)
    truth = np.array([gveval_truth(line["judged"]["item_id"]) for line in lines])
    rows = _table(runs[GVEVAL], GVEVAL)
    assert list(rows) == ["accuracy", "completeness", "conciseness", "relevance", "mean"]
    for name, row in rows.items():
        noise = GVEVAL_NOISE_VARIANCE / (4 if name == "mean" else 1)  # the mean of four independent draws
        assert row[1:3] == ["10 (0)", str(K)]
        _assert_covers(row, np.sqrt(noise), truth.var(ddof=1) / (truth.var(ddof=1) + noise))


def test_a_score_no_reply_has_and_a_run_judged_once_are_refused(runs, tmp_path):
    unknown = run_capjudge("reliability", str(runs[ANYCAP]), "--task", ANYCAP, "--score", "accuracy")
    assert unknown.returncode == 2 and unknown.stdout == ""
    (message,) = unknown.stderr.strip().splitlines()
    assert "--score accuracy" in message and "final_score, judge_score" in message
    # A G-VEval score name exists on the G-VEval run only, and the other way round.
    assert run_capjudge("reliability", str(runs[GVEVAL]), "--task", GVEVAL, "--score", "final_score").returncode == 2

    # The same run as if judged once per item (one reply: no `samples` logged): not measurable, said so.
    once = shutil.copytree(runs[ANYCAP], tmp_path / "once")
    (samples,) = list(once.rglob(f"*_samples_{ANYCAP}.jsonl"))
    lines = _lines(once, ANYCAP)
    for line in lines:
        del line["judged"]["judgment"]["samples"], line["judged"]["judgment"]["spread"]
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    refused = run_capjudge("reliability", str(once), "--task", ANYCAP)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "not measurable" in refused.stderr and "one judge reply per item" in refused.stderr


# ---------------------------------------------------------------------------------------------------------
# The typed record (capjudge.judges.record): what the runs log, and every reader of it on both judges


def test_records_are_versioned_and_log_each_judges_spread(runs):
    """Version 2 records; AnyCap's spread is over each reply's final and judge score (version 1 logged none)."""
    for task, main, value in ((ANYCAP, "final_score", lambda s: s["final_score"]),
                              (GVEVAL, "mean", lambda s: s["scores"]["mean"])):
        for line in _lines(runs[task], task):
            record = line["judged"]
            assert record["record_version"] == 2
            truth = np.std([value(s) for s in record["judgment"]["samples"]], ddof=1)
            assert record["judgment"]["spread"][main] == pytest.approx(truth), (task, record["item_id"])
    spread = _lines(runs[ANYCAP], ANYCAP)[0]["judged"]["judgment"]["spread"]
    assert list(spread) == ["final_score", "judge_score"]


def _as_version_1(run: Path, into: Path) -> Path:
    """The run as the capjudge before record versions wrote it (f999aa6): no `record_version`, and AnyCap's
    `spread` empty."""
    copy = shutil.copytree(run, into)
    for samples in copy.rglob("*_samples_*.jsonl"):
        lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
        for line in lines:
            del line["judged"]["record_version"]
            if line["judged"]["judge"]["name"] == "anycap":
                line["judged"]["judgment"]["spread"] = {}
        samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return copy


def test_an_unversioned_run_measures_the_same_as_a_versioned_one(runs, tmp_path):
    for task in (ANYCAP, GVEVAL):
        old = _as_version_1(runs[task], tmp_path / task)
        assert _table(old, task) == _table(runs[task], task)


def test_agreement_reads_both_judges(runs):
    """`capjudge agreement` of a run with itself: the same items, the same values (tau-b 1, no difference)."""
    for task, metric in ((ANYCAP, "anycap_score"), (GVEVAL, "gveval_mean")):
        result = run_capjudge("agreement", str(runs[task]), str(runs[task]), "--task", task, "--metric", metric,
                              "--resamples", "50")
        assert result.returncode == 0, result.stderr
        row = next(line for line in result.stdout.splitlines() if line.startswith("| good |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == "10" and cells[2].startswith("1.000") and cells[6].startswith("0.000"), row


def test_the_leaderboard_reports_the_noise_share_of_both_judges(runs, tmp_path):
    out = tmp_path / "board"
    result = run_capjudge("leaderboard", str(runs[ANYCAP]), str(runs[GVEVAL]), "--out", str(out), "--resamples", "500")
    assert result.returncode == 0, result.stderr
    assert "no reply value averages" not in result.stderr
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    # Every score metric of either judge is traced to its replies (an untraced one has an empty share).
    for column in (f"{ANYCAP}/anycap_score", f"{ANYCAP}/anycap_avg_of_types", f"{ANYCAP}/anycap_output_words",
                   f"{GVEVAL}/gveval_mean", f"{GVEVAL}/gveval_accuracy"):
        assert row[f"{column}_replies"] == str(K), column
        assert 0 <= float(row[f"{column}_judge_noise_share"]) <= 1, column
    # AnyCap's noise (variance 1/2 on a 1..3 truth) is a visible share of its CI; a word count has none.
    assert float(row[f"{ANYCAP}/anycap_score_judge_noise_share"]) > 0.02
    assert float(row[f"{ANYCAP}/anycap_output_words_judge_noise_share"]) == 0.0
    assert row[f"{ANYCAP}/anycap_failed_judge_noise_share"] == ""  # a rate: whole-item outcomes


def test_the_item_report_shows_the_spread_of_both_judges_also_for_an_unversioned_run(runs, tmp_path):
    from capjudge.metrics.item_report.report import build_item_report

    for task, value in ((ANYCAP, lambda s: s["final_score"]), (GVEVAL, lambda s: s["scores"]["mean"])):
        truth = {line["judged"]["item_id"]: np.std([value(s) for s in line["judged"]["judgment"]["samples"]], ddof=1)
                 for line in _lines(runs[task], task)}
        for run in (runs[task], _as_version_1(runs[task], tmp_path / f"old_{task}")):
            (section,) = build_item_report([f"good={run}"], out=tmp_path / f"report_{task}").sections
            assert {item.item_id: item.spread for item in section.items} == pytest.approx(truth), (task, run)
            assert all(len(item.judgments[0].view.replies) == K for item in section.items)


def test_a_malformed_record_is_one_line_naming_file_line_and_field(runs, tmp_path):
    broken = shutil.copytree(runs[ANYCAP], tmp_path / "broken")
    (samples,) = list(broken.rglob(f"*_samples_{ANYCAP}.jsonl"))
    lines = _lines(broken, ANYCAP)
    lines[3]["judged"]["judgment"]["samples"][1] = "lost"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    # Each command's exit code for input it cannot use (the report's is 1, its usage errors 2).
    for command, code in ((("reliability", str(broken), "--task", ANYCAP), 2),
                          (("leaderboard", str(broken), "--out", str(tmp_path / "board")), 2),
                          (("report", str(broken), "--out", str(tmp_path / "report")), 1)):
        result = run_capjudge(*command)
        assert result.returncode == code, (command, result.stderr)
        (message,) = result.stderr.strip().splitlines()
        assert f"{samples}, line 4" in message and "`judgment.samples[1]` is a str" in message, (command, message)

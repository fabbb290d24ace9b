"""`capjudge judge`: judging as its own stage, from an lmms-eval --predict_only output or a captions file.

Real runs: lmms-eval generates (here: returns) the captions with --predict_only and judges nothing; the
`capjudge judge` command then judges them against the test server, writes an lmms-eval-shaped run that the
leaderboard reads, and shares its requests and cache with judging inside lmms-eval, both ways round.
"""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli, run_lmms_eval
from tests.support.warm_launch import warm_start

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
N_ITEMS = 10
PER_ITEM = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance",
            "gveval_failed")


def _judge_env(tmp_path, judge, cache, extra_env=None):
    return {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
            "CAPJUDGE_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **(extra_env or {})}


def _judge(tmp_path, judge, *arguments, cache, extra_env=None):
    return run_capjudge_cli(["judge", *arguments],
                            env=_judge_env(tmp_path, judge, cache, extra_env), cwd=REPO_ROOT, timeout=600)


def _samples(folder):
    (path,) = list(folder.rglob(f"*_samples_{TASK}.jsonl"))
    return {line["judged"]["item_id"]: line for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def _values(samples):
    return {item: ({key: line[key] for key in PER_ITEM}, line["judged"]["judgment"]["raw_reply"]) for item, line in samples.items()}


def _harness(judge, output_path, cache, *extra_args):
    """lmms-eval on the demo task with the good caption set (captions_file), judged by `judge`."""
    return run_lmms_eval(
        model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=TASK, output_path=output_path,
        judge_base_url=judge.base_url, cache_path=cache, extra_args=list(extra_args),
    )


def test_a_predict_only_run_is_judged_later_and_shares_the_cache_with_lmms_eval(tmp_path):
    cache = tmp_path / "cache.sqlite"
    with judge_server() as judge:
        predicted = _harness(judge, tmp_path / "predicted", cache, "--predict_only")
        assert judge.log == []  # the GPU side judged nothing
        staged = _judge(tmp_path, judge, str(predicted.output_path), "--task", TASK, "--out", str(tmp_path / "judged"),
                        cache=cache)
        assert staged.returncode == 0, staged.stderr[-3000:]
        assert len(judge.log) == N_ITEMS and len(judge.preflights) == 1
        assert f"{N_ITEMS} of {N_ITEMS} items judged" in staged.stdout
        assert "capjudge: judging gveval_demo" in staged.stderr  # the progress bar

        # Judged again inside lmms-eval with the same cache: zero requests, the same per-item values.
        judge.reset()
        harness = _harness(judge, tmp_path / "harness", cache)
        assert judge.log == []
    staged_samples = _samples(tmp_path / "judged")
    harness_samples = {s["judged"]["item_id"]: s for s in harness.samples(TASK)}
    assert _values(staged_samples) == _values(harness_samples)
    assert all(line["judged"]["judgment"]["cache_hit"] for line in harness_samples.values())
    # The aggregates are lmms-eval's, from the same aggregation functions.
    (results_file,) = list((tmp_path / "judged").rglob("*_results.json"))
    staged_results = json.loads(results_file.read_text())["results"][TASK]
    # The results file names the capjudge release that judged (as each item's `judge.capjudge_version` does).
    assert json.loads(results_file.read_text())["capjudge_version"] == importlib.metadata.version("capjudge")
    harness_results = harness.results()["results"][TASK]
    for key in ("gveval_mean,none", "gveval_failed,none"):
        assert staged_results[key] == pytest.approx(harness_results[key])
    assert "item_id,none" not in staged_results  # no log-only pseudo-metrics

    # The leaderboard reads the staged run like any other.
    from capjudge.metrics.leaderboard.board import build_leaderboard
    from capjudge.metrics.leaderboard.stats import LeaderboardSettings
    from capjudge.metrics.files.runs import read_runs

    runs, _ = read_runs([f"staged={results_file}", f"harness={harness.results_file}"])
    board = build_leaderboard(runs, LeaderboardSettings(n_resamples=100, n_permutations=100))
    means = {row.name: row.estimates[board.rank_column.key].value for row in board.rows}
    assert means["staged"] == pytest.approx(means["harness"])

    # Samples from other data (here: one logged target edited) are refused, naming the item.
    (samples_file,) = list(predicted.output_path.rglob(f"*_samples_{TASK}.jsonl"))
    lines = [json.loads(line) for line in samples_file.read_text(encoding="utf-8").splitlines()]
    lines[3]["target"] = "a different reference"
    samples_file.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with judge_server() as judge:
        other = _judge(tmp_path, judge, str(predicted.output_path), "--task", TASK, "--out", str(tmp_path / "x"),
                       cache=cache)
        assert judge.log == []
    assert other.returncode == 2 and "doc_id 3 was logged with target 'a different reference'" in other.stderr


def test_a_harness_run_re_scores_in_the_judging_stage_with_zero_requests(tmp_path):
    cache = tmp_path / "cache.sqlite"
    with judge_server() as judge:
        harness = _harness(judge, tmp_path / "harness", cache)
        judge.reset()
        staged = _judge(tmp_path, judge, "--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK,
                        "--out", str(tmp_path / "judged"), cache=cache)
        assert staged.returncode == 0, staged.stderr[-3000:]
        assert judge.log == []
    # The packaged file holds AnyCap's ids too, on purpose (it serves the capjudge_demo group): no note about them
    # (issue 47: a packaged example file does not warn about itself; a user's own file does, in the test below).
    assert "ignoring" not in staged.stderr
    staged_samples = _samples(tmp_path / "judged")
    assert len(staged_samples) == N_ITEMS
    assert _values(staged_samples) == _values({s["judged"]["item_id"]: s for s in harness.samples(TASK)})


def test_two_judging_processes_each_send_their_half_and_write_what_one_process_writes(tmp_path):
    """`--processes 2`: two forked workers send the requests (the server finds, in /proc, which process opened
    each connection, and counts the requests per process); the run written is that of a one-process run."""
    import re
    from collections import Counter

    arguments = ("--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK)
    with judge_server() as judge:
        judge.identify_clients = True
        two = _judge(tmp_path, judge, *arguments, "--out", str(tmp_path / "two"), "--processes", "2",
                     cache=tmp_path / "two.sqlite", extra_env={"CAPJUDGE_MAX_CONCURRENCY": "4"})
        assert two.returncode == 0, two.stderr[-3000:]
        requests_by_process = Counter(entry.client_pid for entry in judge.log)
        judge.reset()
        one = _judge(tmp_path, judge, *arguments, "--out", str(tmp_path / "one"), "--processes", "1",
                     cache=tmp_path / "one.sqlite", extra_env={"CAPJUDGE_MAX_CONCURRENCY": "4"})
        assert one.returncode == 0, one.stderr[-3000:]
        one_process = Counter(entry.client_pid for entry in judge.log)

    assert None not in requests_by_process and len(requests_by_process) == 2
    assert sorted(requests_by_process.values()) == [N_ITEMS // 2, N_ITEMS // 2]  # every 2nd item each
    reported = {int(pid): (int(items), int(requests)) for pid, items, requests in
                re.findall(r"process \d/2 \(pid (\d+)\): (\d+) items, 0 failed, (\d+) requests", two.stderr)}
    assert reported == {pid: (count, count) for pid, count in requests_by_process.items()}
    assert len(one_process) == 1 and sum(one_process.values()) == N_ITEMS and None not in one_process
    assert set(one_process).isdisjoint(requests_by_process)

    two_samples, one_samples = _samples(tmp_path / "two"), _samples(tmp_path / "one")
    assert list(two_samples) == list(one_samples)  # same items, same order
    assert _values(two_samples) == _values(one_samples)
    # The records are the workers' own judgments (asked, not replayed from the cache by the parent).
    for line in two_samples.values():
        judgment = line["judged"]["judgment"]
        assert judgment["cache_hit"] is False and judgment["requests"] == 1


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT"])
def test_a_killed_two_process_stage_leaves_no_worker_behind_and_its_rerun_asks_only_what_is_not_cached(tmp_path, signal_name):
    # SIGKILL: the kernel ends the workers with their parent. SIGINT to the parent alone (a job runner's stop,
    # `kill -INT`): the parent ends them itself instead of waiting for their results.
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    def ended(pid):  # gone, or a zombie nobody has reaped yet
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True

    cache = tmp_path / "cache.sqlite"
    arguments = ("--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK, "--out", str(tmp_path / "out"),
                 "--processes", "2")
    slow = {"CAPJUDGE_MAX_CONCURRENCY": "2"}  # one request at a time per worker: 5 items each, 0.6 s apiece
    with judge_server(latency=0.6) as judge:
        judge.identify_clients = True
        if signal_name == "SIGKILL":  # handled by no process: a warm child (tests/support/warm_launch.py) ends as any does
            stage = warm_start("capjudge", ["judge", *arguments], env=_judge_env(tmp_path, judge, cache, slow),
                               cwd=REPO_ROOT)
        else:  # SIGINT is handled: the real command line, with the handler Python installs at its start
            stage = subprocess.Popen([sys.executable, "-m", "capjudge.tasks.cli", "judge", *arguments], cwd=REPO_ROOT,
                                     env=_judge_env(tmp_path, judge, cache, slow), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     # A runner that starts the suite in the background (`make test &` in a
                                     # script) passes SIGINT on as ignored, and Python then never installs its
                                     # handler.
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while sum(entry.replied is not None for entry in judge.log) < 4:
            assert stage.poll() is None and time.monotonic() < deadline, "the stage never got 4 replies"
            time.sleep(0.05)
        stage.send_signal(getattr(signal, signal_name))
        assert stage.wait(timeout=30) != 0
        workers = {entry.client_pid for entry in judge.log}
        assert len(workers) == 2 and stage.pid not in workers and None not in workers
        time.sleep(2.0)  # the kernel ends them when their parent dies; any request they still sent would show
        assert all(ended(pid) for pid in workers), "a worker outlived the killed stage"
        asked_before = len(judge.log)
        assert asked_before < N_ITEMS
        cached = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM replies").fetchone()[0]
        assert cached >= 1
        judge.reset()
        rerun = _judge(tmp_path, judge, *arguments, cache=cache, extra_env=slow)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert len(judge.log) == N_ITEMS - cached  # exactly what the killed run had not put in the cache
    assert len(_samples(tmp_path / "out")) == N_ITEMS


def test_bad_input_is_one_clear_error(tmp_path):
    with judge_server() as judge:
        missing = _judge(tmp_path, judge, str(tmp_path / "nowhere"), "--task", TASK, "--out", str(tmp_path / "o"),
                         cache=tmp_path / "c.sqlite")
        assert missing.returncode == 2 and f"{tmp_path / 'nowhere'}: no such file or folder" in missing.stderr
        unknown = tmp_path / "unknown.jsonl"
        unknown.write_text(json.dumps({"id": "not-an-item", "caption": "a cat"}) + "\n", encoding="utf-8")
        wrong_ids = _judge(tmp_path, judge, "--captions", str(unknown), "--task", TASK, "--out", str(tmp_path / "o"),
                           cache=tmp_path / "c.sqlite")
        assert wrong_ids.returncode == 2
        assert "none of its 1 ids is an item of task 'gveval_demo' (e.g. not-an-item)" in wrong_ids.stderr
        empty_run = tmp_path / "run"
        empty_run.mkdir()
        (empty_run / "20260101_000000_results.json").write_text("{}", encoding="utf-8")
        no_samples = _judge(tmp_path, judge, str(empty_run), "--task", TASK, "--out", str(tmp_path / "o"),
                            cache=tmp_path / "c.sqlite")
        assert no_samples.returncode == 2 and "no samples of task 'gveval_demo'" in no_samples.stderr
        assert "run lmms-eval with --log_samples" in no_samples.stderr
        (empty_run / "20260101_000000_samples_anycap_style_demo.jsonl").write_text("", encoding="utf-8")
        other_task = _judge(tmp_path, judge, str(empty_run), "--task", TASK, "--out", str(tmp_path / "o"),
                            cache=tmp_path / "c.sqlite")
        assert other_task.returncode == 2 and "no samples of task 'gveval_demo'" in other_task.stderr
        assert "it holds samples of 'anycap_style_demo': give --task with one of them" in other_task.stderr
        assert judge.log == []

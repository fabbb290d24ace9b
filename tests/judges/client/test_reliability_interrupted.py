"""Interrupted and concurrent runs: kill -9 mid-run, rerun, and two processes on one cache; the cache at scale.

- A real lmms-eval run (gveval_references on MSVD-Eval from ../shared, captions_file with the human-rated
  candidates) against a slow test judge in its own process is killed with SIGKILL once about half the items
  have been asked. A rerun with the same CAPJUDGE_CACHE asks the judge exactly for the items the killed run
  had not cached, and its results equal those of an uninterrupted run with a cache of its own.
- The same with a plain Python process judging through the client with 8 requests in flight.
- Two processes judging the same items at once (in opposite orders) on one cache file: nothing corrupt, both
  see the same verdicts, and the judge is asked twice only for items both had in flight at the same moment.
- 2,000 items re-scored from the cache: zero requests, and the process's peak memory stays bounded.
"""

from __future__ import annotations

import json
import math
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT, shared_path
from tests.support.harness_runs import harness_env, launch_lmms_eval, venv_python
from tests.support.openai_server import ServerProcess
from tests.support.warm_launch import WarmProcess, warm_start

pytestmark = pytest.mark.slow

MSVD = ("data", "msvd_eval", "MSVD-Eval.json")
N_ITEMS = 40
PARALLEL = 2  # lmms-eval's --process_docs_parallel: judge requests in flight at once
LATENCY = "0.3"  # seconds per judge reply: 40 items take ~6 s of judging, long enough to kill mid-way


def cache_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0]


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def wait_for_requests(server: ServerProcess, process: subprocess.Popen | WarmProcess, at_least: int, timeout: float = 240.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = server.stats()["requests"]
        if seen >= at_least or process.poll() is not None:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"the run made {seen} judge requests in {timeout:.0f} s; expected {at_least}")


# ---------------------------------------------------------------------------------------------------------
# lmms-eval, killed and resumed


def lmms_eval_args(output_path: Path) -> list[str]:
    return [
        "--model", "captions_file", "--model_args", "field=candidate", "--tasks", "gveval_references",
        "--output_path", str(output_path), "--include_path", str(REPO_ROOT / "tasks"), "--log_samples",
        "--limit", str(N_ITEMS), "--process_docs_parallel", str(PARALLEL), "--verbosity", "WARNING",
    ]


def test_a_killed_lmms_eval_run_resumes_from_the_cache_and_matches_an_uninterrupted_run(tmp_path):
    msvd = shared_path(*MSVD)
    # Requests in flight are bounded by the judge client (items are judged ahead of process_results at its
    # bound, tasks/prejudge.py), so the overlap asked twice after a kill is at most that bound: set it here.
    data_env = {"CAPJUDGE_MSVD_EVAL_JSON": str(msvd), "CAPJUDGE_MAX_CONCURRENCY": str(PARALLEL)}
    resumed_cache, clean_cache = tmp_path / "resumed.sqlite", tmp_path / "clean.sqlite"
    with ServerProcess("--latency", LATENCY) as judge:
        # 1. Killed once about half the items have been asked.
        env = harness_env(judge.base_url, cache_path=resumed_cache, datasets_cache=tmp_path / "hf", extra=data_env)
        # A warm child (tests/support/warm_launch.py): a process of its own, which SIGKILL ends as it ends any.
        killed = warm_start("lmms_eval", lmms_eval_args(tmp_path / "killed"), env=env, cwd=REPO_ROOT)
        try:
            wait_for_requests(judge, killed, at_least=N_ITEMS // 2)
            killed.send_signal(signal.SIGKILL)
        finally:
            killed.wait(timeout=60)
        assert killed.returncode == -signal.SIGKILL, "the run finished before it could be killed"
        asked_before_kill = judge.stats()["requests"]
        cached = cache_rows(resumed_cache)
        assert integrity(resumed_cache) == "ok"
        assert 0 < cached < N_ITEMS
        # Never more than the client's bound in flight; what the kill lost (asked, not cached) is what was in
        # flight and the replies the cache's writer thread had not yet committed (ReplyCache): a count that
        # depends on the machine's load, so it is not bounded here. The rerun below asks exactly those again.
        assert judge.stats()["max_in_flight"] <= PARALLEL
        assert cached <= asked_before_kill
        assert not list((tmp_path / "killed").rglob("*_results.json"))

        # 2. Rerun with the same cache: only the items the killed run had not cached are asked.
        resumed = launch_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_references",
            output_path=tmp_path / "resumed", judge_base_url=judge.base_url, cache_path=resumed_cache,
            limit=N_ITEMS, env=data_env, extra_args=["--process_docs_parallel", str(PARALLEL)],
        ).require_run()
        asked_after_resume = judge.stats()["requests"]
        assert asked_after_resume - asked_before_kill == N_ITEMS - cached
        assert cache_rows(resumed_cache) == N_ITEMS and integrity(resumed_cache) == "ok"

        # 3. An uninterrupted run with a cache of its own: one request per item.
        clean = launch_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_references",
            output_path=tmp_path / "clean", judge_base_url=judge.base_url, cache_path=clean_cache,
            limit=N_ITEMS, env=data_env, extra_args=["--process_docs_parallel", str(PARALLEL)],
        ).require_run()
        assert judge.stats()["requests"] - asked_after_resume == N_ITEMS

    resumed_samples, clean_samples = resumed.samples("gveval_references"), clean.samples("gveval_references")
    assert len(resumed_samples) == len(clean_samples) == N_ITEMS  # none lost
    assert sum(sample["judged"]["judgment"]["cache_hit"] for sample in resumed_samples) == cached
    assert sum(sample["gveval_failed"] for sample in resumed_samples) == 0

    def per_item(samples):
        return {sample["doc_id"]: sample["judged"]["judgment"]["scores"] for sample in samples}

    assert per_item(resumed_samples) == per_item(clean_samples)
    resumed_metrics = resumed.results()["results"]["gveval_references"]
    clean_metrics = clean.results()["results"]["gveval_references"]
    compared = [name for name in clean_metrics if name.startswith("gveval_")]
    assert len(compared) >= 11
    for name in compared:
        a, b = resumed_metrics[name], clean_metrics[name]
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), name


# ---------------------------------------------------------------------------------------------------------
# Plain processes judging through the client

JUDGING_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from capjudge.judges.client.judge_client import JudgeClient
    from capjudge.judges.client.config import JudgeConfig
    from capjudge.judges.gveval.judge import GVEvalJudge

    base_url, cache, first, last, step, concurrency = sys.argv[1:7]
    config = JudgeConfig(base_url=base_url, model="test-judge", cache_path=cache, max_concurrency=int(concurrency))
    client = JudgeClient(config)
    judge = GVEvalJudge(client, mode="references")
    items = list(range(int(first), int(last), int(step)))
    references = ["A dog runs across a park.", "A brown dog plays fetch."]

    async def judge_all():
        import asyncio
        results = await asyncio.gather(*(judge.ajudge(f"[item {i:04d}] a dog number {i} runs", references=references)
                                         for i in items))
        return results

    if int(concurrency) > 1:
        import asyncio
        results = asyncio.run(judge_all())
    else:
        results = [judge.judge(f"[item {i:04d}] a dog number {i} runs", references=references) for i in items]
    for item, result in zip(items, results):
        print(json.dumps({"item": item, "failure": result.failure_kind, "scores": result.scores()}), flush=True)
    client.close()
    """
)


def start_judging(script: Path, base_url: str, cache: Path, first: int, last: int, step: int, concurrency: int):
    return subprocess.Popen(
        [venv_python(), str(script), base_url, str(cache), str(first), str(last), str(step), str(concurrency)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finished(process: subprocess.Popen) -> dict[int, dict]:
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 0, stderr[-2000:]
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return {line["item"]: line for line in lines}


def test_a_killed_judging_process_with_eight_in_flight_loses_nothing_on_rerun(tmp_path):
    n_items, in_flight = 80, 8
    script = tmp_path / "judge_items.py"
    script.write_text(JUDGING_SCRIPT)
    cache = tmp_path / "cache.sqlite"
    with ServerProcess("--latency", "0.2") as judge:
        process = start_judging(script, judge.base_url, cache, 0, n_items, 1, in_flight)
        wait_for_requests(judge, process, at_least=n_items // 2)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        assert process.returncode == -signal.SIGKILL
        asked_before_kill = judge.stats()["requests"]
        cached = cache_rows(cache)
        assert integrity(cache) == "ok" and 0 < cached < n_items
        # At most `in_flight` asked at once; lost to the kill: those in flight and the writer thread's group not
        # yet committed (ReplyCache), which a loaded machine makes larger (42 asked, 33 cached, seen once).
        assert judge.stats()["max_in_flight"] <= in_flight
        assert cached <= asked_before_kill

        rerun = finished(start_judging(script, judge.base_url, cache, 0, n_items, 1, in_flight))
        assert judge.stats()["requests"] - asked_before_kill == n_items - cached
    assert sorted(rerun) == list(range(n_items))
    assert all(line["failure"] is None and line["scores"]["mean"] is not None for line in rerun.values())
    assert cache_rows(cache) == n_items


def test_two_processes_sharing_one_cache_agree_and_duplicate_only_what_was_in_flight(tmp_path):
    n_items = 60
    script = tmp_path / "judge_items.py"
    script.write_text(JUDGING_SCRIPT)
    cache = tmp_path / "cache.sqlite"
    with ServerProcess("--latency", "0.05") as judge:
        # One process walks the items forwards, the other backwards: they meet once, in the middle.
        forwards = start_judging(script, judge.base_url, cache, 0, n_items, 1, 1)
        backwards = start_judging(script, judge.base_url, cache, n_items - 1, -1, -1, 1)
        seen_forwards, seen_backwards = finished(forwards), finished(backwards)
        asked = judge.stats()["requests"]
    assert sorted(seen_forwards) == sorted(seen_backwards) == list(range(n_items))
    for item in range(n_items):
        assert seen_forwards[item]["failure"] is None and seen_forwards[item] == seen_backwards[item], item
    assert integrity(cache) == "ok" and cache_rows(cache) == n_items
    # Each process has one request in flight: where they cross, at most one item each can be asked twice.
    assert n_items <= asked <= n_items + 2


# ---------------------------------------------------------------------------------------------------------
# 2,000 cached items

LOAD_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[2])
    from tests.support.openai_server import OpenAITestServer
    from capjudge.judges.client.judge_client import JudgeClient
    from capjudge.judges.client.config import JudgeConfig
    from capjudge.judges.anycap.judge import AnyCapJudge

    cache, n_items = sys.argv[1], int(sys.argv[3])
    reference = "A brown dog runs across a park and catches a red ball in its mouth."

    def run_pass(server):
        client = JudgeClient(JudgeConfig(base_url=server.base_url, model="test-judge", cache_path=cache))
        judge = AnyCapJudge(client)
        before = len(server.log)
        results = [judge.judge("detail", f"[item {i:05d}] " + "a dog runs in the park " * 8, reference)
                   for i in range(n_items)]
        client.close()
        return len(server.log) - before, results

    with OpenAITestServer() as server:
        first_requests, first = run_pass(server)
        second_requests, second = run_pass(server)
    print(json.dumps({
        "first_requests": first_requests,
        "second_requests": second_requests,
        "same": [a.final_score for a in first] == [b.final_score for b in second],
        "judged": sum(result.ok for result in second),
        # VmHWM: ru_maxrss would carry over the pytest parent's peak through fork+exec.
        "peak_rss_kb": next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")),
    }))
    """
)


def test_two_thousand_cached_items_are_rescored_with_no_requests_in_bounded_memory(tmp_path):
    n_items = 2000
    script = tmp_path / "load.py"
    script.write_text(LOAD_SCRIPT)
    done = subprocess.run(
        [venv_python(), str(script), str(tmp_path / "cache.sqlite"), str(REPO_ROOT), str(n_items)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["first_requests"] == n_items and report["second_requests"] == 0
    assert report["same"] and report["judged"] == n_items
    assert report["peak_rss_kb"] < 1.5 * 1024 * 1024  # a sanity bound (kilobytes on Linux), not a benchmark
    print(f"peak RSS for {n_items} items judged then re-scored from the cache: {report['peak_rss_kb'] / 1024:.0f} MB")

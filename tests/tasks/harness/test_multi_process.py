"""Past one process: lmms-eval under `accelerate launch` with 2 CPU processes (gloo), judged by capjudge: the
README's example of it, run as written.

The run proves its own scale: the per-item records name the rank and pid of the process that judged them
(two of each, every item once), the test server counts the requests (one per item), and the scores and
aggregates equal a one-process run's. Several nodes: a cache on a network file system is refused, and node
caches are joined with `capjudge cache merge`.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from capjudge.judges.client.cache import ReplyCache
from capjudge.judges.client.cache_files import CacheError, check_local_filesystem, filesystem_type
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_server, run_lmms_eval
from tests.support.readme_examples import checkout_copy, checkout_env, checkout_example, run_example

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASKS = ("gveval_demo", "anycap_style_demo")
N_ITEMS = 10


# The README's "Past one process" example: this test runs it as written (tests/support/readme_examples.py's
# RUN_BY_THEIR_OWN_TEST), then counts what it did.
ACCELERATE_EXAMPLE = "accelerate launch --num_processes 2"


def _accelerate_run(tmp_path: Path, judge) -> tuple[Path, Path]:
    """The README's `accelerate launch --num_processes 2` example, as written, in a copy of the checkout: on CPU,
    accelerate's `--cpu` starts ONE process whatever --num_processes says; `--multi_gpu` with
    ACCELERATE_USE_CPU=true starts two, with gloo. Returns its results file and the reply cache it used."""
    copy = checkout_copy(tmp_path)
    env = checkout_env(judge.base_url, tmp_path)
    run_example(checkout_example(ACCELERATE_EXAMPLE), cwd=copy, env=env, timeout=900)
    results = list((copy / "results" / "runs").rglob("*_results.json"))
    assert len(results) == 1, results
    return results[0], Path(env["CAPJUDGE_CACHE"])


def _samples(results_file: Path, task: str) -> list[dict]:
    date_id = results_file.name.removesuffix("_results.json")
    path = results_file.with_name(f"{date_id}_samples_{task}.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_two_processes_judge_every_item_once_and_agree_with_one_process(tmp_path):
    with judge_server() as judge:
        results_file, cache = _accelerate_run(tmp_path, judge)
        assert len(judge.log) == N_ITEMS * len(TASKS)  # every item of both tasks judged exactly once
        two = json.loads(results_file.read_text())["results"]
        per_process: Counter = Counter()
        scores = {}
        for task in TASKS:
            samples = _samples(results_file, task)
            assert len(samples) == N_ITEMS
            for sample in samples:
                record = sample["judged"]
                per_process[(record["judgment"]["process"]["rank"], record["judgment"]["process"]["pid"])] += 1
                assert record["judgment"]["requests"] == 1 and not record["judgment"]["cache_hit"]
                scores[(task, record["item_id"])] = {k: v for k, v in sample.items() if k.startswith(("gveval_", "anycap_"))}
        # Two worker processes (ranks 0 and 1, two pids), each judging its half of each task.
        assert sorted(rank for rank, _ in per_process) == [0, 1] and len({pid for _, pid in per_process}) == 2
        assert sorted(per_process.values()) == [N_ITEMS, N_ITEMS]

        # One process, its own cache and output: the same per-item values and the same aggregates.
        judge.log.clear()
        one = run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=",".join(TASKS),
                            output_path=tmp_path / "one_process", judge_base_url=judge.base_url,
                            cache_path=tmp_path / "one.sqlite")
        assert len(judge.log) == N_ITEMS * len(TASKS)
        for task in TASKS:
            for sample in one.samples(task):
                assert scores[(task, sample["judged"]["item_id"])] == {
                    k: v for k, v in sample.items() if k.startswith(("gveval_", "anycap_"))}
            metrics = {k: v for k, v in one.results()["results"][task].items() if "_stderr" not in k}
            assert {k: two[task][k] for k in metrics} == metrics

        # The two processes wrote one consistent cache: a rerun from it asks nothing.
        judge.log.clear()
        run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=",".join(TASKS),
                      output_path=tmp_path / "rerun", judge_base_url=judge.base_url, cache_path=cache)
        assert judge.log == []
    assert len(ReplyCache(cache)) == N_ITEMS * len(TASKS)


def test_a_cache_on_a_network_file_system_is_refused(tmp_path):
    mounts = ("/dev/vda / ext4 rw 0 0\n"
              f"server:/export {tmp_path / 'shared'} nfs4 rw,relatime 0 0\n"
              "tmpfs /tmp tmpfs rw 0 0\n")
    assert filesystem_type(tmp_path / "shared" / "deep" / "x.sqlite", mounts) == "nfs4"
    with pytest.raises(CacheError, match=r"network file system \(nfs4\).*CAPJUDGE_CACHE.*capjudge cache merge"):
        check_local_filesystem(tmp_path / "shared" / "cache.sqlite", mounts)
    check_local_filesystem(tmp_path / "local" / "cache.sqlite", mounts)  # the longest mount point decides
    check_local_filesystem(tmp_path / "cache.sqlite")  # this machine's real /proc/mounts: tmp is local


def test_node_caches_merge_into_one_that_answers_both_runs(tmp_path):
    with judge_server() as judge:
        for node, limit in (("node0", 4), ("node1", 10)):
            run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks="gveval_demo",
                          output_path=tmp_path / node, judge_base_url=judge.base_url,
                          cache_path=tmp_path / f"{node}.sqlite", limit=limit)
        assert len(judge.log) == 4 + 10
        merged = tmp_path / "merged.sqlite"
        result = run_capjudge("cache", "merge", str(tmp_path / "node0.sqlite"), str(tmp_path / "node1.sqlite"),
                              "--into", str(merged))
        assert result.returncode == 0, result.stderr
        assert f"{tmp_path / 'node0.sqlite'}: 4 new replies" in result.stdout
        assert f"{tmp_path / 'node1.sqlite'}: 6 new replies" in result.stdout  # the 4 shared items kept once
        judge.log.clear()
        run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks="gveval_demo",
                      output_path=tmp_path / "after", judge_base_url=judge.base_url, cache_path=merged)
        assert judge.log == []
    not_a_cache = tmp_path / "other.sqlite"
    with sqlite3.connect(not_a_cache) as connection:
        connection.execute("CREATE TABLE something (x)")
    bad = run_capjudge("cache", "merge", str(not_a_cache), "--into", str(merged))
    assert bad.returncode == 2 and "not a capjudge reply cache" in bad.stderr and str(not_a_cache) in bad.stderr
    missing = run_capjudge("cache", "merge", str(tmp_path / "nope.sqlite"), "--into", str(merged))
    assert missing.returncode == 2 and "no such cache file" in missing.stderr

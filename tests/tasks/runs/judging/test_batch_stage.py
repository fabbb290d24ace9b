"""`capjudge judge --batch`: the judging stage through the Batch API of the test server (tests/support/batch_service.py).

Real HTTP through the openai SDK (files, batches, streamed output files), the real `capjudge` command as a
subprocess, the demo tasks' real clips. Each scripted lifecycle is driven end to end: success, per-line
errors, an expired batch with half its lines done, a failed validation, slow finalising, replies that do not
parse (re-asked in the next batch, or online with --retry-online), a kill -9 between submission and
completion, and reruns that must submit nothing.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli
from tests.support.openai_server import Reply, rubric_responder
from tests.support.warm_launch import warm_start

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "anycap_style_demo"
N_ITEMS = 10


def _command(tmp_path, judge, *extra):
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    command = [sys.executable, "-m", "capjudge.tasks.cli", "judge", "--captions", str(CAPTIONS), "--task", TASK,
               "--out", str(tmp_path / "out"), "--batch", "--poll-seconds", "0.05", *extra]
    return command, env


def _judge(tmp_path, judge, *extra):
    command, env = _command(tmp_path, judge, *extra)
    return run_capjudge_cli(command[3:], env=env, cwd=REPO_ROOT, timeout=600)


def _samples(tmp_path):
    paths = sorted((tmp_path / "out").rglob(f"*_samples_{TASK}.jsonl"))
    return {line["judged"]["item_id"]: line for line in map(json.loads, paths[-1].read_text(encoding="utf-8").splitlines())}


def _wait_until_polling(judge, process):
    """Until the command has submitted its batch and polled it twice (its state file names the batch)."""
    deadline = time.monotonic() + 300
    while judge.batch.created == 0 or not any(b["polls"] >= 2 for b in judge.batch.batches.values()):
        assert process.poll() is None, "".join(process.communicate())[-3000:]
        assert time.monotonic() < deadline, "the batch was never submitted"
        time.sleep(0.05)


def _state(tmp_path):
    (path,) = list((tmp_path / "out").rglob("batch_state.json"))
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_batch_run_judges_every_item_with_no_online_request_and_a_rerun_submits_nothing(tmp_path):
    with judge_server() as judge:
        judge.batch.script("slow_finalize")
        first = _judge(tmp_path, judge)
        assert first.returncode == 0, first.stderr[-3000:]
        assert judge.log == []  # nothing was asked online
        assert judge.batch.created == 1 and judge.batch.lines_answered == N_ITEMS
        assert "finalizing" in first.stdout and "completed" in first.stdout
        samples = _samples(tmp_path)
        assert len(samples) == N_ITEMS
        assert all(line["judged"]["judgment"]["failure"] is None for line in samples.values())
        assert all(line["anycap_score"] in range(5) for line in samples.values())
        # The state names the batch; the input file on disk holds one line per item, keyed item#sample.
        (entry,) = _state(tmp_path)["batches"]
        assert entry["lines"] == N_ITEMS and entry["downloaded"] is True
        (input_file,) = list((tmp_path / "out").rglob("input_round0_000.jsonl"))
        custom_ids = [json.loads(line)["custom_id"] for line in input_file.read_text().splitlines()]
        assert sorted(custom_ids) == sorted(f"{item}#0" for item in samples)

        again = _judge(tmp_path, judge)
        assert again.returncode == 0, again.stderr[-3000:]
        assert judge.batch.created == 1 and judge.batch.uploads == 1 and judge.log == []  # 0 submissions, 0 requests
        assert {k: v["anycap_score"] for k, v in _samples(tmp_path).items()} == {k: v["anycap_score"] for k, v in samples.items()}


def test_batch_replies_are_the_cache_of_an_online_run(tmp_path):
    """The same requests and cache keys as online: judging online afterwards makes zero requests and gives the
    same per-item values."""
    with judge_server() as judge:
        assert _judge(tmp_path, judge).returncode == 0
        batch_scores = {k: v["anycap_score"] for k, v in _samples(tmp_path).items()}
        command, env = _command(tmp_path, judge)
        online = [part for part in command if part not in ("--batch", "--poll-seconds", "0.05")]
        online[online.index(str(tmp_path / "out"))] = str(tmp_path / "online")
        result = run_capjudge_cli(online[3:], env=env, cwd=REPO_ROOT, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert judge.log == []
        paths = list((tmp_path / "online").rglob(f"*_samples_{TASK}.jsonl"))
        online_lines = [json.loads(line) for line in paths[0].read_text().splitlines()]
        assert {line["judged"]["item_id"]: line["anycap_score"] for line in online_lines} == batch_scores
        assert all(line["judged"]["judgment"]["cache_hit"] for line in online_lines)


def test_failed_lines_and_an_expired_batch_are_submitted_again_never_dropped(tmp_path):
    with judge_server() as judge:
        judge.batch.script("partial_errors", "expire")
        result = _judge(tmp_path, judge, "--batch-max-requests", "6")
        assert result.returncode == 0, result.stderr[-3000:]
        # Round 0: two files (6 + 4 requests: split at the request limit), one with failed lines, one expired
        # with half done; round 1 resubmits exactly the lines left without a reply.
        state = _state(tmp_path)
        round0 = [entry for entry in state["batches"] if entry["input"].startswith("input_round0")]
        assert [entry["lines"] for entry in round0] == [6, 4]
        assert round0[0]["failed_lines"] == 2 and round0[1]["unanswered"] == 2
        resubmitted = sum(entry["lines"] for entry in state["batches"] if entry["input"].startswith("input_round1"))
        assert resubmitted == 4
        samples = _samples(tmp_path)
        assert len(samples) == N_ITEMS and all(line["judged"]["judgment"]["failure"] is None for line in samples.values())
        assert judge.log == [] and judge.batch.lines_answered == 6 + 2 + 4  # every item answered exactly once


def test_an_unparsable_reply_is_asked_again_in_the_next_batch(tmp_path):
    replies = iter([Reply("no json here")] * 3)

    def responder(body):
        return next(replies, None) or rubric_responder(body)

    with judge_server(responder=responder) as judge:
        result = _judge(tmp_path, judge)
        assert result.returncode == 0, result.stderr[-3000:]
        state = _state(tmp_path)
        assert [entry["lines"] for entry in state["batches"]] == [N_ITEMS, 3]  # 3 re-asks, as sample index 1
        (follow_up,) = list((tmp_path / "out").rglob("input_round1_000.jsonl"))
        assert all(json.loads(line)["custom_id"].endswith("#1") for line in follow_up.read_text().splitlines())
        assert all(line["judged"]["judgment"]["failure"] is None for line in _samples(tmp_path).values())
        assert judge.log == []


def test_retry_online_asks_the_unparsable_ones_online(tmp_path):
    replies = iter([Reply("no json here")] * 2)

    def responder(body):
        return next(replies, None) or rubric_responder(body)

    with judge_server(responder=responder) as judge:
        result = _judge(tmp_path, judge, "--retry-online")
        assert result.returncode == 0, result.stderr[-3000:]
        assert judge.batch.created == 1 and len(judge.log) == 2  # the two re-asks went online
        assert all(line["judged"]["judgment"]["failure"] is None for line in _samples(tmp_path).values())


def test_a_failed_validation_is_reported_and_nothing_is_written(tmp_path):
    with judge_server() as judge:
        judge.batch.script("fail_validation")
        result = _judge(tmp_path, judge)
        assert result.returncode == 2
        assert "failed" in result.stderr and "scripted validation failure" in result.stderr
        assert not list((tmp_path / "out").rglob("*_results.json"))
        assert judge.log == []


def test_kill_9_after_submitting_then_rerun_reattaches_and_submits_nothing_twice(tmp_path):
    with judge_server() as judge:
        judge.batch.script("hold")
        command, env = _command(tmp_path, judge)
        process = warm_start("capjudge", command[3:], env=env, cwd=REPO_ROOT)  # tests/support/warm_launch.py
        _wait_until_polling(judge, process)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert not list((tmp_path / "out").rglob("*_results.json"))
        (entry,) = _state(tmp_path)["batches"]
        assert entry["batch_id"] in judge.batch.batches and "downloaded" not in entry

        # The next day: --no-wait reports it still running; after it completes, the rerun collects it.
        waiting = _judge(tmp_path, judge, "--no-wait")
        assert waiting.returncode == 0 and "still running" in waiting.stdout and "in_progress" in waiting.stdout
        judge.batch.release()
        result = _judge(tmp_path, judge)
        assert result.returncode == 0, result.stderr[-3000:]
        assert judge.batch.created == 1 and judge.batch.uploads == 1 and judge.log == []
        assert len(_samples(tmp_path)) == N_ITEMS


def test_a_state_file_from_another_run_is_refused(tmp_path):
    with judge_server() as judge:
        assert _judge(tmp_path, judge).returncode == 0
        (path,) = list((tmp_path / "out").rglob("batch_state.json"))
        state = json.loads(path.read_text())
        state["run"]["model"] = "gpt-4o-2024-05-13"
        path.write_text(json.dumps(state))
        result = _judge(tmp_path, judge)
        assert result.returncode == 2 and "belongs to another run" in result.stderr and str(path) in result.stderr


def test_a_batch_cancelled_elsewhere_has_its_items_submitted_again(tmp_path):
    """Someone cancels the batch (the OpenAI dashboard, another tool) while capjudge waits: its unanswered
    lines go into the next round's batch, nothing is dropped."""
    import openai

    with judge_server() as judge:
        judge.batch.script("hold")
        command, env = _command(tmp_path, judge)
        process = warm_start("capjudge", command[3:], env=env, cwd=REPO_ROOT)  # tests/support/warm_launch.py
        _wait_until_polling(judge, process)
        (batch_id,) = judge.batch.batches
        openai.OpenAI(base_url=judge.base_url, api_key=TEST_API_KEY).batches.cancel(batch_id)
        output = "".join(process.communicate(timeout=300))  # its stdout, then its stderr
        assert process.returncode == 0, output[-3000:]
        assert "cancelled" in output and judge.batch.created == 2
        state = _state(tmp_path)
        assert state["batches"][0]["status"] == "cancelled" and state["batches"][0]["unanswered"] == N_ITEMS
        assert state["batches"][1]["lines"] == N_ITEMS and state["batches"][1]["status"] == "completed"
        assert len(_samples(tmp_path)) == N_ITEMS and judge.log == []

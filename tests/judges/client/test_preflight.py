"""Fail fast, before the GPU hours: the judge probe and the video check at task load, the circuit breaker,
and the non-zero exit of a run that judged (almost) nothing.

Real lmms-eval runs of the real tasks against the test server (which logs pre-flight probes apart from
judgments), a closed port, and the shared AnyCapEval file with no videos or half of them.
"""

from __future__ import annotations

import json
import shutil
import socket

import pytest
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.types import ChatRequest
from tests.support.paths import REPO_ROOT, shared_path
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, launch_lmms_eval

pytestmark = pytest.mark.slow

ANYCAP = ("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")
DEMO_CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens once the socket is closed


def _demo_run(tmp_path, base_url, *, env=None, tasks="gveval_demo", limit=3):
    return launch_lmms_eval(
        model="captions_file", model_args=f"path={DEMO_CAPTIONS},model_name=good", tasks=tasks,
        output_path=tmp_path / "out", judge_base_url=base_url, cache_path=tmp_path / "cache.sqlite",
        limit=limit, env=env,
    )


def _assert_failed_at_load(outcome, *texts):
    # lmms-eval itself would exit 0 after printing the error; the task makes the status say it failed.
    assert outcome.returncode == 2 and not outcome.new_results_files, outcome.output[-3000:]
    for text in texts:
        assert text in outcome.output, (text, outcome.output[-3000:])
    assert TEST_API_KEY not in outcome.output


def test_a_closed_port_fails_the_run_at_load_naming_endpoint_model_and_variable(tmp_path):
    url = _closed_port_url()
    outcome = _demo_run(tmp_path, url)
    _assert_failed_at_load(outcome, "pre-flight: cannot reach the judge at", url, TEST_JUDGE_MODEL, "OPENAI_BASE_URL")
    assert "Postprocessing" not in outcome.output  # nothing was judged


def test_a_rejected_key_fails_the_run_at_load(tmp_path):
    with judge_server() as judge:
        judge.required_key = "sk-the-right-key"
        outcome = _demo_run(tmp_path, judge.base_url)
        assert len(judge.preflights) == 1 and judge.log == []
    _assert_failed_at_load(outcome, "rejected the API key (HTTP 401)", "OPENAI_API_KEY")


def test_an_unknown_model_fails_the_run_at_load(tmp_path):
    with judge_server() as judge:
        judge.models = {"some-other-model"}
        outcome = _demo_run(tmp_path, judge.base_url)
        assert judge.log == []
    _assert_failed_at_load(outcome, "does not serve this model (HTTP 404", TEST_JUDGE_MODEL, "MODEL_VERSION")


def test_no_logprobs_fails_expected_scoring_and_passes_text_scoring(tmp_path):
    with judge_server() as judge:
        judge.logprobs_supported = False
        outcome = _demo_run(tmp_path / "expected", judge.base_url)
        _assert_failed_at_load(outcome, "returned no logprobs", "CAPJUDGE_GVEVAL_SCORING=text")
        assert judge.log == []
        text = _demo_run(tmp_path / "text", judge.base_url, env={"CAPJUDGE_GVEVAL_SCORING": "text"})
        run = text.require_run()
        assert len(judge.log) >= 3 and len(judge.preflights) == 2
    assert all(sample["gveval_failed"] == 0 for sample in run.samples("gveval_demo"))


def test_the_probe_can_be_switched_off_for_offline_preparation(tmp_path):
    outcome = launch_lmms_eval(
        model="captions_file", model_args=f"path={DEMO_CAPTIONS},model_name=good", tasks="gveval_demo",
        output_path=tmp_path / "out", judge_base_url=_closed_port_url(), cache_path=tmp_path / "cache.sqlite",
        limit=2, env={"CAPJUDGE_PREFLIGHT": "0"},
    )
    # The probe is off, so the run starts; then the breaker ends judging fast and the status says so.
    assert outcome.returncode == 3 and outcome.new_results_files, outcome.output[-3000:]
    samples = outcome.require_results().samples("gveval_demo")
    assert {sample["judged"]["judgment"]["failure"] for sample in samples} <= {"request_failed", "judge_unreachable"}


# ---------------------------------------------------------------------------------------------------------
# Videos


def _anycap_run(tmp_path, judge, videos, limit=None):
    data = shared_path(*ANYCAP)
    return launch_lmms_eval(
        model="captions_file", model_args="field=reference,model_name=reference", tasks="anycap_style",
        output_path=tmp_path / "out", judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite",
        limit=limit, env={"CAPJUDGE_ANYCAP_JSONL": str(data), "CAPJUDGE_ANYCAP_VIDEOS": str(videos)},
    )


def test_no_video_found_fails_the_run_at_load_naming_the_variable_and_folder(tmp_path):
    empty = tmp_path / "videos"
    empty.mkdir()
    with judge_server() as judge:
        outcome = _anycap_run(tmp_path, judge, empty)
        assert judge.log == []
    _assert_failed_at_load(outcome, "none of the 189 items' videos was found", str(empty), "CAPJUDGE_ANYCAP_VIDEOS")


def test_some_videos_missing_is_one_warning_before_generation_and_those_items_unjudged(tmp_path):
    rows = [json.loads(line) for line in shared_path(*ANYCAP).read_text(encoding="utf-8").splitlines()[:4]]
    videos = tmp_path / "videos"
    videos.mkdir()
    clip = REPO_ROOT / "tasks" / "demo" / "red_ball.mp4"
    for row in rows[:2]:
        shutil.copy(clip, videos / row["video"])
    with judge_server() as judge:
        outcome = _anycap_run(tmp_path, judge, videos, limit=4)
        run = outcome.require_run()
    every_row = [json.loads(line) for line in shared_path(*ANYCAP).read_text(encoding="utf-8").splitlines()]
    present = {row["video"] for row in rows[:2]}
    missing = [row for row in every_row if row["video"] not in present]  # items share clips: 40 for 189
    assert f"{len(missing)} of 189 items' videos were not found in {videos}" in outcome.output
    assert f"first: {missing[0]['id']}, " in outcome.output
    by_id = {sample["judged"]["item_id"]: sample for sample in run.samples("anycap_style")}
    expected = [0 if row["video"] in present else 1 for row in rows]
    assert [by_id[str(row["id"])]["anycap_failed"] for row in rows] == expected and expected[2:] == [1, 1]
    assert by_id[str(rows[2]["id"])]["judged"]["judgment"]["failure"] == "video_missing"


# ---------------------------------------------------------------------------------------------------------
# The circuit breaker and the exit status


def test_the_breaker_stops_retrying_a_judge_that_is_gone(tmp_path):
    config = JudgeConfig(base_url=_closed_port_url(), model=TEST_JUDGE_MODEL, cache_path=None, use_cache=False,
                         backoff_initial=0.01, backoff_max=0.05, max_attempts=6, breaker_threshold=5)
    client = JudgeClient(config)
    try:
        outcomes = [client.judge(ChatRequest((f"caption {i}",), {}), lambda reply: reply.content, judge_version="t")
                    for i in range(20)]
    finally:
        client.close()
    kinds = [outcome.failure.kind for outcome in outcomes]
    # The first item goes through 5 refused attempts, then the breaker opens: nothing else is attempted.
    assert kinds == ["judge_unreachable"] * 20
    assert sum(attempt.outcome == "connection" for o in outcomes for attempt in o.attempts) == 5
    assert "failed 5 times in a row" in outcomes[-1].failure.detail


def test_a_key_revoked_mid_run_trips_the_breaker_the_run_exits_non_zero_and_a_rerun_completes(tmp_path):
    # Two requests in flight at most, the key revoked at the second: at most 3 requests get through (the third
    # may have passed the key check before it was revoked) and at most 5 are rejected before the breaker opens
    # (a success that lands after the first rejection starts its count again, and the other thread's request is
    # in flight when it opens), so at least 2 of the 10 items are left for the open breaker to stop. At the
    # default bound all 10 items are in flight at once and may all be rejected before it opens.
    env = {"CAPJUDGE_BREAKER_THRESHOLD": "3", "CAPJUDGE_MAX_CONCURRENCY": "2"}
    with judge_server() as judge:
        from tests.support.openai_server import rubric_responder

        def revoke_after_two(body):
            if len(judge.log) >= 2:
                judge.required_key = "sk-revoked"  # every later request: 401
            return rubric_responder(body)

        judge.responder = revoke_after_two
        first = _demo_run(tmp_path, judge.base_url, env=env, limit=10)
        rejected = [entry for entry in judge.log if entry.answer == "401"]
        assert first.returncode == 3, first.output[-3000:]
        assert "were not judged, above CAPJUDGE_MAX_FAILURE_RATE=0.5" in first.output
        assert 3 <= len(rejected) <= 5
        # Results and samples were still written.
        samples = first.require_results().samples("gveval_demo")
        judged_first = sum(sample["gveval_failed"] == 0 for sample in samples)
        kinds = {sample["judged"]["judgment"]["failure"] for sample in samples if sample["gveval_failed"]}
        assert kinds <= {"request_failed", "judge_unreachable"} and "judge_unreachable" in kinds

        judge.reset()
        second = _demo_run(tmp_path, judge.base_url, env=env, limit=10)
        run = second.require_run()
        asked_again = len(judge.log)
    assert all(sample["gveval_failed"] == 0 for sample in run.samples("gveval_demo"))
    assert asked_again == 10 - judged_first  # the cache kept everything the first run got

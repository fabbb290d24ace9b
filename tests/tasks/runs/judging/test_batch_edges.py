"""The Batch API path at its edges (issue 25, items 6, 7 and 8), through the real `capjudge judge --batch`
command and the test server's Files and Batches endpoints (tests/support/batch_service.py):

- a gateway that quotes the key in batch error lines, in a failed batch's errors and in a reply: the key is
  written to no state file, cache, input file or screen;
- a batch that ended `failed` (the organisation's enqueued-token limit) is resubmitted by the rerun, and only
  what no other batch answered;
- pre-flight for `--batch` asks the files/batches and models endpoints, never an online chat completion.
"""

from __future__ import annotations

import json
import secrets

import pytest
from tests.support.harness_runs import TEST_JUDGE_MODEL, judge_server, run_capjudge_cli
from tests.support.openai_server import Reply, rubric_responder
from tests.tasks.runs.judging.test_batch_stage import N_ITEMS, _command, _judge, _samples, _state

pytestmark = pytest.mark.slow


def _judge_with(tmp_path, judge, env_changes, *extra):
    from tests.support.paths import REPO_ROOT

    command, env = _command(tmp_path, judge, *extra)
    env.update(env_changes)
    return run_capjudge_cli(command[3:], env=env, cwd=REPO_ROOT, timeout=600)


def _all_bytes(root):
    return b"".join(path.read_bytes() for path in root.rglob("*") if path.is_file())


def test_a_key_quoted_by_batch_errors_and_replies_is_never_written_in_clear(tmp_path):
    key = f"sk-capjudge-BATCH-{secrets.token_hex(12)}"
    unparsable = iter([f"I will not judge this (authorised as {key})"] * 2)

    def responder(body):  # the first two lines answered with text that quotes the key and does not parse
        text = next(unparsable, None)
        return Reply(text) if text is not None else rubric_responder(body)

    with judge_server(responder=responder) as judge:
        judge.required_key = key
        judge.batch.echo_key = True
        judge.batch.script("partial_errors")  # every third line fails, its error quoting the key
        result = _judge_with(tmp_path, judge, {"OPENAI_API_KEY": key})
        assert result.returncode == 0, result.stderr[-3000:]
        assert judge.log == []
        # Then a batch that fails as a whole, its errors quoting the key (printed, and kept in the state).
        judge.batch.script("fail_validation")
        (tmp_path / "second").mkdir()
        failed = _judge_with(tmp_path / "second", judge, {"OPENAI_API_KEY": key})
    assert failed.returncode == 2 and "[REDACTED]" in failed.stderr
    samples = _samples(tmp_path)
    assert len(samples) == N_ITEMS and all(line["judged"]["judgment"]["failure"] is None for line in samples.values())
    state = json.dumps(_state(tmp_path))
    assert "[REDACTED]" in state  # the failed lines' errors were recorded, redacted
    cache = b"".join(path.read_bytes() for path in tmp_path.glob("cache.sqlite*"))
    assert b"I will not judge this (authorised as [REDACTED])" in cache  # the unparsable replies were cached, redacted
    for text in (result.stdout, result.stderr, failed.stdout, failed.stderr):
        assert key not in text
    assert key.encode() not in _all_bytes(tmp_path)


def test_a_failed_batch_is_resubmitted_by_the_rerun_once_its_cause_is_gone(tmp_path):
    """The organisation's enqueued-token limit fails the batch: the command says so, and the same command
    run later submits the items again and judges every one (it used to re-report the same failed batch)."""
    with judge_server() as judge:
        judge.batch.script("fail_token_limit")
        first = _judge(tmp_path, judge)
        assert first.returncode == 2
        assert "Enqueued token limit" in first.stderr and "run the same command again" in first.stderr
        second = _judge(tmp_path, judge)
        assert second.returncode == 0, second.stderr[-3000:]
        assert judge.batch.created == 2 and judge.batch.lines_answered == N_ITEMS and judge.log == []
    samples = _samples(tmp_path)
    assert len(samples) == N_ITEMS and all(line["judged"]["judgment"]["failure"] is None for line in samples.values())
    failed, resubmitted = _state(tmp_path)["batches"]
    assert failed["status"] == "failed" and failed["lines"] == N_ITEMS
    assert resubmitted["status"] == "completed" and resubmitted["lines"] == N_ITEMS


def test_a_rerun_resubmits_only_what_the_failed_batch_left_not_what_another_batch_answered(tmp_path):
    with judge_server() as judge:
        judge.batch.script("success", "fail_token_limit")  # 6 + 4 requests: the second batch fails
        first = _judge(tmp_path, judge, "--batch-max-requests", "6")
        assert first.returncode == 2 and "Enqueued token limit" in first.stderr
        second = _judge(tmp_path, judge, "--batch-max-requests", "6")
        assert second.returncode == 0, second.stderr[-3000:]
        # Every item answered exactly once: the 6 of the batch that succeeded, then the 4 the failed one left.
        assert judge.batch.lines_answered == N_ITEMS and judge.batch.created == 3 and judge.log == []
    batches = _state(tmp_path)["batches"]
    assert [(entry["lines"], entry["status"]) for entry in batches] == [(6, "completed"), (4, "failed"), (4, "completed")]
    assert len(_samples(tmp_path)) == N_ITEMS


def test_batch_pre_flight_needs_no_online_deployment(tmp_path):
    """Like an Azure batch deployment: chat completions are refused, the Files and Batches endpoints work. The
    batch run goes through, and its pre-flight sent no chat completion."""
    with judge_server() as judge:
        judge.online_chat = False
        judge.models = {TEST_JUDGE_MODEL}
        result = _judge(tmp_path, judge)
        assert result.returncode == 0, result.stderr[-3000:]
        assert judge.preflights == [] and judge.log == []  # no chat completion, probe or judgment
        assert judge.batch.created == 1
    assert len(_samples(tmp_path)) == N_ITEMS


@pytest.mark.parametrize("problem", ["model", "key"])
def test_batch_pre_flight_refuses_an_unknown_model_or_a_rejected_key_before_submitting(problem, tmp_path):
    with judge_server() as judge:
        judge.online_chat = False
        judge.models = {"gpt-4o-batch"}  # the configured test-judge is not served
        if problem == "key":
            judge.models = {TEST_JUDGE_MODEL}
            judge.required_key = f"sk-other-{secrets.token_hex(12)}"
        result = _judge(tmp_path, judge)
        assert result.returncode == 2
        assert "pre-flight" in result.stderr
        expected = {"model": "does not serve this model", "key": "rejected the API key"}[problem]
        assert expected in result.stderr and judge.base_url in result.stderr
        assert judge.batch.created == 0 and judge.batch.uploads == 0 and judge.preflights == [] and judge.log == []
    assert not list((tmp_path / "out").rglob("batch_state.json"))

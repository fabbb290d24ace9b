"""The judge client against a real HTTP server, through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import threading

import pytest

from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.types import ChatRequest, ImagePart, JudgeReply, ParseFailure
from tests.support.openai_server import Fault, OpenAITestServer, Reply, with_logprobs
from tests.support.paths import REPO_ROOT

VERSION = "test-judge/1"


def text_request(text: str = "Rate this caption.", **params) -> ChatRequest:
    return ChatRequest(parts=(text,), params={"temperature": 0, **params})


def accept_any(reply: JudgeReply):
    return reply.content


def needs_number(reply: JudgeReply):
    content = reply.content or ""
    return int(content) if content.strip().isdigit() else ParseFailure("not_a_number", f"got {content[:20]!r}")


def test_success_carries_content_logprobs_usage_and_sends_the_exact_body(server, make_client):
    server.script(with_logprobs("The Accuracy score is α80α."))
    client = make_client(server)
    png = ImagePart(b"\x89PNG fake bytes", "image/png", detail="high")
    request = ChatRequest(parts=("look", png), params={"temperature": 1, "logprobs": True, "top_logprobs": 5})

    outcome = client.judge(request, accept_any, judge_version=VERSION)

    assert outcome.ok and outcome.value == "The Accuracy score is α80α."
    reply = outcome.last_reply
    assert reply.logprobs and "".join(t.token for t in reply.logprobs) == reply.content
    assert reply.finish_reason == "stop" and reply.model == "test-judge"
    assert outcome.usage.requests == 1 and outcome.usage.completion_tokens > 0
    sent = server.log[0].body
    assert sent == request.body("test-judge")
    assert sent["messages"][0]["content"][1]["image_url"] == {
        "url": "data:image/png;base64,iVBORyBmYWtlIGJ5dGVz", "detail": "high"}
    assert [a.outcome for a in outcome.attempts] == ["ok"]


@pytest.mark.parametrize(
    "fault, outcome_kind",
    [
        (Fault("429", retry_after=7), "http_429"),
        (Fault("500"), "http_500"),
        (Fault("503"), "http_503"),
        (Fault("hang", hang_seconds=5), "timeout"),
        (Fault("truncated"), "connection"),
        (Fault("truncated_json"), "bad_response"),
        (Fault("not_json"), "bad_response"),
        (Fault("empty_choices"), "bad_response"),
        (Fault("reset"), "connection"),
    ],
)
def test_each_transient_fault_is_retried_and_recorded(server, make_client, fault, outcome_kind):
    server.script(fault, Reply("42"))
    sleeps: list[float] = []
    # The timeout only has to catch the 5 s hang; no ordinary reply may reach it, even on a loaded machine.
    client = make_client(server, sleeps=sleeps, timeout=2.0)

    outcome = client.judge(text_request(), needs_number, judge_version=VERSION)

    assert outcome.ok and outcome.value == 42
    assert [a.outcome for a in outcome.attempts] == [outcome_kind, "ok"]
    assert len(server.log) == 2
    assert len(sleeps) == 1
    if fault.retry_after is not None:
        assert sleeps[0] >= fault.retry_after  # Retry-After honoured


def test_truncated_bodies_of_both_kinds_are_retried(server, make_client):
    # A body shorter than declared is a connection error; a well-framed but cut JSON is a bad response.
    server.script(Fault("truncated"), Fault("truncated_json"), Reply("7"))
    outcome = make_client(server).judge(text_request(), needs_number, judge_version=VERSION)
    assert outcome.value == 7 and len(server.log) == 3


def test_attempts_are_bounded_and_exhaustion_is_a_typed_failure(server, make_client):
    server.script(*[Fault("500")] * 10)
    sleeps: list[float] = []
    client = make_client(server, sleeps=sleeps, max_attempts=3)

    outcome = client.judge(text_request(), needs_number, judge_version=VERSION)

    assert not outcome.ok and outcome.value is None
    assert outcome.failure.kind == "request_failed" and "3 attempts" in outcome.failure.detail
    assert len(server.log) == 3 and len(sleeps) == 2
    # exponential ceiling: 0.5, 1.0 (full jitter draws below it)
    assert sleeps[0] <= 0.5 and sleeps[1] <= 1.0


def test_client_errors_are_not_retried(server, make_client):
    server.script(Fault("400"), Reply("1"))
    outcome = make_client(server).judge(text_request(), needs_number, judge_version=VERSION)
    assert outcome.failure.kind == "request_failed" and "400" in outcome.failure.detail
    assert len(server.log) == 1


def test_rejected_replies_are_re_asked_with_a_new_sample_index_up_to_the_bound(server, make_client):
    server.script(Reply("no idea"), Reply(None), Reply("9"))
    client = make_client(server)
    outcome = client.judge(text_request(), needs_number, judge_version=VERSION, max_tries=3)
    assert outcome.value == 9
    assert [a.outcome for a in outcome.attempts] == ["ok", "parse:not_a_number", "ok", "parse:not_a_number", "ok"]
    assert [a.sample_index for a in outcome.attempts if a.outcome == "ok"] == [0, 1, 2]

    server.script(*[Reply("never a number")] * 5)
    failed = client.judge(text_request("other"), needs_number, judge_version=VERSION, max_tries=2)
    assert failed.failure.kind == "not_a_number" and len(failed.replies) == 2
    assert len(server.log) == 5  # 3 + exactly max_tries


def test_rerun_from_cache_makes_zero_requests_and_replays_re_asks(server, make_client):
    server.script(Reply("bad"), Reply("5"))
    first = make_client(server).judge(text_request(), needs_number, judge_version=VERSION, max_tries=3)
    assert first.value == 5 and len(server.log) == 2

    again = make_client(server).judge(text_request(), needs_number, judge_version=VERSION, max_tries=3)
    assert again.value == 5 and again.cache_hit
    assert len(server.log) == 2
    assert [a.outcome for a in again.attempts] == ["cache_hit", "parse:not_a_number", "cache_hit"]

    # Another judge version or sampling setting is another key.
    make_client(server).judge(text_request(), accept_any, judge_version="test-judge/2")
    make_client(server).judge(text_request(temperature=1), accept_any, judge_version=VERSION)
    assert len(server.log) == 4


def test_no_cache_means_every_call_asks(server, make_client):
    client = make_client(server, use_cache=False)
    for _ in range(2):
        client.judge(text_request(), accept_any, judge_version=VERSION)
    assert len(server.log) == 2


WORKER = textwrap.dedent(
    """
    import json, sys
    from capjudge.judges.client.judge_client import JudgeClient
    from capjudge.judges.client.config import JudgeConfig
    from capjudge.judges.types import ChatRequest
    base_url, cache, start, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    client = JudgeClient(JudgeConfig(base_url=base_url, api_key="sk-test", model="m", cache_path=cache))
    requests = [ChatRequest(parts=(f"item {i}",)) for i in range(start, stop)]
    outcomes = client.judge_many(requests, lambda r: r.content, judge_version="v")
    print(json.dumps({"ok": sum(o.ok for o in outcomes), "hits": sum(o.cache_hit for o in outcomes)}))
    """
)


def run_worker(server, cache, start, stop):
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, server.base_url, str(cache), str(start), str(stop)],
        stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )


def test_cache_is_shared_across_processes(server, tmp_path):
    cache = tmp_path / "shared.sqlite"
    first = run_worker(server, cache, 0, 30)
    assert json.loads(first.communicate(timeout=120)[0]) == {"ok": 30, "hits": 0}
    assert len(server.log) == 30

    second = run_worker(server, cache, 0, 30)
    assert json.loads(second.communicate(timeout=120)[0]) == {"ok": 30, "hits": 30}
    assert len(server.log) == 30  # the second process made zero requests


def test_two_processes_writing_one_cache_at_once_do_not_corrupt_it(tmp_path):
    cache = tmp_path / "busy.sqlite"
    with OpenAITestServer(latency=0.01) as server:
        workers = [run_worker(server, cache, 0, 60), run_worker(server, cache, 40, 100)]
        results = [json.loads(w.communicate(timeout=180)[0]) for w in workers]
        assert [r["ok"] for r in results] == [60, 60]
        distinct_prompts = {entry.prompt_text for entry in server.log}
        assert len(distinct_prompts) == 100
        # Only the 20 overlapping items can have been asked twice (both processes in flight at once).
        assert len(server.log) <= 120
    from capjudge.judges.client.cache import ReplyCache
    assert len(ReplyCache(cache)) == 100
    import sqlite3
    assert sqlite3.connect(cache).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_concurrency_bound_holds_for_sync_and_async_callers_together(make_client):
    with OpenAITestServer(latency=0.15) as server:
        client = make_client(server, max_concurrency=4, use_cache=False)
        threads = [
            threading.Thread(target=client.judge, args=(text_request(f"sync {i}"), accept_any), kwargs={"judge_version": VERSION})
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        outcomes = client.judge_many([text_request(f"async {i}") for i in range(16)], accept_any, judge_version=VERSION)
        for thread in threads:
            thread.join()
        assert all(o.ok for o in outcomes)
        assert [o.value for o in outcomes] == [r.content for r in (o.last_reply for o in outcomes)]
        assert len(server.log) == 24
        assert server.max_in_flight == 4  # reached, never exceeded


def test_ajudge_many_keeps_input_order(server, make_client):
    client = make_client(server)

    async def run():
        return await client.ajudge_many([text_request(f"n{i}") for i in range(10)], accept_any, judge_version=VERSION)

    outcomes = asyncio.run(run())
    prompts = [entry.prompt_text for entry in server.log]
    assert sorted(prompts) == sorted(f"n{i}" for i in range(10))
    assert len(outcomes) == 10 and all(o.ok for o in outcomes)


def test_judge_many_works_where_an_event_loop_is_already_running(server, make_client):
    """A notebook cell (or any async framework) already runs a loop in its thread; judge_many still works."""
    client = make_client(server)

    async def notebook_cell():
        asyncio.get_running_loop()  # the situation: a loop is running here
        return client.judge_many([text_request(f"cell {i}") for i in range(6)], accept_any, judge_version=VERSION)

    outcomes = asyncio.run(notebook_cell())
    assert len(outcomes) == 6 and all(o.ok for o in outcomes)
    assert sorted(entry.prompt_text for entry in server.log) == sorted(f"cell {i}" for i in range(6))


def test_usage_is_accounted_per_judge(server, make_client):
    client = make_client(server)
    client.judge(text_request("a"), accept_any, judge_version="judge-a/1")
    client.judge(text_request("b"), accept_any, judge_version="judge-b/1")
    client.judge(text_request("a"), accept_any, judge_version="judge-a/1")  # cached
    usage = client.usage()
    assert usage["judge-a/1"]["requests"] == 1 and usage["judge-a/1"]["cache_hits"] == 1
    assert usage["judge-b/1"]["requests"] == 1 and usage["judge-b/1"]["completion_tokens"] > 0


SECRET = "sk-capjudge-FAKE-0123456789abcdef"


def test_the_api_key_is_sent_but_never_recorded(tmp_path, caplog):
    from capjudge.judges.client.judge_client import JudgeClient

    def echo_key(body):  # a hostile server that puts the key in its error text and replies
        return Reply(f"your key is {SECRET}")

    with OpenAITestServer(echo_key) as server:
        server.script(Fault("500"), Fault("429", retry_after=0))
        config = JudgeConfig(base_url=server.base_url, api_key=SECRET, model="m", cache_path=tmp_path / "c.sqlite")
        client = JudgeClient(config, sleep=lambda s: None)
        with caplog.at_level(logging.DEBUG):
            outcome = client.judge(text_request(), needs_number, judge_version=VERSION, max_tries=2)
        assert server.log[0].headers["authorization"] == f"Bearer {SECRET}"
    assert outcome.failure is not None
    recorded = repr(outcome.failure) + repr(outcome.attempts) + caplog.text + repr(config) + repr(client.config)
    assert SECRET not in recorded
    assert "[REDACTED]" in outcome.last_reply.content
    assert SECRET.encode() not in (tmp_path / "c.sqlite").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("c.sqlite*"))


def test_missing_key_for_a_remote_backend_is_one_clear_error():
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        JudgeConfig.from_env(env={})
    with pytest.raises(ConfigError, match="AZURE_OPENAI_ENDPOINT"):
        JudgeConfig.from_env(env={"API_TYPE": "azure", "AZURE_OPENAI_API_KEY": "k"})
    # A server on this machine needs no key.
    local = JudgeConfig.from_env(env={"OPENAI_API_URL": "http://127.0.0.1:8000/v1/chat/completions"})
    assert local.base_url == "http://127.0.0.1:8000/v1" and local.api_key is None


def test_environment_then_arguments():
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "https://example.invalid/v1", "MODEL_VERSION": "gpt-x",
           "CAPJUDGE_MAX_CONCURRENCY": "8", "CAPJUDGE_NO_CACHE": "1"}
    config = JudgeConfig.from_env(env=env)
    assert (config.model, config.max_concurrency, config.use_cache) == ("gpt-x", 8, False)
    assert JudgeConfig.from_env(env=env, model="gpt-y", max_concurrency=2).model == "gpt-y"
    with pytest.raises(ConfigError, match="CAPJUDGE_MAX_CONCURRENCY"):
        JudgeConfig.from_env(env={**env, "CAPJUDGE_MAX_CONCURRENCY": "many"})


def test_azure_backend_talks_to_the_deployment_route(server, tmp_path):
    from capjudge.judges.client.judge_client import JudgeClient

    config = JudgeConfig.from_env(env={
        "API_TYPE": "azure", "AZURE_OPENAI_API_KEY": "az-key", "AZURE_OPENAI_ENDPOINT": server.base_url.removesuffix("/v1"),
        "MODEL_VERSION": "my-gpt4o-deployment", "CAPJUDGE_CACHE": str(tmp_path / "az.sqlite"),
    })
    outcome = JudgeClient(config).judge(text_request(), accept_any, judge_version=VERSION)
    assert outcome.ok
    entry = server.log[0]
    assert entry.path.startswith("/openai/deployments/my-gpt4o-deployment/chat/completions?api-version=")
    assert entry.headers["api-key"] == "az-key"


def test_test_server_runs_standalone_for_subprocesses():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server"], cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:")
        import openai
        reply = openai.OpenAI(base_url=line.split()[1], api_key="x").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Model Output: a dog runs\nReference: a dog"}])
        assert json.loads(reply.choices[0].message.content)["score"] in range(5)
    finally:
        process.stdin.close()
        process.wait(timeout=10)

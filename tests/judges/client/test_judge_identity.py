"""Two judges never share cached replies: what a server says about the model it serves (GET /models) is part of
every cache key, a run says when the cache holds its requests' replies from another judge, and the keys of
OpenAI, Azure and servers that say nothing beyond the model name are the ones capjudge has always used (their
old caches stay valid).

Real runs of `capjudge judge` against the test server serving "two models" in turn under one name, and one real
`capjudge serve-local` (the shipped Gemma GGUF) for what it reports.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import urllib.request

import pytest
from tests.support.openai_server import rubric_responder, with_logprobs
from tests.judges.client.test_cache_edges import N_ITEMS, TASK, judge

pytestmark = pytest.mark.slow

NOTICE = "holds replies to this run's requests from"


def served_as(sha256):
    """The test server's model listing as a llama.cpp server of capjudge's reports one GGUF under test-judge."""
    return [{"id": "test-judge", "object": "model", "owned_by": "me", "created": 1700000000,
             "meta": {"gguf_sha256": sha256}}]


def model_b(body):
    """Another model behind the same name: its own, recognisable replies."""
    return with_logprobs("Model B. The Accuracy score is α7α.\nThe Completeness score is β7β.\n"
                         "The Conciseness score is ψ7ψ.\nThe Relevance score is δ7δ.")


def raw_replies(folder):
    (path,) = list(folder.rglob(f"*_samples_{TASK}.jsonl"))
    return [json.loads(line)["judged"]["judgment"]["raw_reply"] for line in path.read_text(encoding="utf-8").splitlines()]


def notices(result):
    return [line for line in result.stderr.splitlines() if NOTICE in line]


def partition(lines, needle):
    return [line for line in lines if needle in line], [line for line in lines if needle not in line]


def test_two_models_served_in_turn_under_one_name_never_share_replies_and_the_run_says_so(tmp_path, server):
    cache = tmp_path / "cache.sqlite"
    # A server that says nothing beyond the name: as every cache was made before judges were identified.
    unidentified = judge(tmp_path, server, cache, out="unidentified")
    assert unidentified.returncode == 0, unidentified.stderr[-3000:]
    assert len(server.log) == N_ITEMS and notices(unidentified) == []

    server.reset()
    server.model_listing = served_as("a" * 64)
    model_a = judge(tmp_path, server, cache, out="model_a")
    assert model_a.returncode == 0, model_a.stderr[-3000:]
    assert len(server.log) == N_ITEMS  # replies of a judge of unknown identity are not taken for model A's
    (notice,) = notices(model_a)
    assert "a judge of unknown identity" in notice and str(cache) in notice and "a" * 64 in notice

    server.reset(responder=model_b)
    server.model_listing = served_as("b" * 64)
    second_model = judge(tmp_path, server, cache, out="model_b")
    assert second_model.returncode == 0, second_model.stderr[-3000:]
    assert len(server.log) == N_ITEMS  # on HEAD: 0 requests, model B "judged" from model A's replies
    assert all(reply.startswith("Model B.") for reply in raw_replies(tmp_path / "model_b"))
    # Both earlier judges answered these requests: each is named once (not once per request).
    unknown, (notice,) = partition(notices(second_model), "a judge of unknown identity")
    assert len(unknown) == 1
    assert f'another judge ({{"id":"test-judge","meta":{{"gguf_sha256":"{"a" * 64}"}}}})' in notice
    assert "b" * 64 in notice and "not reused" in notice

    server.reset(responder=rubric_responder)
    server.model_listing = served_as("a" * 64)  # model A again, its listing unchanged (volatile fields aside)
    server.model_listing[0]["created"] = 1800000000
    again = judge(tmp_path, server, cache, out="model_a_again")
    assert again.returncode == 0, again.stderr[-3000:]
    assert server.log == [] and notices(again) == []  # its keys are stable: every reply from the cache
    assert raw_replies(tmp_path / "model_a_again") == raw_replies(tmp_path / "model_a")


def old_key(body, judge_version, sample_index):
    """The cache key as capjudge computed it before judges were identified (pinned here on purpose)."""
    canonical = json.dumps({"body": body, "judge_version": judge_version, "sample_index": sample_index},
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_servers_that_say_nothing_beyond_the_name_and_openai_and_azure_keep_the_keys_old_caches_hold(tmp_path, server):
    from capjudge.judges.client.served_judges import asks_for_identity
    from capjudge.judges.client.config import JudgeConfig

    cache = tmp_path / "cache.sqlite"
    result = judge(tmp_path, server, cache)
    assert result.returncode == 0, result.stderr[-3000:]
    (samples,) = list((tmp_path / "out").rglob(f"*_samples_{TASK}.jsonl"))
    version = json.loads(samples.read_text(encoding="utf-8").splitlines()[0])["judged"]["judge"]["judge_version"]
    with sqlite3.connect(cache) as conn:
        stored = {key for (key,) in conn.execute("SELECT key FROM replies")}
    conn.close()
    assert stored == {old_key(entry.body, version, 0) for entry in server.log}

    # OpenAI's and Azure's names are dated snapshots and deployments: asked nothing, keyed as before.
    assert not asks_for_identity(JudgeConfig(api_key="sk-x", model="gpt-4o-2024-08-06"))
    assert not asks_for_identity(JudgeConfig(base_url="https://api.openai.com/v1", api_key="sk-x"))
    assert not asks_for_identity(JudgeConfig(api_type="azure", azure_endpoint="https://r.openai.azure.com", api_key="k"))
    assert asks_for_identity(JudgeConfig(base_url="http://127.0.0.1:8080/v1"))


def test_serve_local_lists_the_sha256_of_the_weights_it_serves_and_the_client_keys_by_it(tmp_path):
    from capjudge.judges.client.judge_client import JudgeClient
    from capjudge.judges.local.options import default_model_path
    from capjudge.judges.local.launcher import LocalJudgeServer

    weights = default_model_path()
    expected = hashlib.sha256(weights.read_bytes()).hexdigest()
    with LocalJudgeServer(alias="judge") as local:
        with urllib.request.urlopen(f"{local.base_url}/models", timeout=30) as response:
            (entry,) = json.loads(response.read())["data"]
        assert entry["id"] == "judge" and entry["meta"] == {"gguf_sha256": expected}
        client = JudgeClient(local.judge_config(cache_path=tmp_path / "cache.sqlite"))
        try:
            assert client.served.identity("judge") == {"id": "judge", "meta": {"gguf_sha256": expected}}
            # Asked under another name (MODEL_VERSION other than the alias), the server still serves its one model.
            assert client.served.identity("my-judge")["meta"] == {"gguf_sha256": expected}
            body = {"model": "judge", "messages": [{"role": "user", "content": "x"}]}
            assert client.request_key(body, "v", 0) != old_key(body, "v", 0)
        finally:
            client.close()


def test_a_listing_that_quotes_the_key_is_redacted_before_it_keys_or_reaches_the_cache_file(tmp_path, server, make_client):
    from capjudge.judges.types import ChatRequest

    key = "sk-live-0123456789abcdef"
    server.model_listing = [{"id": "test-judge", "meta": {"echo": f"Bearer {key}", "gguf_sha256": "c" * 64}}]
    client = make_client(server, api_key=key, cache_path=tmp_path / "cache.sqlite")
    assert client.served.identity("test-judge")["meta"]["echo"] == "Bearer [REDACTED]"
    assert client.judge(ChatRequest(parts=("judge this",)), lambda reply: reply.content, judge_version="v").ok
    client.close()
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("cache.sqlite*"))
    assert b"gguf_sha256" in stored and key.encode() not in stored  # the identity is recorded, the key is not

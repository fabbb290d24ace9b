"""Secrets at the edges (issue 25, items 4 and 5): redaction never changes a score, a placeholder key rewrites
nothing, and credentials carried by the base URL are never recorded or printed.

Real HTTP against the test server (tests/support/openai_server.py), the real G-VEval judge and parser, the real reply
cache, and the real `capjudge judge` command as a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.gveval.judge import GVEvalJudge
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_JUDGE_MODEL, run_capjudge_cli
from tests.support.openai_server import OpenAITestServer, tokens_of, with_logprobs

REFERENCES = ["A dog runs across a park.", "A brown dog plays fetch."]
SCORES = "The Accuracy score is α80α.\nThe Completeness score is β70β.\nThe Conciseness score is ψ60ψ.\nThe Relevance score is δ50δ."
# The accuracy number's alternatives: 80 and 90, equally likely. Expected value 85; the written value is 80.
EXPECTED_ACCURACY = 85.0


def gveval_reply(prefix: str):
    """A G-VEval reply starting with `prefix`, every token with logprobs, the accuracy number uncertain."""
    content = prefix + SCORES
    # The accuracy's own token, the first "80" after the prefix: a random key in the prefix may hold one too
    # (1 key in 60 did: the uncertainty went on the key's token and the score read 80, not 85).
    tokens = tokens_of(content)
    starts = [sum(len(token) for token in tokens[:index]) for index in range(len(tokens))]
    number_index = next(index for index, token in enumerate(tokens) if token == "80" and starts[index] >= len(prefix))
    return with_logprobs(content, {number_index: [("80", math.log(0.5)), ("90", math.log(0.5))]})


def judge_with(server: OpenAITestServer, key: str, cache: Path):
    client = JudgeClient(JudgeConfig(base_url=server.base_url, api_key=key, model=TEST_JUDGE_MODEL, cache_path=cache,
                                     max_attempts=1))
    try:
        return GVEvalJudge(client, mode="references").judge("A dog runs.", references=REFERENCES)
    finally:
        client.close()


def cache_bytes(cache: Path) -> bytes:
    return b"".join(path.read_bytes() for path in cache.parent.glob(cache.name + "*"))


@pytest.mark.parametrize("placeholder", ["none", "EMPTY", "not-needed"])
def test_a_placeholder_key_rewrites_nothing_and_the_reply_is_scored_from_its_logprobs(placeholder, tmp_path):
    """OPENAI_API_KEY=none / EMPTY (vLLM) / not-needed, common for local servers, appears in replies as a word:
    the reply must be scored from its logprobs and kept as it was, not "redacted" into text scoring."""
    reply = gveval_reply(f"The clip shows {placeholder} of the listed objects missing. ")
    with OpenAITestServer(lambda body: reply) as server:
        result = judge_with(server, placeholder, tmp_path / "cache.sqlite")
    assert result.judged, result.failure
    assert result.fallback_reason is None  # not `no_logprobs`: the backend did return them
    assert result.accuracy == pytest.approx(EXPECTED_ACCURACY)
    assert result.raw_reply == reply.content and "[REDACTED]" not in result.raw_reply


def test_an_echoed_key_is_redacted_where_stored_but_the_score_is_the_reply_as_received(tmp_path):
    """A server that quotes a real key in its reply: the key reaches neither the result's text nor the cache,
    the score is the one its logprobs give (as if the key were not there), and a rerun from the cache — the
    redacted copy, its logprobs re-spelled around the redaction — gives the very same scores."""
    key = f"sk-capjudge-EDGE-{secrets.token_hex(12)}"
    cache = tmp_path / "cache.sqlite"
    with OpenAITestServer(lambda body: gveval_reply(f"(authorised as {key}) ")) as server:
        first = judge_with(server, key, cache)
        rerun = judge_with(server, key, cache)
        assert len(server.log) == 1  # the rerun was answered by the cache
    assert first.judged and first.fallback_reason is None
    assert first.accuracy == pytest.approx(EXPECTED_ACCURACY)
    assert key not in first.raw_reply and first.raw_reply.startswith("(authorised as [REDACTED]) ")
    assert key.encode() not in cache_bytes(cache) and b"[REDACTED]" in cache_bytes(cache)
    assert rerun.scores() == first.scores() and rerun.fallback_reason is None
    assert rerun.raw_reply == first.raw_reply


def test_a_redacted_reply_keeps_its_logprobs_spelling_the_redacted_text():
    """The stored copy of a reply: tokens re-spelled so that they spell the redacted content, every logprob and
    alternative kept, the credential in no token (whole or split over several)."""
    from capjudge.judges.client.redaction import Redactor
    from capjudge.judges.client.wire import reply_from_completion_dict

    key = f"sk-capjudge-EDGE-{secrets.token_hex(12)}"
    body = {"model": "m", "logprobs": True, "top_logprobs": 2}
    received = reply_from_completion_dict(OpenAITestServer._completion(body, gveval_reply(f"key {key} and {key}! ")))
    stored = Redactor([(key, "[REDACTED]")]).reply(received)
    assert stored.content == received.content.replace(key, "[REDACTED]")
    assert "".join(token.token for token in stored.logprobs) == stored.content
    assert [token.logprob for token in stored.logprobs] == [token.logprob for token in received.logprobs]
    assert all(key not in token.token and all(key not in alt for alt, _ in token.top) for token in stored.logprobs)
    assert received.content.count(key) == 2  # what was scored is untouched


def test_the_redaction_rule_for_keys_and_url_credentials():
    """Which credentials rewrite text: real-looking keys and everything a URL carries; placeholders never."""
    from capjudge.judges.client.redaction import Redactor

    url = "https://proxyuser:hunter2@proxy.example/v1?api-key=QUERYTOKEN123456&api-version=2024-10-21"
    config = JudgeConfig.from_env({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-real-0123456789abcdef"})
    assert config.endpoint_label == "https://proxy.example/v1?api-version=2024-10-21"
    redact = Redactor.for_config(config)
    message = f"connect to {url}/chat/completions failed for sk-real-0123456789abcdef (token QUERYTOKEN123456)"
    assert redact(message) == ("connect to https://proxy.example/v1?api-key=[REDACTED]&api-version=2024-10-21"
                               "/chat/completions failed for [REDACTED] (token [REDACTED])")
    for placeholder in ("none", "EMPTY", "not-needed", "sk-1234"):
        assert Redactor.for_config(JudgeConfig(base_url="http://127.0.0.1:1/v1", api_key=placeholder))(
            "none of it is EMPTY, not-needed or sk-1234") == "none of it is EMPTY, not-needed or sk-1234"
    azure = JudgeConfig(api_type="azure", azure_endpoint="https://r.openai.azure.com/?sig=abc&key=def", api_key="k" * 32)
    assert azure.endpoint_label == "azure:https://r.openai.azure.com/"
    assert "hunter2" not in repr(config) and "QUERYTOKEN" not in repr(config)


# ---------------------------------------------------------------------------------------------------------
# Credentials in OPENAI_BASE_URL, through the real command

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "anycap_style_demo"


def run_judge(tmp_path: Path, base_url: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test-key", "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    command = [sys.executable, "-m", "capjudge.tasks.cli", "judge", "--captions", str(CAPTIONS), "--task", TASK,
               "--out", str(out)]
    return run_capjudge_cli(command[3:], env=env, cwd=REPO_ROOT, timeout=600)


@pytest.mark.slow
def test_userinfo_in_the_base_url_is_in_no_record_report_or_message(tmp_path):
    password = f"pw-{secrets.token_hex(8)}"
    with OpenAITestServer() as server:
        host = server.base_url.split("//", 1)[1]
        run = run_judge(tmp_path, f"http://capuser:{password}@{host}", tmp_path / "out")
        assert run.returncode == 0, run.stderr[-3000:]
        assert len(server.log) > 0  # judged through the URL with credentials
    report = run_capjudge_cli(["report", str(tmp_path / "out"), "--out",
                               str(tmp_path / "report")], env=dict(os.environ), cwd=REPO_ROOT, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    (samples,) = list((tmp_path / "out").rglob(f"*_samples_{TASK}.jsonl"))
    endpoints = {json.loads(line)["judged"]["judge"]["endpoint"] for line in samples.read_text(encoding="utf-8").splitlines()}
    assert endpoints == {server.base_url}
    for text in (run.stdout, run.stderr, report.stdout, report.stderr):
        assert password not in text and "capuser" not in text
    for path in [*(tmp_path / "out").rglob("*"), *(tmp_path / "report").rglob("*")]:
        if path.is_file():
            assert password.encode() not in path.read_bytes() and b"capuser" not in path.read_bytes(), path


@pytest.mark.slow
def test_the_pre_flight_error_names_the_endpoint_without_its_credentials(tmp_path):
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    password = f"pw-{secrets.token_hex(8)}"
    run = run_judge(tmp_path, f"http://capuser:{password}@127.0.0.1:{port}/v1?api-key=QUERY{password}", tmp_path / "out")
    assert run.returncode == 2
    assert f"http://127.0.0.1:{port}/v1" in run.stderr and "pre-flight" in run.stderr
    assert password not in run.stdout + run.stderr and "capuser" not in run.stdout + run.stderr

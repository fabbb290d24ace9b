"""One budget for the whole job: CAPJUDGE_MAX_CONCURRENCY, CAPJUDGE_RPM and CAPJUDGE_TPM are totals for all
processes of a run on a machine, and the API's rate-limit headers pace every process.

Real processes (two `python -c` judges sharing a cache folder, hence a budget folder) against the test server,
which counts what arrives, enforces the limits itself (429 above them) and sends OpenAI's x-ratelimit-*
headers. The per-minute window is shortened (CAPJUDGE_RATE_WINDOW_SECONDS, and the server's --rate-window)
so a test takes seconds; the rule is the same at 60 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.client.rate_limits import (
    RateLimitHeaderError,
    image_tokens,
    parse_duration,
    read_rate_limit_headers,
)
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEXT_JUDGE_SCRIPT
from tests.support.openai_server import Fault, OpenAITestServer
from tests.support.warm_launch import warm_start
from capjudge.judges.types import ChatRequest



def _judges(server, tmp_path: Path, counts: tuple[int, ...], words: int = 20, max_tokens: int = 10,
            shared_budget: bool = True, **env: str) -> list[dict]:
    """Start one judging process per count at once (sharing tmp_path's cache folder, hence one budget, unless
    `shared_budget` is False) and wait for all; each request is a prompt of `words` words asking for at most
    `max_tokens`."""
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENAI_BASE_URL": server.base_url,
                   "OPENAI_API_KEY": "sk-test", **env}
    # Warm children (tests/support/warm_launch.py): real processes of their own, without ~2 s of imports each.
    processes = [
        warm_start("code", [TEXT_JUDGE_SCRIPT, str(n), str(1000 * k), str(words), str(max_tokens)], cwd=REPO_ROOT,
                   env={**environment, "CAPJUDGE_CACHE": str(tmp_path / ("cache" if shared_budget else f"cache-{k}") / "cache.sqlite")})
        for k, n in enumerate(counts)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({r["pid"] for r in results}) == len(counts)  # really separate processes
    return results


def _max_in_window(arrivals: list[float], window: float) -> int:
    arrivals = sorted(arrivals)
    best, start = 0, 0
    for end, at in enumerate(arrivals):
        while arrivals[start] <= at - window:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_max_concurrency_is_a_total_for_all_processes(tmp_path):
    with OpenAITestServer(latency=0.1) as server:
        results = _judges(server, tmp_path, (30, 30), CAPJUDGE_MAX_CONCURRENCY="4")
        assert [r["judged"] for r in results] == [30, 30]
        assert len(server.log) == 60
        assert server.max_in_flight <= 4  # two processes, each allowed 4 on its own: 4 in all
        assert server.max_in_flight >= 3  # and the budget is used, not serialised


def test_rpm_is_a_total_for_all_processes_and_the_server_never_sees_more(tmp_path):
    window, rpm = 2.0, 12
    with OpenAITestServer(latency=0.02) as server:
        server.rpm_limit, server.rate_window = rpm, window  # the server enforces the same limit: a 429 = overrun
        results = _judges(server, tmp_path, (18, 18), CAPJUDGE_RPM=str(rpm), CAPJUDGE_RATE_WINDOW_SECONDS=str(window),
                          CAPJUDGE_MAX_CONCURRENCY="8")
        assert [r["judged"] for r in results] == [18, 18]
        arrivals = [entry.arrived for entry in server.log if entry.answer == "reply"]
        assert len(arrivals) == 36 and server.rate_limited == 0
        assert _max_in_window(arrivals, window) <= rpm
        assert max(arrivals) - min(arrivals) >= 2 * window * 0.9  # 36 requests at 12 per window: 3 windows


def test_tpm_is_a_total_for_all_processes(tmp_path):
    window = 2.0
    with OpenAITestServer() as server:
        # Each request: ~32 words of prompt (server count) + max_tokens 10; the client estimates more
        # (4 characters per token), then settles each request to the usage the server reports.
        server.tpm_limit, server.rate_window = 400, window
        results = _judges(server, tmp_path, (12, 12), CAPJUDGE_TPM="400", CAPJUDGE_RATE_WINDOW_SECONDS=str(window))
        assert [r["judged"] for r in results] == [12, 12]
        assert server.rate_limited == 0


def test_the_apis_headers_pace_every_process_without_a_configured_limit(tmp_path):
    window, rpm = 2.0, 10
    with OpenAITestServer() as server:
        server.rpm_limit, server.rate_window = rpm, window
        results = _judges(server, tmp_path, (15, 15), CAPJUDGE_RATE_WINDOW_SECONDS=str(window),
                          CAPJUDGE_MAX_CONCURRENCY="4")
        assert [r["judged"] for r in results] == [15, 15]  # every item judged, none lost to the 429s
        judged = [entry.arrived for entry in server.log if entry.answer == "reply"]
        assert _max_in_window(judged, window) <= rpm
        # Before the first headers arrive the processes know no limit; after, they pace: few 429s in all.
        assert server.rate_limited <= 8, server.rate_limited


def test_bad_limits_are_one_clear_error():
    for name in ("CAPJUDGE_RPM", "CAPJUDGE_TPM"):
        with pytest.raises(ConfigError, match=f"{name} must be at least 1"):
            JudgeConfig.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", name: "0"})
        with pytest.raises(ConfigError, match=f"{name} must be a number"):
            JudgeConfig.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", name: "many"})


def test_rate_limit_headers_are_read_and_an_unreadable_one_is_an_error():
    state = read_rate_limit_headers({
        "X-RateLimit-Limit-Requests": "500", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s",
        "x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "1200", "x-ratelimit-reset-tokens": "20ms",
    })
    assert (state.limit_requests, state.remaining_requests, state.reset_requests) == (500, 0, 360.0)
    assert (state.limit_tokens, state.remaining_tokens, state.reset_tokens) == (30000, 1200, 0.02)
    assert (state.used_requests, state.used_tokens) == (500, 28800)  # what the API has counted: limit - remaining
    # A named limit is paced by the shared window from the API's count (issue 29), whatever `reset` means;
    # the same exhausted window counted down without a named limit (Azure) pauses for its reset.
    assert state.wait_before_next(1000) == 0.0
    assert read_rate_limit_headers({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}).wait_before_next(1000) == 360.0
    assert read_rate_limit_headers({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "1.5s"}).wait_before_next(50) == 1.5
    assert read_rate_limit_headers({"x-ratelimit-remaining-requests": "3", "retry-after-ms": "250"}).reset_requests == 0.25  # Azure
    assert not read_rate_limit_headers({"content-type": "application/json"}).known
    assert parse_duration("1m30.5s") == 90.5 and parse_duration("2h") == 7200.0
    with pytest.raises(RateLimitHeaderError, match="x-ratelimit-reset-requests.*soon"):
        read_rate_limit_headers({"x-ratelimit-reset-requests": "soon"})
    with pytest.raises(RateLimitHeaderError, match="x-ratelimit-remaining-tokens"):
        read_rate_limit_headers({"x-ratelimit-remaining-tokens": "lots"})


def test_image_tokens_follow_openais_documented_examples():
    assert image_tokens(1024, 1024, "high") == 765  # 768 x 768: 4 tiles
    assert image_tokens(2048, 4096, "high") == 1105  # 1024 x 2048, then 768 x 1536: 6 tiles
    assert image_tokens(4096, 8192, "low") == 85
    assert image_tokens(1536, 512, "high") == 595  # G-VEval's 3-frame strip: 3 x 1 tiles
    assert image_tokens(1280, 720, "auto") == 1105  # one 720p AnyCap frame: 3 x 2 tiles


def _tokens_in(charged: list[tuple[float, int]], start: float, end: float) -> int:
    return sum(tokens for at, tokens in charged if start <= at < end)


@pytest.mark.parametrize("reset_meaning", ["oldest", "empty"])
def test_header_learned_token_pacing_fills_the_token_limit_whatever_reset_means(tmp_path, reset_meaning):
    """Issue 29: with no CAPJUDGE_TPM, two processes learn the token limit from the headers alone and keep the
    server's sliding window nearly full after the first window, with (nearly) no 429s, whether the server's
    `x-ratelimit-reset-tokens` means "until the oldest entry leaves" or "until the window is empty" (the
    earlier pacing paused for `reset` whenever the next request did not fit: 0.48 of the limit with the
    second meaning, 0.84-0.94 with the first at a realistic latency)."""
    window, per_window = 5.0, 20
    with OpenAITestServer(latency=0.25) as server:
        # Charged as OpenAI documents (4 characters a token, max_tokens reserved): about 32 + 40 tokens a request
        # (40: room for the whole reply, as a real API never answers past max_tokens).
        server.token_charge, server.reset_meaning, server.rate_window = "openai", reset_meaning, window
        server.tpm_limit = limit = 72 * per_window
        results = _judges(server, tmp_path, (35, 35), max_tokens=40, CAPJUDGE_RATE_WINDOW_SECONDS=str(window),
                          CAPJUDGE_MAX_CONCURRENCY="8")
        assert [r["judged"] for r in results] == [35, 35]
        charged = sorted(server.charged)
    assert all(70 <= tokens <= 74 for _, tokens in charged), "the figure means requests of about 72 tokens"
    # At most one 429 in ~70 requests: at this 5 s window the budget's guard against send delays is 0.1 s, which
    # a fully loaded 2-core test machine can exceed once (at 60 s it is 0.65 s: 0 429s in results/benchmarks.md).
    assert server.rate_limited <= 1
    start = charged[0][0]
    assert charged[-1][0] >= start + 3 * window, "the run must cover two full windows after the first"
    steady = _tokens_in(charged, start + window, start + 3 * window) / (2 * limit)
    assert steady >= 0.92, f"steady state used {steady:.3f} of the token limit"
    busiest = max(_tokens_in(charged, at, at + window) for at, _ in charged)
    assert busiest <= limit  # and never more than the limit in any window


@pytest.mark.parametrize("names_its_limit", [True, False])
def test_a_429_that_names_its_limit_holds_back_only_its_own_request(server, make_client, names_its_limit):
    """A 429 with the API's x-ratelimit-* headers is paced like any reply (the window waits as long as the
    limit requires, here not at all): its Retry-After, which a server may derive from "until the window is
    empty", holds back only the request that met it, and the others go on meanwhile. A 429 with no named
    limit still pauses every request for its Retry-After. (CI met the first case on a loaded machine: one
    429 paused both processes for a whole window and the run used 0.70 of its token limit.)"""
    retry_after = 2.0
    headers = (("x-ratelimit-limit-tokens", "1000000"), ("x-ratelimit-remaining-tokens", "999000"),
               ("x-ratelimit-reset-tokens", "2s")) if names_its_limit else ()
    server.latency = 0.1
    server.script(Fault("429", retry_after=retry_after, headers=headers))
    client = make_client(server, max_concurrency=2)  # the retry's own wait is recorded, not slept
    requests = [ChatRequest(parts=(f"item {i}: rate this caption.",), params={"temperature": 0}) for i in range(40)]
    outcomes = client.judge_many(requests, lambda reply: reply.content, judge_version="test-judge/1")
    assert all(outcome.ok for outcome in outcomes)
    rejected_at = next(entry.arrived for entry in server.log if entry.answer == "429")
    # Requests already admitted when the 429 came arrive within a latency; after that, the pause decides.
    during = [entry for entry in server.log if rejected_at + 0.5 <= entry.arrived < rejected_at + retry_after - 0.2]
    if names_its_limit:
        assert len(during) >= 5, f"{len(during)} requests went during the 429's Retry-After"
    else:
        assert during == [], "a 429 naming no limit pauses every request for its Retry-After"


def test_the_apis_count_is_the_authority_over_usage_this_machine_does_not_see(tmp_path):
    """Issue 29: two judges that share no budget (two machines, or two jobs on one key) each see the other only
    through the API's `remaining`; taking `limit - remaining` as the authority keeps both under the limit
    (without it, each would pace to the whole limit and half the requests would meet a 429)."""
    window, per_window = 4.0, 20
    with OpenAITestServer(latency=0.1) as server:
        server.token_charge, server.rate_window = "openai", window
        server.tpm_limit = limit = 72 * per_window
        results = _judges(server, tmp_path, (40, 40), max_tokens=40, shared_budget=False,
                          CAPJUDGE_RATE_WINDOW_SECONDS=str(window), CAPJUDGE_MAX_CONCURRENCY="4")
        assert [r["judged"] for r in results] == [40, 40]
        charged = sorted(server.charged)
        requests = len(server.log)
    # Before the first replies neither knows a limit; after, each counts the other's use: 1 429 in ~80 here,
    # where pacing that ignored the API's count met 6.
    assert server.rate_limited <= 2, (server.rate_limited, requests)
    busiest = max(_tokens_in(charged, at, at + window) for at, _ in charged)
    assert busiest <= limit
    start = charged[0][0]
    assert _tokens_in(charged, start + window, start + 2 * window) >= 0.8 * limit  # and the limit is still used

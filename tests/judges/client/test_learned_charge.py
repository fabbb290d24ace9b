"""Issue 40: the pacer learns the API's own charge per request from its rate-limit headers.

The test server's rate limiter charges a set ratio of capjudge's own estimate (`charge_scale`, with its prompt
count as OpenAI documents it and, for a request without `max_tokens`, a reply reservation of its own choosing:
300, where capjudge reserves 512), apart from the usage it reports. Real judging processes (tests/support/warm_launch.py)
share one budget folder; the learned ratio is read back from it. The throughput these reach (>= 0.95 of the
token limit) is a benchmark figure (tests/benchmarks/run.py, `learned_charge`), not asserted here: here the
learned charge must converge to the server's, and the load sent must never exceed the limit in any window by
more than one request.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from capjudge.judges.client.budget import Limits, MachineBudget
from capjudge.judges.client.charge import (
    RATIO_KEYS,
    RATIO_MAX,
    RATIO_MIN,
    SAMPLES,
    learned_ratio,
    ratio_in_force,
    read_learned_charge,
)
from capjudge.judges.client.rate_limits import RateLimitHeaderError, estimate_tokens, read_rate_limit_headers, requested_tokens
from capjudge.judges.types import ChatRequest
from tests.support.openai_server import Fault, OpenAITestServer
from tests.judges.client.test_budget import _judges

SERVER_DEFAULT_REPLY = 300  # what the server reserves for a reply when the request gives no max_tokens
WORDS, MAX_TOKENS = 20, 40


def _request(max_tokens: int, item: int = 1000) -> ChatRequest:
    """A request as tests/support/harness_runs.py's TEXT_JUDGE_SCRIPT builds it."""
    params = {"max_tokens": max_tokens} if max_tokens > 0 else {}
    return ChatRequest(parts=(f"item {item}: judge this caption " + "word " * WORDS,), params=params)


def _charging(server: OpenAITestServer, target: float, max_tokens: int) -> tuple[float, int]:
    """Set the server to charge `target` times capjudge's estimate for these requests: (the scale, the charge)."""
    server.token_charge, server.default_reply_charge, server.charge_scale = "openai", SERVER_DEFAULT_REPLY, 1.0
    request = _request(max_tokens)
    estimate = estimate_tokens(request).total
    scale = target * estimate / server.limiter_charge(request.body("test-judge"))
    server.charge_scale = scale
    return scale, server.limiter_charge(request.body("test-judge"))


def _budget_folder(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "cache").glob("budget-*")
    return folder


def _busiest(entries: list[tuple[float, int]], window: float) -> int:
    entries = sorted(entries)
    return max(sum(tokens for at, tokens in entries if start <= at < start + window) for start, _ in entries)


def _samples(folder: Path) -> list[tuple[float, float]]:
    with sqlite3.connect(folder / "window.sqlite") as db:
        return db.execute("SELECT at, ratio FROM charge_samples ORDER BY at").fetchall()


# The 2 x 2 x 2 cases of charge (30% below / above the estimate), max_tokens (given / not: the server's own
# reservation) and processes (1 / 2); the reset meaning alternates so each meets each value of the others
# (the full 16 are the benchmark's).
CASES = [(target, max_tokens, processes, ("oldest", "empty")[(i + j + k) % 2])
         for i, target in enumerate((0.7, 1.3)) for j, max_tokens in enumerate((MAX_TOKENS, 0))
         for k, processes in enumerate((1, 2))]


@pytest.mark.parametrize("target, max_tokens, processes, reset_meaning", CASES)
def test_the_learned_charge_converges_to_the_apis(tmp_path, target, max_tokens, processes, reset_meaning):
    window, per_window, total = 4.0, 16, 56
    with OpenAITestServer(latency=0.2) as server:
        server.reset_meaning, server.rate_window = reset_meaning, window
        _, charge = _charging(server, target, max_tokens)
        server.tpm_limit = limit = charge * per_window
        counts = (total,) if processes == 1 else (total // 2, total // 2)
        results = _judges(server, tmp_path, counts, words=WORDS, max_tokens=max_tokens,
                          CAPJUDGE_RATE_WINDOW_SECONDS=str(window), CAPJUDGE_MAX_CONCURRENCY="6")
        assert sum(r["judged"] for r in results) == total
        charged, refused = list(server.charged), list(server.refused)
    # Every request was charged about `charge` (the items' numbers differ by a digit at most).
    assert all(abs(tokens - charge) <= 0.03 * charge + 1 for _, tokens in charged)
    learned = read_learned_charge(_budget_folder(tmp_path))
    assert learned is not None and learned.samples >= SAMPLES
    assert learned.ratio == pytest.approx(target, rel=0.05), (learned, target)
    # The load sent (refused requests included, at what they would have cost) never exceeds the limit in any
    # window by more than one request; 429s are rare (the benchmark's figure is the share over 60 s windows).
    assert _busiest(charged + refused, window) <= limit + charge
    assert server.rate_limited <= 2, server.rate_limited


def test_a_sudden_change_of_the_charge_is_followed_within_one_window(tmp_path):
    """The server's charge goes from 30% below the estimate to 30% above it mid-run (the limit then fits 8.6
    requests a window instead of 16). The first request sent at the old reservation meets a full window: its 429
    says what it would have cost (OpenAI's wording, "Requested N"), and that request's own ratio is in force at
    once, for a window; the replies' samples are whole windows' averages, so their ratio has moved all the way
    one window after the change. So the change costs the one 429 no client can avoid (one per process with a
    request under way), and the load sent never exceeds the limit by more than one request. (Before the 429's
    count was read: 4 429s in a row and 3 requests over the limit, the same run.)"""
    window, per_window = 4.0, 16
    with OpenAITestServer(latency=0.2) as server:
        server.reset_meaning, server.rate_window = "oldest", window
        low_scale, low = _charging(server, 0.7, MAX_TOKENS)
        high_scale, high = _charging(server, 1.3, MAX_TOKENS)
        server.charge_scale = low_scale
        server.tpm_limit = limit = low * per_window
        changed_at: list[float] = []
        learned_before: list = []

        def change_when_learned() -> None:
            # After the first ratio has been learned at the low charge (two windows in), the charge rises.
            while len(server.charged) < 2 * per_window:
                threading.Event().wait(0.05)
            learned_before.append(read_learned_charge(_budget_folder(tmp_path)))
            with server._lock:
                server.charge_scale = high_scale
                changed_at.append(max(at for at, _ in server.charged))
        changer = threading.Thread(target=change_when_learned, daemon=True)
        changer.start()
        # ~2 windows at the low charge, then ~2.3 at the high one.
        results = _judges(server, tmp_path, (30, 30), words=WORDS, max_tokens=MAX_TOKENS,
                          CAPJUDGE_RATE_WINDOW_SECONDS=str(window), CAPJUDGE_MAX_CONCURRENCY="6")
        changer.join(5)
        assert [r["judged"] for r in results] == [30, 30]
        charged, refused = list(server.charged), list(server.refused)
    (change,) = changed_at
    # Before the change a sample may count one request too many (sent by this machine before the one replied to,
    # admitted by the server after it; the median of 7 takes the middle one): 0.7 x 16/17 = 0.66 at the 16
    # requests a window holds, seen once in a loaded suite run. So within one request's share of the window.
    low_tolerance = 1 / per_window
    assert learned_before[0].ratio == pytest.approx(0.7, rel=low_tolerance)
    samples = _samples(_budget_folder(tmp_path))

    def in_force(at: float) -> float | None:  # the ratio the budget reserved by at time `at`
        return learned_ratio([ratio for sampled, ratio in reversed(samples) if sampled <= at][:SAMPLES])

    trace = [(round(at - change, 2), round(ratio, 2)) for at, ratio in samples if at > change - 1]  # for a failure
    assert in_force(change) == pytest.approx(0.7, rel=low_tolerance), trace
    # One window after the change, and the FAST replies' spacing (a quarter second each) with some slack.
    settled = change + window + 1.5
    assert samples[-1][0] > settled + window, "the run must go on a window past that"
    assert in_force(settled) == pytest.approx(1.3, rel=0.05), trace
    assert in_force(samples[-1][0]) == pytest.approx(1.3, rel=0.05), trace
    # The refusal's own ratio: the new charge, from the first 429 after the change.
    refusals = [round(at - change, 2) for at, _ in refused]
    with sqlite3.connect(_budget_folder(tmp_path) / "window.sqlite") as db:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('request_ratio', 'request_at')").fetchall())
    assert meta["request_ratio"] == pytest.approx(1.3, rel=0.05), (meta, refusals)
    assert 0 <= meta["request_at"] - change < window, (meta, refusals)
    # One 429 per process at most (each may have had one request under way at the old reservation), none after
    # the change's first window; the load sent (429s included) never over the limit by more than one request.
    assert server.rate_limited <= 2 and all(at - change < window for at, _ in refused), refusals
    assert _busiest(charged + refused, window) <= limit + high, refusals


# -- hostile headers --------------------------------------------------------------------------------------


def test_absurd_counts_never_make_the_learned_charge_zero_negative_or_unbounded(tmp_path):
    """A window file fed what a broken or hostile server's headers could say: a window emptier than this
    machine's own request, more than any limit, a limit that changes on every reply. Every sample and the ratio
    stay within [RATIO_MIN, RATIO_MAX]; one absurd sample among sound ones does not move the median."""
    budget = MachineBudget(tmp_path / "budget", Limits(4, tpm=10_000, window=60.0))
    tickets = [budget.admit(lambda: 100) for _ in range(5)]  # 500 tokens of estimates in the window
    assert all(isinstance(ticket, int) for ticket in tickets)
    replies = iter(range(1, 1000))

    def learned_after(*used: int) -> float:
        for value in used:  # each a reply a millisecond after the last, all with the 5 requests in its window
            budget.reconcile(time.time() + next(replies) / 1000, None, value)
        learned = read_learned_charge(tmp_path / "budget")
        assert learned is not None
        return learned.ratio

    assert read_learned_charge(tmp_path / "budget") is None  # nothing learned yet
    assert learned_after(*[600] * SAMPLES) == pytest.approx(1.2)  # sound: 600 counted for 500 estimated
    assert learned_after(2**53) == pytest.approx(1.2)  # one huge count: the median holds
    assert learned_after(*[2**53] * SAMPLES) == RATIO_MAX  # a server that always says so: bounded
    assert learned_after(*[1] * SAMPLES) == RATIO_MIN  # nearly nothing counted: bounded, never 0
    assert learned_after(*[0] * SAMPLES) == RATIO_MIN  # an empty window is no sample: the ratio stays
    # A limit that jumps between replies: every other count is absurd, high or low; the sound ones decide.
    assert learned_after(*[600, 100_000, 600, 3, 600, 9_000_000, 600]) == pytest.approx(1.2)
    ratios = [ratio for _, ratio in _samples(tmp_path / "budget")]
    assert all(RATIO_MIN <= ratio <= RATIO_MAX and math.isfinite(ratio) for ratio in ratios)
    # A stored ratio edited out of range reads back clamped; one that is no number reads as none.
    with sqlite3.connect(tmp_path / "budget" / "window.sqlite") as db:
        db.execute("UPDATE meta SET value = -5 WHERE key = 'charge_ratio'")
    assert read_learned_charge(tmp_path / "budget").ratio == RATIO_MIN
    with sqlite3.connect(tmp_path / "budget" / "window.sqlite") as db:
        db.execute("UPDATE meta SET value = 'lots' WHERE key = 'charge_ratio'")
    assert read_learned_charge(tmp_path / "budget") is None
    budget.close()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "9" * 40])
def test_a_count_that_is_no_count_is_an_unreadable_header(value):
    with pytest.raises(RateLimitHeaderError, match=f"x-ratelimit-remaining-tokens.*{value[:8]}"):
        read_rate_limit_headers({"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": value})
    with pytest.raises(RateLimitHeaderError, match="x-ratelimit-reset-tokens"):
        read_rate_limit_headers({"x-ratelimit-reset-tokens": value if value[0] != "9" else "nan"})


def test_429s_with_absurd_headers_leave_the_charge_bounded_and_the_run_judged(server, make_client, tmp_path):
    """Through the client: 429s whose headers name a negative limit, a negative `remaining` (issue 46: no count,
    ignored and said once, where it used to fill the window after every reply) or a count far above this
    machine's requests are paced by or ignored, every item is judged, and the learned charge stays bounded."""
    server.latency = 0.02
    absurd = [(("x-ratelimit-limit-tokens", "900000000000"), ("x-ratelimit-remaining-tokens", "0")),
              (("x-ratelimit-limit-tokens", "1000000"), ("x-ratelimit-remaining-tokens", "-900000000000")),
              (("x-ratelimit-limit-tokens", "-5"), ("x-ratelimit-remaining-tokens", "10")),
              (("x-ratelimit-limit-tokens", "1000000"), ("x-ratelimit-remaining-tokens", "1000000"))]
    # A 2 s window: a count above the limit fills the window until it passes (the API's count is the authority).
    client = make_client(server, max_concurrency=2, tpm=1_000_000, rate_window=2.0, max_attempts=10)
    requests = [ChatRequest(parts=(f"item {i}: rate this caption.",), params={"max_tokens": 20}) for i in range(15)]
    # Three judged first, so the window holds estimates the 429s' counts are set against.
    outcomes = client.judge_many(requests[:3], lambda reply: reply.content, judge_version="test-judge/1")
    server.script(*[Fault("429", retry_after=0.01, headers=headers) for headers in absurd for _ in range(3)])
    outcomes += client.judge_many(requests[3:], lambda reply: reply.content, judge_version="test-judge/1")
    assert all(outcome.ok for outcome in outcomes)
    assert client.budget.tpm == 1_000_000  # the negative limit was not taken
    # The one count taken (9e11 tokens against a few requests' estimates) is held at the bound; the others are
    # no samples (a negative remaining; a negative limit; a window said to be empty).
    learned = read_learned_charge(client.budget.folder)
    assert learned is not None and learned.ratio == RATIO_MAX


# -- what a 429 says it would have charged ----------------------------------------------------------------

_TPM_429 = ("Rate limit reached for test-judge in organization org-test on tokens per min (TPM): Limit 10000, "
            "Used 9800, Requested {}. Please try again in 1.2s. Visit https://platform.openai.com/account/rate-limits")
_TOKEN_HEADERS = (("x-ratelimit-limit-tokens", "10000"), ("x-ratelimit-remaining-tokens", "200"),
                  ("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "50"))


@pytest.mark.parametrize("message, headers, charged", [
    (_TPM_429.format(300), _TOKEN_HEADERS, 300),  # OpenAI's wording: the request's own charge
    ("Rate limit reached", _TOKEN_HEADERS, 201),  # no counts named: it cost more than the 200 left (a bound)
    (_TPM_429.format(0), _TOKEN_HEADERS, 201),  # no charge at all is no charge: the bound
    (_TPM_429.format("9" * 17), _TOKEN_HEADERS, 201),  # beyond any limit: the bound
    (_TPM_429.format(10**12), _TOKEN_HEADERS, "max"),  # absurd but a count: held at the bound of the range
    (_TPM_429.format("3OO"), _TOKEN_HEADERS, 201),  # not a number
    # Refused on requests, not tokens: nothing is learned of the charge.
    ("Rate limit reached for test-judge on requests per min (RPM): Limit 100, Used 100, Requested 1.",
     (("x-ratelimit-limit-tokens", "10000"), ("x-ratelimit-remaining-tokens", "5000"),
      ("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "0")), None),
    # The message's count stands where the headers name no token limit (it is the API's own statement).
    (_TPM_429.format(300), (("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "50")), 300),
    # Refused on a limit per day, or by a burst limiter with most of the minute's tokens left: no bound.
    ("Rate limit reached for test-judge in organization org-test on requests per day (RPD): Limit 500, Used 500, "
     "Requested 1.", (("x-ratelimit-limit-tokens", "10000"), ("x-ratelimit-remaining-tokens", "200"),
                      ("x-ratelimit-limit-requests", "100"), ("x-ratelimit-remaining-requests", "50")), None),
    ("Rate limit reached", (("x-ratelimit-limit-tokens", "10000"), ("x-ratelimit-remaining-tokens", "9000")), None),
    ("Rate limit reached", (("x-ratelimit-limit-tokens", "10000"), ("x-ratelimit-remaining-tokens", "10000")), None),
])
def test_a_429_says_what_the_request_would_have_cost(server, make_client, message, headers, charged):
    """A 429 is the quickest signal of a rise of the charge: OpenAI's message names what the refused request
    would have been charged (`Requested`), one request's own ratio, in force at once for a window; one that
    names nothing still bounds it (more than the `remaining` its headers showed). Counts that are no counts, a
    refusal on requests and a limit-less 429 teach nothing; the request is judged in every case."""
    window = 0.5  # the 429's count fills the window until it passes: the retry waits that long
    client = make_client(server, max_concurrency=1, tpm=1_000_000, rate_window=window, max_attempts=3)
    request = ChatRequest(parts=("item 1: rate this caption.",), params={"max_tokens": 200})
    estimate = estimate_tokens(request).total  # 211
    server.script(Fault("429", retry_after=0.01, headers=headers, message=message))
    (outcome,) = client.judge_many([request], lambda reply: reply.content, judge_version="test-judge/1")
    assert outcome.ok and server.rate_limited == 0 and len(server.log) == 2  # the scripted 429, then the reply
    with sqlite3.connect(client.budget.folder / "window.sqlite") as db:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN (?, ?, ?)", RATIO_KEYS).fetchall())
    if charged is None:
        assert "request_ratio" not in meta, meta
    else:
        expected = RATIO_MAX if charged == "max" else charged / estimate
        assert meta["request_ratio"] == pytest.approx(expected)
        # Reserved by for one window from the refusal, then no longer (the server sent no reply headers here,
        # so there is no replies' ratio either, and nothing a later `capjudge estimate` would call learned).
        assert ratio_in_force(meta, meta["request_at"] + window * 0.9, window) == pytest.approx(expected)
        assert ratio_in_force(meta, meta["request_at"] + window * 1.1, window) is None
    assert read_learned_charge(client.budget.folder) is None


def test_a_refusals_ratio_is_what_admission_reserves_by_for_one_window(tmp_path):
    """What the budget reserves (the `sent` rows), not just what the file holds: a refusal's ratio above the
    replies' is reserved by at once, for one window, then the replies' ratio again; a later refusal of a lower
    ratio neither lowers it nor moves its time back (429s of requests sent in one order arrive in another)."""
    window = 0.5
    budget = MachineBudget(tmp_path / "budget", Limits(4, tpm=10_000_000, window=window))

    def reserved(estimate: int) -> int:
        ticket = budget.admit(lambda: estimate)
        with sqlite3.connect(tmp_path / "budget" / "window.sqlite") as db:
            return db.execute("SELECT tokens FROM sent WHERE id = ?", (ticket,)).fetchone()[0]

    assert reserved(100) == 100  # nothing learned: the estimate
    for _ in range(SAMPLES):  # replies: the API counts 1.2x the estimates in its window
        (used,) = sqlite3.connect(tmp_path / "budget" / "window.sqlite").execute("SELECT SUM(base) FROM sent").fetchone()
        budget.reconcile(time.time(), None, round(1.2 * used))
        reserved(100)
    assert reserved(100) == 120
    refused = budget.admit(lambda: 100)
    seen = time.time()
    budget.reconcile(seen, None, None, refused=refused, refused_charge=(250, 100))  # no counts: only the refusal
    assert reserved(100) == 250
    budget.reconcile(seen - 0.2, None, None, refused_charge=(150, 100))  # an earlier request's 429, arriving late
    with sqlite3.connect(tmp_path / "budget" / "window.sqlite") as db:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN (?, ?, ?)", RATIO_KEYS).fetchall())
    assert meta["request_ratio"] == 2.5 and meta["request_at"] == seen
    assert reserved(100) == 250
    time.sleep(max(0.0, seen + window - time.time()) + 0.05)
    assert reserved(100) == 120  # a window on: the replies' ratio
    assert read_learned_charge(tmp_path / "budget").ratio == pytest.approx(1.2)  # the replies' ratio alone
    budget.close()


@pytest.mark.parametrize("message, requested", [
    (_TPM_429.format(385), 385),
    ("Error code: 429 - {'error': {'message': '" + _TPM_429.format(1034) + "', 'code': 'rate_limit_exceeded'}}", 1034),
    (_TPM_429.format(385).replace("tokens per min (TPM)", "requests per min (RPM)"), None),
    ("Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 36055.", None),  # no Used: too large
    (_TPM_429.format(-5), None), ("", None), (None, None), (b"Requested 5", None),
    ("x" * 5000 + _TPM_429.format(385), None),  # read within the first 2,000 characters only
])
def test_requested_tokens_reads_only_openais_token_wording(message, requested):
    assert requested_tokens(message) == requested

"""Server faults during 200-item runs through the real judges, the real client and the test server.

Each item gets a seeded schedule of what the server answers to its 1st, 2nd, ... request (then correct
replies): bursts of 429 with Retry-After, 500/503, hangs past the 5 s timeout, reset connections, bodies cut
off mid-stream, truncated JSON, HTML instead of JSON, empty `choices`, `content: null`, refusals, a 400. The
schedule is keyed by item and request number, not by arrival order, so the outcome of every item is known in
advance however the worker threads interleave: `expected_outcome` states the client's contract (at most
`max_attempts` transport attempts per reply, at most `max_tries` replies, a 400 never retried) and the run
must match it item by item. Sleeping is recorded, not done, per item, so Retry-After can be checked.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self

import pytest
from capjudge.judges.anycap.judge import AnyCapJudge
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.gveval.judge import GVEvalJudge
from tests.support.openai_server import Fault, OpenAITestServer, Reply, rubric_responder
from tests.support.videos import make_video

N_ITEMS = 200
MAX_ATTEMPTS = 4
# Short, but not so short that an ordinary reply from the in-process server (sharing the GIL with eight
# client threads on a busy machine) could time out and throw the item off its schedule.
# The client's timeout is what turns a scheduled hang into a retry; no correct reply may ever reach it, or the
# item's request count is off by one (a 1.5 s timeout was reached once by an ordinary reply on a loaded CI
# machine: the server's and the client's threads share this process). 5 s is far above any reply's time here;
# a hang outlasts it.
TIMEOUT = 5.0
HANG_SECONDS = 10.0
MAX_HANGS = 4  # each costs a worker TIMEOUT seconds of real time
BACKOFF_MAX = 30.0
# The client's backoff and the server's Retry-After on a tenth of their defaults' scale (0.5 s first ceiling):
# the contract is the same, and a 429's Retry-After pauses every thread of the machine for real (the shared
# budget), so these set most of the test's wall time (about 45 s a run at 0.6-1.2 s, when the client's own
# waits were recorded rather than slept anyway).
BACKOFF_INITIAL = 0.05
# Each above the backoff ceiling of the first attempt (BACKOFF_INITIAL), so only a client that honours the
# Retry-After waits as long; the wait longer than the backoff ceiling has its own test below.
RETRY_AFTERS = (0.06, 0.09, 0.12)
WORKERS = 8

# Faults the client retries inside one try.
TRANSPORT_FAULTS = ("429", "500", "503", "hang", "reset", "truncated", "truncated_json", "empty_choices", "not_json")
# Replies that arrive but carry no judgment: the parser (or the client, for a refusal) rejects them and the
# client asks for another reply, up to the judge's max_tries.
EMPTY_REPLIES = ("null", "refusal")
NOT_RETRIED = "400"
OK = "ok"
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
ITEM_TAG = re.compile(r"\[item (\d{3})\]")


# ---------------------------------------------------------------------------------------------------------
# The schedule and the contract


@dataclass(frozen=True)
class Step:
    kind: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Expected:
    failure: str | None  # None: judged
    requests: int
    sleeps_after: tuple[Step, ...]  # the faults after which the client must wait before asking again


def make_schedules(seed: int, max_tries: int) -> list[tuple[Step, ...]]:
    """Per item, what the server answers to its requests in order (then OK forever)."""
    rng = random.Random(seed)
    hangs_left = MAX_HANGS

    def transport() -> Step:
        nonlocal hangs_left
        kinds = TRANSPORT_FAULTS if hangs_left else tuple(k for k in TRANSPORT_FAULTS if k != "hang")
        kind = rng.choice(kinds)
        hangs_left -= kind == "hang"
        return Step(kind, rng.choice(RETRY_AFTERS) if kind == "429" else None)

    def burst_429(length: int) -> list[Step]:
        return [Step("429", rng.choice(RETRY_AFTERS)) for _ in range(length)]

    def empty_reply() -> Step:
        return Step(rng.choice(EMPTY_REPLIES))

    scenarios: dict[str, Callable[[], list[Step]]] = {
        "clean": list,
        "transient": lambda: [transport() for _ in range(rng.randint(1, MAX_ATTEMPTS - 1))],
        "429_burst": lambda: burst_429(rng.randint(1, MAX_ATTEMPTS - 1)),
        "429_exhausted": lambda: burst_429(MAX_ATTEMPTS),
        "exhausted": lambda: [transport() for _ in range(MAX_ATTEMPTS)],
        "rejected": lambda: [Step(NOT_RETRIED)],
        "empty_then_ok": lambda: [empty_reply() for _ in range(rng.randint(1, max_tries - 1))],
        "empty_always": lambda: [empty_reply() for _ in range(max_tries)],
        "mixed": lambda: [transport(), empty_reply(), transport(), transport()],
        "late_exhausted": lambda: [empty_reply(), *(transport() for _ in range(MAX_ATTEMPTS))],
    }
    weights = {"clean": 30, "transient": 20, "429_burst": 8, "429_exhausted": 4, "exhausted": 6, "rejected": 3,
               "empty_then_ok": 10, "empty_always": 6, "mixed": 8, "late_exhausted": 5}
    names = list(scenarios)
    return [tuple(scenarios[rng.choices(names, [weights[n] for n in names])[0]]()) for _ in range(N_ITEMS)]


def expected_outcome(schedule: tuple[Step, ...], max_tries: int, empty_kind: str) -> Expected:
    """What the client promises for this schedule: transport faults retried up to MAX_ATTEMPTS per reply, a
    400 not retried, an empty reply or refusal re-asked up to max_tries, then the failure of the last one."""
    position, sleeps = 0, []
    last_failure = None
    for _ in range(max_tries):
        for attempt in range(MAX_ATTEMPTS):
            step = schedule[position] if position < len(schedule) else Step(OK)
            position += 1
            if step.kind == NOT_RETRIED:
                return Expected("request_failed", position, tuple(sleeps))
            if step.kind not in TRANSPORT_FAULTS:
                break
            if attempt == MAX_ATTEMPTS - 1:
                return Expected("request_failed", position, tuple(sleeps))
            sleeps.append(step)
        if step.kind == OK:
            return Expected(None, position, tuple(sleeps))
        last_failure = "refusal" if step.kind == "refusal" else empty_kind
    return Expected(last_failure, position, tuple(sleeps))


# ---------------------------------------------------------------------------------------------------------
# The server side: answers by item and request number; the client side: sleeps recorded per item


class ScheduledResponder:
    def __init__(self, schedules: list[tuple[Step, ...]]):
        self.schedules = schedules
        self.requests: Counter[int] = Counter()
        self.answered: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply | Fault:
        from tests.support.openai_server import prompt_text

        item = int(ITEM_TAG.search(prompt_text(body)).group(1))
        with self._lock:
            number = self.requests[item]
            self.requests[item] += 1
        schedule = self.schedules[item]
        step = schedule[number] if number < len(schedule) else Step(OK)
        with self._lock:
            self.answered[step.kind] += 1
        if step.kind == OK:
            return rubric_responder(body)
        if step.kind == "null":
            return Reply(None)
        if step.kind == "refusal":
            return Reply(None, refusal=REFUSAL_TEXT)
        if step.kind == "hang":
            return Fault("hang", hang_seconds=HANG_SECONDS)
        return Fault(step.kind, retry_after=step.retry_after)


class PerItemSleeps:
    """The client's sleep function: records each requested delay under the item the calling thread judges."""

    def __init__(self) -> None:
        self.current = threading.local()
        self.by_item: dict[int, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.by_item[self.current.item].append(seconds)


def run_items(judge_one: Callable[[int], Any], sleeps: PerItemSleeps) -> list[Any]:
    def one(item: int) -> Any:
        sleeps.current.item = item
        return judge_one(item)

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, range(N_ITEMS)))


def make_client(server: OpenAITestServer, cache_path, sleeps: Callable[[float], None]) -> JudgeClient:
    config = JudgeConfig(
        base_url=server.base_url, api_key="sk-test-key", model="test-judge", cache_path=cache_path,
        timeout=TIMEOUT, max_attempts=MAX_ATTEMPTS, backoff_initial=BACKOFF_INITIAL, backoff_max=BACKOFF_MAX,
        max_concurrency=WORKERS,
    )
    return JudgeClient(config, sleep=sleeps)


def caption(item: int) -> str:
    return f"[item {item:03d}] A brown dog runs across a green park and catches a red ball."


# ---------------------------------------------------------------------------------------------------------
# What every faulted run must satisfy, whichever judge


@dataclass(frozen=True)
class Observed:
    failure: str | None
    detail: str
    scores: tuple[float | None, ...]


def check_run(observed: list[Observed], schedules, responder: ScheduledResponder, sleeps: PerItemSleeps,
              max_tries: int, empty_kind: str) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for item, (seen, schedule) in enumerate(zip(observed, schedules)):
        expected = expected_outcome(schedule, max_tries, empty_kind)
        where = f"item {item}, schedule {[s.kind for s in schedule]}"
        assert seen.failure == expected.failure, where
        kinds[seen.failure or "judged"] += 1
        # Never a silent score: judged items have every score, unjudged items none (not 0).
        if seen.failure is None:
            assert all(score is not None for score in seen.scores), where
        else:
            assert all(score is None for score in seen.scores), where
            assert seen.detail, where
        # Bounded retries, counted at the server.
        assert responder.requests[item] == expected.requests <= MAX_ATTEMPTS * max_tries, where
        # One wait after every retried transport fault, and never sooner than the server's Retry-After.
        waited = sleeps.by_item.get(item, [])
        assert len(waited) == len(expected.sleeps_after), where
        for step, delay in zip(expected.sleeps_after, waited):
            assert 0 <= delay <= BACKOFF_MAX, where
            if step.retry_after is not None:
                assert delay >= step.retry_after, where
    assert sum(kinds.values()) == N_ITEMS
    # The seeded schedule really exercised every fault.
    for kind in (*TRANSPORT_FAULTS, *EMPTY_REPLIES, NOT_RETRIED):
        assert responder.answered[kind] > 0, f"the schedule never injected {kind}"
    return kinds


# ---------------------------------------------------------------------------------------------------------
# G-VEval, expected-value scoring, text-only (references mode)


def gveval_observed(result) -> Observed:
    failure = result.failure
    return Observed(failure.kind if failure else None, failure.detail if failure else "", tuple(result.scores().values()))


def test_gveval_run_of_200_items_under_mixed_faults_accounts_for_every_item(tmp_path):
    max_tries = 3
    schedules = make_schedules(seed=20240501, max_tries=max_tries)
    responder = ScheduledResponder(schedules)
    references = ["A dog chases a ball in a park.", "A brown dog plays fetch on the grass."]
    with OpenAITestServer(responder) as server:
        sleeps = PerItemSleeps()
        client = make_client(server, tmp_path / "cache.sqlite", sleeps)
        judge = GVEvalJudge(client, scoring="expected", mode="references", max_tries=max_tries)
        results = run_items(lambda item: judge.judge(caption(item), references=references), sleeps)
        client.close()
        observed = [gveval_observed(result) for result in results]
        kinds = check_run(observed, schedules, responder, sleeps, max_tries, empty_kind="missing")
        assert kinds["judged"] > 100 and kinds["request_failed"] > 0 and kinds["refusal"] + kinds["missing"] > 0

        for result, seen in zip(results, observed):
            if seen.failure is None:
                assert result.scoring == "expected" and 0 <= result.mean <= 100
            elif seen.failure == "request_failed":
                assert re.match(r"(http_\d{3}|timeout|connection|bad_response)", seen.detail), seen.detail
            elif seen.failure == "refusal":
                assert REFUSAL_TEXT in seen.detail

        # A rerun with the same cache asks only for what the first run could not get, and fills it in.
        before = Counter(responder.requests)
        rerun_sleeps = PerItemSleeps()
        rerun_client = make_client(server, tmp_path / "cache.sqlite", rerun_sleeps)
        rerun_judge = GVEvalJudge(rerun_client, scoring="expected", mode="references", max_tries=max_tries)
        rerun = run_items(lambda item: rerun_judge.judge(caption(item), references=references), rerun_sleeps)
        rerun_client.close()
    for item, (first, again) in enumerate(zip(observed, map(gveval_observed, rerun))):
        new_requests = responder.requests[item] - before[item]
        if first.failure == "request_failed":
            assert new_requests == 1 and again.failure is None, item
        else:  # judged, or every reply was empty: all of it replayed from the cache
            assert new_requests == 0 and again == first, item


# ---------------------------------------------------------------------------------------------------------
# AnyCap, 8 frames of a small generated video


def test_anycap_run_of_200_items_with_video_under_mixed_faults_accounts_for_every_item(tmp_path):
    max_tries = 5  # the published bound
    schedules = make_schedules(seed=7, max_tries=max_tries)
    responder = ScheduledResponder(schedules)
    video = make_video(tmp_path / "clip.mp4", n_frames=30)
    reference = "A brown dog runs across a park and catches a red ball in its mouth."
    with OpenAITestServer(responder) as server:
        sleeps = PerItemSleeps()
        client = make_client(server, tmp_path / "cache.sqlite", sleeps)
        judge = AnyCapJudge(client, max_tries=max_tries)
        results = run_items(lambda item: judge.judge("brief", caption(item), reference, video=video, item=item), sleeps)
        client.close()
        eight_frames = next(entry for entry in server.log if entry.answer == "reply")
        assert sum(part["type"] == "image_url" for part in eight_frames.body["messages"][0]["content"]) == 8

    observed = [Observed(r.failure, r.failure_detail, (r.judge_score, r.final_score)) for r in results]
    kinds = check_run(observed, schedules, responder, sleeps, max_tries, empty_kind="no_json")
    assert kinds["judged"] > 100 and kinds["request_failed"] > 0 and kinds["refusal"] + kinds["no_json"] > 0
    for result in results:
        if result.ok:
            assert 0 <= result.final_score <= result.judge_score <= 4
        # The length check is recorded for every item, judged or not.
        assert result.output_words > 0 and result.reference_words > 0


# ---------------------------------------------------------------------------------------------------------
# The contract itself, on hand-made schedules (so a wrong oracle cannot pass the runs above)


@pytest.mark.parametrize(
    "kinds, failure, requests, sleeps",
    [
        ((), None, 1, 0),
        (("500", "503", "429"), None, 4, 3),
        (("500",) * MAX_ATTEMPTS, "request_failed", MAX_ATTEMPTS, MAX_ATTEMPTS - 1),
        (("400",), "request_failed", 1, 0),
        (("null", "500", "refusal"), None, 4, 1),
        (("refusal", "null", "refusal"), "refusal", 3, 0),
        (("refusal", "refusal", "null"), "missing", 3, 0),
        (("null", "reset", "reset", "reset", "reset"), "request_failed", 5, 3),
    ],
)
def test_the_contract_oracle(kinds, failure, requests, sleeps):
    expected = expected_outcome(tuple(Step(kind) for kind in kinds), max_tries=3, empty_kind="missing")
    assert (expected.failure, expected.requests, len(expected.sleeps_after)) == (failure, requests, sleeps)


def test_a_retry_after_longer_than_the_backoff_ceiling_is_waited_out(tmp_path):
    # Retry-After 2 s on a first attempt (jitter ceiling BACKOFF_INITIAL, 0.05 s: 40 times less): the client
    # waits 2 s, not less; a 503's Retry-After likewise.
    assert 2 > 20 * BACKOFF_INITIAL
    with OpenAITestServer() as server:
        server.script(Fault("429", retry_after=2), Fault("503", retry_after=0.3))
        waited: list[float] = []
        client = make_client(server, tmp_path / "cache.sqlite", waited.append)
        result = GVEvalJudge(client, mode="references").judge("[item 000] a dog", references=["a dog runs"])
        client.close()
    assert result.judged
    assert waited[0] >= 2 and waited[1] >= 0.3 and len(waited) == 2


# ---------------------------------------------------------------------------------------------------------
# Well-framed 200 responses whose JSON is not a chat completion (a gateway's own object, wrong types)


class RawServer:
    """Answers every POST with the next body from `bodies` (status 200, JSON content type)."""

    def __init__(self, *bodies: bytes):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies = list(bodies)
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                data = server.bodies[min(server.requests, len(server.bodies) - 1)]
                server.requests += 1
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _completion_json(text: str, **overrides: Any) -> bytes:
    """A chat completion whose message says `text`; `overrides` replace message fields (content, refusal) or
    top-level fields (model, usage)."""
    message = {"role": "assistant", "content": text}
    top = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "model": "test-judge"}
    for key, value in overrides.items():
        (message if key in ("content", "refusal") else top)[key] = value
    return json.dumps(top).encode()


GOOD = (
    "The caption is fine.\nThe Accuracy score is α70α.\nThe Completeness score is β60β.\n"
    "The Conciseness score is ψ80ψ.\nThe Relevance score is δ75δ."
)
MALFORMED_COMPLETIONS = {
    "json_list": b"[]",
    "json_null": b"null",
    "json_string": b'"upstream says hi"',
    "choices_is_text": b'{"choices": "none today"}',
    "choice_is_null": b'{"choices": [null]}',
    "content_is_number": _completion_json(GOOD, content=5),
    "content_is_list": _completion_json(GOOD, content=[GOOD]),
    "refusal_is_number": _completion_json(GOOD, refusal=3),
    "model_is_list": _completion_json(GOOD, model=["a", "b"]),
    "usage_not_numbers": _completion_json(GOOD, usage={"prompt_tokens": "many"}),
    "logprob_not_a_number": json.dumps({"choices": [{"message": {"content": GOOD}, "logprobs": {"content": [
        {"token": "x", "logprob": "high", "top_logprobs": []}]}}]}).encode(),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_COMPLETIONS))
def test_a_malformed_completion_is_a_retried_bad_response_never_an_exception(name, tmp_path):
    with RawServer(MALFORMED_COMPLETIONS[name], _completion_json(GOOD)) as server:
        waited: list[float] = []
        client = make_client(server, tmp_path / "cache.sqlite", waited.append)
        result = GVEvalJudge(client, scoring="text", mode="references").judge("[item 000] a dog", references=["a dog"])
        client.close()
    assert result.judged and result.accuracy == 70  # the retry got the good reply
    assert server.requests == 2 and len(waited) == 1
    with RawServer(MALFORMED_COMPLETIONS[name]) as server:
        client = make_client(server, tmp_path / "other.sqlite", lambda seconds: None)
        failed = GVEvalJudge(client, scoring="text", mode="references").judge("[item 001] a cat", references=["a cat"])
        client.close()
    assert failed.failure.kind == "request_failed" and "bad_response" in failed.failure.detail
    assert server.requests == MAX_ATTEMPTS


def test_a_reply_with_an_unpaired_surrogate_is_judged_and_cached(tmp_path):
    # "\\ud800" in the JSON decodes to a lone surrogate, which SQLite (and the sample log) cannot encode as
    # UTF-8: it used to raise from the cache write. It is replaced by U+FFFD on arrival.
    with RawServer(_completion_json("Odd byte \ud800 here.\n" + GOOD)) as server:
        client = make_client(server, tmp_path / "cache.sqlite", lambda seconds: None)
        judge = GVEvalJudge(client, scoring="text", mode="references")
        result = judge.judge("[item 000] a dog", references=["a dog"])
        again = judge.judge("[item 000] a dog", references=["a dog"])
        client.close()
    assert result.judged and "Odd byte \ufffd here." in result.raw_reply
    assert again.scores() == result.scores() and server.requests == 1  # the second came from the cache

"""The one judge client every judge uses, whichever backend serves it (capjudge.judges.client.backends).

Design choices, and why:
- One HTTP path. `judge` is synchronous (lmms-eval calls `process_results` from worker threads); the async
  `ajudge`/`ajudge_many` run that same path on a thread pool. A single `threading.BoundedSemaphore` is then
  the process-wide bound on requests in flight, whichever API the caller used.
- The retry loop is ours, not the SDK's (the SDK client is built with max_retries=0): every attempt's outcome
  is recorded in the result, the attempt budget is bounded and explicit, and a reply the judge's parser
  rejects can be re-asked through the same loop. The SDK still does the HTTP, the typed errors we classify
  on, and response parsing.
- The cache is consulted before every request, per (request, judge version, sample index). A re-ask after a
  rejected reply uses the next sample index, so a rerun replays the same sequence from the cache with zero
  requests instead of getting the same bad reply forever.
- The API key lives only inside the SDK client. Everything this module records or hands on to be recorded
  (attempt details, failure details, log lines, the replies kept in the cache and in the outcome, the text of
  a parsed judgment) passes through a `Redactor` (capjudge.judges.client.redaction) first, in case a server
  echoes a credential back. What is *scored* is the reply as received: redaction never changes a score, and
  the cached copy keeps its logprobs (re-spelled around the redacted text), so a rerun from the cache scores
  the same.

The request body and the reply are encoded and decoded by `capjudge.judges.client.wire` (shared with the
Batch API path); the process-wide client per configuration is `capjudge.judges.client.registry.shared_client`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import random
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import openai

from capjudge.judges.client.budget import Limits, MachineBudget, judge_budget_folder
from capjudge.judges.client.breaker import JUDGE_UNREACHABLE, CircuitBreaker, JudgeUnreachable
from capjudge.judges.client.cache import ReplyCache
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.http_transport import PerThreadTransport
from capjudge.judges.client.pacing import Pacer
from capjudge.judges.client.pauses import WaitNotices
from capjudge.judges.client.rate_limits import (
    NO_ESTIMATE,
    RateLimitHeaders,
    RateLimitState,
    TokenEstimate,
    estimate_tokens,
    read_rate_limit_headers,
    read_refusal_message,
)
from capjudge.judges.client.redaction import Redactor
from capjudge.judges.client.served_judges import ServedJudges
from capjudge.judges.client.wire import (
    RequestRejected,
    TransportError,
    parse_reply,
    reply_from_completion_dict,
    unsendable_problem,
    wire_body,
)
from capjudge.judges.types import BAD_INPUT, Attempt, ChatRequest, JudgeOutcome, JudgeReply, ParseFailure, Usage

log = logging.getLogger(__name__)


class JudgeClient:
    def __init__(self, config: JudgeConfig, *, sleep: Callable[[float], None] = time.sleep):
        config.validate()
        self.config = config
        # Who serves this judge (capjudge.judges.client.backends): its SDK client, headers, Batch API.
        self.backend = config.backend
        self._redactor = Redactor.for_config(config)
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        # The machine-wide budget every process of the run shares (in-flight slots, RPM/TPM windows, pauses),
        # and what the API's headers make of it: pauses bounded by the longest backoff, every wait said.
        notices = WaitNotices(config.endpoint_label)
        self.budget = MachineBudget(judge_budget_folder(config),
                                    Limits(config.max_concurrency, config.rpm, config.tpm, config.rate_window), notices)
        self._pacer = Pacer(self.budget, config.backoff_max, config.endpoint_label, notices)
        self._cache = ReplyCache(config.cache_path) if config.use_cache and config.cache_path else None
        self._usage: dict[str, Usage] = defaultdict(Usage)
        self._cache_hits: dict[str, int] = defaultdict(int)
        self._usage_lock = threading.Lock()
        self._sdk = self._build_sdk_client(config)
        # What the server says about the model it serves: part of every cache key (capjudge.judges.client.served_judges).
        self.served = ServedJudges.ask(config, self._sdk, self.redact)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self.breaker = CircuitBreaker(config.breaker_threshold)

    @staticmethod
    def _build_sdk_client(config: JudgeConfig) -> openai.OpenAI:
        import httpx

        # Each sending thread keeps its own connection (see http_transport): the semaphore, not a shared
        # pool, is the bound, and no request waits on a walk of every other thread's connections.
        http_client = httpx.Client(transport=PerThreadTransport(), timeout=config.timeout)
        common: dict[str, Any] = {"timeout": config.timeout, "max_retries": 0, "http_client": http_client}
        return config.backend.build_sdk(config, **common)

    # ----------------------------------------------------------------------------------------------
    # Public API

    def judge(
        self,
        request: ChatRequest,
        parse: Callable[[JudgeReply], Any],
        *,
        judge_version: str,
        max_tries: int = 1,
        first_sample_index: int = 0,
    ) -> JudgeOutcome[Any]:
        """Ask, parse, and re-ask (up to `max_tries` replies) while the parser rejects the reply.

        Transport failures are retried inside each try (up to `config.max_attempts`); when they are exhausted
        the outcome is a `request_failed` failure, not an exception, so one bad item never ends a run.
        The outcome's `usage.requests` counts every request that reached the server, failed ones included
        (what the server received, and what rate limits and bills count); its tokens are the replies'.
        """
        if max_tries < 1:
            raise ValueError(f"max_tries must be at least 1, got {max_tries}")
        body = request.body(self.config.model)
        unsendable = unsendable_problem(request)
        if unsendable is not None:
            # Not valid Unicode, so it cannot be encoded as UTF-8 for the request (or the cache key): a bad
            # item, reported as one instead of an exception that would end the run.
            return JudgeOutcome(None, ParseFailure(BAD_INPUT, unsendable), (), (), Usage())
        attempts: list[Attempt] = []
        replies: list[JudgeReply] = []
        usage = Usage()
        sent = _Sent()
        failure: ParseFailure | None = None
        # Counted only if a request is sent under a limit: a cached rerun never opens the request's images.
        tokens = functools.cache(lambda: estimate_tokens(request))
        for sample_index in range(first_sample_index, first_sample_index + max_tries):
            try:
                reply, recorded = self._reply_for(body, judge_version, sample_index, attempts, tokens, sent)
            except (TransportError, RequestRejected) as error:
                failure = ParseFailure("request_failed", self.redact(str(error)))
                break
            except JudgeUnreachable as error:
                failure = ParseFailure(JUDGE_UNREACHABLE, self.redact(str(error)))
                break
            replies.append(recorded)
            if not reply.cached:  # a cached reply cost nothing this time
                usage = usage + replace(reply.usage, requests=0)  # requests: counted as sent (`sent`)
            # Scored as received; what the judgment carries on (its text) is redacted like the reply.
            parsed = parse_reply(reply, parse)
            if recorded is not reply:
                parsed = self._redactor.value(parsed)
            if not isinstance(parsed, ParseFailure):
                usage = replace(usage, requests=sent.requests)
                self._account(judge_version, usage, replies)
                return JudgeOutcome(parsed, None, tuple(replies), tuple(attempts), usage)
            failure = ParseFailure(parsed.kind, self.redact(parsed.detail), parsed.data)
            attempts.append(Attempt(f"parse:{parsed.kind}", 0.0, sample_index, self.redact(parsed.detail)[:200]))
        usage = replace(usage, requests=sent.requests)
        self._account(judge_version, usage, replies)
        assert failure is not None
        return JudgeOutcome(None, failure, tuple(replies), tuple(attempts), usage)

    async def ajudge(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], **kwargs: Any) -> JudgeOutcome[Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), lambda: self.judge(request, parse, **kwargs))

    async def ajudge_many(
        self, requests: Iterable[ChatRequest], parse: Callable[[JudgeReply], Any], **kwargs: Any
    ) -> list[JudgeOutcome[Any]]:
        """Judge a batch concurrently (bounded by `max_concurrency`); results keep the input order."""
        return list(await asyncio.gather(*(self.ajudge(request, parse, **kwargs) for request in requests)))

    def judge_many(self, requests: Sequence[ChatRequest], parse: Callable[[JudgeReply], Any], **kwargs: Any) -> list[JudgeOutcome[Any]]:
        """Synchronous front for `ajudge_many`, for scripts and the CLI, and for callers whose thread already
        runs an event loop (a Jupyter notebook, an async framework, playwright's sync API), where
        `asyncio.run` refuses to start another: the batch then runs on an event loop of a thread of its own."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: the usual case
            return asyncio.run(self.ajudge_many(requests, parse, **kwargs))
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="capjudge-judge-many") as own_loop:
            return own_loop.submit(lambda: asyncio.run(self.ajudge_many(requests, parse, **kwargs))).result()

    def usage(self) -> dict[str, dict[str, int]]:
        """Tokens, requests and cache hits per judge version, for results files."""
        with self._usage_lock:
            return {
                version: {
                    "prompt_tokens": used.prompt_tokens,
                    "completion_tokens": used.completion_tokens,
                    "requests": used.requests,
                    "cache_hits": self._cache_hits[version],
                }
                for version, used in self._usage.items()
            }

    def request_key(self, body: Mapping[str, Any], judge_version: str, sample_index: int) -> str:
        """The cache key of a request to this judge (the served model's identity included)."""
        return self.served.request_key(body, judge_version, sample_index)

    def cached_reply(self, key: str) -> JudgeReply | None:
        """The cached reply under a request key (`request_key`), if any."""
        return self._cache.get(key) if self._cache is not None else None

    def store_reply(self, key: str, judge_version: str, reply: JudgeReply) -> None:
        """Put a reply obtained elsewhere (a Batch API output) into the cache, as if it had been asked here."""
        if self._cache is None:
            raise ValueError("the reply cache is off (CAPJUDGE_NO_CACHE): batch replies would have nowhere to go")
        self._cache.put(key, judge_version, self._redactor.reply(reply))

    def flush_cache(self) -> None:
        """Wait until every reply received so far is written to the cache file (see ReplyCache)."""
        if self._cache is not None:
            self._cache.flush()

    @property
    def has_cache(self) -> bool:
        return self._cache is not None

    @property
    def sdk(self) -> openai.OpenAI:
        """The openai SDK client (for the Files and Batches endpoints)."""
        return self._sdk

    def redact(self, text: str) -> str:
        """`text` without this configuration's credentials (see `Redactor`)."""
        return self._redactor(text)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()  # writes what is queued first
        self.budget.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._sdk.close()

    # ----------------------------------------------------------------------------------------------
    # Internals

    def _pool(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.config.max_concurrency, thread_name_prefix="capjudge-judge")
            return self._executor

    def _account(self, judge_version: str, usage: Usage, replies: list[JudgeReply]) -> None:
        with self._usage_lock:
            self._usage[judge_version] = self._usage[judge_version] + usage
            self._cache_hits[judge_version] += sum(reply.cached for reply in replies)

    def _reply_for(
        self, body: dict[str, Any], judge_version: str, sample_index: int, attempts: list[Attempt],
        tokens: Callable[[], TokenEstimate] = lambda: NO_ESTIMATE, sent: _Sent | None = None,
    ) -> tuple[JudgeReply, JudgeReply]:
        """(the reply to score, the reply to record): the same object unless the reply as received quotes a
        credential. The cache keeps the recorded one."""
        key = self.request_key(body, judge_version, sample_index)
        if self._cache is not None:
            cached = self._cache.get(key)
            if cached is not None:
                attempts.append(Attempt("cache_hit", 0.0, sample_index))
                return cached, cached
            self.served.before_asking(self._cache, body, judge_version, sample_index)
        reply = self._request_with_retries(body, sample_index, attempts, tokens, sent or _Sent())
        recorded = self._redactor.reply(reply)
        if self._cache is not None:
            self._cache.put(key, judge_version, recorded)
        return reply, recorded

    def _request_with_retries(
        self, body: dict[str, Any], sample_index: int, attempts: list[Attempt],
        tokens: Callable[[], TokenEstimate], sent: _Sent,
    ) -> JudgeReply:
        last_error: TransportError | None = None
        for attempt_number in range(self.config.max_attempts):
            self.breaker.check()
            started = time.monotonic()
            sent_at, ticket = time.time(), None
            try:
                with self._slots, self.budget.slot():
                    ticket = self.budget.admit(lambda: tokens().total)
                    sent_at = time.time()
                    reply, limits = self._request_once(body, sent)
                    if ticket is not None and limits.used_tokens is None:
                        # No header counts tokens: the usage is the best figure (where one does, it wins: the
                        # learned charge, capjudge.judges.client.charge). The prompt as the API counted it, the
                        # reply as reserved.
                        self.budget.settle(ticket, reply.usage.prompt_tokens + max(tokens().reply, reply.usage.completion_tokens))
                self._pacer.after_reply(limits, sent_at, lambda: tokens().total)
            except TransportError as error:
                attempts.append(Attempt(error.outcome, time.monotonic() - started, sample_index, self.redact(error.detail)[:200]))
                last_error = error
                if error.outcome == "http_429":
                    self._pacer.after_rate_limited(error, sent_at, lambda: tokens().total, ticket)
                if error.unfixable:
                    self.breaker.record_unfixable(self.config.endpoint_label, self.redact(error.detail)[:200])
                    self.breaker.check()
                if attempt_number + 1 < self.config.max_attempts:
                    delay = self._backoff(attempt_number, error.retry_after)
                    log.warning("judge request %s; retrying in %.2fs", error.outcome, delay)
                    self._sleep(delay)
                continue
            except RequestRejected as error:
                attempts.append(Attempt(f"http_{error.status}", time.monotonic() - started, sample_index, self.redact(error.detail)[:200]))
                if error.status in (401, 403, 404):  # the key or the model: the same for every item
                    self.breaker.record_unfixable(self.config.endpoint_label, self.redact(str(error))[:200])
                raise
            self.breaker.record_success()
            attempts.append(Attempt("ok", time.monotonic() - started, sample_index))
            return reply
        assert last_error is not None
        raise TransportError(
            last_error.outcome, f"gave up after {self.config.max_attempts} attempts; last: {last_error.detail}"
        )

    def _backoff(self, attempt_number: int, retry_after: float | None) -> float:
        """Full-jitter exponential backoff, but never sooner than the server's Retry-After."""
        ceiling = min(self.config.backoff_max, self.config.backoff_initial * (2**attempt_number))
        delay = random.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.config.backoff_max))
        return delay

    def _request_once(self, body: dict[str, Any], sent: _Sent) -> tuple[JudgeReply, RateLimitState]:
        """One HTTP request; `sent` counts it once it reached the server (answered, broke off or timed out
        after connecting: a failed request is one the server received all the same)."""
        import httpx

        sent.requests += 1  # taken back below if the connection was never made
        try:
            # The SDK's own request path (auth headers, Azure deployment URLs, status errors), without its
            # request transform and response models: on a judge's reply with logprobs those cost ~2 ms of
            # CPU per request (profiled), which at 32 requests in flight held every wave of replies back
            # behind the GIL. The body is already exactly what the API takes; the reply is read from JSON.
            response = self._sdk.post("/chat/completions", body=wire_body(body), cast_to=httpx.Response)
            data = json.loads(response.read())
        except openai.APITimeoutError as error:
            connected = not isinstance(error.__cause__, httpx.ConnectTimeout)
            sent.requests -= not connected
            raise TransportError("timeout", type(error).__name__, reached=connected) from None
        except openai.APIConnectionError as error:
            # httpx.ConnectError: nothing accepted the connection (refused, unknown host), as opposed to a
            # connection that broke mid-request.
            unfixable = isinstance(error.__cause__, httpx.ConnectError)
            sent.requests -= unfixable
            raise TransportError("connection", f"{type(error).__name__}: {error}", unfixable=unfixable,
                                 reached=not unfixable) from None
        except openai.APIStatusError as error:
            status = error.status_code
            if status == 429 or status >= 500 or status == 408:
                raise TransportError(f"http_{status}", _short(error),
                                     _retry_after(error.response, self.backend.rate_limit_headers),
                                     rate_limits=self._rate_limits_of(error.response) if status == 429 else None,
                                     refusal=read_refusal_message(error.message) if status == 429 else None) from None
            raise RequestRejected(status, _short(error)) from None
        except (openai.APIResponseValidationError, ValueError) as error:
            # A 200 whose body is not a chat completion (truncated or malformed JSON).
            raise TransportError("bad_response", f"{type(error).__name__}: {str(error)[:200]}") from None
        except httpx.HTTPError as error:  # the body broke off while it was being read
            raise TransportError("connection", f"{type(error).__name__}: {error}") from None
        try:
            reply = reply_from_completion_dict(data)
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            # Valid JSON that is not shaped like a chat completion (a gateway's own object, a number where
            # text belongs): as retryable as a truncated body, and never an exception that ends the run.
            detail = f"malformed chat completion: {type(error).__name__}: {str(error)[:200]}"
            raise TransportError("bad_response", detail) from None
        # A header that cannot be used is ignored (said once), never the reply that carried it: it is paid for.
        ignored: list[str] = []
        limits = read_rate_limit_headers(response.headers, ignored, self.backend.rate_limit_headers)
        self._pacer.ignore_headers(ignored)
        return reply, limits

    def _rate_limits_of(self, response: Any) -> RateLimitState | None:
        """The rate-limit headers of a 429, or None when it has none readable (then its Retry-After alone
        decides, as for a server that sends no such headers); one that cannot be used is ignored, said once."""
        headers = getattr(response, "headers", None)
        if headers is None:
            return None
        ignored: list[str] = []
        limits = read_rate_limit_headers(headers, ignored, self.backend.rate_limit_headers)
        self._pacer.ignore_headers(ignored)
        return limits if limits.known else None


class _Sent:
    """The requests one judgment sent that reached the server: retried 429s, 5xx and timeouts included."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests = 0


def _short(error: openai.APIStatusError) -> str:
    return f"{error.status_code} {str(error.message)[:200]}"


def _retry_after(response: Any, names: RateLimitHeaders) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms` or `retry-after`, seconds form, by default)."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in ((names.retry_after_ms, 0.001), (names.retry_after, 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue  # an HTTP-date: rare for APIs; fall back to backoff
    return None

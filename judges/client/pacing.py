"""`Pacer`: what the judge client does with what the API says of its rate limits, after each reply or 429.

The API's limits cap the shared windows, its count is reconciled with them (capjudge.judges.client.budget),
and what asks for a pause (a 429's Retry-After; a window counted down without a named limit, exhausted)
pauses every process of the run, within a bound:

- `max_pause`: no header holds judging longer than the client's longest backoff (`backoff_max`, 30 s), the
  cap Retry-After always had. The API may ask again with its next reply; it cannot ask once for an hour
  (issue 46: `x-ratelimit-reset-requests: 1h30m` paused 89 minutes, in silence, for every later run too).
- each pause is said on the terminal: why, for how long, until when, and that it was capped
  (capjudge.judges.client.pauses.WaitNotices);
- a header that cannot be used (not a number, a negative count) is ignored, said once per header, and the
  reply that carried it is kept: it was paid for (issue 46 item 10: such a reply was thrown away and asked
  again, for every reply of a server that always sent it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from capjudge.judges.client.budget import MachineBudget
from capjudge.judges.client.charge import refusal_charge
from capjudge.judges.client.pauses import WaitNotices
from capjudge.judges.client.rate_limits import RateLimitState
from capjudge.judges.client.wire import TransportError

log = logging.getLogger(__name__)


class Pacer:
    def __init__(self, budget: MachineBudget, max_pause: float, judge: str, notices: WaitNotices):
        self.budget = budget
        self.max_pause = max_pause
        self.judge = judge  # the endpoint, as logs name it (no credentials)
        self.notices = notices
        self._ignored: set[str] = set()  # header names already said to be ignored
        self._lock = threading.Lock()

    def after_reply(self, limits: RateLimitState, sent_at: float, tokens: Callable[[], int], refused: int | None = None,
                    refused_charge: tuple[int, int] | None = None) -> None:
        """Follow the API's rate-limit headers: its limits cap the shared windows (where ours are not lower),
        its count (limit - remaining) is the authority over what the windows hold, and a window it counts
        down without naming its limit pauses every process when exhausted (bounded, and said)."""
        if not limits.known:
            return
        self.budget.learn(limits.limit_requests, limits.limit_tokens)
        self.budget.reconcile(sent_at, limits.used_requests, limits.used_tokens, refused=refused, refused_charge=refused_charge)
        wait, cause = limits.wait_and_cause(tokens())
        self.pause(wait, f"the API's headers: {cause}", kind="exhausted window")

    def after_rate_limited(self, error: TransportError, sent_at: float, tokens: Callable[[], int],
                           ticket: int | None = None) -> None:
        """A 429 that names the limit it hit (OpenAI sends its x-ratelimit-* headers with every 429) is paced
        like any reply's headers: the limit caps the shared window and the API's count is reconciled, so every
        process waits exactly until the window has room. Its Retry-After then holds back only the request
        that met it: servers derive it from `reset`, which may mean "until the window is empty", and holding
        every process that long stalled a run that was a few milliseconds over the limit (0.70 of the token
        limit used instead of 0.92+, issue 29's test on a loaded machine). A 429 that names no limit still
        pauses every process for its Retry-After: without a limit, the window cannot pace. The refused request
        (`ticket`) was not charged: it leaves the samples of the API's charge; what the API says it would have
        charged it (the message's `Requested`, else more than the `remaining` of a token limit) is its own
        sample of the charge (capjudge.judges.client.charge.record_refusal)."""
        limits = error.rate_limits
        if limits is not None and (limits.limit_requests or limits.limit_tokens):
            estimate = tokens()
            charged = refusal_charge(error.refusal, limits, estimate)
            self.after_reply(limits, sent_at, tokens, ticket, None if charged is None else (charged, estimate))
        elif error.retry_after:
            self.pause(error.retry_after, f"a 429 (rate limited) whose Retry-After says {error.retry_after:g} s",
                       kind="retry-after")

    def pause(self, seconds: float, cause: str, kind: str) -> None:
        """Every process of the run holds off for `seconds`, at most `max_pause`; said on the terminal."""
        if seconds <= 0:
            return
        bounded = min(seconds, self.max_pause)
        self.budget.pause_all(bounded)
        capped = f" (capped at {self.max_pause:g} s, the longest any header may hold judging)" if seconds > bounded else ""
        self.notices.say(bounded, cause + capped, kind)

    def ignore_headers(self, problems: list[str]) -> None:
        """Rate-limit headers a reply carried that cannot be used: left out (the reply is kept), each said once."""
        for problem in problems:
            name = problem.split(":", 1)[0]
            with self._lock:
                if name in self._ignored:
                    continue
                self._ignored.add(name)
            log.warning("capjudge: %s sent a rate-limit header capjudge cannot use (%s): ignored; the replies that "
                        "carry it are kept (said once)", self.judge, problem)

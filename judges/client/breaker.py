"""A circuit breaker for a judge that is not there.

Retries and backoff are right for a judge that is overloaded or flaky; they are wrong for one that cannot
answer at all (nothing listening, the host does not resolve, the key or the model is rejected). Then every
remaining item would wait through the whole backoff schedule and end `request_failed`, one by one. After
`threshold` consecutive such outcomes, with no success in between, the breaker opens and every later request
of this process fails at once as `judge_unreachable`. It stays open for the rest of the process: the judge's
replies so far are cached, so rerunning once the judge is back judges only what is missing.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

JUDGE_UNREACHABLE = "judge_unreachable"


class JudgeUnreachable(Exception):
    """The breaker is open: no request is sent."""


class CircuitBreaker:
    def __init__(self, threshold: int):
        if threshold < 0:
            raise ValueError(f"the breaker threshold must be >= 0 (0 turns it off), got {threshold}")
        self.threshold = threshold
        self._consecutive = 0
        self._reason: str | None = None
        self._lock = threading.Lock()

    @property
    def reason(self) -> str | None:
        """Why the breaker opened, or None while it is closed."""
        return self._reason

    def check(self) -> None:
        """Raise JudgeUnreachable when open; called before every request."""
        reason = self._reason
        if reason is not None:
            raise JudgeUnreachable(reason)

    def record_success(self) -> None:
        with self._lock:
            self._consecutive = 0

    def record_unfixable(self, endpoint: str, detail: str) -> None:
        """One outcome that no retry can fix (connection refused, DNS, 401/403/404)."""
        if self.threshold == 0:
            return
        with self._lock:
            self._consecutive += 1
            if self._reason is None and self._consecutive >= self.threshold:
                self._reason = (
                    f"the judge at {endpoint} failed {self._consecutive} times in a row in a way no retry can fix "
                    f"(last: {detail}); every remaining item of this run fails fast as {JUDGE_UNREACHABLE}"
                )
                log.error("%s. Rerun when the judge is back: cached replies are kept and only the rest is judged.",
                          self._reason)

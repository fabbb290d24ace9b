"""The pauses every process of a run honours, and the line that says why judging waits.

A pause comes from the API: a 429's Retry-After, or rate-limit headers that say a window it counts down
without naming its limit is exhausted (capjudge.judges.client.rate_limits.RateLimitState.wait_and_cause).
The judge client bounds each one (capjudge.judges.client.pacing: the cap Retry-After always had) and says
it on the terminal; the budget (capjudge.judges.client.budget) keeps it here, in its window file, so every
process of the run on this machine holds off too.

A pause belongs to the process that was told it (its pid and start time, so a reused pid is not it) and is
honoured only while that process lives: a run's processes live as long as the run, so a pause never
outlives the run that saw it. A later run, or a later judging stage, asks the API afresh; if the API says so
again, that run pauses on its own account. (Issue 46: one reply's `x-ratelimit-reset-requests: 1h30m` was
stored for every later run: a fresh run against a healthy server sent nothing for 45 s, and would have waited
89 minutes.) What the API counted in its windows is another matter: that is usage, kept one window whatever
run sent it (MachineBudget.reconcile), since the API's window holds it whoever ends.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time

log = logging.getLogger(__name__)

SCHEMA = "CREATE TABLE IF NOT EXISTS pauses (pid INTEGER PRIMARY KEY, started TEXT NOT NULL, until REAL NOT NULL);"

# A wait shorter than this is the ordinary step of even pacing, not news; a longer one is said.
SAY_WAITS_FROM = 1.0
# The same cause is said again at most this often (a run paced by a full window waits before every request).
SAY_AGAIN_AFTER = 30.0


def set_pause(db: sqlite3.Connection, until: float) -> None:
    """This process was told to hold off until `until` (time.time()): every live process of the run honours it."""
    pid, started = _this_process()
    db.execute("DELETE FROM pauses WHERE until <= ?", (time.time(),))
    db.execute("INSERT INTO pauses (pid, started, until) VALUES (?, ?, ?) ON CONFLICT(pid) DO UPDATE SET "
               "until = CASE WHEN started = excluded.started THEN max(until, excluded.until) ELSE excluded.until END, "
               "started = excluded.started", (pid, started, until))


def pause_until(db: sqlite3.Connection, now: float) -> float:
    """The end of the latest pause in force (0.0 when none): one set by a process that still lives."""
    rows = db.execute("SELECT pid, started, until FROM pauses WHERE until > ?", (now,)).fetchall()
    return max((until for pid, started, until in rows if _alive(pid, started)), default=0.0)


def window_cause(window: str, limit: int, seconds: float, configured: bool, pacing: bool) -> str:
    """Why a request waits for room in the `window` ("requests" or "tokens") of `limit` per `seconds`, in words:
    its room, or even pacing under it (capjudge.judges.client.budget), and who named the limit."""
    named = f"CAPJUDGE_{'RPM' if window == 'requests' else 'TPM'}" if configured else "the API's rate-limit headers"
    what = "even pacing under" if pacing else "no room in"
    return f"{what} the {window} window ({limit:,} per {seconds:g} s, named by {named}; the API's own count of it is followed)"


class WaitNotices:
    """Says on the terminal (a warning line on stderr) why judging waits and until when: each kind of cause
    once, and again after SAY_AGAIN_AFTER seconds while it lasts (a header's values change from reply to reply:
    `kind` names the cause without them); waits under SAY_WAITS_FROM seconds are not said."""

    def __init__(self, judge: str = "the judge"):
        self.judge = judge
        self._said: dict[str, float] = {}  # kind -> when it was last said
        self._lock = threading.Lock()

    def say(self, seconds: float, cause: str, kind: str | None = None) -> None:
        if seconds < SAY_WAITS_FROM:
            return
        now, kind = time.time(), kind or cause
        with self._lock:
            if now - self._said.get(kind, float("-inf")) < SAY_AGAIN_AFTER:
                return
            self._said[kind] = now
        until = time.strftime("%H:%M:%S", time.localtime(now + seconds))
        log.warning("capjudge: judging with %s waits %.0f s, until %s: %s", self.judge, seconds, until, cause)


_IDENTITY: tuple[int, str] | None = None


def _this_process() -> tuple[int, str]:
    """(pid, start time) of this process, computed once per process (a forked worker computes its own)."""
    global _IDENTITY
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY[0] != pid:
        _IDENTITY = (pid, _start_time(pid) or "")
    return _IDENTITY


def _start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks after boot (Linux /proc: field 22 of its stat, counted after
    the command name, which may hold spaces and parentheses); None when it is not there or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, started: str) -> bool:
    if os.path.isdir("/proc/self"):
        return _start_time(pid) == started
    try:  # no /proc (macOS): whether the pid is taken at all
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

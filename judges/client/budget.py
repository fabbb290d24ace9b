"""One rate budget for every process of a run on this machine.

`accelerate launch` starts one process per rank and each builds its own judge client; per-process limits
would send N times what the account allows. So the limits are totals, kept in files every process of the
machine shares (a folder per judge endpoint and model, beside the reply cache):

- requests in flight (`CAPJUDGE_MAX_CONCURRENCY`): one lock file per slot; a request holds an exclusive
  `flock` on one slot file while it is sent. The kernel releases the lock when the process dies, so a killed
  rank never leaks a slot.
- requests and tokens per minute (`CAPJUDGE_RPM`, `CAPJUDGE_TPM`, or the limits the API's headers announce):
  a sliding window of the requests sent, in SQLite (each admission is one IMMEDIATE transaction, so two
  processes cannot both take the last place). A request is admitted only if the window's count and tokens
  stay within the limits with it, and no sooner than even pacing allows (GCRA: the window's budget spread
  over the window, 1/60 of it allowed ahead); where no header counts tokens, its estimate is replaced by the
  prompt tokens the API reports and the reply's `max_tokens` reservation (counted at admission).
- the API's charge per estimated token is learned from its count (capjudge.judges.client.charge), kept here
  for every process (`charge_samples`, meta `charge_ratio`); a request reserves its estimate (`sent.base`)
  times it.
- the API's own count is the authority: when a reply's headers say how much of a limit is used
  (`limit - remaining`) and that is more than this window holds (other clients of the key, another machine,
  a charge above the estimate), the difference is recorded as usage from outside and counted like any
  request, for a whole window from when it was seen: both meanings of `x-ratelimit-reset-*` in the wild
  ("until the oldest entry leaves" and "until the window is empty") free that usage within a window, so
  this never depends on which one a server means (see reconcile).
- a pause every process honours: set on a 429 with Retry-After, or when the headers say a window is
  exhausted, where they name no limit to pace by, so the other ranks do not run into the same wall (a 429
  that names its limit is paced by the window like any reply; see capjudge.judges.client.pacing). Bounded
  and said by the client; honoured only while the process told it lives (capjudge.judges.client.pauses).
- a wait for room in a window (1 s or more; never longer than the window) is said with its cause and end.

Several machines share no files: each sees the others only through the API's count (`remaining`, reconciled
after each reply, so they stay under the limit but may meet a 429 between replies); giving each its share
of the account's limits is the surer way.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from capjudge.judges.client import pauses
from capjudge.judges.client.cache_files import enable_wal
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.charge import (
    RATIO_KEYS,
    BudgetFileError,
    add_base_column,
    check_budget_paths,
    forget_samples_since,
    ratio_in_force,
    record_refusal,
    record_reply_sample,
    reservation,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS sent (id INTEGER PRIMARY KEY, at REAL NOT NULL, tokens INTEGER NOT NULL,
                                 base INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS sent_at ON sent (at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS outside (at REAL NOT NULL, requests INTEGER NOT NULL, tokens INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS charge_samples (at REAL NOT NULL, ratio REAL NOT NULL);
CREATE INDEX IF NOT EXISTS charge_samples_at ON charge_samples (at);
"""
# `sent` rows are kept two windows (a reply's charge sample looks one window back from when its request was
# sent, which may be a reply's latency before now); the admission counts one window.
_SENT_KEPT_WINDOWS = 2
_POLL_MIN = 0.002
_POLL_MAX = 0.25  # between tries for a free slot
# How stale this process's view of another process's pause may be. A pause lasts what a Retry-After or an
# exhausted window says (most of a second and up); reading it for every request cost a SQLite read, one
# more turn for the GIL, per request (see capjudge.judges.client.http_transport for why those turns matter).
_PAUSE_READ_EVERY = 0.02


@dataclass(frozen=True)
class Limits:
    max_in_flight: int
    rpm: int | None = None
    tpm: int | None = None
    window: float = 60.0  # seconds the per-minute limits count over (60; shorter only for tests)


def budget_folder(root: Path, endpoint: str, model: str | None) -> Path:
    """The folder whose files every process judging with this endpoint and model on this machine shares."""
    digest = hashlib.sha256(f"{endpoint}|{model or ''}".encode()).hexdigest()[:16]
    return root / f"budget-{digest}"


def judge_budget_folder(config: JudgeConfig) -> Path:
    """The budget folder of a judge's configuration: beside its reply cache (else in ~/.cache/capjudge)."""
    root = Path(config.cache_path).parent if config.cache_path is not None else Path("~/.cache/capjudge").expanduser()
    return budget_folder(root, config.endpoint_label, config.model)


class MachineBudget:
    def __init__(self, folder: Path, limits: Limits, notices: pauses.WaitNotices | None = None):
        self.folder = Path(folder)
        self.limits = limits
        self.notices = notices or pauses.WaitNotices()
        check_budget_paths(self.folder)  # one line before any item, not a traceback
        self.folder.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._threads_seen = itertools.count()
        # Limits learned from the API's headers, when none was configured (the configured one wins if lower).
        self._learned_rpm: int | None = None
        self._learned_tpm: int | None = None
        self._pause = _PauseView()
        # The requests this process sends while it knows no limit, which no window records (see learn).
        self._unrecorded = _Unrecorded(2 * limits.max_in_flight)
        try:
            with self._db() as db:
                db.executescript(SCHEMA + pauses.SCHEMA)
                add_base_column(db)
        except sqlite3.Error as error:
            raise BudgetFileError(f"budget file {self.folder / 'window.sqlite'}: {error}") from None

    # -- requests in flight -------------------------------------------------------------------------
    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the machine's `max_in_flight` slots."""
        delay = _POLL_MIN
        slots = self.limits.max_in_flight
        # Each thread keeps to the slot it last held, with that file open between its requests (two system
        # calls a request instead of four). A new thread starts at its own index, so 32 threads do not all
        # queue on slot 0; where another process's thread holds it (two processes' thread k start at the same
        # index), the thread moves to the free slot it finds and keeps that one.
        own = getattr(self._local, "own_slot", None)
        if own is None:
            own = self._local.own_slot = _OpenSlotFile(next(self._threads_seen) % slots, self.folder)
        while True:
            for step in range(slots):
                index = (own.index + step) % slots
                candidate = own if step == 0 else _OpenSlotFile(index, self.folder)
                try:
                    fcntl.flock(candidate.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # (a candidate's file is closed as it goes)
                self._local.own_slot = candidate
                try:
                    yield
                finally:
                    fcntl.flock(candidate.fd, fcntl.LOCK_UN)
                return
            time.sleep(delay)
            delay = min(_POLL_MAX, delay * 2)

    # -- requests and tokens per minute --------------------------------------------------------------
    @property
    def rpm(self) -> int | None:
        return _lowest(self.limits.rpm, self._learned_rpm)

    @property
    def tpm(self) -> int | None:
        return _lowest(self.limits.tpm, self._learned_tpm)

    def admit(self, tokens: Callable[[], int]) -> int | None:
        """Wait until every process's pause is over and the windows have room for one request of `tokens()`
        tokens (asked only when a per-minute limit applies); record it and return its ticket (None when no
        per-minute limit applies: nothing to record)."""
        while True:
            if self.rpm is None and self.tpm is None:
                wait: int | float = self._pause_remaining()
                if wait <= 0:
                    self._unrecorded.sent(time.time(), tokens)
                    return None
            else:
                admitted = self._try_admit(tokens())
                if isinstance(admitted, int):
                    return admitted
                wait, cause = admitted
                if cause:
                    self.notices.say(wait, cause)
            time.sleep(min(max(wait, _POLL_MIN), 1.0))

    def _pause_remaining(self) -> float:
        now = time.monotonic()
        until = self._pause.until if now - self._pause.read_at < _PAUSE_READ_EVERY else None
        if until is None:
            until = pauses.pause_until(self._db(), time.time())
            self._pause = _PauseView(until, now)
        return until - time.time()

    def _try_admit(self, tokens: int) -> int | tuple[float, str]:
        # A request is counted from when it is sent here, but the API counts it from when it arrives there,
        # a little later and not always equally later: a guard keeps each request in our window a little
        # longer than in theirs (1% of the window + 50 ms, at most 1 s), so the two never disagree at the edge.
        rpm, tpm = self.rpm, self.tpm
        window = self.limits.window + min(1.0, 0.01 * self.limits.window + 0.05)
        db = self._db()
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM sent WHERE at <= ?", (now - _SENT_KEPT_WINDOWS * window,))
            db.execute("DELETE FROM outside WHERE at <= ?", (now - window,))
            paused = pauses.pause_until(db, now)
            if paused > now:
                db.execute("COMMIT")
                return paused - now, ""  # said by the process that was told it
            meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('tat_requests', 'tat_tokens', ?, ?, ?)",
                                   RATIO_KEYS).fetchall())
            # The API's charge as learned (reserved, in the window and the pacing), the estimate kept beside it.
            base, tokens = tokens, reservation(tokens, ratio_in_force(meta, now, self.limits.window))
            # (time, requests, tokens), oldest first: this machine's requests and the usage seen from outside.
            rows = db.execute("SELECT at, 1, tokens FROM sent WHERE at > ? UNION ALL SELECT at, requests, tokens "
                              "FROM outside ORDER BY 1", (now - window,)).fetchall()
            count, used = sum(row[1] for row in rows), sum(row[2] for row in rows)
            waits = [(0.0, "")]
            if rpm is not None and count + 1 > rpm:  # when enough of the oldest leave
                waits.append((_when_freed(rows, 1, count + 1 - rpm) + window - now, self._cause("requests", rpm, False)))
            if tpm is not None and rows and used + tokens > tpm:
                waits.append((_when_freed(rows, 2, used + tokens - tpm) + window - now, self._cause("tokens", tpm, False)))
            # Even pacing inside the window (GCRA): APIs enforce per-minute limits over shorter slices too
            # (OpenAI: "60,000 requests/minute may be enforced as 1,000 requests/second"), so a minute's
            # budget sent in one burst would meet 429s. Each request moves a theoretical arrival time on by
            # its share of the window; a request may go when that time is at most one 60th of the window
            # (1 s of a minute) ahead of now.
            ahead = self.limits.window / 60
            if rpm is not None:
                waits.append((meta.get("tat_requests", 0.0) - ahead - now, self._cause("requests", rpm, True)))
            if tpm is not None:
                waits.append((meta.get("tat_tokens", 0.0) - ahead - now, self._cause("tokens", tpm, True)))
            wait, cause = max(waits, key=lambda found: found[0])
            if wait > 0:
                db.execute("COMMIT")
                return float(wait), cause
            ticket = db.execute("INSERT INTO sent (at, tokens, base) VALUES (?, ?, ?)", (now, tokens, base)).lastrowid
            for key, limit, cost in (("tat_requests", rpm, 1), ("tat_tokens", tpm, tokens)):
                if limit is not None:
                    db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                               "excluded.value", (key, max(meta.get(key, 0.0), now) + self.limits.window * cost / limit))
            db.execute("COMMIT")
            return int(ticket)  # an int is a ticket; (seconds, why) is how long to wait
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def settle(self, ticket: int | None, actual_tokens: int) -> None:
        """Replace a request's estimate by the tokens the API reported for it, in the window and in the even
        pacing (which had moved on by the estimate: an estimate above the real count would otherwise slow
        every later request)."""
        if ticket is None or actual_tokens <= 0:
            return
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT tokens FROM sent WHERE id = ?", (ticket,)).fetchone()
            if row is not None:
                db.execute("UPDATE sent SET tokens = ? WHERE id = ?", (actual_tokens, ticket))
                if self.tpm is not None:
                    shift = self.limits.window * (actual_tokens - row[0]) / self.tpm
                    db.execute("UPDATE meta SET value = value + ? WHERE key = 'tat_tokens'", (shift,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def reconcile(self, seen_at: float, used_requests: int | None, used_tokens: int | None, *,
                  refused: int | None = None, refused_charge: tuple[int, int] | None = None) -> None:
        """Take the API's count as the authority: `used_*` is what a reply's headers say the API has counted
        (`limit - remaining`) when it admitted a request that was sent at `seen_at` or later. Whatever of that
        this window does not hold is usage from outside, recorded now (never before the API counted it) and
        counted for a whole window. `used_tokens` is also a sample of the API's charge per estimated token
        (charge.record_reply_sample); `refused` is the ticket of a request the API refused (a 429), which it did
        not charge: its estimate leaves the samples (its reservation stays, as a request that may be retried);
        `refused_charge` is (what the 429 says it would have charged, its estimate): charge.record_refusal.

        This window is compared from `seen_at - window` on, with every request sent since, even those the
        API had not seen yet: an overcount here only makes the outside share smaller, never a request go
        early because of it."""
        if used_requests is None and used_tokens is None and refused is None and refused_charge is None:
            return
        db = self._db()
        now = time.time()
        since = seen_at - self.limits.window
        db.execute("BEGIN IMMEDIATE")
        try:
            ours_requests, ours_tokens = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM sent WHERE at > ?", (since,)).fetchone()
            outside_requests, outside_tokens = db.execute(
                "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(tokens), 0) FROM outside WHERE at > ?", (since,)).fetchone()
            extra_requests = max(0, (used_requests or 0) - ours_requests - outside_requests)
            extra_tokens = max(0, (used_tokens or 0) - ours_tokens - outside_tokens)
            if extra_requests or extra_tokens:
                db.execute("INSERT INTO outside (at, requests, tokens) VALUES (?, ?, ?)", (now, extra_requests, extra_tokens))
            if refused is not None:
                db.execute("UPDATE sent SET base = 0 WHERE id = ?", (refused,))
            if refused_charge is not None:
                record_refusal(db, self.limits.window, seen_at, *refused_charge)
            if used_tokens is not None:
                record_reply_sample(db, self.limits.window, seen_at, used_tokens, now)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def pause_all(self, seconds: float) -> None:
        """Every process of the run holds off for `seconds` (the headers said a window is exhausted, or a 429
        came), while this one lives (capjudge.judges.client.pauses). The caller bounds and says it."""
        if seconds <= 0:
            return
        until = time.time() + seconds
        self._pause = _PauseView(max(until, self._pause.until), time.monotonic())  # seen here at once
        pauses.set_pause(self._db(), until)

    def _cause(self, window: str, limit: int, pacing: bool) -> str:
        configured = (self.limits.rpm if window == "requests" else self.limits.tpm) == limit
        return pauses.window_cause(window, limit, self.limits.window, configured, pacing)

    def close(self) -> None:
        """Close this thread's connection to the window file and its slot file."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
        self._local.db = self._local.own_slot = None

    def learn(self, limit_requests: int | None, limit_tokens: int | None) -> None:
        """Limits the API's headers name. A limit is positive: a zero or negative one is no limit to pace by."""
        if limit_requests and limit_requests > 0:
            self._learned_rpm = limit_requests
        if limit_tokens and limit_tokens > 0:
            self._learned_tpm = limit_tokens
        if self._unrecorded.first is not None and (self.rpm is not None or self.tpm is not None):
            self._record_unrecorded()

    def _record_unrecorded(self) -> None:
        """While this process knew no limit, admit recorded nothing, but the API's window holds those
        requests: the first of them (two rounds of slots: a server that names no limit by then names none)
        were noted with their estimates and join the window now, as sent when they were. For any beyond, no
        charge sample is taken until they have left the API's window (meta `unrecorded_until`): it would be
        too high. Samples another process took meanwhile, without these, are dropped."""
        noted, first, missed = self._unrecorded.take()
        if first is None:
            return
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO sent (at, tokens, base) VALUES (?, ?, ?)", ((at, n, n) for at, n in noted))
            if missed is not None:
                db.execute("INSERT INTO meta (key, value) VALUES ('unrecorded_until', ?) "
                           "ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)", (missed,))
            forget_samples_since(db, first)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.folder / "window.sqlite", timeout=60.0, isolation_level=None)
            enable_wal(db)
            # A window of the last minute's requests: losing it in a power cut costs nothing, an fsync per
            # request would cost milliseconds.
            db.execute("PRAGMA synchronous=OFF")
            self._local.db = db
        return db


class _Unrecorded:
    """The requests this process sent while it knew no limit: the first `cap` with their estimates (asked
    only for those: a run against a server that names no limit pays for no more), the time of the first, and
    of the last one not noted."""

    def __init__(self, cap: int):
        self.cap = cap
        self.first: float | None = None
        self._noted: list[tuple[float, int]] = []
        self._missed: float | None = None
        self._lock = threading.Lock()

    def sent(self, at: float, estimate: Callable[[], int]) -> None:
        tokens = estimate() if len(self._noted) < self.cap else None
        with self._lock:
            if self.first is None:
                self.first = at
            if tokens is not None and len(self._noted) < self.cap:
                self._noted.append((at, tokens))
            else:
                self._missed = at

    def take(self) -> tuple[list[tuple[float, int]], float | None, float | None]:
        """(noted, first, last missed), and forget them."""
        with self._lock:
            taken = (self._noted, self.first, self._missed)
            self._noted, self.first, self._missed = [], None, None
            return taken


@dataclass(frozen=True)
class _PauseView:
    """The machine-wide pause as this process last read it (replaced whole, so threads need no lock)."""

    until: float = 0.0  # time.time() at which the pause ends
    read_at: float = float("-inf")  # time.monotonic() of the read


class _OpenSlotFile:
    """One slot's lock file, open while this object lives: a thread's own slot lives in its thread-local
    storage (closed when the thread ends or moves to another slot)."""

    __slots__ = ("index", "fd")

    def __init__(self, index: int, folder: Path):
        self.index, self.fd = index, -1
        self.fd = os.open(folder / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def _when_freed(rows: list[tuple[float, int, int]], column: int, amount: int) -> float:
    """The time of the entry (oldest first) by whose leaving `amount` of `column` has left the window."""
    for at, *counts in rows:
        amount -= counts[column - 1]
        if amount <= 0:
            return at
    return rows[-1][0]


def _lowest(*values: int | None) -> int | None:
    known = [value for value in values if value is not None]
    return min(known) if known else None

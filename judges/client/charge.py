"""The API's own charge per request, learned from its rate-limit headers (issue 40).

capjudge reserves tokens for a request before it is sent by its own estimate (capjudge.judges.client.rate_limits:
4 characters a token, OpenAI's image tiles, the reply's `max_tokens` or 512). The API's limiter charges by its
own rule, which differs by its tokenizer, by the reply reservation it makes for a request without `max_tokens`
(its choice, not ours) and by its image handling: reserving the estimate under-used the limit by that error when
the API charged less (0.84 of the limit at a charge 16% under the estimate) and met 429s when it charged more.

What the API charged is in its headers: `limit - remaining` of `x-ratelimit-*-tokens` is what its window holds
when it admits a request. Divided by the estimates this machine sent in the same window (every process's, from
the shared budget), that is the API's charge per estimated token: the *charge ratio*. The budget reserves the
estimate times the learned ratio, so the window holds what the API holds, in both directions.

Why window totals and a median, not the change of `remaining` from one reply to the next: a reply's
`remaining` counts every request the API admitted before it, from every thread and process, in the order they
arrived there, and less what left its window meanwhile; the difference between two replies mixes requests in
flight, replies out of order and expiries, and is as often negative as not. A window's total against the
window's estimates needs no order: both sides count the same requests (sent up to this request, for one
window back). One sample can still be off (a request sent just before this one that arrived after it, a
window edge a few milliseconds apart), so the ratio used is the median of the last SAMPLES samples (or of the
last FAST, where higher: a rise is followed sooner than a fall, see learned_ratio): robust to a few bad ones.
A sample is a whole window's average, so a change of the API's charge per estimated token is followed within
one window of it (and the few replies the median spans); meanwhile the API's count stays the authority over
the window (MachineBudget.reconcile), but the requests sent are reserved at the ratio not yet learned, so a
sharp rise would cost a few 429s but for the refusal's own count (below). A change of the requests
(longer prompts) is followed at once: the estimate follows it. Usage from another machine on the same key
also counts in `limit - remaining` and so in the ratio: this machine then reserves its share of it, which
keeps the window under the limit as the outside accounting of reconcile does.

A 429 is a third signal, and the quickest: OpenAI's names what the refused request would have been charged
("... on tokens per min (TPM): Limit 30000, Used 29937, Requested 385 ..."), one request's own charge rather
than a window's average. When the charge rises, the first request sent at the old reservation meets the full
window and is refused; its `Requested` over its estimate is the new ratio at once, and it is in force for one
window (the replies' window averages have caught up by then): without it, every request the budget admits at
the old reservation meets the same wall, and the 429s go on until the averages move (0.7x to 1.3x: 4 in a row).
A 429 that names no counts (other servers) gives a bound: the request cost more than the `remaining` its
headers showed, so the ratio is at least that over its estimate.

The reply's `usage` is a second signal, and the headers win where the API sends them: `usage` is what is billed
(the tokenizer's count of the prompt, the reply's length), not what the limiter charged (OpenAI's limiter counts
at admission, by its own estimate and `max_tokens`). `usage` corrects a reservation only where no header counts
tokens (a configured CAPJUDGE_TPM against a server that sends none; MachineBudget.settle).

Hostile or broken headers cannot make the ratio 0, negative or unbounded: a sample is taken only from a
positive count against positive estimates, and every sample and the ratio are clamped to
[RATIO_MIN, RATIO_MAX]. Beyond that range the reservation stays at the bound and reconcile's outside
accounting (the API's count is the authority) still keeps the window under the limit; only throughput is lost.
"""

from __future__ import annotations

import math
import sqlite3
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from capjudge.judges.client.config import ConfigError
from capjudge.judges.client.rate_limits import RateLimitState, RefusalMessage

RATIO_MIN = 0.25  # the API charges at least a quarter of capjudge's estimate...
RATIO_MAX = 4.0  # ...and at most four times it: wider than any tokenizer's or reply reservation's error
SAMPLES = 7  # replies the median spans
FAST = 3  # the latest replies whose median, where higher, is followed at once (see learned_ratio)
SAMPLES_KEPT_WINDOWS = 10  # 10 minutes of samples (~1,200 rows at 2 replies a second): the ratio's history


def clamp_ratio(value: float) -> float | None:
    """`value` within [RATIO_MIN, RATIO_MAX]; None for a value that is no ratio at all (NaN)."""
    if math.isnan(value):
        return None
    return min(RATIO_MAX, max(RATIO_MIN, value))


def charge_sample(used_tokens: int | None, estimated_tokens: float) -> float | None:
    """One reply's view of the charge ratio: the tokens the API's window holds against this machine's estimates
    of the requests in it. None when either is not a positive count: a window the API says is empty while this
    machine has a request in it (the request itself) is a header not to learn from."""
    if used_tokens is None or used_tokens <= 0 or not estimated_tokens > 0 or math.isinf(estimated_tokens):
        return None
    return clamp_ratio(used_tokens / estimated_tokens)


def learned_ratio(latest_first: Iterable[float]) -> float | None:
    """The ratio to reserve by, from the latest samples, the latest first (the caller selects SAMPLES of them):
    their median, or the median of the latest FAST of them where that is higher. A rise of the charge is
    followed a reply or two after the samples show it (a reservation too low meets 429s), a fall over
    half the median's span (a reservation too high only leaves some of the limit unused); a single sample out
    of line moves neither. Clamped; None without a sample."""
    usable = [sample for sample in latest_first if not math.isnan(sample)]
    if not usable:
        return None
    return clamp_ratio(max(statistics.median(usable), statistics.median(usable[:FAST])))


def reservation(estimate: int, ratio: float | None) -> int:
    """The tokens to reserve for a request of `estimate` tokens at the learned ratio (the estimate itself while
    none is learned)."""
    if ratio is None or estimate <= 0:
        return estimate
    return max(1, math.ceil(estimate * ratio))


@dataclass(frozen=True)
class LearnedCharge:
    """The charge ratio a budget folder holds (read_learned_charge)."""

    ratio: float  # the API's charge per token of capjudge's estimate
    samples: int  # replies it was learned from (those still kept: the last ten windows')
    at: float  # time.time() of the latest sample (0.0: unknown)
    at_problem: str | None = None  # why the stored time was not taken, when it was no time at all

    def describe(self) -> str:
        direction = "above" if self.ratio > 1 else "below" if self.ratio < 1 else "at"
        percent = abs(self.ratio - 1) * 100
        return (f"the API charged {self.ratio:.2f}x capjudge's token estimate per request ({percent:.0f}% {direction} it; "
                f"learned from its rate-limit headers, median of the latest replies; {self.samples} kept)")


class BudgetFileError(ConfigError):
    """A budget folder or its window file that cannot be read; names it and the problem. A configuration error
    (one line, exit 2) wherever it is met: estimating, or before a run judges anything."""


def check_budget_paths(folder: Path) -> None:
    """BudgetFileError when the budget folder is not a folder, or its window file is there but not a file."""
    path = Path(folder) / "window.sqlite"
    if Path(folder).exists() and not Path(folder).is_dir():
        raise BudgetFileError(f"budget folder {folder}: is a file, not a folder")
    if path.exists() and not path.is_file():
        raise BudgetFileError(f"budget file {path}: is not a file (a folder?)")


def read_learned_charge(folder: Path) -> LearnedCharge | None:
    """The charge ratio a budget folder holds (clamped to the range capjudge.judges.client.charge states), or
    None when it holds none. Read only: a folder or file that is not there is not made. A folder that is a
    file, or a window file that is a folder, is a BudgetFileError (a run could not open it either).

    The time of the latest sample (meta `charge_at`) is only shown, never used to pace: one that is no time
    (infinite, 1e300, before 1970, after tomorrow) is taken as unknown and said (`at_problem`), and the ratio,
    which a run does use (clamped), is still shown, rather than refusing an estimate of a run that works."""
    path = Path(folder) / "window.sqlite"
    check_budget_paths(folder)
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"meta", "charge_samples"} <= tables:
                return None  # a window file from before issue 40, or one that learned nothing yet
            meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('charge_ratio', 'charge_at')").fetchall())
            (samples,) = db.execute("SELECT COUNT(*) FROM charge_samples").fetchone()
        finally:
            db.close()
    except sqlite3.Error as error:
        raise BudgetFileError(f"budget file {path}: {error}") from None
    ratio = meta.get("charge_ratio")
    if not isinstance(ratio, (int, float)) or clamp_ratio(float(ratio)) is None:
        return None
    at, at_problem = _sample_time(meta.get("charge_at"), path)
    return LearnedCharge(clamp_ratio(float(ratio)), int(samples), at, at_problem)  # type: ignore[arg-type]


def _sample_time(value: object, path: Path) -> tuple[float, str | None]:
    """(meta `charge_at` as a time, or 0.0 for unknown; why it is not one, when it was stored but is none)."""
    import time

    if value is None:
        return 0.0, None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and 0 < value <= time.time() + 86_400:
        return float(value), None
    return 0.0, f"{path}: charge_at is {str(value)[:40]!r}, not a time: the latest sample's time is unknown"


def refusal_charge(refusal: RefusalMessage | None, limits: RateLimitState, estimate: int) -> int | None:
    """What a 429 says its request of `estimate` tokens would have been charged: its message's `Requested`
    (OpenAI's wording), else a bound where the 429 can only have been about tokens per minute (a token limit
    named and not empty, requests left, no other limit named, e.g. per day): the request did not fit the
    `remaining` its headers show, so it cost more. A bound beyond RATIO_MAX x the estimate is no bound: such a
    429 was about something else (a burst limit, say), and taking it would stall the run for a window."""
    if refusal is not None and refusal.requested_tokens is not None:
        return refusal.requested_tokens
    if (refusal is not None and refusal.other_limit) or not limits.limit_tokens or limits.remaining_tokens is None:
        return None
    if limits.remaining_tokens >= limits.limit_tokens or (limits.remaining_requests is not None and limits.remaining_requests <= 0):
        return None
    bound = limits.remaining_tokens + 1
    return bound if bound <= RATIO_MAX * estimate else None


# -- the window file's side (capjudge.judges.client.budget's SQLite file, in its transaction) ----------------

def add_base_column(db: sqlite3.Connection) -> None:
    """A window file made before issue 40 has no `sent.base`; its rows count as estimates of 0 (no sample
    learns from them: they leave within a window)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(sent)")}
    if "base" not in columns:
        try:
            db.execute("ALTER TABLE sent ADD COLUMN base INTEGER NOT NULL DEFAULT 0")
        except sqlite3.OperationalError as error:  # another process added it first
            if "duplicate column" not in str(error):
                raise


def record_reply_sample(db: sqlite3.Connection, window: float, seen_at: float, used_tokens: int, now: float) -> None:
    """One sample of the API's charge per estimated token: what its window held when it admitted the request
    sent at `seen_at`, against this machine's estimates (`sent.base`) of the requests sent in the window up to
    then; the replies' ratio follows (meta `charge_ratio`; what is reserved by: ratio_in_force). No sample while the API's window may still hold
    requests no window here recorded (meta `unrecorded_until`, see MachineBudget.learn)."""
    db.execute("DELETE FROM charge_samples WHERE at <= ?", (now - SAMPLES_KEPT_WINDOWS * window,))
    unrecorded = db.execute("SELECT value FROM meta WHERE key = 'unrecorded_until'").fetchone()
    if unrecorded is not None and seen_at - window <= unrecorded[0]:
        return
    (estimated,) = db.execute("SELECT COALESCE(SUM(base), 0) FROM sent WHERE at > ? AND at <= ?",
                              (seen_at - window, seen_at)).fetchone()
    sample = charge_sample(used_tokens, estimated)
    if sample is None:
        return
    db.execute("INSERT INTO charge_samples (at, ratio) VALUES (?, ?)", (seen_at, sample))
    _put_replies_ratio(db, seen_at)


def record_refusal(db: sqlite3.Connection, window: float, seen_at: float, charged: int, estimate: int) -> None:
    """A 429 for a request of `estimate` tokens (by capjudge's count) that the API would have charged
    `charged` (its message's `Requested`, or a bound: its `remaining` + 1). That request's own ratio is kept
    apart from the replies' (meta `request_ratio`, `request_at`) and counts for one window from the latest
    such refusal (ratio_in_force): two within a window keep the higher ratio and the later time, since 429s
    for requests sent in one order may arrive in another."""
    sample = charge_sample(charged, estimate)
    if sample is None:
        return
    meta = _meta(db, "request_ratio", "request_at")
    at = seen_at
    if meta.get("request_at", float("-inf")) > seen_at - window:
        sample = max(sample, meta.get("request_ratio", sample))
        at = max(at, meta["request_at"])
    db.executemany("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   (("request_ratio", sample), ("request_at", at)))


def forget_samples_since(db: sqlite3.Connection, first: float) -> None:
    """Drop the reply samples taken from `first` on (they were too high: the window here missed requests the
    API's held) and recompute the replies' ratio from those before; with none before, it stays as it was (too
    high if those samples set it: slower, never over)."""
    db.execute("DELETE FROM charge_samples WHERE at >= ?", (first,))
    latest = db.execute("SELECT at FROM charge_samples ORDER BY at DESC, rowid DESC LIMIT 1").fetchone()
    if latest is not None:
        _put_replies_ratio(db, latest[0])


RATIO_KEYS = ("charge_ratio", "request_ratio", "request_at")  # the meta keys ratio_in_force reads


def ratio_in_force(meta: Mapping[str, object], now: float, window: float) -> float | None:
    """The ratio to reserve by at `now`, from the window file's meta (RATIO_KEYS): the replies' ratio, or a
    refusal's own ratio where that is higher and its latest refusal less than a window before `now` (after a
    window, the replies' samples hold the new charge too, and a refusal must not outlive what it saw: a
    server that sends headers only with its 429s, or the next run, would otherwise keep it for good)."""
    def number(key: str) -> float | None:
        value = meta.get(key)
        return clamp_ratio(float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    ratio = number("charge_ratio")
    request, request_at = number("request_ratio"), meta.get("request_at")
    if request is not None and isinstance(request_at, (int, float)) and now - window < request_at <= now + window:
        ratio = request if ratio is None else max(ratio, request)
    return ratio


def _put_replies_ratio(db: sqlite3.Connection, at: float) -> None:
    """The replies' ratio (learned_ratio over the latest SAMPLES samples) into meta `charge_ratio`."""
    latest = db.execute("SELECT ratio FROM charge_samples ORDER BY at DESC, rowid DESC LIMIT ?", (SAMPLES,)).fetchall()
    ratio = learned_ratio(row[0] for row in latest)
    if ratio is not None:
        db.executemany("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                       (("charge_ratio", ratio), ("charge_at", at)))


def _meta(db: sqlite3.Connection, *keys: str) -> dict[str, float]:
    marks = ", ".join("?" * len(keys))
    return {key: value for key, value in db.execute(f"SELECT key, value FROM meta WHERE key IN ({marks})", keys)
            if isinstance(value, (int, float))}

"""Per-item values read from run files: what counts as a number, what counts as no value, and what is refused.

A logged item value is a finite number (bool included), or `null` for an item without a value (unjudged, or
a metric that does not apply to it). Anything else where a number belongs — a string, NaN, an infinity, a
number no float holds (`10**400`), or one so large that a mean of a few of them overflows (`-1e308`) — is a
broken log: averaging it would rank a model on garbage, or drop every item and fall back on lmms-eval's
aggregate without a word. It is refused, naming the value, so the caller can name the file and the item.

`MAX_MAGNITUDE` is 2**53: beyond it a float no longer holds every integer, no scoring scale comes near it, and
any realistic number of items (under 10**290) sums without overflow.
"""

from __future__ import annotations

import math
from typing import Any

MAX_MAGNITUDE = 2.0**53


class NotANumber(ValueError):
    """A value where a number belongs that is not a usable number; the message says what it is."""


def item_number(raw: Any) -> float | None:
    """`raw` as a float; None for `None` (no value). Raises NotANumber for anything else that is not a finite
    number within ±MAX_MAGNITUDE."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        return float(raw)
    if not isinstance(raw, (int, float)):
        shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:37] + "..."
        raise NotANumber(f"{shown} is {_kind(raw)}, not a number (log null for an item without a value)")
    if isinstance(raw, float) and math.isnan(raw):
        raise NotANumber("NaN is not a number (log null for an item without a value)")
    if isinstance(raw, float) and math.isinf(raw):
        raise NotANumber(f"{raw} is not a finite number")
    if abs(raw) > MAX_MAGNITUDE:
        # str() of a huge int is refused by Python itself (more than 4300 digits): say its size instead.
        shown = repr(raw) if isinstance(raw, float) or raw.bit_length() < 64 else f"an integer of {raw.bit_length()} bits"
        raise NotANumber(f"{shown} is beyond ±2**53, the largest magnitude a score may have")
    return float(raw)


def _kind(raw: Any) -> str:
    return {str: "text", list: "a list", dict: "an object"}.get(type(raw), f"a {type(raw).__name__}")

"""The one small-sample rule for every interval capjudge prints (README "Small samples: one rule").

A bootstrap interval is shown only when it can measure something:

1. it rests on at least `MIN_UNITS` resampling units: the items, or the clips where clips are resampled
   (from 2-4 units a percentile interval is a handful of distinct resample values: `-1.83 [-2.00, -1.66]` from
   two items reads as a finding and is none);
2. it has width: when every resample gives the same value (a share of 0 or 1, one rating, a constant shift) the
   bracket is zero-width and says nothing about how far the value could move. capjudge does not replace it by
   an exact binomial or other bound: the value is shown alone, with this reason;
3. its value is identified by the data (a fit the data cannot separate, e.g. a model that won every battle,
   or length that moves with the models): those callers give their own reason and claim no value either.

Below the rule a figure is its value alone and the reason why it has no interval, in every table, JSON and page;
a verdict read off an interval (sensitivity's pass/fail, "the CI excludes 0", "A above B") needs a shown one.
The leaderboard's length control has its own floor of the same size (`length_control.MIN_ITEMS_PER_MODEL`).
"""

from __future__ import annotations

import math

from capjudge.judges.text import plural  # the one pluralisation helper; also imported from here (sensitivity)
from capjudge.metrics.statistics.value_ci import ValueCI

# The fewest resampling units (items or clips) an interval is shown from.
MIN_UNITS = 5

ZERO_WIDTH_REASON = "every resample gives the same value (a zero-width interval measures nothing)"


def too_few_units(n_units: int, unit: str = "item") -> str:
    """Why an interval from `n_units` resampling units is not shown ("" when there are enough)."""
    if n_units >= MIN_UNITS:
        return ""
    return f"from {plural(n_units, unit)}: capjudge shows an interval from {MIN_UNITS} {unit}s or more"


def is_zero_width(low: float | None, high: float | None, tolerance: float | None = None) -> bool:
    """Both ends present and (to `tolerance`, by default a billionth of their magnitude: resamples that give one
    value differ in their last digits) the same."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return False
    if tolerance is None:
        tolerance = 1e-9 * max(1.0, abs(low), abs(high))
    return high - low <= tolerance


def withheld_reason(figure: ValueCI, n_units: int, unit: str = "item", tolerance: float | None = None) -> str:
    """Why `figure`'s interval is not shown under the rule ("" when it is shown, or when it has none)."""
    if figure.ci_low is None or figure.ci_high is None:
        return ""
    return too_few_units(n_units, unit) or (ZERO_WIDTH_REASON if is_zero_width(figure.ci_low, figure.ci_high,
                                                                               tolerance) else "")


def under_rule(figure: ValueCI, n_units: int, unit: str = "item",
               tolerance: float | None = None) -> tuple[ValueCI, str]:
    """`figure` as it may be shown, and why its interval was taken away ("": kept, or it had none)."""
    reason = withheld_reason(figure, n_units, unit, tolerance)
    return (ValueCI(figure.value), reason) if reason else (figure, "")

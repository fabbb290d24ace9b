"""A value with its interval's ends: the one shape every figure with a confidence interval is read as.

Whoever computed the figure (a coefficient with its bootstrap, a run's aggregate read back from its results,
a leaderboard mean), a reader that shows or compares a value and its interval takes this type. Richer results
(`Coefficient`, `AlphaResult`, `Estimate`, VATEX-EVAL's `ProtocolStatistic`, length bias's `LengthSlope` and
`ExcessLengthBias`) keep their other facts and give this view as `value_ci`. The
interval alone, with how it was made, is `capjudge.metrics.statistics.bootstrap.Interval`.

A `Scale` is the range a score can take (a judge declares it: G-VEval 0-100, AnyCap 0-4). A value or an
interval end beyond it is no score the judge could give: a model's mean cannot be there, so such a figure is
an extrapolation (a length-controlled score) or an artefact of few items, and readers show it flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ValueCI:
    """A value (None, or NaN: not measurable) and its interval's ends (None: no interval)."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def measurable(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    def outside(self, scale: Scale | None) -> tuple[str, ...]:
        """Which of `value`, `ci_low`, `ci_high` lie outside `scale` (none without a scale)."""
        if scale is None:
            return ()
        return tuple(part for part in ("value", "ci_low", "ci_high")
                     if not scale.holds(getattr(self, part)))

    def text(self, digits: int = 3) -> str:
        """`0.712 [0.650, 0.770]`, the value alone without an interval, or `not measurable`."""
        if not self.measurable:
            return "not measurable"
        ci = (f" [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]"
              if self.ci_low is not None and self.ci_high is not None else "")
        return f"{self.value:.{digits}f}{ci}"


@dataclass(frozen=True)
class Scale:
    """The closed range [low, high] a score can take."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"a scale runs from a finite low to a higher finite high, not {self.low}..{self.high}")

    def holds(self, value: float | None) -> bool:
        """True for a number within the range, and for no number at all (None, NaN: nothing to flag)."""
        if value is None or math.isnan(value):
            return True
        # Round-off of a mean of values on the scale's ends must not count as leaving it.
        slack = 1e-9 * (self.high - self.low)
        return self.low - slack <= value <= self.high + slack

    def text(self) -> str:
        """`0-100`, `0-4`, `0.5-1.5`."""
        return f"{self.low:g}-{self.high:g}"

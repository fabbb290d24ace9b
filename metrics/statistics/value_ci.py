"""A value with its interval's ends: the one shape every figure with a confidence interval is read as.

Whoever computed the figure (a coefficient with its bootstrap, a run's aggregate read back from its results,
a leaderboard mean), a reader that shows or compares a value and its interval takes this type. Richer results
(`Coefficient`, `AlphaResult`, `Estimate`, VATEX-EVAL's `ProtocolStatistic`, length bias's `LengthSlope` and
`ExcessLengthBias`) keep their other facts and give this view as `value_ci`. The
interval alone, with how it was made, is `capjudge.metrics.statistics.bootstrap.Interval`.
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

    def text(self, digits: int = 3) -> str:
        """`0.712 [0.650, 0.770]`, the value alone without an interval, or `not measurable`."""
        if not self.measurable:
            return "not measurable"
        ci = (f" [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]"
              if self.ci_low is not None and self.ci_high is not None else "")
        return f"{self.value:.{digits}f}{ci}"

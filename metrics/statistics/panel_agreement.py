"""How the members of a judge panel agree: the same statistics as the annotator ceiling, with judges as raters.

* Kendall tau-b between every pair of members, with its item-bootstrap interval (the code the annotator
  ceiling and the judge-human figures use, so the three are on one scale);
* Krippendorff's alpha across the members, at the judge's level of measurement (interval for G-VEval's 0-100
  scores, ordinal for AnyCap's 0-4), with its bootstrap interval;
* each member's offset from the panel: the mean of (member - panel) over the items both scored, with a BCa
  bootstrap interval from scipy. A harsh member is negative, a lenient one positive.

Input is an (items, members) matrix with NaN where a member did not judge an item, and the panel's score per
item (NaN where the panel did not reach its quorum).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

from capjudge.metrics.statistics.annotator_agreement import (
    AlphaLevel,
    AlphaResult,
    PairAgreement,
    annotator_agreement,
)
from capjudge.metrics.statistics.correlation import DEFAULT_SETTINGS, BootstrapSettings, Coefficient
from capjudge.metrics.statistics.small_samples import is_zero_width, too_few_units
from capjudge.metrics.statistics.value_ci import ValueCI


@dataclass(frozen=True)
class MemberOffset:
    """One member's offset from the panel: the mean (member - panel) over the items both scored, with its
    interval (value None when no item was). Computed here; read back from a run's aggregates by the item
    report (capjudge.metrics.item_report.panel)."""

    member: str
    offset: ValueCI


@dataclass(frozen=True)
class PanelAgreement:
    members: tuple[str, ...]
    alpha: AlphaResult
    pairs: tuple[PairAgreement[str, Coefficient], ...]
    offsets: tuple[MemberOffset, ...]

    def pair(self, first: str, second: str) -> PairAgreement[str, Coefficient]:
        return next(p for p in self.pairs if {p.first, p.second} == {first, second})

    def offset(self, member: str) -> MemberOffset:
        return next(o for o in self.offsets if o.member == member)


def panel_agreement(scores: np.ndarray, panel: np.ndarray, members: tuple[str, ...], level: AlphaLevel,
                    settings: BootstrapSettings = DEFAULT_SETTINGS) -> PanelAgreement:
    """Agreement among the columns of `scores` (one per member, NaN: not judged) and each one's offset from
    `panel` (one value per item, NaN: below quorum)."""
    scores = np.asarray(scores, dtype=np.float64)
    panel = np.asarray(panel, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] != len(members) or panel.shape != (scores.shape[0],):
        raise ValueError(f"expected an (items, {len(members)}) matrix and one panel score per item, "
                         f"got {scores.shape} and {panel.shape}")
    agreement = annotator_agreement(scores, settings=settings)
    pairs = tuple(PairAgreement(members[p.first], members[p.second], p.kendall_b) for p in agreement.annotator_pairs)
    offsets = tuple(_offset(member, scores[:, column], panel, settings) for column, member in enumerate(members))
    return PanelAgreement(members, agreement.alpha(level), pairs, offsets)


def _offset(member: str, values: np.ndarray, panel: np.ndarray, settings: BootstrapSettings) -> MemberOffset:
    both = np.isfinite(values) & np.isfinite(panel)
    differences = values[both] - panel[both]
    n = int(differences.size)
    if n == 0:
        return MemberOffset(member, ValueCI(None))
    mean = float(differences.mean())
    # The small-sample rule (capjudge.metrics.statistics.small_samples): from too few items, or when every item has
    # the same offset (a zero-width interval; BCa is undefined there too), the offset alone.
    if settings.n_resamples <= 0 or too_few_units(n) or np.ptp(differences) == 0:
        return MemberOffset(member, ValueCI(mean))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=stats.DegenerateDataWarning)
        interval = stats.bootstrap((differences,), np.mean, n_resamples=settings.n_resamples,
                                   confidence_level=settings.confidence, method="BCa",
                                   rng=np.random.default_rng(settings.seed)).confidence_interval
    low, high = float(interval.low), float(interval.high)
    if not (math.isfinite(low) and math.isfinite(high)) or is_zero_width(low, high):
        return MemberOffset(member, ValueCI(mean))
    return MemberOffset(member, ValueCI(mean, low, high))

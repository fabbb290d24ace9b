"""Candidates grouped by the clip (item) they describe, and clip resamples for a clustered bootstrap.

Several candidates of one clip share its video, its references and often its raters, so they are not
independent: intervals resample CLIPS with replacement and keep each clip's candidates together. A statistic
that is a ratio of per-clip sums (a mean, a within-clip regression slope) is then one matrix product per
resample: row b of `resample_counts` says how many times each clip was drawn, exactly as if the resample had
been materialised by repetition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capjudge.metrics.statistics.bootstrap import draw_item_indices, item_counts


class ClusterError(ValueError):
    """Cluster ids that do not fit the values they label."""


@dataclass(frozen=True)
class Clusters:
    """Which cluster each candidate is in: clusters numbered in sorted order of their ids."""

    ids: tuple[str, ...]  # sorted distinct cluster ids
    of_candidate: np.ndarray  # (n_candidates,) index into ids

    @classmethod
    def of(cls, cluster_ids: Sequence[str] | np.ndarray) -> Clusters:
        labels = np.asarray([str(each) for each in cluster_ids], dtype=object)
        if labels.ndim != 1 or labels.size == 0:
            raise ClusterError("need at least one candidate with a cluster id")
        ids, of_candidate = np.unique(labels.astype(str), return_inverse=True)
        return cls(tuple(ids.tolist()), of_candidate.astype(np.int64))

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def n_candidates(self) -> int:
        return int(self.of_candidate.size)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """(n,) per-cluster sums of a per-candidate vector."""
        return np.bincount(self.of_candidate, weights=values, minlength=self.n)

    def means(self, values: np.ndarray) -> np.ndarray:
        """(n_candidates,) each candidate's cluster mean of `values` (for demeaning within cluster)."""
        sizes = np.bincount(self.of_candidate, minlength=self.n)
        return (self.sums(values) / sizes)[self.of_candidate]

    def resample_counts(self, n_resamples: int, seed: int) -> np.ndarray:
        """(n_resamples, n) times each cluster is drawn: `draw_item_indices(n, n_resamples, seed)` counted."""
        return item_counts(self.n, draw_item_indices(self.n, n_resamples, seed))

    def aligned(self, values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
        """`values` as a finite float vector with one value per candidate, or a ClusterError naming `what`."""
        vector = np.asarray(values, dtype=np.float64)
        if vector.shape != (self.n_candidates,):
            raise ClusterError(f"{what}: {vector.size} values for {self.n_candidates} candidates")
        bad = np.flatnonzero(~np.isfinite(vector))
        if bad.size:
            row = int(bad[0])
            raise ClusterError(f"{what}: candidate {row} (cluster {self.ids[self.of_candidate[row]]!r}) is not finite")
        return vector

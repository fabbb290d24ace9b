"""`capjudge vatex`'s human-preference table (issue #49 item 4): on VATEX-EVAL's same-clip pairs the raters' mean
does not tie, how often each pointwise scorer orders the two captions as the humans do (the judge's scores,
caption length, each classic baseline), beside the raters' own leave-one-out agreement as the ceiling; with
and without ties, each with a clip-clustered bootstrap interval (`capjudge.metrics.arena.human_preferences`).

Every row is computed on the same pairs: all of them, or at most K per clip (`--pairs-per-clip K`, drawn by a
generator seeded from (seed, clip id), so a clip's sample does not depend on the other clips). A pair a scorer
has no value for is counted as missing, not as a disagreement. A pairwise judge's row (verdicts from both
orders of each pair) is not here: `capjudge arena` has no verdict file this command reads yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from capjudge.judges.datasets.vatex_eval import VatexCandidate
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.human_preferences import (
    Agreement,
    human_pairs,
    rater_ceiling,
    sample_pairs,
    score_agreement,
)
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.statistics.value_ci import ValueCI

METHOD = (
    "A human preference: two candidates of one clip whose raters' mean ratings differ. Agreement: the share of "
    "those pairs a scorer orders as the raters' mean does; 'ties count': every pair it scores (its tie counts as "
    "not agreeing); 'without ties': only the pairs it does not tie (as CapArena reports both). The raters' ceiling: "
    "each rater against the mean of the other two, pooled over raters. Brackets: {confidence:.0%} percentile CI "
    "from a clip-clustered bootstrap ({n_resamples} resamples of the clips, seed {seed})."
)


@dataclass(frozen=True)
class PreferenceTable:
    n_same_clip_pairs: int  # every same-clip pair of the file
    n_tied: int  # pairs the raters' mean ties: no preference
    n_preferences: int  # the others
    n_compared: int  # the preferences every row is computed on (all, or at most pairs_per_clip per clip)
    pairs_per_clip: int | None
    rows: tuple[Agreement, ...]  # the scorers in the order given, then the raters' ceiling
    method: str
    not_made: str = ""  # why there is no table (a file whose raters tie every same-clip pair): one line


def preference_table(candidates: Sequence[VatexCandidate], scorers: Sequence[tuple[str, np.ndarray]],
                     pairs_per_clip: int | None = None, n_resamples: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> PreferenceTable:
    """`scorers`: (name, one value per candidate of `candidates`, NaN for none). A file with no preference gets
    a table without rows that says why (the correlations above it still stand); a scorer's values that cannot
    be compared raise ArenaError (one line)."""
    settings = ArenaSettings(n_resamples=n_resamples, seed=seed, confidence=confidence)
    method = METHOD.format(confidence=confidence, n_resamples=n_resamples, seed=seed)
    try:
        every = human_pairs(candidates)
    except ArenaError as error:
        return PreferenceTable(0, 0, 0, 0, pairs_per_clip, (), method, not_made=str(error))
    pairs = every if pairs_per_clip is None else sample_pairs(every, pairs_per_clip, seed)
    rows = [score_agreement(pairs, values, name, settings) for name, values in scorers]
    return PreferenceTable(every.n_same_clip_pairs, every.n_tied, len(every.pairs), len(pairs.pairs), pairs_per_clip,
                           (*rows, rater_ceiling(pairs, settings)), method)


def preference_lines(table: PreferenceTable) -> list[str]:
    """The plain-text table `capjudge vatex` prints after its correlations."""
    if table.not_made:
        return [f"Agreement with humans' preferences: none to compare with: {table.not_made}"]
    sampled = (f"; at most {table.pairs_per_clip} per clip (seeded): {table.n_compared:,} compared"
               if table.pairs_per_clip is not None else "")
    header = ["scorer", "agreement, ties count (%)", "agreement without ties (%)", "scored", "ties", "missing"]
    rows = [[r.scorer, _percent(r.with_ties), _percent(r.without_ties), f"{r.n_scored:,}", f"{r.n_ties:,}",
             f"{r.n_missing:,}"] for r in table.rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        f"Agreement with humans' preferences: {table.n_preferences:,} same-clip pairs the raters prefer one of "
        f"({table.n_tied:,} of {table.n_same_clip_pairs:,} tied by their mean, left out){sampled}",
        "",
        "  ".join(cell.ljust(width) for cell, width in zip(header, widths)).rstrip(),
        "  ".join("-" * width for width in widths),
        *("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows),
        "",
        f"- {table.method}",
    ]


def _percent(figure: ValueCI) -> str:
    if not figure.measurable or figure.value is None:
        return "n/a"
    if figure.ci_low is None or figure.ci_high is None:
        return f"{100 * figure.value:.1f}"
    return f"{100 * figure.value:.1f} [{100 * figure.ci_low:.1f}, {100 * figure.ci_high:.1f}]"

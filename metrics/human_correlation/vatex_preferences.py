"""`capjudge vatex`'s human-preference table (issue #49 item 4): on VATEX-EVAL's same-clip pairs the raters' mean
does not tie, how often each pointwise scorer orders the two captions as the humans do (the judge's scores,
caption length, each classic baseline), beside the raters' own leave-one-out agreement as the ceiling; with
and without ties, each with a clip-clustered bootstrap interval (`capjudge.metrics.arena.human_preferences`).

Every row is computed on the same pairs: all of them, or at most K per clip (`--pairs-per-clip K`, drawn by a
generator seeded from (seed, clip id), so a clip's sample does not depend on the other clips). A pair a scorer
has no value for is counted as missing, not as a disagreement.

A pairwise judge's row (`--arena-verdicts FILE`, the verdict file of `capjudge arena --candidates`, read by
capjudge.metrics.human_correlation.vatex_arena): its verdict after both orders on the same pairs, a
position-inconsistent verdict a tie, a pair with a failed order or not in the file counted missing; one row per
judge (or panel member), before the raters' ceiling. How many of the compared pairs the file covers is said;
when it covers fewer than all, every row is computed again on the covered pairs alone (`ArenaCoverage.rows`),
so the pairwise judge is also compared with the others on exactly its own pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from capjudge.judges.datasets.vatex_eval import VatexCandidate
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.human_preferences import (
    Agreement,
    HumanPairs,
    human_pairs,
    rater_ceiling,
    sample_pairs,
    score_agreement,
    verdict_agreement,
)
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.human_correlation.vatex_arena import ArenaVerdicts
from capjudge.metrics.statistics.value_ci import ValueCI

METHOD = (
    "A human preference: two candidates of one clip whose raters' mean ratings differ. Agreement: the share of "
    "those pairs a scorer orders as the raters' mean does; 'ties count': every pair it scores (its tie counts as "
    "not agreeing); 'without ties': only the pairs it does not tie (as CapArena reports both). The raters' ceiling: "
    "each rater against the mean of the other two, pooled over raters. Brackets: {confidence:.0%} percentile CI "
    "from a clip-clustered bootstrap ({n_resamples} resamples of the clips, seed {seed})."
)


@dataclass(frozen=True)
class ArenaCoverage:
    """What a pairwise judge's verdict file covers of the compared pairs."""

    source: str
    judge: str
    command: str
    n_covered: int  # compared pairs the file has a record of (for every judge or member in it)
    n_failed: int  # of those, pairs with an order that failed (any judge or member): counted missing
    rows: tuple[Agreement, ...] = ()  # every row again on the covered pairs alone (when they are not all)
    # When it covers only part: the file's own pair sampling, when it is not this table's (else "").
    other_sampling: str = ""


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
    arena: ArenaCoverage | None = None  # with a pairwise judge's verdict file


def preference_table(candidates: Sequence[VatexCandidate], scorers: Sequence[tuple[str, np.ndarray]],
                     pairs_per_clip: int | None = None, n_resamples: int = 1000, seed: int = 0,
                     confidence: float = 0.95, arena: ArenaVerdicts | None = None) -> PreferenceTable:
    """`scorers`: (name, one value per candidate of `candidates`, NaN for none); `arena`: a pairwise judge's
    verdicts. A file with no preference gets a table without rows that says why (the correlations above it
    still stand); a scorer's values that cannot be compared, or verdicts covering none of the compared pairs,
    raise ArenaError (one line)."""
    settings = ArenaSettings(n_resamples=n_resamples, seed=seed, confidence=confidence)
    method = METHOD.format(confidence=confidence, n_resamples=n_resamples, seed=seed)
    try:
        every = human_pairs(candidates)
    except ArenaError as error:
        if arena is not None:  # verdicts to compare and nothing to compare them with: not a table to print
            raise ArenaError(f"{arena.source}: no human preference to compare its verdicts with: {error}") from None
        return PreferenceTable(0, 0, 0, 0, pairs_per_clip, (), method, not_made=str(error))
    pairs = every if pairs_per_clip is None else sample_pairs(every, pairs_per_clip, seed)
    rows = _rows(pairs, scorers, arena, settings)
    coverage = None if arena is None else _coverage(pairs, scorers, arena, pairs_per_clip, seed, settings)
    return PreferenceTable(every.n_same_clip_pairs, every.n_tied, len(every.pairs), len(pairs.pairs), pairs_per_clip,
                           rows, method, arena=coverage)


def _rows(pairs: HumanPairs, scorers: Sequence[tuple[str, np.ndarray]], arena: ArenaVerdicts | None,
          settings: ArenaSettings) -> tuple[Agreement, ...]:
    """The scorers' rows, the pairwise judge's (one per judge or member), then the raters' ceiling."""
    rows = [score_agreement(pairs, values, name, settings) for name, values in scorers]
    if arena is not None:
        rows += [verdict_agreement(pairs, verdicts, pairwise_row_name(arena, member), settings)
                 for member, verdicts in arena.by_member.items()]
    return (*rows, rater_ceiling(pairs, settings))


def pairwise_row_name(arena: ArenaVerdicts, member: str) -> str:
    """The row of one judge (or panel member) of a verdict file."""
    who = arena.judge if len(arena.by_member) == 1 else f"{member} of {arena.judge}"
    return f"pairwise judge ({who}, both orders)"


def _coverage(pairs: HumanPairs, scorers: Sequence[tuple[str, np.ndarray]], arena: ArenaVerdicts,
              pairs_per_clip: int | None, seed: int, settings: ArenaSettings) -> ArenaCoverage:
    covered = [pair for pair in pairs.pairs if all(pair.key in v for v in arena.by_member.values())]
    if not covered:
        sampled = f"at most {pairs_per_clip} per clip, seed {seed}" if pairs_per_clip is not None else "all of them"
        raise ArenaError(f"{arena.source}: its verdicts cover none of the {len(pairs.pairs):,} human-preference pairs "
                         f"compared ({sampled}); it was made by {arena.command[:200]!r}: give this command the same "
                         "--pairs-per-clip and --seed")
    failed = sum(any(v.get(pair.key) is None for v in arena.by_member.values()) for pair in covered)
    if len(covered) == len(pairs.pairs):
        return ArenaCoverage(arena.source, arena.judge, arena.command, len(covered), failed)
    rows = _rows(replace(pairs, pairs=tuple(covered)), scorers, arena, settings)
    return ArenaCoverage(arena.source, arena.judge, arena.command, len(covered), failed, rows,
                         _other_sampling(arena.command, pairs_per_clip, seed))


def _other_sampling(command: str, pairs_per_clip: int | None, seed: int) -> str:
    """What the verdict file's command drew (its --pairs-per-clip and --seed, as `capjudge arena` records them),
    said when it is not what this table drew: the likely reason it covers only part. "" when the same, or when
    the command does not say (a file made otherwise is read the same way; its coverage is shown either way)."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return ""

    def flag(name: str) -> str | None:
        return words[words.index(name) + 1] if name in words[:-1] else None

    theirs_k, theirs_seed = flag("--pairs-per-clip"), flag("--seed")
    if theirs_seed is None:
        return ""
    ours_k = None if pairs_per_clip is None else str(pairs_per_clip)
    same = theirs_k == ours_k and (theirs_k is None or theirs_seed == str(seed))
    if same:
        return ""

    def drew(k: str | None, at: str) -> str:
        return "every same-clip pair" if k is None else f"--pairs-per-clip {k} --seed {at}"

    return (f"the verdict file drew {drew(theirs_k, theirs_seed)}, this table {drew(ours_k, str(seed))}: give both "
            "commands the same to compare on the same pairs")


def preference_lines(table: PreferenceTable) -> list[str]:
    """The plain-text table `capjudge vatex` prints after its correlations."""
    if table.not_made:
        return [f"Agreement with humans' preferences: none to compare with: {table.not_made}"]
    sampled = (f"; at most {table.pairs_per_clip} per clip (seeded): {table.n_compared:,} compared"
               if table.pairs_per_clip is not None else "")
    lines = [
        f"Agreement with humans' preferences: {table.n_preferences:,} same-clip pairs the raters prefer one of "
        f"({table.n_tied:,} of {table.n_same_clip_pairs:,} tied by their mean, left out){sampled}",
        "",
        *_row_lines(table.rows),
        "",
        f"- {table.method}",
    ]
    arena = table.arena
    if arena is not None:
        lines.append(f"- The pairwise judge: {arena.source} ({arena.judge}) covers {arena.n_covered:,} of the "
                     f"{table.n_compared:,} pairs compared ({arena.n_failed:,} of them with an order that failed); a "
                     "pair not covered or with a failed order is missing, a verdict that flips with the order a tie.")
        if arena.other_sampling:
            lines.append(f"- Only part covered: {arena.other_sampling}.")
        if arena.rows:
            lines += ["", f"On the {arena.n_covered:,} pairs the verdict file covers:", "", *_row_lines(arena.rows)]
    return lines


def _row_lines(agreements: Sequence[Agreement]) -> list[str]:
    header = ["scorer", "agreement, ties count (%)", "agreement without ties (%)", "scored", "ties", "missing"]
    rows = [[r.scorer, _percent(r.with_ties), _percent(r.without_ties), f"{r.n_scored:,}", f"{r.n_ties:,}",
             f"{r.n_missing:,}"] for r in agreements]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(header, widths)).rstrip(),
        "  ".join("-" * width for width in widths),
        *("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows),
        *(f"No interval for {r.scorer}: {r.no_interval}." for r in agreements if r.no_interval),
    ]


def _percent(figure: ValueCI) -> str:
    if not figure.measurable or figure.value is None:
        return "n/a"
    if figure.ci_low is None or figure.ci_high is None:
        return f"{100 * figure.value:.1f}"
    return f"{100 * figure.value:.1f} [{100 * figure.ci_low:.1f}, {100 * figure.ci_high:.1f}]"

"""A judge's sensitivity, from its judgments of originals and their perturbations: what `capjudge sensitivity`
reports (the judging itself: capjudge.tasks.runs.sensitivity.judging).

Per scorer (the one judge; with a panel the panel and each member), perturbation and score dimension with an
expectation: the paired shift (`shifts.paired_shift`: mean perturbed - original with a clip-clustered
percentile CI and a verdict), the share of candidates the judge moved the sound way, and the pairs left out
because either side was not judged (an unjudged caption is never a score of 0). A variant that changed
nothing (a one-word caption's truncation or shuffle) is no test of the judge: its pair is left out and counted
(`n_unchanged`), and a perturbation none of whose variants changed anything has no verdict. Every pair set of
a report is resampled with the same seed, so when no judgment failed every row shares one set of clip draws.

Per item: the original and each perturbed text exactly as the judge saw them, with what changed, and every
scorer's judgment of each (its scores, or why it has none).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from capjudge.metrics.sensitivity.perturbations import Perturbation, changes_nothing
from capjudge.metrics.sensitivity.shifts import DEFAULT_RESAMPLES, ShiftResult, paired_shift
from capjudge.metrics.statistics.small_samples import MIN_UNITS, ZERO_WIDTH_REASON, is_zero_width, plural

# Directions a judge also satisfies by not moving ("not_up": staying put is sound); see shifts.py.
_LENIENT = frozenset({"not_up", "not_down"})
_SIGN = {"down": -1, "not_up": -1, "up": 1, "not_down": 1}
# Of the JSON file; a change of its fields is a new version. 2 added each judgment's reply text, failure
# detail and (for a panel's judgment) which members it pooled; a reader takes both (metrics/sensitivity/items_file).
# Since, optional fields a version-2 reader may ignore: per shift row `n_unchanged` and `not_measured` (why it
# has no figures), and `unchanged` (per perturbation, the variants that changed nothing).
FORMAT_VERSION = 2
NO_CHANGED_VARIANT = "no variant changed its caption"
NO_PAIR_JUDGED = "no pair judged on both sides"
# The small-sample rule (capjudge.metrics.statistics.small_samples): from fewer clips a clip-clustered interval is
# a handful of resample values (two clips gave "-1.83 [-2.00, -1.66]" and a pass), and a verdict read off it is
# none. Below this many clips a row keeps no shift and says why.
MIN_CLIPS_FOR_VERDICT = MIN_UNITS


@dataclass(frozen=True)
class Judged:
    """One scorer's judgment of one caption: its scores (all None when unjudged) and why it has none."""

    scores: Mapping[str, float | None]
    failure: str | None  # the failure kind; None when judged
    cache_hit: bool
    reply: str | None = None  # the judge's reply text, as received (None: none received; a panel has none)
    failure_detail: str | None = None  # what the failure was, in words (None when judged)
    pooling: Mapping[str, Any] | None = None  # a panel's judgment: judged_by, not_judged {member: kind}, quorum


@dataclass(frozen=True)
class JudgedCaption:
    """A caption as the judge saw it, and each scorer's judgment of it."""

    perturbation: str | None  # None: the original
    text: str
    change: str  # what differs from the original ("" for the original)
    judgments: Mapping[str, Judged]  # by scorer


@dataclass(frozen=True)
class SensitivityItem:
    item_id: str
    cluster: str  # the clip: candidates of one clip are resampled together
    original: JudgedCaption
    variants: tuple[JudgedCaption, ...]  # one per perturbation, in the report's perturbation order


@dataclass(frozen=True)
class SensitivityRow:
    """One scorer's response to one perturbation in one dimension."""

    scorer: str
    perturbation: str
    dimension: str
    shift: ShiftResult | None  # None: no changed variant had both sides judged (see `not_measured`)
    share_sound: float | None  # candidates moved the sound way (strictly, for "down"/"up"; or kept, for "not_*")
    n_left_out: int  # pairs with either side unjudged (of the variants that changed something)
    n_unchanged: int = 0  # pairs whose variant changed nothing: no test of the judge, left out
    n_clips_judged: int = 0  # clips with a changed pair judged on both sides (kept when too few for a verdict)

    @property
    def not_measured(self) -> str | None:
        """Why the row has no shift (None: it has one)."""
        if self.shift is not None:
            return None
        if self.n_clips_judged:
            return (f"only {plural(self.n_clips_judged, 'clip')} with a changed pair judged on both sides: a verdict "
                    f"needs at least {MIN_CLIPS_FOR_VERDICT}")
        return NO_PAIR_JUDGED if self.n_left_out else NO_CHANGED_VARIANT


@dataclass(frozen=True)
class RunCounts:
    """What the judging cost: judgments asked ((1 + perturbations) x items, distinct texts once), requests sent."""

    items: int
    perturbations: int
    judgments: int
    requests: int
    cache_hits: int
    unjudged: int  # judgments without a score (by any scorer)


@dataclass(frozen=True)
class SensitivityReport:
    task: str
    judge: str  # the judge's model (or panel) as its identity names it
    scorers: tuple[str, ...]
    perturbations: tuple[Perturbation, ...]
    items: tuple[SensitivityItem, ...]
    rows: tuple[SensitivityRow, ...]
    counts: RunCounts
    seed: int
    n_resamples: int
    confidence: float

    def unchanged(self) -> dict[str, int]:
        """Perturbation -> how many of its variants changed nothing (every perturbation, 0 included)."""
        return {perturbation.name: sum(changes_nothing(item.original.text, item.variants[position].text)
                                       for item in self.items)
                for position, perturbation in enumerate(self.perturbations)}

    def without_verdict(self, scorer: str) -> dict[str, str]:
        """Perturbation -> why `scorer` has no verdict on it (no row of it measured)."""
        rows = [row for row in self.rows if row.scorer == scorer]
        return {name: next(row.not_measured for row in rows if row.perturbation == name)
                for name in dict.fromkeys(row.perturbation for row in rows)
                if all(row.shift is None for row in rows if row.perturbation == name)}

    def failed_perturbations(self, scorer: str) -> dict[str, list[str]]:
        """Perturbation -> the dimensions `scorer` failed (measured rows whose verdict is not sound)."""
        failed: dict[str, list[str]] = {}
        for row in self.rows:
            if row.scorer == scorer and row.shift is not None and not row.shift.passed:
                failed.setdefault(row.perturbation, []).append(row.dimension)
        return failed


def share_sound(shift: np.ndarray, expected: str) -> float:
    """The share of candidates whose shift is on the sound side: strictly for "down"/"up", or not on the wrong
    side for "not_up"/"not_down"."""
    signed = _SIGN[expected] * shift
    return float(np.mean(signed >= 0 if expected in _LENIENT else signed > 0))


def _dimensions(items: Sequence[SensitivityItem], scorer: str) -> list[str]:
    """Every score name the scorer gave any caption, in the order it first gave them."""
    names: dict[str, None] = {}
    for item in items:
        for caption in (item.original, *item.variants):
            judged = caption.judgments.get(scorer)
            if judged is not None:
                names.update(dict.fromkeys(judged.scores))
    return list(names)


def sensitivity_rows(
    items: Sequence[SensitivityItem],
    perturbations: Sequence[Perturbation],
    scorers: Iterable[str],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[SensitivityRow, ...]:
    """Every (scorer, perturbation, dimension with an expectation) of the items' judgments."""
    rows = []
    for scorer in scorers:
        dimensions = _dimensions(items, scorer)
        for position, perturbation in enumerate(perturbations):
            for dimension in dimensions:
                expected = perturbation.expected(dimension)
                if expected is None:
                    continue
                original, perturbed, clusters = [], [], []
                unchanged = 0
                for item in items:
                    if changes_nothing(item.original.text, item.variants[position].text):
                        unchanged += 1  # the same caption twice: a shift of 0 that tests nothing
                        continue
                    before = item.original.judgments[scorer].scores.get(dimension)
                    after = item.variants[position].judgments[scorer].scores.get(dimension)
                    if before is not None and after is not None:
                        original.append(before)
                        perturbed.append(after)
                        clusters.append(item.cluster)
                left_out = len(items) - unchanged - len(original)
                n_clips = len(set(clusters))
                if n_clips < MIN_CLIPS_FOR_VERDICT:
                    rows.append(SensitivityRow(scorer, perturbation.name, dimension, None, None, left_out, unchanged,
                                               n_clips))
                    continue
                shift = paired_shift(original, perturbed, clusters, expected, perturbation=perturbation.name,
                                     dimension=dimension, n_resamples=n_resamples, seed=seed, confidence=confidence)
                sound = share_sound(np.asarray(perturbed) - np.asarray(original), expected)
                rows.append(SensitivityRow(scorer, perturbation.name, dimension, shift, sound, left_out, unchanged))
    return tuple(rows)


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------


def _number(value: float | None, digits: int = 2) -> str:
    """`+1.25`; a value that is not 0 never prints as `+0.00` (then two significant digits): the verdict reads the
    sign of the interval's ends, and `[+0.00, +82]` read as "wrong direction" beside `[-0.01, +82]`, "no effect"."""
    if value is None:
        return "n/a"
    text = f"{value:+.{digits}f}"
    return f"{value:+.2g}" if value != 0 and float(text) == 0 else text


def _shift_cell(shift: ShiftResult) -> str:
    """The mean shift and its CI; a zero-width CI (every clip resample gives one shift, e.g. no score moved) is
    the value alone and says so, as the small-sample rule asks of every interval."""
    if is_zero_width(shift.interval.low, shift.interval.high):
        return f"{_number(shift.mean_shift)} (no interval: {ZERO_WIDTH_REASON})"
    return f"{_number(shift.mean_shift)} [{_number(shift.interval.low)}, {_number(shift.interval.high)}]"


def markdown(report: SensitivityReport, command: str = "") -> str:
    """The table `capjudge sensitivity` prints: per scorer, every measured row, then which perturbations fooled it."""
    counts = report.counts
    planned = counts.items * (1 + counts.perturbations)
    # A variant that reads as another caption of its item (the original, when it changed nothing) is one judgment.
    repeated = ("" if planned == counts.judgments
                else f" ({planned - counts.judgments} repeat another caption of their item: judged once)")
    lines = [
        f"# What fools the judge: {report.judge} on {report.task}",
        "",
        f"{counts.items} items x (1 original + {counts.perturbations} perturbations) = {planned} captions"
        f"{repeated}, {counts.judgments} judgments; "
        f"{counts.requests} requests sent, {counts.cache_hits} judgments from the cache, {counts.unjudged} unjudged.",
        f"Shift = perturbed - original score, mean over items; {report.confidence:.0%} CI: clip bootstrap, "
        f"{report.n_resamples} resamples, seed {report.seed}. Verdict from the CI: expected direction / no effect "
        "/ wrong direction. \"down\" passes only in the expected direction; \"not_up\" passes unless the score rose.",
    ]
    if command:
        lines += ["", f"Command: `{command}`"]
    unchanged = {name: n for name, n in report.unchanged().items() if n}
    if unchanged:
        lines += ["", f"Not tests of the judge: {sum(unchanged.values())} perturbed captions changed nothing ("
                  + ", ".join(f"{name} {n}" for name, n in unchanged.items())
                  + "; e.g. a one-word caption cut or shuffled): left out of the pairs, counted as unchanged."]
    for scorer in report.scorers:
        lines += ["", f"## {scorer}", "",
                  "| perturbation | dimension | expected | mean shift [CI] | moved the sound way | moved the wrong way "
                  "| verdict | passes | pairs (left out unjudged; unchanged) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in report.rows:
            if row.scorer != scorer:
                continue
            shift = row.shift
            if shift is None:
                lines.append(f"| {row.perturbation} | {row.dimension} | | not measured: {row.not_measured} "
                             f"| | | | | {_pairs(0, row)} |")
                continue
            lines.append(
                f"| {row.perturbation} | {row.dimension} | {shift.expected} | {_shift_cell(shift)} | "
                f"{row.share_sound:.0%} | "
                f"{shift.share_wrong_way:.0%} | {shift.verdict} | {'yes' if shift.passed else 'NO'} | "
                f"{_pairs(shift.n_candidates, row)} |")
        failed = report.failed_perturbations(scorer)
        measured = list(dict.fromkeys(row.perturbation for row in report.rows if row.scorer == scorer and row.shift))
        passed = [name for name in measured if name not in failed]
        lines += ["", f"Passes: {', '.join(passed) or 'none'}. Fooled by: "
                  + ("; ".join(f"{name} ({', '.join(dims)})" for name, dims in failed.items()) or "nothing") + "."]
        without = report.without_verdict(scorer)
        if without:
            lines.append("No verdict (nothing measured): " + "; ".join(f"{name} ({why})" for name, why in without.items())
                         + ".")
    return "\n".join(lines) + "\n"


def _pairs(measured: int, row: SensitivityRow) -> str:
    """The table's pairs cell: pairs measured (left out as unjudged[; unchanged, no test])."""
    unchanged = f"; {row.n_unchanged} unchanged" if row.n_unchanged else ""
    return f"{measured} ({row.n_left_out}{unchanged})"


def _judged_json(judged: Judged) -> dict[str, Any]:
    pooled = {"panel": dict(judged.pooling)} if judged.pooling else {}
    return {"scores": dict(judged.scores), "failure": judged.failure, "cache_hit": judged.cache_hit,
            "failure_detail": judged.failure_detail, "reply": judged.reply, **pooled}


def _caption_json(caption: JudgedCaption) -> dict[str, Any]:
    return {"perturbation": caption.perturbation, "text": caption.text, "change": caption.change,
            "judgments": {scorer: _judged_json(judged) for scorer, judged in caption.judgments.items()}}


def _row_json(row: SensitivityRow) -> dict[str, Any]:
    shift = row.shift
    measured = {} if shift is None else {
        "expected": shift.expected, "mean_shift": shift.mean_shift,
        "ci": [shift.interval.low, shift.interval.high], "share_sound": row.share_sound,
        "share_wrong_way": shift.share_wrong_way, "verdict": shift.verdict, "passed": shift.passed,
        "n_candidates": shift.n_candidates, "n_clusters": shift.n_clusters,
    }
    why = {} if shift is not None else {"not_measured": row.not_measured}
    return {"scorer": row.scorer, "perturbation": row.perturbation, "dimension": row.dimension,
            "measured": shift is not None, **measured, **why, "n_left_out": row.n_left_out,
            "n_unchanged": row.n_unchanged}


def summary_json(report: SensitivityReport, command: str = "") -> dict[str, Any]:
    """The report without its items: what `--format json` prints."""
    return {
        "format_version": FORMAT_VERSION,
        "task": report.task,
        "judge": report.judge,
        "scorers": list(report.scorers),
        "command": command,
        "seed": report.seed,
        "n_resamples": report.n_resamples,
        "confidence": report.confidence,
        "counts": asdict(report.counts),
        "perturbations": [{"name": p.name, "describe": p.describe, "expectations": [list(e) for e in p.expectations]}
                          for p in report.perturbations],
        "unchanged": report.unchanged(),
        "shifts": [_row_json(row) for row in report.rows],
        "fooled_by": {scorer: report.failed_perturbations(scorer) for scorer in report.scorers},
        "no_verdict": {scorer: report.without_verdict(scorer) for scorer in report.scorers},
    }


def sensitivity_json(report: SensitivityReport, command: str = "") -> dict[str, Any]:
    """The whole report: the summary, and per item the exact texts the judge saw with every judgment."""
    return {**summary_json(report, command),
            "items": [{"item_id": item.item_id, "cluster": item.cluster, "original": _caption_json(item.original),
                       "variants": [_caption_json(variant) for variant in item.variants]} for item in report.items]}

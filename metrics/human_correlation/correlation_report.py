"""A correlation report — every scorer against every human target, overall and per group — and its renderings.

JSON shape (read by other tools; keep stable). Scorer keys map to target keys map to exactly::

    {"kendall_b": {"value": v, "ci": [lo, hi]}, "kendall_c": {...}, "pearson": {...}, "spearman": {...}, "n": n}

on the -1..1 scale (``value``/``ci`` are null when undefined; the reason is in ``_details``). Keys that start
with "_" are not scorers: ``_details`` (p-values, interval methods, missing counts, mirrored per scorer and
target), ``_groups`` (the same scorer/target shape per group), ``_ceiling`` (annotator agreement),
``_comparisons`` (paired differences) and ``_settings``.

Markdown shows coefficients x100, as the G-VEval tables do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.metrics.statistics.annotator_agreement import AgreementResult, AlphaResult, annotator_agreement
from capjudge.metrics.statistics.bootstrap import COEFFICIENT_NAMES, CoefficientName
from capjudge.metrics.statistics.compare import CorrelationDifference, compare_scorers
from capjudge.metrics.statistics.correlation import (
    DEFAULT_ANNOTATOR_MODE,
    DEFAULT_SETTINGS,
    AnnotatorMode,
    BootstrapSettings,
    Coefficient,
    CorrelationResult,
    as_human_matrix,
    correlate,
)

COEFFICIENT_LABELS: dict[str, str] = {
    "kendall_b": "Kendall τb",
    "kendall_c": "Kendall τc",
    "pearson": "Pearson r",
    "spearman": "Spearman ρ",
}
ALL_ITEMS = None  # the group value of rows computed over every item


@dataclass(frozen=True)
class ReportRow:
    scorer: str
    target: str
    group: str | None  # None: all items
    result: CorrelationResult


@dataclass(frozen=True)
class ComparisonRow:
    target: str
    group: str | None
    differences: tuple[CorrelationDifference, ...]


@dataclass(frozen=True)
class CorrelationReport:
    rows: tuple[ReportRow, ...]
    settings: BootstrapSettings
    annotators: AnnotatorMode
    ceiling: tuple[AgreementResult, ...] = ()
    comparisons: tuple[ComparisonRow, ...] = ()
    group_field: str | None = None

    def row(self, scorer: str, target: str, group: str | None = ALL_ITEMS) -> ReportRow:
        for row in self.rows:
            if (row.scorer, row.target, row.group) == (scorer, target, group):
                return row
        raise KeyError(f"no row for scorer {scorer!r}, target {target!r}, group {group!r}")


def build_report(
    scorers: Mapping[str, Sequence[float | None] | np.ndarray],
    targets: Mapping[str, Sequence[Any] | np.ndarray],
    *,
    groups: Sequence[str] | None = None,
    group_field: str | None = None,
    annotators: AnnotatorMode = DEFAULT_ANNOTATOR_MODE,
    settings: BootstrapSettings = DEFAULT_SETTINGS,
    coefficients: Iterable[CoefficientName] = COEFFICIENT_NAMES,
    item_ids: Sequence[str] | None = None,
    ceiling: bool = True,
    comparisons: Sequence[tuple[str, str]] = (),
) -> CorrelationReport:
    """Correlate every scorer with every target, over all items and within each group.

    ``scorers`` map a name to per-item scores (None = missing); ``targets`` map a name to per-item human scores
    (a number or a list of annotators' numbers per item). ``groups`` gives each item's group label.
    """
    coefficients = tuple(coefficients)
    subsets: list[tuple[str | None, np.ndarray]] = [(ALL_ITEMS, np.arange(_item_count(scorers, targets)))]
    if groups is not None:
        labels = np.array([str(g) for g in groups], dtype=object)
        subsets += [(label, np.flatnonzero(labels == label)) for label in sorted(set(labels.tolist()))]
    rows: list[ReportRow] = []
    comparison_rows: list[ComparisonRow] = []
    for group, members in subsets:
        ids = [item_ids[i] for i in members] if item_ids is not None else [str(i) for i in members]
        for target, human in targets.items():
            human_subset = _take(human, members)
            for scorer, scores in scorers.items():
                result = correlate(
                    _take(scores, members), human_subset, annotators=annotators, coefficients=coefficients,
                    settings=settings, item_ids=ids,
                )
                rows.append(ReportRow(scorer, target, group, result))
            for first, second in comparisons:
                differences = compare_scorers(
                    _take(scorers[first], members), _take(scorers[second], members), human_subset,
                    names=(first, second), annotators=annotators, coefficients=coefficients, settings=settings,
                    item_ids=ids,
                )
                comparison_rows.append(ComparisonRow(target, group, differences))
    agreement: list[AgreementResult] = []
    if ceiling:
        for target, human in targets.items():
            matrix = as_human_matrix(human, item_ids=item_ids)[0]
            if matrix.shape[1] >= 2:  # a ceiling needs at least two annotators
                agreement.append(annotator_agreement(matrix, target, settings))
    return CorrelationReport(
        rows=tuple(rows), settings=settings, annotators=annotators, ceiling=tuple(agreement),
        comparisons=tuple(comparison_rows), group_field=group_field,
    )


def _item_count(scorers: Mapping[str, Any], targets: Mapping[str, Any]) -> int:
    lengths = {len(v) for v in scorers.values()} | {len(v) for v in targets.values()}
    if len(lengths) != 1:
        raise ValueError(f"scorers and targets must cover the same items; got lengths {sorted(lengths)}")
    return lengths.pop()


def _take(values: Sequence[Any] | np.ndarray, members: np.ndarray) -> Sequence[Any] | np.ndarray:
    if isinstance(values, np.ndarray):
        return values[members]
    return [values[i] for i in members]


# ---------------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------------


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(value)


def coefficient_json(coefficient: Coefficient) -> dict[str, Any]:
    ci = None if coefficient.ci_low is None else [_rounded(coefficient.ci_low), _rounded(coefficient.ci_high)]
    return {"value": _rounded(coefficient.value), "ci": ci}


def result_json(result: CorrelationResult) -> dict[str, Any]:
    body: dict[str, Any] = {c.name: coefficient_json(c) for c in result.coefficients}
    body["n"] = result.n_pairs
    return body


def result_details_json(result: CorrelationResult) -> dict[str, Any]:
    details: dict[str, Any] = {
        "n_items": result.n_items,
        "annotators": result.annotators,
        "missing": vars(result.missing).copy(),
    }
    for c in result.coefficients:
        details[c.name] = {
            "p_value": c.p_value,
            "ci_method": c.ci_method,
            "intervals": {i.method: [i.low, i.high] for i in c.intervals},
            "n_resamples_defined": c.n_resamples,
            "n_resamples_undefined": c.n_undefined_resamples,
            "undefined_reason": c.undefined_reason,
            "no_interval": c.no_interval,  # why no interval is shown (the small-sample rule), "" when one is
        }
    return details


def alpha_json(alpha: AlphaResult) -> dict[str, Any]:
    ci = None if alpha.ci_low is None else [alpha.ci_low, alpha.ci_high]
    return {
        "value": alpha.value, "ci": ci, "ci_method": alpha.ci_method, "n_items": alpha.n_items,
        "n_annotators": alpha.n_annotators, "undefined_reason": alpha.undefined_reason,
    }


def ceiling_json(agreement: AgreementResult) -> dict[str, Any]:
    body: dict[str, Any] = {f"krippendorff_alpha_{a.level}": alpha_json(a) for a in agreement.alphas}
    body["kendall_b_between_annotators"] = {
        f"{p.first}~{p.second}": {
            **coefficient_json(p.kendall_b), "n": p.kendall_b.n, "undefined_reason": p.kendall_b.undefined_reason,
        }
        for p in agreement.annotator_pairs
    }
    return body


def difference_json(d: CorrelationDifference) -> dict[str, Any]:
    return {
        "coefficient": d.coefficient, "first": d.first, "second": d.second,
        "first_value": d.first_value, "second_value": d.second_value, "difference": d.difference,
        "ci": None if d.ci_low is None else [d.ci_low, d.ci_high], "ci_method": d.ci_method, "n": d.n,
        "n_items": d.n_items, "undefined_reason": d.undefined_reason,
        "williams": None if d.williams is None else vars(d.williams).copy(),
    }


def report_to_json(report: CorrelationReport) -> dict[str, Any]:
    def scorer_target_tree(group: str | None, render) -> dict[str, Any]:
        tree: dict[str, Any] = {}
        for row in report.rows:
            if row.group == group:
                tree.setdefault(row.scorer, {})[row.target] = render(row.result)
        return tree

    out = scorer_target_tree(ALL_ITEMS, result_json)
    out["_details"] = scorer_target_tree(ALL_ITEMS, result_details_json)
    group_labels = _group_labels(report)
    if group_labels:
        out["_groups"] = {
            _group_key(report, g): {**scorer_target_tree(g, result_json), "_details": scorer_target_tree(g, result_details_json)}
            for g in group_labels
        }
    if report.ceiling:
        out["_ceiling"] = {a.target: ceiling_json(a) for a in report.ceiling}
    if report.comparisons:
        out["_comparisons"] = [
            {"target": c.target, "group": c.group, "differences": [difference_json(d) for d in c.differences]}
            for c in report.comparisons
        ]
    out["_settings"] = {**vars(report.settings), "annotators": report.annotators, "scale": "-1..1"}
    return out


def _group_labels(report: CorrelationReport) -> list[str]:
    return sorted({row.group for row in report.rows if row.group is not None})


def _group_key(report: CorrelationReport, group: str) -> str:
    return f"{report.group_field}={group}" if report.group_field else group


# ---------------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------------


def _x100(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def coefficient_cell(c: Coefficient) -> str:
    if c.value is None:
        return f"undefined ({c.undefined_reason})"
    if c.ci_low is None:
        return _x100(c.value)
    return f"{_x100(c.value)} [{_x100(c.ci_low)}, {_x100(c.ci_high)}]"


def report_to_markdown(report: CorrelationReport, title: str = "Judge–human correlation") -> str:
    s = report.settings
    if s.n_resamples > 0:
        intervals = (f"with {100 * s.confidence:g}% confidence intervals "
                     f"({s.ci_method}, {s.n_resamples} item-level bootstrap resamples, seed {s.seed})")
    else:
        intervals = "without confidence intervals (no bootstrap resamples)"
    lines = [
        f"# {title}",
        "",
        f"Coefficients ×100 {intervals}; several annotators: `{report.annotators}`. n = pairs (items).",
    ]
    for group in [ALL_ITEMS, *_group_labels(report)]:
        rows = [r for r in report.rows if r.group == group]
        for target in dict.fromkeys(r.target for r in rows):
            heading = f"## Target `{target}`" + ("" if group is None else f" — {_group_key(report, group)}")
            lines += ["", heading, ""]
            lines += _result_table([(r.scorer, r.result) for r in rows if r.target == target])
    if report.ceiling:
        lines += ["", "## Annotator ceiling", ""] + _ceiling_table(report.ceiling)
    if report.comparisons:
        lines += ["", "## Paired differences (first − second)", ""] + _comparison_table(report)
    return "\n".join(lines) + "\n"


def _result_table(entries: list[tuple[str, CorrelationResult]]) -> list[str]:
    names = list(dict.fromkeys(c.name for _, result in entries for c in result.coefficients))
    header = ["scorer", *(COEFFICIENT_LABELS.get(n, n) for n in names), "n (items)", "dropped"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for scorer, result in entries:
        cells = [scorer, *(coefficient_cell(result[n]) for n in names)]
        cells += [f"{result.n_pairs} ({result.n_items})", str(result.missing.pairs_dropped)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _alpha_cell(alpha: AlphaResult) -> str:
    if alpha.value is None:
        return f"undefined ({alpha.undefined_reason})"
    if alpha.ci_low is None:
        return f"{alpha.value:.3f}"
    return f"{alpha.value:.3f} [{alpha.ci_low:.3f}, {alpha.ci_high:.3f}]"


def _ceiling_table(ceiling: Sequence[AgreementResult]) -> list[str]:
    pair_names = list(dict.fromkeys(f"{p.first}~{p.second}" for a in ceiling for p in a.annotator_pairs))
    header = ["target", "Krippendorff α (interval)", "Krippendorff α (ordinal)", *(f"τb ×100 annotators {p}" for p in pair_names)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for agreement in ceiling:
        pairs = {f"{p.first}~{p.second}": coefficient_cell(p.kendall_b) for p in agreement.annotator_pairs}
        cells = [agreement.target, _alpha_cell(agreement.alpha("interval")), _alpha_cell(agreement.alpha("ordinal"))]
        cells += [pairs.get(name, "—") for name in pair_names]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _comparison_table(report: CorrelationReport) -> list[str]:
    header = ["target", "group", "first", "second", "coefficient", "difference ×100 [CI]", "Williams t (p)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report.comparisons:
        for d in row.differences:
            if d.difference is None:
                cell = f"undefined ({d.undefined_reason})"
            elif d.ci_low is None:
                cell = _x100(d.difference)
            else:
                cell = f"{_x100(d.difference)} [{_x100(d.ci_low)}, {_x100(d.ci_high)}]"
            williams = "—" if d.williams is None else f"{d.williams.t:.2f} ({d.williams.p_value:.3g})"
            group = "all" if row.group is None else _group_key(report, row.group)
            lines.append("| " + " | ".join([row.target, group, d.first, d.second, COEFFICIENT_LABELS[d.coefficient], cell, williams]) + " |")
    return lines

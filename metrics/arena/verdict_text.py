"""The arena report of a verdict file (`verdict_report`) as Markdown (OUT/arena_<task>.md, what `capjudge arena`
prints) and as JSON (OUT/arena_<task>.json, what `--format json` prints): per judge, position bias (overall
first, then each rubric dimension) with item-clustered intervals, then the Bradley-Terry ranking beside the
length-controlled one, and the method. Model and judge names come from the file: in the Markdown file they are
escaped so that a name cannot break a table; in the terminal (`report_terminal`, what `capjudge arena` and
`capjudge report --arena` print) they are shown as they are, on one printable line, as a reader types them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capjudge.judges.text import one_line, plural
from capjudge.metrics.arena.bradley_terry import ELO_SCALE_TEXT
from capjudge.metrics.arena.position_bias import PositionBias
from capjudge.metrics.arena.ratings import ArenaRatings
from capjudge.metrics.arena.style_control import METHOD as LENGTH_METHOD
from capjudge.metrics.arena.verdict_report import (
    DimensionFigures,
    MemberReport,
    VerdictReport,
)
from capjudge.metrics.statistics.small_samples import MIN_UNITS
from capjudge.metrics.statistics.value_ci import ValueCI

SCHEMA = "capjudge-arena-report/1"
STAMP_KEY = "run"  # the JSON's stamp (the verdict file's), as the sensitivity outputs name theirs

POSITION_METHOD = (
    "Position bias (Shi et al., 'Judging the Judges', arXiv 2406.07791), per pair of captions asked in both "
    "orders: position consistency is the share of pairs with the same verdict in both orders; preference "
    "fairness is (recency-preferred - primacy-preferred) / pairs, in [-1, 1], -1 a judge that always prefers "
    "the caption shown first, +1 the one shown second, 0 no net preference; order-flipped is the share whose "
    "winner itself reverses with the order. Pairs with a failed order are counted apart, never as a tie.")
RANKING_METHOD = (
    "Ranking: Bradley-Terry maximum likelihood on the pairs' battles (scipy's optimiser), " + ELO_SCALE_TEXT +
    ". A pair decided the same way in both orders is a battle won as both say (a tie half a win each); a "
    "position-inconsistent pair is a tie; a pair with a failed order is no battle.")


def _ci(value: ValueCI, digits: int, scale: float = 1.0) -> str:
    if value.value is None:
        return "—"
    text = f"{scale * value.value:.{digits}f}"
    if value.ci_low is None or value.ci_high is None:
        return text
    return f"{text} [{scale * value.ci_low:.{digits}f}, {scale * value.ci_high:.{digits}f}]"


def _escape(text: str) -> str:
    """A name from the file, safe in a Markdown table cell and on one line."""
    text = one_line(text)
    for special in "\\|*_`[]<>#":
        text = text.replace(special, "\\" + special)
    return text


# How a name from the file is shown: `_escape` in the Markdown file, `one_line` in the terminal.
Shown = Callable[[str], str]


def _interval_json(value: ValueCI) -> dict[str, float | None]:
    return {"value": value.value, "ci_low": value.ci_low, "ci_high": value.ci_high}


def _bias_json(bias: PositionBias) -> dict[str, Any]:
    return {"pairs": bias.n_pairs, "pairs_with_a_failed_order": bias.n_failed, "consistent": bias.n_consistent,
            "primacy_preferred": bias.n_primacy, "recency_preferred": bias.n_recency, "order_flipped": bias.n_flipped,
            "position_consistency": _interval_json(bias.consistency),
            "preference_fairness": _interval_json(bias.fairness), "order_flipped_share": _interval_json(bias.flipped),
            "no_interval": dict(bias.no_interval)}


def _ratings_json(figures: DimensionFigures) -> dict[str, Any]:
    ratings = figures.ratings
    if ratings is None:
        return {"reason": figures.no_ratings}
    return {"ranking": list(ratings.ranking),
            "elo": {m: _interval_json(ratings.ratings[m]) for m in ratings.ranking},
            "win_rates": {a: {b: ratings.win_rates.get((a, b)) for b in ratings.models if b != a} for a in ratings.models},
            "battles": ratings.n_battles, "ties": ratings.n_ties,
            "position_inconsistent_ties": figures.bias.inconsistent_ties, "order_flipped": figures.bias.n_flipped,
            "undefined_resamples": ratings.n_undefined, "no_interval": dict(ratings.no_interval)}


def _member_json(member: MemberReport) -> dict[str, Any]:
    controlled = member.length_controlled
    return {
        "judge": member.member, "judge_model": member.judge_model, "pairs": member.pairs,
        "failed_orders": member.failed_orders,
        "position_bias": {f.dimension: _bias_json(f.bias) for f in member.dimensions},
        "ranking": {f.dimension: _ratings_json(f) for f in member.dimensions},
        "length_controlled": {"reason": member.no_length_control} if controlled is None else {
            "ranking": list(controlled.ranking),
            "elo": {m: _interval_json(controlled.ratings[m]) for m in controlled.ranking},
            "gamma_elo_per_rms_length_difference": _interval_json(controlled.gamma),
            "length_scale": controlled.length_scale, "battles": controlled.n_battles,
            "undefined_resamples": controlled.n_undefined, "no_interval": dict(controlled.no_interval),
            "no_gamma_interval": controlled.no_gamma_interval},
    }


def verdict_report_json(report: VerdictReport) -> dict[str, Any]:
    """The report as one JSON object; its stamp first (what a rerun checks before replacing the file)."""
    settings = report.settings
    return {
        STAMP_KEY: report.stamp, "format": SCHEMA, "task": report.task, "judge": report.judge,
        "command": report.command, "verdict_file": report.verdict_file, "models": list(report.models),
        "items": report.n_items, "pairs": report.n_pairs,
        "resamples": settings.n_resamples, "seed": settings.seed, "confidence": settings.confidence,
        "judges": [_member_json(member) for member in report.members],
        "method": {"position_bias": POSITION_METHOD, "ranking": RANKING_METHOD, "length_controlled": LENGTH_METHOD},
    }


_BIAS_FIGURES = {"consistency": "position consistency", "fairness": "preference fairness",
                 "flipped": "order-flipped share"}


def _bias_lines(member: MemberReport, confidence: float, shown: Shown) -> list[str]:
    """The judge's position bias, a row per dimension (overall first). No row starts with the judge's name:
    the printed summary's rows do (`capjudge arena`'s own table, printed above the report)."""
    lines = [f"| dimension | pairs | pairs with a failed order | position consistency [{confidence:.0%} CI] | "
             "preference fairness | order-flipped share | position-inconsistent ties |",
             "|---|---:|---:|---|---|---|---:|"]
    for figures in member.dimensions:
        bias = figures.bias
        lines.append(f"| {shown(figures.dimension)} | {bias.n_valid} | {bias.n_failed} | {_ci(bias.consistency, 2)} | "
                     f"{_ci(bias.fairness, 2)} | {_ci(bias.flipped, 2)} | {bias.inconsistent_ties} |")
    notes = [f"No interval for {shown(figures.dimension)} {_BIAS_FIGURES[name]}: {shown(reason)}."
             for figures in member.dimensions for name, reason in figures.bias.no_interval.items()]
    return lines + ([""] + notes if notes else []) + [""]


def _ranking_lines(member: MemberReport, confidence: float, shown: Shown) -> list[str]:
    overall = member.overall
    lines = [f"### {shown(member.member)} ({shown(member.judge_model)})", "", "Position bias:", "",
             *_bias_lines(member, confidence, shown), "Ranking:", ""]
    if overall.ratings is None:
        return lines + [f"No ranking: {shown(overall.no_ratings)}", ""]
    ratings: ArenaRatings = overall.ratings
    controlled = member.length_controlled
    lines += [f"| # | model | Elo [{confidence:.0%} CI] | length-controlled Elo [{confidence:.0%} CI] | battles |",
              "|---:|---|---|---|---:|"]
    ranks = ratings.ranks
    for model in ratings.ranking:
        rank = ranks[model]
        beside = _ci(controlled.ratings[model], 0) if controlled is not None else "—"
        battles = sum(n for (a, _), n in ratings.battles.items() if a == model)
        lines.append(f"| {rank} | {shown(model)} | {_ci(ratings.ratings[model], 0)} | {beside} | {battles} |")
    inconsistent = plural(overall.bias.inconsistent_ties, "position-inconsistent pair")
    lines += ["", f"{plural(ratings.n_battles, 'battle')} on {plural(ratings.n_items, 'item')}, "
              f"{plural(ratings.n_ties, 'tie')}, of which {inconsistent} counted as ties ({overall.bias.n_flipped} of "
              f"them flipped the winner); {plural(overall.bias.n_failed, 'pair')} with a failed order left out."]
    lines += [f"No interval for {shown(model)}: {shown(reason)}." for model, reason in ratings.no_interval.items()]
    if controlled is None:
        lines.append(f"No length-controlled ranking: {shown(member.no_length_control)}")
    else:
        lines.append(f"Length-controlled ranking: {', '.join(map(shown, controlled.ranking))}; a typical length "
                     f"difference is worth {_ci(controlled.gamma, 0)} Elo points (> 0: the longer caption wins).")
        lines += [f"No length-controlled interval for {shown(name)}: {shown(reason)}."
                  for name, reason in controlled.no_interval.items()]
        if controlled.no_gamma_interval:
            lines.append(f"No interval for the length difference's worth: {shown(controlled.no_gamma_interval)}.")
    others = [f for f in member.dimensions[1:]]
    if others:
        lines += ["", "| dimension | ranking (Elo) |", "|---|---|"]
        for figures in others:
            cell = (f"no ranking: {shown(figures.no_ratings)}" if figures.ratings is None else ", ".join(
                f"{shown(m)} {figures.ratings.ratings[m].value:.0f}" for m in figures.ratings.ranking))
            lines.append(f"| {shown(figures.dimension)} | {cell} |")
    return lines + [""]


def report_markdown(report: VerdictReport) -> str:
    """The report as the Markdown file holds it: every name from the file escaped."""
    return _report_text(report, _escape)


def report_terminal(report: VerdictReport) -> str:
    """The report as the terminal prints it: the same text, names as they are (no Markdown escapes a reader
    would have to undo to copy a model's name), each on one printable line."""
    return _report_text(report, one_line)


def _report_text(report: VerdictReport, shown: Shown) -> str:
    settings = report.settings
    lines = [f"## Arena report: {shown(report.task)}, {shown(report.judge)}", "",
             f"{plural(len(report.models), 'model')} ({', '.join(map(shown, report.models))}), "
             f"{plural(report.n_items, 'item')}, {plural(report.n_pairs, 'pair')} per judge, each asked in both "
             f"orders; verdicts from {shown(report.verdict_file)}. "
             "Preference fairness < 0: the judge prefers the caption shown first; > 0 the one shown second.", ""]
    for member in report.members:
        lines += _ranking_lines(member, settings.confidence, shown)
    if not report.members:
        lines += ["No verdicts: the file holds no pairs.", ""]
    lines += ["### Method", "", POSITION_METHOD, "", RANKING_METHOD, "", LENGTH_METHOD, "",
              f"Intervals: {settings.confidence:.0%} percentile, item-clustered bootstrap ({settings.n_resamples} "
              f"resamples of the items, each item's pairs kept together, seed {settings.seed}); none from fewer "
              f"than {MIN_UNITS} items or of zero width (the small-sample rule: README, Small samples).", "",
              # A code span in both: nothing in it is escaped, and one line keeps it whole.
              f"Command: `{one_line(report.command).replace('`', chr(39))}`"]
    return "\n".join(lines) + "\n"

"""`capjudge vatex`'s report: a scorer's VATEX-EVAL correlations under every protocol, beside caption length and
the human ceiling, as a table or JSON.

A scorer is one value per rated candidate, read from

* a capjudge / lmms-eval run of a VATEX task (``gveval_vatex_references``, ``gveval_vatex``, ...): the per-item
  value of one metric (default ``gveval_mean``) by the logged item id ``<clip_id>#<candidate_index>``, read
  through :mod:`capjudge.metrics.files.runs`. Every item's logged caption must be the file's candidate of that
  id: a run made against another version of the VATEX-EVAL file would otherwise be correlated with ratings of
  other captions, without a word; or
* a JSONL file of ``{"clip_id": ..., "candidate_index": ..., "score": ...}``.

The correlations run over the candidates the scorer has a value for (an unjudged item, or one a ``--limit``
run never reached, is left out and counted, never scored 0). Caption length in words, computed from the
candidates themselves, is correlated over the same candidates with the same clip resamples: a sanity row that
shows how much of a scorer's agreement length alone would give. The human ceiling (each annotator against the
mean of the other two) is over those candidates too, so every row of one report describes the same items.

Length bias (with a scorer): the scorer's within-clip slope on caption length beside the humans' (their mean
rating), over the same candidates and clip resamples (capjudge.metrics.statistics.length_bias), and the
difference: the scorer's *excess* length bias, the part of its liking for long captions the raters do not share.
Both scores are put in standard-deviation units over the correlated candidates first (the scorer's 0-100 and the
raters' 1-5 have no common unit otherwise), so a slope reads "score SDs per SD of log words". The clip fixed
effects absorb anything constant within a clip, its references' length included: that is why no reference-length
term appears. A noisy but fair scorer shows a slightly negative excess (noise widens its SD); only an excess
whose interval lies above 0 is a bias.

With ``baselines`` (``capjudge vatex --baselines``: BLEU-1, BLEU-4, METEOR, ROUGE-L, CIDEr with 1 and 9
references, :mod:`capjudge.metrics.human_correlation.vatex_baselines`), each baseline is one more scorer,
correlated the same way over the same candidates; the table prints them as rows of their own table, one column
per protocol coefficient.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from capjudge.judges.jsonl import numbered_objects
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import RESULTS_SUFFIX, read_runs
from capjudge.metrics.files.task_run import TaskRun, logged_record
from capjudge.metrics.files.values import NotANumber, item_number
from capjudge.judges.datasets.vatex_eval import VatexCandidate, clip_ids, item_id, ratings_matrix, split_item_id
from capjudge.metrics.human_correlation.vatex_arena import ArenaVerdicts
from capjudge.metrics.human_correlation.vatex_preferences import PreferenceTable, preference_lines, preference_table
from capjudge.metrics.human_correlation.vatex_published import PublishedFigure, published_figures, published_to_table
from capjudge.metrics.human_correlation.vatex_protocols import (
    ProtocolResult,
    ProtocolStatistic,
    VatexProtocolError,
    clustered_design,
    emscore_protocol,
    gveval_mean_rating_protocol,
    gveval_pooled_protocol,
    human_ceiling,
)
from capjudge.metrics.statistics.correlation import BootstrapSettings
from capjudge.metrics.statistics.length_bias import ExcessLengthBias, LengthBiasError, excess_length_bias
from capjudge.metrics.statistics.small_samples import ZERO_WIDTH_REASON
from capjudge.metrics.statistics.value_ci import ValueCI

DEFAULT_METRIC = "gveval_mean"
LENGTH_SCORER = "caption length (words)"
_ITEM_KEY_PREFIX = "id:"  # how capjudge.metrics.files.task_run keys an item that logs its id
_TABLE_LABELS = {
    "emscore_per_annotator": "EMScore (per annotator, mean of 3)",
    "gveval_pooled": "G-VEval pooled",
    "gveval_mean_rating": "vs mean rating",
    "human_ceiling": "human ceiling",
}
_COEFFICIENT_LABELS = {"kendall_b": "tau-b", "kendall_c": "tau-c", "spearman": "rho"}
_SHORT_LABELS = {"emscore_per_annotator": "EMScore", "gveval_pooled": "pooled", "gveval_mean_rating": "mean rating"}


class VatexReportError(ValueError):
    """The scorer input cannot be used; the message names the file (and line or item) and the problem."""


@dataclass(frozen=True)
class Scorer:
    """One value per candidate of the VATEX-EVAL file (NaN: no value for that candidate)."""

    name: str
    source: str
    values: np.ndarray


@dataclass(frozen=True)
class ScorerCorrelations:
    name: str
    source: str
    protocols: tuple[ProtocolResult, ...]  # EMScore's, G-VEval's pooled, mean rating


@dataclass(frozen=True)
class VatexReport:
    data: str
    n_candidates: int  # correlated: the candidates the scorer has a value for
    n_clips: int
    n_unscored: int  # candidates of the file the scorer has no value for (left out)
    ci_method: str
    scorers: tuple[ScorerCorrelations, ...]  # the scorer (when given), then caption length
    human_ceiling: ProtocolResult
    baselines: tuple[ScorerCorrelations, ...] = ()  # the classic baselines, when asked for
    # Published figures of other scorers, with their sources: printed beside ours, never computed or tuned here.
    published: tuple[PublishedFigure, ...] = ()
    # The scorer's length slope beside the humans' and their difference (with a scorer; see the module docstring).
    length_bias: ExcessLengthBias | None = None
    # Agreement with the raters' same-clip preferences: every scorer above and the raters' ceiling (vatex_preferences).
    preferences: PreferenceTable | None = None


# ---------------------------------------------------------------------------------------------------------
# Scorers


def length_scorer(candidates: Sequence[VatexCandidate]) -> Scorer:
    return Scorer(LENGTH_SCORER, "the candidates' own text (whitespace-separated words)",
                  np.array([len(c.caption.split()) for c in candidates], dtype=np.float64))


def read_scorer(path: str | Path, candidates: Sequence[VatexCandidate], *, metric: str = DEFAULT_METRIC,
                task: str | None = None) -> Scorer:
    """A run folder (or results JSON) of a VATEX task, or a JSONL of {clip_id, candidate_index, score}."""
    path = Path(path)
    if path.is_dir() or path.name.endswith(RESULTS_SUFFIX):
        return _run_scorer(path, candidates, metric, task)
    if not path.is_file():
        raise VatexReportError(f"{path}: no such file or folder")
    return _jsonl_scorer(path, candidates)


def _position_of(candidates: Sequence[VatexCandidate]) -> dict[tuple[str, int], int]:
    return {(c.clip_id, c.candidate_index): position for position, c in enumerate(candidates)}


def _jsonl_scorer(path: Path, candidates: Sequence[VatexCandidate]) -> Scorer:
    positions = _position_of(candidates)
    values = np.full(len(candidates), np.nan)
    seen: set[int] = set()
    for line_number, line in numbered_objects(path, VatexReportError, unique_keys=True):
        where = f"{path}, line {line_number}"
        clip_id, index, raw = line.get("clip_id"), line.get("candidate_index"), line.get("score")
        if not isinstance(clip_id, str) or isinstance(index, bool) or not isinstance(index, int):
            raise VatexReportError(f"{where}: needs a string 'clip_id' and an integer 'candidate_index'")
        position = positions.get((clip_id, index))
        if position is None:
            raise VatexReportError(f"{where}: clip {clip_id!r} candidate {index} is not in the VATEX-EVAL file")
        if position in seen:
            raise VatexReportError(f"{where}: clip {clip_id!r} candidate {index} is scored twice")
        seen.add(position)
        try:
            number = item_number(raw)
        except NotANumber as problem:
            raise VatexReportError(f"{where}: 'score': {problem}") from None
        if number is not None:
            values[position] = number
    return Scorer(path.stem, str(path), values)


def _run_scorer(path: Path, candidates: Sequence[VatexCandidate], metric: str, task: str | None) -> Scorer:
    try:
        runs, _warnings = read_runs([str(path)])
    except RunFileError as error:
        raise VatexReportError(str(error)) from None
    found = [(run, name, task_run) for run in runs for name, task_run in run.tasks.items()
             if (task is None or name == task) and _is_vatex_task(task_run)]
    if not found:
        wanted = f"task {task!r}" if task else "a VATEX task (items logged as <clip_id>#<candidate_index>, with samples)"
        raise VatexReportError(f"{path}: no run of {wanted} here")
    if len(found) > 1:
        names = ", ".join(sorted(f"{run.name}/{name}" for run, name, _ in found))
        raise VatexReportError(f"{path}: holds several VATEX task runs ({names}); pick one with --task or a narrower folder")
    run, name, task_run = found[0]
    assert task_run.samples_path is not None and task_run.item_keys is not None  # _is_vatex_task
    # Read again here (runs.py keeps values, not lines) for the captions and for metrics the YAML does not name;
    # a key twice on a line is refused, as in every VATEX input.
    lines = list(numbered_objects(task_run.samples_path, VatexReportError, unique_keys=True))
    # The YAML's metrics are read with the run; another per-item value the task logged (a panel member's
    # `gveval_mean@<member>`, capjudge.tasks.harness.panel_judging) is read from the samples here.
    logged = task_run.values[metric] if metric in task_run.values else _logged_values(task_run, lines, name, metric)
    positions = _position_of(candidates)
    values = np.full(len(candidates), np.nan)
    for key, value, (line_number, line) in zip(task_run.item_keys, logged, lines):
        clip_id, index = _split_item_key(key)
        position = positions.get((clip_id, index))
        if position is None:
            raise VatexReportError(f"{task_run.samples_path}: item {item_id(clip_id, index)} is not in the VATEX-EVAL file")
        _check_caption(f"{task_run.samples_path}, line {line_number}", line, candidates[position])
        values[position] = value
    return Scorer(f"{run.name} {name} {metric}", str(task_run.samples_path), values)


def _check_caption(where: str, line: dict[str, Any], candidate: VatexCandidate) -> None:
    """The run's caption for the item is the file's candidate, or VatexReportError naming the line, the item
    and both captions."""
    item = candidate.item_id
    try:
        record = logged_record(line, where)
    except RunFileError as error:
        raise VatexReportError(str(error)) from None
    logged = _logged_caption(line, record)
    if logged is None:
        raise VatexReportError(f"{where}: item {item} logs no caption, so it cannot be checked against the "
                               "VATEX-EVAL file's candidate")
    if logged != candidate.caption:
        raise VatexReportError(f"{where}: item {item}: the run's caption {_short(logged)} is not the VATEX-EVAL "
                               f"file's candidate {_short(candidate.caption)} (a run of another version of the file?)")


def _logged_caption(line: dict[str, Any], record: Any) -> str | None:
    """The caption the run logged for the item: the one its judge scored; for an item not judged (a caption
    too long to send is logged cut), lmms-eval's own log of the model's output (`filtered_resps`), whole."""
    judgment = record.judgment if record is not None else None
    if judgment is not None and judgment.judged:
        return judgment.caption
    response = line.get("filtered_resps")
    if isinstance(response, list):  # lmms-eval logs one response per filter; capjudge judge logs the text
        response = response[0] if response else None
    if isinstance(response, str):
        return response
    return judgment.caption if judgment is not None else None


def _short(text: str, limit: int = 80) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")


def _logged_values(task_run: TaskRun, lines: list[tuple[int, dict[str, Any]]], task: str, metric: str) -> np.ndarray:
    """`metric`'s value on every line of the task's samples (NaN: no value), in the run's item order."""
    if not lines or any(metric not in line for _, line in lines):
        raise VatexReportError(f"{task_run.samples_path}: task {task} has no per-item metric {metric!r} "
                               f"(it has {', '.join(task_run.metric_names)}, and a panel run each as <metric>@<member>)")
    values = np.full(len(lines), np.nan)
    for position, (line_number, line) in enumerate(lines):
        try:
            number = item_number(line[metric])
        except NotANumber as problem:
            raise VatexReportError(f"{task_run.samples_path}, line {line_number}: {metric}: {problem}") from None
        if number is not None:
            values[position] = number
    return values


def _is_vatex_task(task_run: TaskRun) -> bool:
    keys = task_run.item_keys
    return bool(keys) and all(_split_item_key(key)[0] for key in keys)  # type: ignore[union-attr]


def _split_item_key(key: str) -> tuple[str, int]:
    """`id:<clip_id>#<index>` (a VATEX-EVAL item id, logged) -> (clip_id, index); ("", -1) for any other key."""
    split = split_item_id(key[len(_ITEM_KEY_PREFIX):]) if key.startswith(_ITEM_KEY_PREFIX) else None
    return split if split is not None else ("", -1)


# ---------------------------------------------------------------------------------------------------------
# The report


def build_vatex_report(data: str | Path, candidates: Sequence[VatexCandidate], scorer: Scorer | None,
                 settings: BootstrapSettings, baselines: Sequence[Scorer] = (), pairs_per_clip: int | None = None,
                 arena: ArenaVerdicts | None = None) -> VatexReport:
    """Every protocol for the scorer (if any), for caption length and for each baseline, and the human
    ceiling, over the candidates the scorer has a value for, all on one set of clip resamples; then each one's
    agreement with the raters' same-clip preferences (at most `pairs_per_clip` per clip, seeded), and a
    pairwise judge's (`arena`: its verdict file's verdicts) on the same pairs."""
    length = length_scorer(candidates)
    keep = np.isfinite(scorer.values) if scorer is not None else np.ones(len(candidates), dtype=bool)
    if keep.sum() < 2:
        raise VatexReportError(f"{scorer.source if scorer else data}: fewer than 2 candidates have a score")
    ratings = ratings_matrix(candidates)[keep]
    clips = clip_ids(candidates)[keep]

    def correlate(each: Scorer) -> ScorerCorrelations:
        try:
            design = clustered_design(each.values[keep], ratings, clips, settings)
        except VatexProtocolError as error:  # e.g. a scorer that gives every candidate the same value
            raise VatexReportError(f"{each.source}: {error}") from None
        _check_annotators_vary(data, ratings)  # after the scorer's own checks: a constant scorer is named first
        try:
            protocols = (emscore_protocol(design), gveval_pooled_protocol(design), gveval_mean_rating_protocol(design))
        except VatexProtocolError as error:
            raise VatexReportError(f"{each.source}: {error}") from None
        return ScorerCorrelations(each.name, each.source, protocols)

    correlated = [correlate(each) for each in ([scorer] if scorer is not None else []) + [length]]
    try:
        ceiling = human_ceiling(clustered_design(None, ratings, clips, settings))
    except VatexProtocolError as error:  # e.g. two annotators who each rate every candidate alike
        raise VatexReportError(f"{data}: human ceiling: {error}") from None
    return VatexReport(
        data=str(data),
        n_candidates=int(keep.sum()),
        n_clips=ceiling.n_clips,
        n_unscored=int((~keep).sum()),
        ci_method=ceiling.ci_method,
        scorers=tuple(correlated),
        human_ceiling=ceiling,
        baselines=tuple(correlate(each) for each in baselines),
        published=published_figures(),
        length_bias=None if scorer is None else _length_bias(scorer, ratings, length.values[keep], clips, keep, settings),
        preferences=preference_table(candidates, [(s.name, s.values) for s in (*([scorer] if scorer else []), length,
                                                                                 *baselines)],
                                     pairs_per_clip, settings.n_resamples, settings.seed, settings.confidence,
                                     arena=arena),
    )


def _length_bias(scorer: Scorer, ratings: np.ndarray, words: np.ndarray, clips: np.ndarray, keep: np.ndarray,
                 settings: BootstrapSettings) -> ExcessLengthBias:
    """The scorer's and the mean rating's within-clip length slopes, both in SD units, with the same resamples."""
    judge, human = scorer.values[keep], ratings.mean(axis=1)
    try:
        return excess_length_bias(judge / judge.std(), human / human.std(), words, clips,
                                  n_resamples=settings.n_resamples, seed=settings.seed, confidence=settings.confidence)
    except LengthBiasError as error:  # e.g. every caption of every clip the same length
        raise VatexReportError(f"{scorer.source}: length bias: {error}") from None


def _check_annotators_vary(data: str | Path, ratings: np.ndarray) -> None:
    """Every protocol correlates with each annotator's ratings: an annotator who gives every candidate
    correlated the same rating leaves every coefficient undefined, so that is said once, naming the file."""
    for annotator in range(ratings.shape[1]):
        column = ratings[:, annotator]
        if np.all(column == column[0]):
            raise VatexReportError(f"{data}: annotator {annotator + 1} rates all {len(column):,} candidates correlated "
                                   f"{column[0]:g}: no correlation with their ratings is defined")


def vatex_report_to_json(report: VatexReport) -> str:
    """Coefficients as computed (-1..1), every protocol with its description, row count and CI method."""
    return json.dumps(dataclasses.asdict(report), indent=2)


def report_to_table(report: VatexReport) -> str:
    """The papers' presentation: coefficients x 100, each with its clustered interval; one column per scorer,
    the human ceiling on its own line (it has no scorer)."""
    header = ["protocol", "coef", *(s.name for s in report.scorers)]
    rows = [
        [_TABLE_LABELS[protocol.protocol], _COEFFICIENT_LABELS[statistic.name],
         *(_cell(scorer.protocols[position][statistic.name]) for scorer in report.scorers)]
        for position, protocol in enumerate(report.scorers[0].protocols)
        for statistic in protocol.statistics
    ]
    ceiling = report.human_ceiling
    lines = [
        f"VATEX-EVAL ({report.data}): {report.n_candidates:,} candidates of {report.n_clips:,} clips, 3 annotators"
        + (f"; {report.n_unscored:,} candidates without a score left out" if report.n_unscored else ""),
        *(f"scorer: {s.name}, from {s.source}" for s in report.scorers),
        f"Coefficients x 100; [low, high] = {report.ci_method}",
        "",
        *_aligned(header, rows),
        "",
        *_baseline_table(report),
        f"{_TABLE_LABELS[ceiling.protocol]}: "
        + "  ".join(f"{_COEFFICIENT_LABELS[s.name]} {_cell(s)}" for s in ceiling.statistics),
        *_no_interval_lines(report),
        "",
        *(f"- {p.description} ({p.n_rows:,} rows per coefficient)" for p in (*report.scorers[0].protocols, ceiling)),
    ]
    if report.length_bias is not None:
        lines += ["", *_length_bias_lines(report.length_bias)]
    if report.preferences is not None:
        lines += ["", *preference_lines(report.preferences)]
    if report.published:
        lines += ["", published_to_table(report.published).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _no_interval_lines(report: VatexReport) -> list[str]:
    """Why coefficients are shown without their interval (the small-sample rule), each reason once."""
    statistics = [s for p in (*(p for s in report.scorers for p in s.protocols), report.human_ceiling)
                  for s in p.statistics]
    return [f"No interval: {reason}." for reason in dict.fromkeys(s.no_interval for s in statistics if s.no_interval)]


def _length_bias_lines(bias: ExcessLengthBias) -> list[str]:
    def slope(figure: ValueCI) -> str:
        with_ci = figure.ci_low is not None and figure.ci_high is not None
        return f"{figure.value:+.3f}" + (f" [{figure.ci_low:+.3f}, {figure.ci_high:+.3f}]" if with_ci else "")

    excess = bias.value_ci
    if excess.ci_low is not None:
        verdict = ("the scorer rewards length beyond the raters" if excess.ci_low > 0 else
                   "no excess length bias shown")
    elif bias.no_interval == ZERO_WIDTH_REASON and abs(excess.value) < 1e-9:
        # Every resample gives one excess, 0 (the scorer's slope is the raters', to rounding): no interval under
        # the small-sample rule, and still no excess shown; the reason says why there is no bracket.
        verdict = f"no excess length bias shown ({bias.no_interval})"
    else:
        verdict = f"no interval ({bias.no_interval or 'no resamples'})"
    return [
        "Length bias (within-clip slope on standardised log words; scores in SD units; "
        f"{bias.judge.n_candidates:,} candidates, {bias.judge.n_clusters:,} clips):",
        f"  scorer {slope(bias.judge.value_ci)}   humans (mean rating) {slope(bias.human.value_ci)}   "
        f"excess {slope(excess)}: {verdict}",
    ]


def _baseline_table(report: VatexReport) -> list[str]:
    """The baselines as rows (ten of them would not fit as columns), one column per protocol coefficient, the
    coefficients in the main table's order; each distinct source once above the table."""
    if not report.baselines:
        return []
    protocols = report.baselines[0].protocols
    header = ["classic baseline", *(f"{_SHORT_LABELS[p.protocol]} {_COEFFICIENT_LABELS[s.name]}"
                                     for p in protocols for s in p.statistics)]
    rows = [[b.name, *(_cell(s) for p in b.protocols for s in p.statistics)] for b in report.baselines]
    return [
        *(f"baselines: {source}" for source in dict.fromkeys(b.source for b in report.baselines)),
        "",
        *_aligned(header, rows),
        "",
    ]


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table: columns padded to their widest cell, a dashed rule under the header."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(header, widths)).rstrip(),
        "  ".join("-" * width for width in widths),
        *("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows),
    ]


def _cell(statistic: ProtocolStatistic) -> str:
    figure = statistic.value_ci
    value = f"{100 * figure.value:.1f}"
    if figure.ci_low is None or figure.ci_high is None:
        return value
    return f"{value} [{100 * figure.ci_low:.1f}, {100 * figure.ci_high:.1f}]"


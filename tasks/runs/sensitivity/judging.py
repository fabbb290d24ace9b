"""What `capjudge sensitivity` judges, and the judging: every original caption of a task's items and each of its
controlled perturbations (capjudge.metrics.sensitivity.perturbations), through the task's own `judge_all`, the
path `capjudge judge` and lmms-eval runs take: the same client, reply cache, rate budget, pre-flight check and
panel handling. An original's request and cache key are those of a run judging that caption, so a caption set
already judged costs only its perturbations.

Exactly (1 + perturbations) x items judgments: each (item, text) once (a variant that reads the same as
another caption of its item, e.g. a one-word caption's truncation, is the same judgment and is asked once).
A rerun asks nothing: every judgment is a cache hit.

The captions come from a captions file, an lmms-eval run (as `capjudge judge` reads them) or the task's own
rated candidates (MSVD-Eval's, VATEX-EVAL's: `--candidates`). Candidates of one clip (VATEX-EVAL's six) share
a cluster: they are resampled together, and none is another's "other clip" when a perturbation borrows one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capjudge.metrics.sensitivity.perturbations import Perturbation, PerturbedCaption, perturb_all
from capjudge.metrics.sensitivity.report import (
    Judged, JudgedCaption, RunCounts, SensitivityItem, SensitivityReport, sensitivity_rows,
)

class SensitivityError(ValueError):
    """The captions cannot be used as asked; the message names the flag, file or item."""


@dataclass(frozen=True)
class PlannedItem:
    """One item to judge: its original caption and every perturbation of it, as the judge will see them."""

    doc: Mapping[str, Any]
    item_id: str
    cluster: str
    original: str
    variants: tuple[PerturbedCaption, ...]


def cluster_of(doc: Mapping[str, Any]) -> str:
    """The clip an item describes (VATEX-EVAL's rows name it; elsewhere an item is its own clip)."""
    return str(doc.get("clip_id") or doc["id"])


def original_captions(task: Any, task_name: str, run: Path | None, captions: Path | None, candidates: bool,
                      limit: int | None) -> list[tuple[Mapping[str, Any], str]]:
    """(doc, caption) for the items to perturb, in the task's order, the first `limit` of them."""
    given = [name for name, value in (("RUN", run), ("--captions", captions), ("--candidates", candidates or None))
             if value is not None]
    if len(given) != 1:
        raise SensitivityError("give one caption source: RUN (an lmms-eval output), --captions FILE or --candidates"
                               + (f" (got {' and '.join(given)})" if given else ""))
    docs = list(task.eval_docs)
    if candidates:
        pairs = _candidates(docs, task_name)
    else:
        from capjudge.tasks.runs.judging.stage import caption_source, pair_captions

        source = caption_source(run, captions, task_name, None)
        pairs = [(doc, caption) for _, doc, caption in pair_captions(_task_ids_only(source, docs, task_name), docs, task)]
    return pairs[:limit] if limit else pairs


def _candidates(docs: Sequence[Mapping[str, Any]], task_name: str) -> list[tuple[Mapping[str, Any], str]]:
    rated = [(doc, doc.get("candidate")) for doc in docs]
    if not any(isinstance(caption, str) for _, caption in rated):
        raise SensitivityError(f"--candidates: the items of task {task_name!r} carry no rated candidate caption "
                               "(MSVD-Eval's and VATEX-EVAL's tasks do); give --captions FILE or RUN")
    for doc, caption in rated:
        if not isinstance(caption, str):
            raise SensitivityError(f"--candidates: item {doc.get('id')} of task {task_name!r} has no candidate caption")
    return rated  # type: ignore[return-value]


def _task_ids_only(source: Any, docs: Sequence[Mapping[str, Any]], task_name: str) -> Any:
    """A captions file with other tasks' ids too (the demo files hold both demo tasks'): the task's ids only,
    said once with this command's name. A file with none of them is left whole for pair_captions to refuse."""
    if source.by_item_id is None:
        return source
    known = {str(doc.get("id")) for doc in docs}
    ours = {item: caption for item, caption in source.by_item_id.items() if item in known}
    if not ours:
        return source
    extra = [item for item in source.by_item_id if item not in known]
    if extra and not source.packaged:
        print(f"capjudge sensitivity: {source.description}: ignoring {len(extra)} ids that are not items of "
              f"{task_name!r} (e.g. {', '.join(extra[:5])})", file=sys.stderr)
    return replace(source, by_item_id=ours)


def plan(pairs: Sequence[tuple[Mapping[str, Any], str]], perturbations: Sequence[Perturbation],
         seed: int) -> list[PlannedItem]:
    """Every item's perturbations. The clip, not the item, is the perturbation's unit: its seed and the
    clips a donor caption may come from (never the item's own clip)."""
    clusters = [cluster_of(doc) for doc, _ in pairs]
    variants = perturb_all(zip(clusters, (caption for _, caption in pairs)), seed, registry=perturbations)
    per_item = len(perturbations)
    return [PlannedItem(doc, str(doc["id"]), cluster, caption, variants[i * per_item:(i + 1) * per_item])
            for i, ((doc, caption), cluster) in enumerate(zip(pairs, clusters))]


def judgments_to_ask(planned: Sequence[PlannedItem]) -> list[tuple[Mapping[str, Any], str]]:
    """(doc, text) of every original and variant, each distinct (item, text) once."""
    asked: dict[tuple[str, str], tuple[Mapping[str, Any], str]] = {}
    for item in planned:
        for text in (item.original, *(variant.text for variant in item.variants)):
            asked.setdefault((item.item_id, text), (item.doc, text))
    return list(asked.values())


def judgments_left_to_ask(task: Any, planned: Sequence[PlannedItem]) -> bool:
    """Whether the run would send a request: some member's reply cache holds no usable reply to some judgment
    (each built by the task's own per-item function, looked up read-only as the dry run looks). The run probes
    its judges (pre-flight) only then."""
    from functools import partial

    from capjudge.judges.client.cache_reader import any_request_left

    settings = task.settings()
    return any_request_left([member.config for member in task.who_judges().members],
                            (partial(type(task).judge_item, doc, text, settings) for doc, text in judgments_to_ask(planned)))


@dataclass(frozen=True)
class _Taken:
    judgments: Mapping[str, Judged]
    requests: int


def _judged(judgment: Any) -> Judged:
    result = judgment.result
    return Judged(dict(result.scores()), None if result.ok else result.failure_kind, bool(judgment.cache_hit),
                  reply=judgment.raw_reply, failure_detail=None if result.ok else (result.failure_detail or None),
                  pooling=judgment.panel)


def judge_label(identity: Mapping[str, Any]) -> str:
    """The judge as a report names it: its name and model (a panel's identity names the panel)."""
    return f"{identity.get('name')} judge, model {identity.get('model')}"


def judge_planned(task: Any, planned: Sequence[PlannedItem], perturbations: Sequence[Perturbation], *,
                  n_resamples: int, seed: int, confidence: float = 0.95) -> SensitivityReport:
    """Judge every original and variant through the task's `judge_all`, then the shifts."""
    from capjudge.tasks.harness.prejudge import item_key

    asked = judgments_to_ask(planned)
    store = task.judge_all(asked, description=f"capjudge: sensitivity of {task.config.task}")
    who = task.who_judges()  # one judge: its own scorer; a panel: the panel's, then each member's
    taken: dict[tuple[str, str], _Taken] = {}
    for doc, text in asked:
        by_member = store.take(item_key(doc, text))
        assert by_member is not None, "judge_all judged every item it was given"
        scored = who.scored_judgments(by_member, task.item_hooks(doc))
        taken[item_key(doc, text)] = _Taken({name: _judged(judgment) for name, judgment in scored.items()},
                                            sum(int(judgment.requests) for judgment in by_member.values()))
    scorers = who.scorers()

    def judged(item: PlannedItem, name: str | None, text: str, change: str) -> JudgedCaption:
        return JudgedCaption(name, text, change, taken[(item.item_id, text)].judgments)

    items = tuple(
        SensitivityItem(item.item_id, item.cluster, judged(item, None, item.original, ""),
                        tuple(judged(item, v.perturbation, v.text, v.change) for v in item.variants))
        for item in planned)
    counts = RunCounts(
        items=len(planned), perturbations=len(perturbations), judgments=len(taken),
        requests=sum(t.requests for t in taken.values()),
        cache_hits=sum(all(j.cache_hit for j in t.judgments.values()) for t in taken.values()),
        unjudged=sum(any(j.failure is not None for j in t.judgments.values()) for t in taken.values()))
    rows = sensitivity_rows(items, perturbations, scorers, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return SensitivityReport(task.config.task, judge_label(task.identity()),
                             scorers, tuple(perturbations), items, rows, counts, seed, n_resamples, confidence)


def unjudged_share(report: SensitivityReport) -> tuple[int, int]:
    """(judgments the run's own scorer (the judge, or the panel) left unjudged, judgments)."""
    scorer = report.scorers[0]
    seen: dict[tuple[str, str], bool] = {}
    for item in report.items:
        for caption in (item.original, *item.variants):
            seen[(item.item_id, caption.text)] = caption.judgments[scorer].failure is not None
    return sum(seen.values()), len(seen)

"""`capjudge arena --candidates`: the task's own rated candidates as the pair source, as `capjudge sensitivity
--candidates` reads them (each item's `candidate`: VATEX-EVAL's six captions per clip, the captions its three
raters scored).

A pair is two candidates of ONE clip: a candidate is a model only within its clip ("candidate <index>",
capjudge.judges.pairwise.record.candidate_model), the pair's item and cluster are the clip, the lower index is
model_a. Which pairs:

- every same-clip pair (15 per VATEX-EVAL clip), or
- `--pairs-per-clip K`: at most K of the clip's human preferences (the pairs its raters' mean does not tie),
  drawn by `capjudge.metrics.arena.human_preferences.sample_pairs` with the run's --seed: per clip, seeded
  from (seed, clip id), so they are exactly the pairs `capjudge vatex --pairs-per-clip K --seed S` compares,
  whichever other clips either command sees. The ratings are read from the task's own data file.

`--clip ID` (repeatable) keeps the named clips, `--limit N` the first N clips (in the task's order); each pair
is asked in both orders, as every arena pair is. A pair of two candidates with the same caption (318 of
VATEX-EVAL's 3,000 clips have one) is left out and counted: a verdict between the same words tests nothing but
the judge's position bias, and the same request would be paid for again under another pair's name.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from capjudge.judges.pairwise.record import candidate_model
from capjudge.tasks.runs.arena.pairs import PlannedPair
from capjudge.tasks.runs.arena.sources import ArenaInputError

# The candidate's own fields: the pair's doc is the clip (its references and video), not either candidate.
_CANDIDATE_FIELDS = ("candidate", "candidate_index")


def plan_candidate_pairs(task: Any, task_name: str, *, clips: Sequence[str], limit: int | None,
                         pairs_per_clip: int | None, seed: int) -> list[PlannedPair]:
    """Both candidates' captions of every chosen same-clip pair, clip by clip in the task's order."""
    by_clip = _candidates_by_clip(list(task.eval_docs), task_name)
    chosen = _chosen_clips(by_clip, clips, task_name)
    if limit is not None:
        chosen = chosen[:limit]
    wanted = None if pairs_per_clip is None else _sampled(task, task_name, chosen, pairs_per_clip, seed)
    pairs = []
    same_words = 0
    for clip in chosen:
        members = sorted(by_clip[clip], key=lambda doc: doc["candidate_index"])
        clip_doc = {key: value for key, value in members[0].items() if key not in _CANDIDATE_FIELDS}
        clip_doc.update(id=clip, clip_id=clip)
        for a, b in itertools.combinations(members, 2):
            if wanted is not None and (clip, a["candidate_index"], b["candidate_index"]) not in wanted:
                continue
            if a["candidate"] == b["candidate"]:
                same_words += 1
                continue
            pairs.append(PlannedPair(clip_doc, clip, clip, candidate_model(a["candidate_index"]),
                                     candidate_model(b["candidate_index"]), a["candidate"], b["candidate"]))
    if same_words:
        print(f"capjudge arena: --candidates: {same_words} pair(s) of two candidates with the same caption left out "
              "(no test of a judge; `capjudge vatex --arena-verdicts` counts them missing)", file=sys.stderr)
    if not pairs:
        raise ArenaInputError(f"--candidates: no pair to judge in the {len(chosen)} clip(s) chosen of task {task_name!r}")
    return pairs


def _candidates_by_clip(docs: Sequence[Mapping[str, Any]], task_name: str) -> dict[str, list[Mapping[str, Any]]]:
    """The task's candidates grouped by clip, in the task's order; an ArenaInputError for a task without them."""
    if not any(isinstance(doc.get("candidate"), str) and isinstance(doc.get("clip_id"), str) for doc in docs):
        raise ArenaInputError(f"--candidates: the items of task {task_name!r} carry no rated candidates of a clip "
                              "(VATEX-EVAL's tasks do: gveval_vatex_references, ...); give RUN or --captions FILE")
    by_clip: dict[str, list[Mapping[str, Any]]] = {}
    for doc in docs:
        index = doc.get("candidate_index")
        if (not isinstance(doc.get("candidate"), str) or not isinstance(doc.get("clip_id"), str)
                or isinstance(index, bool) or not isinstance(index, int)):
            raise ArenaInputError(f"--candidates: item {doc.get('id')} of task {task_name!r} has no candidate caption "
                                  "with its clip and candidate index")
        by_clip.setdefault(doc["clip_id"], []).append(doc)
    return by_clip


def _chosen_clips(by_clip: Mapping[str, Sequence[Any]], clips: Sequence[str], task_name: str) -> list[str]:
    if not clips:
        return list(by_clip)
    unknown = [clip for clip in clips if clip not in by_clip]
    if unknown:
        raise ArenaInputError(f"--clip {unknown[0]!r}: no clip of task {task_name!r} has this id "
                              f"(its {len(by_clip):,} clips are e.g. {', '.join(list(by_clip)[:3])})")
    twice = sorted({clip for clip in clips if clips.count(clip) > 1})
    if twice:
        raise ArenaInputError(f"--clip {twice[0]!r} given twice")
    named = set(clips)
    return [clip for clip in by_clip if clip in named]


def _sampled(task: Any, task_name: str, clips: Sequence[str], per_clip: int, seed: int) -> set[tuple[str, int, int]]:
    """(clip, first index, second index) of the human preferences `capjudge vatex` samples from these clips."""
    from capjudge.judges.datasets.vatex_eval import VatexEvalError, load_vatex_eval
    from capjudge.metrics.arena.errors import ArenaError
    from capjudge.metrics.arena.human_preferences import human_pairs, sample_pairs
    from capjudge.tasks.harness.sources import DatasetError, resolve_source

    metadata = task.config.metadata or {}
    if metadata.get("dataset") != "vatex_eval":
        raise ArenaInputError(f"--pairs-per-clip: task {task_name!r} has no human ratings of a clip's candidates to "
                              "sample preferences from (VATEX-EVAL's tasks have)")
    try:
        source = resolve_source(metadata)
        candidates = load_vatex_eval(source.location) if source.kind != "hub" else None
    except (DatasetError, VatexEvalError) as error:
        raise ArenaInputError(f"--pairs-per-clip: the ratings of task {task_name!r}: {error}") from None
    if candidates is None:
        raise ArenaInputError(f"--pairs-per-clip: task {task_name!r} reads a hub dataset; its ratings are in the "
                              "VATEX-EVAL file (set its data variable)")
    wanted = set(clips)
    try:
        preferences = human_pairs([c for c in candidates if c.clip_id in wanted])
    except ArenaError as error:
        raise ArenaInputError(f"--pairs-per-clip: {error}") from None
    return {pair.key for pair in sample_pairs(preferences, per_clip, seed).pairs}

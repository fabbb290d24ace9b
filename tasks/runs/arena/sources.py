"""The caption sources of an arena: runs and captions files, read as `capjudge judge` and `capjudge sensitivity`
read them (capjudge.tasks.runs.judging.stage's `caption_source` and `pair_captions`), each one model.

A source need not caption every item (a run made with --limit, a captions file of a subset): an item is in the
arena when at least two sources caption it. What is refused, with one line naming the source: a source whose
ids are none of the task's items, a source with no caption at all, two sources under one model name, fewer than
two sources, and sources that share no item.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ArenaInputError(ValueError):
    """The arena cannot be run as asked; the message names the flag, file or item."""


@dataclass(frozen=True)
class ModelCaptions:
    """One caption source: the model's name and its captions by item id (the task's items only)."""

    name: str
    description: str
    captions: Mapping[str, str]


def read_sources(task: Any, task_name: str, runs: Sequence[Path], captions: Sequence[Path]) -> tuple[ModelCaptions, ...]:
    """Every source's captions of the task's items, in the order given (runs first, then captions files)."""
    from capjudge.tasks.runs.judging.stage import caption_source

    given = [(run, None) for run in runs] + [(None, file) for file in captions]
    if len(given) < 2:
        raise ArenaInputError(f"an arena needs at least two caption sources (RUN or --captions FILE), got {len(given)}: "
                         "a battle is between two models")
    docs = list(task.eval_docs)
    models: list[ModelCaptions] = []
    for run, file in given:
        source = caption_source(run, file, task_name, None)
        by_item = _captions_of(source, docs, task)
        if not by_item:
            raise ArenaInputError(f"{source.description}: holds no caption of any item of task {task_name!r}")
        clash = next((model for model in models if model.name == source.model_name), None)
        if clash is not None:
            raise ArenaInputError(f"{source.description} and {clash.description} are both named {source.model_name!r}: "
                             "each caption source must be a model of its own (rename a captions file, or give the "
                             "run another model_name)")
        models.append(ModelCaptions(source.model_name, source.description, by_item))
    if not any(sum(doc_id in model.captions for model in models) >= 2 for doc_id in (str(d.get("id")) for d in docs)):
        raise ArenaInputError(f"no item of task {task_name!r} has captions from two sources: "
                         + "; ".join(f"{model.name}: {len(model.captions)} items" for model in models))
    return tuple(models)


def _captions_of(source: Any, docs: Sequence[Mapping[str, Any]], task: Any) -> dict[str, str]:
    """{item id: caption} of one source, only the task's items (a run's doc ids and logged targets are checked
    by `pair_captions`, as `capjudge judge` checks them)."""
    from capjudge.tasks.runs.judging.stage import JudgeStageError, pair_captions

    if source.by_doc_id is not None:
        return {str(doc.get("id")): caption for _, doc, caption in pair_captions(source, docs, task, "capjudge arena")}
    known = {str(doc.get("id")) for doc in docs}
    ours = {item: caption for item, caption in source.by_item_id.items() if item in known}
    if source.by_item_id and not ours:
        extra = list(source.by_item_id)
        raise JudgeStageError(f"{source.description}: none of its {len(extra)} ids is an item of task "
                              f"{task.config.task!r} (e.g. {', '.join(extra[:5])}); wrong task or wrong file?")
    extra = [item for item in source.by_item_id if item not in known]
    if extra and not source.packaged:  # said, as `capjudge judge` and `capjudge sensitivity` say it
        print(f"capjudge arena: {source.description}: ignoring {len(extra)} ids that are not items of "
              f"{task.config.task!r} (e.g. {', '.join(extra[:5])})", file=sys.stderr)
    return ours

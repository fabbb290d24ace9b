"""Judge captions from Python with a named judge, exactly as a run judges them.

The path is the one lmms-eval and `capjudge judge` take: the judge's own task class judges each item
(`JudgedTask.judge_item`: the caption-length cap, the missing-video rule, k replies per item, the judge's
request and parser) through the process-wide client of the configuration (`shared_client`: its reply cache, its
machine-wide rate budget and concurrency bound), a list at that bound (`prejudge`, as a run judges ahead of
lmms-eval's `process_results`). So requests and cache keys are a run's: what a notebook judged re-scores in a
run, and the other way round, with no request.

Nothing is read from the environment until a function is called; then, as in a run, an unset `config` is
`JudgeConfig.from_env()` and the judge's settings take their environment overrides (CAPJUDGE_GVEVAL_MODE, ...).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from capjudge.api.errors import JudgeInputError
from capjudge.api.items import checked_item, checked_items
from capjudge.api.judges import judge_task
from capjudge.judges.client.config import JudgeConfig
from capjudge.tasks.harness.item_judgment import ItemJudgment


def judge_caption(judge: str, item: Mapping[str, Any], *, config: JudgeConfig | None = None,
                  settings: Mapping[str, Any] | None = None) -> ItemJudgment:
    """Judge one item's caption with the judge named `judge` ("gveval", "anycap", ... see `judge_names`).

    `item`: `id`, `caption`, `video` and the judge's own fields (README, "Python API"). `config`: the judge
    client's configuration (default `JudgeConfig.from_env()`). `settings`: the judge's settings as a task YAML's
    `metadata` gives them (G-VEval: `mode`, `scoring`, `max_tries`; AnyCap: `tolerance`, `instruction_rule`,
    `max_tries`; any judge: `judge_samples`, `max_caption_chars`); a key the judge does not read is refused.

    Returns the item's `ItemJudgment`: its `result` is the judge's typed result (GVEvalResult, AnyCapResult),
    unjudged with its `failure_kind` when the video is missing or unreadable or no reply parsed, never a 0.
    Raises UnknownJudgeError, ItemError (naming the item and the problem), JudgeInputError (a setting the judge
    does not know, named with the ones it does) or ConfigError before any request.
    """
    task = judge_task(judge)
    doc, caption = checked_item(judge, item, 0)
    resolved, client = _settings_and_client(task, config, settings)
    try:
        return task.judge_item(doc, caption, resolved, client)
    finally:
        client.flush_cache()  # the reply on disk before the notebook moves on


def judge_captions(judge: str, items: Sequence[Mapping[str, Any]], *, config: JudgeConfig | None = None,
                   settings: Mapping[str, Any] | None = None) -> list[ItemJudgment]:
    """`judge_caption` for every item, up to the configuration's `max_concurrency` in flight, with a progress
    bar; the judgments in the items' order. Every item is checked before the first request. An item given twice
    (same id and caption) is judged once. A field the judge reads that an item lacks is an ItemError raised once
    the other items are judged (their replies are in the cache: a rerun without that item asks nothing again)."""
    from capjudge.tasks.harness.prejudge import PrejudgedItems, item_key, prejudge

    task = judge_task(judge)
    checked = checked_items(judge, items)
    resolved, client = _settings_and_client(task, config, settings)
    store = PrejudgedItems()
    try:
        prejudge(checked, lambda doc, caption: task.judge_item(doc, caption, resolved, client),
                 workers=client.config.max_concurrency, description=f"capjudge: judging with {judge}", into=store)
    finally:
        client.flush_cache()
    keys = [item_key(doc, caption) for doc, caption in checked]
    judged = {key: store.take(key) for key in dict.fromkeys(keys)}
    return [judged[key] for key in keys]


def _settings_and_client(task: Any, config: JudgeConfig | None, settings: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """The judge's settings, resolved as its task resolves its YAML's metadata, and the shared client of `config`."""
    from capjudge.judges.client.registry import shared_client

    if settings is not None and not isinstance(settings, Mapping):
        raise JudgeInputError(f"settings must be a mapping of the judge's settings (as a task's metadata), "
                              f"got a {type(settings).__name__}")
    if config is not None and not isinstance(config, JudgeConfig):
        raise JudgeInputError(f"config must be a JudgeConfig, got a {type(config).__name__}")
    given = _ReadKeys(settings or {})
    resolved = task.settings_type.resolve(given)
    _refuse_unknown_settings(task, given)
    return resolved, shared_client(config or JudgeConfig.from_env())


class _ReadKeys(dict):
    """Settings that note which keys a judge's `resolve` reads (`setting` reads each with `.get`)."""

    def __init__(self, values: Mapping[Any, Any]):
        super().__init__(values)
        self.read: set[Any] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)


def _refuse_unknown_settings(task: Any, given: _ReadKeys) -> None:
    """A JudgeInputError naming a given setting the judge never reads: a typo ("mdoe") was ignored in silence
    and the item judged with the default. The judge's settings are found, not listed: the keys its `resolve`
    reads with no value and no environment (every setting, each left at its default, none overridden by a
    variable), and those it read of the given ones (a setting read only beside another's value)."""
    known = _ReadKeys({})
    task.settings_type.resolve(known, env={})
    names = known.read | given.read
    unknown = [key for key in given if key not in names]
    if unknown:
        listed = sorted(str(name) for name in names)
        close = difflib.get_close_matches(str(unknown[0]), listed, n=1)
        raise JudgeInputError(f"settings: {unknown[0]!r} is no setting of the {task.settings_type.judge_name} judge"
                              f"{f' (did you mean {close[0]!r}?)' if close else ''}; its settings: {', '.join(listed)}")

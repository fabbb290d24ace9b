"""The per-item record a judged task logs, as typed data: what `--log_samples` keeps of each judgment.

lmms-eval writes every key `process_results` returns into the samples line, so the record rides as the value
of one metric, `judged` (RECORD_METRIC; see `capjudge.tasks.harness.judged_task`):

    {"record_version": 2,
     "item_id": "g01",
     "judge": {"name", "model", "endpoint", "judge_version", "settings", "descriptor"},
     "judgment": {"caption", "video", <the judge's log_fields()>, "raw_reply", "cache_hit", "requests",
                  "usage": {"prompt_tokens", "completion_tokens"}, "process": {"rank", "pid"},
                  with k > 1 replies per item: "samples": [<reply>, ...], "spread": {<value>: SD or null}}}

A reply (`ReplySample`) is `{<the judge's log_fields()>, "raw_reply", "cache_hit", "requests"}`. What the
judge's own fields are is the judge's: G-VEval logs a `scores` mapping, AnyCap its length-rule decision with
`judge_score` and `final_score`. Which of them backs which per-item metric each judge declares in its
descriptor as a `ReplyFields`; the record logs the descriptor's facts (`judge.descriptor`), and
`capjudge.judges.known_judges.judge_descriptor` turns a logged judge back into its descriptor.

Versions. 1: every record written before the version field (no `record_version` key), including the older
layout that kept `item_id` and `judge` at the top of the samples line; its `spread` is empty for AnyCap (it
read a `scores` mapping only G-VEval replies have). 2: `record_version` written, `spread` keyed by the
judge's declared reply scores, the judge's descriptor facts in `judge.descriptor`. A reader reads both; a record from a newer capjudge, or one whose fields have
the wrong types, is a `RecordError` naming the problem.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The samples-line key (an lmms-eval metric) whose value is the record.
RECORD_METRIC = "judged"
RECORD_VERSION = 2
LEGACY_VERSION = 1  # what a record without `record_version` is

# The record's keys.
VERSION_KEY = "record_version"
ITEM_ID_KEY = "item_id"
JUDGE_KEY = "judge"
JUDGMENT_KEY = "judgment"
# Keys of `judgment` (and of each reply) that are capjudge's, around the judge's own `log_fields()`.
CAPTION_KEY = "caption"
VIDEO_KEY = "video"
RAW_REPLY_KEY = "raw_reply"
CACHE_HIT_KEY = "cache_hit"
REQUESTS_KEY = "requests"
USAGE_KEY = "usage"
PROCESS_KEY = "process"
SAMPLES_KEY = "samples"
SPREAD_KEY = "spread"
# Keys every judge's `log_fields()` has (`JudgeResult`): why an item or a reply is unjudged (None: judged).
FAILURE_KEY = "failure"
FAILURE_DETAIL_KEY = "failure_detail"

_REPLY_KEYS = (RAW_REPLY_KEY, CACHE_HIT_KEY, REQUESTS_KEY)
_JUDGMENT_KEYS = frozenset({CAPTION_KEY, VIDEO_KEY, *_REPLY_KEYS, USAGE_KEY, PROCESS_KEY, SAMPLES_KEY, SPREAD_KEY})


class RecordError(ValueError):
    """A logged record that cannot be read as one; the message says which field and why."""


@dataclass(frozen=True)
class ReplyFields:
    """Where a judge's logged replies keep their values, and which per-item metric each value backs.

    `values`: a value's name -> its field in a reply (`scores.accuracy`: `accuracy` inside `scores`).
    `metrics`: a per-item metric of the judge's tasks -> the value it is the mean of the judged replies of.
    `scores`: the judge's own scores among `values` (what `capjudge reliability` measures unless told, and
    what `spread` is logged for); `main`: the one the item report shows the spread of."""

    values: Mapping[str, str]
    metrics: Mapping[str, str]
    scores: tuple[str, ...]
    main: str | None = None


@dataclass(frozen=True)
class LoggedJudge:
    """Which judge, with which model and settings, judged the item: the one type for a judge's identity that
    every reader of a run takes (the leaderboard's judges of a task, the item report's judges of a section)."""

    name: str | None
    model: str | None
    endpoint: str | None = None
    judge_version: str | None = None
    settings: Any = None  # as logged (JSON)
    # The judge's descriptor facts (capjudge.judges.descriptor.JudgeDescriptor.facts), so that a reader needs
    # no code of the judge; None in records written before descriptors were logged.
    descriptor: Mapping[str, Any] | None = None
    # The capjudge release that judged (its package version); None in records written before it was logged.
    capjudge_version: str | None = None

    def __hash__(self) -> int:
        # The settings and descriptor are JSON objects (dicts, unhashable): hashed by their canonical text, so a
        # judge can key a count (the items each judge of a run scored). Equal judges hash alike.
        return hash((self.name, self.model, self.endpoint, self.judge_version, self.settings_text,
                     _canonical(self.descriptor), self.capjudge_version))

    @property
    def settings_text(self) -> str | None:
        """The settings as canonical JSON (keys sorted): how they are shown, and compared as text."""
        return _canonical(self.settings)

    def as_scorer(self) -> LoggedJudge:
        """This judge as it scores, whatever name or server it was reached under and however it described
        itself: its model, judge version, settings and capjudge release. What runs' judges are compared by (the
        leaderboard warns when the models of a task were scored by different ones)."""
        return LoggedJudge(name=None, model=self.model, judge_version=self.judge_version, settings=self.settings,
                           capjudge_version=self.capjudge_version)

    def label(self) -> str:
        """One line naming the judge as it scores: `model · version · capjudge release · settings`."""
        parts = [self.model or "unknown model"]
        if self.judge_version:
            parts.append(self.judge_version)
        if self.capjudge_version:
            parts.append(f"capjudge {self.capjudge_version}")
        if self.settings_text:
            parts.append(self.settings_text)
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        logged = {"name": self.name, "model": self.model, "endpoint": self.endpoint,
                  "judge_version": self.judge_version, "settings": self.settings}
        if self.capjudge_version is not None:
            logged["capjudge_version"] = self.capjudge_version
        return logged if self.descriptor is None else {**logged, "descriptor": dict(self.descriptor)}

    @classmethod
    def from_logged(cls, value: Any) -> LoggedJudge | None:
        """A logged judge: its identity object, or (old logs, other tasks) the judge model's name alone."""
        if value is None or value == "":
            return None
        if isinstance(value, str):
            return cls(name=None, model=value)
        if not isinstance(value, Mapping):
            raise RecordError(f"`{JUDGE_KEY}` is {_kind(value)}, not an object")
        name = value.get("name")
        if name is not None and not isinstance(name, str):
            raise RecordError(f"`{JUDGE_KEY}.name` is {_kind(name)}, not text")
        descriptor = value.get("descriptor")
        if descriptor is not None and not isinstance(descriptor, Mapping):
            raise RecordError(f"`{JUDGE_KEY}.descriptor` is {_kind(descriptor)}, not an object")
        return cls(
            name=name,
            model=_str_or_none(value.get("model")),
            endpoint=_str_or_none(value.get("endpoint")),
            judge_version=_str_or_none(value.get("judge_version") or value.get("version")),
            settings=value.get("settings"),
            descriptor=descriptor,
            capjudge_version=_str_or_none(value.get("capjudge_version")),
        )


@dataclass(frozen=True)
class ReplySample:
    """One of an item's k replies: the judge's own fields for it, and how it was got."""

    fields: Mapping[str, Any]  # the judge's `log_fields()` for this reply
    raw_reply: str | None
    cache_hit: bool | None
    requests: int | None

    @property
    def failure(self) -> str | None:
        return self.fields.get(FAILURE_KEY)

    @property
    def judged(self) -> bool:
        return self.failure is None

    def value(self, field: str) -> float | None:
        """The finite number at `field` (`name`, or `outer.inner` one level down); None when it has none."""
        outer, _, inner = field.partition(".")
        found = self.fields.get(outer)
        if inner:
            found = found.get(inner) if isinstance(found, Mapping) else None
        return _finite(found)

    def numbers(self) -> dict[str, float]:
        """Every finite number of the judge's fields, by field (one level of nesting: `scores.accuracy`);
        booleans are flags, not numbers."""
        found: dict[str, float] = {}
        for name, value in self.fields.items():
            inner = value.items() if isinstance(value, Mapping) else ((None, value),)
            for inner_name, number in inner:
                if _finite(number) is not None:
                    found[name if inner_name is None else f"{name}.{inner_name}"] = float(number)
        return found

    def to_json(self) -> dict[str, Any]:
        return {**self.fields, RAW_REPLY_KEY: self.raw_reply, CACHE_HIT_KEY: self.cache_hit,
                REQUESTS_KEY: self.requests}

    @classmethod
    def from_logged(cls, value: Any, where: str) -> ReplySample:
        if not isinstance(value, Mapping):
            raise RecordError(f"`{where}` is {_kind(value)}, not an object")
        _check_failure(value, where)
        return cls(
            fields={key: item for key, item in value.items() if key not in _REPLY_KEYS},
            raw_reply=_optional(value, RAW_REPLY_KEY, str, where),
            cache_hit=_optional(value, CACHE_HIT_KEY, bool, where),
            requests=_count(value, REQUESTS_KEY, where),
        )


@dataclass(frozen=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class JudgingProcess:
    """Which process judged the item: under `accelerate launch` each rank judges its own shard."""

    rank: int
    pid: int


@dataclass(frozen=True)
class Judgment:
    """What the judge said about one caption (with k > 1 replies: their combination, and each reply)."""

    caption: str | None
    video: str | None  # the video the judge was shown (None when the judge needs none)
    fields: Mapping[str, Any]  # the judge's `log_fields()` for the item's result
    raw_reply: str | None
    cache_hit: bool | None
    requests: int | None
    usage: TokenUsage | None = None
    process: JudgingProcess | None = None
    samples: tuple[ReplySample, ...] = ()
    spread: Mapping[str, float | None] | None = None  # per reply score, the SD over the judged replies

    @property
    def failure(self) -> str | None:
        return self.fields.get(FAILURE_KEY)

    @property
    def failure_detail(self) -> str | None:
        detail = self.fields.get(FAILURE_DETAIL_KEY)
        return detail if isinstance(detail, str) else None

    @property
    def judged(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {CAPTION_KEY: self.caption, VIDEO_KEY: self.video, **self.fields,
                                  RAW_REPLY_KEY: self.raw_reply, CACHE_HIT_KEY: self.cache_hit,
                                  REQUESTS_KEY: self.requests}
        if self.usage is not None:
            record[USAGE_KEY] = {"prompt_tokens": self.usage.prompt_tokens,
                                 "completion_tokens": self.usage.completion_tokens}
        if self.process is not None:
            record[PROCESS_KEY] = {"rank": self.process.rank, "pid": self.process.pid}
        if self.samples:
            record[SAMPLES_KEY] = [sample.to_json() for sample in self.samples]
            record[SPREAD_KEY] = dict(self.spread or {})
        return record

    @classmethod
    def from_logged(cls, value: Any) -> Judgment:
        if not isinstance(value, Mapping):
            raise RecordError(f"`{JUDGMENT_KEY}` is {_kind(value)}, not an object")
        where = JUDGMENT_KEY
        _check_failure(value, where)
        samples = value.get(SAMPLES_KEY, [])
        if not isinstance(samples, list):
            raise RecordError(f"`{where}.{SAMPLES_KEY}` is {_kind(samples)}, not a list of replies")
        spread = value.get(SPREAD_KEY)
        if spread is not None and not (isinstance(spread, Mapping)
                                       and all(v is None or _finite(v) is not None for v in spread.values())):
            raise RecordError(f"`{where}.{SPREAD_KEY}` is not an object of numbers")
        return cls(
            caption=_optional(value, CAPTION_KEY, str, where),
            video=_optional(value, VIDEO_KEY, str, where),
            fields={key: item for key, item in value.items() if key not in _JUDGMENT_KEYS},
            raw_reply=_optional(value, RAW_REPLY_KEY, str, where),
            cache_hit=_optional(value, CACHE_HIT_KEY, bool, where),
            requests=_count(value, REQUESTS_KEY, where),
            usage=_usage(value.get(USAGE_KEY), f"{where}.{USAGE_KEY}"),
            process=_process(value.get(PROCESS_KEY), f"{where}.{PROCESS_KEY}"),
            samples=tuple(ReplySample.from_logged(s, f"{where}.{SAMPLES_KEY}[{i}]") for i, s in enumerate(samples)),
            spread=dict(spread) if spread is not None else None,
        )


@dataclass(frozen=True)
class JudgedRecord:
    """One item's logged record."""

    item_id: str | None
    judge: LoggedJudge | None
    judgment: Judgment | None
    version: int = RECORD_VERSION

    @property
    def judge_name(self) -> str | None:
        return self.judge.name if self.judge is not None else None

    def replies(self) -> list[ReplySample | None]:
        """The item's k logged replies (none when judged once), a failed one as None (it has no value)."""
        samples = self.judgment.samples if self.judgment is not None else ()
        return [sample if sample.judged else None for sample in samples]

    def to_json(self) -> dict[str, Any]:
        """The record as the task writes it (always the current version)."""
        return {
            VERSION_KEY: RECORD_VERSION,
            ITEM_ID_KEY: self.item_id,
            JUDGE_KEY: self.judge.to_json() if self.judge is not None else None,
            JUDGMENT_KEY: self.judgment.to_json() if self.judgment is not None else None,
        }

    @classmethod
    def from_logged(cls, value: Any) -> JudgedRecord:
        """A record as logged, of any version this capjudge reads; RecordError naming what is wrong."""
        if not isinstance(value, Mapping):
            raise RecordError(f"the `{RECORD_METRIC}` record is {_kind(value)}, not an object")
        version = value.get(VERSION_KEY, LEGACY_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or version < LEGACY_VERSION:
            raise RecordError(f"`{VERSION_KEY}` is {version!r}, not a record version (1 to {RECORD_VERSION})")
        if version > RECORD_VERSION:
            raise RecordError(f"`{VERSION_KEY}` is {version}: written by a newer capjudge (this one reads 1 to "
                              f"{RECORD_VERSION})")
        item_id = value.get(ITEM_ID_KEY)
        if item_id is not None and (isinstance(item_id, bool) or not isinstance(item_id, (str, int))):
            raise RecordError(f"`{ITEM_ID_KEY}` is {_kind(item_id)}, not text")
        judgment = value.get(JUDGMENT_KEY)
        return cls(
            item_id=None if item_id is None else str(item_id),
            judge=LoggedJudge.from_logged(value.get(JUDGE_KEY)),
            judgment=None if judgment is None else Judgment.from_logged(judgment),
            version=version,
        )

    @classmethod
    def in_line(cls, line: Mapping[str, Any]) -> JudgedRecord | None:
        """The record of an lmms-eval samples line: under `judged`; else (version 1's older layout, and other
        tasks) `item_id` / `judge` at the top of the line; None for a line that logs neither."""
        if RECORD_METRIC in line:
            return cls.from_logged(line[RECORD_METRIC])
        legacy = {key: line[key] for key in (ITEM_ID_KEY, JUDGE_KEY, JUDGMENT_KEY) if key in line}
        return cls.from_logged(legacy) if legacy else None


def replies_of(record: JudgedRecord | None) -> list[ReplySample | None]:
    """The item's logged replies (none when judged once or when the line logs no record), a failed one as None."""
    return record.replies() if record is not None else []


def judge_name_of_run(records: Sequence[JudgedRecord | None]) -> str | None:
    """The judge named by the first record that names one (a run has one judge per task)."""
    judge = judge_of_run(records)
    return judge.name if judge is not None else None


def judge_of_run(records: Sequence[JudgedRecord | None]) -> LoggedJudge | None:
    """The logged judge of the first record that names one (a run has one judge per task)."""
    return next((record.judge for record in records if record is not None and record.judge_name), None)


def reply_spread(samples: Sequence[ReplySample], fields: ReplyFields) -> dict[str, float | None]:
    """Per score of the judge, the standard deviation of its value over the judged replies (None with fewer
    than two)."""
    spread: dict[str, float | None] = {}
    for score in fields.scores:
        values = [v for v in (s.value(fields.values[score]) for s in samples if s.judged) if v is not None]
        spread[score] = statistics.stdev(values) if len(values) > 1 else None
    return spread


def scores_mapping_fields(replies: Sequence[ReplySample | None]) -> ReplyFields:
    """For a judge that declares no `ReplyFields`: the numbers of the first judged reply's `scores` mapping
    (the `JudgeResult.scores()` convention), backing no metric by declaration."""
    first = next((reply for reply in replies if reply is not None), None)
    scores = first.fields.get("scores") if first is not None else None
    names = tuple(str(name) for name, value in scores.items() if _finite(value) is not None) \
        if isinstance(scores, Mapping) else ()
    return ReplyFields(values={name: f"scores.{name}" for name in names}, metrics={}, scores=names)


# ---------------------------------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__} ({str(value)[:40]!r})"


def _canonical(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _optional(value: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    found = value.get(key)
    if found is not None and (not isinstance(found, kind) or (kind is not bool and isinstance(found, bool))):
        raise RecordError(f"`{where}.{key}` is {_kind(found)}, not {'true/false' if kind is bool else kind.__name__}")
    return found


def _count(value: Mapping[str, Any], key: str, where: str) -> int | None:
    found = _optional(value, key, int, where)
    if found is not None and found < 0:
        raise RecordError(f"`{where}.{key}` is {found}, a negative count")
    return found


def _check_failure(value: Mapping[str, Any], where: str) -> None:
    _optional(value, FAILURE_KEY, str, where)
    _optional(value, FAILURE_DETAIL_KEY, str, where)


def _usage(value: Any, where: str) -> TokenUsage | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RecordError(f"`{where}` is {_kind(value)}, not an object")
    return TokenUsage(_count(value, "prompt_tokens", where) or 0, _count(value, "completion_tokens", where) or 0)


def _process(value: Any, where: str) -> JudgingProcess | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise RecordError(f"`{where}` is {_kind(value)}, not an object")
    return JudgingProcess(_count(value, "rank", where) or 0, _count(value, "pid", where) or 0)

"""One caption's judgment as a judged task holds it between judging and logging (see judged_task)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.client.panel import PANEL_FIELD  # the judgment field a panel's record adds: who judged, who not
from capjudge.judges.record import JudgingProcess, Judgment, ReplySample, TokenUsage
from capjudge.judges.types import JudgeResult, Usage


@dataclass(frozen=True)
class ItemJudgment:
    """One caption's judgment as the sample log records it: the judge's typed result plus how it was got."""

    item_id: str
    caption: str
    video: str | None  # the video the judge was shown (None when the judge needs none)
    result: JudgeResult
    raw_reply: str | None
    cache_hit: bool
    requests: int
    usage: Usage = Usage()
    # With k > 1 replies per item (judge_samples): each reply's own record; `result` is their combination.
    samples: tuple[ReplySample, ...] = ()
    spread: Mapping[str, float | None] | None = None  # per score of the judge, the SD over the judged replies
    # A panel's judgment of the item: which members judged it and why the others did not (see panel_judging).
    panel: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.result.ok

    def logged(self) -> Judgment:
        """The judgment as the record logs it."""
        return Judgment(
            caption=self.caption,
            video=self.video,
            fields={**self.result.log_fields(), **({PANEL_FIELD: dict(self.panel)} if self.panel else {})},
            raw_reply=self.raw_reply,
            cache_hit=self.cache_hit,
            requests=self.requests,
            usage=TokenUsage(self.usage.prompt_tokens, self.usage.completion_tokens),
            # Which process judged it: under `accelerate launch` each rank judges its own shard of the items.
            process=JudgingProcess(int(os.environ.get("RANK", "0") or 0), os.getpid()),
            samples=self.samples,
            spread=self.spread,
        )

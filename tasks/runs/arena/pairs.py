"""Which pairs an arena asks: every pair of models on every item they share, or each model against K fixed
anchor models (CapArena-Auto's design: O(models) battles per item instead of O(models^2)).

The anchors are named (`--anchor NAME`) or drawn once by the seed from the models (`--anchors K`), the same
for every item. Every pair is one `PlannedPair`, asked in both orders: A (the model given first of the two)
shown first, then B shown first. A pair's models keep the order their sources were given in.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.tasks.runs.arena.sources import ArenaInputError, ModelCaptions


@dataclass(frozen=True)
class PlannedPair:
    doc: Mapping[str, Any]
    item_id: str
    cluster: str
    model_a: str
    model_b: str
    caption_a: str
    caption_b: str

    def order_key(self, a_first: bool) -> str:
        """What names one order of this pair among the item's judgments (the judging store's key)."""
        return json.dumps([self.model_a, self.model_b] if a_first else [self.model_b, self.model_a])

    def shown(self, a_first: bool) -> tuple[str, str]:
        """(first caption, second caption) as the judge sees them in this order."""
        return (self.caption_a, self.caption_b) if a_first else (self.caption_b, self.caption_a)


def choose_anchors(models: Sequence[ModelCaptions], named: Sequence[str], count: int | None, seed: int) -> tuple[str, ...]:
    """The anchor models: `named` (--anchor), else `count` (--anchors) drawn by `seed`, else none (all pairs)."""
    import numpy as np

    names = [model.name for model in models]
    if named and count is not None:
        raise ArenaInputError("give --anchor NAME (repeatable) or --anchors K, not both")
    if named:
        unknown = [name for name in named if name not in names]
        if unknown:
            raise ArenaInputError(f"--anchor {unknown[0]!r}: no caption source is named so (the models: {', '.join(names)})")
        if len(set(named)) != len(named):
            raise ArenaInputError(f"--anchor {sorted(n for n in named if named.count(n) > 1)[0]!r} given twice")
        chosen = set(named)
    elif count is not None:
        if not 1 <= count < len(names):
            raise ArenaInputError(f"--anchors {count}: give from 1 to {len(names) - 1} (fewer than the {len(names)} models; "
                             "leave it out for every pair)")
        chosen = {names[i] for i in np.random.default_rng(seed).choice(len(names), size=count, replace=False)}
    else:
        return ()
    return tuple(name for name in names if name in chosen)


def plan_pairs(task: Any, models: Sequence[ModelCaptions], anchors: Sequence[str], limit: int | None) -> list[PlannedPair]:
    """Every pair to ask, item by item in the task's order (the first `limit` items with a pair)."""
    from capjudge.tasks.runs.sensitivity.judging import cluster_of

    pairs: list[PlannedPair] = []
    items = same_caption = 0
    for doc in task.eval_docs:
        item_id = str(doc.get("id"))
        present = [model for model in models if item_id in model.captions]
        chosen = [(a, b) for a, b in itertools.combinations(present, 2)
                  if not anchors or a.name in anchors or b.name in anchors]
        if not chosen:
            continue
        if limit is not None and items == limit:
            break
        items += 1
        for a, b in chosen:
            # Two models with one caption of an item: both orders are one request, and whatever the judge says
            # is its position bias, not a preference (left out and said, as --candidates does).
            if a.captions[item_id] == b.captions[item_id]:
                same_caption += 1
                continue
            pairs.append(PlannedPair(doc, item_id, cluster_of(doc), a.name, b.name, a.captions[item_id],
                                     b.captions[item_id]))
    if not pairs:
        raise ArenaInputError("no pair to judge: no item has captions from an anchor and another model"
                              + (f" that differ ({same_caption} pair(s) with one caption)" if same_caption else ""))
    if same_caption:
        print(f"capjudge arena: {same_caption} pair(s) of two models with the same caption of an item left out (no "
              "test of a judge: either order is the same request)", file=sys.stderr)
    return pairs

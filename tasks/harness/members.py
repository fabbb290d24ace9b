"""The judges of a task as members: each judges every item through its own client, side by side.

The same path for one judge (a member of its own) and for a panel: `judge_by_members` gives a store whose
`take` hands back an item's judgments keyed by member name; `capjudge.tasks.harness.who_judges` turns them
into the item's metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.judges.client.config import JudgeConfig
from capjudge.tasks.harness.item_judgment import ItemJudgment
from capjudge.tasks.harness.prejudge import PrejudgedItems, prejudge


@dataclass(frozen=True)
class Member:
    """One judge of a task: its name (in a panel, the name its metrics carry), its configuration and what its
    records log as the judge."""

    name: str
    config: JudgeConfig
    identity: Mapping[str, Any]
    label: str = ""  # added to progress bars: "" for the one judge, " @name" for a panel member


class JudgmentsByMember:
    """Every member's judgments made ahead of `process_results`; `take` gives an item's, keyed by member (None
    until every member has judged it)."""

    def __init__(self, members: Sequence[str]) -> None:
        self.stores = {name: PrejudgedItems() for name in members}

    def take(self, key: tuple[str, str]) -> dict[str, ItemJudgment] | None:
        taken = {name: store.take(key) for name, store in self.stores.items()}
        return None if any(judgment is None for judgment in taken.values()) else taken  # type: ignore[return-value]


def judged_by_all(judgments: Mapping[str, ItemJudgment]) -> bool:
    """Did every member judge the item?"""
    return all(judgment.result.ok for judgment in judgments.values())


def judge_by_members(items: Sequence[tuple[Mapping[str, Any], str]], members: Sequence[Member],
                     judge_one: Callable[[Mapping[str, Any], str, Any], ItemJudgment],
                     client_of: Callable[[Member, Mapping[str, Any]], Any], *, workers: int | None,
                     description: str, bar_position: int = 0) -> JudgmentsByMember:
    """Every member judges every item, the members side by side (each at its own concurrency bound, so a slow
    or rate-limited member holds up no other). `judge_one(doc, caption, client)`; `client_of(member, doc)` is
    the client a member judges an item through. Each member's replies are on disk before this returns."""
    store = JudgmentsByMember([member.name for member in members])
    errors: list[BaseException] = []

    def run(position: int) -> None:
        member = members[position]
        try:
            prejudge(items, lambda doc, caption: judge_one(doc, caption, client_of(member, doc)),
                     workers=workers or member.config.max_concurrency, description=f"{description}{member.label}",
                     into=store.stores[member.name], bar_position=bar_position + position)
        except BaseException as error:  # noqa: BLE001 - re-raised once every member has finished
            errors.append(error)

    if len(members) == 1:
        run(0)  # in the caller's thread: Ctrl-C and a fatal error reach it as they always have
    else:
        threads = [threading.Thread(target=run, args=(position,), name=f"capjudge-member-{member.name}", daemon=True)
                   for position, member in enumerate(members)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return store

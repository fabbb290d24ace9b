"""The errors `capjudge.api` raises for input it cannot judge, before or instead of a judge request.

Each is a `ValueError` whose message names the item (or the judge) and the problem in one line, so a notebook
shows what to fix without a traceback into capjudge. What the judge itself could not do with a well-formed item
(an unreadable video, a reply that never parses) is never one of these: it is the judge's typed result, unjudged
with its failure kind, as in every run.
"""

from __future__ import annotations


class JudgeInputError(ValueError):
    """Input `judge_caption` / `judge_captions` cannot judge as given."""


class UnknownJudgeError(JudgeInputError):
    """No judge of that name is known to capjudge; the message lists the known ones."""

    def __init__(self, name: object, known: tuple[str, ...]):
        self.name = name
        self.known = known
        super().__init__(f"no judge named {name!r}; known judges: {', '.join(known) or 'none'}")


class ItemError(JudgeInputError):
    """One item cannot be judged as given: not a mapping, no usable id, a caption that is not text, a field the
    judge reads missing. `item` is the item's id (or `#N`, its position, when it has no usable id)."""

    def __init__(self, item: str, problem: str):
        self.item = item
        self.problem = problem
        super().__init__(f"item {item}: {problem}")

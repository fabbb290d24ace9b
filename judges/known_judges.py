"""The judges capjudge ships, and how a reader finds the descriptor of the judge a record names.

A record written since judges declared descriptors carries the descriptor's facts (`judge.descriptor`), so a
judge capjudge does not ship reads back from its runs alone; for a judge shipped here the module's own
descriptor is used (it adds how its replies are viewed, which is code). Records written before descriptors
were logged name the judge only: shipped judges are found by that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from capjudge.judges.anycap import judge as anycap
from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.gveval import judge as gveval
from capjudge.judges.record import JudgedRecord, LoggedJudge, ReplyFields, judge_of_run

SHIPPED_JUDGES: Mapping[str, JudgeDescriptor] = {d.name: d for d in (gveval.DESCRIPTOR, anycap.DESCRIPTOR)}


def judge_descriptor(judge: LoggedJudge | None) -> JudgeDescriptor | None:
    """The descriptor of a logged judge: shipped by name, else from its logged facts; None when neither
    (an unnamed judge, or a record of a judge from elsewhere written before descriptors were logged).
    Raises DescriptorError when logged facts are malformed."""
    if judge is None:
        return None
    if judge.name in SHIPPED_JUDGES:
        return SHIPPED_JUDGES[judge.name]
    return JudgeDescriptor.from_facts(judge.descriptor) if judge.descriptor is not None else None


def reply_fields_of_run(records: Sequence[JudgedRecord | None]) -> ReplyFields | None:
    """Which reply field backs which metric in a run's records, as the run's judge declares it."""
    descriptor = judge_descriptor(judge_of_run(records))
    return descriptor.reply_fields if descriptor is not None else None

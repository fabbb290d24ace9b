"""`capjudge vatex --arena-verdicts FILE`: a pairwise judge's verdicts on VATEX-EVAL's same-clip candidate pairs,
read from the verdict file `capjudge arena --candidates` wrote (capjudge.judges.pairwise.record), as the
human-preference table's pairwise row needs them: per judge (or panel member), (clip, first candidate index,
second candidate index) -> the verdict after both orders (`position_bias.both_orders_verdict`: a
position-consistent verdict as both orders say, a position-inconsistent one a tie, None when an order failed).

The file is read through `read_arena_file` (a file edited by hand is refused there). Every record must be a
pair of one clip's candidates of THIS VATEX-EVAL file, with the file's captions: a verdict file of another task
(the demo's, a run's captions) or of another version of the file is one VatexArenaError naming the file, the
line and what does not match, never a silent row of nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from capjudge.judges.datasets.vatex_eval import VatexCandidate
from capjudge.judges.pairwise.record import PairRecord, candidate_index, read_arena_file
from capjudge.judges.pairwise.verdicts import OVERALL, for_models
from capjudge.metrics.arena.human_preferences import PairKey
from capjudge.metrics.arena.position_bias import both_orders_verdict


class VatexArenaError(ValueError):
    """The verdict file is not of this VATEX-EVAL file's candidate pairs; the message names the file and line."""


@dataclass(frozen=True)
class ArenaVerdicts:
    """A verdict file's both-orders verdicts on VATEX-EVAL candidate pairs, per judge (or panel member)."""

    source: str
    task: str
    judge: str  # the header's judge label ("gveval judge, model ...")
    command: str
    by_member: Mapping[str, Mapping[PairKey, str | None]]  # None: an order failed (the pair is counted missing)


def read_vatex_arena_verdicts(path: Path, candidates: Sequence[VatexCandidate], data: str) -> ArenaVerdicts:
    """The verdict file's verdicts, every record checked against `candidates` (the VATEX-EVAL file `data`);
    raises ArenaFileError (the file as capjudge wrote it?) or VatexArenaError (of these candidates?)."""
    header, records = read_arena_file(path)
    captions = {(c.clip_id, c.candidate_index): c.caption for c in candidates}
    clips = {c.clip_id for c in candidates}
    by_member: dict[str, dict[PairKey, str | None]] = {}
    for line, record in enumerate(records, 2):
        key = _pair_key(path, line, record, header.task, clips, captions, data)
        mine = by_member.setdefault(record.member, {})
        if key in mine:
            raise VatexArenaError(f"{path}, line {line}: clip {key[0]!r}, candidates {key[1]} and {key[2]} judged twice "
                                  f"by {record.member}")
        # The record's verdicts are about the models; `both_orders_verdict` reads each order in positions
        # ('A': the caption shown first), so the order that showed model_b first is turned back into positions.
        forward = record.a_first.verdicts[OVERALL] if record.a_first.ok else None  # type: ignore[index]
        backward = for_models(record.b_first.verdicts[OVERALL], False) if record.b_first.ok else None  # type: ignore[index]
        mine[key] = both_orders_verdict(forward, backward)
    if not by_member:
        raise VatexArenaError(f"{path}: holds no verdict")
    return ArenaVerdicts(str(path), header.task, header.judge, header.command, by_member)


def _pair_key(path: Path, line: int, record: PairRecord, task: str, clips: set[str],
              captions: Mapping[tuple[str, int], str], data: str) -> PairKey:
    where = f"{path}, line {line}"
    clip = record.item_id
    if clip not in clips or record.cluster != clip:
        raise VatexArenaError(f"{where}: item {clip!r} is not a clip of {data}: the verdicts of task {task!r} are not "
                              "pairs of its candidates (make them with `capjudge arena --task gveval_vatex_references "
                              "--candidates`)")
    indices = [candidate_index(model) for model in (record.model_a, record.model_b)]
    if any(index is None or (clip, index) not in captions for index in indices) or indices[0] >= indices[1]:  # type: ignore[operator]
        raise VatexArenaError(f"{where}: models {record.model_a!r} and {record.model_b!r} are not two candidates of clip "
                              f"{clip!r} (as `capjudge arena --candidates` names them, lower index first)")
    first, second = indices  # type: ignore[misc]
    for index, caption in ((first, record.caption_a), (second, record.caption_b)):
        if caption != captions[(clip, index)]:
            raise VatexArenaError(f"{where}: clip {clip!r} candidate {index}: the judged caption {_short(caption)} is not "
                                  f"{data}'s {_short(captions[(clip, index)])} (verdicts on another version of the file?)")
    return (clip, first, second)  # type: ignore[return-value]


def _short(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3] + "...")

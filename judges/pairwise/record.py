"""The arena verdict file: one typed record per (item, pair of models, judge), with both orders' verdicts.

What `capjudge arena` writes and what the arena statistics read (`read_arena_file`). JSONL, UTF-8:

Line 1, the header (`ArenaHeader`):
    {"capjudge_arena": "capjudge-arena-verdicts/1", "task": ..., "judge": "<name> judge, model <model>",
     "command": "capjudge arena ...", "records": N, "stamp": "<sha256>", "records_sha256": "<sha256>"}
Every later line, one `PairRecord`:
    item_id, cluster      the item, and the clip it shows (VATEX-EVAL's candidates of one clip share a cluster;
                          elsewhere an item is its own): the unit a clustered bootstrap resamples
    model_a, model_b      the two caption sources, in the order they were given to the command; with
                          `capjudge arena --candidates` (a task's own rated candidates, VATEX-EVAL's six per
                          clip) a candidate is a model only within its clip: "candidate <index>" (its index
                          in the clip, `candidate_model`), the lower index as model_a, item_id the clip's id
    caption_a, caption_b  their captions of the item, exactly as the judge saw them
    judge                 the judge's name ("gveval", "anycap")
    member                who gave these verdicts: "judge" for the one judge, else the panel member's name
    judge_model           the model that judged
    judge_version         the pairwise prompt's version ("gveval-pairwise/1"), part of every cache key
    dimensions            the verdict's dimensions, "overall" last (G-VEval: accuracy, completeness,
                          conciseness, relevance, overall; AnyCap: quality, hallucination, overall)
    a_first, b_first      the two orders (`OrderVerdict`): model_a's caption shown first, then model_b's first
    length                per model, facts the judge was told (AnyCap: {"words_a", "words_b", "within_a",
                          "within_b"}), else {"words_a", "words_b"}: the covariate of a length-controlled fit

An `OrderVerdict`: `verdicts` {dimension: "A" | "B" | "tie"}, or null when that order failed (then `failure` is
its kind, e.g. "missing", "invalid_verdict", "no_json", "request_failed", "video_missing", and
`failure_detail` says why); `reply` (the judge's raw reply), `cache_hit`, `requests` (HTTP requests made this
run: 0 from the cache).

In `verdicts`, "A" ALWAYS means model_a's caption and "B" model_b's, whichever was shown first. The judge's own
answer is positional (its "A" is the caption it was shown first; `reply` keeps it as written) and is
translated when model_b was shown first. So a judge that always prefers the first caption has a_first
overall "A" and b_first overall "B" (a flip); a position-consistent verdict is the same in both orders.

The stamp is a hash of what makes two runs the same run (task, judge, command, and every record's item,
models, captions and member); `records_sha256` is the hash of the record lines as written. A file whose
records no longer hash to it, or whose stamp no longer matches its records, was edited after capjudge wrote
it: `read_arena_file` refuses it with one ArenaFileError line, as `capjudge arena` refuses to replace it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.pairwise.verdicts import OVERALL, VERDICTS

SCHEMA = "capjudge-arena-verdicts/1"
HEADER_KEY = "capjudge_arena"


CANDIDATE_MODEL_PREFIX = "candidate "
_CANDIDATE_INDEX_DIGITS = 6


def candidate_model(index: int) -> str:
    """The model name of a rated candidate within its clip (`capjudge arena --candidates`)."""
    return f"{CANDIDATE_MODEL_PREFIX}{index}"


def candidate_index(model: str) -> int | None:
    """The candidate index a `candidate_model` name stands for; None for any other model name."""
    number = model[len(CANDIDATE_MODEL_PREFIX):] if model.startswith(CANDIDATE_MODEL_PREFIX) else ""
    # A clip has a handful of candidates: more digits than an index can have is no candidate (and no int()
    # of thousands of digits, which Python refuses).
    if not (number.isascii() and number.isdigit() and len(number) <= _CANDIDATE_INDEX_DIGITS):
        return None
    return int(number) if number == str(int(number)) else None


class ArenaFileError(ValueError):
    """An arena verdict file that cannot be read as capjudge wrote it; the message names the file and line."""


@dataclass(frozen=True)
class OrderVerdict:
    """One order's verdicts about models A and B (see the module docstring), or its failure."""

    verdicts: Mapping[str, str] | None
    failure: str | None
    failure_detail: str | None
    reply: str | None
    cache_hit: bool
    requests: int

    @property
    def ok(self) -> bool:
        return self.verdicts is not None


@dataclass(frozen=True)
class PairRecord:
    item_id: str
    cluster: str
    model_a: str
    model_b: str
    caption_a: str
    caption_b: str
    judge: str
    member: str
    judge_model: str
    judge_version: str
    dimensions: tuple[str, ...]
    a_first: OrderVerdict
    b_first: OrderVerdict
    length: Mapping[str, Any]

    def both_orders(self) -> bool:
        """Did both orders give verdicts?"""
        return self.a_first.ok and self.b_first.ok

    def flipped(self, dimension: str = OVERALL) -> bool:
        """Both orders judged and their verdicts on `dimension` differ (the order changed the verdict)."""
        return self.both_orders() and self.a_first.verdicts[dimension] != self.b_first.verdicts[dimension]  # type: ignore[index]

    def stamp_key(self) -> list[str]:
        """What of the record makes the run the run it is (its inputs, not its verdicts)."""
        return [self.item_id, self.model_a, self.caption_a, self.model_b, self.caption_b, self.member]

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["dimensions"] = list(self.dimensions)
        return document


@dataclass(frozen=True)
class ArenaHeader:
    task: str
    judge: str
    command: str
    records: int
    stamp: str
    records_sha256: str


def arena_stamp(task: str, judge: str, command: str, keys: Iterable[Sequence[str]]) -> str:
    """The stamp of a run: task, judge label, command and every record's `stamp_key`, in order."""
    canonical = json.dumps([task, judge, command, [list(key) for key in keys]], ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def arena_file_text(task: str, judge: str, command: str, records: Sequence[PairRecord]) -> str:
    """The whole file: the header line, then one line per record."""
    lines = "".join(json.dumps(record.to_json(), ensure_ascii=False) + "\n" for record in records)
    header = {HEADER_KEY: SCHEMA, "task": task, "judge": judge, "command": command, "records": len(records),
              "stamp": arena_stamp(task, judge, command, (record.stamp_key() for record in records)),
              "records_sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest()}
    return json.dumps(header, ensure_ascii=False) + "\n" + lines


def read_arena_file(path: Path) -> tuple[ArenaHeader, tuple[PairRecord, ...]]:
    """The header and records of an arena verdict file, every field checked; an ArenaFileError otherwise."""
    from capjudge.judges.jsonl import (
        DuplicateKey, decode_json, decode_problem, has_lone_surrogate, json_lines, read_text)

    try:
        text = read_text(path, ArenaFileError, f"arena file {path}")
    except OSError as error:
        raise ArenaFileError(f"arena file {path}: cannot be read ({error})") from None
    first, _, body = text.partition("\n")
    not_header = f"arena file {path}: line 1 is not a capjudge arena header ({SCHEMA})"
    try:
        header = decode_json(first)
    except (DuplicateKey, ValueError, RecursionError) as error:
        # Why, when the line cannot be read: a key given twice, or a byte order mark an editor put before it.
        raise ArenaFileError(f"{not_header}: {decode_problem(error, 'in the header')}") from None
    if not isinstance(header, dict) or header.get(HEADER_KEY) != SCHEMA or has_lone_surrogate(header):
        raise ArenaFileError(not_header)
    fields = {name: header.get(name) for name in ("task", "judge", "command", "stamp", "records_sha256")}
    if not all(isinstance(value, str) for value in fields.values()) or not _count(header.get("records")):
        raise ArenaFileError(f"arena file {path}: line 1: the header's fields are not all there")
    if hashlib.sha256(body.encode("utf-8")).hexdigest() != fields["records_sha256"]:
        raise ArenaFileError(f"arena file {path}: its records do not match the hash in its header: the file was "
                             "edited after capjudge wrote it; rerun `capjudge arena` (its replies are cached)")
    records = tuple(_record(path, number, line) for number, line in enumerate(json_lines(body), 2))
    _check_together(path, records)
    if len(records) != header["records"]:
        raise ArenaFileError(f"arena file {path}: {len(records)} records, its header says {header['records']}")
    stamp = arena_stamp(fields["task"], fields["judge"], fields["command"], (r.stamp_key() for r in records))  # type: ignore[arg-type]
    if stamp != fields["stamp"]:
        raise ArenaFileError(f"arena file {path}: its stamp does not match its records: edited after capjudge wrote it")
    return ArenaHeader(records=header["records"], **fields), records  # type: ignore[arg-type]


def _check_together(path: Path, records: Sequence[PairRecord]) -> None:
    """What no single line shows: every record of one judge (name, prompt version, dimensions), one cluster per
    item, no pair of a model with itself, no pair twice (in either order) for one member, one caption (and word
    count) per item and model. A file that passes its hashes yet breaks one of these was rewritten with its
    hashes made again: one line naming the first record that breaks it, never a traceback from the statistics
    or a silent pick of one of two verdicts (or of two captions: the length fit and the page read different
    records)."""
    first = records[0] if records else None
    clusters: dict[str, str] = {}
    seen: set[tuple[str, str, str, str]] = set()
    shown: dict[tuple[str, str], tuple[str, Any]] = {}  # (item, model) -> its caption and word count
    for number, record in enumerate(records, 2):
        where = f"arena file {path}, line {number}"
        if first is not None and (record.judge, record.judge_version, record.dimensions) != (
                first.judge, first.judge_version, first.dimensions):
            # repr, not the text: a version or dimension with a line break or an escape sequence stays one line
            raise ArenaFileError(f"{where}: judge {record.judge!r} ({record.judge_version!r}, {list(record.dimensions)!r}) "
                                 f"is not the file's ({first.judge!r}, {first.judge_version!r}, "
                                 f"{list(first.dimensions)!r}): one file holds one judge's verdicts")
        if clusters.setdefault(record.item_id, record.cluster) != record.cluster:
            raise ArenaFileError(f"{where}: item {record.item_id!r} is in cluster {record.cluster!r} here and "
                                 f"{clusters[record.item_id]!r} before: an item has one cluster")
        if record.model_a == record.model_b:
            raise ArenaFileError(f"{where}: model {record.model_a!r} paired with itself")
        pair = (record.item_id, record.member, *sorted((record.model_a, record.model_b)))
        if pair in seen:
            raise ArenaFileError(f"{where}: item {record.item_id!r}, {record.model_a!r} and {record.model_b!r} "
                                 f"judged by {record.member!r} a second time")
        seen.add(pair)
        for model, caption, words in ((record.model_a, record.caption_a, record.length.get("words_a")),
                                      (record.model_b, record.caption_b, record.length.get("words_b"))):
            if shown.setdefault((record.item_id, model), (caption, words)) != (caption, words):
                raise ArenaFileError(f"{where}: item {record.item_id!r}, model {model!r}: another caption or word "
                                     "count than an earlier record's (a model has one caption of an item)")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _record(path: Path, number: int, line: str) -> PairRecord:
    from capjudge.judges.jsonl import DuplicateKey, decode_json, has_lone_surrogate

    where = f"arena file {path}, line {number}"
    try:
        document = decode_json(line)
        texts = ("item_id", "cluster", "model_a", "model_b", "caption_a", "caption_b", "judge", "member",
                 "judge_model", "judge_version")
        if not isinstance(document, dict) or not all(isinstance(document.get(name), str) for name in texts):
            raise TypeError("a text field is missing or not text")
        if has_lone_surrogate(document):
            raise TypeError("text with an unpaired surrogate escape (not valid Unicode)")
        named = document["dimensions"]
        if not isinstance(named, list) or not all(isinstance(d, str) for d in named) or len(set(named)) != len(named):
            raise TypeError("dimensions must be a list of distinct names")
        dimensions = tuple(named)
        if not dimensions or dimensions[-1] != OVERALL:
            raise TypeError(f"dimensions must end with {OVERALL!r}")
        length = document.get("length")
        if not isinstance(length, dict) or not all(_count(length.get(name)) for name in ("words_a", "words_b")):
            raise TypeError("length must be an object with words_a and words_b, each a count of words")
        if not all(value is None or isinstance(value, bool) or _count(value) for value in length.values()):
            raise TypeError("length's values must be counts of words, true/false or null")
        orders = [_order(document[name], dimensions) for name in ("a_first", "b_first")]
    except (DuplicateKey, ValueError, RecursionError, KeyError, TypeError) as error:
        # A key given twice is named with what is wrong with it (its bare name said nothing); the rest as before.
        problem = error.describe("key", "in the record") if isinstance(error, DuplicateKey) else error
        raise ArenaFileError(f"{where}: not an arena record ({problem})") from None
    return PairRecord(**{name: document[name] for name in texts}, dimensions=dimensions, a_first=orders[0],
                      b_first=orders[1], length=document["length"])


def _order(document: Any, dimensions: tuple[str, ...]) -> OrderVerdict:
    if not isinstance(document, dict):
        raise TypeError("an order must be an object")
    verdicts = document.get("verdicts")
    if verdicts is not None and (not isinstance(verdicts, dict) or sorted(verdicts) != sorted(dimensions)
                                 or not all(v in VERDICTS for v in verdicts.values())):
        raise TypeError(f"verdicts must give A, B or tie for each of {', '.join(dimensions)}")
    failure = document.get("failure")
    if (verdicts is None) != isinstance(failure, str):
        raise TypeError("an order has either verdicts or a failure kind")
    if not isinstance(document.get("cache_hit"), bool) or not _count(document.get("requests")):
        raise TypeError("cache_hit must be true/false and requests a count")
    reply, detail = document.get("reply"), document.get("failure_detail")
    if not all(value is None or isinstance(value, str) for value in (reply, detail)):
        raise TypeError("reply and failure_detail must be text or null")
    return OrderVerdict(verdicts, failure, detail, reply, document["cache_hit"], document["requests"])

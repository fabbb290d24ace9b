"""A verdict file rewritten with its hashes made again (HOSTILE.md classes 3 and 4, found by an independent
probe): every line parses and both hashes match, yet the records say what `capjudge arena` never writes — a
pair twice, a model paired with itself, two judges in one file, an item in two clusters, word counts that are
not counts. `read_arena_file` refuses each with one line naming the line, so `capjudge report --arena` and
`capjudge vatex --arena-verdicts` exit 2 without a traceback and write nothing, instead of a KeyError from the
statistics or one of two verdicts picked in silence."""

from __future__ import annotations

import dataclasses
import math

import pytest
from tests.support.arena_runs import arena, caption_flags
from tests.support.harness_runs import judge_server, run_capjudge
from tests.support.scripted_pairwise_judges import PairwiseWorld

from capjudge.judges.pairwise.record import OrderVerdict, arena_file_text, read_arena_file

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("arena_rewritten")
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(root, server, "fair", "--task", TASK, *caption_flags(), "--limit", "2", "--out", str(root / "out"))
        assert done.returncode == 0, done.stderr[-3000:]
    return read_arena_file(root / "out" / f"arena_{TASK}.jsonl")


def _swapped(record):
    flip = {"A": "B", "B": "A", "tie": "tie"}

    def order(o: OrderVerdict) -> OrderVerdict:
        return dataclasses.replace(o, verdicts={k: flip[v] for k, v in o.verdicts.items()})

    return dataclasses.replace(record, model_a=record.model_b, model_b=record.model_a, caption_a=record.caption_b,
                               caption_b=record.caption_a, a_first=order(record.b_first), b_first=order(record.a_first))


def _other_dimensions(record):
    dims = ("foo", "overall")
    return dataclasses.replace(record, dimensions=dims, a_first=dataclasses.replace(record.a_first, verdicts=dict.fromkeys(dims, "A")),
                               b_first=dataclasses.replace(record.b_first, verdicts=dict.fromkeys(dims, "A")))


REWRITES = {
    "a pair twice": (lambda rs: [*rs, dataclasses.replace(rs[0], a_first=rs[1].a_first)], "a second time"),
    "a pair twice, swapped": (lambda rs: [*rs, _swapped(rs[0])], "a second time"),
    "a model with itself": (lambda rs: [dataclasses.replace(rs[0], model_b=rs[0].model_a), *rs[1:]], "paired with itself"),
    "another dimension set": (lambda rs: [*rs[:-1], _other_dimensions(rs[-1])], "one file holds one judge's verdicts"),
    "another judge": (lambda rs: [*rs[:-1], dataclasses.replace(rs[-1], judge="anycap")], "one file holds one judge's"),
    "an item in two clusters": (lambda rs: [*rs[:-1], dataclasses.replace(rs[-1], cluster="elsewhere")],
                                "an item has one cluster"),
    "NaN words": (lambda rs: [dataclasses.replace(rs[0], length={**rs[0].length, "words_a": math.nan}), *rs[1:]],
                  "each a count of words"),
    "negative words": (lambda rs: [dataclasses.replace(rs[0], length={**rs[0].length, "words_b": -5}), *rs[1:]],
                       "each a count of words"),
    "text words": (lambda rs: [dataclasses.replace(rs[0], length={"words_a": "x", "words_b": 3}), *rs[1:]],
                   "each a count of words"),
    "NaN in another length value": (lambda rs: [dataclasses.replace(rs[0], length={**rs[0].length, "tolerance_percent": math.nan}),
                                                *rs[1:]], "length's values must be counts of words"),
    "infinity in another length value": (lambda rs: [*rs[:-1], dataclasses.replace(rs[-1], length={**rs[-1].length, "within_a": math.inf})],
                                         "length's values must be counts of words"),
    "another caption of an item by one model": (lambda rs: [dataclasses.replace(rs[0], caption_a="short"), *rs[1:]],
                                                "another caption or word count than an earlier record's"),
    "another word count of an item by one model": (
        lambda rs: [dataclasses.replace(rs[0], length={**rs[0].length, "words_a": rs[0].length["words_a"] + 1}), *rs[1:]],
        "another caption or word count than an earlier record's"),
}


@pytest.mark.parametrize("case", list(REWRITES))
def test_a_rewritten_verdict_file_is_one_line_and_exit_2_with_nothing_written(written, tmp_path, case):
    header, records = written
    rewrite, problem = REWRITES[case]
    path = tmp_path / f"arena_{TASK}.jsonl"
    path.write_text(arena_file_text(header.task, header.judge, header.command, rewrite(list(records))), encoding="utf-8")
    _refused_with_nothing_written(path, problem, tmp_path / "report")


def _refused_with_nothing_written(path, problem: str, report) -> None:
    """`capjudge report --arena PATH` exits 2 with one line naming PATH and `problem`, and writes nothing."""
    done = run_capjudge("report", "--arena", str(path), "--out", str(report), timeout=600)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, lines
    assert problem in lines[0] and str(path) in lines[0], lines[0]
    assert not report.exists() or not any(report.iterdir())


def _rehashed(header, record_lines: list[str]) -> str:
    """A verdict file of `record_lines` (JSON text, edited) under `header`'s task, judge and command, both hashes
    made again: what passes the hash checks, as a hand-crafted file would."""
    import hashlib
    import json

    from capjudge.judges.pairwise.record import HEADER_KEY, SCHEMA, arena_stamp

    body = "".join(line + "\n" for line in record_lines)
    keys = [[d["item_id"], d["model_a"], d["caption_a"], d["model_b"], d["caption_b"], d["member"]]
            for d in map(json.loads, record_lines)]
    head = {HEADER_KEY: SCHEMA, "task": header.task, "judge": header.judge, "command": header.command,
            "records": len(record_lines), "stamp": arena_stamp(header.task, header.judge, header.command, keys),
            "records_sha256": hashlib.sha256(body.encode("utf-8")).hexdigest()}
    return json.dumps(head) + "\n" + body


def _crafted(records, edit) -> list[str]:
    import json

    documents = [record.to_json() for record in records]
    edit(documents[0])
    return [json.dumps(document) for document in documents]  # ASCII: a lone surrogate stays an escape


CRAFTED = {
    "dimensions as an object": (lambda d: d.update(dimensions=dict.fromkeys(d["dimensions"], 1)),
                                "dimensions must be a list of distinct names"),
    "a dimension twice": (lambda d: d.update(dimensions=["overall", "overall"]), "dimensions must be a list of distinct names"),
    "an unpaired surrogate in a model name": (lambda d: d.update(model_a=d["model_a"] + "\ud800"),
                                              "unpaired surrogate escape"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_a_crafted_verdict_file_is_one_line_and_exit_2_with_nothing_written(written, tmp_path, case):
    header, records = written
    edit, problem = CRAFTED[case]
    path = tmp_path / f"arena_{TASK}.jsonl"
    path.write_text(_rehashed(header, _crafted(records, edit)), encoding="utf-8")
    _refused_with_nothing_written(path, problem, tmp_path / "report")


def test_a_fifo_given_as_the_verdict_file_is_one_line_not_a_wait(tmp_path):
    import os

    fifo = tmp_path / f"arena_{TASK}.jsonl"
    os.mkfifo(fifo)
    done = run_capjudge("report", "--arena", str(fifo), "--out", str(tmp_path / "report"), timeout=120)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0] and str(fifo) in lines[0], lines


def test_a_candidate_number_of_thousands_of_digits_is_no_candidate():
    from capjudge.judges.pairwise.record import candidate_index

    assert candidate_index("candidate 5") == 5
    assert candidate_index("candidate " + "9" * 5000) is None  # int() of it raised ValueError (a traceback)

"""Dataset fields out of their range (issue 46, item 5): hostile copies of the real benchmark files, written to
tmp_path from ../shared/data (never committed), fed to the real commands.

- MSVD-Eval ratings outside the annotators' 1-5 scale, non-numbers, NaN, infinities and booleans: refused by
  `capjudge correlate --msvd-eval` (they once loaded silently and changed every figure) and by the task loader
  (`capjudge estimate --task gveval_references`), one line naming the file, the item, the column and the value.
- AnyCapEval items whose own fields are unusable (caption type, length instruction, turns): refused by the
  AnyCap task loader (`capjudge estimate --task anycap_style`), one line naming the file and the item.
"""

from __future__ import annotations

import json

import pytest
from tests.support.paths import shared_path
from tests.support.harness_runs import run_capjudge
from tests.support.hostile import refusal_line

MSVD = ("data", "msvd_eval", "MSVD-Eval.json")
ANYCAP = ("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")


# ---------------------------------------------------------------------------------------------------------
# MSVD-Eval


def _msvd_copy(tmp_path, literal=None, *, whole_row=False):
    """The real MSVD-Eval.json with its first item's first annotator's accuracy (`whole_row`: all five columns,
    so that the mean column still agrees with the four dimensions) written as `literal` (JSON text, so that what
    JSON readers accept but json.dumps never writes, NaN or 10**400, can be tried)."""
    items = json.loads(shared_path(*MSVD).read_text(encoding="utf-8"))
    first = next(iter(items))
    if literal is not None:
        row = items[first]["human_score"][0]
        row[:] = ["__RATING__"] * len(row) if whole_row else ["__RATING__", *row[1:]]
    text = json.dumps(items).replace('"__RATING__"', literal or "")
    path = tmp_path / "MSVD-Eval.json"
    path.write_text(text, encoding="utf-8")
    return path, first, list(items)


def _judge_scores(tmp_path, ids):
    path = tmp_path / "judge.jsonl"
    path.write_text("".join(json.dumps({"id": item, "judge": (n * 37) % 100}) + "\n" for n, item in enumerate(ids)))
    return path


def _correlate(tmp_path, msvd, ids):
    return run_capjudge("correlate", "--msvd-eval", str(msvd), "--judge-scores", str(_judge_scores(tmp_path, ids)),
                        "--bootstrap", "0", "--format", "json")


OUT_OF_SCALE = ["500", "9", "6", "0", "-3", "0.5", "5.25", "1" + "0" * 400]


@pytest.mark.parametrize("literal", OUT_OF_SCALE, ids=lambda literal: literal[:8])
def test_an_msvd_eval_rating_outside_1_to_5_is_refused_by_correlate(tmp_path, literal):
    """A whole annotator row out of scale: its mean column agrees, so nothing else in the row gives it away
    (it loaded silently, and 500 turned a tau-b of 0.0 into -2.0)."""
    msvd, first, ids = _msvd_copy(tmp_path, literal, whole_row=True)
    refusal_line(_correlate(tmp_path, msvd, ids),
                 f"{msvd}: item {first!r}, annotator 0: accuracy = {literal} is outside the 1-5 rating scale")


# (JSON literal, how the refusal shows the value)
NOT_A_NUMBER = [('"4"', "'4'"), ("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf"), ("true", "True"),
                ("null", "None"), ("[4]", "[4]"), ('{"score": 4}', "{'score': 4}")]


@pytest.mark.parametrize(("literal", "shown"), NOT_A_NUMBER, ids=[literal for literal, _ in NOT_A_NUMBER])
def test_an_msvd_eval_rating_that_is_not_a_number_is_refused_by_correlate(tmp_path, literal, shown):
    msvd, first, ids = _msvd_copy(tmp_path, literal)
    refusal_line(_correlate(tmp_path, msvd, ids),
                 f"{msvd}: item {first!r}, annotator 0: scores must be finite numbers, got accuracy = {shown}")


def test_the_untouched_msvd_eval_copy_still_correlates(tmp_path):
    """The control: the same copy with nothing changed gives figures (so the refusals come from the edits)."""
    msvd, _, ids = _msvd_copy(tmp_path)
    done = _correlate(tmp_path, msvd, ids)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)


def test_the_msvd_eval_task_loader_refuses_an_out_of_scale_rating_too(tmp_path):
    msvd, first, _ = _msvd_copy(tmp_path, "500", whole_row=True)
    done = run_capjudge("estimate", "--task", "gveval_references",
                        env={"CAPJUDGE_MSVD_EVAL_JSON": str(msvd), "OPENAI_API_KEY": "sk-test"})
    refusal_line(done, str(msvd), f"item {first!r}, annotator 0: accuracy = 500 is outside the 1-5 rating scale")


# ---------------------------------------------------------------------------------------------------------
# AnyCapEval video style


def _anycap_copy(tmp_path, edit):
    """The real AnyCapEval file with its first item passed through `edit(item)`; returns (path, first item id)."""
    lines = [json.loads(line) for line in shared_path(*ANYCAP).read_text(encoding="utf-8").splitlines() if line.strip()]
    edit(lines[0])
    path = tmp_path / "anycap.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path, lines[0]["id"]


def _estimate_anycap(tmp_path, data):
    return run_capjudge("estimate", "--task", "anycap_style",
                        env={"CAPJUDGE_ANYCAP_JSONL": str(data), "CAPJUDGE_ANYCAP_VIDEOS": str(tmp_path / "videos"),
                             "OPENAI_API_KEY": "sk-test"})


def _set(path, value):
    def edit(item):
        target = item
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


ANYCAP_CASES = [
    ("unknown type", _set(("restriction", 0), "summary"), "unknown caption type 'summary'"),
    ("type not text", _set(("restriction", 0), 5), "caption type must be a string, got 5"),
    ("unreadable length", _set(("restriction", 1), "Make it nice."),
     "restriction[1] 'Make it nice.' states no length restriction capjudge can read"),
    ("length not text", _set(("restriction", 1), 25), "restriction[1] must be the length instruction text, got 25"),
    ("contradicted length", _set(("restriction", 1), "The generated caption's length needs to be exactly 50 words."),
     "restriction[1] says 'exactly 50 words', but the instruction (conversations[0]) asks for '20 to 30 words'"),
    ("three restrictions", _set(("restriction",), ["brief", "The generated caption's length needs to be 20 to 30 words.", "x"]),
     "'restriction' must be [caption_type, length instruction]"),
    ("turns swapped", lambda item: item["conversations"].reverse(), "conversations[0] is from 'gpt'"),
    ("three turns", lambda item: item["conversations"].append({"from": "human", "value": "And again."}),
     "'conversations' must hold the instruction and the reference (2 turns)"),
]


@pytest.mark.parametrize(("name", "edit", "problem"), ANYCAP_CASES, ids=[case[0] for case in ANYCAP_CASES])
def test_an_anycap_item_with_an_unusable_field_is_refused_naming_file_and_item(tmp_path, name, edit, problem):
    data, first = _anycap_copy(tmp_path, edit)
    refusal_line(_estimate_anycap(tmp_path, data), f"AnyCapEval video style at local:{data}: item {first}: {problem}")


def test_the_untouched_anycap_copy_loads(tmp_path):
    """The control: the unedited copy passes the loader; what stops it then is only that its clips are absent."""
    data, _ = _anycap_copy(tmp_path, lambda item: None)
    refusal_line(_estimate_anycap(tmp_path, data), "none of the 189 items' videos was found")

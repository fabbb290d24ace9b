"""Every count a user gives `capjudge` on the command line has an upper bound (capjudge.tasks.cli.bounds),
stated in its --help and checked right after parsing, before any file is read: a value past it is one line
naming the flag, the value and the bound, exit 2, no traceback (issue #36: `capjudge vatex --resamples
10000000` ended in a MemoryError traceback on the full file, and ran with no progress on 8 clips until killed).

The refusals are parse-only, so the inputs named (runs, data files) need not exist: that they are never read
is part of what is checked.
"""

from __future__ import annotations

import argparse
import json

import pytest
from capjudge.tasks.cli import bounds
from capjudge.tasks.cli.main import build_parser
from tests.support.harness_runs import run_capjudge
from tests.support.hostile import refusal_line

ABSENT = "/nonexistent/never-read"


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for every command that runs (render anycap, vatex, ...)."""
    actions = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
    for action in actions:
        for name, sub in action.choices.items():
            yield from _leaf_parsers(sub, (*path, name))


def test_every_integer_flag_of_every_command_has_a_stated_bound():
    """An int flag added without `count_argument` (or `bound_flag`) would be unbounded again: this finds it."""
    unbounded, unstated = [], []
    for path, parser in _leaf_parsers(build_parser()):
        recorded = {bound.dest for bound in parser.get_default("_count_bounds") or ()}
        for action in parser._actions:
            if action.type is int:
                name = f"capjudge {' '.join(path)} {action.option_strings[0]}"
                if action.dest not in recorded:
                    unbounded.append(name)
                elif "allowed " not in (action.help or ""):
                    unstated.append(name)
    assert unbounded == [] and unstated == []


# (command line before the flag, flag, a value past the bound, the bound as printed)
PAST_THE_BOUND = [
    (("vatex", ABSENT), "--resamples", "10001", "10,000"),
    (("vatex", ABSENT), "--seed", str(2**32), "4,294,967,295"),
    (("vatex", ABSENT), "--pairs-per-clip", "16", "15"),
    (("correlate", ABSENT, "--judge", "j", "--human", "h"), "--bootstrap", "10001", "10,000"),
    (("correlate", ABSENT, "--judge", "j", "--human", "h"), "--seed", str(2**32), "4,294,967,295"),
    (("correlate", ABSENT, "--judge", "j", "--human", "h"), "--human-index", "1001", "1,000"),
    (("leaderboard", ABSENT), "--resamples", "10001", "10,000"),
    (("leaderboard", ABSENT), "--permutations", "10001", "10,000"),
    (("leaderboard", ABSENT), "--seed", str(2**32), "4,294,967,295"),
    (("reliability", ABSENT, "--task", "gveval"), "--resamples", "10001", "10,000"),
    (("reliability", ABSENT, "--task", "gveval"), "--seed", str(2**32), "4,294,967,295"),
    (("agreement", ABSENT, ABSENT, "--task", "gveval", "--metric", "gveval_mean"), "--resamples", "10001", "10,000"),
    (("agreement", ABSENT, ABSENT, "--task", "gveval", "--metric", "gveval_mean"), "--seed", str(2**32), "4,294,967,295"),
    (("judge", ABSENT, "--task", "gveval", "--out", ABSENT), "--processes", "65", "64"),
    (("judge", ABSENT, "--task", "gveval", "--out", ABSENT), "--batch-max-requests", "50001", "50,000"),
    (("judge", ABSENT, "--task", "gveval", "--out", ABSENT), "--batch-max-bytes", "200000001", "200,000,000"),
    (("estimate", ABSENT, "--task", "gveval"), "--limit", "1000001", "1,000,000"),
    (("sensitivity", ABSENT, "--task", "gveval", "--out", ABSENT), "--limit", "1000001", "1,000,000"),
    (("sensitivity", ABSENT, "--task", "gveval", "--out", ABSENT), "--seed", str(2**32), "4,294,967,295"),
    (("sensitivity", ABSENT, "--task", "gveval", "--out", ABSENT), "--resamples", "10001", "10,000"),
    (("demo", "--out", ABSENT), "--limit", "1000001", "1,000,000"),
    (("arena", ABSENT, ABSENT, "--task", "gveval_demo", "--out", ABSENT), "--limit", "1000001", "1,000,000"),
    (("arena", ABSENT, ABSENT, "--task", "gveval_demo", "--out", ABSENT), "--seed", str(2**32), "4,294,967,295"),
    (("arena", ABSENT, ABSENT, "--task", "gveval_demo", "--out", ABSENT), "--anchors", "101", "100"),
    (("arena", "--candidates", "--task", "gveval_vatex_references", "--out", ABSENT), "--pairs-per-clip", "16", "15"),
    (("arena", ABSENT, ABSENT, "--task", "gveval_demo", "--out", ABSENT, "--batch"), "--batch-max-requests", "50001", "50,000"),
    (("arena", ABSENT, ABSENT, "--task", "gveval_demo", "--out", ABSENT, "--batch"), "--batch-max-bytes", "200000001",
     "200,000,000"),
    (("render", "anycap", "--caption-type", "brief", "--output", "a", "--reference", "b", "--out", ABSENT),
     "--max-tokens", "1000001", "1,000,000"),
    (("serve-local",), "--port", "65536", "65,535"),
    (("serve-local",), "--n-ctx", "131073", "131,072"),
    (("serve-local",), "--threads", "513", "512"),
    (("serve-local",), "--parent-pid", "4194305", "4,194,304"),
]


@pytest.mark.parametrize(("before", "flag", "value", "bound"), PAST_THE_BOUND,
                         ids=[f"{case[0][0]}{case[1]}" for case in PAST_THE_BOUND])
def test_a_count_past_its_bound_is_one_line_naming_flag_value_and_bound(before, flag, value, bound):
    done = run_capjudge(*before, flag, value)
    command = " ".join(before[:2]) if before[0] == "render" else before[0]
    line = refusal_line(done, flag, value, bound)
    assert line == f"capjudge {command}: {flag} {value}: more than {bound}, the most capjudge allows (see capjudge {command} --help)"
    assert done.stdout == ""


def test_every_bounded_flag_is_in_the_table_above():
    """PAST_THE_BOUND covers every bounded flag of every command, so a new one gets a refusal test too."""
    covered = {(case[0][0] if case[0][0] != "render" else "render anycap", case[1]) for case in PAST_THE_BOUND}
    bounded = {(" ".join(path), bound.flag) for path, parser in _leaf_parsers(build_parser())
               for bound in parser.get_default("_count_bounds") or ()}
    assert bounded == covered


@pytest.mark.parametrize(("args", "said"), [
    (("vatex", ABSENT, "--resamples", "-1"), "capjudge vatex: --resamples must be 0 or more, got -1"),
    (("leaderboard", ABSENT, "--permutations", "0"), "capjudge leaderboard: --permutations must be 1 or more, got 0"),
    (("judge", ABSENT, "--task", "gveval", "--out", ABSENT, "--processes", "0"),
     "capjudge judge: --processes must be 1 or more, got 0"),
    (("estimate", "--task", "gveval", "--limit", "0"), "capjudge estimate: --limit must be 1 or more, got 0"),
    (("correlate", ABSENT, "--judge", "j", "--human", "h", "--human-index", "1", "--human-index", "-1001"),
     "capjudge correlate: --human-index must be -1,000 or more, got -1001"),
])
def test_a_count_below_its_range_names_flag_and_value(args, said):
    assert refusal_line(run_capjudge(*args), said) == said


def test_issue_36_ten_million_resamples_are_refused_before_the_file_is_read(tmp_path):
    """The reported command: refused at once (it used to run out of memory on the full file), and the largest
    allowed count still runs on a small file."""
    data = tmp_path / "eight_clips.json"
    clips = {f"clip{i}_000001_000011": {"cands": [f"a man does thing {i}", "a dog", "three cats on a wall"],
                                        "scores": str([[(i + j) % 5 + 1, (i * j) % 5 + 1, (i + 2 * j) % 5 + 1]
                                                            for j in range(3)]),
                                        "refs": [["a man does something", "a dog runs"]]} for i in range(8)}
    data.write_text(json.dumps(clips), encoding="utf-8")
    refused = run_capjudge("vatex", str(data), "--resamples", "10000000")
    refusal_line(refused, "--resamples", "10000000", f"{bounds.MAX_RESAMPLES:,}")
    at_the_bound = run_capjudge("vatex", str(data), "--resamples", str(bounds.MAX_RESAMPLES), "--format", "json")
    assert at_the_bound.returncode == 0, at_the_bound.stderr
    assert f"{bounds.MAX_RESAMPLES} resamples of the 8 clips" in json.loads(at_the_bound.stdout)["ci_method"]


def test_help_states_the_bound():
    done = run_capjudge("vatex", "--help")
    assert done.returncode == 0
    assert "allowed 0 to 10,000" in " ".join(done.stdout.split())


@pytest.mark.parametrize("value", ["0", "0.001", "-1", "nan", "inf", "1e400", "3601", "soon"])
def test_a_batch_poll_interval_outside_its_range_is_refused_before_anything_is_submitted(value):
    done = run_capjudge("judge", "--batch", "--poll-seconds", value, "--captions", "x.jsonl", "--task", "gveval_demo",
                        "--out", "nowhere")
    line = refusal_line(done, "--poll-seconds", "must be")
    assert "from 0.01 to 3,600 seconds" in line or "a number of seconds" in line

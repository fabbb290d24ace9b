"""`capjudge sensitivity --dry-run` and `capjudge estimate` look every request up in the judge's reply cache
(issue 47 item 2): they say how many are already there, and the requests, tokens and cost left to pay for. The
"left" count is what the real run then sends, counted at the test server. The cache is only read: a missing file
stays missing, and one that is no usable cache is one line, exit 2.

Through the real CLI (the warm launcher, as the other CLI tests).
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.scripted_caption_judges import CAPTIONS, TASK, DemoWorld, judge_env

pytestmark = pytest.mark.slow

PERTURBATIONS = ("--perturbation", "padding", "--perturbation", "shuffle")


@pytest.fixture(scope="module")
def world():
    return DemoWorld()


def _env(tmp_path, server, **extra: str) -> dict[str, str]:
    return {**judge_env(tmp_path, server, "fair"), **extra}


def _cli(args, env):
    return run_capjudge_cli([str(arg) for arg in args], env=env, cwd=REPO_ROOT)


def _sensitivity(tmp_path, env, limit: int, *extra: str):
    out = tmp_path / f"out{limit}"
    return _cli(["sensitivity", "--task", TASK, "--captions", CAPTIONS, "--limit", limit, "--resamples", "100",
                 *PERTURBATIONS, "--out", out, *extra], env)


def _left(stdout: str) -> tuple[int, int, int]:
    """(requests in total, already cached, left to pay for) from the reply-cache line."""
    found = re.search(r"([\d,]+) of the ([\d,]+) requests already there \(a run replays them\): ([\d,]+) left to pay for",
                      stdout)
    assert found, stdout
    cached, total, left = (int(n.replace(",", "")) for n in found.groups())
    assert cached + left == total
    return total, cached, left


def test_a_sensitivity_dry_run_counts_what_the_cache_holds_and_the_run_then_sends_exactly_the_rest(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        env = _env(tmp_path, server)
        cache = tmp_path / "fair.sqlite"
        dry = _sensitivity(tmp_path, env, 2, "--dry-run", "--price-input", "2.5", "--price-output", "10")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert _left(dry.stdout) == (6, 0, 6) and not cache.exists()  # no cache yet: all to pay, none made
        assert "; 6 to ask, 0 of them already in the reply cache: 6 left to send" in dry.stdout

        first = _sensitivity(tmp_path, env, 1)  # part of the cache: the first item's judgments
        assert first.returncode == 0, first.stderr[-3000:]
        sent_first = len(server.log)
        assert sent_first == 3
        dry = _sensitivity(tmp_path, env, 2, "--dry-run", "--price-input", "2.5", "--price-output", "10")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert len(server.log) == sent_first  # the dry run sent no judgment
        total, cached, left = _left(dry.stdout)
        assert (total, cached, left) == (6, 3, 3)
        assert f"task {TASK} (sensitivity): 6 judgments, 3 requests expected" in dry.stdout
        assert "cost: $" in dry.stdout and "for the requests left to pay for" in dry.stdout

        second = _sensitivity(tmp_path, env, 2)
        assert second.returncode == 0, second.stderr[-3000:]
        assert len(server.log) - sent_first == left  # what the dry run said is left is what the run sent

        dry = _sensitivity(tmp_path, env, 2, "--dry-run", "--price-input", "2.5", "--price-output", "10")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert _left(dry.stdout) == (6, 6, 0)
        assert "6 to ask, 6 of them already in the reply cache: 0 left to send" in dry.stdout
        assert "6 judgments, 0 requests expected" in dry.stdout
        assert re.search(r"cost: \$0\.00 for the requests left to pay for", dry.stdout), dry.stdout


def test_estimate_after_judging_part_of_the_captions_prices_only_the_rest(tmp_path, world):
    # The same captions but for the last six, reworded: judging it caches the first four requests of CAPTIONS.
    lines = [json.loads(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    some = tmp_path / "some.jsonl"
    some.write_text("".join(json.dumps({**row, "caption": row["caption"] + " It is calm." if n >= 4 else row["caption"]})
                            + "\n" for n, row in enumerate(lines)), encoding="utf-8")
    with judge_server(responder=world.respond) as server:
        env = _env(tmp_path, server)
        judged = _cli(["judge", "--captions", some, "--task", TASK, "--out", tmp_path / "judged"], env)
        assert judged.returncode == 0, judged.stderr[-3000:]
        sent_first = len(server.log)
        assert sent_first == 10
        estimate = _cli(["estimate", "--captions", CAPTIONS, "--task", TASK, "--price-input", "2.5",
                         "--price-output", "10"], env)
        assert estimate.returncode == 0, estimate.stderr[-3000:]
        assert len(server.log) == sent_first
        assert _left(estimate.stdout) == (10, 4, 6)
        assert f"task {TASK}: 10 items, 6 requests expected" in estimate.stdout
        judged = _cli(["judge", "--captions", CAPTIONS, "--task", TASK, "--out", tmp_path / "all"], env)
        assert judged.returncode == 0, judged.stderr[-3000:]
        assert len(server.log) - sent_first == 6
        again = _cli(["estimate", "--captions", CAPTIONS, "--task", TASK], env)
        assert again.returncode == 0 and _left(again.stdout) == (10, 10, 0), again.stderr[-3000:]


def _refused(result, *needles: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if all(needle in line for needle in needles)]
    assert lines, result.stderr[-3000:]


@pytest.mark.parametrize("command", ["estimate", "sensitivity"])
def test_a_cache_that_is_no_cache_is_one_line_and_a_missing_one_is_not_made(tmp_path, command):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all " * 100)
    missing = tmp_path / "deep" / "none.sqlite"
    args = (["estimate", "--captions", CAPTIONS, "--task", TASK] if command == "estimate" else
            ["sensitivity", "--task", TASK, "--captions", CAPTIONS, "--limit", "2", *PERTURBATIONS, "--dry-run"])
    with judge_server() as server:
        _refused(_cli(args, _env(tmp_path, server, CAPJUDGE_CACHE=str(folder))), str(folder), "is a folder")
        _refused(_cli(args, _env(tmp_path, server, CAPJUDGE_CACHE=str(other))), str(other),
                 "not a capjudge reply cache")
        _refused(_cli(args, _env(tmp_path, server, CAPJUDGE_CACHE=str(garbage))), str(garbage))
        fresh = _cli(args, _env(tmp_path, server, CAPJUDGE_CACHE=str(missing)))
        assert server.log == []
    assert other.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("other"))\
        == ["other.sqlite"]
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    total, cached, left = _left(fresh.stdout)
    assert cached == 0 and left == total > 0 and "(no such file yet)" in fresh.stdout
    assert not missing.exists() and not missing.parent.exists()

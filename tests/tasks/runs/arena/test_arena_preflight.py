"""`capjudge arena`'s pre-flight probe, counted at the test server (issue #60 items 9 and 10), through the real CLI.

Item 9: an output name the run may not write (a link, a folder, another run's verdict file) was refused only
after the task's pre-flight probe had reached the judge; the README says "before any request". Now the names
are checked first: the server sees nothing, the probe included.

Item 10: a fully cached rerun still sent the probe while printing 0 requests. Now the judges are probed only
when an order is left to ask, and the probes sent are printed apart from the requests column, so the printed
counts add up to what the server received.
"""

from __future__ import annotations

import json

import pytest
from tests.support.arena_runs import arena, caption_flags, one_line_refusal
from tests.support.harness_runs import judge_server
from tests.support.scripted_pairwise_judges import PairwiseWorld

pytestmark = pytest.mark.slow
TASK = "gveval_demo"
FILE = f"arena_{TASK}.jsonl"


def _row(stdout: str) -> list[str]:
    """The judge's row of the summary table: judge, pairs, both orders, flips, failed, requests, from cache."""
    rows = [line for line in stdout.splitlines() if line.startswith("| judge | ") and "pairs" not in line]
    assert len(rows) == 1, stdout[-3000:]
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def _probes(stdout: str) -> int:
    lines = [line for line in stdout.splitlines() if line.startswith("Pre-flight probe requests: ")]
    assert len(lines) == 1, stdout[-3000:]
    return int(lines[0].split(": ", 1)[1].split(" ", 1)[0])


def test_an_output_name_that_cannot_be_written_is_refused_before_the_probe(tmp_path):
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        # Another run's verdict file: written by a run of another command (two caption sets, not three).
        taken = tmp_path / "taken"
        first = arena(tmp_path, server, "first", "--task", TASK, *caption_flags("good", "fair"), "--limit", "1",
                      "--out", str(taken))
        assert first.returncode == 0, first.stderr[-3000:]
        assert len(server.preflights) == 1 and len(server.log) == 2
        linked, folder = tmp_path / "linked", tmp_path / "folder"
        linked.mkdir()
        (linked / FILE).symlink_to(tmp_path / "elsewhere.jsonl")
        (folder / FILE).mkdir(parents=True)
        for out in (taken, linked, folder):
            server.log.clear()
            server.preflights.clear()
            done = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--limit", "1", "--out", str(out))
            line = one_line_refusal(done)
            assert str(out / FILE) in line, line
            assert server.log == [] and server.preflights == [], out  # not a judgment, not the probe
    assert not (tmp_path / "elsewhere.jsonl").exists()
    assert (folder / FILE).is_dir()


def test_a_fully_cached_rerun_sends_nothing_and_every_count_is_the_servers(tmp_path):
    world = PairwiseWorld()
    out = tmp_path / "out"
    run = ("--task", TASK, *caption_flags(), "--limit", "2", "--out", str(out))
    with judge_server(responder=world.respond) as server:
        done = arena(tmp_path, server, "first", *run)
        assert done.returncode == 0, done.stderr[-3000:]
        # 2 items x 3 pairs x 2 orders, and one probe before the first of them: printed as the server counts them.
        assert len(server.log) == 12 and len(server.preflights) == 1
        assert _row(done.stdout)[5:] == ["12", "0"] and _probes(done.stdout) == 1

        server.log.clear()
        server.preflights.clear()
        again = arena(tmp_path, server, "first", *run)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.log == [] and server.preflights == []
        assert _row(again.stdout)[5:] == ["0", "12"] and _probes(again.stdout) == 0
        as_json = arena(tmp_path, server, "first", *run, "--format", "json")
        assert as_json.returncode == 0, as_json.stderr[-3000:]
        assert server.log == [] and server.preflights == []
        summary = json.loads(as_json.stdout)
        assert summary["preflight_probes"] == 0 and summary["judges"][0]["requests"] == 0

        # One more item: its orders are left to ask, so the judge is probed again before them (a new process).
        more = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--limit", "3",
                     "--out", str(tmp_path / "more"))
        assert more.returncode == 0, more.stderr[-3000:]
        assert len(server.log) == 6 and len(server.preflights) == 1
        assert _row(more.stdout)[5:] == ["6", "12"] and _probes(more.stdout) == 1

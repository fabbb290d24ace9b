"""`capjudge arena --batch` (issue #49 item 2: "through the same ... Batch API ... as every other judgment"):
both orders of every pair through the Batch API of the test server (tests/support/batch_service.py), real HTTP
through the openai SDK, the real CLI; the verdicts must be those of the online run, from the same cache keys.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from tests.support.arena_runs import arena, caption_flags, one_line_refusal, panel_file
from tests.support.harness_runs import judge_server
from tests.support.scripted_pairwise_judges import PairwiseWorld

from capjudge.judges.pairwise.record import read_arena_file

pytestmark = pytest.mark.slow
TASK = "gveval_demo"
BATCH = ("--batch", "--poll-seconds", "0.05")


def _verdicts(path):
    _, records = read_arena_file(path)
    return [(r.item_id, r.model_a, r.model_b, r.member, r.a_first.verdicts, r.b_first.verdicts) for r in records]


def _states(out):
    return {path.parent.name: json.loads(path.read_text(encoding="utf-8")) for path in (out / "batch").rglob("batch_state.json")}


def _custom_ids(out):
    return sorted(json.loads(line)["custom_id"] for path in (out / "batch").rglob("input_round*.jsonl")
                  for line in path.read_text(encoding="utf-8").splitlines())


def test_a_batch_arena_sends_every_order_as_a_batch_line_and_gives_the_online_verdicts(tmp_path):
    world = PairwiseWorld()
    flags = ["--task", TASK, *caption_flags(), "--limit", "2"]
    with judge_server(responder=world.respond) as server:
        server.batch.script("slow_finalize")
        done = arena(tmp_path, server, "fair", *flags, "--out", str(tmp_path / "batch_run"), *BATCH)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.log == []  # nothing asked online: 2 items x 3 pairs x 2 orders, all in one batch
        assert server.batch.created == 1 and server.batch.lines_answered == 12
        assert "capjudge arena --batch: submitted" in done.stdout and "completed" in done.stdout
        # The summary's requests column counts online requests (0); what the batch carried is said beside it.
        assert "capjudge arena --batch: 12 requests sent in 1 batch(es) by this command" in done.stderr
        # One line per order: the item and a digest of the order, so the lines of one item never collide.
        _, records = read_arena_file(tmp_path / "batch_run" / f"arena_{TASK}.jsonl")
        expected = sorted(
            f"{r.item_id}/{hashlib.sha256(json.dumps(order).encode()).hexdigest()[:16]}#0"
            for r in records for order in ([r.model_a, r.model_b], [r.model_b, r.model_a]))
        assert _custom_ids(tmp_path / "batch_run") == expected and len(set(expected)) == 12
        ((member, state),) = _states(tmp_path / "batch_run").items()
        assert state["run"]["task"] == TASK and state["run"]["arena_orders"] == "12"
        batched = _verdicts(tmp_path / "batch_run" / f"arena_{TASK}.jsonl")
        assert all(a is not None and b is not None for *_, a, b in batched)
        # The fair judge's rule in both orders: the batch replies went through the same parser.
        assert not any(r.flipped() for r in records)

        # The batch filled the reply cache under the online keys: the same command online asks nothing and
        # gives the same verdicts; the batch command again submits nothing.
        online = arena(tmp_path, server, "fair", *flags, "--out", str(tmp_path / "online_run"))
        assert online.returncode == 0, online.stderr[-3000:]
        assert server.log == [] and _verdicts(tmp_path / "online_run" / f"arena_{TASK}.jsonl") == batched
        again = arena(tmp_path, server, "fair", *flags, "--out", str(tmp_path / "batch_run"), *BATCH)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.batch.created == 1 and server.batch.uploads == 1 and server.log == []
        assert _verdicts(tmp_path / "batch_run" / f"arena_{TASK}.jsonl") == batched


def test_no_wait_writes_nothing_until_the_batch_ends_and_another_plan_is_refused_in_its_folder(tmp_path):
    world = PairwiseWorld()
    out = tmp_path / "out"
    flags = ["--task", TASK, *caption_flags("good", "poor"), "--limit", "2", "--out", str(out)]
    with judge_server(responder=world.respond) as server:
        server.batch.script("slow_finalize")
        submitted = arena(tmp_path, server, "first", *flags, *BATCH, "--no-wait")
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        assert "1 batch(es) still running; run the same command again" in submitted.stdout
        assert not (out / f"arena_{TASK}.jsonl").exists() and server.batch.created == 1 and server.log == []

        # Another plan (a third item) in the same folder: its batch state names another run, one line, exit 2,
        # nothing submitted; the first plan's batch is still there to collect.
        other = arena(tmp_path, server, "first", *[f if f != "2" else "3" for f in flags], *BATCH)
        assert "belongs to another run" in one_line_refusal(other)
        assert server.batch.created == 1

        collected = arena(tmp_path, server, "first", *flags, *BATCH)
        assert collected.returncode == 0, collected.stderr[-3000:]
        assert server.batch.created == 1 and server.batch.lines_answered == 4 and server.log == []
        _, records = read_arena_file(out / f"arena_{TASK}.jsonl")
        assert len(records) == 2 and all(r.flipped() for r in records)  # the always-first judge, from the batch


def test_a_panel_batches_each_members_orders_through_its_own_state(tmp_path):
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        panel = panel_file(tmp_path / "panel.json", server, ("first", "fair"))
        done = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--limit", "1", "--out",
                     str(tmp_path / "out"), *BATCH, env={"CAPJUDGE_PANEL": str(panel)})
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.log == [] and server.batch.created == 2 and server.batch.lines_answered == 12
    states = _states(tmp_path / "out")
    assert {state["run"]["model"] for state in states.values()} == {"first", "fair"}
    _, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
    assert {r.member: r.flipped() for r in records} == {"first": True, "fair": False, "combined panel": True}


@pytest.mark.parametrize(("args", "problem"), [
    (["--no-wait"], "--no-wait and --retry-online go with --batch"),
    (["--retry-online"], "--no-wait and --retry-online go with --batch"),
    (["--batch", "--dry-run"], "--dry-run sends nothing: not with --batch"),
    (["--batch", "--poll-seconds", "nan"], "--poll-seconds"),
    (["--batch", "--batch-max-requests", "0"], "--batch-max-requests"),
    # A request larger than a file may be: refused once the first one is rendered, nothing uploaded.
    (["--batch", "--batch-max-bytes", "1"], "bytes, over the batch file limit of 1: give --batch-max-bytes at least"),
])
def test_bad_batch_flags_are_one_line_and_exit_2_before_any_request(tmp_path, args, problem):
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags(), "--out", str(tmp_path / "out"), *args)
        assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
        assert problem in done.stderr and "Traceback" not in done.stderr
        assert server.log == [] and server.batch.created == 0 and not (tmp_path / "out" / "batch").exists()

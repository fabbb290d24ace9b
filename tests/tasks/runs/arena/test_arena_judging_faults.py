"""`capjudge arena` when replies do not parse, and with a panel of two judges (issue #49 items 2 and 5), through
the real CLI and the test server: a malformed reply is a counted failed parse, re-asked (never a silent tie);
a judge whose replies never parse leaves its orders failed, counted and exit status 3; a panel's members each
judge every order, one record per member."""

from __future__ import annotations

import json

import pytest
from tests.support.arena_runs import arena, caption_flags, panel_file
from tests.support.harness_runs import judge_server
from tests.support.openai_server import Reply
from tests.support.scripted_pairwise_judges import PairwiseWorld

from capjudge.judges.pairwise.record import read_arena_file

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


def _row(stdout: str, member: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith(f"| {member} | ")][-1]


def test_malformed_replies_are_re_asked_and_a_judge_that_never_answers_is_counted_failed(tmp_path):
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        # Two malformed replies first (no verdict lines; the template's own "[[verdict]]" echoed): each is a
        # failed parse, asked again at the next sample index, and then judged.
        server.script(Reply("I think both are fine."),
                      Reply("Accuracy: [[verdict]]\nCompleteness: [[verdict]]\nConciseness: [[verdict]]\n"
                            "Relevance: [[verdict]]\nOverall: [[verdict]]"))
        done = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--limit", "2", "--out",
                     str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 12 + 2
        assert _row(done.stdout, "judge") == "| judge | 6 | 6 | 6 | 0 | 14 | 0 |"
        _, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
        # The two malformed replies go to whichever orders asked first: two orders re-asked once, or (with the
        # client's concurrency) one order re-asked twice. Either way each is re-asked, none is a verdict.
        assert sorted(o.requests for r in records for o in (r.a_first, r.b_first)) in ([1] * 10 + [2, 2], [1] * 11 + [3])

        # A judge whose every reply is unreadable: max_tries (3) requests per order, every order failed with its
        # kind, no verdict made up; above the failure rate: exit 3, the file written first.
        server.log.clear()
        mute = arena(tmp_path, server, "mute", "--task", TASK, *caption_flags(), "--limit", "1", "--out",
                     str(tmp_path / "mute"))
        assert mute.returncode == 3, mute.stderr[-3000:]
        assert len(server.log) == 6 * 3
        assert _row(mute.stdout, "judge") == "| judge | 3 | 0 | 0 | 6 | 18 | 0 |"
        assert "6 of 6 orders (100%) were not judged" in mute.stderr
        _, failed = read_arena_file(tmp_path / "mute" / f"arena_{TASK}.jsonl")
        orders = [o for r in failed for o in (r.a_first, r.b_first)]
        assert {(o.verdicts, o.failure) for o in orders} == {(None, "missing")}
        assert all(not r.flipped() for r in failed)


def test_a_panel_of_two_judges_gives_one_record_per_member_each_asked_both_orders(tmp_path):
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        panel = panel_file(tmp_path / "panel.json", server, ("first", "fair"))
        done = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--limit", "2", "--out",
                     str(tmp_path / "out"), env={"CAPJUDGE_PANEL": str(panel)})
        assert done.returncode == 0, done.stderr[-3000:]
        assert sorted(entry.body["model"] for entry in server.log) == ["fair"] * 12 + ["first"] * 12
    assert _row(done.stdout, "first") == "| first | 6 | 6 | 6 | 0 | 12 | 0 |"
    assert _row(done.stdout, "fair") == "| fair | 6 | 6 | 0 | 0 | 12 | 0 |"
    # The panel's own verdict: both members say A when A is shown first; when B is, the always-first member
    # says B and the fair one A: a split panel, a tie. So every pair is position-inconsistent for the panel.
    assert _row(done.stdout, "combined panel") == "| combined panel | 6 | 6 | 6 | 0 | 0 | 0 |"
    header, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
    assert header.judge == "gveval judge, model panel(first,fair)"
    assert [(r.item_id, r.model_a, r.model_b, r.member) for r in records][:4] == [
        ("g01", "captions_good", "captions_fair", "first"), ("g01", "captions_good", "captions_fair", "fair"),
        ("g01", "captions_good", "captions_fair", "combined panel"), ("g01", "captions_good", "captions_poor", "first")]
    assert {r.member: r.judge_model for r in records} == {"first": "first", "fair": "fair",
                                                          "combined panel": "panel(first,fair)"}
    members = [r for r in records if r.member != "combined panel"]
    assert all(r.b_first.verdicts["overall"] == ("B" if r.member == "first" else "A") for r in members)
    combined = [r for r in records if r.member == "combined panel"]
    assert len(combined) == 6 and all(r.a_first.verdicts == dict.fromkeys(r.dimensions, "A") for r in combined)
    assert all(r.b_first.verdicts == dict.fromkeys(r.dimensions, "tie") for r in combined)
    assert all(o.requests == 0 and o.reply is None for r in combined for o in (r.a_first, r.b_first))
    # The report measures the panel as it measures a judge: consistency 0, every pair a tie for its ranking.
    report = json.loads((tmp_path / "out" / f"arena_{TASK}.json").read_text(encoding="utf-8"))
    (panel_report,) = [m for m in report["judges"] if m["judge"] == "combined panel"]
    assert panel_report["position_bias"]["overall"]["position_consistency"]["value"] == 0.0


@pytest.mark.parametrize(("quorum", "expected"), [(1, "fair's verdicts"), (2, "below quorum")])
def test_a_panel_member_that_never_answers_leaves_the_panel_to_its_quorum(tmp_path, quorum, expected):
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        panel = panel_file(tmp_path / "panel.json", server, ("fair", "mute"), quorum)
        done = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags("good", "poor"), "--limit", "1", "--out",
                     str(tmp_path / "out"), env={"CAPJUDGE_PANEL": str(panel), "CAPJUDGE_MAX_FAILURE_RATE": "1"})
        assert done.returncode == 0, done.stderr[-3000:]
    _, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
    by = {r.member: r for r in records}
    assert set(by) == {"fair", "mute", "combined panel"} and not by["mute"].a_first.ok and not by["mute"].b_first.ok
    combined = by["combined panel"]
    if expected == "fair's verdicts":  # one voting member makes the quorum of 1: the panel says what it says
        assert (combined.a_first.verdicts, combined.b_first.verdicts) == (by["fair"].a_first.verdicts,
                                                                          by["fair"].b_first.verdicts)
    else:  # never decided by what is left: both orders unjudged, saying who did not judge and why
        for order in (combined.a_first, combined.b_first):
            assert order.verdicts is None and order.failure == "panel_below_quorum"
            assert "1 of 2 panel members gave a verdict, fewer than the quorum of 2 (not judged: mute: missing)" in \
                order.failure_detail

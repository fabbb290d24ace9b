"""`capjudge arena` against scripted pairwise judges of known behaviour (tests/scripted_pairwise_judges.py),
through the real CLI and the OpenAI-compatible test server, on the demo task's real video frames (issue #49
items 2 and 5): every pair asked in both orders (counted at the server), the verdict file checked record by
record against each judge's rule applied directly, the printed counts exactly, a rerun free, and the dry run's
request count equal to what the run then sends.
"""

from __future__ import annotations

import itertools
import json

import pytest
from tests.support.arena_runs import CAPTION_SETS, DEMO, arena, caption_flags
from tests.support.harness_runs import judge_server
from tests.support.openai_server import prompt_text
from tests.support.scripted_pairwise_judges import GVEVAL_DIMENSIONS, PairwiseWorld

from capjudge.judges.pairwise.record import read_arena_file

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


@pytest.fixture(scope="module")
def world():
    return PairwiseWorld()


def _captions(name: str) -> dict[str, str]:
    lines = (DEMO / f"captions_{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row["caption"] for row in map(json.loads, lines) if row["id"].startswith("g")}


def _expected_pairs() -> list[tuple[str, str, str, str, str]]:
    """(item, model_a, caption_a, model_b, caption_b) of every pair of the three demo sets, in plan order."""
    sets = {name: _captions(name) for name in CAPTION_SETS}
    return [(item, f"captions_{a}", sets[a][item], f"captions_{b}", sets[b][item])
            for item in sorted(sets["good"]) for a, b in itertools.combinations(CAPTION_SETS, 2)]


def _table_row(stdout: str, member: str = "judge") -> str:
    rows = [line for line in stdout.splitlines() if line.startswith(f"| {member} | ")]
    return rows[-1]  # the table's header row starts with "| judge |" too


def test_a_judge_that_always_prefers_the_first_caption_flips_every_verdict(tmp_path, world):
    out = tmp_path / "out"
    with judge_server(responder=world.respond) as server:
        # The dry run first, on the empty cache: what it says the run will send ...
        dry = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--dry-run")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert server.log == []
        assert "arena: 3 models, 10 items, 30 pairs x 2 orders = 60 requests per judge, 0 of them already in the " \
               "reply cache: 60 left to send" in dry.stdout
        # ... is what it sends: 2 requests per pair, one per order.
        done = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--out", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 60
        shown = [(prompt_text(entry.body).split("\nCaption A:\n", 1)[1].split("\n\nCaption B:\n", 1)[0],
                  prompt_text(entry.body).split("\n\nCaption B:\n", 1)[1].split("\n\nYou should first give", 1)[0])
                 for entry in server.log]
        expected = _expected_pairs()
        assert sorted(shown) == sorted([(ca, cb) for _, _, ca, _, cb in expected] + [(cb, ca) for _, _, ca, _, cb in expected])
        # Each request shows the frame strip the pointwise judge is shown: one PNG image.
        assert all([part["image_url"]["url"][:22] for part in entry.body["messages"][0]["content"]
                    if part["type"] == "image_url"] == ["data:image/png;base64,"] for entry in server.log)

        header, records = read_arena_file(out / f"arena_{TASK}.jsonl")
        assert [(r.item_id, r.model_a, r.caption_a, r.model_b, r.caption_b) for r in records] == expected
        assert header.records == 30 and {r.member for r in records} == {"judge"}
        assert all(r.dimensions == GVEVAL_DIMENSIONS for r in records)
        # Position bias named exactly: "A" (model_a) when A was first, "B" (model_b) when B was first.
        assert all(r.a_first.verdicts == dict.fromkeys(GVEVAL_DIMENSIONS, "A") for r in records)
        assert all(r.b_first.verdicts == dict.fromkeys(GVEVAL_DIMENSIONS, "B") for r in records)
        assert all(r.flipped() for r in records)
        assert _table_row(done.stdout) == "| judge | 30 | 30 | 30 | 0 | 60 | 0 |"

        # A rerun asks nothing: every order from the cache, the same verdicts.
        server.log.clear()
        again = arena(tmp_path, server, "first", "--task", TASK, *caption_flags(), "--out", str(out))
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.log == []
        assert _table_row(again.stdout) == "| judge | 30 | 30 | 30 | 0 | 0 | 60 |"
        _, cached = read_arena_file(out / f"arena_{TASK}.jsonl")
        assert [(r.a_first.verdicts, r.b_first.verdicts) for r in cached] == [
            (r.a_first.verdicts, r.b_first.verdicts) for r in records]


@pytest.mark.parametrize("judge", ["fair", "long"])
def test_fair_and_length_loving_judges_give_their_rules_verdicts_in_both_orders(tmp_path, world, judge):
    out = tmp_path / "out"
    with judge_server(responder=world.respond) as server:
        done = arena(tmp_path, server, judge, "--task", TASK, *caption_flags(), "--out", str(out), "--format", "json")
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 60
    _, records = read_arena_file(out / f"arena_{TASK}.jsonl")
    flips = 0
    for record in records:
        merit = world.gveval_merit(record.item_id)  # the clip the frame strip shows is the item's own
        for a_first, order in ((True, record.a_first), (False, record.b_first)):
            verdict = world.expected_verdict(judge, record.caption_a, record.caption_b, a_first, merit)
            assert order.verdicts == dict.fromkeys(GVEVAL_DIMENSIONS, verdict), (record.item_id, a_first)
        flips += record.flipped()
    assert flips == 0  # consistent judges: the order never changes a verdict
    summary = json.loads(done.stdout)
    assert summary["judges"] == [{"judge": "judge", "pairs": 30, "both_orders": 30, "order_flips": 0,
                                  "failed_orders": 0, "requests": 60, "cache_hits": 0}]
    # The two rules really differ on these captions (else the test could not tell the judges apart): the fair
    # judge prefers good > fair > poor on every clip, the length-loving one does not.
    longer = [world.expected_verdict("long", r.caption_a, r.caption_b, True, None) for r in records]
    fair = [world.expected_verdict("fair", r.caption_a, r.caption_b, True, world.gveval_merit(r.item_id)) for r in records]
    assert fair == ["A"] * 30 and 0 < sum(a != b for a, b in zip(longer, fair)) < 30
    assert [r.a_first.verdicts["overall"] for r in records] == (fair if judge == "fair" else longer)

"""What `capjudge arena`'s report claims, and on what evidence (issue #60 items 1-3), through the real CLI and the
test server with scripted pairwise judges of known behaviour:

- a fair judge (good > fair > poor on every clip, length ignored): the length effect is not identified (the good
  captions won every battle), so no gamma, no length-controlled ranking, no length effect claimed; it printed
  "a typical length difference is worth 595 [564, 1569] Elo points" with --limit 3 and 379 [252, 874] with 10;
- the same judge's position consistency of 1 on every pair: a zero-width interval, shown as the value alone with
  its reason, and on 3 items no interval from 3 items (the small-sample rule);
- `--candidates`: "candidate 3" of one clip is not "candidate 3" of another, so the report ranks nothing (it
  printed a Bradley-Terry table of candidates 0..5 across unrelated clips) and keeps the position bias.
"""

from __future__ import annotations

import json

import pytest
from tests.support.arena_runs import arena, caption_flags, vatex_arena, vatex_subset
from tests.support.harness_runs import judge_server
from tests.support.scripted_pairwise_judges import PairwiseWorld

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


def _report(out, task: str = TASK) -> tuple[str, dict]:
    markdown = (out / f"arena_{task}.md").read_text(encoding="utf-8")
    return markdown, json.loads((out / f"arena_{task}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("limit", [3, 10])
def test_a_fair_judge_claims_no_length_effect_and_no_zero_width_interval(tmp_path, limit):
    out = tmp_path / "out"
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        done = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags(), "--limit", str(limit),
                     "--out", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 2 * 3 * limit
    markdown, report = _report(out)
    member, = report["judges"]
    assert member["ranking"]["overall"]["ranking"] == ["captions_good", "captions_fair", "captions_poor"]
    # Not identified: no gamma, no length-controlled ranking, and the reason names the unbeaten model.
    controlled = member["length_controlled"]
    assert set(controlled) == {"reason"}
    reason = controlled["reason"]
    assert reason.startswith("the length effect is not identified: ") and reason.endswith("no length effect is claimed")
    assert ("'captions_good'" in reason) if limit >= 5 else ("battles from 3 items" in reason)
    assert "the longer caption wins)" not in markdown and "Length-controlled ranking:" not in markdown
    assert f"No length-controlled ranking: {reason}" in markdown.replace("\\_", "_")
    # Position consistency 1 on every pair: the value alone, never "1.00 [1.00, 1.00]".
    consistency = member["position_bias"]["overall"]["position_consistency"]
    assert consistency == {"value": 1.0, "ci_low": None, "ci_high": None}
    why = member["position_bias"]["overall"]["no_interval"]["consistency"]
    assert why == ("pairs judged in both orders from 3 items: capjudge shows an interval from 5 items or more"
                   if limit < 5 else "every resample gives the same value (a zero-width interval measures nothing)")
    assert "[1.00, 1.00]" not in markdown and "[0.00, 0.00]" not in markdown
    # Every interval left in the report has width (ratings, shares): none is a bracket of one value.
    for figure in _intervals(report):
        assert figure["ci_high"] - figure["ci_low"] > 1e-6, figure


def _intervals(node):
    if isinstance(node, dict):
        if node.get("ci_low") is not None and node.get("ci_high") is not None:
            yield node
        for value in node.values():
            yield from _intervals(value)
    elif isinstance(node, list):
        for value in node:
            yield from _intervals(value)


def test_the_candidates_file_ranks_no_candidate_across_clips(tmp_path):
    data = vatex_subset(tmp_path / "vatex_subset.json", 4, 49)
    out = tmp_path / "out"
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        done = vatex_arena(tmp_path, server, "long", data, "--pairs-per-clip", "2", "--seed", "5", "--out", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.log
    markdown, report = _report(out, "gveval_vatex_references")
    member, = report["judges"]
    assert all(set(figures) == {"reason"} for figures in member["ranking"].values())
    assert member["ranking"]["overall"]["reason"].startswith("the pairs are a task's rated candidates (--candidates)")
    assert set(member["length_controlled"]) == {"reason"}
    assert "| # | model | Elo" not in markdown and "the longer caption wins)" not in markdown
    assert "No ranking: the pairs are a task" in markdown
    assert member["position_bias"]["overall"]["pairs"] == 8  # the judge's position bias stands

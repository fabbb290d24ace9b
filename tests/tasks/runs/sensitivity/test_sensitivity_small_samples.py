"""`capjudge sensitivity` under the small-sample rule (issue #60 item 3), through the real CLI and the test server:
from 2 items it printed "Passes: padding, hallucination" off an interval of two clips (-1.83 [-2.00, -1.66]);
from fewer than 5 clips a row now has no shift and no verdict and says why, and from 5 it has both.
"""

from __future__ import annotations

import json

import pytest
from tests.support.harness_runs import judge_server

from capjudge.metrics.statistics.small_samples import MIN_UNITS
from tests.tasks.runs.sensitivity.test_hostile_sensitivity_round3 import CAPTIONS, QUICK, REPORT, _sensitivity

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("limit", [2, MIN_UNITS - 1, MIN_UNITS])
def test_no_verdict_from_fewer_clips_than_the_rule_asks(tmp_path, limit):
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--limit", limit, "--out", out, *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    rows = report["shifts"]
    assert rows
    if limit < MIN_UNITS:
        why = f"only {limit} clips with a changed pair judged on both sides: a verdict needs at least {MIN_UNITS}"
        assert all(not row["measured"] and row["not_measured"] == why and "verdict" not in row for row in rows)
        assert "Passes: none." in done.stdout and "Fooled by: nothing." in done.stdout
        assert report["no_verdict"] == {"judge": {"padding": why, "mismatch": why}}
    else:
        assert all(row["measured"] and row["n_candidates"] == MIN_UNITS and row["verdict"] for row in rows)
        assert report["no_verdict"] == {"judge": {}}

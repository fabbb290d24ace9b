"""`capjudge sensitivity` against scripted judges of known behaviour, through the test server (issue #39 item 5).

The judges (tests/support/scripted_caption_judges.py) answer G-VEval requests on the demo task, chosen by the
request's model: `fair` looks at the video (it knows a clip only by the frame strip in the request) and scores
what the caption says about the clip, times its fluency; `long` loves length (points per word); `blind` never
looks at the frames (fluency alone). Every figure the command reports is checked against a direct computation
from the texts it logged and the scripted judge's own scores of them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.scripted_caption_judges import CAPTIONS, DIMENSIONS, TASK, DemoWorld, judge_env

from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, perturb_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world():
    return DemoWorld()


def _env(tmp_path, server, judge: str) -> dict[str, str]:
    return judge_env(tmp_path, server, judge)


def _sensitivity(tmp_path, server, judge: str, *extra: str, out: str | None = None, env: dict | None = None):
    out_folder = tmp_path / (out or judge)
    done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--out", str(out_folder),
                             "--resamples", "1000", *extra], env={**_env(tmp_path, server, judge), **(env or {})},
                            cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out_folder / f"sensitivity_{TASK}.json").read_text(encoding="utf-8"))
    return done, report


def _rows(report):
    return {(row["perturbation"], row["dimension"]): row for row in report["shifts"]}


def test_a_fair_video_aware_judge_passes_everything_in_exactly_1_plus_p_judgments_per_item(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done, report = _sensitivity(tmp_path, server, "fair")
        n_items, n_perturbations = len(world.ids), len(PERTURBATIONS)
        # The speed contract: (1 + perturbations) x items judgments, one request each, counted at the server.
        assert len(server.log) == (1 + n_perturbations) * n_items == report["counts"]["judgments"]
        assert report["counts"] == {"items": n_items, "perturbations": n_perturbations, "judgments": 60,
                                    "requests": 60, "cache_hits": 0, "unjudged": 0}
        # A rerun is all cache hits: not one request, the same report.
        server.log.clear()
        again_done, again = _sensitivity(tmp_path, server, "fair", out="fair-again")
        assert server.log == []
        assert again["counts"]["cache_hits"] == 60 and again["counts"]["requests"] == 0
        assert again["shifts"] == report["shifts"]

    rows = _rows(report)
    assert [row for row in report["shifts"] if not row["passed"]] == []
    assert report["fooled_by"] == {"judge": {}}
    # Truncation speaks only about completeness; every other perturbation about all five scores.
    assert len(rows) == 4 * 5 + 1 and rows["mismatch", "accuracy"]["verdict"] == "expected direction"
    assert rows["padding", "conciseness"]["verdict"] == "expected direction"
    assert "Passes: padding, hallucination, truncation, shuffle, mismatch. Fooled by: nothing." in done.stdout
    assert "| padding | conciseness | down |" in done.stdout
    from PIL import Image

    with Image.open(tmp_path / "fair" / f"sensitivity_{TASK}.png") as plot:  # the shifts with their CIs
        assert plot.format == "PNG" and plot.size[0] > 300 and plot.size[1] > 200

    # The texts are exactly the perturbations of the captions, as the perturbations module makes them.
    expected_variants = perturb_all(world.captions, 0)
    logged = [(item["item_id"], variant["perturbation"], variant["text"])
              for item in report["items"] for variant in item["variants"]]
    assert logged == [(v.item_id, v.perturbation, v.text) for v in expected_variants]
    # Each judgment is the scripted judge's score of that text on that clip (it recognised every clip's frames).
    for item in report["items"]:
        for caption in (item["original"], *item["variants"]):
            scores = caption["judgments"]["judge"]["scores"]
            assert [scores[d] for d in DIMENSIONS] == pytest.approx(world.scores("fair", caption["text"], item["item_id"]))
            assert scores["mean"] == pytest.approx(np.mean([scores[d] for d in DIMENSIONS]))

    # Every statistic, recomputed from the logged judgments: mean shift, shares, and the clip-bootstrap CI
    # (clips in sorted id order, drawn as rng.integers(0, K, (B, K)) with the run's seed).
    ids = sorted(item["item_id"] for item in report["items"])
    draws = np.random.default_rng(0).integers(0, len(ids), size=(1000, len(ids)))
    for position, perturbation in enumerate(PERTURBATIONS):
        for dimension in ("accuracy", "completeness", "conciseness", "relevance", "mean"):
            if perturbation.expected(dimension) is None:
                continue
            by_id = {item["item_id"]: item["variants"][position]["judgments"]["judge"]["scores"][dimension]
                     - item["original"]["judgments"]["judge"]["scores"][dimension] for item in report["items"]}
            shift = np.array([by_id[i] for i in ids])
            row = rows[perturbation.name, dimension]
            assert row["mean_shift"] == pytest.approx(shift.mean())
            assert row["ci"] == pytest.approx(list(np.percentile(shift[draws].mean(axis=1), [2.5, 97.5])))
            strict = perturbation.expected(dimension) == "down"
            assert row["share_wrong_way"] == pytest.approx(np.mean(shift > 0))
            assert row["share_sound"] == pytest.approx(np.mean(shift < 0) if strict else np.mean(shift <= 0))


def test_a_length_loving_judge_fails_padding(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done, report = _sensitivity(tmp_path, server, "long")
    rows = _rows(report)
    assert rows["padding", "conciseness"]["verdict"] == "wrong direction" and not rows["padding", "conciseness"]["passed"]
    assert all(rows["padding", d]["share_wrong_way"] > 0.5 for d in DIMENSIONS)
    assert "padding" in report["fooled_by"]["judge"]
    assert "Fooled by: padding (accuracy, completeness, conciseness, relevance, mean)" in done.stdout


def test_a_video_blind_judge_does_not_detect_mismatch(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        _, report = _sensitivity(tmp_path, server, "blind", "--perturbation", "mismatch", "--perturbation", "shuffle")
        assert len(server.log) == 3 * len(world.ids)  # (1 + 2 perturbations) x items
    rows = _rows(report)
    assert {p["name"] for p in report["perturbations"]} == {"mismatch", "shuffle"}
    for dimension in (*DIMENSIONS, "mean"):
        # Another clip's fluent caption reads as well as the clip's own: no effect, so mismatch fails.
        assert rows["mismatch", dimension]["verdict"] == "no effect" and not rows["mismatch", dimension]["passed"]
        assert rows["shuffle", dimension]["passed"]  # what it does read (fluency), it notices
    assert report["fooled_by"]["judge"] == {"mismatch": [*DIMENSIONS, "mean"]}


def test_the_dry_run_states_the_judgments_and_prices_them_without_a_request(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--dry-run",
                                 "--perturbation", "padding", "--perturbation", "shuffle",
                                 "--price-input", "2.50", "--price-output", "10"],
                                env=_env(tmp_path, server, "fair"), cwd=REPO_ROOT)
        assert server.log == [] and server.preflights == []
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sensitivity: 10 items x (1 original + 2 perturbations) = 30 judgments; 30 to ask" in done.stdout
    assert f"task {TASK} (sensitivity): 30 judgments, 30 requests expected" in done.stdout and "cost: $" in done.stdout


def test_a_panel_is_reported_as_the_panel_and_each_member(tmp_path, world):
    """With CAPJUDGE_PANEL the same judging path judges with every member: the panel (the judge's own
    combination: G-VEval's mean of each score) and each member get their rows."""
    with judge_server(responder=world.respond) as server:
        panel = tmp_path / "panel.json"
        panel.write_text(json.dumps({"members": [{"name": name, "model": name, "base_url": server.base_url}
                                                 for name in ("fair", "blind")]}))
        _, report = _sensitivity(tmp_path, server, "panel", "--perturbation", "mismatch",
                                 env={"CAPJUDGE_PANEL": str(panel)})
        assert len(server.log) == 2 * (1 + 1) * len(world.ids)  # members x (1 + perturbations) x items
    assert report["scorers"] == ["panel", "fair", "blind"]
    assert report["fooled_by"] == {"panel": {}, "fair": {}, "blind": {"mismatch": [*DIMENSIONS, "mean"]}}
    for item in report["items"]:
        for caption in (item["original"], *item["variants"]):
            judgments = caption["judgments"]
            for dimension in DIMENSIONS:
                assert judgments["panel"]["scores"][dimension] == pytest.approx(
                    (judgments["fair"]["scores"][dimension] + judgments["blind"]["scores"][dimension]) / 2)

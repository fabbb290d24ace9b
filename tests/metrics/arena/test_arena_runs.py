"""Battles from judged runs (capjudge.metrics.arena.run_battles): three caption sets judged on the demo task by
real lmms-eval runs against the test server, read as the leaderboard reads them. The ratings equal a logistic
regression fitted here on battles counted straight from the samples files, the caption lengths are the
caption files' own, and runs an arena cannot use (one model, no per-item log, judged captions not logged) are
one-line ArenaErrors."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import ArenaSettings, arena_ratings, order_differences
from capjudge.metrics.arena.run_battles import run_battles
from capjudge.metrics.arena.style_control import style_controlled
from capjudge.metrics.files.runs import read_runs
from tests.support.harness_runs import judge_server, run_lmms_eval
from tests.metrics.arena.test_arena_ratings import independent_elo
from tests.metrics.leaderboard.test_leaderboard_length import METRIC, SETS, TASK, WRONG_DETAILS, _caption, _item_ids, _responder

# Real lmms-eval runs (about 40 s for the three): the harness marker.
pytestmark = pytest.mark.slow

RUN_SETS = SETS  # terse, medium, verbose: 4-8, 10-18 and 20-34 words, 0, 1 and 2 wrong details


def overlapping_score(caption: str) -> int:
    """Fewer wrong details and more words score higher, with a caption-seeded jitter of +-30 that makes every
    pair of sets win some items and lose others (no model beats another on every item: the maximum-likelihood
    ratings are finite, so the unpenalised fit below has a solution to compare with)."""
    words = caption.split()
    errors = sum(words.count(word) for word in WRONG_DETAILS)
    jitter = int(hashlib.sha256(caption.encode()).hexdigest()[:8], 16) % 61 - 30
    return max(0, min(100, 50 - 8 * errors + len(words) // 2 + jitter))


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("arena_runs")
    output = root / "judged"
    with judge_server(responder=_responder(overlapping_score)) as server:
        for kind in RUN_SETS:
            captions = root / f"{kind}.jsonl"
            captions.write_text("".join(json.dumps({"id": item, "caption": _caption(kind, i)}) + "\n"
                                        for i, item in enumerate(_item_ids())), encoding="utf-8")
            run_lmms_eval(model="captions_file", model_args=f"path={captions},model_name={kind}", tasks=TASK,
                          output_path=output, judge_base_url=server.base_url, cache_path=root / "cache.sqlite")
    return output


def _run_name(samples_path):
    results = next(samples_path.parent.glob("*_results.json"))
    return json.loads(results.read_text())["config"].get("model_name") or json.loads(results.read_text())[
        "config"]["model_args"].split("model_name=")[1].split(",")[0]


def _direct_scores(folder) -> dict[str, dict[str, float]]:
    """Each run's per-item gveval_mean, read line by line from its samples file (item id from the record)."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted(folder.rglob(f"*_samples_{TASK}.jsonl")):
        scores = found.setdefault(_run_name(path), {})
        for line in path.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            value = sample[METRIC]
            if isinstance(value, dict):
                value = value.get("score", value.get("value"))
            if value is not None:
                scores[f"id:{sample['judged']['item_id']}"] = float(value)
    return found


def test_run_battles_rate_the_runs_as_a_logistic_regression_on_their_logged_scores(runs_folder):
    runs, _ = read_runs([str(runs_folder)])
    battles = run_battles(runs, TASK, METRIC, with_lengths=True)
    assert set(battles.table.models) == set(RUN_SETS) and len(battles.table.items) == len(_item_ids())
    fitted = arena_ratings(battles.table, ArenaSettings(n_resamples=200, seed=1))
    direct = _direct_scores(runs_folder)
    expected = independent_elo(direct)
    for model, value in expected.items():
        assert fitted.ratings[model].value == pytest.approx(value, abs=0.01)
        assert fitted.ratings[model].ci_low <= value <= fitted.ratings[model].ci_high
    assert fitted.ranking == tuple(sorted(expected, key=lambda m: -expected[m]))
    means = {m: sum(v.values()) / len(v) for m, v in direct.items()}
    assert battles.means == pytest.approx(means)
    by_mean = sorted(means, key=lambda m: -means[m])
    differs = {(a, b) for i, a in enumerate(by_mean) for b in by_mean[i + 1:] if expected[b] > expected[a]}
    assert set(order_differences(fitted, battles.means)) == differs
    for kind in RUN_SETS:
        for i, item in enumerate(_item_ids()):
            assert battles.words[(f"id:{item}", kind)] == len(_caption(kind, i).split())
    controlled = style_controlled(battles.table, battles.words, ArenaSettings(n_resamples=0))
    assert set(controlled.ratings) == set(RUN_SETS) and controlled.n_battles == battles.table.n_battles


def test_one_run_is_one_model_and_no_arena(runs_folder):
    runs, _ = read_runs([str(runs_folder)])
    with pytest.raises(ArenaError, match=r"^task gveval_demo: an arena needs at least two models, got 1 \('\w+'\)$"):
        run_battles(runs[:1], TASK, METRIC)


def test_a_run_without_its_samples_log_is_named(runs_folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs_folder, copy)
    victim = next(path for path in copy.rglob(f"*_samples_{TASK}.jsonl") if _run_name(path) == "medium")
    victim.unlink()
    runs, _ = read_runs([str(copy)])
    with pytest.raises(ArenaError) as raised:
        run_battles(runs, TASK, METRIC)
    message = str(raised.value)
    assert message.startswith("run 'medium', task gveval_demo: no per-item values") and "--log_samples" in message
    assert "\n" not in message


def test_a_run_whose_judged_captions_are_not_logged_is_named_for_the_length_control(runs_folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs_folder, copy)
    victim = next(path for path in copy.rglob(f"*_samples_{TASK}.jsonl") if _run_name(path) == "terse")
    lines = [json.loads(line) for line in victim.read_text(encoding="utf-8").splitlines()]
    lines[2]["judged"]["judgment"]["caption"] = None
    victim.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    runs, _ = read_runs([str(copy)])
    run_battles(runs, TASK, METRIC)  # the raw arena needs no captions
    with pytest.raises(ArenaError, match=r"^run 'terse': .*line 3 \(item [^)]+\): no judged caption logged"):
        run_battles(runs, TASK, METRIC, with_lengths=True)


def test_an_unknown_task_or_metric_is_named(runs_folder):
    runs, _ = read_runs([str(runs_folder)])
    with pytest.raises(ArenaError, match=r"no task 'nope'"):
        run_battles(runs, "nope", METRIC)
    with pytest.raises(ArenaError, match=r"no per-item metric 'nope'"):
        run_battles(runs, TASK, "nope")

"""Runs are never lost and never confused: two runs finishing in the same second both survive, and when a model
ran a task twice the leaderboard uses the run that started last, decided from real instants (lmms-eval stamps
its files in UTC+8, `capjudge judge` in local time), and says which run it used and why.

Real runs only: `capjudge judge` processes and an lmms-eval run, judged by the test server.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import harness_env, judge_server, run_capjudge_cli, run_lmms_eval
from tests.support.openai_server import rubric_responder, with_logprobs
from tests.support.warm_launch import warm_start

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
GVEVAL, ANYCAP = "gveval_demo", "anycap_style_demo"
N_ITEMS = 10  # per demo task


def _env(judge, folder: Path, **extra: str) -> dict[str, str]:
    """A `capjudge judge` process's environment: the judge, a reply cache of its own, a long request timeout
    (a gated reply may wait for the other process), and the given extras (e.g. TZ)."""
    return harness_env(judge.base_url, cache_path=folder / "cache.sqlite", datasets_cache=folder / "hf_datasets_cache",
                       extra={"CAPJUDGE_TIMEOUT": "300", **extra})


def _judge_command(task: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "capjudge.tasks.cli", "judge", "--captions", str(CAPTIONS), "--model-name", "good",
            "--task", task, "--out", str(out)]


def _leaderboard(out: Path, *runs: Path) -> tuple[dict[str, dict[str, str]], str]:
    made = run_capjudge_cli(["leaderboard", *map(str, runs), "--out", str(out)],
                            env=dict(os.environ), cwd=REPO_ROOT, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}, made.stderr


class _AnswerTogether:
    """A responder that holds every judgment until `expected` have arrived, then answers them all just after a
    whole second: the two processes sending them finish, and write their runs, within the same second."""

    def __init__(self, expected: int):
        self.expected = expected
        self.arrived = 0
        self._lock = threading.Lock()
        self._open = threading.Event()

    def __call__(self, body):
        with self._lock:
            self.arrived += 1
            last = self.arrived == self.expected
        if last:
            time.sleep(1.0 - time.time() % 1.0 + 0.01)
            self._open.set()
        self._open.wait(timeout=240)
        return rubric_responder(body)


def test_two_tasks_of_one_model_finishing_in_the_same_second_both_reach_the_leaderboard(tmp_path):
    out = tmp_path / "judged"
    gate = _AnswerTogether(expected=2 * N_ITEMS)
    with judge_server(responder=gate) as judge:
        processes = [  # two processes at once (warm children, tests/support/warm_launch.py)
            warm_start("capjudge", _judge_command(task, out)[3:], env=_env(judge, tmp_path / task), cwd=REPO_ROOT)
            for task in (GVEVAL, ANYCAP)
        ]
        finished = [process.communicate(timeout=600) for process in processes]
    for process, (_, stderr) in zip(processes, finished):
        assert process.returncode == 0, stderr[-3000:]
    assert gate.arrived == 2 * N_ITEMS
    written = sorted(out.rglob("*_results.json"))
    assert len(written) == 2, written  # on one model folder: each run kept its own, under its own name
    assert not [path for path in out.rglob("*") if path.name.endswith(".partial")]  # no temporary file left

    rows, warnings = _leaderboard(tmp_path / "board", out)
    assert list(rows) == ["good"] and "more than once" not in warnings
    good = rows["good"]
    assert good[f"{GVEVAL}/gveval_mean"] != "" and good[f"{ANYCAP}/anycap_score"] != ""
    assert good[f"items_{GVEVAL}"] == good[f"items_{ANYCAP}"] == str(N_ITEMS)


def _fixed_gveval(score: int):
    """A judge that gives every G-VEval caption `score` on all four dimensions."""
    content = (f"The Accuracy score is α{score}α.\nThe Completeness score is β{score}β.\n"
               f"The Conciseness score is ψ{score}ψ.\nThe Relevance score is δ{score}δ.")
    return lambda body: with_logprobs(content)


def _capjudge_run(judge, tmp_path: Path, name: str, score: int) -> Path:
    """A `capjudge judge` run of the good captions, on a UTC machine, by a judge that gives `score`."""
    judge.responder = _fixed_gveval(score)
    done = run_capjudge_cli(_judge_command(GVEVAL, tmp_path / name)[3:],
                            env=_env(judge, tmp_path / f"{name}_env", TZ="UTC"), cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (results_file,) = (tmp_path / name).rglob("*_results.json")
    return results_file


def _start_in_a_new_second() -> None:
    """Waits for the next whole second: lmms-eval records its start to the second only, and runs started in the
    same second are ordered by when they were written (test_runs_that_started_in_one_stamped_second_...)."""
    time.sleep(1.0 - time.time() % 1.0 + 0.01)


def test_the_run_started_last_wins_whatever_time_zone_its_file_name_is_stamped_in(tmp_path):
    with judge_server() as judge:
        first = _capjudge_run(judge, tmp_path, "judged_first", score=20)
        judge.responder = rubric_responder
        _start_in_a_new_second()
        harness = run_lmms_eval(
            model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=GVEVAL,
            output_path=tmp_path / "harness", judge_base_url=judge.base_url, cache_path=tmp_path / "harness_cache.sqlite",
        ).results_file
        _start_in_a_new_second()
        last = _capjudge_run(judge, tmp_path, "judged_last", score=30)
    harness_results = json.loads(harness.read_text(encoding="utf-8"))
    harness_mean = harness_results["results"][GVEVAL]["gveval_mean,none"]
    assert harness_mean not in (20.0, 30.0)
    # lmms-eval stamped its file in UTC+8, so by name it sorts after both UTC-stamped runs.
    assert harness_results["config"]["resolved_cli_args"]["timezone"] == "Asia/Singapore"
    assert harness.name > last.name > first.name

    column = f"{GVEVAL}/gveval_mean"
    rows_first, warnings_first = _leaderboard(tmp_path / "board_first", first.parent.parent, harness.parent.parent)
    rows_last, warnings_last = _leaderboard(tmp_path / "board_last", harness.parent.parent, last.parent.parent)
    assert float(rows_first["good"][column]) == pytest.approx(harness_mean)  # lmms-eval started after the first run
    assert float(rows_last["good"][column]) == pytest.approx(30.0)  # the last capjudge run started after lmms-eval's
    # Which run was used, which was not, and why: when each started, and from what that is known.
    assert f"using {harness} (started " in warnings_first and f"not {first} (started " in warnings_first
    (warning,) = [line for line in warnings_last.splitlines() if "was run more than once" in line]
    assert warning.startswith(f"warning: good: {GVEVAL} was run more than once; using {last} (started ")
    assert f"by its started_at), not {harness} (started " in warning
    stamp = harness_results["date"]
    assert f"by lmms-eval's date stamp {stamp} in Asia/Singapore): the run started last is used" in warning


def _results_file(folder: Path, name: str, started: dict, written: float, mean: float) -> Path:
    """A results file of the model `good` on G-VEval's demo task, last written at `written`."""
    path = folder / "good" / name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"results": {GVEVAL: {"gveval_mean,none": mean}}, "configs": {GVEVAL: {"task": GVEVAL}},
                                **started}), encoding="utf-8")
    os.utime(path, (written, written))
    return path


def _judged_at(instant: str) -> dict:
    """What `capjudge judge` records: its start to the microsecond, with its offset."""
    return {"started_at": instant, "config": {"model": "captions_file", "model_args": "", "model_name": "good"}}


def _stamped(stamp: str) -> dict:
    """What lmms-eval records: its start to the second, in its time zone (UTC+8 here)."""
    return {"date": stamp, "lmms_eval_version": "0.7.3",
            "config": {"model": "captions_file", "model_args": "model_name=good",
                       "resolved_cli_args": {"timezone": "Asia/Singapore"}}}


@pytest.mark.parametrize(("judged_written", "harness_written", "used"), [(1000, 2000, "harness"), (2000, 1000, "judged")])
def test_runs_that_started_in_one_stamped_second_are_ordered_by_when_they_were_written_and_the_warning_says_so(
        tmp_path, judged_written, harness_written, used):
    """A `capjudge judge` run started at 12:00:05.3 UTC and an lmms-eval run stamped 20:00:05 in UTC+8 (12:00:05
    UTC, to the second: it may have started at 12:00:05.9). Read as instants, the stamp would always lose: the run
    written last is used instead, and the warning says why."""
    from capjudge.metrics.files.runs import read_runs

    judged = _results_file(tmp_path / "judged", "20261129_120005_results.json",
                           _judged_at("2026-11-29T12:00:05.300000+00:00"), judged_written, 20.0)
    harness = _results_file(tmp_path / "harness", "20261129_200005_results.json", _stamped("20261129_200005"),
                            harness_written, 80.0)
    (run,), (warning,) = read_runs([str(tmp_path / "judged"), str(tmp_path / "harness")])
    winner, loser = (harness, judged) if used == "harness" else (judged, harness)
    assert run.results_path == winner
    assert run.tasks[GVEVAL].harness_values["gveval_mean"] == (80.0 if used == "harness" else 20.0)
    assert f"using {winner} (started 2026-11-29 12:00:05 UTC by " in warning and f"not {loser} (started 2026-11-29 12:00:05 UTC" in warning
    assert warning.endswith("both started in the same second, which is all lmms-eval's date stamp records: the run "
                            "written last is used")


def test_a_stamp_of_a_later_second_wins_and_two_exact_starts_in_one_second_keep_their_order_whenever_written(tmp_path):
    from capjudge.metrics.files.runs import read_runs

    # The stamp says 12:00:06 UTC: started after 12:00:05.9, whatever the files' times say.
    judged = _results_file(tmp_path / "a" / "judged", "x_results.json", _judged_at("2026-11-29T12:00:05.900000+00:00"), 2000, 20.0)
    harness = _results_file(tmp_path / "a" / "harness", "20261129_200006_results.json", _stamped("20261129_200006"), 1000, 80.0)
    (run,), (warning,) = read_runs([str(tmp_path / "a")])
    assert run.results_path == harness and warning.endswith(f"not {judged} (started 2026-11-29 12:00:05 UTC by its "
                                                            "started_at): the run started last is used")
    # Two exact starts in one second with no stamp in it: the instants decide, not the files' times.
    earlier = _results_file(tmp_path / "b" / "first", "x_results.json", _judged_at("2026-11-29T12:00:05.300000+00:00"), 2000, 20.0)
    later = _results_file(tmp_path / "b" / "second", "x_results.json", _judged_at("2026-11-29T12:00:05.700000+00:00"), 1000, 30.0)
    (run,), (warning,) = read_runs([str(tmp_path / "b")])
    assert run.results_path == later and f"not {earlier} " in warning and warning.endswith("the run started last is used")


def test_capjudge_leaderboard_uses_the_run_written_last_of_one_stamped_second_and_says_so(tmp_path):
    """The same tie through the command: the row is the lmms-eval run's (written last), and the warning says why."""
    judged = _results_file(tmp_path / "runs" / "judged", "20261129_120005_results.json",
                           _judged_at("2026-11-29T12:00:05.300000+00:00"), 1000, 20.0)
    harness = _results_file(tmp_path / "runs" / "harness", "20261129_200005_results.json",
                            _stamped("20261129_200005"), 2000, 80.0)
    rows, warnings = _leaderboard(tmp_path / "board", tmp_path / "runs")
    assert float(rows["good"][f"{GVEVAL}/gveval_mean"]) == 80.0
    (warning,) = [line for line in warnings.splitlines() if "was run more than once" in line]
    assert f"using {harness} " in warning and f"not {judged} " in warning
    assert warning.endswith("both started in the same second, which is all lmms-eval's date stamp records: the run "
                            "written last is used")

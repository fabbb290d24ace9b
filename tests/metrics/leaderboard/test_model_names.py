"""Model names are data, not syntax: a comma never merges two models, `..` or a slash never writes outside
--out, and a name no run can carry is refused before the first judge request. Every name comes back exactly
from the results file, the leaderboard and the report.

Real `capjudge judge` runs of the demo G-VEval task against the test server, read by the real `capjudge
leaderboard` and `capjudge report`.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
N_ITEMS = 10


def _judge(judge, tmp_path: Path, out: Path, *arguments: str):
    env = harness_env(judge.base_url, cache_path=tmp_path / "cache" / "judge.sqlite",
                      datasets_cache=tmp_path / "hf_datasets_cache")
    return run_capjudge("judge", *arguments, "--task", TASK, "--out", str(out), env=env)


def _results_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*_results.json"))


def _leaderboard_names(tmp_path: Path, *runs: Path) -> list[str]:
    made = run_capjudge("leaderboard", *map(str, runs), "--out", str(tmp_path / "board"))
    assert made.returncode == 0, made.stderr[-3000:]
    assert "was run more than once" not in made.stderr
    with (tmp_path / "board" / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return sorted(row["model"] for row in csv.DictReader(handle))


def _report_names(tmp_path: Path, *runs: Path) -> list[str]:
    made = run_capjudge("report", *map(str, runs), "--out", str(tmp_path / "report"))
    assert made.returncode == 0, made.stderr[-3000:]
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL).group(1))
    (section,) = data["sections"]
    assert sorted(section["models"]) == sorted(run["name"] for run in data["runs"])
    return sorted(section["models"])


def test_names_with_commas_dots_and_slashes_stay_apart_inside_out_and_come_back_exactly(tmp_path):
    names = ["qwen,7b", "qwen,72b", "..", "org/../model:v1\nsecond line"]
    out = tmp_path / "deep" / "out"
    with judge_server() as judge:
        for number, name in enumerate(names):
            done = _judge(judge, tmp_path, out, "--captions", str(CAPTIONS), "--model-name", name)
            assert done.returncode == 0, done.stderr[-3000:]
            # One reply cache, the same captions: only the first run asks the judge.
            assert len(judge.log) == N_ITEMS
    # Every run is inside --out, and nothing was written beside or above it.
    assert sorted(path.name for path in (tmp_path / "deep").iterdir()) == ["out"]
    written = _results_files(out)
    assert len(written) == len(names) and all(out in path.parents for path in written)
    recorded = sorted(json.loads(path.read_text(encoding="utf-8"))["config"]["model_name"] for path in written)
    assert recorded == sorted(names)
    assert _leaderboard_names(tmp_path, out) == sorted(names)
    assert _report_names(tmp_path, out) == sorted(names)


def test_a_name_no_run_can_carry_is_refused_before_the_first_request(tmp_path):
    with judge_server() as judge:
        too_long = _judge(judge, tmp_path, tmp_path / "out", "--captions", str(CAPTIONS), "--model-name", "é" * 128)
        assert too_long.returncode == 2
        assert "capjudge judge: --model-name: the model name is 256 bytes long, over the 255" in too_long.stderr
        assert "Traceback" not in too_long.stderr
        assert judge.log == [] and judge.preflights == []

        # A NUL cannot be typed on a command line, but a run's results file can carry one: judge such a run.
        done = _judge(judge, tmp_path, tmp_path / "first", "--captions", str(CAPTIONS), "--model-name", "good")
        assert done.returncode == 0, done.stderr[-3000:]
        (results_file,) = _results_files(tmp_path / "first")
        run = shutil.copytree(results_file.parent, tmp_path / "nul_run")
        (results_file,) = _results_files(run)
        results = json.loads(results_file.read_text(encoding="utf-8"))
        results["config"]["model_name"] = "bad\x00name"
        results["config"]["model_args"] = "model_name=bad\x00name"
        results_file.write_text(json.dumps(results), encoding="utf-8")
        judge.log.clear()
        judge.preflights.clear()
        nul = _judge(judge, tmp_path, tmp_path / "second", str(run))
        assert nul.returncode == 2
        assert f"capjudge judge: {results_file} (the name it gives the run; --model-name chooses another): the model " \
               "name 'bad\\x00name' holds a NUL character" in nul.stderr
        assert "Traceback" not in nul.stderr
        assert judge.log == [] and judge.preflights == []
    assert not (tmp_path / "out").exists() or _results_files(tmp_path / "out") == []
    assert not (tmp_path / "second").exists() or _results_files(tmp_path / "second") == []

"""The demo's whole pipeline against the real embedded llama.cpp judge, on a small item limit.

`capjudge demo` starts the local server (Gemma 3 270M from PyPI), runs lmms-eval on both demo tasks with the
captions_file model, and builds the leaderboard. Here: one caption set, 2 items per task, so it stays near a
minute on two cores while every real step runs: real model replies, constrained by the grammar/schema, parsed
by the judges' own parsers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow
def test_demo_runs_end_to_end_with_the_real_local_judge(tmp_path):
    out = tmp_path / "demo"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    completed = subprocess.run(
        [sys.executable, "-m", "capjudge.tasks.cli", "demo", "--out", str(out), "--limit", "2", "--caption-sets", "good"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "NOT a meaningful judge" in completed.stdout  # the honesty notice
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png", "report/report.html"):
        assert (out / name).stat().st_size > 0
    # Each task's leaderboard row links to that model's items in the per-item report, and the frames the
    # judges saw are there as files beside it (the demo clips are in the repository).
    leaderboard_html = (out / "leaderboard.html").read_text()
    for task in ("gveval_demo", "anycap_style_demo"):
        assert f'href="report/report.html#task={task}&amp;model=good"' in leaderboard_html, task
    frames = out / "report" / "frames"
    assert len(list((frames / "gveval_demo").glob("*.png"))) == 2  # one 3-frame strip per item
    assert len(list((frames / "anycap_style_demo").glob("*.jpg"))) == 2 * 8  # 8 frames per item

    samples = {path.name.split("_samples_")[1].removesuffix(".jsonl"): path for path in out.rglob("*_samples_*.jsonl")}
    assert set(samples) == {"gveval_demo", "anycap_style_demo"}
    gveval = [json.loads(line) for line in samples["gveval_demo"].read_text().splitlines()]
    anycap = [json.loads(line) for line in samples["anycap_style_demo"].read_text().splitlines()]
    assert len(gveval) == len(anycap) == 2
    # Real replies from the model, parsed into scores by the judges' parsers (the grammar makes them parseable).
    for line in gveval:
        assert line["judged"]["judge"]["model"].startswith("gemma-3-270m")
        assert "The Accuracy score is α" in line["judged"]["judgment"]["raw_reply"]
        assert line["gveval_failed"] == 0 and 0 <= line["gveval_mean"] <= 100
    for line in anycap:
        assert json.loads(line["judged"]["judgment"]["raw_reply"])["score"] in range(5)
        assert line["anycap_failed"] == 0 and line["anycap_score"] in range(5)
    cache = out / "judge_cache.sqlite"
    assert cache.stat().st_size > 0

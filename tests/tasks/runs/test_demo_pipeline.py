"""The demo's whole pipeline against the real embedded llama.cpp judge, on a small item limit, and what happens
when that judge dies in the middle of it.

`capjudge demo` starts the local server (Gemma 3 270M from PyPI), runs lmms-eval on both demo tasks with the
captions_file model, and builds the leaderboard and the item report. Here: one caption set, 1 item per task.
The server is killed (SIGKILL) after the first reply is cached: the demo must stop at once with a message
naming the signal, the end of the server log and what to try, leaving no process and no results behind. The
rerun of the same command must then finish end to end (every real step: real model replies for the items not
yet judged, constrained by the grammar/schema and parsed by the judges' own parsers; the cached ones reused,
none asked again) and write everything the demo promises. One test, so the real model is started and asked
for each item once in the suite: each real-model reply costs seconds on two cores.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.local_judge_processes import cached_replies, clean_env, descendants, local_server_pid, wait_for


@pytest.mark.slow
def test_the_demo_stops_at_once_when_its_judge_dies_and_the_rerun_completes_end_to_end_from_the_cache(tmp_path):
    out = tmp_path / "demo"
    cache = out / "judge_cache.sqlite"
    # 1 item a task, 2 in all (each real reply costs seconds of both cores): the judge is killed after the first
    # reply (G-VEval's), so AnyCap's is left to judge then, and both judges still answer for real.
    command = [sys.executable, "-m", "capjudge.tasks.cli", "demo", "--out", str(out), "--limit", "1",
               "--caption-sets", "good"]
    demo = subprocess.Popen(command, cwd=REPO_ROOT, env=clean_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: cached_replies(cache) >= 1, 600, "a judged item")
        server = local_server_pid(demo.pid)
        assert server is not None, "no local judge server process under the demo"
        os.kill(server, signal.SIGKILL)
        cached_at_kill = cached_replies(cache)
        stdout, stderr = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "was killed by SIGKILL" in stderr
    assert "Last lines of its log" in stderr and "What to try" in stderr
    assert "lmms-eval (caption set 'good') was stopped" in stderr
    # The demo stopped instead of failing the remaining items one by one: no results were written.
    assert not list(out.rglob("*_results.json"))
    assert not any(descendants(demo.pid))

    completed = subprocess.run(command, cwd=REPO_ROOT, env=clean_env(tmp_path), capture_output=True, text=True,
                               timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "NOT a meaningful judge" in completed.stdout  # the honesty notice
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png", "report/report.html"):
        assert (out / name).stat().st_size > 0
    # The embedded judge's caveat is in every page the demo wrote, not only on its terminal (issue #63 item 3),
    # keyed on the judge model its runs logged; the Markdown escapes and wraps it, the HTML escapes it.
    from capjudge.judges.text import EMBEDDED_JUDGE_CAVEAT, EMBEDDED_JUDGE_MODEL

    for name in ("leaderboard.md", "leaderboard.html", "report/report.html"):
        text = re.sub(r"\s+", " ", html.unescape((out / name).read_text(encoding="utf-8"))).replace("\\", "")
        assert f"judged by {EMBEDDED_JUDGE_MODEL}, {EMBEDDED_JUDGE_CAVEAT}" in text, name
    assert EMBEDDED_JUDGE_CAVEAT in completed.stdout
    # Its items say the judge read the text alone, though the request carried the frames shown.
    page = (out / "report" / "report.html").read_text(encoding="utf-8")
    assert page.count("text only: the request carried ") == 2  # one item of each task
    # Each task's leaderboard row links to that model's items in the per-item report, and the frames the
    # judges saw are there as files beside it (the demo clips are in the repository).
    leaderboard_html = (out / "leaderboard.html").read_text()
    for task in ("gveval_demo", "anycap_style_demo"):
        assert f'href="report/report.html#task={task}&amp;model=good"' in leaderboard_html, task
    frames = out / "report" / "frames"
    assert len(list((frames / "gveval_demo").glob("*.png"))) == 1  # one 3-frame strip per item
    assert len(list((frames / "anycap_style_demo").glob("*.jpg"))) == 1 * 8  # 8 frames per item

    samples = {path.name.split("_samples_")[1].removesuffix(".jsonl"): path for path in out.rglob("*_samples_*.jsonl")}
    assert set(samples) == {"gveval_demo", "anycap_style_demo"}
    gveval = [json.loads(line) for line in samples["gveval_demo"].read_text().splitlines()]
    anycap = [json.loads(line) for line in samples["anycap_style_demo"].read_text().splitlines()]
    assert len(gveval) == len(anycap) == 1
    lines = gveval + anycap
    assert all(not any(key.endswith("_failed") and line[key] for key in line) for line in lines)
    # Every reply that was cached before the kill is reused, none asked again; the rest were asked now.
    reused = sum(1 for line in lines if line["judged"]["judgment"].get("cache_hit"))
    assert cached_at_kill <= reused < len(lines)
    # Real replies from the model, parsed into scores by the judges' parsers (the grammar makes them parseable).
    for line in gveval:
        assert line["judged"]["judge"]["model"].startswith("gemma-3-270m")
        assert "The Accuracy score is α" in line["judged"]["judgment"]["raw_reply"]
        assert line["gveval_failed"] == 0 and 0 <= line["gveval_mean"] <= 100
    for line in anycap:
        assert json.loads(line["judged"]["judgment"]["raw_reply"])["score"] in range(5)
        assert line["anycap_failed"] == 0 and line["anycap_score"] in range(5)
    assert cache.stat().st_size > 0

"""`capjudge sensitivity`'s pre-flight probe, counted at the test server, through the real CLI (issue #60 item 10,
as `capjudge arena`'s): a fully cached rerun sent the probe while printing "0 requests sent"; a name it may not
write was refused only after the probe. Now the probe goes only when a judgment is left to ask, after the names
are checked, and the probes are printed apart from the requests, so the printed counts are the server's.
"""

from __future__ import annotations

import json
import re

import pytest
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.paths import REPO_ROOT
from tests.support.scripted_caption_judges import CAPTIONS, TASK, DemoWorld, judge_env

pytestmark = pytest.mark.slow
SENSITIVITY = ["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--limit", "2", "--perturbation", "padding",
               "--resamples", "100"]


def _counts(stdout: str) -> tuple[int, int]:
    """(requests sent, pre-flight probes) as printed."""
    sent = re.findall(r"(\d+) requests sent, ", stdout)
    probes = re.findall(r"^Pre-flight probe requests: (\d+) ", stdout, flags=re.MULTILINE)
    assert len(sent) == 1 and len(probes) == 1, stdout[-3000:]
    return int(sent[0]), int(probes[0])


def test_a_fully_cached_rerun_sends_nothing_and_prints_the_servers_counts(tmp_path):
    with judge_server(responder=DemoWorld().respond) as server:
        env = judge_env(tmp_path, server, "fair")
        done = run_capjudge_cli([*SENSITIVITY, "--out", str(tmp_path / "first")], env=env, cwd=REPO_ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 4 and len(server.preflights) == 1  # 2 items x (original + padding), 1 probe
        assert _counts(done.stdout) == (4, 1)

        server.log.clear()
        server.preflights.clear()
        again = run_capjudge_cli([*SENSITIVITY, "--out", str(tmp_path / "again")], env=env, cwd=REPO_ROOT)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.log == [] and server.preflights == []
        assert _counts(again.stdout) == (0, 0)
        as_json = run_capjudge_cli([*SENSITIVITY, "--out", str(tmp_path / "json"), "--format", "json"], env=env,
                                   cwd=REPO_ROOT)
        assert as_json.returncode == 0, as_json.stderr[-3000:]
        assert server.log == [] and server.preflights == []
        assert json.loads(as_json.stdout)["preflight_probes"] == 0


def test_a_name_it_may_not_write_is_refused_before_the_probe(tmp_path):
    out = tmp_path / "out"
    (out / f"sensitivity_{TASK}.json").mkdir(parents=True)
    with judge_server(responder=DemoWorld().respond) as server:
        done = run_capjudge_cli([*SENSITIVITY, "--out", str(out)], env=judge_env(tmp_path, server, "fair"), cwd=REPO_ROOT)
        assert server.log == [] and server.preflights == []
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("capjudge sensitivity: ") and "Traceback" not in done.stderr
    assert f"sensitivity_{TASK}.json" in lines[0]

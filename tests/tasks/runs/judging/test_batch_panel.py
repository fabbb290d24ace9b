"""`capjudge judge --batch` with a panel of three judges (CAPJUDGE_PANEL): one batch per member, sent with that
member's model, each with its own state file, each resumable on its own; the per-item values are exactly what
each member's script gives and what the online panel run logs.

The test server's batch endpoints (tests/support/batch_service.py) answer each line with `panel_responder`, the scripted
judge the line's model names (tests/support/openai_server.py: a harsh, a lenient and a length-loving judge).
"""

from __future__ import annotations

import json
import statistics

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, judge_server, run_capjudge_cli
from tests.support.openai_server import PANEL_MODELS, panel_grade, panel_responder

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
CAPTION_OF = {row["id"]: row["caption"] for row in map(json.loads, CAPTIONS.read_text().splitlines())}
TASK = "anycap_style_demo"
N_ITEMS = 10


def _panel_file(tmp_path, base_url):
    path = tmp_path / "panel.yaml"
    path.write_text(json.dumps({"members": [{"name": m, "model": m, "base_url": base_url, "api_key_env": "JUDGE_KEY"}
                                            for m in PANEL_MODELS]}))
    return path


def _judge(tmp_path, judge, out="out", *extra):
    env = {"CAPJUDGE_PANEL": str(_panel_file(tmp_path, judge.base_url)), "JUDGE_KEY": TEST_API_KEY,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    args = ["judge", "--captions", str(CAPTIONS), "--task", TASK, "--out", str(tmp_path / out), *extra]
    return run_capjudge_cli(args, env=env, cwd=REPO_ROOT, timeout=600)


def _samples(tmp_path, out="out"):
    paths = sorted((tmp_path / out).rglob(f"*_samples_{TASK}.jsonl"))
    return {line["judged"]["item_id"]: line for line in map(json.loads, paths[-1].read_text(encoding="utf-8").splitlines())}


def _states(tmp_path):
    """member -> its batch state, found where the stage keeps it: <out>/.../batch/<member>/batch_state.json."""
    paths = list((tmp_path / "out").rglob("batch_state.json"))
    return {path.parent.name: json.loads(path.read_text(encoding="utf-8")) for path in paths}


def _models_of_batches(judge):
    """The model each created batch's lines name (every line of a batch names its member's model)."""
    models = []
    for batch in judge.batch.batches.values():
        names = {line["body"]["model"] for line in batch["lines"]}
        assert len(names) == 1, names
        models.append(names.pop())
    return models


def _check_member_values(samples):
    for item_id, sample in samples.items():
        for model in PANEL_MODELS:
            judged = sample[f"judged@{model}"]
            assert judged["judge"]["model"] == model and judged["judgment"]["failure"] is None
            assert judged["judgment"]["judge_score"] == panel_grade(model, CAPTION_OF[item_id])
        finals = [sample[f"anycap_score@{m}"] for m in PANEL_MODELS]
        assert sample["anycap_score"] == pytest.approx(statistics.fmean(finals), abs=1e-9)


def test_a_panel_is_judged_with_one_batch_per_member_and_no_online_request(tmp_path):
    with judge_server(responder=panel_responder) as judge:
        first = _judge(tmp_path, judge, "out", "--batch", "--poll-seconds", "0.05")
        assert first.returncode == 0, first.stderr[-3000:]
        assert judge.log == []  # nothing asked online, by any member
        assert judge.batch.created == 3 and judge.batch.lines_answered == 3 * N_ITEMS
        assert sorted(_models_of_batches(judge)) == sorted(PANEL_MODELS)
        states = _states(tmp_path)
        assert sorted(states) == sorted(PANEL_MODELS)  # one state file per member, in its own folder
        for member, state in states.items():
            (entry,) = state["batches"]
            assert state["run"]["model"] == member and entry["lines"] == N_ITEMS and entry["downloaded"] is True
        samples = _samples(tmp_path)
        assert len(samples) == N_ITEMS
        _check_member_values(samples)

        again = _judge(tmp_path, judge, "out", "--batch", "--poll-seconds", "0.05")
        assert again.returncode == 0, again.stderr[-3000:]
        assert judge.batch.created == 3 and judge.batch.uploads == 3 and judge.log == []  # 0 submissions, 0 requests

        # The same panel online afterwards: every reply from the cache the batches filled, the same values.
        online = _judge(tmp_path, judge, "online")
        assert online.returncode == 0, online.stderr[-3000:]
        assert judge.log == []
        online_samples = _samples(tmp_path, "online")
        for item_id, sample in samples.items():
            for name in ("anycap_score", *(f"anycap_score@{m}" for m in PANEL_MODELS)):
                assert online_samples[item_id][name] == sample[name]


def test_each_member_resumes_on_its_own_a_failed_member_batch_is_resubmitted_alone(tmp_path):
    """The second member's batch fails validation: the stage stops naming it, the other members' batches stay
    recorded; the rerun finishes the open one and resubmits only the failed member's requests."""
    with judge_server(responder=panel_responder) as judge:
        judge.batch.script("success", "fail_validation", "success")
        failed = _judge(tmp_path, judge, "out", "--batch", "--poll-seconds", "0.05")
        assert failed.returncode == 2 and "scripted validation failure" in failed.stderr
        assert judge.batch.created == 3
        assert not list((tmp_path / "out").rglob("*_results.json"))
        failed_member = PANEL_MODELS[1]

        rerun = _judge(tmp_path, judge, "out", "--batch", "--poll-seconds", "0.05")
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert judge.batch.created == 4 and judge.log == []
        states = _states(tmp_path)
        assert [len(states[m]["batches"]) for m in PANEL_MODELS] == [1, 2, 1]
        resubmitted = states[failed_member]["batches"][1]
        assert resubmitted["lines"] == N_ITEMS and resubmitted["input"].startswith("input_round1")
        assert _models_of_batches(judge).count(failed_member) == 2
        _check_member_values(_samples(tmp_path))


def test_a_panel_file_problem_stops_the_batch_stage_before_anything_is_uploaded(tmp_path):
    with judge_server(responder=panel_responder) as judge:
        panel = tmp_path / "bad_panel.yaml"
        panel.write_text(json.dumps({"members": [{"name": "only", "model": "harsh", "base_url": judge.base_url}]}))
        env = {"CAPJUDGE_PANEL": str(panel), "OPENAI_API_KEY": TEST_API_KEY, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite"),
               "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        result = run_capjudge_cli(["judge", "--captions", str(CAPTIONS), "--task", TASK, "--out", str(tmp_path / "out"),
                                   "--batch"], env=env, cwd=REPO_ROOT, timeout=600)
        assert result.returncode == 2 and str(panel) in result.stderr and "at least two" in result.stderr
        assert judge.batch.uploads == 0 and judge.batch.created == 0 and judge.log == []

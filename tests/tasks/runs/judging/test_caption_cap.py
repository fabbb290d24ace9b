"""A caption longer than CAPJUDGE_MAX_CAPTION_CHARS (default 20,000 characters) is never sent to the judge: it
ends unjudged as `caption_too_long`, counted like any other failure, while the other items are judged.

Real `capjudge judge` runs of the demo task against the test server: the server's request log shows what was
sent, the samples file what each item became.
"""

from __future__ import annotations

import json

from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli

TASK = "gveval_demo"
CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
DEMO_ITEMS = REPO_ROOT / "tasks" / "demo" / "gveval_demo.jsonl"
DEFAULT_CAP = 20_000
RUNAWAY_WORD = "zebra "  # a word no demo caption or reference has, to find the runaway caption in a request


def _captions_file(tmp_path, overrides: dict[str, str]):
    """The good demo captions of the task's items, some replaced; (file, the task's item ids)."""
    items = {json.loads(line)["id"] for line in DEMO_ITEMS.read_text(encoding="utf-8").splitlines() if line.strip()}
    lines = [json.loads(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [line for line in lines if line["id"] in items]
    path = tmp_path / "captions.jsonl"
    path.write_text("".join(json.dumps({**line, "caption": overrides.get(line["id"], line["caption"])}) + "\n"
                            for line in lines), encoding="utf-8")
    return path, [line["id"] for line in lines]


def _judge(tmp_path, judge, captions, extra_env=None):
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "CAPJUDGE_GVEVAL_SCORING": "text",
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **(extra_env or {})}
    return run_capjudge_cli(
        ["judge", "--captions", str(captions), "--task", TASK,
         "--out", str(tmp_path / "out")],
        env=env, cwd=REPO_ROOT, timeout=600,
    )


def _judgments(tmp_path):
    (path,) = list((tmp_path / "out").rglob(f"*_samples_{TASK}.jsonl"))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {line["judged"]["item_id"]: (line, line["judged"]["judgment"]) for line in lines}


def test_a_runaway_caption_is_not_sent_and_the_others_are_judged(tmp_path):
    runaway = (RUNAWAY_WORD * 400_000)[:2_400_000]  # 2.4 MB: a model that never stopped
    at_the_cap = ("A red ball rolls along a grey floor. " * 1_000)[:DEFAULT_CAP]
    captions, ids = _captions_file(tmp_path, {"g02": runaway, "g05": at_the_cap})
    with judge_server() as judge:
        done = _judge(tmp_path, judge, captions)
        sent = [entry.prompt_text for entry in judge.log]
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(ids) - 1} of {len(ids)} items judged" in done.stdout
    # Every other item was asked once; the runaway caption never left the machine, in any request.
    assert len(sent) == len(ids) - 1
    assert not any(RUNAWAY_WORD * 3 in text for text in sent)
    assert sum(at_the_cap in text for text in sent) == 1  # exactly at the cap is still judged, whole

    judgments = _judgments(tmp_path)
    line, record = judgments["g02"]
    assert record["failure"] == "caption_too_long" and record["requests"] == 0 and record["raw_reply"] is None
    assert "item g02: caption has 2,400,000 characters, above CAPJUDGE_MAX_CAPTION_CHARS (20,000)" in record["failure_detail"]
    assert line["gveval_failed"] == 1 and line["gveval_mean"] is None  # unjudged, never a score
    assert len(record["caption"]) < 2_000 and "2,400,000 characters" in record["caption"]  # a preview, not 2.4 MB
    assert all(judgments[item][1]["failure"] is None for item in ids if item != "g02")
    assert "caption_too_long" in done.stderr and "g02" in done.stderr
    (results,) = list((tmp_path / "out").rglob("*_results.json"))
    assert json.loads(results.read_text(encoding="utf-8"))["results"][TASK]["gveval_failed,none"] == 1


def test_the_cap_is_a_setting_and_a_bad_value_is_refused_before_any_request(tmp_path):
    captions, ids = _captions_file(tmp_path, {"g03": "A yellow sun rises behind green hills, and " * 3})
    with judge_server() as judge:
        done = _judge(tmp_path, judge, captions, {"CAPJUDGE_MAX_CAPTION_CHARS": "120"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(judge.log) == len(ids) - 1
        assert _judgments(tmp_path)["g03"][1]["failure"] == "caption_too_long"
        assert "above CAPJUDGE_MAX_CAPTION_CHARS (120)" in _judgments(tmp_path)["g03"][1]["failure_detail"]
        for bad in ("0", "lots"):
            judge.reset()
            (tmp_path / bad).mkdir()
            refused = _judge(tmp_path / bad, judge, captions, {"CAPJUDGE_MAX_CAPTION_CHARS": bad})
            assert refused.returncode == 2, (bad, refused.stderr[-2000:])
            assert f"environment variable CAPJUDGE_MAX_CAPTION_CHARS: expected a positive integer; got '{bad}'" in refused.stderr
            assert "Traceback" not in refused.stderr
            assert judge.log == [] and judge.preflights == []

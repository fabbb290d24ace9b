"""`capjudge estimate` sends nothing, so it needs no API key, no judge endpoint, no reply cache and no pre-flight
probe: the real CLI in a clean environment (no key, no base URL), and against the test server to see that not
one request (probe included) arrives even with CAPJUDGE_PREFLIGHT=1.
"""

from __future__ import annotations

import json

from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, run_capjudge_cli

TASK = "gveval_demo"


def _estimate(tmp_path, *arguments: str, env: dict[str, str] | None = None):
    """The CLI with only what a fresh shell has: no OPENAI_*/AZURE_* variable unless given."""
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
             "HF_DATASETS_CACHE": str(tmp_path / "hf"), "CAPJUDGE_CACHE": str(tmp_path / "cache" / "judge.sqlite"),
             **(env or {})}
    return run_capjudge_cli(["estimate", "--task", TASK, *arguments],
                            env=clean, cwd=REPO_ROOT, timeout=600)


def test_estimate_needs_no_api_key(tmp_path):
    done = _estimate(tmp_path, "--price-input", "2.5", "--price-output", "10")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no API key" not in done.stderr
    assert f"task {TASK}: 10 items, 10 requests expected" in done.stdout and "cost: $" in done.stdout
    assert not (tmp_path / "cache").exists()  # no reply cache is opened (or even checked) for a count
    # The task's own settings are still checked: a bad one is one line naming it, exit 2.
    bad = _estimate(tmp_path, env={"CAPJUDGE_GVEVAL_MODE": "poetry"})
    assert bad.returncode == 2 and "CAPJUDGE_GVEVAL_MODE" in bad.stderr and "Traceback" not in bad.stderr


def test_estimate_sends_no_request_even_with_preflight_on(tmp_path):
    with judge_server() as judge:
        done = _estimate(tmp_path, env={"OPENAI_BASE_URL": judge.base_url, "CAPJUDGE_PREFLIGHT": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        assert judge.preflights == [] and judge.log == []


def test_a_caption_too_long_to_send_is_not_counted_as_a_request(tmp_path):
    items = [json.loads(line)["id"] for line in (REPO_ROOT / "tasks" / "demo" / "gveval_demo.jsonl").read_text().splitlines()]
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"id": item, "caption": "a dog runs " * (3_000 if n == 0 else 1)}) + "\n"
                                for n, item in enumerate(items)), encoding="utf-8")
    done = _estimate(tmp_path, "--captions", str(captions))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"task {TASK}: 10 items, 9 requests expected" in done.stdout
    assert f"item {items[0]}: caption has 33,000 characters" in done.stderr and "caption_too_long" in done.stderr

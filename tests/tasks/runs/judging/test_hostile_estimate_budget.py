"""Issue 46 items 6 and 10: `capjudge estimate` (and `capjudge sensitivity --dry-run`, which prints the same
learned charges) against a hostile budget folder, and the name estimate's messages go under.

- A window file whose `charge_at` (the time of the latest learned sample) is 1e300 or infinite ended in an
  OverflowError traceback. The time is only shown (no run reads it, and the ratio a run does use is still
  sound): it is shown as unknown, with the file and the value named, and the estimate stands (exit 0).
- A `window.sqlite` that is a folder was taken as "nothing learned"; a run could not open it either: one line
  naming it, exit 2. Likewise a budget folder that is a file.
- Estimate's own messages said "capjudge judge:".
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.hostile import refusal_line

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _env(tmp_path: Path) -> dict[str, str]:
    return {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "cache" / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}


def _learned_folder(tmp_path: Path) -> Path:
    """The budget folder a run of the environment's judge uses, holding a learned charge (1.30x), as a run
    leaves it."""
    from capjudge.judges.client.budget import Limits, MachineBudget, judge_budget_folder
    from capjudge.judges.client.charge import SAMPLES
    from capjudge.judges.client.config import JudgeConfig

    folder = judge_budget_folder(JudgeConfig.from_env(_env(tmp_path)))
    budget = MachineBudget(folder, Limits(4, tpm=100_000))
    for _ in range(5):
        budget.admit(lambda: 100)
    seen = time.time()
    for _ in range(SAMPLES):
        budget.reconcile(seen, None, 650)
    budget.close()
    return folder


COMMANDS = {
    "estimate": ("estimate", "--task", "gveval_demo", "--limit", "2"),
    "sensitivity-dry-run": ("sensitivity", "--task", "gveval_demo", "--captions", str(CAPTIONS), "--dry-run",
                            "--limit", "2"),
}


@pytest.mark.parametrize("stored", [1e300, float("inf"), float("-inf"), -5.0, "yesterday"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_learned_time_that_is_no_time_is_shown_as_unknown_naming_the_file(tmp_path, command, stored):
    folder = _learned_folder(tmp_path)
    with sqlite3.connect(folder / "window.sqlite") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'charge_at'", (stored,))
    done = run_capjudge(*COMMANDS[command], env=_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("learned charge")]
    assert "counted 1.30x capjudge's token estimate" in line  # the ratio a run uses is still shown
    assert f"the latest at an unknown time ({folder / 'window.sqlite'}: charge_at is " in line
    assert "not a time" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_window_file_that_is_a_folder_is_one_line_exit_2(tmp_path, command):
    folder = _learned_folder(tmp_path)
    for name in ("window.sqlite", "window.sqlite-wal", "window.sqlite-shm"):
        (folder / name).unlink(missing_ok=True)
    (folder / "window.sqlite").mkdir()
    name = COMMANDS[command][0]
    line = refusal_line(run_capjudge(*COMMANDS[command], env=_env(tmp_path)), str(folder / "window.sqlite"))
    assert line == f"capjudge {name}: budget file {folder / 'window.sqlite'}: is not a file (a folder?)"


def test_a_budget_folder_that_is_a_file_is_one_line_exit_2(tmp_path):
    from capjudge.judges.client.budget import judge_budget_folder
    from capjudge.judges.client.config import JudgeConfig

    folder = judge_budget_folder(JudgeConfig.from_env(_env(tmp_path)))
    folder.parent.mkdir(parents=True)
    folder.write_text("a file where the budget folder goes")
    line = refusal_line(run_capjudge(*COMMANDS["estimate"], env=_env(tmp_path)), str(folder))
    assert line == f"capjudge estimate: budget folder {folder}: is a file, not a folder"


def test_estimate_says_what_it_ignores_under_its_own_name(tmp_path):
    """A captions file (a copy of the demo set, which holds both demo tasks' captions) with ids that are not the
    task's: estimate says it ignores them, as `capjudge estimate`."""
    captions = tmp_path / "my_captions.jsonl"
    captions.write_text(CAPTIONS.read_text(encoding="utf-8"), encoding="utf-8")
    done = run_capjudge("estimate", "--task", "gveval_demo", "--captions", str(captions), env=_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "capjudge judge" not in done.stdout + done.stderr
    (said,) = [line for line in done.stderr.splitlines() if "ignoring" in line]
    assert said.startswith(f"capjudge estimate: captions file {captions}: ignoring 10 ids") and "not items of" in said


def test_a_run_whose_window_file_is_a_folder_is_one_line_before_any_request(tmp_path):
    """What estimate refuses, a run refuses too, before it asks anything (it was an sqlite3 traceback)."""
    from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server

    with judge_server() as server:
        env = {**_env(tmp_path), "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY,
               "MODEL_VERSION": TEST_JUDGE_MODEL}
        from capjudge.judges.client.budget import judge_budget_folder
        from capjudge.judges.client.config import JudgeConfig

        window = judge_budget_folder(JudgeConfig.from_env(env)) / "window.sqlite"
        window.mkdir(parents=True)
        done = run_capjudge("judge", "--captions", str(CAPTIONS), "--task", "gveval_demo", "--out",
                            str(tmp_path / "out"), env=env)
        assert server.log == []
    line = refusal_line(done, str(window))
    assert line == f"capjudge judge: budget file {window}: is not a file (a folder?)"
    assert "capjudge: judging" not in done.stderr, done.stderr[-3000:]  # refused before a progress bar is drawn
    assert list((tmp_path / "out").rglob("*_results.json")) == []

"""The packaged demo caption sets hold both demo tasks' ids on purpose (one file per set serves the
capjudge_demo group): using one for one task says nothing about the other task's ids. A user's own file with
ids of no item of the task still gets the note, naming the file (issue 47, item 3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge

PACKAGED = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
COMMANDS = {
    "estimate": ("estimate", "--task", "gveval_demo"),
    "sensitivity": ("sensitivity", "--task", "gveval_demo", "--dry-run"),
}


def _env(tmp_path: Path) -> dict[str, str]:
    return {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "cache" / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_packaged_caption_set_gets_no_note_and_a_users_copy_does(command, tmp_path):
    packaged = run_capjudge(*COMMANDS[command], "--captions", str(PACKAGED), env=_env(tmp_path))
    assert packaged.returncode == 0, packaged.stderr[-3000:]
    assert "ignoring" not in packaged.stderr
    # The same lines in a file of the user's: the note names that file and the ids it leaves out.
    mine = tmp_path / "my_captions.jsonl"
    shutil.copy(PACKAGED, mine)
    copied = run_capjudge(*COMMANDS[command], "--captions", str(mine), env=_env(tmp_path))
    assert copied.returncode == 0, copied.stderr[-3000:]
    (note,) = [line for line in copied.stderr.splitlines() if "ignoring" in line]
    assert f"captions file {mine}: ignoring 10 ids that are not items of 'gveval_demo'" in note
    # Both priced the same ten items: the note changes nothing else.
    assert [line for line in packaged.stdout.splitlines() if "ignoring" not in line] == \
        [line.replace(str(mine), str(PACKAGED)) for line in copied.stdout.splitlines()]

"""Hostile input to `capjudge sensitivity`: every flag and file it reads, refused in one line naming the flag,
file or item and the problem, exit 2, no traceback, and nothing asked of any judge.

The refusals before the task is built need no judge at all; those that need the task's items run with
--dry-run (nothing is sent) or against the test server, whose log shows that no judgment was asked.
"""

from __future__ import annotations

import json

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli
from tests.support.hostile import refusal_line

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
ABSENT = "/nonexistent/never-read"


def _env(tmp_path, server=None) -> dict[str, str]:
    env = {"OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite"),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    # No server: a judge that is not there, so a command that got as far as asking one would fail otherwise.
    env["OPENAI_BASE_URL"] = server.base_url if server is not None else "http://127.0.0.1:9/v1"
    return env


def _run(tmp_path, *arguments, server=None):
    return run_capjudge_cli(["sensitivity", *map(str, arguments)], env=_env(tmp_path, server), cwd=REPO_ROOT)


# (arguments after `sensitivity`, fragments of the one refusal line): refused before any task is built.
BEFORE_THE_TASK = [
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--perturbation", "typos"),
     ("--perturbation: no perturbation 'typos'", "known: padding")),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--perturbation", "shuffle", "--perturbation", "shuffle"),
     ("--perturbation: 'shuffle' given twice",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--resamples", "5"), ("--resamples must be 100 or more, got 5",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--resamples", "10001"), ("--resamples 10001", "10,000")),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--limit", "0"), ("--limit must be 1 or more, got 0",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--seed", "-1"), ("--seed must be 0 or more, got -1",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--seed", str(2**32)), ("--seed 4294967296", "4,294,967,295")),
    (("--task", TASK, "--captions", ABSENT), ("--out is required",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--price-input", "1", "--price-output", "1"),
     ("--price-input and --price-output go with --dry-run",)),
    (("--task", TASK, "--captions", ABSENT, "--dry-run", "--price-input", "cheap", "--price-output", "1"),
     ("--price-input must be a number", "'cheap'")),
    (("--task", TASK, "--captions", ABSENT, "--dry-run", "--price-input", "1"), ("give both --price-input and --price-output",)),
    (("--task", TASK, "--captions", ABSENT, "--dry-run", "--output-tokens", "nan"), ("--output-tokens must be a number >= 0",)),
    (("--task", TASK, "--captions", ABSENT, "--dry-run", "--output-tokens", "1e300"), ("--output-tokens 1e+300: at most 1,000,000",)),
    (("--task", TASK, "--captions", ABSENT, "--dry-run", "--price-input", "1e300", "--price-output", "1"),
     ("--price-input 1e300: at most 100,000 USD per 1M tokens",)),
    (("--task", TASK, "--captions", ABSENT, "--out", "OUT", "--format", "xml"), ("--format", "invalid choice: 'xml'")),
]


@pytest.mark.parametrize(("arguments", "wanted"), BEFORE_THE_TASK, ids=[" ".join(a[4:]) for a, _ in BEFORE_THE_TASK])
def test_a_bad_flag_is_one_line_before_anything_is_read(tmp_path, arguments, wanted):
    arguments = [str(tmp_path / "out") if value == "OUT" else value for value in arguments]
    refusal_line(_run(tmp_path, *arguments), *wanted)
    assert not (tmp_path / "out").exists()  # not even the output folder was made


def test_an_out_that_is_a_file_is_refused_before_any_judging(tmp_path):
    (tmp_path / "taken").write_text("a file")
    with judge_server() as server:
        done = _run(tmp_path, "--task", TASK, "--captions", CAPTIONS, "--out", tmp_path / "taken", server=server)
        assert server.log == []
    refusal_line(done, f"--out {tmp_path / 'taken'}: is a file, not a folder")


def _captions(tmp_path, lines) -> str:
    path = tmp_path / "captions.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def _demo_captions() -> list[dict[str, str]]:
    return [json.loads(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.startswith('{"id": "g')]


BAD_CAPTIONS = [
    ("an empty caption", lambda rows: [{**row, "caption": "  "} if row["id"] == "g03" else row for row in rows],
     ("item 'g03': an empty caption cannot be perturbed",)),
    ("no id of the task", lambda rows: [{"id": "zz1", "caption": "A cat."}, {"id": "zz2", "caption": "A dog."}],
     ("captions.jsonl", "none of its 2 ids is an item of task 'gveval_demo'")),
    ("an item without a caption", lambda rows: rows[:-1], ("captions.jsonl", "1 items of task 'gveval_demo' have no caption", "g10")),
    ("not JSON", None, ("captions.jsonl", "line 1")),
]


@pytest.mark.parametrize(("what", "edit", "wanted"), BAD_CAPTIONS, ids=[case[0] for case in BAD_CAPTIONS])
def test_a_captions_file_that_cannot_be_used_is_one_line_naming_file_or_item(tmp_path, what, edit, wanted):
    if edit is None:
        path = tmp_path / "captions.jsonl"
        path.write_text("{not json\n", encoding="utf-8")
        path = str(path)
    else:
        path = _captions(tmp_path, edit(_demo_captions()))
    refusal_line(_run(tmp_path, "--task", TASK, "--captions", path, "--dry-run"), *wanted)


@pytest.mark.parametrize(("arguments", "wanted"), [
    (("--task", TASK, "--candidates", "--dry-run"), ("--candidates: the items of task 'gveval_demo' carry no rated candidate",)),
    (("--task", TASK, "--dry-run"), ("give one caption source",)),
    (("--task", TASK, "--candidates", "--captions", CAPTIONS, "--dry-run"), ("give one caption source", "--captions and --candidates")),
    (("--task", TASK, "--captions", CAPTIONS, "--limit", "1", "--dry-run"), ("item 'g01': no other clip's caption to borrow",)),
    (("--task", "no_such_task", "--captions", CAPTIONS, "--dry-run"), ("no task 'no_such_task'",)),
    ((ABSENT, "--task", TASK, "--dry-run"), (ABSENT,)),
], ids=["candidates-without-any", "no-source", "two-sources", "one-item-no-donor", "unknown-task", "absent-run"])
def test_a_caption_source_that_cannot_be_used_is_one_line(tmp_path, arguments, wanted):
    refusal_line(_run(tmp_path, *arguments), *wanted)

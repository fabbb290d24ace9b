"""Hostile-input corpus: caption files and task settings inside a real lmms-eval run.

lmms-eval catches every error of an evaluation, prints a traceback, writes nothing and exits 0, so a script's
`lmms-eval ... && capjudge leaderboard` would carry on after a broken captions file. Each case here runs the
real `python -m lmms_eval` (warm, tests/support/warm_launch.py) with the `captions_file` model on the demo G-VEval task
and a test judge, and asserts exit 2, one line naming the file (or variable) and the problem, no traceback,
no results file and not one judgment asked. The same files given to `capjudge judge --captions` give the same
one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server, launch_lmms_eval
from tests.support.hostile import refusal_line

pytestmark = pytest.mark.slow

TASK = "gveval_demo"
GOOD = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
GOOD_ROWS = [json.loads(line) for line in GOOD.read_text(encoding="utf-8").splitlines() if line.strip()]
N_ITEMS = sum(1 for line in (REPO_ROOT / "tasks" / "demo" / "gveval_demo.jsonl").open(encoding="utf-8") if line.strip())


def _rows_text(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


# name -> (file name, content, fragment of the one line). Content None: the file does not exist.
BROKEN_FILES = {
    "duplicate ids": ("dup.jsonl", _rows_text(GOOD_ROWS + GOOD_ROWS[:1]), "ids appear more than once"),
    "invalid UTF-8": ("latin1.jsonl", _rows_text(GOOD_ROWS[:2]).encode() + b'{"id": "g03", "caption": "caf\xe9"}\n',
                      "UTF-8"),
    "a JSON array in a .jsonl": ("array.jsonl", json.dumps(GOOD_ROWS), "line 1"),
    "a missing caption": ("nocaption.jsonl", _rows_text([*GOOD_ROWS[:3], {"id": "g04"}]), "no caption field"),
    "a missing file": ("absent.jsonl", None, "no such file"),
    "a lone surrogate": ("surrogate.jsonl", _rows_text(GOOD_ROWS[:2]) + '{"id": "g03", "caption": "a \\ud800 b"}\n',
                         "unpaired surrogate"),
    "an id twice in a JSON object": ("keyed.json", '{\n "g01": "a red ball",\n "g02": "a square",\n "g01": "a blue ball"\n}\n',
                                     "'g01' appears more than once"),
    "captions missing for items": ("partial.jsonl", _rows_text(GOOD_ROWS[:3]), "have no caption"),
}


def _lmms_eval(judge, tmp_path: Path, model_args: str, extra_args=(), env=None):
    return launch_lmms_eval(model="captions_file", model_args=model_args, tasks=TASK, output_path=tmp_path / "out",
                            judge_base_url=judge.base_url, cache_path=tmp_path / "cache.sqlite", extra_args=extra_args,
                            env=env)


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_a_broken_captions_file_ends_the_lmms_eval_run_with_one_line_and_status_2(tmp_path, case):
    name, content, problem = BROKEN_FILES[case]
    path = tmp_path / name if content is None else _write(tmp_path, name, content)
    with judge_server() as judge:
        outcome = _lmms_eval(judge, tmp_path, f"path={path},model_name=broken")
        assert judge.log == []  # not one judgment asked
    line = refusal_line(outcome, str(path), problem)
    assert line.startswith("capjudge: ")
    assert outcome.new_results_files == ()
    # `capjudge judge --captions` refuses the same file in one line too.
    with judge_server() as judge:
        staged = run_capjudge("judge", "--captions", str(path), "--model-name", "broken", "--task", TASK,
                              "--out", str(tmp_path / "judged"),
                              env=harness_env(judge.base_url, cache_path=tmp_path / "c2.sqlite",
                                              datasets_cache=tmp_path / "hf"))
        assert judge.log == []
    refusal_line(staged, str(path), problem)


def test_an_unknown_model_argument_is_one_line(tmp_path):
    with judge_server() as judge:
        outcome = _lmms_eval(judge, tmp_path, f"path={GOOD},model_name=x,colour=red")
        assert judge.log == []
    refusal_line(outcome, "unknown model argument", "colour")


def test_a_bad_capjudge_setting_inside_lmms_eval_is_one_line_without_lmms_evals_traceback(tmp_path):
    with judge_server() as judge:
        outcome = _lmms_eval(judge, tmp_path, f"path={GOOD},model_name=good",
                             env={"CAPJUDGE_MAX_FAILURE_RATE": "lots"})
        assert judge.log == []
    refusal_line(outcome, "CAPJUDGE_MAX_FAILURE_RATE", "'lots'")
    assert "Error during evaluation" not in outcome.output  # lmms-eval's own report of a caught error
    assert outcome.new_results_files == ()


@pytest.mark.parametrize("variable, value, problem", [
    ("CAPJUDGE_JUDGE_SAMPLES", "5000", "expected at most 100"),
    ("CAPJUDGE_MAX_CAPTION_CHARS", "10000000000", "expected at most 1,000,000"),
    ("CAPJUDGE_JUDGE_SAMPLES", "0", "expected a positive integer"),
])
def test_a_count_past_its_ceiling_is_one_line_before_any_request(tmp_path, variable, value, problem):
    with judge_server() as judge:
        outcome = _lmms_eval(judge, tmp_path, f"path={GOOD},model_name=good", env={variable: value})
        assert judge.log == [] and judge.preflights == []
    refusal_line(outcome, variable, problem)
    assert outcome.new_results_files == ()


def test_a_predict_only_run_needs_no_judge_key_nor_endpoint(tmp_path):
    # The generate-only stage on a GPU machine: no OPENAI_API_KEY, no base URL, no judge anywhere.
    with judge_server() as judge:
        outcome = _lmms_eval(judge, tmp_path, f"path={GOOD},model_name=good", extra_args=["--predict_only"],
                             env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "MODEL_VERSION": ""})
        assert judge.log == [] and judge.preflights == []
    assert outcome.returncode == 0, outcome.output[-3000:]
    run = outcome.require_run()
    assert len(run.samples(TASK)) == N_ITEMS


def test_a_predict_only_run_from_a_config_file_needs_no_judge_key_either(tmp_path):
    # lmms-eval applies --config files after its command line: predict_only set there must count the same.
    import yaml

    config = tmp_path / "generate_only.yaml"
    config.write_text(yaml.safe_dump({
        "model": "captions_file", "model_args": f"path={GOOD},model_name=good", "tasks": TASK,
        "output_path": str(tmp_path / "out"), "log_samples": True, "predict_only": True,
        "include_path": str(REPO_ROOT / "tasks"),
    }), encoding="utf-8")
    with judge_server() as judge:
        outcome = launch_lmms_eval(model="captions_file", model_args=f"path={GOOD},model_name=good", tasks=TASK,
                                   output_path=tmp_path / "out", judge_base_url=judge.base_url,
                                   cache_path=tmp_path / "cache.sqlite", include_path=None, log_samples=False,
                                   extra_args=["--config", str(config)],
                                   env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "", "MODEL_VERSION": ""})
        assert judge.log == [] and judge.preflights == []
    assert outcome.returncode == 0, outcome.output[-3000:]
    assert len(outcome.require_run().samples(TASK)) == N_ITEMS

"""One reader of runs, one rule (issue 46, item 4): every command that reads a run's samples reads them through
capjudge.metrics.files.samples_file. A run whose samples log an item twice, or a response that is not text,
is refused by `capjudge judge`, `sensitivity` and `estimate` as by the leaderboard: one line naming the file,
the line and the item, exit 2, before the task is built and before any judge is asked anything.

The run is real: lmms-eval's own --predict_only --log_samples output (captions_file model, the demo task),
copied and edited per case.
"""

from __future__ import annotations

import json
import shutil

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import (
    TEST_API_KEY,
    TEST_JUDGE_MODEL,
    judge_server,
    run_capjudge_cli,
    run_lmms_eval,
)
from tests.support.hostile import refusal_line

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """lmms-eval's --predict_only output of the demo task: the samples exactly as lmms-eval logs them."""
    root = tmp_path_factory.mktemp("predicted")
    with judge_server() as judge:
        run = run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=TASK,
                            output_path=root / "out", judge_base_url=judge.base_url, cache_path=root / "cache.sqlite",
                            extra_args=["--predict_only"])
        assert judge.log == []
    return run


def _edited_run(predicted, tmp_path, edit):
    """A copy of the predicted run whose samples lines went through `edit(lines)`; returns (run folder, samples)."""
    folder = tmp_path / "run"
    shutil.copytree(predicted.run_dir, folder)
    (samples,) = folder.glob(f"*_samples_{TASK}.jsonl")
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines() if line.strip()]
    samples.write_text("".join(json.dumps(line) + "\n" for line in edit(lines)), encoding="utf-8")
    return folder, samples


def _env(tmp_path, server):
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
            "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}


def _capjudge(tmp_path, server, *arguments):
    return run_capjudge_cli([str(a) for a in arguments], env=_env(tmp_path, server), cwd=REPO_ROOT, timeout=600)


def _judged_captions(server, samples):
    """The run's captions that reached the judge in any request (sensitivity builds its task, and so may send
    the task's pre-flight probe, before it reads the run)."""
    captions = [json.loads(line)["filtered_resps"] for line in samples.read_text(encoding="utf-8").splitlines()]
    sent = [json.dumps(entry.body) for entry in server.log]
    return [c for c in captions if isinstance(c, str) and any(json.dumps(c)[1:-1] in body for body in sent)]


def _g01_twice(lines):
    """g01 (doc_id 0) logged a second time at the end, with another caption: the copy a last-wins reader used."""
    return [*lines, {**lines[0], "filtered_resps": "a different caption, judged instead of the first"}]


def test_the_predicted_run_is_lmms_evals_own_samples_format(predicted):
    """lmms-eval 0.7.3 logs a --predict_only item as its doc_id and the response text (no document, so a
    predicted item is known by its doc_id: the refusals below name it so)."""
    lines = predicted.samples(TASK)
    assert [line["doc_id"] for line in lines] == list(range(10))
    assert all(isinstance(line["filtered_resps"], str) and "doc" not in line for line in lines)


@pytest.mark.parametrize("command", ["judge", "sensitivity"])
def test_an_item_logged_twice_is_refused_by_judge_and_sensitivity_naming_the_file_and_item(
        predicted, tmp_path, command):
    run, samples = _edited_run(predicted, tmp_path, _g01_twice)
    out = tmp_path / "out"
    with judge_server() as server:
        done = _capjudge(tmp_path, server, command, run, "--task", TASK, "--out", out)
        assert _judged_captions(server, samples) == []
        if command == "judge":  # it reads the run before it builds the task: not even the pre-flight probe
            assert server.log == [] and server.preflights == []
    refusal_line(done, str(samples), "doc_id 0 is logged twice (lines 1 and 11)")
    if command == "judge":
        assert not out.exists()


def test_the_leaderboard_still_refuses_the_same_run(predicted, tmp_path):
    run, samples = _edited_run(predicted, tmp_path, _g01_twice)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "leaderboard", run, "--out", tmp_path / "board")
    refusal_line(done, str(samples), "doc_id 0 is logged twice (lines 1 and 11)")


def test_estimate_reads_the_run_through_the_same_reader(predicted, tmp_path):
    run, samples = _edited_run(predicted, tmp_path, _g01_twice)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "estimate", run, "--task", TASK)
        assert server.log == []
    refusal_line(done, str(samples), "doc_id 0 is logged twice")


def test_the_same_doc_id_with_another_target_is_the_same_item(predicted, tmp_path):
    """Not only an exact copy: a second line for doc_id 0 is a second version of that item, whatever it logs."""
    def edit(lines):
        return [*lines, {**lines[0], "target": ["another reference"], "filtered_resps": ["another caption"]}]

    run, samples = _edited_run(predicted, tmp_path, edit)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "judge", run, "--task", TASK, "--out", tmp_path / "out")
        assert server.log == []
    refusal_line(done, str(samples), "doc_id 0 is logged twice (lines 1 and 11)")


# A logged response that is not text: (filtered_resps as logged, what the line says it is).
NOT_TEXT = [
    ([12345], "the number 12345, not text"),
    (12345, "the number 12345, not text"),
    ([None], "null, not text"),
    ([], "an empty list (no response)"),
    ([{"text": "a caption"}], 'an object {"text": "a caption"}, not text'),
    ([True], "the boolean true, not text"),
]


@pytest.mark.parametrize(("response", "problem"), NOT_TEXT, ids=[json.dumps(r) for r, _ in NOT_TEXT])
def test_a_response_that_is_not_text_is_refused_naming_file_line_and_item(predicted, tmp_path, response, problem):
    def edit(lines):
        lines[2]["filtered_resps"] = response
        return lines

    run, samples = _edited_run(predicted, tmp_path, edit)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "judge", run, "--task", TASK, "--out", tmp_path / "out")
        assert server.log == [] and server.preflights == []
    refusal_line(done, f"{samples}, line 3 (doc_id 2): the logged response (filtered_resps) is {problem}")


def test_sensitivity_refuses_a_numeric_response_too(predicted, tmp_path):
    def edit(lines):
        lines[0]["filtered_resps"] = [12345]
        return lines

    run, samples = _edited_run(predicted, tmp_path, edit)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "sensitivity", run, "--task", TASK, "--out", tmp_path / "out")
        assert _judged_captions(server, samples) == []
    refusal_line(done, f"{samples}, line 1 (doc_id 0)", "is the number 12345, not text")


@pytest.mark.parametrize(("doc_id", "shown"), [("0", '"0"'), (-1, "-1"), (True, "true"), (1.5, "1.5")])
def test_a_doc_id_that_is_not_a_document_number_is_refused(predicted, tmp_path, doc_id, shown):
    def edit(lines):
        lines[4]["doc_id"] = doc_id
        return lines

    run, samples = _edited_run(predicted, tmp_path, edit)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "judge", run, "--task", TASK, "--out", tmp_path / "out")
        assert server.log == []
    refusal_line(done, f"{samples}, line 5: doc_id {shown} is not a document number")


def test_the_untouched_run_is_still_judged(predicted, tmp_path):
    """The control: the same copy, unedited, is judged whole (so the refusals above come from the edits)."""
    run, samples = _edited_run(predicted, tmp_path, lambda lines: lines)
    with judge_server() as server:
        done = _capjudge(tmp_path, server, "judge", run, "--task", TASK, "--out", tmp_path / "out")
        assert len(server.log) == 10
        assert len(_judged_captions(server, samples)) == 10  # what the refusals above check can be seen
    assert done.returncode == 0, done.stderr[-3000:]
    assert "10 of 10 items judged" in done.stdout

"""The captions_file lmms-eval model: registration, caption files, id matching, and the missing-id error.

Most tests drive the model the way lmms-eval's evaluator does — real `Instance` requests over a real
`datasets.Dataset` placed in `task_dict` — in process; one test runs the lmms-eval CLI to show that a caption
set with gaps stops the run before the judge is asked anything.
"""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path

import datasets
import pytest
from tests.support.harness_runs import judge_server, launch_lmms_eval, write_stand_in_judged_task
from lmms_eval.api.instance import Instance

from capjudge.models.captions_file import (
    CaptionsFile,
    CaptionsFileError,
    MissingCaptionsError,
    load_caption_set,
    model_manifest,
)

TASK, SPLIT = "captions_test", "test"


def _requests(n: int, metadata: dict | None = None) -> list[Instance]:
    return [
        Instance(
            request_type="generate_until",
            arguments=("Describe the video.", {}, lambda doc: [], doc_id, TASK, SPLIT),
            idx=0,
            metadata={"task": TASK, "doc_id": doc_id, "repeats": 1, "split": SPLIT, **(metadata or {})},
        )
        for doc_id in range(n)
    ]


def _model(docs: list[dict], **arguments) -> CaptionsFile:
    model = CaptionsFile(**arguments)
    model.task_dict[TASK] = datasets.DatasetDict({SPLIT: datasets.Dataset.from_list(docs)})
    return model


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------------------


def test_entry_point_gives_lmms_eval_a_manifest_for_the_model():
    (entry,) = [ep for ep in entry_points(group="lmms_eval.models") if ep.name == "captions_file"]
    assert entry.load() is model_manifest
    manifest = model_manifest()
    assert manifest.model_id == "captions_file"
    assert manifest.simple_class_path == "capjudge.models.captions_file.CaptionsFile"

    from lmms_eval.models import get_model, list_available_models

    assert "captions_file" in list_available_models()
    assert get_model("captions_file") is CaptionsFile


# ---------------------------------------------------------------------------------------------------------
# Caption files
# ---------------------------------------------------------------------------------------------------------


def test_every_file_shape_gives_the_same_captions(tmp_path):
    rows = [{"video_id": "v1", "caption": "a dog runs"}, {"video_id": "v2", "caption": "a cat sleeps"}]
    expected = {"v1": "a dog runs", "v2": "a cat sleeps"}
    jsonl = _write_jsonl(tmp_path / "a.jsonl", rows)
    as_list = tmp_path / "b.json"
    as_list.write_text(json.dumps(rows), encoding="utf-8")
    keyed_strings = tmp_path / "c.json"
    keyed_strings.write_text(json.dumps(expected), encoding="utf-8")
    keyed_objects = tmp_path / "d.json"
    keyed_objects.write_text(json.dumps({k: {"prediction": v} for k, v in expected.items()}), encoding="utf-8")
    lines_named_json = _write_jsonl(tmp_path / "e.json", rows)
    for path in (jsonl, as_list, keyed_strings, keyed_objects, lines_named_json):
        assert dict(load_caption_set(path).captions) == expected, path.name


def test_caption_and_id_fields_can_be_named(tmp_path):
    path = _write_jsonl(tmp_path / "preds.jsonl", [{"clip": 7, "id": "ignored", "answer": "seven", "caption": "not this"}])
    captions = load_caption_set(path, id_field="clip", caption_field="answer").captions
    assert dict(captions) == {"7": "seven"}  # numeric ids become strings


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"id": "a", "caption": "x"}, {"id": "a", "caption": "y"}], "1 ids appear more than once: a"),
        ([{"id": "a", "words": "x"}], "record 1: no caption field"),
        ([{"name": "a", "caption": "x"}], "record 1: no id field"),
        ([{"id": "a", "caption": 3}], "caption field 'caption' is int, not text"),
    ],
)
def test_bad_files_are_rejected_naming_the_record(tmp_path, rows, message):
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(CaptionsFileError, match=message):
        load_caption_set(path)


def test_a_file_that_is_not_json_names_the_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"id": "a", "caption": "x"}\n{"id": "b", "caption": \n', encoding="utf-8")
    with pytest.raises(CaptionsFileError, match="line 2: not JSON"):
        load_caption_set(path)
    with pytest.raises(CaptionsFileError, match="no such file"):
        load_caption_set(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------------------------------------------------
# Matching documents
# ---------------------------------------------------------------------------------------------------------


def test_the_task_declared_id_field_wins_over_the_defaults(tmp_path):
    # Both `id` and `video_id` exist and disagree: the task's metadata.id_field decides.
    docs = [{"id": f"row{i}", "video_id": f"clip{i}"} for i in range(3)]
    path = _write_jsonl(tmp_path / "preds.jsonl", [{"video_id": f"clip{i}", "caption": f"caption {i}"} for i in range(3)])
    model = _model(docs, path=str(path))
    assert model.generate_until(_requests(3, {"id_field": "video_id"})) == ["caption 0", "caption 1", "caption 2"]
    # Without the declaration the default order tries `id` first, which the file does not have.
    with pytest.raises(MissingCaptionsError, match="matched on document field 'id'"):
        model.generate_until(_requests(3))


def test_key_argument_overrides_the_task(tmp_path):
    docs = [{"id": f"row{i}", "video_id": f"clip{i}"} for i in range(2)]
    path = _write_jsonl(tmp_path / "preds.jsonl", [{"id": f"row{i}", "caption": f"by row {i}"} for i in range(2)])
    model = _model(docs, path=str(path), key="id")
    assert model.generate_until(_requests(2, {"id_field": "video_id"})) == ["by row 0", "by row 1"]


def test_falls_back_to_video_id_then_fails_clearly(tmp_path):
    path = _write_jsonl(tmp_path / "preds.jsonl", [{"video_id": "v0", "caption": "c0"}])
    assert _model([{"video_id": "v0"}], path=str(path)).generate_until(_requests(1)) == ["c0"]
    with pytest.raises(CaptionsFileError, match="pass key=FIELD or declare metadata.id_field"):
        _model([{"clip": "v0"}], path=str(path)).generate_until(_requests(1))
    with pytest.raises(CaptionsFileError, match="documents have no field 'clip_name'"):
        _model([{"video_id": "v0"}], path=str(path), key="clip_name").generate_until(_requests(1))


def test_missing_ids_fail_once_naming_the_first_ten_and_the_count(tmp_path):
    docs = [{"video_id": f"clip{i:02d}"} for i in range(15)]
    path = _write_jsonl(tmp_path / "preds.jsonl", [{"video_id": f"clip{i:02d}", "caption": "x"} for i in range(3)])
    model = _model(docs, path=str(path))
    with pytest.raises(MissingCaptionsError) as raised:
        model.generate_until(_requests(15))
    message = str(raised.value)
    assert "12 of 15 documents have no caption" in message and "preds.jsonl" in message
    assert ", ".join(f"clip{i:02d}" for i in range(3, 13)) in message and "(first 10 shown)" in message
    assert "clip13" not in message
    assert raised.value.missing == tuple(f"clip{i:02d}" for i in range(3, 15))


def test_field_mode_returns_the_documents_own_captions():
    docs = [{"id": "a", "candidate": "a man is cooking"}, {"id": "b", "candidate": "a girl sings"}]
    model = _model(docs, field="candidate")
    assert model.generate_until(_requests(2)) == ["a man is cooking", "a girl sings"]
    assert model.model_name == "field-candidate"
    gap = _model([{"id": "a", "candidate": "x"}, {"id": "b", "candidate": None}], field="candidate")
    with pytest.raises(MissingCaptionsError, match="1 of 2 documents have no caption .*: b"):
        gap.generate_until(_requests(2))


def test_arguments_are_checked(tmp_path):
    path = _write_jsonl(tmp_path / "my_model.jsonl", [{"id": "a", "caption": "x"}])
    assert CaptionsFile(path=str(path)).model_name == "my_model"
    assert CaptionsFile(path=str(path), model_name=7).model_name == "7"
    # lmms-eval passes these to every model; they are accepted and ignored.
    CaptionsFile(path=str(path), batch_size=1, device=None)
    with pytest.raises(CaptionsFileError, match="exactly one of path=FILE"):
        CaptionsFile()
    with pytest.raises(CaptionsFileError, match="exactly one of path=FILE"):
        CaptionsFile(path=str(path), field="candidate")
    with pytest.raises(CaptionsFileError, match=r"unknown model argument\(s\) \['paht'\]"):
        CaptionsFile(field="candidate", paht="x")
    with pytest.raises(NotImplementedError):
        CaptionsFile(field="candidate").loglikelihood([])


# ---------------------------------------------------------------------------------------------------------
# Through the real harness
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_with_missing_captions_stops_before_any_judge_call(tmp_path):
    docs = [{"video_id": f"clip{i:02d}", "candidate": "a dog"} for i in range(6)]
    include = write_stand_in_judged_task(tmp_path / "task", docs)
    path = _write_jsonl(tmp_path / "partial.jsonl", [{"video_id": f"clip{i:02d}", "caption": "a dog runs"} for i in range(4)])
    with judge_server() as judge:
        outcome = launch_lmms_eval(
            model="captions_file", model_args=f"path={path}", tasks="stand_in_gveval",
            output_path=tmp_path / "out", judge_base_url=judge.base_url, include_path=include,
        )
        assert judge.log == []  # not one request reached the judge
    assert outcome.new_results_files == ()
    assert "2 of 6 documents have no caption (matched on document field 'video_id'): clip04, clip05" in outcome.output

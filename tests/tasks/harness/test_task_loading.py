"""How the capjudge task folders find and validate their items and settings, in process (no lmms-eval run):
the two loaders on the real shared data and on malformed rows, the data-source precedence, the judge
settings with their environment overrides, and lmms-eval building the tasks from their YAMLs (including the
one clear error when the judge has no key)."""

from __future__ import annotations

import json
import shutil
import math

import pytest
from capjudge.judges.client.config import ConfigError
from capjudge.judges.datasets.anycap_video import ANYCAP_FORMAT, parse_anycap_record
from capjudge.judges.datasets.items import DatasetError, load_rows
from capjudge.judges.datasets.msvd_eval import MSVD_EVAL_FORMAT, parse_msvd_record
from capjudge.tasks.harness.anycap_task import AnyCapSettings
from capjudge.tasks.harness.gveval_task import GVEvalSettings
from capjudge.judges.client.observed import merge_request_params
from capjudge.tasks.harness.aggregations import mean_of_judged
from capjudge.tasks.harness.sources import doc_to_video, missing_video_problem, resolve_source
from tests.support.paths import REPO_ROOT, shared_path

TASKS_DIR = REPO_ROOT / "tasks"
MSVD = ("data", "msvd_eval", "MSVD-Eval.json")
ANYCAP = ("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")


def _anycap_row(**changes):
    row = {
        "id": 7,
        "video": "clip.mp4",
        "conversations": [{"from": "human", "value": "Describe it in 20 to 30 words."}, {"from": "gpt", "value": "A cat sleeps."}],
        "restriction": ["brief", "The generated caption's length needs to be 20 to 30 words."],
    }
    row.update(changes)
    return row


def _msvd_row(**changes):
    row = {"id": "vid9", "vname": "a.avi", "ref": ["a cat"], "candidate": "a cat sleeps", "human_score": [[4, 3, 4, 5, 4.0]]}
    row.update(changes)
    return row


# ---------------------------------------------------------------------------------------------------------
# Loaders on the real data


def test_msvd_eval_loads_all_197_items_with_references_and_two_annotators():
    path = shared_path(*MSVD)
    source = resolve_source({"data_env": "X"}, env={"X": str(path)})
    rows = load_rows(source, MSVD_EVAL_FORMAT, "test")
    assert len(rows) == 197
    first = rows[0]
    assert first["id"] == "vid1301" and first["video"] == "eyhzdC936uk_15_27.avi"
    assert len(first["references"]) == 37 and first["candidate"].startswith("The person in the video")
    assert first["human_scores"] == [[4.0, 3.0, 4.0, 5.0, 4.0], [4.0, 3.0, 4.0, 4.0, 3.75]]
    assert all(len(row["human_scores"]) == 2 for row in rows)
    # Without CAPJUDGE_MSVD_VIDEOS the videos are looked for beside the JSON file.
    assert first["_videos_dir"] == str(path.parent)


def test_anycap_loads_all_189_items_and_names_theme_style():
    path = shared_path(*ANYCAP)
    rows = load_rows(resolve_source({"data_env": "X"}, env={"X": str(path)}), ANYCAP_FORMAT, "test")
    assert len(rows) == 189
    counts = {kind: sum(row["caption_type"] == kind for row in rows) for kind in ("brief", "detail", "poem", "narrative", "style")}
    assert counts == {"brief": 38, "detail": 40, "poem": 40, "narrative": 31, "style": 40}
    assert {row["dataset_caption_type"] for row in rows if row["caption_type"] == "style"} == {"theme"}
    first = rows[0]
    assert first["id"] == "340" and first["video"] == "00PTxOjRh_o_20_18to127.mp4"
    assert first["instruction"].startswith("Provide a concise description")
    assert first["reference"].startswith("A person stands next to a bed")
    assert first["length_restriction"] == "The generated caption's length needs to be 20 to 30 words."


# ---------------------------------------------------------------------------------------------------------
# Malformed rows name the item


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"ref": []}, "item 'vid9': 'ref' must be a non-empty list"),
        ({"human_score": [[4, 3, 4]]}, "item 'vid9', annotator 0: expected a list of 5 numbers"),
        ({"human_score": [[4, 3, 4, 5, 1.0]]}, "item 'vid9', annotator 0: mean column"),
        ({"vname": 12}, "item 'vid9': 'vname' must be a string"),
        ({"id": None}, "record 4: no usable 'id'"),
    ],
)
def test_malformed_msvd_rows_raise_a_dataset_error_naming_the_item(changes, message):
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_msvd_record(_msvd_row(**changes), 3)


def test_msvd_item_without_human_scores_is_valid_and_has_none():
    row = parse_msvd_record(_msvd_row(human_score=None), 0)
    assert row["human_scores"] == [] and row["references"] == ["a cat"]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"restriction": ["sonnet", "x"]}, "item 7: unknown caption type 'sonnet'"),
        ({"restriction": []}, "item 7: 'restriction' must be"),
        ({"conversations": [{"from": "human", "value": "Describe."}]}, "item 7: 'conversations' must hold"),
        ({"conversations": [{"value": "Describe."}, {"value": "  "}]}, r"item 7: conversations\[1\] has no text"),
        ({"video": ""}, "item 7: 'video' must be a file name"),
    ],
)
def test_malformed_anycap_rows_raise_a_dataset_error_naming_the_item(changes, message):
    with pytest.raises(DatasetError, match=message):
        parse_anycap_record(_anycap_row(**changes), 0)


def test_a_bad_row_in_a_file_names_the_file_and_the_item(tmp_path):
    path = tmp_path / "style.jsonl"
    rows = [_anycap_row(id=1), _anycap_row(id=2, restriction=["limerick"])]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = resolve_source({"data_env": "X"}, env={"X": str(path)})
    with pytest.raises(DatasetError, match=rf"{path}.*item 2: unknown caption type 'limerick'"):
        load_rows(source, ANYCAP_FORMAT, "test")


def test_a_line_that_is_not_json_and_duplicate_ids_are_dataset_errors(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_anycap_row()) + "\n{not json\n")
    with pytest.raises(DatasetError, match="line 2: not JSON"):
        load_rows(resolve_source({"data_env": "X"}, env={"X": str(broken)}), ANYCAP_FORMAT, "test")
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([_msvd_row(), _msvd_row()]))
    with pytest.raises(DatasetError, match="item id 'vid9' occurs twice"):
        load_rows(resolve_source({"data_env": "X"}, env={"X": str(twice)}), MSVD_EVAL_FORMAT, "test")
    not_object = tmp_path / "msvd.json"
    not_object.write_text(json.dumps({"vid1": ["a list, not an item"]}))
    with pytest.raises(DatasetError, match="item 'vid1': expected an object, got list"):
        load_rows(resolve_source({"data_env": "X"}, env={"X": str(not_object)}), MSVD_EVAL_FORMAT, "test")


# ---------------------------------------------------------------------------------------------------------
# Where the data and the videos come from


def test_source_precedence_local_file_then_hub_then_packaged(tmp_path):
    data = tmp_path / "items.json"
    data.write_text("{}")
    metadata = {"data_env": "D", "hub_env": "H", "videos_env": "V", "default_data": "gveval/gveval.yaml"}
    local = resolve_source(metadata, env={"D": str(data), "H": "org/set"})
    assert (local.kind, local.location, local.videos_dir) == ("local", str(data), tmp_path)
    hub = resolve_source(metadata, env={"H": "org/set", "V": str(tmp_path / "clips")})
    assert (hub.kind, hub.location, hub.videos_dir) == ("hub", "org/set", tmp_path / "clips")
    packaged = resolve_source(metadata, env={})
    assert packaged.kind == "packaged" and packaged.videos_dir == TASKS_DIR / "gveval"


def test_a_hub_dataset_goes_through_the_same_row_checks(tmp_path, monkeypatch):
    import datasets

    # `datasets.load_dataset` reads a local folder exactly as a hub repository: this is the hub code path,
    # offline. The published rows keep their nested conversations/restriction through Arrow.
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    repo = tmp_path / "anycap_repo"
    repo.mkdir()
    # (Row 2's length instruction states a length the rule reads and its instruction asks for: "Write two
    # sentences." under "Describe it in 20 to 30 words." is refused since issue 46.)
    rows = [_anycap_row(id=1), _anycap_row(id=2, restriction=["theme", "It needs to be exactly two sentences."],
                                           conversations=[{"from": "human", "value": "Describe its theme in two sentences."},
                                                          {"from": "gpt", "value": "Calm. Quiet."}])]
    (repo / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    source = resolve_source({"hub_env": "H", "videos_env": "V"}, env={"H": str(repo), "V": str(tmp_path / "clips")})
    loaded = load_rows(source, ANYCAP_FORMAT, "test")
    assert [row["id"] for row in loaded] == ["1", "2"] and loaded[1]["caption_type"] == "style"
    assert loaded[0]["_videos_dir"] == str(tmp_path / "clips") and loaded[0]["_videos_env"] == "V"
    (repo / "test.jsonl").write_text(json.dumps(_anycap_row(id=3, restriction=["ode", "x"])) + "\n")
    with pytest.raises(DatasetError, match=f"hub:{repo}: item 3: unknown caption type 'ode'"):
        load_rows(source, ANYCAP_FORMAT, "test")


def test_no_source_and_a_missing_file_are_errors_naming_the_variables(tmp_path):
    with pytest.raises(DatasetError, match="set CAPJUDGE_MSVD_EVAL_JSON or CAPJUDGE_MSVD_EVAL_HUB"):
        resolve_source({"data_env": "CAPJUDGE_MSVD_EVAL_JSON", "hub_env": "CAPJUDGE_MSVD_EVAL_HUB"}, env={})
    with pytest.raises(DatasetError, match=f"D={tmp_path / 'nope.json'}: no such file"):
        resolve_source({"data_env": "D"}, env={"D": str(tmp_path / "nope.json")})


def test_a_missing_video_is_named_with_item_and_path_and_the_model_gets_none(tmp_path):
    (tmp_path / "here.mp4").write_bytes(b"x")
    present = {"id": "a", "video": "here.mp4", "_videos_dir": str(tmp_path), "_videos_env": "V"}
    absent = {**present, "id": "b", "video": "gone.mp4"}
    no_folder = {**present, "id": "c", "_videos_dir": ""}
    assert doc_to_video(present) == [str(tmp_path / "here.mp4")]
    assert missing_video_problem(present) is None
    assert missing_video_problem(absent) == f"item b: video file not found: {tmp_path / 'gone.mp4'}"
    assert doc_to_video(absent) == []
    assert missing_video_problem(no_folder) == "item c: no videos folder for here.mp4 (set V)"


# ---------------------------------------------------------------------------------------------------------
# Judge settings


def test_gveval_settings_come_from_metadata_and_the_environment_overrides_them():
    metadata = {"scoring": "expected", "mode": "references", "max_tries": 2}
    assert GVEvalSettings.resolve(metadata, env={}) == GVEvalSettings("expected", "references", 2, False)
    overridden = GVEvalSettings.resolve(
        metadata, env={"CAPJUDGE_GVEVAL_SCORING": "text", "CAPJUDGE_GVEVAL_MODE": "frames", "CAPJUDGE_CONSTRAINED_OUTPUT": "1"}
    )
    assert overridden == GVEvalSettings("text", "frames", 2, True)
    with pytest.raises(ConfigError, match="environment variable CAPJUDGE_GVEVAL_MODE: expected one of frames"):
        GVEvalSettings.resolve(metadata, env={"CAPJUDGE_GVEVAL_MODE": "video"})
    with pytest.raises(ConfigError, match="task metadata 'max_tries'"):
        GVEvalSettings.resolve({"max_tries": 0}, env={})


def test_anycap_settings_come_from_metadata_and_the_environment_overrides_them():
    metadata = {"tolerance": 10, "instruction_rule": False, "max_tries": 5}
    assert AnyCapSettings.resolve(metadata, env={}) == AnyCapSettings(10, False, 5, False)
    overridden = AnyCapSettings.resolve(metadata, env={"CAPJUDGE_ANYCAP_TOLERANCE": "30", "CAPJUDGE_ANYCAP_INSTRUCTION_RULE": "true"})
    assert overridden == AnyCapSettings(30, True, 5, False)
    with pytest.raises(ConfigError, match="CAPJUDGE_ANYCAP_TOLERANCE: tolerance must be an integer percent"):
        AnyCapSettings.resolve(metadata, env={"CAPJUDGE_ANYCAP_TOLERANCE": "2.5"})
    with pytest.raises(ConfigError, match="CAPJUDGE_ANYCAP_INSTRUCTION_RULE: expected true/false"):
        AnyCapSettings.resolve(metadata, env={"CAPJUDGE_ANYCAP_INSTRUCTION_RULE": "maybe"})


def test_constrained_output_params_are_merged_into_the_request_not_replacing_it():
    merged = merge_request_params({"temperature": 1, "extra_body": {"a": 1}}, {"extra_body": {"grammar": "g"}})
    assert merged == {"temperature": 1, "extra_body": {"a": 1, "grammar": "g"}}


def test_unjudged_items_are_excluded_from_means_and_no_judged_item_is_nan():
    assert mean_of_judged([90.0, None, 70.0]) == 80.0
    assert math.isnan(mean_of_judged([None, None]))  # undefined, never 0


# ---------------------------------------------------------------------------------------------------------
# lmms-eval builds the tasks from the YAMLs


@pytest.fixture(autouse=True)
def offline_task_building(monkeypatch):
    """Tasks are built in this process with no judge running: the pre-flight probe is off here (the probe
    is tested against real lmms-eval runs and the test server in test_preflight.py)."""
    monkeypatch.setenv("CAPJUDGE_PREFLIGHT", "0")


@pytest.fixture(scope="module")
def task_manager():
    from lmms_eval.tasks import TaskManager

    return TaskManager("ERROR", include_path=str(TASKS_DIR), include_defaults=False)


def test_lmms_eval_indexes_the_task_folders(task_manager):
    assert {"gveval", "gveval_references", "anycap_style"} <= set(task_manager.all_tasks)


def test_lmms_eval_builds_gveval_references_from_the_shared_data(task_manager, monkeypatch, tmp_path):
    monkeypatch.setenv("CAPJUDGE_MSVD_EVAL_JSON", str(shared_path(*MSVD)))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # never contacted: building only
    monkeypatch.setenv("CAPJUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.delenv("CAPJUDGE_GVEVAL_MODE", raising=False)
    task = task_manager.load_task_or_group(["gveval_references"])["gveval_references"]
    docs = task.test_docs()
    assert len(docs) == 197 and docs[0]["id"] == "vid1301"
    assert task.settings().mode == "references"
    assert task.doc_to_text(docs[0]) == "Describe what happens in this video in one sentence."
    assert set(task.aggregation()) >= {"gveval_mean", "gveval_failed", "gveval_kendall_b_mean"}


def test_lmms_eval_builds_anycap_style_with_the_instruction_as_prompt(task_manager, monkeypatch, tmp_path):
    monkeypatch.setenv("CAPJUDGE_ANYCAP_JSONL", str(shared_path(*ANYCAP)))
    # At least one item's clip must be there (with none the task refuses to load: test_preflight.py).
    first_video = json.loads(shared_path(*ANYCAP).read_text(encoding="utf-8").splitlines()[0])["video"]
    (tmp_path / "videos").mkdir()
    shutil.copy(TASKS_DIR / "demo" / "red_ball.mp4", tmp_path / "videos" / first_video)
    monkeypatch.setenv("CAPJUDGE_ANYCAP_VIDEOS", str(tmp_path / "videos"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CAPJUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    task = task_manager.load_task_or_group(["anycap_style"])["anycap_style"]
    doc = task.test_docs()[0]
    assert task.doc_to_text(doc) == doc["instruction"] and task.doc_to_target(doc) == doc["reference"]
    assert set(task.aggregation()) >= {"anycap_score", "anycap_style", "anycap_length_capped", "anycap_failed"}


def test_a_judge_without_a_key_is_one_config_error_when_the_task_is_built(task_manager, monkeypatch):
    monkeypatch.setenv("CAPJUDGE_MSVD_EVAL_JSON", str(shared_path(*MSVD)))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_URL", "API_TYPE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="no API key for the judge at https://api.openai.com/v1: set OPENAI_API_KEY"):
        task_manager.load_task_or_group(["gveval"])


def test_without_data_the_task_says_which_variables_to_set(task_manager, monkeypatch):
    for name in ("CAPJUDGE_ANYCAP_JSONL", "CAPJUDGE_ANYCAP_HUB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(DatasetError, match="set CAPJUDGE_ANYCAP_JSONL or CAPJUDGE_ANYCAP_HUB"):
        task_manager.load_task_or_group(["anycap_style"])


def test_task_yamls_document_every_environment_override():
    gveval_yaml = (TASKS_DIR / "gveval" / "gveval.yaml").read_text()
    anycap_yaml = (TASKS_DIR / "anycap_style" / "anycap_style.yaml").read_text()
    for name in ("CAPJUDGE_GVEVAL_SCORING", "CAPJUDGE_GVEVAL_MODE", "CAPJUDGE_CONSTRAINED_OUTPUT", "CAPJUDGE_MSVD_VIDEOS"):
        assert name in gveval_yaml
    for name in ("CAPJUDGE_ANYCAP_TOLERANCE", "CAPJUDGE_ANYCAP_INSTRUCTION_RULE", "CAPJUDGE_CONSTRAINED_OUTPUT", "CAPJUDGE_ANYCAP_VIDEOS"):
        assert name in anycap_yaml


# ---------------------------------------------------------------------------------------------------------
# The packaged demo split


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    """The demo split as its generator writes it (into tmp: the test does not depend on tasks/demo/)."""
    from tests.support.demo_data import write_demo

    folder = tmp_path_factory.mktemp("demo")
    write_demo(folder)
    return folder


def test_demo_rows_load_with_their_clips_beside_them(demo_folder):
    from capjudge.judges.datasets.demo import ANYCAP_DEMO_FORMAT as ANYCAP_DEMO
    from capjudge.judges.datasets.demo import GVEVAL_DEMO_FORMAT as GVEVAL_DEMO

    for name, item_format in (("gveval_demo.jsonl", GVEVAL_DEMO), ("anycap_demo.jsonl", ANYCAP_DEMO)):
        rows = load_rows(resolve_source({"data_env": "X"}, env={"X": str(demo_folder / name)}), item_format, "test")
        assert len(rows) == 10, name
        assert all(missing_video_problem(row) is None for row in rows), name
    anycap_rows = load_rows(resolve_source({"data_env": "X"}, env={"X": str(demo_folder / "anycap_demo.jsonl")}), ANYCAP_DEMO, "test")
    assert {row["caption_type"] for row in anycap_rows} == {"brief", "detail", "poem", "narrative", "style"}
    gveval_rows = load_rows(resolve_source({"data_env": "X"}, env={"X": str(demo_folder / "gveval_demo.jsonl")}), GVEVAL_DEMO, "test")
    assert all(row["human_scores"] == [] and len(row["references"]) >= 3 for row in gveval_rows)


def test_lmms_eval_builds_both_demo_tasks_from_the_packaged_split(task_manager, monkeypatch, tmp_path):
    if not (TASKS_DIR / "demo" / "gveval_demo.jsonl").is_file():
        pytest.skip("tasks/demo/ is not generated yet (make demo-data)")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CAPJUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.delenv("CAPJUDGE_GVEVAL_MODE", raising=False)
    tasks = task_manager.load_task_or_group(["gveval_demo", "anycap_style_demo"])
    gveval, anycap = tasks["gveval_demo"], tasks["anycap_style_demo"]
    assert len(gveval.test_docs()) == 10 and len(anycap.test_docs()) == 10
    assert gveval.settings().mode == "frames+references"
    assert "gveval_kendall_b_mean" not in gveval.aggregation()
    assert gveval.doc_to_visual(gveval.test_docs()[0]) == [str(TASKS_DIR / "demo" / gveval.test_docs()[0]["video"])]

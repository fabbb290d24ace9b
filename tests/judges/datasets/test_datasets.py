"""The datasets package (capjudge.judges.datasets): a dataset reads without any judge's code, the names a
rating file shares with a judge are that judge's, every task YAML names a shipped dataset (and every shipped
dataset is named), VATEX-EVAL's item ids go there and back, and a task's metadata that names no usable
dataset is refused with one line naming the task and the key, in process and through `capjudge judge`.
"""

from __future__ import annotations

import ast
import shutil

import pytest
import yaml
from capjudge.judges.datasets import known_datasets, vatex_eval
from capjudge.judges.datasets.items import DatasetError
from capjudge.judges.datasets.known_datasets import SHIPPED_DATASETS, item_format_of
from tests.support.paths import REPO_ROOT, SUPPORT_DIR
from tests.support.harness_runs import run_capjudge
from tests.support.hostile import refusal_line

DATASETS_DIR = REPO_ROOT / "judges" / "datasets"
# What a dataset module may import from capjudge: its own package, and the bottom-layer file readers.
ALLOWED = ("capjudge.judges.datasets", "capjudge.judges.jsonl")


def _capjudge_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {name for name in names if name.startswith("capjudge.")}


def _foreign(source: str) -> set[str]:
    return {name for name in _capjudge_imports(source) if not name.startswith(ALLOWED)}


def test_no_dataset_module_imports_a_judge_or_anything_above_the_readers():
    modules = sorted(DATASETS_DIR.glob("*.py"))
    assert {path.name for path in modules} >= {"msvd_eval.py", "vatex_eval.py", "anycap_video.py", "demo.py"}
    assert {path.name: _foreign(path.read_text(encoding="utf-8")) for path in modules} == {path.name: set() for path in modules}
    # The check sees a judge's module when one is imported (type-only imports included).
    assert _foreign("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from capjudge.judges.gveval.parser import SCORE_NAMES\n") == {
        "capjudge.judges.gveval.parser"}


def test_msvd_evals_score_columns_are_the_gveval_judges_score_names():
    """The G-VEval task pairs each judge score with the human column of the same position: the names MSVD-Eval
    spells for its columns must be the judge's, in the judge's order."""
    from capjudge.judges.datasets.msvd_eval import MEAN_INDEX, SCORE_NAMES
    from capjudge.judges.gveval import parser

    assert SCORE_NAMES == parser.SCORE_NAMES
    assert SCORE_NAMES[MEAN_INDEX] == "mean"


def test_the_anycap_judge_takes_its_caption_types_from_the_dataset():
    from capjudge.judges.anycap import judge
    from capjudge.judges.datasets import anycap_video

    assert judge.CAPTION_TYPES is anycap_video.CAPTION_TYPES
    assert set(anycap_video.CAPTION_TYPE_ALIASES.values()) <= set(anycap_video.CAPTION_TYPES)


def _yaml_metadata(path):
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return (yaml.load(path.read_text(encoding="utf-8"), Loader=Loader) or {}).get("metadata") or {}


def test_every_task_yaml_names_a_shipped_dataset_and_every_shipped_dataset_is_named():
    named = {}
    for path in sorted((REPO_ROOT / "tasks").rglob("*.yaml")):
        metadata = _yaml_metadata(path)
        assert "item_format" not in metadata, path  # the old dotted path: only a user's copy may still carry it
        if "dataset" in metadata:
            named[path.relative_to(REPO_ROOT).as_posix()] = metadata["dataset"]
    assert set(named.values()) <= set(SHIPPED_DATASETS), named
    assert set(SHIPPED_DATASETS) <= set(named.values()), named
    assert named["tasks/gveval/gveval.yaml"] == "msvd_eval" and named["tasks/gveval/gveval_vatex.yaml"] == "vatex_eval"


def test_vatex_item_ids_are_defined_once_and_split_back():
    assert vatex_eval.item_id("abc_000010_000020", 4) == "abc_000010_000020#4"
    assert vatex_eval.split_item_id("abc_000010_000020#4") == ("abc_000010_000020", 4)
    for other in ("g01", "#4", "clip#", "clip#x", "clip#-1"):
        assert vatex_eval.split_item_id(other) is None, other
    candidate = vatex_eval.VatexCandidate("clip_1_2", 5, "a cat", ("a cat sits",), (1, 2, 3))
    assert vatex_eval.split_item_id(candidate.item_id) == ("clip_1_2", 5)
    row = vatex_eval.parse_vatex_record({"clip_id": "clip_1_2", "candidate_index": 5, "caption": "a cat",
                                         "references": ("a cat sits",)}, 0)
    assert row["id"] == candidate.item_id


def test_a_task_names_its_dataset_by_name_by_a_legacy_path_or_by_its_own():
    assert item_format_of("t", {"dataset": "msvd_eval"}) is SHIPPED_DATASETS["msvd_eval"]
    # A YAML copied from a capjudge that kept the formats in the judge task modules still loads.
    for legacy, name in known_datasets._LEGACY_ITEM_FORMATS.items():
        assert item_format_of("t", {"item_format": legacy}) is SHIPPED_DATASETS[name]
    # A dotted path to an ItemFormat names one capjudge does not ship.
    assert item_format_of("t", {"dataset": "capjudge.judges.datasets.demo.GVEVAL_DEMO_FORMAT"}) is SHIPPED_DATASETS["gveval_demo"]
    own = SHIPPED_DATASETS["anycap_demo"]
    assert item_format_of("t", {"dataset": "mine"}, {"mine": own}) is own


@pytest.mark.parametrize(
    "metadata, wanted",
    [
        ({}, "task 't': metadata.dataset is missing (one of msvd_eval,"),
        ({"dataset": ""}, "task 't': metadata.dataset must name a dataset, got ''"),
        ({"dataset": ["msvd_eval"]}, "task 't': metadata.dataset must name a dataset, got ['msvd_eval']"),
        ({"dataset": "msvd"}, "task 't': metadata.dataset 'msvd' is no dataset capjudge knows (known: msvd_eval,"),
        ({"dataset": "no.such.module.FORMAT"}, "task 't': metadata.dataset 'no.such.module.FORMAT' cannot be imported"),
        ({"dataset": "capjudge.judges.datasets.demo.NOPE"}, "metadata.dataset 'capjudge.judges.datasets.demo.NOPE' cannot be imported"),
        ({"dataset": "capjudge.judges.datasets.demo.task_row"}, "'capjudge.judges.datasets.demo.task_row' is not an ItemFormat"),
        ({"item_format": "capjudge.tasks.harness.gveval_task.NO_FORMAT"}, "metadata.item_format 'capjudge.tasks.harness.gveval_task.NO_FORMAT' cannot"),
    ],
)
def test_metadata_that_names_no_usable_dataset_is_one_dataset_error_naming_the_task_and_key(metadata, wanted):
    with pytest.raises(DatasetError) as raised:
        item_format_of("t", metadata)
    assert wanted in str(raised.value) and "\n" not in str(raised.value)


def test_capjudge_judge_refuses_a_task_naming_an_unknown_dataset_with_one_line(tmp_path):
    folder = tmp_path / "toy_judge"
    shutil.copytree(SUPPORT_DIR / "toy_judge", folder)
    yaml_path = folder / "toy.yaml"
    yaml_path.write_text(yaml_path.read_text(encoding="utf-8").replace("dataset: toy_items", "dataset: toy_itemz"),
                         encoding="utf-8")
    done = run_capjudge("judge", "--captions", str(REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"),
                        "--task", "toy_judge", "--include-path", str(folder), "--out", str(tmp_path / "out"),
                        env={"OPENAI_API_KEY": "sk-unused", "HF_DATASETS_CACHE": str(tmp_path / "hf")}, timeout=300)
    line = refusal_line(done, "toy_judge", "metadata.dataset 'toy_itemz' is no dataset")
    assert "toy_items" in line  # among the names it could have given: its own

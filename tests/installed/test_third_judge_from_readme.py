"""The README's "A third judge" list, followed to the letter: each step it lists is taken here, in its order,
in a copy of the package, and nothing else is done. The judge built is `refmatch` (a caption beside its
reference and 2 frames, one score 1-5) with its own dataset, `refmatch_items` (their text:
tests/support/third_judge_files.py).

Then the copy's wheel is built and unpacked as an installed capjudge; the suite's checks that name every
judge, dataset, package and module run on the copy; and the judge runs through lmms-eval from the unpacked
wheel, against the test server answering its prompt.

The steps are read from README.md: a step added, removed or renamed there without its twin in `STEPS` here
fails `test_the_readme_lists_exactly_the_steps_this_test_takes`.

Why a wheel, not the copy's folders on sys.path: the pyproject step is on the list, and only a built wheel
shows that the listed packages and globs install the judge (its modules, its YAML, its items, its template).
The unpacked wheel goes first on the subprocesses' PYTHONPATH: its `capjudge` (a namespace package, as
installed) is found by Python's path finder before the checkout's editable install, whose finder is
appended after it and so is asked only for a module the copy lacks; the judge's modules exist only in the
copy, so a judge the wheel did not install is found nowhere. No throwaway venv is needed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, launch_lmms_eval
from tests.support.openai_server import Reply, prompt_text
from tests.support.third_judge_files import (DATASET, DATASET_MODULE, ITEMS, ITEMS_FILE, JUDGE, JUDGE_PACKAGE, NAME, PARSER,
                               TASK_MODULE, TASK_UTILS, TASK_YAML, TEMPLATE)

pytestmark = pytest.mark.slow

# What a checkout holds that building and checking the package reads (tests/: the checks run on the copy).
COPIED = ("judges", "metrics", "tasks", "tests", "pyproject.toml", "README.md", "MANIFEST.in")
# The suite's checks that compare the shipped judges, datasets, packages or modules with a list: what steps
# 10-14 keep passing (the layout's, the datasets' and the judges' reply fields').
COPY_CHECKS = (
    "tests/test_layout.py",
    "tests/judges/datasets/test_datasets.py::test_every_task_yaml_names_a_shipped_dataset_and_every_shipped_dataset_is_named",
    "tests/judges/test_record.py::test_each_judge_declares_which_reply_field_backs_which_of_its_tasks_metrics",
)


# ---------------------------------------------------------------------------------------------------------
# The README's list
# ---------------------------------------------------------------------------------------------------------


def readme_steps() -> dict[str, str]:
    """The README's numbered steps under "### A third judge", in order: the path each names -> its text."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n### A third judge\n", 1)[1]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.M)[0]
    found = re.findall(r"^(\d+)\. `([^`]+)`(.*(?:\n {3,}.*)*)", section, flags=re.M)
    assert [int(number) for number, _, _ in found] == list(range(1, len(found) + 1)), found
    return {path: " ".join(step.split()) for _, path, step in found}


def _path(step: str) -> str:
    return step.replace("<name>", NAME).replace("<dataset>", DATASET)


# ---------------------------------------------------------------------------------------------------------
# Steps 1-9: the new files (their text: tests/support/third_judge_files.py)
# ---------------------------------------------------------------------------------------------------------


def _new_file(content: str) -> Callable[[Path, str, str], None]:
    def write(copy: Path, path: str, step: str) -> None:
        target = copy / path
        assert not target.exists(), f"{path} exists already: the step is a new file"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")

    return write


# ---------------------------------------------------------------------------------------------------------
# Steps 10-14: the lines in other files
# ---------------------------------------------------------------------------------------------------------


def _edit(copy: Path, path: str, anchor: str, replacement: str) -> None:
    """Replace the one `anchor` in a copied file; a missing anchor means the file changed under the step."""
    file = copy / path
    text = file.read_text(encoding="utf-8")
    assert text.count(anchor) == 1, f"{path}: {anchor!r} is not there once: update the README's step and this test"
    file.write_text(text.replace(anchor, replacement), encoding="utf-8")


def _add_after_line(copy: Path, path: str, line_start: str, added: str, within: tuple[str, str] | None = None) -> None:
    """Insert `added` after the one line starting with `line_start` (inside the `within` markers' span)."""
    file = copy / path
    text = file.read_text(encoding="utf-8")
    begin, end = (text.index(within[0]), text.index(within[1], text.index(within[0]))) if within else (0, len(text))
    lines = text[begin:end].splitlines(keepends=True)
    hits = [index for index, line in enumerate(lines) if line.startswith(line_start)]
    assert len(hits) == 1, f"{path}: no one line starts with {line_start!r}: update the README's step and this test"
    lines.insert(hits[0] + 1, added)
    file.write_text(text[:begin] + "".join(lines) + text[end:], encoding="utf-8")


def _known_datasets(copy: Path, path: str, step: str) -> None:
    _add_after_line(copy, path, "from capjudge.judges.datasets.items import",
                    f"from capjudge.judges.datasets import {DATASET}\n")
    _edit(copy, path, "SHIPPED_DATASETS: Mapping[str, ItemFormat] = {\n",
          f'SHIPPED_DATASETS: Mapping[str, ItemFormat] = {{\n    "{DATASET}": {DATASET}.REFMATCH_ITEMS_FORMAT,\n')


def _known_judges(copy: Path, path: str, step: str) -> None:
    _add_after_line(copy, path, "from capjudge.judges.gveval import judge as gveval",
                    f"from capjudge.judges.{NAME} import judge as {NAME}\n")
    _edit(copy, path, "(gveval.DESCRIPTOR, anycap.DESCRIPTOR)", f"(gveval.DESCRIPTOR, anycap.DESCRIPTOR, {NAME}.DESCRIPTOR)")


def _test_record(copy: Path, path: str, step: str) -> None:
    _edit(copy, path, "{GVEvalSettings.judge_name, AnyCapSettings.judge_name}",
          f'{{GVEvalSettings.judge_name, AnyCapSettings.judge_name, "{NAME}"}}')


def _pyproject(copy: Path, path: str, step: str) -> None:
    """The package names and the package-data line exactly as the step spells them (in backquotes)."""
    quoted = [_path(text) for text in re.findall(r"`([^`]+)`", step)]
    packages = [text for text in quoted if re.fullmatch(r'"capjudge\.[\w.]+"', text)]
    (data_line,) = [text for text in quoted if " = [" in text]
    assert packages == [f'"capjudge.judges.{NAME}"', f'"capjudge.tasks.{NAME}"'], quoted
    _edit(copy, path, "packages = [\n", f"packages = [\n    {', '.join(packages)},\n")
    _edit(copy, path, "[tool.setuptools.package-data]\n", f"[tool.setuptools.package-data]\n{data_line}\n")
    config = tomllib.loads((copy / path).read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert {f"capjudge.judges.{NAME}", f"capjudge.tasks.{NAME}"} <= set(config["packages"])


def _readme_layout(copy: Path, path: str, step: str) -> None:
    layout = ("\n## Layout\n", "\n```\n\n")  # the layout block, up to its closing fence
    column = 31  # where the layout's descriptions start
    _add_after_line(copy, path, "judges/ ", f"  {NAME}/".ljust(column) + "the reference-match judge\n"
                    + "    judge.py".ljust(column) + "its prompt, its request, DESCRIPTOR\n"
                    + "    parser.py".ljust(column) + "reply -> match 1-5, or a typed failure\n", layout)
    _add_after_line(copy, path, "  datasets/ ", f"    {DATASET}.py".ljust(column) + "its items, their item format\n", layout)
    _add_after_line(copy, path, "  harness/ ", f"    {NAME}_task.py".ljust(column) + "its settings, metric values\n", layout)
    _edit(copy, path, "  gveval/ anycap_style/ ", f"  gveval/ anycap_style/ {NAME}/ ")


# One entry per README step, in the README's order, keyed by the path the step names (`readme_steps`).
STEPS: dict[str, Callable[[Path, str, str], None]] = {
    "judges/<name>/__init__.py": _new_file(JUDGE_PACKAGE),  # 1. the judge's package
    "judges/templates/<name>.txt": _new_file(TEMPLATE),  # 2. its prompt, verbatim
    "judges/<name>/judge.py": _new_file(JUDGE),  # 3. its request and DESCRIPTOR, role functions by name
    "judges/<name>/parser.py": _new_file(PARSER),  # 4. its reply parser and JudgeResult-shaped result
    "judges/datasets/<dataset>.py": _new_file(DATASET_MODULE),  # 5. its dataset's ItemFormat
    "tasks/harness/<name>_task.py": _new_file(TASK_MODULE),  # 6. its JudgeSettings and JudgedTask
    "tasks/<name>/<name>.yaml": _new_file(TASK_YAML),  # 7. the lmms-eval task, naming its dataset and data
    "tasks/<name>/utils.py": _new_file(TASK_UTILS),  # 8. what the YAML's !function names
    "tasks/<name>/<dataset>.jsonl": _new_file(ITEMS_FILE),  # 9. its packaged items
    "judges/datasets/known_datasets.py": _known_datasets,  # 10. its dataset in SHIPPED_DATASETS
    "judges/known_judges.py": _known_judges,  # 11. its descriptor in SHIPPED_JUDGES
    "tests/judges/test_record.py": _test_record,  # 12. its name in the shipped judges the reply-fields check pins
    "pyproject.toml": _pyproject,  # 13. its two packages and its task folder's data glob
    "README.md": _readme_layout,  # 14. its modules and task folder in the layout block
}


# ---------------------------------------------------------------------------------------------------------
# The copy, its wheel, and what runs on them
# ---------------------------------------------------------------------------------------------------------


def _copy_checkout(target: Path) -> Path:
    # Not copied: bytecode, and the probe files tests/test_layout.py writes for a moment while it runs.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "__*_probe*__.py")
    for name in COPIED:
        source = REPO_ROOT / name
        (shutil.copytree(source, target / name, ignore=ignore) if source.is_dir() else shutil.copy2(source, target / name))
    return target


def _take_steps(copy: Path, skipped: tuple[str, ...] = ()) -> None:
    for step, text in readme_steps().items():
        if step not in skipped:
            STEPS[step](copy, _path(step), text)


def _build_and_unpack(copy: Path, site: Path) -> Path:
    """The copy's wheel (built as pip would, by setuptools' PEP 517 backend, without isolation: the venv's
    setuptools), unpacked into `site` as an installer lays it out."""
    built = subprocess.run([sys.executable, "-c", "from setuptools import build_meta; print(build_meta.build_wheel('dist'))"],
                           cwd=copy, capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = copy / "dist" / built.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def _with_site(site: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    # The judge exists only in the copy: the checkout's editable install cannot stand in for a judge the
    # copy's wheel failed to install.
    assert not any((REPO_ROOT / _path(step)).exists() for step in STEPS if "<name>" in step)
    root = tmp_path_factory.mktemp("third_judge")
    copy = _copy_checkout(root / "checkout")
    _take_steps(copy)
    return {"root": root, "copy": copy, "site": _build_and_unpack(copy, root / "site")}


def refmatch_responder(body) -> Reply:
    """`match=N`, N from the caption's word count (a prompt that is not the judge's gets no score)."""
    found = re.search(r"^Caption: (.*)$", prompt_text(body), flags=re.M)
    return Reply(f"match={expected_match(found.group(1))}" if found else "no caption in this prompt")


def expected_match(caption: str) -> int:
    return 1 + len(caption.split()) % 5


# ---------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------


def test_the_readme_lists_exactly_the_steps_this_test_takes():
    assert list(readme_steps()) == list(STEPS), "README's 'A third judge' list and STEPS here must change together"


def test_the_copy_passes_the_checks_that_name_every_judge_dataset_package_and_module(built):
    checked = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *COPY_CHECKS],
                             cwd=built["copy"], env=_with_site(built["site"]), capture_output=True, text=True,
                             timeout=300, check=False)
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", checked.stdout) and " skipped" not in checked.stdout, checked.stdout[-500:]


def test_the_third_judge_runs_through_lmms_eval_from_its_installed_copy(built):
    site, root = built["site"], built["root"]
    installed_tasks = site / "capjudge" / "tasks"
    captions = installed_tasks / "demo" / "captions_good.jsonl"
    with judge_server(responder=refmatch_responder) as server:
        run = launch_lmms_eval(
            model="captions_file", model_args=f"path={captions},model_name=good", tasks=NAME,
            output_path=root / "lmms", judge_base_url=server.base_url, cache_path=root / "cache.sqlite",
            include_path=installed_tasks, env={"PYTHONPATH": _with_site(site)["PYTHONPATH"]}, warm=False,
        ).require_run()
        requests = [entry.body for entry in server.log]
    caption_of = {row["id"]: row["caption"] for row in map(json.loads, captions.read_text(encoding="utf-8").splitlines())}
    wanted = {item: expected_match(caption_of[item]) for item in ITEMS}
    results = run.results()["results"][NAME]
    assert results["refmatch_match,none"] == pytest.approx(sum(wanted.values()) / len(wanted))
    assert results["refmatch_failed,none"] == 0 and results["judged,none"] == len(ITEMS)
    # Each request: its template from the installed templates folder, filled; its geometry, 2 frames.
    assert len(requests) == len(ITEMS)
    for body in requests:
        reference, caption = re.search(r"^Reference: (.*)\nCaption: (.*)$", prompt_text(body), flags=re.M).groups()
        assert prompt_text(body) == TEMPLATE.replace("{reference}", reference).replace("{caption}", caption)
        assert [part["type"] for part in body["messages"][0]["content"]] == ["text", "image_url", "image_url"]
    for line in run.samples(NAME):
        record = line["judged"]
        item = record["item_id"]
        assert record["judge"]["name"] == NAME and record["judge"]["descriptor"]["reply_fields"]["main"] == "match"
        assert record["judgment"]["match"] == wanted[item]
        assert line["target"] == ITEMS[item][1]  # its own items, read by its own format
        # The clip its packaged item names, relative to the installed task folder: the wheel's own demo clips.
        assert Path(record["judgment"]["video"]).resolve() == (installed_tasks / "demo" / f"{ITEMS[item][0]}.mp4").resolve()


def _layout_check_of(copy: Path):
    """The copy's tests/test_layout.py as a module (its REPO_ROOT is the copy)."""
    spec = importlib.util.spec_from_file_location(f"copied_layout_{id(copy)}", copy / "tests" / "test_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_the_pyproject_and_layout_steps_the_judge_is_not_installed_and_the_layout_check_says_so(tmp_path):
    """Steps 13 and 14 are needed, not decoration: without them the wheel lacks the judge and the layout check
    finds its modules missing from README.md."""
    copy = _copy_checkout(tmp_path / "checkout")
    _take_steps(copy, skipped=("pyproject.toml", "README.md"))
    site = _build_and_unpack(copy, tmp_path / "site")
    assert not (site / "capjudge" / "judges" / NAME).exists() and not (site / "capjudge" / "tasks" / NAME).exists()
    assert (site / "capjudge" / "judges" / "gveval" / "judge.py").is_file()  # the shipped judges are there
    layout = _layout_check_of(copy)
    on_disk = {path.relative_to(copy).as_posix() for path in layout._modules().values()}
    unlisted = on_disk - layout._readme_layout_modules()
    assert {f"judges/{NAME}/judge.py", f"judges/{NAME}/parser.py", f"tasks/harness/{NAME}_task.py",
            f"judges/datasets/{DATASET}.py"} <= unlisted
    packages = {name for name, path in layout._modules().items() if path.name == "__init__.py"} | layout._data_packages()
    listed = set(tomllib.loads((copy / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    assert {f"capjudge.judges.{NAME}", f"capjudge.tasks.{NAME}"} <= packages - listed

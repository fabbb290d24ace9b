"""capjudge as a user who never cloned it gets it: a wheel, installed into a fresh virtual environment.

The wheel is built from this checkout, installed with `--no-deps` into a new venv, and its dependencies
(lmms-eval, torch, openai, ...) are made visible by one `.pth` line naming the project venv's site-packages.
Python does not process `.pth` files inside a directory a `.pth` line adds, so the checkout's editable-install
finder never loads there: every `capjudge` module comes from the wheel, which the first test proves. Then,
from a directory outside the repository, with only the installed package's own paths:
`capjudge --version`, lmms-eval's plugin convention (`LMMS_EVAL_PLUGINS=capjudge` registers captions_file
from the wheel), a demo task with `--include_path "$(capjudge tasks-folder)"`, both demo tasks as the
`capjudge_demo` group, and `capjudge leaderboard` on the group run. The wheel is built from the sdist, and
both pass `twine check` (the metadata PyPI would show).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness_runs import REPO_ROOT, harness_env, judge_server

pytestmark = pytest.mark.slow

PROJECT_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
LIMIT = 2  # items per task: enough to judge, rank and show two models' worth of rows, fast
DEMO_TASKS = ("gveval_demo", "anycap_style_demo")


@dataclass(frozen=True)
class InstalledCapjudge:
    venv: Path
    wheel: Path
    sdist: Path
    outside: Path  # a working directory outside the repository
    build_output: str  # what building the sdist and the wheel printed

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def capjudge(self) -> Path:
        return self.venv / "bin" / "capjudge"

    def run(self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run([str(arg) for arg in args], cwd=self.outside, env=env or _clean_env(),
                                   capture_output=True, text=True, timeout=timeout, check=False)
        assert completed.returncode == 0, f"{args} exited {completed.returncode}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        return completed


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without anything that would put the checkout on the path of the installed package."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env | (extra or {})


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledCapjudge:
    root = tmp_path_factory.mktemp("installed_capjudge")
    dist = root / "dist"
    # As `python -m build` does, offline: the sdist from the checkout, then the wheel from the unpacked sdist (so
    # the sdist is proven to hold what a build needs, and no stale build/ folder of the checkout reaches the
    # wheel), both with the project venv's setuptools through its PEP 517 backend, with no isolated build env.
    built = [subprocess.run([str(PROJECT_PYTHON), "-c", f"import sys; from setuptools import build_meta; build_meta.build_{kind}(sys.argv[1])",
                             str(dist)], cwd=cwd, check=True, capture_output=True, text=True, timeout=300)
             for kind, cwd in (("sdist", REPO_ROOT),)]
    (sdist,) = dist.glob("capjudge-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").glob("capjudge-*")
    # The wheel through the same backend call pip makes, so that what setuptools says while building is seen.
    built.append(subprocess.run([str(PROJECT_PYTHON), "-c", "import sys; from setuptools import build_meta; "
                                 "build_meta.build_wheel(sys.argv[1])", str(dist)], cwd=unpacked, check=True,
                                capture_output=True, text=True, timeout=300))
    (wheel,) = dist.glob("capjudge-*.whl")
    venv = root / "venv"
    subprocess.run([str(PROJECT_PYTHON), "-m", "venv", str(venv)], check=True, timeout=300)
    # Installed before the dependencies become visible, so pip sees no other capjudge while it installs.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300, env=_clean_env())
    project_site = subprocess.run([str(PROJECT_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip()
    venv_site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    (Path(venv_site) / "project_dependencies.pth").write_text(project_site + "\n", encoding="utf-8")
    outside = root / "elsewhere"
    outside.mkdir()
    return InstalledCapjudge(venv, wheel, sdist, outside, "".join(done.stdout + done.stderr for done in built))


def test_every_capjudge_module_comes_from_the_wheel_not_the_checkout(installed):
    probe = ("import json, capjudge, capjudge.judges, capjudge.metrics, capjudge.models, capjudge.tasks, importlib.metadata as m;"
             "print(json.dumps({'path': list(capjudge.__path__), 'files': [capjudge.judges.__file__, capjudge.metrics.__file__,"
             " capjudge.models.__file__, capjudge.tasks.__file__], 'version': m.version('capjudge')}))")
    found = json.loads(installed.run(installed.python, "-c", probe).stdout)
    inside = str(installed.venv) + os.sep
    assert [path.startswith(inside) for path in found["path"]] == [True]
    assert all(path.startswith(inside) for path in found["files"]), found["files"]
    assert not any(path.startswith(str(REPO_ROOT) + os.sep) for path in found["path"] + found["files"])
    assert found["version"] == _project_version()

    version = installed.run(installed.capjudge, "--version").stdout.strip()
    assert version == f"capjudge {_project_version()}"
    tasks_folder = Path(installed.run(installed.capjudge, "tasks-folder").stdout.strip())
    assert tasks_folder == Path(found["files"][3]).parent
    assert {"gveval/gveval_demo.yaml", "anycap_style/anycap_style_demo.yaml", "suites/capjudge.yaml",
            "suites/capjudge_demo.yaml", "demo/captions_good.jsonl"} <= {
        path.relative_to(tasks_folder).as_posix() for path in tasks_folder.rglob("*") if path.is_file()}


def test_the_plugin_convention_registers_the_model_from_the_wheel(installed):
    # lmms-eval imports `<plugin>.models` and registers each AVAILABLE_MODELS entry under the plugin's path
    # (before the entry points, which name the same class); on 0.7.3 main this import was the crash.
    probe = ("from lmms_eval.models import AVAILABLE_SIMPLE_MODELS, get_model; import json;"
             "model = get_model('captions_file');"
             "print(json.dumps([AVAILABLE_SIMPLE_MODELS['captions_file'], model.__module__, __import__(model.__module__).__file__]))")
    env = _clean_env({"LMMS_EVAL_PLUGINS": "capjudge"})
    class_path, module, _ = json.loads(installed.run(installed.python, "-W", "ignore", "-c", probe, env=env).stdout.strip().splitlines()[-1])
    assert (class_path, module) == ("capjudge.models.captions_file.CaptionsFile", "capjudge.models.captions_file")


def test_lmms_eval_runs_a_demo_task_and_the_group_and_the_leaderboard_reads_it(installed, tmp_path):
    tasks_folder = Path(installed.run(installed.capjudge, "tasks-folder").stdout.strip())
    captions = tasks_folder / "demo" / "captions_good.jsonl"
    with judge_server() as judge:
        env = _clean_env(harness_env(judge.base_url, cache_path=tmp_path / "cache.sqlite",
                                     datasets_cache=tmp_path / "hf_datasets_cache",
                                     extra={"LMMS_EVAL_PLUGINS": "capjudge"}))
        # --include_path is still needed: lmms-eval 0.7.3 builds its TaskManager before it adds the
        # LMMS_EVAL_PLUGINS task folders to the include path (lmms_eval/__main__.py), so those are never indexed.
        lmms_eval = [installed.python, "-m", "lmms_eval", "--model", "captions_file", "--model_args",
                     f"path={captions},model_name=good", "--include_path", tasks_folder, "--limit", str(LIMIT),
                     "--log_samples", "--verbosity", "WARNING"]
        installed.run(*lmms_eval, "--tasks", "gveval_demo", "--output_path", tmp_path / "single", env=env)
        (single,) = (tmp_path / "single").rglob("*_results.json")
        single_results = json.loads(single.read_text(encoding="utf-8"))
        assert single_results["results"]["gveval_demo"]["judged,none"] == LIMIT
        # Both demo tasks as one lmms-eval group.
        installed.run(*lmms_eval, "--tasks", "capjudge_demo", "--output_path", tmp_path / "group", env=env)
    (group,) = (tmp_path / "group").rglob("*_results.json")
    results = json.loads(group.read_text(encoding="utf-8"))
    assert results["group_subtasks"] == {"capjudge_demo": list(DEMO_TASKS)}
    assert set(results["results"]) == {"capjudge_demo", *DEMO_TASKS}
    assert {task: results["results"][task]["judged,none"] for task in DEMO_TASKS} == dict.fromkeys(DEMO_TASKS, LIMIT)
    samples = [json.loads(line) for line in next(group.parent.glob("*_samples_gveval_demo.jsonl")).open(encoding="utf-8")]
    assert {line["judged"]["judge"]["capjudge_version"] for line in samples} == {_project_version()}

    board = tmp_path / "board"
    installed.run(installed.capjudge, "leaderboard", group.parent, "--out", board)
    with (board / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["model"] for row in rows] == ["good"]
    # The group's two tasks are two sections; the group entry itself (no metrics) is none.
    assert {column.split("/", 1)[0] for column in rows[0] if "/" in column} == set(DEMO_TASKS)
    page = (board / "leaderboard.md").read_text(encoding="utf-8")
    sections = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    assert set(DEMO_TASKS) <= set(sections) and "capjudge_demo" not in sections
    # The judge note names the capjudge release that judged, once per task.
    assert page.count(f"capjudge {_project_version()}") == len(DEMO_TASKS)


def test_the_build_is_free_of_setuptools_warnings(installed):
    # e.g. "Package 'capjudge.tasks.demo' is absent from the `packages` configuration" for a data folder.
    warnings = [line for line in installed.build_output.splitlines()
                if "Warning" in line or "WARNING" in line or "!!" in line]
    # This machine sets PYTHONDONTWRITEBYTECODE, which makes distutils say it skips byte-compiling: not ours.
    assert [line for line in warnings if "byte-compiling is disabled" not in line] == [], installed.build_output[-3000:]


def test_installing_the_wheel_keeps_the_environments_openai_and_torch(installed):
    # pip changes an installed package only when it fails the new requirement: the wheel's own requirements
    # must admit the newest openai (3.x) and the CPU torch already in the environment, or a user's would be
    # replaced (openai 3.57 was once downgraded to 2.54).
    from importlib.metadata import version

    from packaging.requirements import Requirement

    with zipfile.ZipFile(installed.wheel) as wheel:
        (metadata_name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = wheel.read(metadata_name).decode("utf-8")
    requirements = [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
                    if line.startswith("Requires-Dist:")]
    by_name = {requirement.name: requirement for requirement in requirements if requirement.marker is None}
    assert version("openai").split(".")[0] == "3", "make setup installs the newest openai; the suite tests it"
    assert by_name["openai"].specifier.contains(version("openai"))
    assert "torch" not in by_name and "torchvision" not in by_name  # capjudge itself never asks for either


def test_the_sdist_and_the_wheel_pass_twine_check_and_the_sdist_leaves_the_tests_out(installed):
    twine = subprocess.run([str(PROJECT_PYTHON), "-m", "twine", "check", "--strict", str(installed.wheel), str(installed.sdist)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert twine.returncode == 0, twine.stdout + twine.stderr
    with tarfile.open(installed.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    # Deliberately (MANIFEST.in): the suite runs from a checkout, not from an sdist.
    assert {"pyproject.toml", "README.md", "tasks/suites/capjudge.yaml", "tasks/models/captions_file.py"} <= names
    assert not any(name.startswith("tests/") for name in names)
    with zipfile.ZipFile(installed.wheel) as wheel:
        files = set(wheel.namelist())
    assert {"capjudge/models/captions_file.py", "capjudge/tasks/suites/capjudge_demo.yaml"} <= files
    # tasks/models is installed once, as capjudge.models: never a second copy under capjudge/tasks/.
    assert not any(name.startswith("capjudge/tasks/models/") for name in files)


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]

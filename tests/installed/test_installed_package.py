"""capjudge as a user who never cloned it gets it: the README's "Using capjudge in your own lmms-eval
environment", followed on a machine without a GPU in a fresh virtual environment.

The sdist is built from this checkout and the wheel from the unpacked sdist (both `twine check`-clean, the
build free of setuptools warnings). The environment is made the way the README says: the user's newest openai
already there, the CPU torch, lmms-eval and the wheel with `--no-deps`, then the requirements
`python -m capjudge.tasks.cpu_requirements 'capjudge[local]' lmms-eval` prints (all but torchvision and timm,
the installed torch pinned). Two stand-ins, because this machine reaches PyPI and nothing else: `pip install
torch==2.13.0` takes this machine's CPU wheel where a user names PyTorch's CPU index, and llama-cpp-python comes
from the portable wheel `make setup` keeps (`.venv/wheels`) instead of a second 5-minute compile. Every other
dependency comes from the package index (pip's cache, warm after `make setup`).

Then, from a folder outside the repository, with only the installed package: every capjudge module comes from
the wheel, `capjudge --version`, lmms-eval's plugin convention, the README's installed-user examples as written
(the key-free embedded judge comparing two caption sets with `capjudge demo`; the `capjudge_demo` group run by
lmms-eval for three caption sets against a test judge with `--include_path "$(capjudge tasks-folder)"` and
LMMS_EVAL_PLUGINS=capjudge set, then `capjudge report` and `capjudge leaderboard` on the runs; the sensitivity
example), and `pip check`. Asserted along the way:
the CPU torch kept, no torchvision and no CUDA package, the user's openai 3 kept, 0644 outputs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.harness_runs import REPO_ROOT, harness_env, judge_server
from tests.support.once_per_run import built_once

pytestmark = pytest.mark.slow

PROJECT_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
LOCAL_WHEELS = REPO_ROOT / ".venv" / "wheels"  # the portable llama-cpp-python wheel `make setup` keeps
LIMIT = 2  # items per task: enough to judge, rank and show two models' worth of rows, fast
DEMO_TASKS = ("gveval_demo", "anycap_style_demo")


@dataclass(frozen=True)
class InstalledCapjudge:
    venv: Path
    wheel: Path
    sdist: Path
    outside: Path  # a working directory outside the repository
    build_output: str  # what building the sdist and the wheel printed
    requirements: str  # what `python -m capjudge.tasks.cpu_requirements` printed
    openai_before: str | None  # the openai the environment had before capjudge was installed

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def capjudge(self) -> Path:
        return self.venv / "bin" / "capjudge"

    def run(self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run([str(arg) for arg in args], cwd=self.outside, env=env or _clean_env(),
                                   capture_output=True, text=True, timeout=timeout, check=False,
                                   preexec_fn=lambda: os.umask(0o022))  # a usual shell's umask
        assert completed.returncode == 0, f"{args} exited {completed.returncode}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        return completed


def _pip_run(*args: object, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(arg) for arg in args], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _installed_version(python: Path, name: str) -> str | None:
    done = subprocess.run([str(python), "-c", f"from importlib.metadata import version; print(version({name!r}))"],
                          env=_clean_env(), capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without anything that would put the checkout on the path of the installed package."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME",
               # A user's shell with no judge configured: nothing below may need a key.
               "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_URL", "MODEL_VERSION", "API_TYPE", "CAPJUDGE_CACHE",
               # Python's default is to write bytecode caches, and a user's machine does. This machine sets
               # PYTHONDONTWRITEBYTECODE=1, and the venv is installed --no-compile, so without this every launch
               # in it compiled the sources of torch, transformers and lmms-eval again: importing lmms-eval
               # took 26 CPU-s there against 9 in the project's venv. Each launch now compiles only what no
               # earlier one did, as on a user's machine.
               "PYTHONDONTWRITEBYTECODE")
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    return env | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"} | (extra or {})


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> InstalledCapjudge:
    """One installed venv for the whole test run, shared by every xdist worker (tests/support/once_per_run.py):
    the first worker to need it builds it, the others wait for it and read what it recorded
    (tests/conftest.py deals this file's tests out to the workers)."""
    def build(root: Path) -> None:
        built = _build_installed(root)
        (root / "installed.json").write_text(json.dumps({field: str(value) if isinstance(value, Path) else value
                                                         for field, value in vars(built).items()}), encoding="utf-8")

    root = built_once(tmp_path_factory, worker_id, "installed_capjudge", build)
    fields = json.loads((root / "installed.json").read_text(encoding="utf-8"))
    paths = {"venv", "wheel", "sdist", "outside"}
    return InstalledCapjudge(**{key: Path(value) if key in paths else value for key, value in fields.items()})


def _build_installed(root: Path) -> InstalledCapjudge:
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
    env = _clean_env()
    _pip_run(PROJECT_PYTHON, "-m", "venv", venv, env=env)
    # --no-compile: what is installed is the same; the .pyc files pip would write for torch's and the others'
    # thousands of modules cost this one-off venv a minute of CPU and are never used here (the machine sets
    # PYTHONDONTWRITEBYTECODE anyway).
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-compile"]
    _pip_run(*pip, "openai>=3,<4", env=env)  # the user's environment has the newest openai already
    openai_before = _installed_version(venv / "bin" / "python", "openai")
    _pip_run(*pip, "torch==2.13.0", env=env)
    _pip_run(*pip, "--no-deps", "lmms-eval==0.7.3", wheel, "packaging", env=env)
    requirements = _pip_run(venv / "bin" / "python", "-m", "capjudge.tasks.cpu_requirements", "capjudge[local]",
                            "lmms-eval", env=env).stdout
    (root / "cpu-requirements.txt").write_text(requirements, encoding="utf-8")
    (llama_wheel,) = LOCAL_WHEELS.glob("llama_cpp_python-*.whl")
    _pip_run(*pip, "-r", root / "cpu-requirements.txt", "--find-links", llama_wheel.parent,
             "--only-binary", "llama-cpp-python", env=env)
    outside = root / "elsewhere"
    outside.mkdir()
    return InstalledCapjudge(venv, wheel, sdist, outside, "".join(done.stdout + done.stderr for done in built),
                             requirements, openai_before)


# The tests in the order conftest.py deals them out to the workers (SPREAD_ACROSS_WORKERS): the
# longest first.

# The README's installed-user examples (tests/support/readme_examples.py), each run as written by one test below,
# which checks what it made beyond the files its marker names.
INSTALLED_EXAMPLES = {
    "demo": "capjudge demo --limit 1",
    "lmms-eval loop": "for set in good fair poor",
    "sensitivity": "capjudge sensitivity --task gveval_demo",
}


def _run_readme_example(installed: InstalledCapjudge, tmp_path: Path, name: str, judge_url: str | None = None,
                        extra: dict[str, str] | None = None) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One README example, as written, from a fresh folder outside the repository, with the installed venv
    first on PATH (as after activating it), a private HOME, and the scripted judge as the configured judge."""
    from tests.support.readme_examples import examples, run_example

    (example,) = [example for example in examples() if example.kind == "installed"
                  and INSTALLED_EXAMPLES[name] in example.code]
    folder = installed.outside / f"readme_{re.sub(r'[^a-z]+', '_', name)}"
    folder.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    judge = {} if judge_url is None else harness_env(judge_url, cache_path=tmp_path / "cache.sqlite",
                                                     datasets_cache=tmp_path / "hf_datasets_cache")
    env = _clean_env({**judge, "HOME": str(home), "VIRTUAL_ENV": str(installed.venv),
                      "PATH": f"{installed.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", **(extra or {})})
    return folder, run_example(example, cwd=folder, env=env, timeout=1200)


@pytest.mark.timeout(1200)  # the embedded judge on 2 loaded cores: minutes per caption set
def test_the_embedded_judge_compares_two_caption_sets_with_no_key(installed, tmp_path):
    # The README's example with no judge configured at all: the embedded judge needs no key.
    folder, done = _run_readme_example(installed, tmp_path, "demo")
    out = folder / "demo"
    assert done.stdout.startswith(f"capjudge {_project_version()}")
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["model"] for row in rows) == ["good", "poor"]  # a comparison, not a single row
    shared = [path for path in out.rglob("*") if path.is_file() and not path.name.startswith(".")
              and path.suffix in (".md", ".csv", ".html", ".png", ".json", ".jsonl")]
    modes = {str(path.relative_to(out)): stat.S_IMODE(path.stat().st_mode) for path in shared}
    assert {"leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png"} <= set(modes)
    assert set(modes.values()) == {0o644}, modes  # made to be shared: the umask's mode, as lmms-eval's own files
    # Nothing of the reply cache's write-ahead log is left beside it once the command has exited.
    assert not [path.name for path in out.rglob("*.sqlite-*")], sorted(path.name for path in out.rglob("*"))


@pytest.mark.timeout(1200)  # three cold lmms-eval launches; the wait for the shared venv counts too
def test_the_lmms_eval_loop_ranks_three_caption_sets_with_rows_linked_to_the_report(installed, tmp_path):
    # With lmms-eval's plugin convention on, as for a user who set it (README: LMMS_EVAL_PLUGINS=capjudge works
    # too; --include_path is still needed on 0.7.3, which builds its task index before it adds the plugins' task
    # folders).
    with judge_server() as judge:
        folder, done = _run_readme_example(installed, tmp_path, "lmms-eval loop", judge.base_url,
                                           extra={"LMMS_EVAL_PLUGINS": "capjudge"})
        asked = len(judge.completions)
    assert asked == 3 * len(DEMO_TASKS) * 2  # three caption sets, both tasks, --limit 2: each judged once
    with (folder / "leaderboard" / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["model"] for row in rows) == ["fair", "good", "poor"]
    page = (folder / "leaderboard" / "leaderboard.html").read_text(encoding="utf-8")
    from capjudge.metrics.item_report.report import items_link

    for model in ("good", "fair", "poor"):
        link = "report/" + items_link(DEMO_TASKS[0], model)
        assert f'href="{link.replace("&", "&amp;")}"' in page, model

    # The group as lmms-eval reports one: the group's entry, its tasks under group_subtasks, each task with its
    # own metrics; every per-item record names the capjudge release that judged it.
    (group,) = (folder / "runs").glob("good/*_results.json")
    results = json.loads(group.read_text(encoding="utf-8"))
    assert results["group_subtasks"] == {"capjudge_demo": list(DEMO_TASKS)}
    assert set(results["results"]) == {"capjudge_demo", *DEMO_TASKS}
    assert {task: results["results"][task]["judged,none"] for task in DEMO_TASKS} == dict.fromkeys(DEMO_TASKS, LIMIT)
    samples = [json.loads(line) for line in next(group.parent.glob("*_samples_gveval_demo.jsonl")).open(encoding="utf-8")]
    assert {line["judged"]["judge"]["capjudge_version"] for line in samples} == {_project_version()}
    # The leaderboard reads the group run as its tasks: the group's two tasks are two sections, the group entry
    # itself (no metrics) none; the judge note names the capjudge release that judged, once per task.
    assert {column.split("/", 1)[0] for column in rows[0] if "/" in column} == set(DEMO_TASKS)
    markdown = (folder / "leaderboard" / "leaderboard.md").read_text(encoding="utf-8")
    sections = [line[3:] for line in markdown.splitlines() if line.startswith("## ")]
    assert set(DEMO_TASKS) <= set(sections) and "capjudge_demo" not in sections
    assert markdown.count(f"capjudge {_project_version()}") == len(DEMO_TASKS)


@pytest.mark.timeout(1200)  # every variant judged; the wait for the shared venv counts too
def test_the_sensitivity_example_judges_every_variant_and_prices_before_paying(installed, tmp_path):
    with judge_server() as judge:
        folder, done = _run_readme_example(installed, tmp_path, "sensitivity", judge.base_url)
        asked = len(judge.completions)
    report = json.loads((folder / "sensitivity" / "sensitivity_gveval_demo.json").read_text(encoding="utf-8"))
    assert len(report["items"]) == 10
    assert 0 < asked <= 10 * (1 + 5)  # the originals and their variants; a variant equal to another is asked once
    assert "ignoring" not in done.stderr  # the packaged captions file does not warn about itself


def test_every_installed_user_example_of_the_readme_is_run_here():
    from tests.support.readme_examples import examples

    installed_examples = [example for example in examples() if example.kind == "installed"]
    covered = {name: [example for example in installed_examples if phrase in example.code]
               for name, phrase in INSTALLED_EXAMPLES.items()}
    assert all(len(found) == 1 for found in covered.values()), covered
    assert len(installed_examples) == len(INSTALLED_EXAMPLES), [str(example) for example in installed_examples]


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
    assert {"capjudge/models/captions_file.py", "capjudge/api/__init__.py", "capjudge/tasks/suites/capjudge_demo.yaml"} <= files
    # tasks/models is installed once, as capjudge.models, and tasks/api once, as capjudge.api: never a second copy
    # under capjudge/tasks/.
    assert not any(name.startswith(("capjudge/tasks/models/", "capjudge/tasks/api/")) for name in files)


def test_the_cpu_route_keeps_cpu_torch_and_the_users_openai_and_installs_no_cuda(installed):
    lines = installed.requirements.splitlines()
    assert not any(re.match(r"(torchvision|timm)\b", line) for line in lines)
    assert "torch==2.13.0" in lines
    assert _installed_version(installed.python, "torch").endswith("+cpu")
    assert _installed_version(installed.python, "torchvision") is None
    listed = json.loads(installed.run(installed.python, "-m", "pip", "list", "--format", "json").stdout)
    names = {entry["name"].lower() for entry in listed}
    assert not {name for name in names if name.startswith(("nvidia-", "cuda-", "triton"))}, sorted(names)
    assert installed.openai_before.startswith("3.")
    assert _installed_version(installed.python, "openai") == installed.openai_before
    # pip check: nothing broken but the two requirements left out on purpose.
    check = subprocess.run([str(installed.python), "-m", "pip", "check"], env=_clean_env(), capture_output=True,
                           text=True, check=False)
    problems = [line for line in check.stdout.splitlines() if line.strip()]
    assert problems and all(re.match(r"lmms-eval \S+ requires (torchvision|timm)\b", line) for line in problems), problems


def _project_version() -> str:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]

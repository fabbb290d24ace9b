"""The README's shell examples, read from README.md with where each one runs.

Every ```bash block in README.md carries a marker on the line above its fence:

    <!-- example: checkout; makes PATH ... -->      run from a checkout after `make setup`
    <!-- example: installed; makes PATH ... -->     run from any folder where the built wheel is installed
    <!-- example: not run here: REASON -->          cannot run on this machine (REASON says why, and what
                                                    test stands in for it, if one does)

`makes` names files (globs allowed) the block must leave, relative to the folder it ran in: an exit status of
0 alone is not proof (lmms-eval can exit 0 with no results). tests/installed/test_readme_examples.py runs the checkout
blocks, tests/installed/test_installed_package.py the installed ones, both with a scripted judge behind the judge
settings of the environment, as a user's configured judge would be. A checkout block whose run a test of its own
needs (RUN_BY_THEIR_OWN_TEST: the 2-process `accelerate launch`, whose processes and requests
tests/tasks/harness/test_multi_process.py counts) is run there, as written, instead of a second time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
KINDS = ("checkout", "installed")
# A phrase of a checkout example -> the test file that runs it (with run_example, in a checkout_copy).
RUN_BY_THEIR_OWN_TEST = {"accelerate launch --num_processes 2": "tests/tasks/harness/test_multi_process.py"}
# What a checkout holds besides .git, .venv and what runs leave behind.
SOURCE = ("pyproject.toml", "README.md", "MANIFEST.in", "Makefile", "judges", "metrics", "tasks", "tests", ".setup")
_MARKER = re.compile(r"^<!-- example: (?P<body>.*) -->$")
_FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")


@dataclass(frozen=True)
class Example:
    line: int  # of the opening fence, 1-based
    section: str  # the nearest heading above it
    kind: str  # checkout | installed | not run
    reason: str  # why it is not run here ("" for the others)
    makes: tuple[str, ...]  # files (globs) it must leave behind
    code: str

    def __str__(self) -> str:
        first = next((line for line in self.code.splitlines() if line and not line.startswith("#")), "")
        return f"README.md:{self.line} ({self.section}): {first[:80]}"


class MarkerError(ValueError):
    """A bash block without a marker, or a marker that says nothing usable."""


def examples(readme: Path = README) -> list[Example]:
    lines = readme.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    section = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if re.match(r"^#{1,6} ", line):
            section = line.lstrip("#").strip()
        fence = _FENCE.match(line)
        if not fence:
            index += 1
            continue
        end = next(position for position in range(index + 1, len(lines)) if lines[position].startswith("```"))
        if fence.group("lang") == "bash":
            marker = _MARKER.match(lines[index - 1]) if index else None
            if marker is None:
                raise MarkerError(f"README.md:{index + 1} ({section}): a bash block without an example marker above it")
            found.append(_example(marker.group("body"), index + 1, section, "\n".join(lines[index + 1:end])))
        index = end + 1
    return found


def _example(body: str, line: int, section: str, code: str) -> Example:
    where = f"README.md:{line}"
    if body.startswith("not run here:"):
        reason = body.removeprefix("not run here:").strip()
        if not reason:
            raise MarkerError(f"{where}: 'not run here' needs a reason")
        return Example(line, section, "not run", reason, (), code)
    kind, _, rest = body.partition(";")
    kind = kind.strip()
    if kind not in KINDS:
        raise MarkerError(f"{where}: unknown example kind {kind!r} (one of {', '.join(KINDS)}, or 'not run here: ...')")
    rest = rest.strip()
    if not rest.startswith("makes "):
        raise MarkerError(f"{where}: a run example must say what it makes ('; makes PATH ...')")
    makes = tuple(rest.removeprefix("makes ").split())
    if not makes or any(Path(path).is_absolute() or ".." in Path(path).parts for path in makes):
        raise MarkerError(f"{where}: 'makes' takes paths inside the folder the example runs in")
    return Example(line, section, kind, "", makes, code)


def run_example(example: Example, *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """The block as written, in bash with -e and pipefail (a failing line fails the example), from `cwd`."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", example.code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 0, f"{example} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{example}\n{done.stderr[-3000:]}"
    for pattern in example.makes:
        made = [path for path in cwd.glob(pattern) if path.is_file() and path.stat().st_size > 0]
        assert made, f"{example} left no {pattern} in {cwd}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def checkout_example(phrase: str, readme: Path = README) -> Example:
    """The one checkout example whose code holds `phrase`."""
    (found,) = [example for example in examples(readme) if example.kind == "checkout" and phrase in example.code]
    return found


def checkout_copy(root: Path) -> Path:
    """The checkout's source, copied (so that what the example writes lands in the copy), `.venv` linked."""
    copy = root / "checkout"
    copy.mkdir()
    for name in SOURCE:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif source.exists():
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(REPO_ROOT / ".venv")
    return copy


def checkout_env(judge_base_url: str, root: Path) -> dict[str, str]:
    """A user's shell in the checkout with a judge configured: the judge settings, the reply cache at
    root/judge_cache.sqlite, no other CAPJUDGE_ setting, and `python` the project's (as after activating .venv)."""
    from tests.support.harness_runs import harness_env

    env = harness_env(judge_base_url, cache_path=root / "judge_cache.sqlite", datasets_cache=root / "hf_datasets_cache")
    env = {key: value for key, value in env.items() if not key.startswith("CAPJUDGE_") or key == "CAPJUDGE_CACHE"}
    env["PATH"] = f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(REPO_ROOT / ".venv")
    return env

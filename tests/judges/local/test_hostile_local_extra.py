"""The embedded judge without its 'local' extra: one line naming what is missing and the installed spelling
of what to install, never a traceback from the server process's first import.

Each case runs the real `capjudge` command in a warm child whose interpreter has the named modules blocked the
way Python itself marks an import as unavailable (`sys.modules[name] = None`: `import` raises ImportError and
`importlib.util.find_spec` answers None), as on a machine where `pip install capjudge` ran without `[local]`.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.hostile import refusal_line
from tests.support.warm_launch import warm_start


def _capjudge_without(modules: tuple[str, ...], *args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    code = ("import sys\n"
            f"for name in {modules!r}: sys.modules[name] = None\n"
            "from capjudge.tasks.cli.main import main\n"
            "raise SystemExit(main(sys.argv[1:]))")
    env = dict(os.environ, HOME=str(tmp_path))
    process = warm_start("code", [code, *args], env=env, cwd=REPO_ROOT)
    stdout, stderr = process.communicate(120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("command", [("serve-local", "--port", "0"), ("demo", "--limit", "1")])
def test_no_server_dependencies_is_one_line_naming_the_extra(tmp_path, command):
    args = [*command, "--out", str(tmp_path / "out")] if command[0] == "demo" else list(command)
    done = _capjudge_without(("uvicorn", "sse_starlette"), *args, tmp_path=tmp_path)
    line = refusal_line(done, "sse-starlette, uvicorn", "pip install 'capjudge[local]'")
    assert line.startswith(f"capjudge {command[0]}: the embedded judge needs")
    assert "-e '.[local]'" not in done.stderr  # a checkout's spelling means nothing to an installed user


def test_no_llama_cpp_is_named_too(tmp_path):
    done = _capjudge_without(("llama_cpp",), "serve-local", "--port", "0", tmp_path=tmp_path)
    refusal_line(done, "llama-cpp-python", "pip install 'capjudge[local]'")

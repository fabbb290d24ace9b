"""The embedded judge dying is one clear error, at once.

Real processes and real signals: `capjudge serve-local` has its server child crash with SIGSEGV and must stop
with a message naming the signal, the server log and what to try. (The server killed while `capjudge demo`
judges, and the rerun that reuses every cached reply: tests/tasks/runs/test_demo_pipeline.py.)
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.local_judge_processes import clean_env, local_server_pid


@pytest.mark.slow
def test_serve_local_reports_a_crashed_server_with_its_signal_and_advice(tmp_path):
    log = tmp_path / "server.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "capjudge.tasks.cli", "serve-local", "--port", "0", "--quiet", "--log", str(log)],
        cwd=REPO_ROOT, env=clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = serve.stdout.readline()  # printed only after the health-check completion succeeded
        assert line.startswith("Serving "), line + serve.stderr.read()
        server = local_server_pid(serve.pid)
        assert server is not None
        os.kill(server, signal.SIGSEGV)
        _, stderr = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode == 1
    assert "was killed by SIGSEGV" in stderr and "make clean setup" in stderr
    assert str(log) in stderr


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the portable build flags are x86-64's")
def test_the_installed_llama_cpp_is_the_portable_build():
    stamp = next((REPO_ROOT / ".venv").glob(".llama-cpp-python-*"), None)
    if stamp is None:
        pytest.skip("llama-cpp-python was not installed by `make setup` (no build stamp in .venv)")
    flags = stamp.read_text()
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AVX2 = 1" in info, info
    if "-DGGML_AVX512=OFF" in flags:
        assert "AVX512 = 1" not in info and "AMX" not in info.replace("AMX_INT8 = 0", ""), info

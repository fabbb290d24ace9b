"""The embedded judge dying is one clear error, at once, and loses nothing.

Real processes and real signals: the llama.cpp server (Gemma 3 270M) is killed while `capjudge demo` is
judging, and `capjudge serve-local` has its server child crash with SIGSEGV. Both must stop with a message
naming the signal, the end of the server log and what to try, and a rerun must reuse every cached reply.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def _clean_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(home / "hf")}


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _server_pid(parent: int) -> int | None:
    for pid in _descendants(parent):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"capjudge.judges.local.llama_server" in command:
            return pid
    return None


def _cached_replies(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=5) as connection:
            return connection.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
    except sqlite3.Error:
        return 0


def _wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_demo_stops_at_once_when_the_judge_dies_and_a_rerun_resumes_from_the_cache(tmp_path):
    out = tmp_path / "demo"
    cache = out / "judge_cache.sqlite"
    # 2 items a task, 4 in all: the judge is killed after the first 2 replies, so 2 are left to judge then.
    command = [sys.executable, "-m", "capjudge.tasks.cli", "demo", "--out", str(out), "--limit", "2",
               "--caption-sets", "good"]
    demo = subprocess.Popen(command, cwd=REPO_ROOT, env=_clean_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: _cached_replies(cache) >= 2, 600, "two judged items")
        server = _server_pid(demo.pid)
        assert server is not None, "no local judge server process under the demo"
        os.kill(server, signal.SIGKILL)
        cached_at_kill = _cached_replies(cache)
        stdout, stderr = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "was killed by SIGKILL" in stderr
    assert "Last lines of its log" in stderr and "What to try" in stderr
    assert "lmms-eval (caption set 'good') was stopped" in stderr
    # The demo stopped instead of failing the remaining items one by one: no results were written.
    assert not list(out.rglob("*_results.json"))
    assert not any(_descendants(demo.pid))

    rerun = subprocess.run(command, cwd=REPO_ROOT, env=_clean_env(tmp_path), capture_output=True, text=True,
                           timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    samples = [json.loads(line) for path in out.rglob("*_samples_*.jsonl") for line in path.read_text().splitlines()]
    assert len(samples) == 4
    assert all(not any(key.endswith("_failed") and line[key] for key in line) for line in samples)
    # Every reply that was cached before the kill is reused, none asked again.
    assert sum(1 for line in samples if line["judged"]["judgment"].get("cache_hit")) >= cached_at_kill


@pytest.mark.slow
def test_serve_local_reports_a_crashed_server_with_its_signal_and_advice(tmp_path):
    log = tmp_path / "server.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "capjudge.tasks.cli", "serve-local", "--port", "0", "--quiet", "--log", str(log)],
        cwd=REPO_ROOT, env=_clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = serve.stdout.readline()  # printed only after the health-check completion succeeded
        assert line.startswith("Serving "), line + serve.stderr.read()
        server = _server_pid(serve.pid)
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

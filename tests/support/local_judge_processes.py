"""The processes of a `capjudge demo` or `capjudge serve-local` under test: the embedded llama.cpp server among a
command's descendants, the replies its reply cache holds, and a clean environment to start them in."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def clean_env(home: Path) -> dict[str, str]:
    """What a fresh shell has: no OPENAI_*/AZURE_*/CAPJUDGE_* setting, a home of the test's own, offline hubs."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(home / "hf")}


def descendants(pid: int) -> list[int]:
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


def local_server_pid(parent: int) -> int | None:
    for pid in descendants(parent):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"capjudge.judges.local.llama_server" in command:
            return pid
    return None


def cached_replies(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=5) as connection:
            return connection.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
    except sqlite3.Error:
        return 0


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")

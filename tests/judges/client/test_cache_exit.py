"""A process that used the reply cache leaves only the cache file: no -wal or -shm beside it (issue 47,
item 6: `capjudge demo` left both in its output folder). A forked child exiting must not close, checkpoint or
remove what its parent is still writing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PUT_AND_EXIT = textwrap.dedent("""
    import sys, threading
    from capjudge.judges.client.cache import ReplyCache
    from capjudge.judges.types import JudgeReply, Usage

    cache = ReplyCache(sys.argv[1])
    cache.put("main-thread", "v1", JudgeReply(content="from the main thread", logprobs=None, finish_reason="stop", model="m", usage=Usage(1, 1)))
    # A reader connection opened by another thread, as the client's worker threads open theirs.
    seen = []
    reader = threading.Thread(target=lambda: seen.append(cache.get("main-thread")))
    reader.start(); reader.join()
    cache.flush()
    assert seen[0] is not None and seen[0].content == "from the main thread"
    # No close(): the process simply ends, as lmms-eval's and capjudge's do.
""")

FORK_THEN_WRITE = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from capjudge.judges.client.cache import ReplyCache
    from capjudge.judges.types import JudgeReply, Usage

    cache = ReplyCache(sys.argv[1])
    cache.put("before", "v1", JudgeReply(content="before the fork", logprobs=None, finish_reason="stop", model="m", usage=Usage(1, 1)))
    cache.flush()
    child = os.fork()
    if child == 0:
        sys.exit(0)  # runs the child's exit handlers: they must leave the parent's connections alone
    os.waitpid(child, 0)
    assert Path(sys.argv[1] + "-wal").exists(), "the child's exit removed the parent's write-ahead log"
    cache.put("after", "v1", JudgeReply(content="after the fork", logprobs=None, finish_reason="stop", model="m", usage=Usage(1, 1)))
    cache.flush()
    assert cache.get("after").content == "after the fork"
""")


def _run(script: str, cache: Path) -> None:
    done = subprocess.run([sys.executable, "-c", script, str(cache)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name != "cache.sqlite")


def test_a_process_that_used_the_cache_leaves_no_write_ahead_log(tmp_path):
    cache = tmp_path / "cache.sqlite"
    _run(PUT_AND_EXIT, cache)
    assert _leftovers(tmp_path) == []
    # Everything written is in the file itself.
    import sqlite3

    with sqlite3.connect(cache) as conn:
        assert conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 1


def test_a_forked_child_exiting_leaves_the_parents_cache_alone(tmp_path):
    cache = tmp_path / "cache.sqlite"
    _run(FORK_THEN_WRITE, cache)
    assert _leftovers(tmp_path) == []
    import sqlite3

    with sqlite3.connect(cache) as conn:
        assert sorted(row[0] for row in conn.execute("SELECT key FROM replies")) == ["after", "before"]

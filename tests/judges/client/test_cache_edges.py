"""The reply cache at its edges: a file that is damaged, foreign, a folder or unwritable is one clear error before
any request (never a traceback, never changed); an unreadable row is a reported cache miss whose new reply
replaces it; `capjudge cache merge` with a bad source leaves no destination behind.

Real files and the real CLI: `capjudge judge` on the demo captions against the test server, `capjudge cache
merge` on caches a real client wrote.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, run_capjudge_cli

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
N_ITEMS = 10


def judge(tmp_path, server, cache, out="out"):
    """`capjudge judge` on the demo captions, judged by the test server, with `cache` as CAPJUDGE_CACHE."""
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return run_capjudge_cli(
        ["judge", "--captions", str(CAPTIONS), "--task", TASK,
         "--out", str(tmp_path / out)], env=env, cwd=REPO_ROOT, timeout=600)


def merge(*args):
    return run_capjudge_cli(["cache", "merge", *map(str, args)],
                            env=dict(os.environ), cwd=REPO_ROOT, timeout=120)


def error_line(result, *needles, prefix="capjudge "):
    """The one stderr line from the command (`prefix`) that names every needle, after asserting no traceback.
    (At task load a task also logs its error, before the command prints it: the same text, unprefixed.)"""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines()
             if line.startswith(prefix) and all(needle in line for needle in needles)]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def real_cache(path, make_client, server, n=40):
    """A reply cache written by a real client: n text requests judged by the test server."""
    from capjudge.judges.types import ChatRequest

    client = make_client(server, cache_path=path)
    requests = [ChatRequest(parts=(f"item {i}: " + "word " * 200,)) for i in range(n)]
    assert all(outcome.ok for outcome in client.judge_many(requests, lambda reply: reply.content, judge_version="t"))
    client.flush_cache()
    with sqlite3.connect(path) as conn:  # everything in the main file, as a copied or truncated file would be
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def damaged(kind, tmp_path, make_client, server):
    path = tmp_path / f"{kind}.sqlite"
    if kind == "truncated":
        data = real_cache(tmp_path / "whole.sqlite", make_client, server).read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        path.write_bytes(b"this is not a database\n" * 200)
    else:  # another program's SQLite database that CAPJUDGE_CACHE points at by mistake
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
            conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
        conn.close()
    return path


@pytest.mark.parametrize("kind", ["truncated", "garbage", "foreign"])
def test_a_damaged_or_foreign_cache_is_one_clear_error_before_any_request_and_is_left_as_it_was(
        kind, tmp_path, make_client, server):
    cache = damaged(kind, tmp_path, make_client, server)
    before = digest(cache)
    server.reset()

    result = judge(tmp_path, server, cache)

    assert result.returncode == 2, result.stderr[-3000:]
    line = error_line(result, str(cache), "CAPJUDGE_CACHE")
    assert "not a capjudge reply cache" in line
    assert "Nothing in it was changed" in line and "move it aside" in line
    assert server.log == [] and server.preflights == []  # refused at load: not even the pre-flight probe
    assert digest(cache) == before  # a foreign database is not given a `replies` table, a damaged one not touched
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.json*"))


def test_a_cache_folder_or_an_uncreatable_cache_path_is_one_line_naming_the_variable_before_any_request(
        tmp_path, server):
    folder = tmp_path / "caches"
    folder.mkdir()
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("a file where the cache's folder should be\n", encoding="utf-8")

    for cache, problem in ((folder, "is a folder, not a file"), (not_a_folder / "cache.sqlite", "is a file, not a folder")):
        result = judge(tmp_path, server, cache)
        assert result.returncode == 2, result.stderr[-3000:]
        line = error_line(result, f"the judge reply cache {cache} (CAPJUDGE_CACHE)")
        assert problem in line and line.startswith("capjudge judge: ")
    assert server.log == [] and server.preflights == []
    assert list(folder.iterdir()) == [] and not_a_folder.read_text(encoding="utf-8").startswith("a file")


def test_a_row_that_cannot_be_read_is_a_reported_miss_whose_new_reply_replaces_it(tmp_path, server):
    cache = tmp_path / "cache.sqlite"
    first = judge(tmp_path, server, cache, out="first")
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(server.log) == N_ITEMS
    with sqlite3.connect(cache) as conn:  # one row as a crash mid-write or a hand edit leaves it
        (key,) = conn.execute("SELECT key FROM replies ORDER BY key LIMIT 1").fetchone()
        conn.execute("UPDATE replies SET reply = ? WHERE key = ?", ('{"content": "The Accuracy sc', key))
    conn.close()
    server.reset()

    second = judge(tmp_path, server, cache, out="second")

    assert second.returncode == 0, second.stderr[-3000:]
    assert "10 of 10 items judged" in second.stdout
    assert len(server.log) == 1  # only the unreadable one is asked again
    line = error_line(second, str(cache), key[:16], prefix="")
    assert "cannot be read" in line and "replaces the row" in line
    server.reset()
    third = judge(tmp_path, server, cache, out="third")
    assert third.returncode == 0 and server.log == [] and "cannot be read" not in third.stderr  # repaired


def test_merge_with_a_damaged_source_writes_nothing_and_leaves_no_destination(tmp_path, make_client, server):
    good = real_cache(tmp_path / "node1.sqlite", make_client, server, n=5)
    bad = damaged("truncated", tmp_path, make_client, server)
    new = tmp_path / "merged" / "new.sqlite"

    result = merge(good, bad, "--into", new)

    assert result.returncode == 2, result.stderr
    line = error_line(result, str(bad))
    assert "damaged or not a capjudge reply cache" in line and "nothing was merged" in line
    assert not new.exists() and not new.with_name("new.sqlite-wal").exists()

    existing = real_cache(tmp_path / "existing.sqlite", make_client, server, n=3)
    before = digest(existing)
    assert merge(good, bad, "--into", existing).returncode == 2
    assert digest(existing) == before

    merged = merge(good, "--into", new)
    assert merged.returncode == 0, merged.stderr
    assert f"{new}: 5 replies" in merged.stdout

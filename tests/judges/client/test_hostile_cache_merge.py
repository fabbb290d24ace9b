"""Hostile inputs to `capjudge cache merge` (issue 36): an unreadable row never wins over a good copy of the same
reply, and a destination given again as a source under another name (a hard or symbolic link) is refused
with one line before anything is written, the destination left exactly as it was.

Real caches written through the client's own `ReplyCache`, damaged with sqlite3 as a disk or an editor would
damage them, and the real command line.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from capjudge.judges.client.cache import ReplyCache
from capjudge.judges.types import JudgeReply, Usage
from tests.support.harness_runs import run_capjudge
from tests.support.hostile import refusal_line

VERSION = "hostile-merge/1"
KEYS = [f"{i:064x}" for i in range(1, 6)]  # five request keys, as the client's sha256 keys look


def reply(text: str) -> JudgeReply:
    return JudgeReply(content=text, logprobs=None, finish_reason="stop", model="test-judge",
                      usage=Usage(prompt_tokens=3, completion_tokens=2, requests=1))


def cache_with(path: Path, keys: list[str], label: str) -> Path:
    """A reply cache holding one reply per key, written as the client writes them."""
    cache = ReplyCache(path)
    for key in keys:
        cache.put(key, VERSION, reply(f"{label} reply to {key[-4:]}"))
    cache.close()
    return path


def damage_row(path: Path, key: str) -> None:
    """The row under `key` made unreadable: bytes that are not UTF-8 where its JSON was."""
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE replies SET reply = CAST(X'80FF7B22' AS TEXT) WHERE key = ?", (key,))
    connection.close()


def read_all(path: Path) -> tuple[dict[str, str | None], int]:
    """Every key's reply text as the client reads it (None: unreadable), and how many rows it could not read."""
    cache = ReplyCache(path)
    try:
        texts = {key: (found.content if (found := cache.get(key)) is not None else None) for key in KEYS}
        return texts, cache.unreadable
    finally:
        cache.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("order", ["damaged-first", "good-first"])
def test_a_readable_copy_wins_over_an_unreadable_one_from_any_source(order, tmp_path):
    damaged = cache_with(tmp_path / "node0.sqlite", KEYS, "node0")
    damage_row(damaged, KEYS[0])
    good = cache_with(tmp_path / "node1.sqlite", KEYS[:1], "node1")
    sources = [damaged, good] if order == "damaged-first" else [good, damaged]
    into = tmp_path / "merged.sqlite"
    done = run_capjudge("cache", "merge", *map(str, sources), "--into", str(into))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    texts, unreadable = read_all(into)
    assert unreadable == 0
    assert texts[KEYS[0]] == f"node1 reply to {KEYS[0][-4:]}"  # the good copy, whichever source came first
    assert all(texts[key] == f"node0 reply to {key[-4:]}" for key in KEYS[1:])
    assert f"{into}: {len(KEYS)} replies" in done.stdout


def test_an_unreadable_row_already_in_the_destination_is_replaced_by_a_sources_good_copy(tmp_path):
    into = cache_with(tmp_path / "merged.sqlite", KEYS, "old")
    damage_row(into, KEYS[2])
    good = cache_with(tmp_path / "node.sqlite", KEYS[2:3], "node")
    done = run_capjudge("cache", "merge", str(good), "--into", str(into))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{good}: 1 new replies" in done.stdout  # the repaired row counts as new
    texts, unreadable = read_all(into)
    assert unreadable == 0 and texts[KEYS[2]] == f"node reply to {KEYS[2][-4:]}"
    assert texts[KEYS[0]] == f"old reply to {KEYS[0][-4:]}"  # a readable row is kept, as before


@pytest.mark.parametrize("link", ["hard", "symbolic"])
def test_the_destination_given_as_a_source_through_a_link_is_refused_and_left_as_it_was(link, tmp_path):
    into = cache_with(tmp_path / "merged.sqlite", KEYS[:3], "dest")
    other = cache_with(tmp_path / "node.sqlite", KEYS[3:], "node")
    alias = tmp_path / "alias.sqlite"
    (os.link if link == "hard" else os.symlink)(into, alias)
    before = digest(into)
    done = run_capjudge("cache", "merge", str(other), str(alias), "--into", str(into))
    line = refusal_line(done, "capjudge cache merge:", str(alias), f"the same file as --into {into}")
    assert "merging a cache into itself" in line and "nothing was merged" in line
    assert "locked" not in done.stderr
    assert digest(into) == before  # not even the first source was merged
    texts, unreadable = read_all(into)
    assert unreadable == 0 and [texts[key] for key in KEYS[3:]] == [None, None]

"""Looking into the reply cache read-only leaves nothing beside it (issue #60 item 11): `capjudge sensitivity
--dry-run` on an existing cache left cache.sqlite-wal and cache.sqlite-shm after it exited. SQLite makes both
for any reader of a WAL file, and a `mode=ro` connection may not remove them; the read-only opening
(capjudge.judges.client.cache_files.open_cache_read_only) now tidies up as a run's own close does, and still
never writes, nor removes what a writer in another process is using."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.paths import REPO_ROOT
from tests.support.scripted_caption_judges import CAPTIONS, TASK, DemoWorld, judge_env

from capjudge.judges.client.cache_files import CacheError, open_cache_read_only

SENSITIVITY = ["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--limit", "2",
               "--perturbation", "padding"]


def _files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.mark.slow
def test_a_dry_run_on_an_existing_cache_leaves_only_what_was_there(tmp_path):
    folder = tmp_path / "cache"
    env_of = lambda server: {**judge_env(tmp_path, server, "fair"), "CAPJUDGE_CACHE": str(folder / "cache.sqlite")}  # noqa: E731
    with judge_server(responder=DemoWorld().respond) as server:
        done = run_capjudge_cli([*SENSITIVITY, "--out", str(tmp_path / "out")], env=env_of(server), cwd=REPO_ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 4  # 2 items x (original + padding): the cache holds their replies
        before = _files(folder)
        # The run closed its cache: the file alone (its budget folder beside it is the rate budget's, not the cache's).
        assert "cache.sqlite" in before and "cache.sqlite-wal" not in before and "cache.sqlite-shm" not in before
        server.log.clear()
        server.preflights.clear()
        dry = run_capjudge_cli([*SENSITIVITY, "--dry-run"], env=env_of(server), cwd=REPO_ROOT)
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert server.log == [] and server.preflights == []
    # The dry run did read the cache: every judgment is already there.
    assert "= 4 judgments; 4 to ask, 4 of them already in the reply cache: 0 left to send" in dry.stdout, dry.stdout
    assert _files(folder) == before


def _wal_cache(path: Path) -> sqlite3.Connection:
    """A reply cache in WAL mode with one reply, and its writer's connection still open (another process's run)."""
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE replies (key TEXT PRIMARY KEY, judge_version TEXT NOT NULL, model TEXT, "
                   "created REAL NOT NULL, reply TEXT NOT NULL)")
    writer.execute("INSERT INTO replies VALUES ('k', 'v1', 'm', 0, '{}')")
    return writer


def test_the_read_only_connection_cannot_write_and_leaves_a_writers_files_alone(tmp_path):
    path = tmp_path / "cache.sqlite"
    writer = _wal_cache(path)
    reader = open_cache_read_only(path, "the cache")
    assert reader is not None
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("INSERT INTO replies VALUES ('x', 'v1', 'm', 0, '{}')")
    reader.close()
    # The writer is still at work: its log and index stay, and its rows are all there.
    assert (tmp_path / "cache.sqlite-wal").exists() and (tmp_path / "cache.sqlite-shm").exists()
    writer.execute("INSERT INTO replies VALUES ('k2', 'v1', 'm', 0, '{}')")
    writer.close()
    assert _files(tmp_path) == ["cache.sqlite"]
    reader = open_cache_read_only(path, "the cache")
    assert reader is not None and reader.execute("SELECT COUNT(*) FROM replies").fetchone() == (2,)
    reader.close()
    assert _files(tmp_path) == ["cache.sqlite"]


def test_a_missing_file_is_not_made_and_a_folder_is_refused(tmp_path):
    assert open_cache_read_only(tmp_path / "absent.sqlite", "the cache") is None
    assert _files(tmp_path) == []
    (tmp_path / "folder.sqlite").mkdir()
    with pytest.raises(CacheError, match="is a folder"):
        open_cache_read_only(tmp_path / "folder.sqlite", "the cache")

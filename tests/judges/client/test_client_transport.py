"""How the judge client holds its connections and writes its cache: one connection per sending thread, and
replies written behind the judging threads by one writer (judges/http_transport.py, judges/cache.py)."""

from __future__ import annotations

import gc
import json
import sqlite3
import threading
from collections import Counter
from dataclasses import asdict

import pytest

from capjudge.judges.client.cache import ReplyCache
from capjudge.judges.client.cache_files import CacheError
from capjudge.judges.client.reply_codec import reply_to_json
from capjudge.judges.types import ChatRequest, JudgeReply, TokenLogprob, Usage
from tests.support.openai_server import OpenAITestServer


def _ask(client, prompts):
    return client.judge_many([ChatRequest(parts=(p,)) for p in prompts], lambda r: r.content, judge_version="v")


def test_each_sending_thread_keeps_one_connection_alive(make_client):
    with OpenAITestServer(latency=0.05) as server:
        client = make_client(server, max_concurrency=4)
        outcomes = _ask(client, [f"item {i}" for i in range(40)])
        assert all(o.ok for o in outcomes)
        per_connection = Counter(entry.peer for entry in server.log)
    # 4 sending threads, 4 connections, each reused for about 10 requests (keep-alive), none opened per request.
    assert len(per_connection) == 4, per_connection
    assert sum(per_connection.values()) == 40 and min(per_connection.values()) >= 2


def test_a_finished_threads_connection_is_closed_with_it(make_client):
    with OpenAITestServer() as server:
        client = make_client(server)
        transport = client.sdk._client._transport  # the PerThreadTransport the client built
        threads = [threading.Thread(target=_ask, args=(client, [f"thread {i}"])) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # judge_many's own pool threads still live (and hold theirs); the 3 threads above are gone.
        pool_threads = client.config.max_concurrency
        gc.collect()
        assert len(transport._transports) <= pool_threads
        client.close()
        assert transport._transports == []


def test_judge_clients_share_one_tls_context_and_another_ca_bundle_gets_its_own(make_client, monkeypatch):
    # The CA bundle is loaded once per process and settings, not once per client (22 ms of CPU each).
    import certifi

    from capjudge.judges.client.http_transport import PerThreadTransport

    with OpenAITestServer() as server:
        first, second = make_client(server), make_client(server)
        contexts = [client.sdk._client._transport._options["verify"] for client in (first, second)]
    assert contexts[0] is contexts[1]
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())  # httpx reads it (trust_env): a key of its own
    other = PerThreadTransport()._options["verify"]
    assert other is not contexts[0] and PerThreadTransport()._options["verify"] is other
    assert PerThreadTransport(verify=False)._options["verify"] is not other


def test_a_reply_is_readable_at_once_and_on_disk_after_flush(tmp_path):
    cache = ReplyCache(tmp_path / "c.sqlite")
    reply = JudgeReply("α80α", None, "stop", "m", Usage(5, 3, 1))
    cache.put("k1", "v", reply)
    assert cache.get("k1") == JudgeReply("α80α", None, "stop", "m", Usage(5, 3, 1), cached=True)
    cache.flush()
    other = sqlite3.connect(tmp_path / "c.sqlite")  # another connection sees what flush said is written
    assert other.execute("SELECT key, judge_version FROM replies").fetchall() == [("k1", "v")]
    # Two judges of one request racing (threads or processes): the file keeps the first reply, and once the
    # second has been through the writer this process reads the file's.
    cache.put("k1", "v", JudgeReply("other", None, "stop", "m", Usage()))
    cache.flush()
    assert cache.get("k1").content == "α80α"
    assert len(cache) == 1


def test_a_reply_put_through_one_cache_is_found_through_another_on_the_same_file(tmp_path):
    # Two clients in one process (two tasks, or a rerun of a judgment) on one cache file: the second must not
    # ask again for a reply the first has received but not yet written (CI once caught it doing so).
    first, second = ReplyCache(tmp_path / "c.sqlite"), ReplyCache(tmp_path / "c.sqlite")
    writes = first._writes
    with writes._changed:  # hold the writer back: nothing reaches the file while this block runs
        first.put("k", "v", JudgeReply("α80α", None, "stop", "m", Usage()))
        assert second.get("k").content == "α80α"
        assert sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 0
    second.flush()  # flushing either one writes what both were given
    assert sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT reply FROM replies").fetchone()[0].startswith('{"content": "α80α"')


def test_a_write_that_fails_is_reported_not_lost_silently(tmp_path):
    cache = ReplyCache(tmp_path / "c.sqlite")
    cache.put("k0", "v", JudgeReply("fine", None, "stop", "m", Usage()))
    cache.flush()
    sqlite3.connect(tmp_path / "c.sqlite").execute("DROP TABLE replies")  # the file changes under the writer
    cache.put("k1", "v", JudgeReply("lost?", None, "stop", "m", Usage()))
    with pytest.raises(CacheError, match="could not be written"):
        cache.flush()
    assert cache.get("k1").content == "lost?"  # still served from memory in this process
    with pytest.raises(CacheError):
        cache.put("k2", "v", JudgeReply("next", None, "stop", "m", Usage()))
    # A cache opened on the file afterwards (the table is back) starts clean rather than inheriting the error.
    reopened = ReplyCache(tmp_path / "c.sqlite")
    reopened.put("k3", "v", JudgeReply("again", None, "stop", "m", Usage()))
    reopened.flush()
    assert reopened.get("k3").content == "again" and len(reopened) == 1


def test_reply_json_is_what_asdict_gave():
    # Existing caches hold asdict's JSON; the hand-built writer must produce the same text.
    reply = JudgeReply("Accuracy α80α é", (TokenLogprob("α", -0.01, (("α", -0.01), ("β", -4.5))), TokenLogprob("80", -0.2)),
                       "stop", "gpt-4o", Usage(120, 30, 1), cached=False, refusal=None)
    expected = asdict(reply)
    expected.pop("cached")
    assert reply_to_json(reply) == json.dumps(expected, ensure_ascii=False)
    refused = JudgeReply(None, None, "stop", None, Usage(), refusal="I can't")
    expected = asdict(refused)
    expected.pop("cached")
    assert reply_to_json(refused) == json.dumps(expected, ensure_ascii=False)

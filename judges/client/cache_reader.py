"""Which requests a judge's reply cache already answers, read without changing it: what `capjudge estimate` and
`capjudge sensitivity --dry-run` count as already paid for.

A request is looked up exactly as the client looks it up (capjudge.judges.client.judge_client): the body built
for the judge's configured model, keyed by the client's own key (`ServedJudges.request_key`: the served model's
identity and the cache scope included), over the sample indices the client would try, each cached reply parsed
by the judge's own parser. So a reply the parser rejects leads, as in a run, to the next index; the first index
not cached is a request the run will send.

The served model's identity is what the judge's server says (one GET /models, the client's own call, made only
when the cache file exists and the server is one the client asks: never OpenAI or Azure). Nothing is written:
a missing cache file stays missing, and a file that is not a usable cache is the run's own CacheError.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from capjudge.judges.client.cache_files import cache_name, open_cache_read_only
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.redaction import Redactor
from capjudge.judges.client.reply_codec import UnreadableReply, reply_from_json
from capjudge.judges.client.served_judges import ServedJudges, asks_for_identity
from capjudge.judges.client.wire import parse_reply
from capjudge.judges.types import ChatRequest, JudgeOutcome, JudgeReply, ParseFailure, Usage


class CacheReader:
    """One judge's reply cache, looked into read-only (`config`: the judge's configuration, no key needed)."""

    def __init__(self, config: JudgeConfig):
        self.config = config
        self.path = config.cache_path if config.use_cache else None
        self.name = cache_name(self.path) if self.path is not None else "no reply cache (CAPJUDGE_NO_CACHE)"
        self._conn = open_cache_read_only(self.path, self.name) if self.path is not None else None
        self.served = self._served() if self._conn is not None else ServedJudges(
            endpoint=config.endpoint_label, scope=config.cache_scope)

    @property
    def exists(self) -> bool:
        return self._conn is not None

    def _served(self) -> ServedJudges:
        config = self.config
        if not asks_for_identity(config):
            return ServedJudges(endpoint=config.endpoint_label, scope=config.cache_scope)
        sdk = config.backend.build_sdk(config, timeout=config.timeout, max_retries=0)
        try:
            return ServedJudges.ask(config, sdk, Redactor.for_config(config))
        finally:
            sdk.close()

    def needs_request(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], *, judge_version: str,
                      first_sample_index: int = 0, max_tries: int = 1, **_: Any) -> bool:
        """Whether a run of this judge sends `request` (as `JudgeClient.judge` would be called with it)."""
        if self._conn is None:
            return True
        body = request.body(self.config.model)
        for sample_index in range(first_sample_index, first_sample_index + max_tries):
            reply = self._get(self.served.request_key(body, judge_version, sample_index))
            if reply is None:
                return True
            if not isinstance(parse_reply(reply, parse), ParseFailure):
                return False
        return False  # every try is cached (and rejected): the run replays them, sending nothing

    def _get(self, key: str) -> JudgeReply | None:
        assert self._conn is not None
        try:
            row = self._conn.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
            return reply_from_json(row[0]) if row else None
        except (sqlite3.DatabaseError, UnreadableReply):  # a damaged row: a run asks again, so it is to pay for
            return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RequestRecorder:
    """A client that keeps each request a judge asks of it, as asked, and sends nothing (every answer: "not
    sent"), so that the judges' reply caches can be asked which of them a run would send. `capjudge estimate`'s
    client is one that also counts tokens."""

    not_sent = "looked up in the reply cache only"

    def __init__(self) -> None:
        self.asked: list[tuple[ChatRequest, Callable[[JudgeReply], Any], dict[str, Any]]] = []

    def judge(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], **how: Any) -> JudgeOutcome[Any]:
        self.asked.append((request, parse, how))
        return JudgeOutcome(None, ParseFailure("not_sent", self.not_sent), (), (), Usage())


def any_request_left(configs: Sequence[JudgeConfig], units: Iterable[Callable[[Any], Any]]) -> bool:
    """Whether a run of these judges would send a request at all: each unit of the run (one item, one order),
    called with a client, builds its requests exactly as the run builds them; they are looked up read-only in
    every judge's reply cache, stopping at the first one left. A command probes its judges (pre-flight) only
    when one is: a fully cached rerun sends nothing."""
    # Every unit "fails" here as not sent, and the judging code warns of each failure: not news.
    quiet = logging.getLogger("capjudge.tasks")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    readers: list[CacheReader] = []
    try:
        for config in configs:
            readers.append(CacheReader(config))
        for unit in units:
            recorder = RequestRecorder()
            unit(recorder)  # a unit that is never sent (a caption too long, a video missing) asks nothing
            if any(reader.needs_request(request, parse, **how)
                   for reader in readers for request, parse, how in recorder.asked):
                return True
        return False
    finally:
        quiet.setLevel(level)
        for reader in readers:
            reader.close()

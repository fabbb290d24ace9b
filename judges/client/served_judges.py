"""Which judge answered: what a judge's server says about the model it serves, and what follows for the cache.

A server of our own (vLLM, llama.cpp, `capjudge serve-local`) can serve a different model under the same name
from one run to the next. What it says about the model behind the name (its GET /models entry: llama.cpp's
metadata, vLLM's model path, serve-local's GGUF sha256) is part of the cache key, so two judges never share
replies, and the cache file's `judges` table remembers every such identity so that a run can say when the cache
holds replies to its requests from another judge. OpenAI and Azure name dated models, so their keys (and caches
made before identities were recorded) are unchanged; a server that says nothing beyond the name keeps its old
keys too. A server that does identify its model does not reuse replies cached before (their judge is unknown):
the run says so, and asks again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

from capjudge.judges.client.cache import canonical_json, request_key

if TYPE_CHECKING:
    from capjudge.judges.client.cache import ReplyCache

log = logging.getLogger(__name__)

# The fields of a GET /models entry that say which model a name stands for and stay the same while that model is
# served: vLLM's `root` (the weights' path or hub id) and `parent` (a LoRA's base model), llama.cpp's `meta`
# (parameter count, size, vocabulary), serve-local's `meta` (the GGUF's sha256). Never `created` (vLLM answers
# the current time) or `permission`: they would change every key at every start of an unchanged server.
IDENTITY_FIELDS = ("id", "root", "parent", "meta")


def served_judge(listing: Any, model: str) -> dict[str, Any] | None:
    """What a model listing (the JSON of GET /models) says about the model served as `model`: its entry, else
    the one model a single-model server lists (llama.cpp answers any name with it). None when it says nothing
    beyond the name itself."""
    entries = listing.get("data") if isinstance(listing, Mapping) else None
    entries = [entry for entry in entries if isinstance(entry, Mapping)] if isinstance(entries, list) else []
    named = [entry for entry in entries if entry.get("id") == model]
    entry = named[0] if named else entries[0] if len(entries) == 1 else None
    if entry is None:
        return None
    identity = {name: entry[name] for name in IDENTITY_FIELDS if entry.get(name) not in (None, "", [], {})}
    return None if identity in ({}, {"id": model}) else identity


def asks_for_identity(config: Any) -> bool:
    """Whether the judge's server is asked what it serves: any OpenAI-compatible server but OpenAI's own. OpenAI
    and Azure names are dated snapshots and deployments; they are asked nothing, and their keys never change."""
    return config.backend.asks_for_identity(config)


class ServedJudges:
    """The judge server's model listing, asked once when the client is built, and what follows from it: each
    request's cache key, and the one-time notice when the cache holds a request's reply from another judge."""

    def __init__(self, listing: Any = None, endpoint: str = "", scope: str | None = None):
        self._listing = listing
        self._endpoint = endpoint
        self._scope = scope  # JudgeConfig.cache_scope: the endpoint keys carry, when they must
        self._identities: dict[str, dict[str, Any] | None] = {}
        self._remembered: set[str] = set()
        self._reported: set[str] = set()
        self._lock = threading.Lock()
        self.other_judge_replies = 0  # requests asked again because only another judge's reply was cached

    @classmethod
    def ask(cls, config: Any, sdk: Any, redact: Callable[[str], str]) -> "ServedJudges":
        """What the server at `config` serves, asked through the judge's own SDK client (`sdk`: its key, its
        base URL), with one GET /models (nothing for OpenAI or Azure). The listing passes through `redact` (the
        client's) first: what it says goes into the cache file and into messages, and a server may echo the key."""
        endpoint, scope = config.endpoint_label, config.cache_scope
        if not asks_for_identity(config):
            return cls(endpoint=endpoint, scope=scope)
        import httpx

        try:
            listing = json.loads(redact(sdk.get("/models", cast_to=httpx.Response).read().decode("utf-8")))
        except Exception as error:  # noqa: BLE001 - any failure means the same: the server says nothing
            # The status or the kind of failure only: a server's error text may quote the key.
            status = getattr(error, "status_code", None)
            log.warning("capjudge: could not ask %s which model it serves (GET /models: %s): its cached replies are "
                        "matched by model name only", endpoint, f"HTTP {status}" if status else type(error).__name__)
            return cls(endpoint=endpoint, scope=scope)
        return cls(listing, endpoint, scope)

    def identity(self, model: str) -> dict[str, Any] | None:
        with self._lock:
            if model not in self._identities:
                self._identities[model] = served_judge(self._listing, model)
            return self._identities[model]

    def request_key(self, body: Mapping[str, Any], judge_version: str, sample_index: int) -> str:
        return request_key(body, judge_version, sample_index, self.identity(str(body.get("model"))), self._scope)

    def before_asking(self, cache: "ReplyCache", body: Mapping[str, Any], judge_version: str, sample_index: int) -> None:
        """On a cache miss, before the request: record this judge in the cache, and say (once per other judge)
        when the cache holds this request's reply from another one, which is not reused."""
        model = str(body.get("model"))
        judge = self.identity(model)
        try:
            if judge and model not in self._remembered:
                cache.remember_judge(judge)
                self._remembered.add(model)
            others = cache.other_judges(body, judge_version, sample_index, judge, self._scope)
        except (sqlite3.Error, ValueError) as error:  # a notice, never a reason to stop judging
            log.debug("capjudge: no judge-identity check in %s: %s", cache.name, error)
            return
        with self._lock:
            self.other_judge_replies += bool(others)
            new = [other for other in others if canonical_json(other) not in self._reported]
            self._reported.update(canonical_json(other) for other in new)
        for other in new:
            log.warning("capjudge: %s", self._other_judge_notice(cache, model, judge, other))

    def _other_judge_notice(self, cache: "ReplyCache", model: str, judge: Mapping[str, Any] | None,
                            other: Mapping[str, Any]) -> str:
        this = f"{self._endpoint} serves {_describe(judge)} as {model!r}" if judge else \
            f"{self._endpoint} does not say which model it serves as {model!r}"
        cached = f"another judge ({_describe(other)})" if other else (
            "a judge of unknown identity (cached before capjudge recorded which model a server serves, or from a "
            "server that did not say)")
        return (f"{cache.name} holds replies to this run's requests from {cached}; {this}. They are not reused: "
                "those requests are asked again (further ones from that judge are not listed)")


def _describe(identity: Mapping[str, Any] | None) -> str:
    text = canonical_json(identity or {})
    return text if len(text) <= 240 else text[:240] + "..."

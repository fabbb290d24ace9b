"""`ObservedClient`: a per-item view of the shared judge client that keeps what the call it forwarded cost.

The judges return their parsed result only; the per-item record also logs the raw reply, whether it came
from the cache and the requests made. The judges take any object with `judge(request, parse, ...)`, so the
task hands each of them an `ObservedClient` around the shared client: it keeps the call's outcome, and adds
the request parameters the task wants (e.g. the local llama.cpp server's output constraint) without the
judges having to know about them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from capjudge.judges.types import Usage


def merge_request_params(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`extra` over `base`; the two `extra_body` dicts (the SDK's pass-through fields) are merged, not replaced."""
    merged = {**base, **extra}
    if isinstance(base.get("extra_body"), Mapping) and isinstance(extra.get("extra_body"), Mapping):
        merged["extra_body"] = {**base["extra_body"], **extra["extra_body"]}
    return merged


class ObservedClient:
    """A per-item view of the shared judge client (`capjudge.judges.client.judge_client.JudgeClient`).

    Forwards `judge` with `extra_params` merged into the request and `default_model` filled in when the
    request names none, and keeps the outcome (raw reply, cache hit, attempts) for the sample log. One
    instance per item, so concurrent items never see each other's outcome.
    """

    def __init__(self, client: Any, *, extra_params: Mapping[str, Any] | None = None, default_model: str | None = None,
                 sample_offset: int = 0):
        self._client = client
        self._extra_params = dict(extra_params or {})
        self._default_model = default_model
        # Added to every sample index the judge asks for: the j-th of k independent replies starts at
        # j x max_tries, so its re-asks never take another reply's indices (and k = 1 is unchanged).
        self._sample_offset = sample_offset
        self.outcome: Any = None

    def judge(self, request: Any, parse: Callable[[Any], Any], **kwargs: Any) -> Any:
        request = replace(
            request,
            params=merge_request_params(request.params, self._extra_params),
            model=request.model or self._default_model,
        )
        if self._sample_offset:
            kwargs["first_sample_index"] = kwargs.get("first_sample_index", 0) + self._sample_offset
        self.outcome = self._client.judge(request, parse, **kwargs)
        return self.outcome

    @property
    def raw_reply(self) -> str | None:
        last = self.outcome.last_reply if self.outcome is not None else None
        return last.content if last is not None else None

    @property
    def cache_hit(self) -> bool:
        return bool(self.outcome is not None and self.outcome.cache_hit)

    @property
    def requests_made(self) -> int:
        return self.outcome.usage.requests if self.outcome is not None else 0

    @property
    def usage(self) -> Usage:
        """Tokens and requests this item cost this time, as the API reported them (none for cached replies)."""
        return self.outcome.usage if self.outcome is not None else Usage()

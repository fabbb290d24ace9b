"""The JSON a reply cache row holds: one judge reply written (`reply_to_json`) and read back
(`reply_from_json`), checked field by field; a row that is not such JSON (damaged, or edited by hand) is an
`UnreadableReply`, which the cache takes as a miss and `capjudge cache merge` as a row to replace.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from capjudge.judges.types import JudgeReply, TokenLogprob, Usage


def reply_to_json(reply: JudgeReply) -> str:
    # Built field by field rather than with dataclasses.asdict, which deep-copies every logprob entry: on a
    # judge reply with top-20 logprobs that was a fifth of the client's CPU per request (profiled at 64 in
    # flight). The JSON is the same as asdict's, minus `cached`.
    logprobs = None if reply.logprobs is None else [
        {"token": item.token, "logprob": item.logprob, "top": [[token, logprob] for token, logprob in item.top]}
        for item in reply.logprobs
    ]
    usage = reply.usage
    data = {
        "content": reply.content,
        "logprobs": logprobs,
        "finish_reason": reply.finish_reason,
        "model": reply.model,
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens, "requests": usage.requests},
        "refusal": reply.refusal,
    }
    return json.dumps(data, ensure_ascii=False)


class UnreadableReply(ValueError):
    """A stored reply that is not the JSON `reply_to_json` writes (a damaged row, or one edited by hand)."""


def reply_from_json(text: str) -> JudgeReply:
    """The reply a row holds; UnreadableReply when it is not one. Checked field by field: a wrongly typed field
    let through would fail later, inside a judge's parser, mid-run. Fields this version does not know (from a
    newer capjudge sharing the file) are ignored, not taken for damage."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        logprobs = data.get("logprobs")
        usage = data.get("usage") or {}
        return JudgeReply(
            content=_text_or_none(data, "content"),
            logprobs=None if logprobs is None else tuple(_token_logprob(item) for item in logprobs),
            finish_reason=_text_or_none(data, "finish_reason"),
            model=_text_or_none(data, "model"),
            usage=Usage(**{name: _count(usage, name) for name in ("prompt_tokens", "completion_tokens", "requests")}),
            cached=True,
            refusal=_text_or_none(data, "refusal"),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise UnreadableReply(f"{type(error).__name__}: {str(error)[:120]}") from None


def _text_or_none(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name!r} is {type(value).__name__}, not text")
    return value


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"usage {name!r} is {type(value).__name__}, not a count")
    return value


def _token_logprob(item: Mapping[str, Any]) -> TokenLogprob:
    token, logprob = item["token"], item["logprob"]
    if not isinstance(token, str) or not isinstance(logprob, (int, float)):
        raise TypeError("a logprob entry without a text token and a number")
    return TokenLogprob(token, float(logprob), tuple((str(t), float(lp)) for t, lp in item.get("top", ())))

"""The wire codec every judge transport shares: whether a request's text can be sent at all, its body as it
goes over the wire, a chat completion as it comes back, how a reply reaches the judge's parser (a refusal
is a typed failure), and how an exchange can fail.

Both transports use it: the online client (`judge_client`) sends each body itself, and the Batch API path
(`batch`) writes the same bodies into its input file and reads the same completions from its output file,
so a reply parses and is keyed alike whichever way it came.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from capjudge.judges.client.rate_limits import RateLimitState, RefusalMessage
from capjudge.judges.types import ChatRequest, JudgeReply, ParseFailure, TokenLogprob, Usage

# Failure kinds the transport itself reports (the parsers report theirs).
REFUSAL = "refusal"


class TransportError(Exception):
    """An attempt that may succeed if repeated (429, 5xx, timeout, connection, malformed response)."""

    def __init__(self, outcome: str, detail: str, retry_after: float | None = None, unfixable: bool = False,
                 rate_limits: RateLimitState | None = None, refusal: RefusalMessage | None = None,
                 reached: bool = True):
        super().__init__(f"{outcome}: {detail}")
        self.outcome = outcome
        self.detail = detail
        self.retry_after = retry_after
        # The rate-limit headers a 429 came with (None when it had none, or none readable).
        self.rate_limits = rate_limits
        # What a 429's message says (what the API's limiter would have charged the request, which limit).
        self.refusal = refusal
        # Could not even connect (refused, DNS): retried, but counted by the circuit breaker.
        self.unfixable = unfixable
        # Whether the request reached the server (it answered, broke off or timed out after the connection was
        # made): then it is a request sent, counted like any (what the server received is what was sent).
        self.reached = reached


class RequestRejected(Exception):
    """A 4xx other than 429: repeating the same request cannot help (bad model name, bad key, bad body)."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"http_{status}: {detail}")
        self.status = status
        self.detail = detail


def parse_reply(reply: JudgeReply, parse: Callable[[JudgeReply], Any]) -> Any:
    """The judge's parse of a reply, or a typed failure for a refusal: a refusal has no content for the parser,
    so it is reported as what it is, with its text, and re-asked like any rejected reply (at temperature > 0
    the next sample may answer)."""
    if reply.content is None and reply.refusal:
        return ParseFailure(REFUSAL, f"the judge refused: {reply.refusal[:300]}")
    return parse(reply)


def wire_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A request body as it goes over the wire: the SDK's `extra_body` pass-through (e.g. the local server's
    grammar) merged into it, as the SDK itself does for `create(**body)`."""
    flat = {key: value for key, value in body.items() if key != "extra_body"}
    flat.update(body.get("extra_body") or {})
    return flat


def reply_from_completion_dict(data: Mapping[str, Any]) -> JudgeReply:
    """A chat.completion as JSON (a response body, or a Batch API output line's body) -> JudgeReply.

    Raises KeyError/TypeError/ValueError for JSON that is not shaped like a chat completion (a gateway's own
    object, a number where text belongs), TransportError for one with no choices: the caller reports it as a
    bad response, retryable."""
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not choices:
        raise TransportError("bad_response", "response has no choices")
    choice = choices[0]
    message = choice.get("message")
    content = _text_field("content", message.get("content")) if message is not None else None
    refusal = _text_field("refusal", message.get("refusal")) if message is not None else None
    logprobs = None
    logprob_part = choice.get("logprobs")
    if logprob_part is not None and logprob_part.get("content") is not None:
        logprobs = tuple(
            TokenLogprob(
                token=_text_field("token", item["token"]) or "",
                logprob=float(item["logprob"]),
                top=tuple((_text_field("token", alt["token"]) or "", float(alt["logprob"]))
                          for alt in (item.get("top_logprobs") or ())),
            )
            for item in logprob_part["content"]
        )
    usage = data.get("usage") or {}
    return JudgeReply(
        content=content,
        logprobs=logprobs,
        finish_reason=choice.get("finish_reason"),
        model=_text_field("model", data.get("model")),
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            requests=1,
        ),
        refusal=refusal,
    )


# A code point in the surrogate range: in a Python str decoded from JSON, only an unpaired one (a pair is
# decoded to one character). Such text cannot be encoded as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_field(name: str, value: Any) -> str | None:
    """A text field of the reply, checked: None or a string, with unpaired surrogates (`"\\ud800"` escapes from
    a broken server) replaced by U+FFFD as any UTF-8 decoder does; left in, they would make the cache write
    and the sample log raise. Anything else is a TypeError (a malformed completion)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name!r} is {type(value).__name__}, not text")
    return _SURROGATE.sub("\ufffd", value)


def unsendable_problem(request: ChatRequest) -> str | None:
    """Why the request's text cannot be sent (an unpaired surrogate, e.g. from a broken JSON file), or None."""
    for position, part in enumerate(request.parts):
        if isinstance(part, str):
            found = _SURROGATE.search(part)
            if found is not None:
                context = part[max(0, found.start() - 40) : found.start()].encode("utf-8", "replace").decode("utf-8")
                return (
                    f"text part {position} has an unpaired surrogate U+{ord(found.group()):04X} at character "
                    f"{found.start()} (after {context!r}): not valid Unicode, so it cannot be sent"
                )
    return None

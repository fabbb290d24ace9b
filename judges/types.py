"""Plain data that crosses the boundary between the judge client and the judges.

A judge builds a `ChatRequest`, the client turns it into one or more HTTP calls and hands back `JudgeReply`
objects, and the judge's parser turns a reply into its own typed result or a `ParseFailure`. Everything here
is frozen so a result can be cached, logged and compared without defensive copies.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Literal, Mapping, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


# The failure kind of an item whose inputs cannot make a request, in every judge, task and command.
BAD_INPUT = "bad_input"


class BadInput(ValueError):
    """This item's inputs cannot make a judge request (no references, a caption that is not text, no
    visual input). The judges report such an item unjudged as `bad_input`; any other exception while building
    a request is a bug and propagates, so it cannot hide as a run of unjudged items."""


@dataclass(frozen=True)
class ImagePart:
    """An image sent inline as a data URI. `media_type` must match the bytes (image/png or image/jpeg)."""

    data: bytes
    media_type: Literal["image/png", "image/jpeg"]
    detail: Literal["low", "high", "auto"] | None = None

    @classmethod
    def from_pil(cls, image: Any, fmt: Literal["PNG", "JPEG"], detail: str | None = None, quality: int = 95) -> "ImagePart":
        buffer = io.BytesIO()
        if fmt == "JPEG":
            image.convert("RGB").save(buffer, format="JPEG", quality=quality)
        else:
            image.save(buffer, format="PNG")
        return cls(buffer.getvalue(), "image/png" if fmt == "PNG" else "image/jpeg", detail)  # type: ignore[arg-type]

    def to_content_part(self) -> dict[str, Any]:
        url = f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"
        image_url: dict[str, Any] = {"url": url}
        if self.detail is not None:
            image_url["detail"] = self.detail
        return {"type": "image_url", "image_url": image_url}


@dataclass(frozen=True)
class ChatRequest:
    """One user turn: text and images in order, plus sampling parameters.

    `params` holds exactly the chat.completions keyword arguments the judge wants (temperature, top_p,
    max_tokens, logprobs, top_logprobs, response_format, ...). `model` is the judge's published default;
    a model configured on the client (argument or environment) takes precedence over it.
    """

    parts: tuple[str | ImagePart, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None

    def messages(self) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        for part in self.parts:
            if isinstance(part, ImagePart):
                content.append(part.to_content_part())
            else:
                content.append({"type": "text", "text": part})
        return [{"role": "user", "content": content}]

    def body(self, model: str | None = None) -> dict[str, Any]:
        """The exact JSON body of the chat.completions request; `model` overrides the judge's default."""
        chosen = model or self.model
        if not chosen:
            raise ValueError("no judge model: set one (argument or MODEL_VERSION) or give the request a default")
        return {"model": chosen, "messages": self.messages(), **dict(self.params)}


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the top alternatives at that position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.requests + other.requests,
        )


@dataclass(frozen=True)
class JudgeReply:
    """What the judge model said, as the client received it (or as the cache kept it)."""

    content: str | None
    logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: str | None
    model: str | None
    usage: Usage
    cached: bool = False
    # The model's refusal message (OpenAI's `message.refusal`), when it declined instead of answering; the
    # content is then None. Kept so a refusal is reported as one, with its text, not as an unparsable reply.
    refusal: str | None = None


@dataclass(frozen=True)
class ParseFailure:
    """Why a reply could not be turned into a judgment. Never a score: it is counted and reported."""

    kind: str
    detail: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


class ParseOutcome:
    """`ok`, `failure_kind` and `failure_detail` read off a result's `failure: ParseFailure | None` (a mixin of
    the frozen result dataclasses whose failure is a ParseFailure: G-VEval's and the pairwise judges')."""

    failure: ParseFailure | None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def failure_kind(self) -> str | None:
        return self.failure.kind if self.failure is not None else None

    @property
    def failure_detail(self) -> str:
        return self.failure.detail if self.failure is not None else ""


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt (or cache lookup) and how it ended: 'ok', 'cache_hit', 'http_429', 'http_500',
    'timeout', 'connection', 'bad_response', 'parse:<kind>'."""

    outcome: str
    seconds: float
    sample_index: int
    detail: str = ""


@dataclass(frozen=True)
class JudgeOutcome(Generic[T]):
    """The end of `JudgeClient.judge`: a parsed value, or a typed failure, never both."""

    value: T | None
    failure: ParseFailure | None
    replies: tuple[JudgeReply, ...]
    attempts: tuple[Attempt, ...]
    usage: Usage

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def cache_hit(self) -> bool:
        """True when the reply that decided the outcome came from the cache."""
        return bool(self.replies) and self.replies[-1].cached

    @property
    def last_reply(self) -> JudgeReply | None:
        return self.replies[-1] if self.replies else None


@runtime_checkable
class JudgeResult(Protocol):
    """What every judge's typed result offers, whatever else it carries (G-VEval's four dimensions, AnyCap's
    length-rule decision): the contract the task path, the sample log and the reports rely on.

    A result is either judged (`ok`, scores set) or unjudged with a failure kind and detail — never a score
    standing in for a failure."""

    @property
    def ok(self) -> bool: ...

    @property
    def failure_kind(self) -> str | None: ...

    @property
    def failure_detail(self) -> str: ...

    @property
    def explanation(self) -> str | None:
        """The judge's own words on why (G-VEval's reasoning, AnyCap's reason)."""

    def scores(self) -> Mapping[str, float | None]:
        """The result's scores by name; None for each when unjudged."""

    def log_fields(self) -> dict[str, Any]:
        """The fields the sample log's `judgment` record carries for this judge (JSON-serialisable)."""


@runtime_checkable
class JudgeCaller(Protocol):
    """What a judge asks its requests through: one request, its parser, re-asked up to `max_tries` replies while
    the parser rejects them, and a `JudgeOutcome` back (never an exception for a bad item).

    Implemented by the network client (`capjudge.judges.client.judge_client.JudgeClient`) and by each stand-in
    that takes its place around a judge: the per-item observer (`client.observed.ObservedClient`), the Batch
    stage's collector (`client.batch.BatchRecorder`) and `capjudge estimate`'s counter
    (`tasks.runs.judging.estimate.EstimatingClient`), which all keep this signature so a judge never knows which."""

    def judge(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], *, judge_version: str,
              max_tries: int = 1, first_sample_index: int = 0) -> JudgeOutcome[Any]: ...

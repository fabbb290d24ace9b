"""What an API says about its rate limits, and what a request will count against them.

Headers (OpenAI's names; Azure OpenAI sends the `remaining` ones and `retry-after-ms`):
`x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` and the same
three for `-tokens`. Reset values are durations such as "1s", "6m0s", "20ms" or "1m30.5s".

Token estimates, before a request is sent (the TPM limit counts a request when it is made):
- text: 4 characters per token, the rule of thumb OpenAI gives for English (an exact count needs the model's
  tokenizer, whose files are a download; after the reply, the usage the API reports replaces the estimate);
- images: OpenAI's published formula for GPT-4o-class models: detail "low" costs 85 tokens; otherwise the
  image is fitted within 2048 x 2048, then scaled down so its shorter side is at most 768, and costs 85 plus
  170 per 512-pixel tile;
- the reply: `max_tokens` (what OpenAI's limiter reserves for it), else a default.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from capjudge.judges.types import ChatRequest, ImagePart

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # the chat format's own tokens around a message
DEFAULT_REPLY_TOKENS = 512
LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
TILE = 512

MAX_HEADER_COUNT = 2**53  # the largest count a rate-limit header may carry (far above any API's limits)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


@dataclass(frozen=True)
class RateLimitHeaders:
    """The names of the headers a judge backend's server paces us with (capjudge.judges.client.backends): a
    backend whose server spells them otherwise (Anthropic's `anthropic-ratelimit-*`) declares its own."""

    limit_requests: str = "x-ratelimit-limit-requests"
    remaining_requests: str = "x-ratelimit-remaining-requests"
    reset_requests: str = "x-ratelimit-reset-requests"
    limit_tokens: str = "x-ratelimit-limit-tokens"
    remaining_tokens: str = "x-ratelimit-remaining-tokens"
    reset_tokens: str = "x-ratelimit-reset-tokens"
    # Milliseconds until the request window has room, read when no reset is named (Azure), and as Retry-After.
    retry_after_ms: str = "retry-after-ms"
    retry_after: str = "retry-after"  # seconds (the HTTP-date form is not read)


OPENAI_RATE_LIMIT_HEADERS = RateLimitHeaders()


class RateLimitHeaderError(ValueError):
    """A rate-limit header whose value cannot be read; names the header and the value."""


def parse_duration(text: str) -> float:
    """"6m0s" -> 360.0, "20ms" -> 0.02, "1.5" -> 1.5 (plain seconds)."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):  # "nan", "inf": no wait can be read from them
            raise RateLimitHeaderError(f"not a duration: {text!r}")
        return seconds
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        value, unit = float(match.group(1)), match.group(2)
        seconds += value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        position = match.end()
    if position != len(text) or not text:
        raise RateLimitHeaderError(f"not a duration: {text!r}")
    return seconds


@dataclass(frozen=True)
class RateLimitState:
    """One response's view of the limits; None where the server said nothing."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests: float | None = None  # seconds until the request window has room again
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens: float | None = None

    @property
    def known(self) -> bool:
        return any(value is not None for value in self.__dict__.values())

    @property
    def used_requests(self) -> int | None:
        """What the API has counted against the request limit (None unless it sent the limit and the rest)."""
        return _used(self.limit_requests, self.remaining_requests)

    @property
    def used_tokens(self) -> int | None:
        return _used(self.limit_tokens, self.remaining_tokens)

    def wait_before_next(self, next_tokens: int) -> float:
        """How long every process should hold off before the next request, by these headers, for a limit the
        API counts down without naming it (Azure sends `remaining` alone): until the request window resets
        when none is left, until the token window resets when the next request's estimate does not fit. A
        limit that is named is paced by the shared window instead (MachineBudget.reconcile), which needs no
        reading of `reset`, whose meaning differs between APIs. 0 when nothing is to wait for. Unbounded: the
        client bounds what it waits (capjudge.judges.client.pacing)."""
        return self.wait_and_cause(next_tokens)[0]

    def wait_and_cause(self, next_tokens: int) -> tuple[float, str]:
        """`wait_before_next`, and the headers that ask for it in words (the line saying why judging waits)."""
        found = [(0.0, "")]
        if self.limit_requests is None and self.remaining_requests is not None and self.remaining_requests <= 0:
            found.append(_exhausted("requests", f"{self.remaining_requests}", self.reset_requests))
        if self.limit_tokens is None and self.remaining_tokens is not None and self.remaining_tokens < next_tokens:
            found.append(_exhausted("tokens", f"{self.remaining_tokens} (the next request needs about {next_tokens})",
                                    self.reset_tokens))
        return max(found, key=lambda wait: wait[0])


def _exhausted(window: str, remaining: str, reset: float | None) -> tuple[float, str]:
    """(the wait, why) for a window the API counts down without naming its limit."""
    if reset is None:
        return 1.0, f"x-ratelimit-remaining-{window} is {remaining}, with no limit or reset named (1 s assumed)"
    return reset, f"x-ratelimit-remaining-{window} is {remaining} and x-ratelimit-reset-{window} says {reset:g} s"


# OpenAI's 429 names what the refused request would have been charged: "Rate limit reached for gpt-4o in
# organization org-... on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in
# 644ms." Only the tokens-per-minute wording is read ("requests per min (RPM) ... Requested 1" counts requests).
_TPM_REFUSAL = re.compile(r"on tokens per min \(TPM\): Limit (\d{1,16}), Used (\d{1,16}), Requested (\d{1,16})\b")


def requested_tokens(message: object) -> int | None:
    """The tokens the API's limiter would have charged a refused request, from its 429 message (OpenAI's
    wording); None where the message names none, or names an implausible count (0, or beyond any limit)."""
    if not isinstance(message, str):
        return None
    match = _TPM_REFUSAL.search(message[:2000])
    if match is None:
        return None
    requested = int(match.group(3))
    return requested if 0 < requested <= MAX_HEADER_COUNT else None


# Any other limit a 429 may name: per day, requests (per minute or day), images, a request too large for any window.
_OTHER_LIMIT = re.compile(r"per day|requests per min|images per min|\((?:RPD|TPD|RPM|IPM)\)|too large", re.IGNORECASE)


@dataclass(frozen=True)
class RefusalMessage:
    """What a 429's message says, beyond its headers."""

    requested_tokens: int | None  # OpenAI's `Requested N` of a tokens-per-minute refusal (requested_tokens)
    other_limit: bool  # it names a limit other than tokens per minute: its headers' token counts say nothing of it


def read_refusal_message(message: object) -> RefusalMessage:
    text = message[:2000] if isinstance(message, str) else ""
    return RefusalMessage(requested_tokens(text), bool(_OTHER_LIMIT.search(text)))


def _used(limit: int | None, remaining: int | None) -> int | None:
    return None if limit is None or remaining is None else max(0, limit - remaining)


def read_rate_limit_headers(headers: Mapping[str, str], ignored: list[str] | None = None,
                            names: RateLimitHeaders = OPENAI_RATE_LIMIT_HEADERS) -> RateLimitState:
    """The rate-limit headers of a response (case-insensitive names). A header that is present but unreadable
    is a RateLimitHeaderError naming it: pacing on a misread limit would be worse than none. With `ignored`
    (a run's replies, already paid for), such a header is left out instead and described there.

    A negative count or duration (`remaining: -5000`) is always left out (and described in `ignored`): no
    limit holds less than nothing, and taking it as the API's count filled the window for a whole minute after
    every reply that said so (one request a minute from a server that answered every one); an API that is
    really over its limit says so with a 429, which is paced (bounded) like any."""
    # httpx's Headers already look names up case-insensitively; copying all of them lower-cased cost more
    # than the rest of the reading, once per request. Any other mapping is lower-cased here.
    lowered = headers if isinstance(headers, httpx.Headers) else {name.lower(): value for name, value in headers.items()}

    def leave_out(problem: str) -> None:
        if ignored is None:
            raise RateLimitHeaderError(problem)
        ignored.append(problem)

    def below_zero(problem: str) -> None:
        if ignored is not None:
            ignored.append(problem)

    def integer(name: str) -> int | None:
        value = lowered.get(name)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            return leave_out(f"{name}: not a number: {value!r}")
        # "nan", "inf" and counts beyond any API's limits (2^53 tokens) are no count at all: pacing on them
        # would be pacing on noise (and SQLite stores no integer past 2^63).
        if not math.isfinite(number) or abs(number) > MAX_HEADER_COUNT:
            return leave_out(f"{name}: not a plausible count: {value!r}")
        return int(number) if number >= 0 else below_zero(f"{name}: a negative count: {value!r}")

    def duration(name: str) -> float | None:
        value = lowered.get(name)
        if value is None:
            return None
        try:
            seconds = parse_duration(value)
        except RateLimitHeaderError:
            return leave_out(f"{name}: not a duration: {value!r}")
        return seconds if seconds >= 0 else below_zero(f"{name}: a negative duration: {value!r}")

    reset_requests = duration(names.reset_requests)
    if reset_requests is None and names.retry_after_ms in lowered:  # Azure
        reset_requests = (integer(names.retry_after_ms) or 0) / 1000
    return RateLimitState(
        limit_requests=integer(names.limit_requests),
        remaining_requests=integer(names.remaining_requests),
        reset_requests=reset_requests,
        limit_tokens=integer(names.limit_tokens),
        remaining_tokens=integer(names.remaining_tokens),
        reset_tokens=duration(names.reset_tokens),
    )


def image_tokens(width: int, height: int, detail: str | None = "auto") -> int:
    """OpenAI's image token formula (GPT-4o / 4.1 / 4o-mini class, see the module docstring)."""
    if detail == "low":
        return LOW_DETAIL_TOKENS
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return LOW_DETAIL_TOKENS + TILE_TOKENS * math.ceil(width / TILE) * math.ceil(height / TILE)


# An image whose size cannot be read from its header is estimated as a 1024 x 1024 one (the API will say).
UNKNOWN_IMAGE_TOKENS = LOW_DETAIL_TOKENS + 4 * TILE_TOKENS


def image_part_tokens(part: ImagePart) -> int:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(part.data)) as image:  # reads the header only
            width, height = image.size
    except (UnidentifiedImageError, OSError):
        return LOW_DETAIL_TOKENS if part.detail == "low" else UNKNOWN_IMAGE_TOKENS
    return image_tokens(width, height, part.detail or "auto")


@dataclass(frozen=True)
class TokenEstimate:
    text: int
    images: int
    reply: int

    @property
    def prompt(self) -> int:
        return self.text + self.images

    @property
    def total(self) -> int:
        """What a TPM limiter counts when the request is made: the prompt and the reply it may get."""
        return self.prompt + self.reply


NO_ESTIMATE = TokenEstimate(0, 0, 0)


def estimate_tokens(request: ChatRequest) -> TokenEstimate:
    text = sum(len(part) for part in request.parts if isinstance(part, str))
    images = sum(image_part_tokens(part) for part in request.parts if isinstance(part, ImagePart))
    reply = request.params.get("max_tokens") or request.params.get("max_completion_tokens") or DEFAULT_REPLY_TOKENS
    return TokenEstimate(math.ceil(text / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE, images, int(reply))

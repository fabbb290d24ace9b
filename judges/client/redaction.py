"""Secrets redaction: a judge configuration's credentials taken out of whatever capjudge records or prints.

A server may echo the API key (or a URL's credentials) back, in an error text or even in a reply. The client
passes everything it records or hands on to be recorded (attempt details, failure details, log lines, the
replies kept in the cache and in the outcome, the text of a parsed judgment) through a `Redactor` first.

A server echoes what it received, which is not always what was configured: the SDK sends a URL's
`user:password@` as HTTP Basic auth (`Authorization: Basic <base64 of user:password>`, percent-escapes
decoded first), and a proxy may quote a value percent-encoded. So every credential is redacted in each form
it can come back in (`sent_forms`), and a URL's userinfo also as the Basic auth token made of it
(`basic_auth_redactions`); issue 36 found that token written in clear into the samples and the cache.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping
from urllib.parse import quote, quote_plus, unquote, urlsplit

from capjudge.judges.client.config import (
    MIN_SECRET_LENGTH_WITH_DIGIT,
    REDACTED,
    JudgeConfig,
)
from capjudge.judges.types import JudgeReply, TokenLogprob


def sent_forms(secret: str) -> set[str]:
    """The spellings in which `secret` can come back from a server: as configured, percent-decoded (how the
    client sends a URL's escaped userinfo), percent-encoded (how a URL or a form quotes it), base64 (how
    HTTP Basic auth carries it; without its `=` padding, so a padded or unpadded echo is caught alike) and hex
    in either case (how a debugging server or proxy dumps the bytes it received)."""
    plain = unquote(secret)
    forms = {secret, plain, quote(plain, safe=""), quote(plain), quote_plus(plain, safe="")}
    for text in (secret, plain):
        raw = text.encode("utf-8")
        forms |= {base64.b64encode(raw).decode().rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("="),
                  raw.hex(), raw.hex().upper()}
    return {form for form in forms if form}


def basic_auth_redactions(url: str | None) -> list[tuple[str, str]]:
    """(text, replacement) for the HTTP Basic auth the client sends for `url`'s `user:password@`: the header
    value `Basic <token>` whatever its length, and the pair itself in each of its `sent_forms` where that is
    long enough not to be an ordinary word."""
    if not url:
        return []
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return []
    found: list[tuple[str, str]] = []
    raw_pair = f"{parts.username or ''}:{parts.password or ''}"
    for pair in {raw_pair, unquote(parts.username or "") + ":" + unquote(parts.password or "")}:
        token = base64.b64encode(pair.encode("utf-8")).decode()
        found.append((f"Basic {token}", f"Basic {REDACTED}"))
        found += [(token.encode().hex(), REDACTED), (token.encode().hex().upper(), REDACTED)]
        found += [(form, REDACTED) for form in sent_forms(pair) if len(form) >= MIN_SECRET_LENGTH_WITH_DIGIT]
    return found


def config_redactions(config: JudgeConfig) -> list[tuple[str, str]]:
    """Everything to take out for `config`: its credentials (`JudgeConfig.redactions`), each credential on its
    own in all its `sent_forms`, and the Basic auth its URLs' userinfo becomes."""
    found = list(config.redactions)
    for needle, replacement in config.redactions:
        if replacement == REDACTED:  # a credential on its own (not a URL piece such as `api-key=...`)
            found += [(form, REDACTED) for form in sent_forms(needle)]
    for url in (config.base_url, config.azure_endpoint):
        found += basic_auth_redactions(url)
    return found


class Redactor:
    """Takes a configuration's credentials (`config_redactions`) out of what is stored or printed.

    Only ever applied to copies that are recorded: a reply is scored as received. For a reply, the logprob
    tokens are re-spelled so that they still spell the redacted text (the token holding the start of a
    credential carries the replacement, tokens wholly inside it become empty), with every logprob kept: a
    rerun that scores the cached copy gets the same expected values."""

    def __init__(self, redactions: Iterable[tuple[str | None, str]]):
        self._replacements = {needle: replacement for needle, replacement in redactions if needle}
        needles = sorted(self._replacements, key=len, reverse=True)  # the longest match wins at a position
        self._pattern = re.compile("|".join(map(re.escape, needles))) if needles else None

    @classmethod
    def for_config(cls, config: JudgeConfig) -> Redactor:
        return cls(config_redactions(config))

    def __call__(self, text: str) -> str:
        if self._pattern is None or not self._pattern.search(text):
            return text
        return self._pattern.sub(lambda found: self._replacements[found.group()], text)

    def reply(self, reply: JudgeReply) -> JudgeReply:
        """The copy of `reply` to record: `reply` itself when it quotes no credential."""
        if self._pattern is None:
            return reply
        changes: dict[str, Any] = {}
        for name in ("content", "refusal", "model"):
            value = getattr(reply, name)
            if value is not None and self(value) != value:
                changes[name] = self(value)
        if reply.logprobs is not None:
            tokens = self._tokens(reply.logprobs)
            if tokens is not reply.logprobs:
                changes["logprobs"] = tokens
        return replace(reply, **changes) if changes else reply

    def value(self, value: Any) -> Any:
        """`value` (a parsed judgment, a failure's data) with every string in it redacted; numbers untouched.
        Walks dataclasses, mappings, tuples and lists; returns `value` itself when nothing changed."""
        if isinstance(value, str):
            redacted = self(value)
            return value if redacted == value else redacted
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changed = {}
            for found in dataclasses.fields(value):
                if found.init:
                    old = getattr(value, found.name)
                    new = self.value(old)
                    if new is not old:
                        changed[found.name] = new
            return replace(value, **changed) if changed else value
        if isinstance(value, Mapping):
            items = {key: self.value(item) for key, item in value.items()}
            return items if any(items[key] is not item for key, item in value.items()) else value
        if isinstance(value, (tuple, list)):
            items = [self.value(item) for item in value]
            return type(value)(items) if any(new is not old for new, old in zip(items, value)) else value
        return value

    def _tokens(self, tokens: tuple[TokenLogprob, ...]) -> tuple[TokenLogprob, ...]:
        assert self._pattern is not None
        text = "".join(token.token for token in tokens)
        alternatives = "\x00".join(alt for token in tokens for alt, _ in token.top)
        if not self._pattern.search(text) and not self._pattern.search(alternatives):
            return tokens
        spans = [(found.start(), found.end(), self._replacements[found.group()]) for found in self._pattern.finditer(text)]
        redacted = self(text)

        def moved(offset: int) -> int:  # where a token boundary lands in the redacted text
            shift = 0
            for start, end, replacement in spans:
                if end <= offset:
                    shift += len(replacement) - (end - start)
                elif start < offset:  # inside a credential: the boundary moves past its replacement
                    return start + shift + len(replacement)
                else:
                    break
            return offset + shift

        bounds = [0]
        for token in tokens:
            bounds.append(bounds[-1] + len(token.token))
        moved_bounds = [moved(offset) for offset in bounds]
        respelled = []
        for index, token in enumerate(tokens):
            spelled = redacted[moved_bounds[index] : moved_bounds[index + 1]]
            # The token's own entry among its alternatives is spelled as the token now is.
            top = tuple((spelled if alt == token.token else self(alt), logprob) for alt, logprob in token.top)
            respelled.append(token if spelled == token.token and top == token.top else TokenLogprob(spelled, token.logprob, top))
        return tuple(respelled)

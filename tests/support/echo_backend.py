"""A judge backend that exists only in the tests, to prove that a new backend is this one file and one
`register` call (README, "The judge client": "Adding a backend").

`API_TYPE=echo`: an OpenAI-compatible chat endpoint at ECHO_BASE_URL with its key in ECHO_API_KEY, which sends
one header of its own with every request and paces with rate-limit headers of its own names (`echo-ratelimit-*`,
as Anthropic's OpenAI-compatible endpoint sends `anthropic-ratelimit-*`). No Batch API.
"""

from __future__ import annotations

from typing import Any, Mapping

import openai

from capjudge.judges.client.endpoints import normalised_url, public_url
from capjudge.judges.client.rate_limits import RateLimitHeaders

ECHO_HEADER = "x-echo-backend"


class EchoBackend:
    name = "echo"
    api_type = "echo"
    key_variable = "ECHO_API_KEY"
    endpoint_variable = "ECHO_BASE_URL"
    rate_limit_headers = RateLimitHeaders(
        limit_requests="echo-ratelimit-requests-limit", remaining_requests="echo-ratelimit-requests-remaining",
        reset_requests="echo-ratelimit-requests-reset", limit_tokens="echo-ratelimit-tokens-limit",
        remaining_tokens="echo-ratelimit-tokens-remaining", reset_tokens="echo-ratelimit-tokens-reset",
        retry_after_ms="echo-retry-after-ms", retry_after="echo-retry-after")
    has_batch_api = False
    batch_endpoint = "/v1/chat/completions"
    has_logprobs = False
    models_endpoint_knows_model = True

    def select(self, config: Any) -> "EchoBackend":
        return self

    def settings(self, env: Mapping[str, str]) -> dict[str, object]:
        return {"api_key": env.get("ECHO_API_KEY"), "base_url": env.get("ECHO_BASE_URL")}

    def validate(self, config: Any) -> None:
        from capjudge.judges.client.endpoints import ConfigError

        if not config.base_url:
            raise ConfigError("API_TYPE=echo needs ECHO_BASE_URL")

    def needs_key(self, config: Any) -> bool:
        return True

    def build_sdk(self, config: Any, **common: Any) -> openai.OpenAI:
        return openai.OpenAI(api_key=config.api_key, base_url=config.base_url,
                             default_headers={ECHO_HEADER: "1"}, **common)

    def endpoint_label(self, config: Any) -> str:
        return f"echo:{public_url(config.base_url or '')}"

    def endpoint_identity(self, config: Any) -> str:
        return f"echo:{normalised_url(config.base_url or '')}"

    def asks_for_identity(self, config: Any) -> bool:
        return False


ECHO = EchoBackend()

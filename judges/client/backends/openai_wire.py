"""What OpenAI's API, an OpenAI-compatible server and a local one share: `API_TYPE=openai`, OPENAI_API_KEY and
OPENAI_BASE_URL, the openai SDK client, the endpoint label and identity. Subclassed by openai_api (which picks
among the three), compatible_server and local_server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from capjudge.judges.client.endpoints import OPENAI_URL, normalise_base_url, normalised_url, public_url
from capjudge.judges.client.rate_limits import OPENAI_RATE_LIMIT_HEADERS

if TYPE_CHECKING:  # the SDK reads its environment variables when imported: only when a client is built
    import openai


class OpenAIWireBackend:
    name = "openai"
    api_type = "openai"
    key_variable = "OPENAI_API_KEY"
    endpoint_variable = "OPENAI_BASE_URL"
    rate_limit_headers = OPENAI_RATE_LIMIT_HEADERS
    has_batch_api: bool | None = True
    batch_endpoint = "/v1/chat/completions"
    has_logprobs = True
    models_endpoint_knows_model = True

    def select(self, config: Any) -> "OpenAIWireBackend":
        return self

    def settings(self, env: Mapping[str, str]) -> dict[str, object]:
        # lmms-eval's OPENAI_API_URL is accepted too (config.normalise_base_url trims its /chat/completions).
        return {"api_key": env.get("OPENAI_API_KEY"),
                "base_url": env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_URL")}

    def validate(self, config: Any) -> None:
        return None

    def needs_key(self, config: Any) -> bool:
        return True

    def build_sdk(self, config: Any, **common: Any) -> openai.OpenAI:
        # Local servers accept any key; the SDK refuses to start without one.
        import openai

        return openai.OpenAI(api_key=config.api_key or "not-needed-for-local-server", base_url=config.base_url,
                             **common)

    def endpoint_label(self, config: Any) -> str:
        return public_url(config.base_url or OPENAI_URL)

    def endpoint_identity(self, config: Any) -> str:
        return normalised_url(normalise_base_url(config.base_url) if config.base_url else OPENAI_URL)

    def asks_for_identity(self, config: Any) -> bool:
        # OpenAI's names are dated snapshots: it is asked nothing, and its keys never change.
        return False


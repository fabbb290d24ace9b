"""Azure OpenAI (`API_TYPE=azure`): AZURE_OPENAI_API_KEY (else OPENAI_API_KEY), AZURE_OPENAI_ENDPOINT and
AZURE_OPENAI_API_VERSION (else OPENAI_API_VERSION, else `DEFAULT_AZURE_API_VERSION`). The judge model is the
deployment name, which its models endpoint does not know; a batch deployment names the batch line's URL without
`/v1`. It sends OpenAI's `remaining` rate-limit headers and `retry-after-ms`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from capjudge.judges.client.endpoints import DEFAULT_AZURE_API_VERSION, ConfigError, normalised_url, public_url
from capjudge.judges.client.rate_limits import OPENAI_RATE_LIMIT_HEADERS

if TYPE_CHECKING:  # the SDK reads its environment variables when imported: only when a client is built
    import openai

    from capjudge.judges.client.backends.protocol import JudgeBackend


class AzureOpenAI:
    name = "azure"
    api_type = "azure"
    key_variable = "AZURE_OPENAI_API_KEY"
    endpoint_variable = "AZURE_OPENAI_ENDPOINT"
    rate_limit_headers = OPENAI_RATE_LIMIT_HEADERS
    has_batch_api: bool | None = True
    batch_endpoint = "/chat/completions"
    has_logprobs = True
    models_endpoint_knows_model = False

    def select(self, config: Any) -> "JudgeBackend":
        return self

    def settings(self, env: Mapping[str, str]) -> dict[str, object]:
        return {
            "api_key": env.get("AZURE_OPENAI_API_KEY") or env.get("OPENAI_API_KEY"),
            "azure_endpoint": env.get("AZURE_OPENAI_ENDPOINT"),
            "api_version": (env.get("AZURE_OPENAI_API_VERSION") or env.get("OPENAI_API_VERSION")
                            or DEFAULT_AZURE_API_VERSION),
        }

    def validate(self, config: Any) -> None:
        if not config.azure_endpoint:
            raise ConfigError("API_TYPE=azure needs AZURE_OPENAI_ENDPOINT (or azure_endpoint=...)")

    def needs_key(self, config: Any) -> bool:
        return True

    def build_sdk(self, config: Any, **common: Any) -> openai.OpenAI:
        import openai

        return openai.AzureOpenAI(api_key=config.api_key, azure_endpoint=config.azure_endpoint,
                                  api_version=config.api_version, **common)

    def endpoint_label(self, config: Any) -> str:
        return f"azure:{public_url(config.azure_endpoint or '')}"

    def endpoint_identity(self, config: Any) -> str:
        return f"azure:{normalised_url(config.azure_endpoint or '')}"

    def asks_for_identity(self, config: Any) -> bool:
        return False  # a deployment name: asked nothing, its keys never change


AZURE_OPENAI = AzureOpenAI()

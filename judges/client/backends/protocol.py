"""What every judge backend declares (`JudgeBackend`): the one interface the judge client, the pre-flight, a
panel, the served-judge check and the Batch stage ask instead of branching on `api_type`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:
    import openai
    from capjudge.judges.client.rate_limits import RateLimitHeaders


@runtime_checkable
class JudgeBackend(Protocol):
    name: str  # what this backend is called in messages and docs ("openai", "azure", "compatible", "local")
    api_type: str  # the API_TYPE value (a panel member's `api_type`) that selects it
    key_variable: str  # where its API key is read from, named in messages
    endpoint_variable: str  # where its endpoint is read from, named in messages
    rate_limit_headers: "RateLimitHeaders"  # the names of the headers its server paces us with
    # True: it has OpenAI's Files + Batches API; False: it has none (--batch is refused before any work);
    # None: the server is asked (a compatible server may or may not have one; the pre-flight lists batches).
    has_batch_api: bool | None
    batch_endpoint: str  # the `url` of each line of a batch input file
    has_logprobs: bool  # whether replies carry token logprobs when asked (G-VEval's expected scores need them)
    # Whether its models endpoint knows the judge model by the name requests carry (not Azure's: a deployment).
    models_endpoint_knows_model: bool

    def select(self, config: Any) -> "JudgeBackend":
        """The backend that serves `config` (itself, or a more precise one of its API_TYPE)."""

    def settings(self, env: Mapping[str, str]) -> dict[str, object]:
        """The configuration fields this backend reads from the environment (key, endpoint, API version)."""

    def validate(self, config: Any) -> None:
        """A ConfigError for a setting this backend needs and `config` lacks (not the key: see `needs_key`)."""

    def needs_key(self, config: Any) -> bool:
        """Whether requests need a real API key (a server on this machine takes any)."""

    def build_sdk(self, config: Any, **common: Any) -> "openai.OpenAI":
        """The openai SDK client that sends this judge's requests (`common`: timeout, retries, HTTP client)."""

    def endpoint_label(self, config: Any) -> str:
        """Where requests go, for messages and metadata, with no credentials; also names the budget folder."""

    def endpoint_identity(self, config: Any) -> str:
        """The server, one spelling per server: part of a panel member's cache keys."""

    def asks_for_identity(self, config: Any) -> bool:
        """Whether the server is asked (GET /models) which model it serves, for the cache key."""

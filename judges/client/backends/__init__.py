"""The judge backends, one module each, behind one registry: which `API_TYPE` names which backend.

A backend says how a judge is reached (its environment variables and key, how the SDK client is built, the
endpoint it names for cache keys and budget folders), which rate-limit headers it reads, and whether it has a
Batch API and logprobs (`JudgeBackend`, in capjudge.judges.client.backends.protocol). `backend_of` is the one
place a configuration's `api_type` is read; everything else asks the backend object. Adding a backend is one
module and one `register_backend` call (README, "The judge client": "Adding a backend").
"""

from __future__ import annotations

from typing import Any

from capjudge.judges.client.backends.azure_openai import AZURE_OPENAI
from capjudge.judges.client.backends.openai_api import OPENAI_API
from capjudge.judges.client.backends.protocol import JudgeBackend

__all__ = ["JudgeBackend", "backend_of", "known_api_types", "named", "register_backend", "unregister_backend"]

# API_TYPE value -> its backend, in the order the names are listed in messages.
_BY_API_TYPE: dict[str, JudgeBackend] = {}


def register_backend(backend: JudgeBackend) -> JudgeBackend:
    """Make `backend` the one `API_TYPE=<backend.api_type>` selects (a later registration replaces it)."""
    _BY_API_TYPE[backend.api_type] = backend
    return backend


def unregister_backend(api_type: str) -> None:
    """Forget a registered backend (a test's own, once the test is done)."""
    _BY_API_TYPE.pop(api_type, None)


def known_api_types() -> tuple[str, ...]:
    return tuple(_BY_API_TYPE)


def named(api_type: str, origin: str = "API_TYPE") -> JudgeBackend:
    """The backend registered as `api_type`, or a ConfigError naming `origin` (the variable or key that said it)
    and every known name: one line, before any work."""
    from capjudge.judges.client.endpoints import ConfigError

    backend = _BY_API_TYPE.get(api_type)
    if backend is None:
        names = [repr(name) for name in _BY_API_TYPE]
        choices = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise ConfigError(f"{origin} must be {choices}, got {api_type!r}")
    return backend


def backend_of(config: Any) -> JudgeBackend:
    """The backend that serves `config`: its API_TYPE's, refined by where it points (an OpenAI-type judge at a
    vLLM server is the compatible-server backend, at this machine the local one). The one read of `api_type`."""
    return named(config.api_type, "api_type").select(config)


register_backend(OPENAI_API)
register_backend(AZURE_OPENAI)

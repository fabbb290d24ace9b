"""Where the judge client gets its settings: explicit arguments first, then the environment.

Environment variables (read only when `JudgeConfig.from_env` is called, never at import time):

- `OPENAI_API_KEY`; `OPENAI_BASE_URL` (lmms-eval's `OPENAI_API_URL` is accepted too; a URL ending in
  `/chat/completions`, as lmms-eval writes it, is trimmed to the API root).
- `API_TYPE=azure` with `AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT`, `AZURE_OPENAI_API_VERSION`
  (the judge model is then the Azure deployment name).
- `MODEL_VERSION` (lmms-eval's name for the judge model) or `CAPJUDGE_JUDGE_MODEL`.
- `CAPJUDGE_CACHE` (SQLite file; default `~/.cache/capjudge/judge_cache.sqlite`), `CAPJUDGE_NO_CACHE=1`,
  `CAPJUDGE_MAX_CONCURRENCY`, `CAPJUDGE_TIMEOUT`, `CAPJUDGE_MAX_ATTEMPTS`, `CAPJUDGE_BREAKER_THRESHOLD`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Mapping
from urllib.parse import urlparse

ApiType = Literal["openai", "azure"]

DEFAULT_AZURE_API_VERSION = "2024-10-21"
# Servers on this machine (llama.cpp, vLLM, the test server) accept any key; OpenAI and Azure do not.
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


class ConfigError(ValueError):
    """A judge setting is missing or wrong. Raised once, before any item is judged."""


@dataclass(frozen=True)
class JudgeConfig:
    model: str | None = None
    api_type: ApiType = "openai"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    azure_endpoint: str | None = None
    api_version: str | None = None
    timeout: float = 60.0
    # Transport attempts per request (429/5xx/timeouts/connection errors), the first included.
    max_attempts: int = 6
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # Requests in flight from this process, sync and async together.
    max_concurrency: int = 16
    cache_path: Path | None = None
    use_cache: bool = True
    # Consecutive failures no retry can fix (refused, DNS, 401/403/404) before the rest fail fast; 0: never.
    breaker_threshold: int = 5
    # Requests and tokens per minute for ALL processes of a run on this machine (None: no limit of ours; the
    # API's rate-limit headers still pace). `max_concurrency` is machine-wide too (capjudge.judges.budget).
    rpm: int | None = None
    tpm: int | None = None
    rate_window: float = 60.0  # the seconds RPM/TPM count over; shorter only to test pacing quickly

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> "JudgeConfig":
        """Arguments given here win; anything left as None is taken from `env` (default os.environ)."""
        env = os.environ if env is None else env
        given = {key: value for key, value in overrides.items() if value is not None}
        api_type = str(given.get("api_type") or env.get("API_TYPE") or "openai").lower()
        if api_type not in ("openai", "azure"):
            raise ConfigError(f"API_TYPE must be 'openai' or 'azure', got {api_type!r}")
        values: dict[str, object] = {"api_type": api_type}
        values["model"] = configured_model(env)
        if api_type == "azure":
            values["api_key"] = env.get("AZURE_OPENAI_API_KEY") or env.get("OPENAI_API_KEY")
            values["azure_endpoint"] = env.get("AZURE_OPENAI_ENDPOINT")
            values["api_version"] = (
                env.get("AZURE_OPENAI_API_VERSION") or env.get("OPENAI_API_VERSION") or DEFAULT_AZURE_API_VERSION
            )
        else:
            values["api_key"] = env.get("OPENAI_API_KEY")
            values["base_url"] = env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_URL")
        for name, env_name, kind in (
            ("max_concurrency", "CAPJUDGE_MAX_CONCURRENCY", int),
            ("timeout", "CAPJUDGE_TIMEOUT", float),
            ("max_attempts", "CAPJUDGE_MAX_ATTEMPTS", int),
            ("breaker_threshold", "CAPJUDGE_BREAKER_THRESHOLD", int),
            ("rpm", "CAPJUDGE_RPM", int),
            ("tpm", "CAPJUDGE_TPM", int),
            ("rate_window", "CAPJUDGE_RATE_WINDOW_SECONDS", float),
        ):
            if env.get(env_name):
                try:
                    values[name] = kind(env[env_name])
                except ValueError:
                    raise ConfigError(f"{env_name} must be a number, got {env[env_name]!r}") from None
        if env.get("CAPJUDGE_CACHE"):
            values["cache_path"] = Path(env["CAPJUDGE_CACHE"]).expanduser()
        if env.get("CAPJUDGE_NO_CACHE", "").lower() in ("1", "true", "yes"):
            values["use_cache"] = False
        values.update(given)
        if values.get("base_url"):
            values["base_url"] = normalise_base_url(str(values["base_url"]))
        if values.get("cache_path") is None:
            values["cache_path"] = Path("~/.cache/capjudge/judge_cache.sqlite").expanduser()
        config = cls(**values)  # type: ignore[arg-type]
        config.validate()
        return config

    def with_overrides(self, **changes: object) -> "JudgeConfig":
        config = replace(self, **changes)  # type: ignore[arg-type]
        config.validate()
        return config

    @property
    def is_local(self) -> bool:
        """True for a server on this machine, which needs no real key."""
        if self.api_type != "openai" or not self.base_url:
            return False
        return (urlparse(self.base_url).hostname or "") in LOOPBACK_HOSTS

    @property
    def endpoint_label(self) -> str:
        """Where requests go, for logs and result metadata (never includes the key)."""
        if self.api_type == "azure":
            return f"azure:{self.azure_endpoint}"
        return self.base_url or "https://api.openai.com/v1"

    def validate(self) -> None:
        if self.max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be at least 1, got {self.max_concurrency}")
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.breaker_threshold < 0:
            raise ConfigError(f"breaker_threshold must be >= 0 (0 turns it off), got {self.breaker_threshold}")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"CAPJUDGE_{name.upper()} must be at least 1 (unset it for no limit), got {value}")
        if self.rate_window <= 0:
            raise ConfigError(f"CAPJUDGE_RATE_WINDOW_SECONDS must be positive, got {self.rate_window}")
        if self.timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {self.timeout}")
        if self.api_type == "azure" and not self.azure_endpoint:
            raise ConfigError("API_TYPE=azure needs AZURE_OPENAI_ENDPOINT (or azure_endpoint=...)")
        if not self.api_key and not self.is_local:
            where = "AZURE_OPENAI_API_KEY" if self.api_type == "azure" else "OPENAI_API_KEY"
            raise ConfigError(
                f"no API key for the judge at {self.endpoint_label}: set {where}, or point OPENAI_BASE_URL at a "
                "local OpenAI-compatible server (e.g. `capjudge serve-local`), which needs none"
            )


def configured_model(env: Mapping[str, str] | None = None) -> str | None:
    """The judge model the environment names (MODEL_VERSION, lmms-eval's name, else CAPJUDGE_JUDGE_MODEL),
    or None for each judge's published model. One place, so `render` and a real run never disagree."""
    env = os.environ if env is None else env
    return env.get("MODEL_VERSION") or env.get("CAPJUDGE_JUDGE_MODEL") or None


def normalise_base_url(url: str) -> str:
    """Accept lmms-eval's full endpoint URL as well as an API root."""
    url = url.rstrip("/")
    suffix = "/chat/completions"
    return url[: -len(suffix)] if url.endswith(suffix) else url

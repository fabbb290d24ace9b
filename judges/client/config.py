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
from urllib.parse import parse_qsl, urlencode, urlparse, urlsplit, urlunsplit

ApiType = Literal["openai", "azure"]

DEFAULT_AZURE_API_VERSION = "2024-10-21"
# Servers on this machine (llama.cpp, vLLM, the test server) accept any key; OpenAI and Azure do not.
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
# A query parameter whose name holds one of these carries a credential (`?api-key=`, `?key=`, `?token=`,
# `?sig=`): it is left out wherever an endpoint is shown. Others (Azure's `api-version`) are kept.
CREDENTIAL_PARAM_WORDS = ("key", "token", "secret", "pass", "pwd", "auth", "sig", "credential", "session")
# What a credential must look like before any text is rewritten for it (see `looks_like_secret`).
REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 16
MIN_SECRET_LENGTH_WITH_DIGIT = 8


class ConfigError(ValueError):
    """A judge setting is missing or wrong. Raised once, before any item is judged."""


@dataclass(frozen=True)
class JudgeConfig:
    model: str | None = None
    api_type: ApiType = "openai"
    # Not in repr: a URL may carry credentials (`http://user:pass@proxy/v1`); `endpoint_label` is the safe form.
    base_url: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    azure_endpoint: str | None = field(default=None, repr=False)
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
    # API's rate-limit headers still pace). `max_concurrency` is machine-wide too (capjudge.judges.client.budget).
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
        """Where requests go, for logs, messages and result metadata: never the key, nor credentials the URL
        carries (userinfo, `?api-key=`-style parameters; see `public_url`)."""
        if self.api_type == "azure":
            return f"azure:{public_url(self.azure_endpoint or '')}"
        return public_url(self.base_url or "https://api.openai.com/v1")

    @property
    def redactions(self) -> tuple[tuple[str, str], ...]:
        """(text, replacement) for every credential this configuration holds, for whatever capjudge stores or
        prints: a URL's userinfo and credential parameters wherever they are quoted (distinctive enough to
        remove at any length), and each credential on its own where it `looks_like_secret`."""
        found: list[tuple[str, str]] = []
        for url in (self.base_url, self.azure_endpoint):
            if url:
                found.extend(url_redactions(url))
        if looks_like_secret(self.api_key):
            found.append((str(self.api_key), REDACTED))
        return tuple(found)

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


def public_url(url: str) -> str:
    """`url` as it may be shown or recorded: no userinfo (`user:pass@`), no credential query parameters."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True)
                       if not _is_credential_param(name)])
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def url_redactions(url: str) -> list[tuple[str, str]]:
    """(text, replacement) for the credentials `url` carries: its userinfo (`user:pass@`, removed), each
    credential parameter (`api-key=...`, value replaced), and each credential value on its own where it
    `looks_like_secret`."""
    parts = urlsplit(url)
    found: list[tuple[str, str]] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        found.append((userinfo + at, ""))
    for piece in parts.query.split("&"):
        name, equals, value = piece.partition("=")
        if equals and value and _is_credential_param(name):
            found.append((piece, f"{name}={REDACTED}"))
    values = [parts.username, parts.password] + [v for n, v in parse_qsl(parts.query) if _is_credential_param(n)]
    found += [(value, REDACTED) for value in values if looks_like_secret(value)]
    return found


def _is_credential_param(name: str) -> bool:
    return any(word in name.lower() for word in CREDENTIAL_PARAM_WORDS)


def looks_like_secret(text: str | None) -> bool:
    """Whether `text`, a configured credential, is worth rewriting other text for wherever it appears.

    Real keys are long random strings (OpenAI `sk-...` 50+ characters, Azure 32 hex digits). Local servers take
    any key, and placeholders are common (`none`, `EMPTY` for vLLM, `not-needed`): redacting those would rewrite
    every judge reply that happens to contain the word. So a credential counts when it has at least
    `MIN_SECRET_LENGTH` characters, or at least `MIN_SECRET_LENGTH_WITH_DIGIT` with a digit in it (words have
    none); shorter ones are not rewritten anywhere (they are still never written out by capjudge itself)."""
    if not text:
        return False
    return len(text) >= MIN_SECRET_LENGTH or (len(text) >= MIN_SECRET_LENGTH_WITH_DIGIT and any(c.isdigit() for c in text))


def normalise_base_url(url: str) -> str:
    """Accept lmms-eval's full endpoint URL as well as an API root."""
    url = url.rstrip("/")
    suffix = "/chat/completions"
    return url[: -len(suffix)] if url.endswith(suffix) else url

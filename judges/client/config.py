"""Where the judge client gets its settings: explicit arguments first, then the environment.

Environment variables (read only when `JudgeConfig.from_env` is called, never at import time):

- `OPENAI_API_KEY`; `OPENAI_BASE_URL` (lmms-eval's `OPENAI_API_URL` is accepted too; a URL ending in
  `/chat/completions`, as lmms-eval writes it, is trimmed to the API root).
- `API_TYPE=azure` with `AZURE_OPENAI_API_KEY`, `AZURE_OPENAI_ENDPOINT`, `AZURE_OPENAI_API_VERSION`
  (the judge model is then the Azure deployment name).
- `MODEL_VERSION` (lmms-eval's name for the judge model) or `CAPJUDGE_JUDGE_MODEL`.
- `CAPJUDGE_CACHE` (SQLite file; default `~/.cache/capjudge/judge_cache.sqlite`), `CAPJUDGE_NO_CACHE=1`,
  `CAPJUDGE_MAX_CONCURRENCY`, `CAPJUDGE_TIMEOUT`, `CAPJUDGE_MAX_ATTEMPTS`, `CAPJUDGE_BREAKER_THRESHOLD`.

Every count and duration has an upper bound (`MAX_CONCURRENCY` ... `MAX_RATE_WINDOW_SECONDS` below), checked
when the configuration is built, before any work: generous for any real judge, but a slip (an extra zero, a
pasted number) is one ConfigError instead of thousands of threads and slot files or a run that never times out.
A judge model name with leading or trailing whitespace is refused the same way (a server would be asked for a
model of exactly that name).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Mapping
from urllib.parse import parse_qsl, urlsplit

from capjudge.judges.client.endpoints import (  # noqa: F401 - re-exported: what callers import from here
    DEFAULT_AZURE_API_VERSION,
    OPENAI_URL,
    ConfigError,
    is_credential_param,
    is_loopback,
    normalise_base_url,
    normalised_url,
    public_url,
)

if TYPE_CHECKING:
    from capjudge.judges.client.backends import JudgeBackend

# A registered backend's API_TYPE ("openai", "azure", ...): capjudge.judges.client.backends.
ApiType = str

# What a credential must look like before any text is rewritten for it (see `looks_like_secret`).
REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 16
MIN_SECRET_LENGTH_WITH_DIGIT = 8

# Upper bounds of the counts and durations a user configures (issue 36).
MAX_CONCURRENCY = 1024  # requests in flight per machine: each holds a thread and a slot lock file
MAX_RPM = 1_000_000  # requests per minute; OpenAI's highest tiers are in the tens of thousands
MAX_TPM = 10_000_000_000  # tokens per minute; the highest published tiers are in the hundreds of millions
MAX_TIMEOUT_SECONDS = 3600.0  # one request; a slow local judge on a long video answers in minutes, not hours
MAX_ATTEMPTS = 100  # transport attempts per request; the backoff is capped at 30 s, so 100 is close to an hour
MAX_BREAKER_THRESHOLD = 100_000  # consecutive unfixable failures before the rest fail fast (0 turns it off)
MAX_RATE_WINDOW_SECONDS = 3600.0  # the window RPM/TPM count over (60 s; shorter only to test pacing)


@dataclass(frozen=True)
class Bound:
    """The range a configured number must lie in, and the variable that sets it for the single judge."""

    variable: str
    lowest: float | None  # inclusive; None: any number above 0 (a duration)
    highest: float
    unset_allowed: bool = False  # rpm, tpm: None is no limit of ours
    hint: str = ""  # said with a number below `lowest`


BOUNDS = {
    "max_concurrency": Bound("CAPJUDGE_MAX_CONCURRENCY", 1, MAX_CONCURRENCY),
    "timeout": Bound("CAPJUDGE_TIMEOUT", None, MAX_TIMEOUT_SECONDS),
    "max_attempts": Bound("CAPJUDGE_MAX_ATTEMPTS", 1, MAX_ATTEMPTS),
    "breaker_threshold": Bound("CAPJUDGE_BREAKER_THRESHOLD", 0, MAX_BREAKER_THRESHOLD, hint="0 turns it off"),
    "rpm": Bound("CAPJUDGE_RPM", 1, MAX_RPM, unset_allowed=True, hint="unset it for no limit"),
    "tpm": Bound("CAPJUDGE_TPM", 1, MAX_TPM, unset_allowed=True, hint="unset it for no limit"),
    "rate_window": Bound("CAPJUDGE_RATE_WINDOW_SECONDS", None, MAX_RATE_WINDOW_SECONDS),
}


def bound_problem(setting: str, value: float | None) -> str | None:
    """What is wrong with `value` for the bounded `setting` ("must be at least 1 ..., got 0"), or None.
    Written so that NaN fails every comparison, and infinity the upper bound."""
    bound = BOUNDS[setting]
    if value is None:
        return None if bound.unset_allowed else "must be set"
    if bound.lowest is None and not value > 0:
        return f"must be positive, got {value}"
    if bound.lowest is not None and not value >= bound.lowest:
        hint = f" ({bound.hint})" if bound.hint else ""
        return f"must be at least {_number(bound.lowest)}{hint}, got {value}"
    if not value <= bound.highest:
        return f"must be at most {_number(bound.highest)}, got {value}"
    return None


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:g}"


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
    # Where this judge's replies are kept apart from another judge's of the same model name (a panel sets it,
    # see capjudge.judges.client.panel): its normalised endpoint, part of every cache key. None (every single
    # judge, and panel members whose model names differ): keys as capjudge has always computed them.
    cache_scope: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, require_key: bool = True,
                 **overrides: object) -> "JudgeConfig":
        """Arguments given here win; anything left as None is taken from `env` (default os.environ).
        `require_key=False`: a configuration that may lack its key (see `validate`), never one to send with."""
        env = os.environ if env is None else env
        given = {key: value for key, value in overrides.items() if value is not None}
        from capjudge.judges.client import backends

        api_type = str(given.get("api_type") or env.get("API_TYPE") or "openai").lower()
        backend = backends.named(api_type)  # one line naming API_TYPE and the known backends, if none is
        values: dict[str, object] = {"api_type": api_type}
        values["model"] = configured_model(env)
        model_origin = "the `model` argument" if given.get("model") else _model_variable(env)
        values.update(backend.settings(env))  # its key, endpoint, API version
        from_variables = _numbers_from_env(env)
        values.update(from_variables)
        if env.get("CAPJUDGE_CACHE"):
            values["cache_path"] = Path(env["CAPJUDGE_CACHE"]).expanduser()
        if env.get("CAPJUDGE_NO_CACHE", "").lower() in ("1", "true", "yes"):
            values["use_cache"] = False
        values.update(given)
        # A problem is named by where the value came from: the variable, unless an argument replaced it.
        for setting in (setting for setting in from_variables if setting not in given):
            problem = bound_problem(setting, from_variables[setting])
            if problem is not None:
                raise ConfigError(f"{BOUNDS[setting].variable} {problem}")
        model_problem = whitespace_problem(values.get("model"))  # type: ignore[arg-type]
        if model_problem is not None:
            raise ConfigError(f"{model_origin}: the judge model {values['model']!r} {model_problem}")
        if values.get("base_url"):
            values["base_url"] = normalise_base_url(str(values["base_url"]))
        if values.get("cache_path") is None:
            values["cache_path"] = Path("~/.cache/capjudge/judge_cache.sqlite").expanduser()
        config = cls(**values)  # type: ignore[arg-type]
        config.validate(require_key=require_key)
        return config

    def with_overrides(self, *, require_key: bool = True, **changes: object) -> "JudgeConfig":
        config = replace(self, **changes)  # type: ignore[arg-type]
        config.validate(require_key=require_key)
        return config

    @property
    def backend(self) -> "JudgeBackend":
        """The judge backend this configuration selects (capjudge.judges.client.backends)."""
        from capjudge.judges.client.backends import backend_of

        return backend_of(self)

    @property
    def is_local(self) -> bool:
        """True for a server on this machine, which needs no real key."""
        return not self.backend.needs_key(self)

    @property
    def endpoint_label(self) -> str:
        """Where requests go, for logs, messages and result metadata: never the key, nor credentials the URL
        carries (userinfo, `?api-key=`-style parameters; see `public_url`)."""
        return self.backend.endpoint_label(self)

    @property
    def endpoint_identity(self) -> str:
        """The server this judge's requests reach, one spelling per server (see `normalised_url`): what
        tells two judges of the same model name apart."""
        return self.backend.endpoint_identity(self)

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

    def validate(self, *, require_key: bool = True) -> None:
        """Every setting within its bounds, and (`require_key`) a key unless the server is local. Without the key
        check it is where a judge is and what it asks (endpoint, model, cache, budget folder), for what reads
        what earlier runs left (`capjudge estimate`) and sends nothing."""
        for setting in BOUNDS:
            problem = bound_problem(setting, getattr(self, setting))
            if problem is not None:
                raise ConfigError(f"{setting} {problem}")
        model_problem = whitespace_problem(self.model)
        if model_problem is not None:
            raise ConfigError(f"the judge model {self.model!r} {model_problem}")
        backend = self.backend
        backend.validate(self)
        if require_key and not self.api_key and backend.needs_key(self):
            where = backend.key_variable
            raise ConfigError(
                f"no API key for the judge at {self.endpoint_label}: set {where}, or point OPENAI_BASE_URL at a "
                "local OpenAI-compatible server (e.g. `capjudge serve-local`), which needs none"
            )


_NUMBER_VARIABLES = {"max_concurrency": int, "timeout": float, "max_attempts": int, "breaker_threshold": int,
                     "rpm": int, "tpm": int, "rate_window": float}


def _numbers_from_env(env: Mapping[str, str]) -> dict[str, int | float]:
    """The numeric settings the environment gives (CAPJUDGE_MAX_CONCURRENCY, ...), by setting name."""
    numbers: dict[str, int | float] = {}
    for setting, kind in _NUMBER_VARIABLES.items():
        variable = BOUNDS[setting].variable
        if env.get(variable):
            try:
                numbers[setting] = kind(env[variable])
            except ValueError:
                raise ConfigError(f"{variable} must be a number, got {env[variable]!r}") from None
    return numbers


def whitespace_problem(name: str | None) -> str | None:
    """Why a judge model name cannot be sent as given (leading or trailing whitespace: `" gpt-4o"` is another
    model to the API, or an error after the run generated everything), or None."""
    if name is not None and name != name.strip():
        return "has leading or trailing whitespace (remove it: the name is sent exactly as given)"
    return None


def _model_variable(env: Mapping[str, str]) -> str:
    """The variable `configured_model` took the judge model from."""
    return "MODEL_VERSION" if env.get("MODEL_VERSION") else "CAPJUDGE_JUDGE_MODEL"


def configured_model(env: Mapping[str, str] | None = None) -> str | None:
    """The judge model the environment names (MODEL_VERSION, lmms-eval's name, else CAPJUDGE_JUDGE_MODEL),
    or None for each judge's published model. One place, so `render` and a real run never disagree."""
    env = os.environ if env is None else env
    return env.get("MODEL_VERSION") or env.get("CAPJUDGE_JUDGE_MODEL") or None


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
        if equals and value and is_credential_param(name):
            found.append((piece, f"{name}={REDACTED}"))
    values = [parts.username, parts.password] + [v for n, v in parse_qsl(parts.query) if is_credential_param(n)]
    found += [(value, REDACTED) for value in values if looks_like_secret(value)]
    return found


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

"""A panel of judges: several judge endpoints and models that judge every item of one run, read from a file.

One judge model is one opinion; a panel of several (often smaller, different families) pools them and shows
where they disagree (Verga et al. 2024, "Replacing Judges with Juries"). A panel file names each member and
where it is; everything else (the rubric, the prompt, the parser) stays the task's:

    # panel.yaml (YAML or JSON)
    quorum: 2                      # members that must judge an item for the panel to score it (default: a majority)
    members:
      - name: gpt4o                # [A-Za-z0-9_.-], up to 40 characters: it names the member's metrics (`gveval_mean@gpt4o`)
        model: gpt-4o-2024-08-06
        api_key_env: OPENAI_API_KEY     # the NAME of the variable holding the key; a key itself is refused
        price_input: 2.50          # optional, USD per 1M tokens: `capjudge estimate` prices this member with them
        price_output: 10.00
      - name: qwen
        model: Qwen/Qwen2.5-VL-7B-Instruct
        base_url: http://gpu-box:8000/v1
        max_concurrency: 32        # optional, per member: max_concurrency, rpm, tpm, timeout
      - name: azure4o
        api_type: azure
        azure_endpoint: https://NAME.openai.azure.com
        model: my-gpt4o-deployment
        api_key_env: AZURE_OPENAI_API_KEY

A run uses a panel when `CAPJUDGE_PANEL` names the file (or a task's metadata has `panel: PATH`). Each member
is its own `JudgeConfig`: its own client, concurrency bound, rate-limit budget (kept per endpoint and model)
and reply-cache keys (the request body names the member's model; where two members share a model name, on
two servers, each key also names the member's normalised endpoint, so neither is ever answered from the
other's replies). Two members with the same model at the same server, however its URL spells it
(`localhost` or `127.0.0.1`, `HOST` or `host`, with or without the default port), are one judge: refused.
What the environment says about the single judge (OPENAI_BASE_URL, MODEL_VERSION, API_TYPE, keys,
CAPJUDGE_RPM/TPM/MAX_CONCURRENCY) does not leak into a member: a member is exactly what its entry says.
Client-wide settings (the cache file, timeouts' defaults, retries, the breaker) still come from the
environment. Every problem is one ConfigError naming the file, the member and the field, raised before any
item is judged; a value that may hold a credential (`api_key_env`, a URL) is never quoted in it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capjudge.judges.client import backends
from capjudge.judges.client.config import (
    ConfigError,
    JudgeConfig,
    bound_problem,
    public_url,
    whitespace_problem,
)

PANEL_VARIABLE = "CAPJUDGE_PANEL"
MEMBER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
# Members a panel may name: far more opinions than any jury uses, but a file listing thousands of judges (each
# with its own client, threads and budget files) is a mistake to refuse before work starts.
MAX_PANEL_MEMBERS = 64
# `api_key_env` names a variable as shells write them. A key pasted there instead fails this (OpenAI's and
# Anthropic's have dashes, Azure's 32 hex digits hold some 20 digits, Google's mix cases and digits), and is
# then never quoted back in a message.
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_DIGITS_IN_VARIABLE_NAME = 8
# Separates a metric from the member it belongs to: `gveval_mean@qwen`.
MEMBER_SEPARATOR = "@"
# The member name of one judge (no panel): a run judged by one judge is judged by one member, whose values are
# the run's own, so this name is never part of a metric or a file. Shared by who judges a task
# (capjudge.tasks.harness.who_judges) and who judged a run (capjudge.metrics.files.judged_by).
ONE_JUDGE = "judge"
# What a panel run logs beyond each member's metrics, named once here, below every layer that writes
# (capjudge.tasks.harness.panel_judging) or reads them (the leaderboard, the item report): the agreement
# figures, each with its interval's ends placed before the `@` (`panel_offset_ci_low@qwen`), a pair of members
# as `<a>~<b>`, and the record field of the panel's judgment and judge (`panel`).
ALPHA_METRIC = "panel_alpha"
KENDALL_METRIC = "panel_kendall_b"
OFFSET_METRIC = "panel_offset"
CI_LOW, CI_HIGH = "_ci_low", "_ci_high"
PAIR_SEPARATOR = "~"
PANEL_FIELD = "panel"

_MEMBER_KEYS = {"name", "model", "api_type", "base_url", "azure_endpoint", "api_version", "api_key_env",
                "max_concurrency", "rpm", "tpm", "timeout", "price_input", "price_output"}
# Text fields whose value may hold a credential (a key pasted by mistake, a URL's `user:pass@`): a problem with
# one names the field and its kind of value, never the value.
_SECRET_BEARING_KEYS = {"api_key_env", "base_url", "azure_endpoint"}
_NUMBER_KEYS = {"max_concurrency": int, "rpm": int, "tpm": int, "timeout": float}
# USD per 1M tokens, for `capjudge estimate` (no price list is built in: prices change).
_PRICE_KEYS = ("price_input", "price_output")
# The single judge's variables: a member never inherits them (it says where it is and which model it is).
_SINGLE_JUDGE_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_URL", "API_TYPE", "AZURE_OPENAI_API_KEY",
                           "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_VERSION", "OPENAI_API_VERSION", "MODEL_VERSION",
                           "CAPJUDGE_JUDGE_MODEL", "CAPJUDGE_MAX_CONCURRENCY", "CAPJUDGE_RPM", "CAPJUDGE_TPM")


@dataclass(frozen=True)
class PanelMember:
    name: str
    config: JudgeConfig | None  # None when the panel was read to count requests only (no key needed)
    model: str = ""
    prices: tuple[float, float] | None = None  # (input, output) USD per 1M tokens, when the file gives them
    endpoint: str = ""  # the server it asks, normalised (JudgeConfig.endpoint_identity): what tells judges apart
    # `config` without its key, built either way: where the member is (endpoint, model, cache, budget folder)
    # for what reads what its earlier runs left (`capjudge estimate`'s learned charge). Nothing sends with it.
    keyless: JudgeConfig | None = None


@dataclass(frozen=True)
class Panel:
    members: tuple[PanelMember, ...]
    quorum: int
    source: str  # the panel file, as given

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(member.name for member in self.members)

    def logged(self) -> dict[str, Any]:
        """What a run's records say about the panel (no key, no credential in a URL)."""
        return {"file": self.source, "quorum": self.quorum,
                "members": [{"name": m.name, "model": m.model,
                             "endpoint": m.config.endpoint_label if m.config is not None else None}
                            for m in self.members]}


def member_metric(metric: str, member: str) -> str:
    return f"{metric}{MEMBER_SEPARATOR}{member}"


def pair_name(first: str, second: str) -> str:
    """Two members as a pair's metrics name them: `harsh~lenient` (`panel_kendall_b@harsh~lenient`)."""
    return f"{first}{PAIR_SEPARATOR}{second}"


def member_pairs(members: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Every pair of `members`, each once, in their order (the order a panel run names its pairs in)."""
    return tuple((a, b) for i, a in enumerate(members) for b in members[i + 1:])


def configured_panel(metadata: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None, *,
                     configs: bool = True) -> Panel | None:
    """The panel this run judges with: CAPJUDGE_PANEL, else the task metadata's `panel`; None: one judge."""
    env = os.environ if env is None else env
    path = env.get(PANEL_VARIABLE) or (metadata or {}).get("panel")
    if not path:
        return None
    return load_panel(Path(str(path)), env, configs=configs)


def load_panel(path: Path, env: Mapping[str, str] | None = None, *, configs: bool = True) -> Panel:
    """Read and check a panel file; each member's configuration is built (and validated) here, unless
    `configs=False` (`capjudge estimate`, which sends nothing: then no key is read, and only each member's
    `keyless` configuration is built, which names where it is and opens nothing)."""
    import yaml

    env = os.environ if env is None else env
    where = f"panel file {path}"
    try:
        raw = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it ({error.strerror or error})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: not YAML or JSON ({type(error).__name__})") from None
    if not isinstance(raw, Mapping) or set(raw) - {"members", "quorum"}:
        extra = sorted(set(raw) - {"members", "quorum"}) if isinstance(raw, Mapping) else None
        raise ConfigError(f"{where}: expected an object with `members` (and optionally `quorum`)"
                          + (f"; unknown keys {extra}" if extra else ""))
    entries = raw.get("members")
    if not isinstance(entries, list) or len(entries) < 2:
        raise ConfigError(f"{where}: `members` must list at least two judges")
    if len(entries) > MAX_PANEL_MEMBERS:
        raise ConfigError(f"{where}: `members` lists {len(entries)} judges; a panel has at most {MAX_PANEL_MEMBERS}")
    members = tuple(_member(entry, position, where, env, configs) for position, entry in enumerate(entries))
    names = [member.name for member in members]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"{where}: two members are named {duplicate!r}")
    _refuse_one_judge_twice(members, where)
    members = _keyed_apart(members)
    quorum = raw.get("quorum", len(members) // 2 + 1)
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= len(members):
        raise ConfigError(f"{where}: `quorum` must be a whole number from 1 to {len(members)}, got {quorum!r}")
    return Panel(members, quorum, str(path))


def _refuse_one_judge_twice(members: Sequence[PanelMember], where: str) -> None:
    """Two members with the same model at the same server (after normalising how its URL is spelled) would get
    the same replies, the second from the first's cache: one judge counted twice, refused naming both."""
    first_at: dict[tuple[str, str], PanelMember] = {}
    for member in members:
        earlier = first_at.setdefault((member.endpoint, member.model), member)
        if earlier is not member:
            raise ConfigError(f"{where}: members {earlier.name!r} and {member.name!r} are both model {member.model!r} "
                              f"at {member.endpoint} (URLs compared with loopback names, case and default ports "
                              "normalised): one judge, not two opinions")


def _keyed_apart(members: tuple[PanelMember, ...]) -> tuple[PanelMember, ...]:
    """Members that share a model name (each at its own server, by now) get their endpoint into their cache
    keys, so neither is answered with the other's cached replies (issue 36: the second was never asked). The
    others keep the keys a single judge of their model has, so their caches stay valid."""
    models = [member.model for member in members]
    def scoped(member: PanelMember) -> PanelMember:
        config, keyless = member.config, member.keyless
        return replace(member,
                       config=None if config is None else config.with_overrides(cache_scope=member.endpoint),
                       keyless=None if keyless is None else keyless.with_overrides(cache_scope=member.endpoint,
                                                                                   require_key=False))
    return tuple(scoped(member) if models.count(member.model) > 1 else member for member in members)


def _member(entry: Any, position: int, where: str, env: Mapping[str, str], configs: bool = True) -> PanelMember:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: member {position + 1} is not an object")
    name = entry.get("name")
    if not isinstance(name, str) or not MEMBER_NAME.match(name):
        raise ConfigError(f"{where}: member {position + 1}: `name` must be 1-40 characters of A-Z a-z 0-9 _ . - "
                          f"(it names the member's metrics), got {name!r}")
    at = f"{where}: member {name!r}"
    if "api_key" in entry:
        raise ConfigError(f"{at}: an API key does not belong in a file; name its environment variable with "
                          "`api_key_env`")
    unknown = sorted(set(entry) - _MEMBER_KEYS)
    if unknown:
        raise ConfigError(f"{at}: unknown keys {unknown} (known: {', '.join(sorted(_MEMBER_KEYS))})")
    text = {key: entry[key] for key in ("model", "api_type", "base_url", "azure_endpoint", "api_version",
                                        "api_key_env") if entry.get(key) is not None}
    for key, value in text.items():
        if not isinstance(value, str) or not value.strip():
            got = repr(value) if key not in _SECRET_BEARING_KEYS else (
                "blank text" if isinstance(value, str) else f"a {type(value).__name__}")
            raise ConfigError(f"{at}: `{key}` must be non-empty text, got {got}")
    if "model" not in text:
        raise ConfigError(f"{at}: `model` is missing (a panel names each member's model)")
    model_problem = whitespace_problem(text["model"])
    if model_problem is not None:
        raise ConfigError(f"{at}: `model` {text['model']!r} {model_problem}")
    api_type = text.get("api_type", "openai")
    backends.named(api_type, f"{at}: `api_type`")  # one line naming the known backends, if none is
    numbers = _member_numbers(entry, at)
    prices = [entry.get(key) for key in _PRICE_KEYS]
    if any(price is not None for price in prices):
        if not all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and p >= 0 for p in prices):
            raise ConfigError(f"{at}: `price_input` and `price_output` go together, each a non-negative number of "
                              f"USD per 1M tokens, got {prices}")
    member_prices = (float(prices[0]), float(prices[1])) if prices[0] is not None else None
    key_variable = text.get("api_key_env")
    # A pasted key is never also the name of a set variable: only an unset name is judged by its looks.
    if key_variable is not None and key_variable not in env and not looks_like_variable_name(key_variable):
        raise ConfigError(f"{at}: `api_key_env` does not look like a variable name (it must name the environment "
                          "variable that holds the key, never hold the key itself; its value is not shown here)")
    member_env = {k: v for k, v in env.items() if k not in _SINGLE_JUDGE_VARIABLES}
    try:
        # One construction for both reads: the configuration a run sends with is this one and its key, so a
        # read without keys finds the same endpoint, model, cache and budget folder a run uses.
        keyless = JudgeConfig.from_env(
            member_env, require_key=False, api_type=api_type, model=text["model"], base_url=text.get("base_url"),
            azure_endpoint=text.get("azure_endpoint"), api_version=text.get("api_version"), **numbers)
    except ConfigError as error:
        raise ConfigError(f"{at}: {error}") from None
    if not configs:
        return PanelMember(name, None, text["model"], member_prices, keyless.endpoint_identity, keyless)
    api_key = None
    if key_variable is not None:
        api_key = env.get(key_variable)
        if not api_key:
            raise ConfigError(f"{at}: api_key_env names {key_variable}, which is not set")
    try:
        config = keyless.with_overrides(api_key=api_key)
    except ConfigError as error:
        if api_key is None and str(error).startswith("no API key"):
            place = text.get("base_url") or text.get("azure_endpoint")
            raise ConfigError(f"{at}: no API key for {public_url(place) if place else 'OpenAI'}: "
                              "name the variable that holds it with `api_key_env`") from None
        raise ConfigError(f"{at}: {error}") from None
    return PanelMember(name, config, text["model"], member_prices, config.endpoint_identity, keyless)


def _member_numbers(entry: Mapping[str, Any], at: str) -> dict[str, object]:
    """The member's own max_concurrency, rpm, tpm and timeout, each a number within its bound."""
    numbers: dict[str, object] = {}
    for key, kind in _NUMBER_KEYS.items():
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
                raise ConfigError(f"{at}: `{key}` must be a number, got {value!r}")
            problem = bound_problem(key, value)
            if problem is not None:
                raise ConfigError(f"{at}: `{key}` {problem}")
            numbers[key] = kind(value)
    return numbers


def looks_like_variable_name(text: str) -> bool:
    """Whether `text` can be an environment variable's name rather than a pasted key: shell-name characters,
    not the many digits of a random key, and not upper and lower case mixed with digits (`AIzaSyB3...`)."""
    if not VARIABLE_NAME.match(text) or sum(c.isdigit() for c in text) > MAX_DIGITS_IN_VARIABLE_NAME:
        return False
    return not (any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text))

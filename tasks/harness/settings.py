"""How a task reads a setting: the task YAML's metadata, overridable by an environment variable read at call
time, each value checked by a parser whose ValueError becomes one `ConfigError` naming where the value came
from."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from capjudge.judges.client.config import ConfigError

T = TypeVar("T")

# Ceilings of the counts a task's metadata or the environment sets (README "What capjudge refuses").
MAX_JUDGE_SAMPLES = 100  # k replies per item (judge_samples, CAPJUDGE_JUDGE_SAMPLES)
MAX_TRIES_LIMIT = 20  # judge requests per reply until one parses (max_tries)
MAX_CAPTION_CHARS_LIMIT = 1_000_000  # max_caption_chars, CAPJUDGE_MAX_CAPTION_CHARS


def setting(
    metadata: Mapping[str, Any],
    key: str,
    default: T,
    parse: Callable[[Any], T],
    *,
    env_name: str | None = None,
    env: Mapping[str, str] | None = None,
) -> T:
    """`env[env_name]` if set, else `metadata[key]`, else `default`, passed through `parse`.

    `parse` raises ValueError for a bad value; that becomes one ConfigError naming where the value came from.
    """
    env = os.environ if env is None else env
    if env_name and env.get(env_name, "").strip():
        origin, raw = f"environment variable {env_name}", env[env_name].strip()
    elif metadata.get(key) is not None:
        origin, raw = f"task metadata '{key}'", metadata[key]
    else:
        return default
    try:
        return parse(raw)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{origin}: {error}") from None


def parse_choice(choices: Sequence[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}; got {value!r}")
        return text

    return parse


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true/false (1/0, yes/no); got {value!r}")


def parse_positive_int(value: Any) -> int:
    problem = f"expected a positive integer; got {value!r}"
    if isinstance(value, bool):
        raise TypeError(problem)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(problem) from None  # int()'s own message ("invalid literal ...") names no setting
    if number < 1 or str(number) != str(value).strip():
        raise ValueError(problem)
    return number


def parse_count(upper: int) -> Callable[[Any], int]:
    """A positive integer no larger than `upper`: every count a user sets has a ceiling, so a typo (an extra
    zero or three) is one error before the run, never a run that sends a thousand times what was meant."""
    def parse(value: Any) -> int:
        number = parse_positive_int(value)
        if number > upper:
            raise ValueError(f"expected at most {upper:,}; got {value!r}")
        return number

    return parse


def constrained_output_enabled(env: Mapping[str, str] | None = None) -> bool:
    """CAPJUDGE_CONSTRAINED_OUTPUT=1: the judge is the local llama.cpp server and its reply format is forced."""
    return setting({}, "constrained_output", False, parse_bool, env_name="CAPJUDGE_CONSTRAINED_OUTPUT", env=env)

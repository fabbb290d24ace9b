"""Pre-flight: before a run spends hours generating captions, make sure the judge answers.

One minimal chat completion with the configured model (2 tokens; with logprobs when the task's scoring needs
them) tells apart the failures no retry can fix: nothing listening at the endpoint, a rejected key, a model
the backend does not serve, a backend that returns no logprobs. Each is one `ConfigError` naming the
endpoint, the model and the variable to change; the key is never part of a message.

A 429 or 5xx means a judge is there and busy: that is a warning, not an error. The probe carries the header
`X-Capjudge-Preflight: 1` so a server's logs (and the test server's counters) can tell it from judgments.
Results are remembered per process, so several tasks in one run probe once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping

import openai

from capjudge.judges.config import ConfigError, JudgeConfig

log = logging.getLogger(__name__)

PREFLIGHT_HEADER = "X-Capjudge-Preflight"
SWITCH_ENV = "CAPJUDGE_PREFLIGHT"  # "0"/"off" turns the judge probe off (offline preparation, --predict_only)

_probed: set[tuple[JudgeConfig, str, bool]] = set()
_lock = threading.Lock()


def preflight_enabled(env: Mapping[str, str] | None = None, argv: list[str] | None = None) -> bool:
    """Off with CAPJUDGE_PREFLIGHT=0, and in an lmms-eval `--predict_only` run, which judges nothing (lmms-eval
    decides that only after the tasks are built, so its command line is the one place to see it then)."""
    value = (os.environ if env is None else env).get(SWITCH_ENV, "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    return "--predict_only" not in (sys.argv if argv is None else argv)


def probe_judge(config: JudgeConfig, model: str, *, needs_logprobs: bool) -> None:
    """Raise ConfigError unless the judge at `config` answers one completion with `model`."""
    key = (config, model, needs_logprobs)
    with _lock:
        if key in _probed:
            return
    _probe(config, model, needs_logprobs)
    with _lock:
        _probed.add(key)


def _probe(config: JudgeConfig, model: str, needs_logprobs: bool) -> None:
    from capjudge.judges.client import redact_secret

    try:
        _send_probe(config, model, needs_logprobs)
    except ConfigError as error:
        # A server may echo the key in its error text; it never reaches a message.
        raise ConfigError(redact_secret(str(error), config.api_key)) from None


def _send_probe(config: JudgeConfig, model: str, needs_logprobs: bool) -> None:
    from capjudge.judges.client import JudgeClient

    where = f"the judge at {config.endpoint_label} (model {model!r})"
    skip = f"({SWITCH_ENV}=0 skips this check, e.g. for --predict_only runs judged later)"
    body: dict[str, object] = {
        "model": model, "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "user", "content": "Reply with the digit 1."}],
    }
    if needs_logprobs:
        body.update(logprobs=True, top_logprobs=5)
    sdk = JudgeClient._build_sdk_client(config.with_overrides(max_concurrency=1, timeout=min(config.timeout, 60.0)))
    try:
        raw = sdk.chat.completions.with_raw_response.create(**body, extra_headers={PREFLIGHT_HEADER: "1"})
        completion = raw.parse()
    except openai.APIConnectionError as error:
        cause = error.__cause__ or error
        variable = "AZURE_OPENAI_ENDPOINT" if config.api_type == "azure" else "OPENAI_BASE_URL"
        raise ConfigError(
            f"pre-flight: cannot reach {where}: {type(cause).__name__}: {cause}. Start the judge server, or set "
            f"{variable} to one that runs {skip}"
        ) from None
    except openai.AuthenticationError as error:
        variable = "AZURE_OPENAI_API_KEY" if config.api_type == "azure" else "OPENAI_API_KEY"
        raise ConfigError(f"pre-flight: {where} rejected the API key (HTTP {error.status_code}): check {variable}") from None
    except openai.PermissionDeniedError as error:
        raise ConfigError(
            f"pre-flight: {where} refused access (HTTP {error.status_code}): the key has no access to this model "
            "or endpoint; check the key's project/permissions or MODEL_VERSION"
        ) from None
    except openai.NotFoundError as error:
        raise ConfigError(
            f"pre-flight: {where} does not serve this model (HTTP 404: {str(error.message)[:200]}): set "
            "MODEL_VERSION (or CAPJUDGE_JUDGE_MODEL) to a model it serves; for Azure, the deployment name"
        ) from None
    except openai.APIStatusError as error:
        if error.status_code == 429 or error.status_code >= 500:
            log.warning("pre-flight: %s answered HTTP %s; it is there but busy, continuing", where, error.status_code)
            return
        raise ConfigError(f"pre-flight: {where} rejected a minimal request (HTTP {error.status_code}: "
                          f"{str(error.message)[:200]}) {skip}") from None
    except (openai.APIResponseValidationError, ValueError) as error:
        raise ConfigError(f"pre-flight: {where} did not answer with a chat completion: {str(error)[:200]}") from None
    finally:
        sdk.close()
    from capjudge.judges.rate_limits import RateLimitHeaderError, read_rate_limit_headers

    try:  # pacing follows these headers: one that cannot be read is a configuration problem, found now
        read_rate_limit_headers(raw.headers)
    except RateLimitHeaderError as error:
        raise ConfigError(f"pre-flight: {where} sent a rate-limit header capjudge cannot read ({error}); "
                          f"pacing by it would be wrong {skip}") from None
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ConfigError(f"pre-flight: {where} answered a completion with no choices")
    if needs_logprobs and (choices[0].logprobs is None or not choices[0].logprobs.content):
        raise ConfigError(
            f"pre-flight: {where} returned no logprobs, and this task's scoring needs them (G-VEval's "
            "probability-weighted scores). Use a backend that returns logprobs, or set CAPJUDGE_GVEVAL_SCORING=text "
            "to score the written numbers"
        )

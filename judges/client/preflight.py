"""Pre-flight: before a run spends hours generating captions, make sure the judge answers.

One minimal chat completion with the configured model (2 tokens; with logprobs when the task's scoring needs
them) tells apart the failures no retry can fix: nothing listening at the endpoint, a rejected key, a model
the backend does not serve, a backend that returns no logprobs. Each is one `ConfigError` naming the
endpoint, the model and the variable to change; the key is never part of a message.

A 429 or 5xx means a judge is there and busy: that is a warning, not an error. The probe carries the header
`X-Capjudge-Preflight: 1` so a server's logs (and the test server's counters) can tell it from judgments.
Results are remembered per process, so several tasks in one run probe once.

A command that loads its task before it knows whether any request is left to ask (`capjudge arena`: its output
names are checked and its reply caches read first) loads it inside `held_preflight()`, and probes afterwards
(the task's own `check_judge`) only when a request is left: a fully cached rerun sends nothing, probe included.
`probes_sent()` counts this process's probes, so a command can print them beside its requests.

A `--batch` run (inside `batch_preflight()`) probes what the Batch API path uses instead, and sends no chat
completion: an Azure batch deployment serves no online requests, so a correct batch setup would be refused.
It lists one batch (the endpoint, the key, the Batch API itself) and asks the models endpoint about the model
where the API can say (`GET /models/{model}`, then the model list; not on Azure, whose model is a deployment
name that endpoint does not know). Logprob support cannot be seen without a completion; it is not checked.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import openai

from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.client.redaction import Redactor

log = logging.getLogger(__name__)

PREFLIGHT_HEADER = "X-Capjudge-Preflight"
SWITCH_ENV = "CAPJUDGE_PREFLIGHT"  # "0"/"off" turns the judge probe off (offline preparation, --predict_only)

_probed: set[tuple[JudgeConfig, str, bool, bool]] = set()
_lock = threading.Lock()
# True while tasks are loaded for a `--batch` run: the probe checks the Batch API path, not an online completion.
_for_batch: ContextVar[bool] = ContextVar("capjudge_preflight_for_batch", default=False)
# True while a command loads tasks whose probe it sends later, if at all (`held_preflight`).
_held: ContextVar[bool] = ContextVar("capjudge_preflight_held", default=False)
_sent = 0  # probes this process sent (answered or not): the server counts every one


@contextmanager
def held_preflight() -> Iterator[None]:
    """Within this block no probe is sent (nor remembered as done): the caller probes later, with the task's own
    `check_judge`, once it knows a request is left to ask."""
    token = _held.set(True)
    try:
        yield
    finally:
        _held.reset(token)


def probes_sent() -> int:
    """How many pre-flight probes this process has sent."""
    with _lock:
        return _sent


def probe_if_left(left_to_ask: bool, check: Callable[[], None]) -> int:
    """The probe held back while a command loaded its task (`held_preflight`): `check` (the task's own
    `check_judge`) sent only when a request is `left_to_ask`; how many probes that sent, for the command to print
    apart from its requests."""
    before = probes_sent()
    if left_to_ask:
        check()
    return probes_sent() - before


@contextmanager
def batch_preflight() -> Iterator[None]:
    """Within this block (loading the tasks of a `capjudge judge --batch` run), pre-flight probes the Batch API
    path: files/batches endpoints, key and model, no online chat completion."""
    token = _for_batch.set(True)
    try:
        yield
    finally:
        _for_batch.reset(token)


def preflight_enabled(env: Mapping[str, str] | None = None, argv: list[str] | None = None) -> bool:
    """Off with CAPJUDGE_PREFLIGHT=0, and in an lmms-eval `--predict_only` run, which judges nothing (lmms-eval
    decides that only after the tasks are built, so its command line is the one place to see it then)."""
    value = (os.environ if env is None else env).get(SWITCH_ENV, "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    return "--predict_only" not in (sys.argv if argv is None else argv)


def probe_judge(config: JudgeConfig, model: str, *, needs_logprobs: bool) -> None:
    """Raise ConfigError unless the judge at `config` answers one completion with `model` (in a
    `batch_preflight()` block: unless its Batch API answers and, where the API can say, serves `model`)."""
    global _sent
    if _held.get():
        return
    for_batch = _for_batch.get()
    key = (config, model, needs_logprobs, for_batch)
    with _lock:
        if key in _probed:
            return
        _sent += 1
    _probe(config, model, needs_logprobs, for_batch)
    with _lock:
        _probed.add(key)


SKIP = f"({SWITCH_ENV}=0 skips this check, e.g. for --predict_only runs judged later)"


def _probe(config: JudgeConfig, model: str, needs_logprobs: bool, for_batch: bool) -> None:
    try:
        if for_batch:
            _send_batch_probe(config, model)
        else:
            _send_probe(config, model, needs_logprobs)
    except ConfigError as error:
        # A server may echo the key (or a URL's credentials) in its error text; they never reach a message.
        raise ConfigError(Redactor.for_config(config)(str(error))) from None


def _probe_sdk(config: JudgeConfig) -> openai.OpenAI:
    from capjudge.judges.client.judge_client import JudgeClient

    return JudgeClient._build_sdk_client(config.with_overrides(max_concurrency=1, timeout=min(config.timeout, 60.0)))


def _explain(error: openai.APIError, config: JudgeConfig, where: str, answer: str) -> ConfigError | None:
    """The ConfigError for a probe's failure that no retry can fix, or None (with a warning) for a busy judge.
    `answer` names what the probe expected back ("a chat completion")."""
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        variable = config.backend.endpoint_variable
        return ConfigError(
            f"pre-flight: cannot reach {where}: {type(cause).__name__}: {cause}. Start the judge server, or set "
            f"{variable} to one that runs {SKIP}"
        )
    if isinstance(error, openai.AuthenticationError):
        variable = config.backend.key_variable
        return ConfigError(f"pre-flight: {where} rejected the API key (HTTP {error.status_code}): check {variable}")
    if isinstance(error, openai.PermissionDeniedError):
        return ConfigError(
            f"pre-flight: {where} refused access (HTTP {error.status_code}): the key has no access to this model "
            "or endpoint; check the key's project/permissions or MODEL_VERSION"
        )
    if isinstance(error, openai.APIStatusError):
        if error.status_code == 429 or error.status_code >= 500:
            log.warning("pre-flight: %s answered HTTP %s; it is there but busy, continuing", where, error.status_code)
            return None
        return ConfigError(f"pre-flight: {where} rejected a minimal request (HTTP {error.status_code}: "
                           f"{_server_text(error.message, config)}) {SKIP}")
    return ConfigError(f"pre-flight: {where} did not answer with {answer}: {_server_text(error, config)}")


def _server_text(text: object, config: JudgeConfig, limit: int = 200) -> str:
    """A server's error text for a message: redacted first, then cut (cut first, a key echoed across the cut
    would leave a prefix no redaction pattern matches)."""
    return Redactor.for_config(config)(str(text))[:limit]


def _send_batch_probe(config: JudgeConfig, model: str) -> None:
    where = f"the Batch API at {config.endpoint_label} (model {model!r})"
    headers = {PREFLIGHT_HEADER: "1"}
    no_batch_api = ("--batch needs OpenAI or an Azure OpenAI batch deployment; judge online without --batch "
                    "otherwise")
    if config.backend.has_batch_api is False:  # said by the backend: nothing to ask
        raise ConfigError(f"pre-flight: {where} has no Batch API ({config.backend.name} judges have none): "
                          f"{no_batch_api}")
    sdk = _probe_sdk(config)
    try:
        try:
            sdk.batches.list(limit=1, extra_headers=headers)
        except openai.NotFoundError as error:
            raise ConfigError(
                f"pre-flight: {where} has no Batch API (HTTP 404 listing batches: {str(error.message)[:200]}): "
                f"{no_batch_api}"
            ) from None
        # Azure's model is a deployment name, which its models endpoint does not know.
        if config.backend.models_endpoint_knows_model:
            _check_model_is_served(sdk, model, where, headers)
    except ConfigError:
        raise
    except openai.APIError as error:
        problem = _explain(error, config, where, "a list of batches")
        if problem is not None:
            raise problem from None
    except ValueError as error:
        raise ConfigError(f"pre-flight: {where} did not answer with a list of batches: {str(error)[:200]}") from None
    finally:
        sdk.close()


def _check_model_is_served(sdk: openai.OpenAI, model: str, where: str, headers: Mapping[str, str]) -> None:
    """Refuse `model` when the API says it does not serve it: `GET /models/{model}` answers 404 and the model
    list (when there is one) does not name it. A server without a models endpoint says nothing."""
    try:
        sdk.models.retrieve(model, extra_headers=dict(headers))
        return
    except openai.NotFoundError:
        pass
    try:
        served = {listed.id for listed in sdk.models.list(extra_headers=dict(headers))}
    except (openai.APIError, ValueError, AttributeError):
        return  # no usable model list: the API cannot say
    if model not in served:
        raise ConfigError(
            f"pre-flight: {where} does not serve this model (HTTP 404 for /models/{model}; it lists "
            f"{', '.join(sorted(served)[:10]) or 'none'}): set MODEL_VERSION (or CAPJUDGE_JUDGE_MODEL) to a model it serves"
        )


def _send_probe(config: JudgeConfig, model: str, needs_logprobs: bool) -> None:
    where = f"the judge at {config.endpoint_label} (model {model!r})"
    body: dict[str, object] = {
        "model": model, "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "user", "content": "Reply with the digit 1."}],
    }
    if needs_logprobs:
        body.update(logprobs=True, top_logprobs=5)
    sdk = _probe_sdk(config)
    try:
        raw = sdk.chat.completions.with_raw_response.create(**body, extra_headers={PREFLIGHT_HEADER: "1"})
        completion = raw.parse()
    except openai.NotFoundError as error:
        raise ConfigError(
            f"pre-flight: {where} does not serve this model (HTTP 404: {str(error.message)[:200]}): set "
            "MODEL_VERSION (or CAPJUDGE_JUDGE_MODEL) to a model it serves; for Azure, the deployment name"
        ) from None
    except openai.APIError as error:
        problem = _explain(error, config, where, "a chat completion")
        if problem is None:
            return
        raise problem from None
    except ValueError as error:
        raise ConfigError(f"pre-flight: {where} did not answer with a chat completion: {str(error)[:200]}") from None
    finally:
        sdk.close()
    from capjudge.judges.client.rate_limits import RateLimitHeaderError, read_rate_limit_headers

    try:  # pacing follows these headers: one that cannot be read is a configuration problem, found now
        read_rate_limit_headers(raw.headers)
    except RateLimitHeaderError as error:
        raise ConfigError(f"pre-flight: {where} sent a rate-limit header capjudge cannot read ({error}); "
                          f"pacing by it would be wrong {SKIP}") from None
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ConfigError(f"pre-flight: {where} answered a completion with no choices")
    if needs_logprobs and (choices[0].logprobs is None or not choices[0].logprobs.content):
        raise ConfigError(
            f"pre-flight: {where} returned no logprobs, and this task's scoring needs them (G-VEval's "
            "probability-weighted scores). Use a backend that returns logprobs, or set CAPJUDGE_GVEVAL_SCORING=text "
            "to score the written numbers"
        )

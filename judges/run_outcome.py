"""A run that judged (almost) nothing must not look like success.

lmms-eval exits 0 whatever its metrics say. capjudge's failure aggregation (`aggregations.count_failed`) calls
`check_failure_rate` with the unjudged count of each task; above `CAPJUDGE_MAX_FAILURE_RATE` (default 0.5: a
run that could not judge most of its items measured the judge, not the model) it logs one line saying so and
arranges a non-zero exit status. The results JSON and the samples are still written first: the exit happens
in an `atexit` handler, after lmms-eval has saved everything and returned.

A run that cannot start (a task's pre-flight checks, a captions file the `captions_file` model cannot serve)
ends at once with status 2 and one line (`refuse_run`): lmms-eval would print its own traceback after ours and
exit 0. Nothing has been judged at that point.

On the bottom floor because every part of capjudge that runs inside lmms-eval ends its run through it: the
task glue (capjudge.tasks.harness), the lmms-eval model (capjudge.models, which sits below all of
capjudge.tasks: the commands read captions files through it), and the commands that apply the same failure rate
outside lmms-eval (`capjudge judge`, `arena`, `sensitivity`). It stands only on the judge client: its
ConfigError, and its reply caches, flushed before the process ends.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import NoReturn

from capjudge.judges.client.config import ConfigError

log = logging.getLogger(__name__)

RATE_ENV = "CAPJUDGE_MAX_FAILURE_RATE"
DEFAULT_MAX_FAILURE_RATE = 0.5
EXIT_STATUS = 3  # too many items unjudged
LOAD_FAILURE_STATUS = 2  # a task could not start (pre-flight)

_reasons: list[tuple[str, int]] = []
_lock = threading.Lock()


def max_failure_rate(env: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if env is None else env).get(RATE_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_FAILURE_RATE
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{RATE_ENV} must be a number from 0 to 1, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{RATE_ENV} must be from 0 to 1 (1 never fails a run), got {raw!r}")
    return value


def failure_rate_problem(failed: int, total: int, who: str = "") -> str | None:
    """Why `failed` unjudged items of `total` make the run a failure, or None when they do not. `who` names
    whose judgments they are when it is not the run's one judge (a panel member, the panel)."""
    limit = max_failure_rate()
    if total == 0 or failed / total <= limit:
        return None
    by = f" by {who}" if who else ""
    return f"{failed} of {total} items ({failed / total:.0%}) were not judged{by}, above {RATE_ENV}={limit:g}"


def check_failure_rate(failed: int, total: int, who: str = "") -> None:
    problem = failure_rate_problem(failed, total, who)
    if problem is not None:
        fail_at_exit(
            f"capjudge: {problem}; results and samples were written, the run exits with status {EXIT_STATUS}",
            EXIT_STATUS,
        )


def fail_at_exit(reason: str, status: int) -> None:
    """Log `reason` now; when running as lmms-eval's command line, also end the process with `status` once
    lmms-eval is done. lmms-eval catches every error of an evaluation and exits 0, so this is the one way a
    script or CI notices. In any other process (a library call, a test) only the log line is written."""
    log.error(reason)
    if not running_as_lmms_eval():
        return
    with _lock:
        first = not _reasons
        _reasons.append((reason, status))
    if first:
        atexit.register(_exit_unsuccessfully)


def refuse_run(reason: str, status: int = LOAD_FAILURE_STATUS) -> NoReturn:
    """End an lmms-eval run that cannot go on: one line on stderr, then SystemExit(status).

    lmms-eval catches every `Exception` of an evaluation, prints its traceback and exits 0; `SystemExit` is no
    `Exception`, so it passes through with its status (and under `accelerate launch` the launcher stops the
    other ranks on a non-zero exit rather than leaving them at a barrier). Called before anything is judged;
    replies cached so far are flushed all the same, and a reason already waiting for the exit (an earlier
    configuration of the same command line that failed its failure rate) is printed with it."""
    from capjudge.judges.client.cache import flush_open_caches

    flush_open_caches()
    line = reason if reason.startswith("capjudge") else f"capjudge: {reason}"
    with _lock:
        earlier = list(_reasons)
        _reasons.clear()  # printed here: the atexit handler has nothing left to say
    for earlier_reason, _ in earlier:
        print(earlier_reason, file=sys.stderr)
    print(" ".join(line.split("\n")), file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(max([status, *(earlier_status for _, earlier_status in earlier)]))


@contextmanager
def refused_inside_lmms_eval(*errors: type[Exception]) -> Iterator[None]:
    """Inside lmms-eval's command line, `errors` end the run through `refuse_run`; anywhere else (`capjudge
    judge`, a library call, a test) they propagate for the caller to report."""
    try:
        yield
    except errors as error:
        if running_as_lmms_eval():
            refuse_run(str(error))
        raise


def running_as_lmms_eval() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").split(".")[0] == "lmms_eval":
        return True  # python -m lmms_eval, also under accelerate launch -m lmms_eval
    return os.path.basename(sys.argv[0] if sys.argv else "") in ("lmms-eval", "lmms_eval")


def lmms_eval_predict_only() -> bool:
    """Whether this process is an lmms-eval `--predict_only` run: it generates captions and judges nothing
    (lmms-eval clears `process_results` only after the tasks are built, so at task load its command line,
    read by its own parser, is the one place to see it)."""
    if not running_as_lmms_eval():
        return False
    return _predict_only(tuple(sys.argv))


@functools.lru_cache(maxsize=4)
def _predict_only(argv: tuple[str, ...]) -> bool:
    """`lmms_eval_predict_only` for one command line: read once per process (every task's load-time checks ask,
    and lmms-eval's parser and a --config file read are not free), again only if the command line changes."""
    from lmms_eval.__main__ import parse_eval_args

    try:
        arguments = parse_eval_args()[1]
    except SystemExit:  # not parseable as lmms-eval's command line after all
        return False
    return bool(getattr(arguments, "predict_only", False)) or _config_file_predicts_only(getattr(arguments, "config", None))


def _config_file_predicts_only(path: str | None) -> bool:
    """Whether lmms-eval's --config file (one configuration or a list of them) asks for predict_only; lmms-eval
    applies the file after the command line, so the parsed arguments alone do not show it. An unreadable file
    is lmms-eval's to report: False here."""
    if not path:
        return False
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    entries = loaded if isinstance(loaded, list) else [loaded]
    return any(isinstance(entry, dict) and bool(entry.get("predict_only")) for entry in entries)


def _exit_unsuccessfully() -> None:
    if not _reasons:  # refuse_run printed them and set the status itself
        return
    # SystemExit raised in an atexit handler is ignored; os._exit is the one way to set the status now.
    # Flush what the other handlers would have flushed, judge replies first.
    from capjudge.judges.client.cache import flush_open_caches

    flush_open_caches()
    print("\n".join(reason for reason, _ in _reasons), file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(max(status for _, status in _reasons))

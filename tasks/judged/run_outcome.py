"""A run that judged (almost) nothing must not look like success.

lmms-eval exits 0 whatever its metrics say. capjudge's failure aggregation (`aggregations.count_failed`) calls
`check_failure_rate` with the unjudged count of each task; above `CAPJUDGE_MAX_FAILURE_RATE` (default 0.5: a
run that could not judge most of its items measured the judge, not the model) it logs one line saying so and
arranges a non-zero exit status. The results JSON and the samples are still written first: the exit happens
in an `atexit` handler, after lmms-eval has saved everything and returned. A task that cannot start (the
pre-flight checks) ends the run with status 2 the same way, since lmms-eval itself would exit 0.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Mapping

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


def running_as_lmms_eval() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").split(".")[0] == "lmms_eval":
        return True  # python -m lmms_eval, also under accelerate launch -m lmms_eval
    return os.path.basename(sys.argv[0] if sys.argv else "") in ("lmms-eval", "lmms_eval")


def _exit_unsuccessfully() -> None:
    # SystemExit raised in an atexit handler is ignored; os._exit is the one way to set the status now.
    # Flush what the other handlers would have flushed, judge replies first.
    from capjudge.judges.client.cache import flush_open_caches

    flush_open_caches()
    print("\n".join(reason for reason, _ in _reasons), file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(max(status for _, status in _reasons))

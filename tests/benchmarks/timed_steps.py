"""One step of a benchmark script: a command run to completion and timed, as the summary files list them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def timed_step(what: str, command: list[str], env: dict[str, str], stdout_to: Path | None = None,
               shown_env: str = "") -> tuple[str, str, float]:
    """Run `command` in the repository (its stdout to `stdout_to` when given); a failure ends the script naming
    the step. Returns (what, the command as shown in the summary, seconds); `shown_env` is put in front of it."""
    step, _ = timed_step_status(what, command, env, stdout_to, shown_env)
    return step


def timed_step_status(what: str, command: list[str], env: dict[str, str], stdout_to: Path | None = None,
                      shown_env: str = "", accepted: tuple[int, ...] = (0,)) -> tuple[tuple[str, str, float], int]:
    """`timed_step`, where an exit status in `accepted` is an outcome to report rather than a failure (e.g.
    `capjudge arena`'s 3: more failed orders than CAPJUDGE_MAX_FAILURE_RATE, its files written first).
    Returns the step and the exit status."""
    print(f"== {what}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    if stdout_to is None:
        done = subprocess.run(command, env=env, cwd=REPO)
    else:
        with open(stdout_to, "w", encoding="utf-8") as handle:
            done = subprocess.run(command, env=env, cwd=REPO, stdout=handle)
    if done.returncode not in accepted:
        raise SystemExit(f"step failed ({what}), exit {done.returncode}: {' '.join(command)}")
    shown = " ".join([shown_env] * bool(shown_env) + [shorten(part) for part in command])
    return (what, shown, time.monotonic() - started), done.returncode


def shorten(part: str) -> str:
    """A command-line word as a reader of the summary would type it: paths relative to the repository."""
    return part.replace(str(REPO) + "/", "").replace(sys.executable, "python")

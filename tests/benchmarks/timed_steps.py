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
    print(f"== {what}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    if stdout_to is None:
        done = subprocess.run(command, env=env, cwd=REPO)
    else:
        with open(stdout_to, "w", encoding="utf-8") as handle:
            done = subprocess.run(command, env=env, cwd=REPO, stdout=handle)
    if done.returncode != 0:
        raise SystemExit(f"step failed ({what}), exit {done.returncode}: {' '.join(command)}")
    return what, " ".join([shown_env] * bool(shown_env) + [shorten(part) for part in command]), time.monotonic() - started


def shorten(part: str) -> str:
    """A command-line word as a reader of the summary would type it: paths relative to the repository."""
    return part.replace(str(REPO) + "/", "").replace(sys.executable, "python")

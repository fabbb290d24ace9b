"""The old name of `capjudge.judges.run_outcome` (moved to the bottom floor, issue #61 item 4: the lmms-eval model
imports it, and capjudge.models may import nothing of capjudge.tasks). Kept only for tasks/cli/arena.py's import
until that line names the new module; then this file goes."""

from capjudge.judges.run_outcome import EXIT_STATUS, failure_rate_problem

__all__ = ["EXIT_STATUS", "failure_rate_problem"]

"""lmms-eval resolves `!function utils.<name>` in this folder's YAMLs against this file. Thin on purpose:
the task's code lives in `capjudge.tasks.judged.gveval_task`."""

from capjudge.tasks.judged.gveval_task import (
    GVEvalTask,
    count,
    count_judged,
    doc_to_video,
    kendall_b,
    kendall_b_ci_high,
    kendall_b_ci_low,
    mean_of_judged,
)
from capjudge.tasks.judged.harness import count_failed

__all__ = ["GVEvalTask", "count", "count_judged", "count_failed", "doc_to_video", "kendall_b", "kendall_b_ci_high", "kendall_b_ci_low", "mean_of_judged"]

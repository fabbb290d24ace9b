"""lmms-eval resolves `!function utils.<name>` in this folder's YAMLs against this file. Thin on purpose:
the task's code lives in `capjudge.tasks.harness.gveval_task`, every aggregation in
`capjudge.tasks.harness.aggregations`."""

from capjudge.tasks.harness.aggregations import count_failed, count_judged, kendall_b, kendall_b_ci_high, kendall_b_ci_low, mean_of_judged
from capjudge.tasks.harness.gveval_task import GVEvalTask
from capjudge.tasks.harness.sources import doc_to_video

__all__ = ["GVEvalTask", "count_failed", "count_judged", "doc_to_video", "kendall_b", "kendall_b_ci_high", "kendall_b_ci_low", "mean_of_judged"]

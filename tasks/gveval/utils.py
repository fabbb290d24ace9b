"""lmms-eval resolves `!function utils.<name>` in this folder's YAMLs against this file. Thin on purpose:
the task's code lives in `capjudge.tasks.judged.gveval_task`, every aggregation in
`capjudge.tasks.judged.aggregations`."""

from capjudge.tasks.judged.aggregations import count_failed, count_judged, kendall_b, kendall_b_ci_high, kendall_b_ci_low, mean_of_judged
from capjudge.tasks.judged.gveval_task import GVEvalTask
from capjudge.tasks.judged.sources import doc_to_video

__all__ = ["GVEvalTask", "count_failed", "count_judged", "doc_to_video", "kendall_b", "kendall_b_ci_high", "kendall_b_ci_low", "mean_of_judged"]

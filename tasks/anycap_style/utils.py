"""lmms-eval resolves `!function utils.<name>` in this folder's YAMLs against this file. Thin on purpose:
the task's code lives in `capjudge.tasks.harness.anycap_task`, every aggregation in
`capjudge.tasks.harness.aggregations`."""

from capjudge.tasks.harness.aggregations import count_failed, count_judged, mean_of_judged, mean_of_type_means
from capjudge.tasks.harness.anycap_task import AnyCapTask
from capjudge.tasks.harness.sources import doc_to_video

__all__ = ["AnyCapTask", "count_failed", "count_judged", "doc_to_video", "mean_of_judged", "mean_of_type_means"]

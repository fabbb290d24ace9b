"""lmms-eval resolves `!function utils.<name>` in this folder's YAMLs against this file. Thin on purpose:
the task's code lives in `capjudge.tasks.judged.anycap_task`."""

from capjudge.tasks.judged.anycap_task import AnyCapTask, count, count_judged, doc_to_video, mean_of_judged, mean_of_type_means
from capjudge.tasks.judged.harness import count_failed

__all__ = ["AnyCapTask", "count", "count_judged", "count_failed", "doc_to_video", "mean_of_judged", "mean_of_type_means"]

"""`SourcedTask`: an lmms-eval ConfigurableTask whose items come from `sources.resolve_source`, read with the
item format of the dataset its metadata names (`capjudge.judges.datasets`), and whose per-item metrics come from the task class itself.

Task YAMLs use it with `class: !function utils.<TaskClass>`, so the data location can come from the
environment or the hub while the YAML stays static. Two lmms-eval behaviours shape this class:

- `process_results`: lmms-eval treats the metrics as task-computed only when `config.process_results` is
  set (otherwise it looks each metric name up in its own registry). A YAML that names none gets the task's
  `process_document` method, which can read the task's `metadata` (the judge settings); a plain function
  named in the YAML could not. With `--predict_only` lmms-eval clears it again and nothing is judged.
- Errors: lmms-eval calls `process_results` under a retry (5 attempts, 2 s apart) and ends the run with a
  `RetryError` after the model has generated every caption. A setting that would make every item fail (no
  API key, a bad judge option) is therefore checked once in `download`, when the task is built, before any
  generation: `check_ready` raises one clear `ConfigError`. The same goes for a judge that does not answer
  (one probe request, `capjudge.judges.client.preflight`) and for videos that are not where the task looks
  (`check_rows`): a run fails before its GPU hours, not after.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import datasets
from capjudge.judges.client.config import ConfigError
from capjudge.judges.datasets.items import DatasetError, ItemFormat, load_rows
from capjudge.judges.datasets.known_datasets import item_format_of
from capjudge.judges.run_outcome import refused_inside_lmms_eval
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.harness.sources import resolve_source
from lmms_eval.api.task import ConfigurableTask


class SourcedTask(ConfigurableTask):
    # The datasets a task brings itself, by the name its YAML's `metadata.dataset` gives (looked up before
    # capjudge's own, `capjudge.judges.datasets.known_datasets`), and the folder its `metadata.default_data`
    # is in. A judge outside capjudge (the test suite's third judge) sets both to ship its items beside its YAML.
    own_datasets: ClassVar[Mapping[str, ItemFormat]] = {}
    data_folder: ClassVar[Path] = TASKS_DIR

    def __init__(self, *args: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if config is not None:  # lmms-eval passes the YAML through, `class` key included
            config = {key: value for key, value in config.items() if key != "class"}
            if config.get("process_results") is None:
                config["process_results"] = self.process_document
        super().__init__(*args, config=config, **kwargs)

    # -- for subclasses ----------------------------------------------------------------------------------

    def check_ready(self) -> None:
        """Raise `ConfigError` for a setting that would make every item fail. Called once, at load."""

    def check_rows(self, rows: list[dict[str, Any]]) -> None:
        """Raise `ConfigError` when the loaded items cannot be judged at all (e.g. no video found); warn about
        some. Called once, at load, before any generation."""

    def check_judge(self) -> None:
        """Raise `ConfigError` when the judge does not answer. Called once, at load, after the data checks
        (local and cheap, so their errors come first)."""

    def process_document(self, doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
        """The per-item metric values (and logged fields) for one document and the model's output."""
        raise NotImplementedError(f"{type(self).__name__} does not compute metrics; name a process_results in its YAML")

    # -- lmms-eval hooks ---------------------------------------------------------------------------------

    def download(self, dataset_kwargs: dict[str, Any] | None = None) -> None:
        metadata = dict(self.config.metadata or {})
        split = self.config.test_split or "test"
        # A bad setting or no usable data: one line and status 2 inside lmms-eval; elsewhere (`capjudge judge`,
        # a library call) the caller reports it, once.
        with refused_inside_lmms_eval(ConfigError, DatasetError):
            self.check_ready()
            item_format = item_format_of(self.config.task, metadata, self.own_datasets)
            source = resolve_source(metadata, data_folder=self.data_folder)
            rows = load_rows(source, item_format, split)
            self.check_rows(rows)
            self.check_judge()
        dataset = datasets.Dataset.from_list(rows)
        if self.config.process_docs is not None:
            dataset = self.config.process_docs(dataset)
        self.dataset = datasets.DatasetDict({split: dataset})
        self.dataset_no_image = self.dataset
        self.data_source = source


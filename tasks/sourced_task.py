"""`SourcedTask`: an lmms-eval ConfigurableTask whose items come from `harness.resolve_source` and whose
per-item metrics come from the task class itself.

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
  (one probe request, `capjudge.judges.preflight`) and for videos that are not where the task looks
  (`check_rows`): a run fails before its GPU hours, not after.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import datasets
from capjudge.judges.client import shared_client
from capjudge.judges.config import ConfigError, JudgeConfig
from capjudge.judges.preflight import preflight_enabled, probe_judge
from capjudge.tasks.harness import (
    DatasetError,
    ItemFormat,
    check_videos,
    import_dotted,
    load_rows,
    resolve_source,
)
from capjudge.tasks.prejudge import PrejudgedItems, item_key, prejudge
from capjudge.tasks.run_outcome import LOAD_FAILURE_STATUS, fail_at_exit, running_as_lmms_eval
from lmms_eval.api.reasoning import parse_reasoning_tags_config, strip_reasoning_tags
from lmms_eval.api.task import ConfigurableTask


class SourcedTask(ConfigurableTask):
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
        try:
            self.check_ready()
            if "item_format" not in metadata:
                raise DatasetError(f"task {self.config.task!r}: metadata.item_format (a dotted path to an ItemFormat) is missing")
            item_format = import_dotted(metadata["item_format"])
            if not isinstance(item_format, ItemFormat):
                raise DatasetError(f"task {self.config.task!r}: metadata.item_format {metadata['item_format']!r} is not an ItemFormat")
            source = resolve_source(metadata)
            rows = load_rows(source, item_format, split)
            self.check_rows(rows)
            self.check_judge()
        except ConfigError as error:  # lmms-eval would print it and exit 0: make the status say so
            fail_at_exit(str(error), LOAD_FAILURE_STATUS)
            raise
        dataset = datasets.Dataset.from_list(rows)
        if self.config.process_docs is not None:
            dataset = self.config.process_docs(dataset)
        self.dataset = datasets.DatasetDict({split: dataset})
        self.dataset_no_image = self.dataset
        self.data_source = source


class JudgedTask(SourcedTask):
    """A SourcedTask whose per-item metrics come from judging the model's caption.

    Subclasses name their settings type (with `resolve(metadata)` and `identity(config)`) and two functions:
    `judge_item(doc, caption, settings, client)` and `item_metrics(doc, judgment, identity)`.
    """

    settings_type: ClassVar[Any]
    judge_item: ClassVar[Callable[..., Any]]
    item_metrics: ClassVar[Callable[..., dict[str, Any]]]
    _prejudged: PrejudgedItems | None = None

    def settings(self) -> Any:
        return self.settings_type.resolve(self.config.metadata or {})

    def check_ready(self) -> None:
        """The settings parse and the judge is configured."""
        self.settings()
        JudgeConfig.from_env()

    def check_judge(self) -> None:
        """Unless CAPJUDGE_PREFLIGHT=0: the judge answers one minimal request with the model items will use."""
        if not preflight_enabled():
            return
        settings = self.settings()
        config = JudgeConfig.from_env()
        probe_judge(config, settings.identity(config)["model"], needs_logprobs=settings.needs_logprobs)

    def check_rows(self, rows: list[dict[str, Any]]) -> None:
        if not self.settings().needs_video:
            return
        check_videos(self.config.task, rows)

    def apply_filters(self) -> Any:
        """lmms-eval's one look at every response before `process_results`: judge them all now, at the
        client's concurrency instead of lmms-eval's thread count (see capjudge.tasks.prejudge)."""
        filtered = super().apply_filters()
        if self.config.process_results is None:  # --predict_only: lmms-eval computes no metric, so no judging
            return filtered
        docs = self.eval_docs
        tags = self._reasoning_tags()
        items = []
        for instance in self.instances:
            for caption in instance.filtered_resps.values():
                caption = caption if isinstance(caption, str) else str(caption)
                # What process_results will be given: lmms-eval strips reasoning blocks (and surrounding
                # whitespace) from each response just before calling it.
                items.append((docs[int(instance.doc_id)], strip_reasoning_tags(caption, tags) if tags else caption))
        self._prejudged = self.judge_all(items)
        return filtered

    def judge_all(self, items: list[tuple[dict[str, Any], str]]) -> PrejudgedItems:
        """Judge every (doc, caption) at the client's concurrency, with a progress bar; used inside lmms-eval
        (`apply_filters`) and by `capjudge judge`, so both make the same requests."""
        settings = self.settings()
        config = JudgeConfig.from_env()
        client = shared_client(config)
        store = PrejudgedItems()
        prejudge(
            items,
            lambda doc, caption: type(self).judge_item(doc, caption, settings, client),
            workers=config.max_concurrency,
            description=f"capjudge: judging {self.config.task}",
            into=store,
        )
        return store

    def _reasoning_tags(self) -> Any:
        """The reasoning tags lmms-eval will strip before process_results: the task's own setting, else the
        command line's (whose default strips <think> and <analysis> blocks)."""
        cli_value = None
        if running_as_lmms_eval():
            from lmms_eval.__main__ import parse_eval_args

            try:
                cli_value = getattr(parse_eval_args()[1], "reasoning_tags", None)
            except SystemExit:  # not parseable as lmms-eval's command line after all
                cli_value = None
        return parse_reasoning_tags_config(cli_value=cli_value, task_value=getattr(self.config, "reasoning_tags", None))

    def process_document(self, doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
        settings = self.settings()
        config = JudgeConfig.from_env()
        caption = results[0] if results else ""
        judgment = self._prejudged.take(item_key(doc, caption)) if self._prejudged is not None else None
        if judgment is None:  # not judged ahead (e.g. process_results called directly): judge it now
            judgment = type(self).judge_item(doc, caption, settings, shared_client(config))
        return type(self).item_metrics(doc, judgment, settings.identity(config))

"""Judging as its own stage, outside lmms-eval's process_results: what `capjudge judge` does (its parser:
capjudge.tasks.cli.judge).

A researcher generates captions where the GPUs are (`lmms_eval ... --predict_only --log_samples`, any model)
and judges them later, anywhere:

    capjudge judge OUTPUT_PATH --task gveval_demo --out results/judged
    capjudge judge --captions my_model.jsonl --task anycap_style --out results/judged

The task is built exactly as lmms-eval builds it (same YAML, data, settings and environment overrides, and the
same pre-flight checks); every item is judged through the task's own per-item function at the client's
concurrency (`capjudge.tasks.harness.prejudge`), so requests and cache keys are those of a harness run: a run judged
in one place re-scores in the other with zero requests. The output is an lmms-eval-shaped folder
(`<date>_results.json` + `<date>_samples_<task>.jsonl`, same metric names and per-item fields) that
`capjudge leaderboard` reads like any other run.

The run is written under `--out/<model folder>/`, the folder named as lmms-eval would name it (see
`run_folder_name`); the model's exact name is recorded in the results file. Its files are named by the
instant judging started (local time, to the microsecond), written whole to a temporary file and then linked
into place, never over an existing file: two runs finishing at the same moment each keep their own.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from capjudge.judges.record import FAILURE_KEY, JUDGMENT_KEY, RECORD_METRIC

# A model name longer than this (in UTF-8) is refused: no filesystem takes it as a folder name, and no real
# model is called that.
MAX_NAME_BYTES = 255
# lmms-eval's folder naming (lmms_eval.utils.sanitize_model_name), with control characters besides.
_FOLDER_UNSAFE = re.compile(r'[\x00-\x1f\x7f"<>:/|\\?*\[\]]+')
_FOLDER_MAX_BYTES = 200  # a longer folder name is cut and ends with a hash of the exact name


class JudgeStageError(ValueError):
    """The input cannot be judged as asked; the message names the file, the task or the item."""


@dataclass(frozen=True)
class CaptionSource:
    """Where the captions come from, and how the output run is named."""

    description: str
    model: str
    model_args: str
    model_name: str
    by_doc_id: Mapping[int, str] | None  # from an lmms-eval samples file
    by_item_id: Mapping[str, str] | None  # from a captions file
    targets: Mapping[int, Any] | None = None  # the samples' logged `target`, to check they are this task's docs
    # One of capjudge's packaged caption sets (tasks/demo/captions_*.jsonl): each holds both demo tasks' ids on
    # purpose (one file serves the capjudge_demo group), so the other task's ids are expected, not worth a note.
    packaged: bool = False


# ----------------------------------------------------------------------------------------------------------
# Reading the captions


def caption_source(run: Path | None, captions: Path | None, task: str, model_name: str | None) -> CaptionSource:
    if (run is None) == (captions is None):
        raise JudgeStageError("give either RUN (an lmms-eval output) or --captions FILE")
    if captions is not None:
        from capjudge.models.captions_file import load_caption_set

        caption_set = load_caption_set(captions)
        name = _run_name(model_name, caption_set.name, f"captions file {captions}")
        # The name is not put into model_args: lmms-eval splits them on commas, and a name may hold one.
        return CaptionSource(f"captions file {captions}", "captions_file", f"path={captions}",
                             name, None, dict(caption_set.captions), packaged=is_packaged_caption_set(captions))
    from capjudge.judges.jsonl import read_json
    from capjudge.metrics.files.run_file_error import RunFileError
    from capjudge.metrics.files.runs import run_display_name
    from capjudge.metrics.files.samples_file import read_samples

    assert run is not None
    results_path, samples_path = _find_samples(run, task)
    results = read_json(results_path, JudgeStageError, f"results file {results_path}")
    if not isinstance(results, dict):
        raise JudgeStageError(f"results file {results_path}: not an lmms-eval results file (not a JSON object)")
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    model_args = config.get("model_args") if isinstance(config.get("model_args"), str) else ""
    by_doc_id: dict[int, str] = {}
    targets: dict[int, Any] = {}
    # The one reader of samples files, as the leaderboard's: an item logged twice, or a response that is not
    # text, is refused before the task is built (not judged from its last copy, nor as str(12345)).
    try:
        for sample in read_samples(samples_path):
            doc_id = sample.document_number()
            by_doc_id[doc_id] = sample.response()
            if "target" in sample.line:
                targets[doc_id] = sample.line["target"]
    except RunFileError as error:
        raise JudgeStageError(str(error)) from None
    name = _run_name(model_name, run_display_name(results), str(results_path))
    return CaptionSource(f"samples {samples_path}", str(config.get("model") or "unknown"), model_args,
                         name, by_doc_id, None, targets)


def is_packaged_caption_set(path: Path) -> bool:
    """Whether `path` is one of the caption sets shipped in capjudge's demo folder (resolved: a link to one is)."""
    from capjudge.tasks import TASKS_DIR

    demo = (TASKS_DIR / "demo").resolve()
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return resolved.parent == demo and resolved.name.startswith("captions_") and resolved.suffix == ".jsonl"


def _run_name(given: str | None, derived: str, source: str) -> str:
    """--model-name if given, else the name the source gives the run; checked either way."""
    if given is not None:
        return checked_model_name(given, "--model-name")
    return checked_model_name(derived, f"{source} (the name it gives the run; --model-name chooses another)")


def checked_model_name(name: str, origin: str) -> str:
    """`name` if it can name a run; else a JudgeStageError naming `origin`, raised before anything is judged
    (a name that cannot be written used to fail only when the judged run was written)."""
    if not name:
        raise JudgeStageError(f"{origin}: the model name is empty")
    if "\x00" in name:
        raise JudgeStageError(f"{origin}: the model name {name!r} holds a NUL character")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise JudgeStageError(f"{origin}: the model name {name!r} is not valid Unicode text") from None
    if size > MAX_NAME_BYTES:
        raise JudgeStageError(f"{origin}: the model name is {size} bytes long, over the {MAX_NAME_BYTES} a name "
                              f"may have: {name[:40]!r}...")
    return name


def run_folder_name(name: str) -> str:
    """The subfolder of --out a model's runs go into: the name as lmms-eval names its folders (`/`, `:`, `*`,
    ... become `__`), control characters too, and leading dots replaced (so `..` or `.` stays inside --out);
    a name too long for a folder is cut, ending with a hash of the exact name. The folder is only a place:
    every results file records the model's exact name, so two names that share a folder stay two models."""
    folder = _FOLDER_UNSAFE.sub("__", name)
    folder = re.sub(r"^\.+", lambda dots: "_" * len(dots.group()), folder)
    encoded = folder.encode("utf-8")
    if len(encoded) > _FOLDER_MAX_BYTES:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
        folder = encoded[:_FOLDER_MAX_BYTES].decode("utf-8", errors="ignore") + f"-{digest}"
    return folder


def _find_samples(run: Path, task: str) -> tuple[Path, Path]:
    from capjudge.metrics.files.run_file_error import RunFileError
    from capjudge.metrics.files.runs import RESULTS_SUFFIX, find_results_files, sampled_tasks, samples_path

    try:
        candidates = find_results_files(run)
    except RunFileError as error:
        raise JudgeStageError(str(error)) from None
    found = []
    for results_path in candidates:
        samples = samples_path(results_path, task)
        if samples.is_file():
            found.append((results_path, samples))
    if not found:
        # Samples of other tasks mean the run was logged, for another task: say which, not --log_samples.
        held = sorted({task for results_path in candidates for task in sampled_tasks(results_path)})
        advice = (f"it holds samples of {', '.join(map(repr, held))}: give --task with one of them" if held else
                  "run lmms-eval with --log_samples (and --predict_only to skip judging there)")
        raise JudgeStageError(
            f"{run}: no samples of task {task!r} (*_samples_{task}.jsonl beside a *{RESULTS_SUFFIX}); {advice}")
    if len(found) > 1:
        raise JudgeStageError(f"{run}: {len(found)} runs hold samples of {task!r}; name one results file")
    return found[0]


# ----------------------------------------------------------------------------------------------------------
# Judging


@dataclass(frozen=True)
class StageOutcome:
    results_path: Path | None  # None: batches are still running (--batch --no-wait); nothing written yet
    failed: int
    total: int
    open_batches: int = 0
    workers: tuple[Any, ...] = ()  # capjudge.tasks.runs.judging.processes.WorkerReport, one per process when several judged


def judge_stage(
    source: CaptionSource, task_name: str, out: Path, include_path: Path, batch: Any = None, *,
    processes: int | None = None,
) -> StageOutcome:
    """Judge every item of `task_name` that `source` has a caption for; write the run. With `batch`
    (`capjudge.tasks.runs.judging.batch_stage.BatchOptions`) the replies come through the Batch API first; online, the
    items are judged in `processes` processes (default: capjudge.tasks.runs.judging.processes.resolve_processes).
    A run that fails (a refused configuration, an unreachable judge) leaves no empty folder it made behind."""
    made = [folder for folder in (Path(out), _run_folder(out, source)) if not folder.exists()]
    try:
        return _judge_stage(source, task_name, out, include_path, batch, processes=processes)
    except BaseException:
        for folder in reversed(made):  # the run's folder, then --out; one that holds anything stays
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def _judge_stage(source: CaptionSource, task_name: str, out: Path, include_path: Path, batch: Any, *,
                 processes: int | None) -> StageOutcome:
    from capjudge.tasks.harness.prejudge import item_key

    from contextlib import nullcontext

    from capjudge.judges.client.preflight import batch_preflight

    started = datetime.now().astimezone()  # the run's instant, with this machine's UTC offset
    folder = _writable_run_folder(out, source)
    # A --batch run's pre-flight probes the Batch API path, not an online completion (see batch_preflight).
    with batch_preflight() if batch is not None else nullcontext():
        task = load_judged_task(task_name, include_path)
    paired = pair_captions(source, list(task.eval_docs), task)
    items = [(doc, caption) for _, doc, caption in paired]
    client_for = None
    if batch is not None:
        from capjudge.tasks.runs.judging.batch_stage import cache_only_clients, items_collect, run_batches

        collect, run = items_collect(task, items)
        summary = run_batches(task, folder / "batch", batch, collect=collect, run=run)
        if summary.open_batches:
            return StageOutcome(None, 0, len(items), summary.open_batches)
        if not batch.retry_online:  # the final pass reads the cache only: nothing is asked online
            client_for = cache_only_clients(summary)
    store, reports = None, []
    if batch is None:
        from capjudge.tasks.runs.judging.processes import judge_in_processes, resolve_processes

        workers = resolve_processes(processes, task.judge_config().max_concurrency, len(items))
        if workers > 1:
            store, reports = judge_in_processes(task, items, workers)
    if store is None:
        store = task.judge_all(items, client_for=client_for)
    lines = []
    per_metric: dict[str, list[Any]] = {name: [] for name in task.aggregation()}
    failed = 0
    for doc_id, doc, caption in paired:
        judgment = store.take(item_key(doc, caption))
        assert judgment is not None, "every item was judged above"
        metrics = task.metrics_for(doc, judgment)
        failed += int(metrics[RECORD_METRIC][JUDGMENT_KEY][FAILURE_KEY] is not None)
        for name in per_metric:
            per_metric[name].append(metrics.get(name))
        # `input` as lmms-eval logs it (the prompt the model was given): the item report shows it.
        lines.append({"doc_id": doc_id, "target": task.doc_to_target(doc), "filtered_resps": caption, **metrics,
                      "input": task.doc_to_text(doc)})
    aggregated = {f"{name},none": aggregate(values) for name, aggregate in task.aggregation().items()
                  for values in [per_metric[name]]}
    written = _write_run(folder, source, task, task_name, aggregated, lines, started)
    return StageOutcome(written, failed, len(lines), workers=tuple(reports))


def load_judged_task(task_name: str, include_path: Path) -> Any:
    """The task exactly as lmms-eval builds it (YAML, data, settings, environment overrides, pre-flight)."""
    from lmms_eval.tasks import TaskManager

    from capjudge.tasks.harness.judged_task import JudgedTask

    manager = TaskManager("ERROR", include_path=str(include_path), include_defaults=False)
    if task_name not in manager.all_tasks:
        raise JudgeStageError(f"no task {task_name!r} in {include_path}")
    task = manager.load_task_or_group([task_name])[task_name]
    if not isinstance(task, JudgedTask):
        raise JudgeStageError(f"task {task_name!r} is not a capjudge judged task")
    return task


def pair_captions(
    source: CaptionSource, docs: Sequence[Mapping[str, Any]], task: Any, command: str = "capjudge judge"
) -> list[tuple[int, Mapping[str, Any], str]]:
    """(doc_id, doc, caption) for every item to judge, in the task's order; bad input is a JudgeStageError.
    What is only said (ids that are not the task's) is said under `command`, the command that reads them."""
    if source.by_doc_id is not None:
        unknown = sorted(doc_id for doc_id in source.by_doc_id if not 0 <= doc_id < len(docs))
        if unknown:
            raise JudgeStageError(
                f"{source.description}: doc_id {unknown[0]} (and {len(unknown) - 1} more) is not an item of task "
                f"{task.config.task!r} ({len(docs)} items): were these samples made with another dataset?"
            )
        for doc_id, target in (source.targets or {}).items():
            expected = task.doc_to_target(docs[doc_id])
            if str(target) != str(expected):
                raise JudgeStageError(
                    f"{source.description}: doc_id {doc_id} was logged with target {str(target)[:80]!r}, but item "
                    f"{docs[doc_id].get('id')} of task {task.config.task!r} has {str(expected)[:80]!r}: these samples "
                    "were made from other data (another dataset, split or data file)"
                )
        return [(doc_id, docs[doc_id], caption) for doc_id, caption in sorted(source.by_doc_id.items())]
    assert source.by_item_id is not None
    # As the captions_file model: every item of the task needs a caption; a file may hold other tasks' too.
    known = {str(doc.get("id")): (doc_id, doc) for doc_id, doc in enumerate(docs)}
    extra = [item_id for item_id in source.by_item_id if item_id not in known]
    if len(extra) == len(source.by_item_id):
        raise JudgeStageError(
            f"{source.description}: none of its {len(extra)} ids is an item of task {task.config.task!r} "
            f"(e.g. {', '.join(extra[:5])}); wrong task or wrong file?"
        )
    missing = [item_id for item_id in known if item_id not in source.by_item_id]
    if missing:
        raise JudgeStageError(
            f"{source.description}: {len(missing)} items of task {task.config.task!r} have no caption: "
            f"{', '.join(missing[:10])}"
        )
    if extra and not source.packaged:
        print(f"{command}: {source.description}: ignoring {len(extra)} ids that are not items of "
              f"{task.config.task!r} (e.g. {', '.join(extra[:5])})", file=sys.stderr)
    return [(doc_id, doc, source.by_item_id[item_id]) for item_id, (doc_id, doc) in known.items()]


def _run_folder(out: Path, source: CaptionSource) -> Path:
    return Path(out) / run_folder_name(source.model_name)


def _writable_run_folder(out: Path, source: CaptionSource) -> Path:
    """The run's folder, made and checked before anything is judged: an --out that is a file or cannot be
    written is one error, not a traceback after every item was paid for."""
    from capjudge.judges.atomic_files import sweep_stale_partials
    from capjudge.metrics.files.outputs import OutputError, writable_folder

    try:
        writable_folder(Path(out))
        folder = writable_folder(_run_folder(out, source))
        for left in sweep_stale_partials(folder):  # from a run killed while it wrote
            print(f"capjudge judge: removed {left}, left by a killed run", file=sys.stderr)
        return folder
    except OutputError as error:
        raise JudgeStageError(str(error)) from None


def _write_run(folder: Path, source: CaptionSource, task: Any, task_name: str, aggregated: Mapping[str, Any],
               lines: Sequence[Mapping[str, Any]], started: datetime) -> Path:
    """Write the samples, then the results file that makes the run visible, each whole and under a name no
    file has: the start's local time to the microsecond, numbered on if even that is taken."""
    from capjudge.judges.atomic_files import discard, publish_new, stage
    from capjudge.metrics.files.runs import (
        CAPJUDGE_VERSION_FIELD, RESULTS_SUFFIX, RUN_NAME_FIELD, STARTED_FIELD, samples_path,
    )
    from capjudge.tasks import capjudge_version

    stamp = started.strftime("%Y%m%d_%H%M%S_%f")
    results = {
        "results": {task_name: {"alias": task_name, **aggregated}},
        "configs": {task_name: task.dump_config()},
        "higher_is_better": {task_name: task.higher_is_better()},
        "n-samples": {task_name: {"original": len(task.eval_docs), "effective": len(lines)}},
        "config": {"model": source.model, "model_args": source.model_args, RUN_NAME_FIELD: source.model_name,
                   "judged_by": "capjudge judge", "captions_from": source.description},
        CAPJUDGE_VERSION_FIELD: capjudge_version(),
        "model_name": source.model_name,
        "date": started.strftime("%Y%m%d_%H%M%S"),
        STARTED_FIELD: started.isoformat(),
    }
    results_text = json.dumps(results, indent=2, default=str, ensure_ascii=False) + "\n"
    first_results = folder / f"{stamp}{RESULTS_SUFFIX}"
    samples = stage(samples_path(first_results, task_name),
                    (json.dumps(line, default=str, ensure_ascii=False) + "\n" for line in lines))
    staged_results = stage(first_results, [results_text])
    try:
        for date_id in _fresh_names(stamp):
            results_path = folder / f"{date_id}{RESULTS_SUFFIX}"
            run_samples = samples_path(results_path, task_name)
            if results_path.exists() or not publish_new(samples, run_samples):
                continue
            if publish_new(staged_results, results_path):
                return results_path
            run_samples.unlink()  # ours, but the results name was taken meanwhile: try the next name
    finally:
        discard(samples, staged_results)
    raise AssertionError("unreachable: _fresh_names never ends")


def _fresh_names(stamp: str) -> Iterator[str]:
    yield stamp
    for number in itertools.count(2):
        yield f"{stamp}_{number}"

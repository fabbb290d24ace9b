"""`capjudge judge --processes N`: the judging stage's items split over several processes on this machine.

Why: one Python process sends at most about 300 judge requests a second. Its threads share one GIL, and a
judged item costs about 3 ms of CPU (HTTP, JSON, parsing, cache; results/benchmarks.md), so at 64 requests in
flight against a fast judge (vLLM or SGLang on the next machine, a high API tier) the requests wait for the
GIL rather than for the judge. More threads cannot help; more processes can.

How: after the task is loaded (documents, settings, pre-flight), the stage forks N workers, so nothing is
imported or loaded again. Worker i judges every N-th item through `JudgedTask.judge_all`, exactly as the
one-process stage does, with threads for its share of the client's bound; the machine budget
(capjudge.judges.client.budget) still holds the total in flight to `CAPJUDGE_MAX_CONCURRENCY`, as it does for
accelerate's ranks, and every reply lands in the shared reply cache as it arrives. Each worker sends its
judgments back through a pipe and the stage writes its run from them, in the items' order, so the output is
that of a one-process run. An item whose worker died (its replies are in the cache) is judged again by the
parent. This is not a distributed layer: one machine, one cache, the budget every process already shares.

Linux only (it needs fork); elsewhere, and when it cannot help, the stage runs in one process.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.tasks.harness.members import judged_by_all
from capjudge.tasks.harness.prejudge import PrejudgedItems, item_key

log = logging.getLogger(__name__)

# One process per this many requests in flight: the judging stage measured 0.95 of its bound at 16 in flight
# and 0.87 at 32 in one process (200 ms judge), and 0.77 at 64.
IN_FLIGHT_PER_PROCESS = 32
# Fewer items than this per process and a second process's start costs more than it saves.
MIN_ITEMS_PER_PROCESS = 200

Item = tuple[Mapping[str, Any], str]


@dataclass(frozen=True)
class WorkerReport:
    """What one judging process did: the test of a multi-process run counts these."""

    index: int
    pid: int
    items: int
    failed: int
    requests: int


def can_fork() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def resolve_processes(requested: int | None, max_concurrency: int, n_items: int) -> int:
    """How many processes judge: `requested` (--processes), or by default one per IN_FLIGHT_PER_PROCESS
    requests in flight, at most one per CPU core and one per MIN_ITEMS_PER_PROCESS items."""
    if requested is not None and requested < 1:
        raise ValueError(f"--processes must be at least 1, got {requested}")
    if requested is None:
        requested = min(_usable_cores(), math.ceil(max_concurrency / IN_FLIGHT_PER_PROCESS),
                        max(1, n_items // MIN_ITEMS_PER_PROCESS))
    wanted = max(1, min(requested, max_concurrency, n_items))
    if wanted > 1 and not can_fork():
        log.warning("judging in one process: --processes needs fork (Linux)")
        return 1
    return wanted


def _usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def judge_in_processes(task: Any, items: Sequence[Item], processes: int) -> tuple[PrejudgedItems, list[WorkerReport]]:
    """Judge `items` in `processes` forked workers; the judgments (as `task.judge_all` gives them) and what
    each worker did."""
    threads = math.ceil(task.judge_config().max_concurrency / processes)
    _prepare_to_fork()
    context = multiprocessing.get_context("fork")
    workers = []
    store, reports = PrejudgedItems(), []
    try:
        for index in range(processes):
            receiving, sending = context.Pipe(duplex=False)
            # daemon: should this process end abnormally, multiprocessing ends the workers instead of waiting
            process = context.Process(target=_judge_share, name=f"capjudge-judge-{index + 1}", daemon=True,
                                      args=(task, items[index::processes], index, processes, threads, sending, os.getpid()))
            process.start()
            sending.close()  # the parent's copy: recv() then sees EOF if the worker dies before sending
            workers.append((process, receiving))

        for index, (process, receiving) in enumerate(workers):
            try:
                report, judgments = receiving.recv()
            except EOFError:
                report, judgments = None, []
            process.join()
            for key, judgment in judgments:
                store.put(key, judgment)
            if report is None or process.exitcode != 0:
                log.warning("judging process %d/%d (pid %s) ended with exit code %s; the parent judges its items "
                            "(the replies it had written to the cache are not asked again)",
                            index + 1, processes, process.pid, process.exitcode)
            else:
                reports.append(report)
    except BaseException:
        # Interrupted or failed here (a signal to this process alone, a reply that would not unpickle): end
        # the workers now rather than let them judge on and block on a pipe nobody reads.
        for process, receiving in workers:
            if process.is_alive():
                process.kill()
            receiving.close()
            process.join()
        raise

    missing = [(doc, caption) for doc, caption in items if not store.has(item_key(doc, caption))]
    if missing:
        for key_and_judgment in _judgments(task.judge_all(missing), missing):
            store.put(*key_and_judgment)
    return store, reports


def _prepare_to_fork() -> None:
    """What a fork must not copy: open SQLite connections and queued cache writes (the process-wide judge
    clients are closed; the next use builds new ones), and tqdm's monitor thread, which takes tqdm's lock
    every few seconds (a child forked at that moment would wait on it forever)."""
    from tqdm import tqdm

    from capjudge.judges.client.registry import release_shared_clients

    release_shared_clients()
    tqdm.monitor_interval = 0
    monitor = getattr(tqdm, "monitor", None)
    if monitor is not None:
        monitor.exit()
        tqdm.monitor = None


def _judge_share(task: Any, items: Sequence[Item], index: int, processes: int, threads: int, report_to: Any,
                 parent: int) -> None:
    """A worker: judge its items, send (report, judgments) to the parent."""
    from capjudge.judges.client.registry import shared_client

    status = 1
    try:
        _end_with_parent(parent)
        store = task.judge_all(items, workers=threads, bar_position=index,
                               description=f"capjudge: judging {task.config.task} [process {index + 1}/{processes}]")
        judgments = _judgments(store, items)
        usages = [shared_client(config).usage() for config in task.judge_configs()]
        report = WorkerReport(index=index, pid=os.getpid(), items=len(judgments),
                              failed=sum(not judged_by_all(judgment) for _, judgment in judgments),
                              requests=sum(used["requests"] for usage in usages for used in usage.values()))
        report_to.send((report, judgments))
        status = 0
    except BaseException:  # noqa: BLE001 - reported here; the parent judges this worker's items itself
        traceback.print_exc()
    finally:
        from capjudge.judges.client.cache import flush_open_caches

        flush_open_caches()  # what an interrupted judge_all had not written yet (os._exit skips atexit)
        report_to.close()
        sys.stderr.flush()
        os._exit(status)  # not multiprocessing's exit path: it would run the parent's inherited atexit hooks


def _end_with_parent(parent: int) -> None:
    """Ask Linux to end this worker if the stage's process dies (a kill -9 of `capjudge judge` must not leave
    workers judging on their own); replies already received are in the cache for the rerun."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _judgments(store: Any, items: Sequence[Item]) -> list[tuple[tuple[str, str], Any]]:
    """Each distinct item's judgment, taken out of `store` (an item asked twice is judged once)."""
    taken = []
    for doc, caption in items:
        key = item_key(doc, caption)
        judgment = store.take(key)
        if judgment is not None:
            taken.append((key, judgment))
    return taken

"""Judging every item of a task at the client's full concurrency, inside an lmms-eval run at its default flags.

lmms-eval calls `process_results` one document at a time from a pool of `--process_docs_parallel` threads
(default 4), so a judge call per document caps an API judge at 4 requests in flight, whatever the API allows.
But lmms-eval also gives a task one moment where it holds every response at once: `Task.apply_filters`, called
for all instances before any `process_results`. `JudgedTask.apply_filters` hands them to `prejudge`, which
judges all items here, up to the judge client's own bound (`CAPJUDGE_MAX_CONCURRENCY`), through exactly the
per-item function `process_results` would call: the same requests, cache keys, parsers, failure kinds and
logged records. `process_results` then only picks up each finished judgment.

Memory stays bounded: each worker builds one item's request (frames included) as it sends it and keeps only
the parsed judgment. Nothing is judged under `--predict_only` (lmms-eval clears `process_results` there).
A progress bar shows judged / failed / cached items and requests per second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

JudgeOne = Callable[[Mapping[str, Any], str], Any]  # (doc, caption) -> a judgment with .result, .cache_hit, .requests


def item_key(doc: Mapping[str, Any], caption: str) -> tuple[str, str]:
    """What identifies one judgment: the item and the caption judged (a document can be asked several
    captions, e.g. one per filter)."""
    return (str(doc.get("id")), caption)


@dataclass
class PrejudgedItems:
    """Judgments made ahead of `process_results`, taken out one by one as lmms-eval asks for them."""

    _judgments: dict[tuple[str, str], Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, key: tuple[str, str], judgment: Any) -> None:
        with self._lock:
            self._judgments[key] = judgment

    def has(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._judgments

    def take(self, key: tuple[str, str]) -> Any | None:
        with self._lock:
            return self._judgments.pop(key, None)


def limit_malloc_arenas() -> None:
    """Cap glibc's malloc arenas before starting many threads (unless MALLOC_ARENA_MAX is set).

    glibc gives each new thread its own arena, up to 8 per core, and an arena keeps the memory freed in it.
    The judging stage's threads mostly wait on the network, but each has built frames and request bodies, so
    16 threads kept 2.4x the peak memory of lmms-eval's 4 (benchmark `memory`); with the arenas capped at the
    core count the peak is that of 4 threads. Later threads share the existing arenas; nothing else changes."""
    import ctypes
    import os

    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to do
        return
    m_arena_max = -8  # M_ARENA_MAX in glibc's malloc.h
    mallopt(m_arena_max, max(2, os.cpu_count() or 2))


class _Progress:
    """Counts the workers update and the progress bar shows: judged / failed / cached items, requests/s."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.done = self.judged = self.failed = self.cached = self.requests = 0
        self._last_shown = -1

    def count(self, judgment: Any) -> None:
        with self._lock:
            self.done += 1
            if judgment.result.ok:
                self.judged += 1
            else:
                self.failed += 1
            self.cached += int(bool(judgment.cache_hit))
            self.requests += int(judgment.requests or 0)

    def count_error(self) -> None:
        with self._lock:
            self.done += 1

    def show(self, bar: Any) -> None:
        with self._lock:
            done, judged, failed, cached, requests = self.done, self.judged, self.failed, self.cached, self.requests
        if done == self._last_shown:  # nothing new: no redraw (a log file would get one per call)
            return
        self._last_shown = done
        rate = requests / max(time.monotonic() - self.started, 1e-9)
        bar.set_postfix(judged=judged, failed=failed, cached=cached, req_s=f"{rate:.1f}", refresh=False)
        bar.update(done - bar.n)

    def summary(self) -> str:
        return (f"{self.judged} judged, {self.failed} failed, {self.cached} from the cache, {self.requests} requests "
                f"in {time.monotonic() - self.started:.1f}s")


def prejudge(
    items: Iterable[tuple[Mapping[str, Any], str]],
    judge_one: JudgeOne,
    *,
    workers: int,
    description: str,
    into: PrejudgedItems,
    bar_position: int = 0,
) -> None:
    """Judge every (doc, caption) with up to `workers` in flight; results go `into` the store by `item_key`.

    An exception from `judge_one` (a bug, since bad items become unjudged results) is re-raised after the
    other items finish, so what was judged is in the cache for the rerun."""
    from tqdm import tqdm

    pending: dict[tuple[str, str], tuple[Mapping[str, Any], str]] = {}
    for doc, caption in items:
        pending.setdefault(item_key(doc, caption), (doc, caption))
    if not pending:
        return
    limit_malloc_arenas()
    progress = _Progress()
    queue = iter(pending.items())  # not changed while the workers read it
    queue_lock = threading.Lock()
    first_error: list[BaseException] = []

    def work() -> None:
        # Each worker takes the next item when it is free: no future per item and no completion queue for
        # the main thread to drain (with thousands of items those cost as much CPU as the judging's own
        # bookkeeping, under the same GIL the requests need).
        while True:
            with queue_lock:
                entry = next(queue, None)
            if entry is None:
                return
            key, (doc, caption) = entry
            try:
                judgment = judge_one(doc, caption)
            except BaseException as error:  # noqa: BLE001 - re-raised below, once every item has finished
                with queue_lock:
                    first_error.append(error)
                progress.count_error()
                continue
            into.put(key, judgment)
            progress.count(judgment)

    threads = [threading.Thread(target=work, name=f"capjudge-prejudge-{index}", daemon=True)
               for index in range(max(1, min(workers, len(pending))))]
    # bar_position: each of several judging processes draws its bar on its own line.
    with tqdm(total=len(pending), desc=description, unit="item", dynamic_ncols=True, position=bar_position) as bar:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # five refreshes a second is what a person can read
                progress.show(bar)
        progress.show(bar)
    if first_error:
        raise first_error[0]
    log.info("%s: %s", description, progress.summary())

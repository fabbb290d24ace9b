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
from concurrent.futures import ThreadPoolExecutor, as_completed
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


def prejudge(
    items: Iterable[tuple[Mapping[str, Any], str]],
    judge_one: JudgeOne,
    *,
    workers: int,
    description: str,
    into: PrejudgedItems,
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
    counts = {"judged": 0, "failed": 0, "cached": 0, "requests": 0}
    started = time.monotonic()
    first_error: BaseException | None = None
    with tqdm(total=len(pending), desc=description, unit="item", dynamic_ncols=True) as bar, \
            ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="capjudge-prejudge") as pool:
        futures = {pool.submit(judge_one, doc, caption): key for key, (doc, caption) in pending.items()}
        for future in as_completed(futures):
            try:
                judgment = future.result()
            except BaseException as error:  # noqa: BLE001 - re-raised below, once every item has finished
                if first_error is None:
                    first_error = error
                bar.update(1)
                continue
            into.put(futures[future], judgment)
            counts["judged" if judgment.result.ok else "failed"] += 1
            counts["cached"] += int(bool(judgment.cache_hit))
            counts["requests"] += int(judgment.requests or 0)
            rate = counts["requests"] / max(time.monotonic() - started, 1e-9)
            bar.set_postfix(judged=counts["judged"], failed=counts["failed"], cached=counts["cached"],
                            req_s=f"{rate:.1f}", refresh=False)
            bar.update(1)
    if first_error is not None:
        raise first_error
    log.info("%s: %d judged, %d failed, %d from the cache, %d requests in %.1fs", description, counts["judged"],
             counts["failed"], counts["cached"], counts["requests"], time.monotonic() - started)

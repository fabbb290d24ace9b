"""The classic baselines of a set of captions, computed once per content and cached as one JSON file.

Both human-correlation benchmarks score their candidates with
:func:`capjudge.metrics.human_correlation.baselines.caption_metric_scores` (pycocoevalcap: a Java tokenizer, and
METEOR, whose paraphrase table alone takes ~10 s to load), and both re-score the same captions run after run.
So the scores are cached under the sha256 of exactly what was scored: every item's id, candidate and the
references shown, in order (CIDEr's document frequencies are taken over the whole set, so the set is part of
what a score means), plus a label naming the benchmark and setting, the pycocoevalcap version and this
module's cache format. Other content, another setting or another pycocoevalcap is another key, hence another
file. The key is also stored inside the file and checked on every read, and the file carries the sha256 of its
own contents (`DIGEST_FIELD`, over everything else in it, the scores included): a file that cannot be parsed,
is of another cache format (older files have no digest), lacks a score, holds a non-finite one, holds another
key (copied or renamed by hand) or whose contents no longer match its digest (a score edited by hand or by a
bad disk) is never used; it is recomputed and replaced, and one line names it. Recomputed rather than refused:
the scores are derived from the data file at hand, so recomputing them always gives this run the right numbers
without the user's help, where a refusal would stop a correct run until someone deletes a file. When they
cannot be recomputed here (no pycocoevalcap or Java), the run stops as it does without a cache: the file's
scores are never used. The digest detects edits and damage, not forgery: anyone can write a file with a
matching digest, as this module does. A cache hit imports nothing from pycocoevalcap and starts no Java.

Processes that need the same missing file at once (two `capjudge correlate` runs, parallel test workers) take
turns on a lock file beside it: the first computes, the others then read what it wrote.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from capjudge.judges.jsonl import decode_json
from capjudge.judges.atomic_files import write_replacing
from capjudge.metrics.files.outputs import writable_folder
from capjudge.metrics.human_correlation.baselines import (
    BASELINE_SCORERS,
    BaselineScores,
    BaselineUnavailable,
    CaptionItem,
    caption_metric_scores,
)

CACHE_FORMAT = 3  # bump when the file layout or what the scores mean changes: old files then miss
# (3: the file carries DIGEST_FIELD; a format-2 file, which has no digest, is stale and recomputed.)
DIGEST_FIELD = "sha256"  # the sha256 of the file's canonical contents without this field
# Beside the judge reply cache's default (~/.cache/capjudge/judge_cache.sqlite, capjudge.judges.client.config).
DEFAULT_CACHE_DIR = Path("~/.cache/capjudge/baselines")


@dataclass(frozen=True)
class CachedBaselines:
    """Every baseline's score per item (None: the item has no candidate), and where they came from."""

    baselines: BaselineScores
    pycocoevalcap_version: str
    cache_file: Path
    from_cache: bool
    seconds: float  # time to compute them (when read from the cache: the time the computing run took)
    cache_note: str | None = None  # a cache file that could not be used, and what was done instead


def pycocoevalcap_version() -> str:
    """Read from the installed distribution's metadata, so a cache hit needs no import of pycocoevalcap."""
    try:
        return importlib.metadata.version("pycocoevalcap")
    except importlib.metadata.PackageNotFoundError:
        raise BaselineUnavailable("the Python package 'pycocoevalcap' is not installed") from None


def cache_key(items: Sequence[CaptionItem], label: str, version: str) -> str:
    """sha256 of exactly what is scored, with the label, the pycocoevalcap version and the cache format."""
    digest = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "pycocoevalcap": version, "label": label})
                            .encode("utf-8"))
    for item in items:
        # One JSON array per item: unambiguous boundaries between captions, whatever characters they hold.
        digest.update(json.dumps([item.item_id, item.candidate, list(item.references)], ensure_ascii=False)
                      .encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def cache_file(cache_dir: Path, label: str, key: str) -> Path:
    # 20 hex digits name the file; the whole key inside it is what a read checks.
    return Path(cache_dir).expanduser() / f"{label}_{key[:20]}.json"


def cached_baselines(items: Sequence[CaptionItem], label: str, cache_dir: Path, *, data: str = "",
                     computing: str = "", say: Callable[[str], None] = lambda line: None) -> CachedBaselines:
    """The baselines of `items` from the cache when it holds this exact content, else computed (pycocoevalcap,
    Java) and cached. `say` gets one line about a cache file not used and `computing` before a computation.
    `data` (the scored file's path) is recorded in a new cache file for whoever reads it; it is not part of the
    key. Raises BaselineUnavailable when they must be computed and pycocoevalcap or Java is missing;
    OutputError (naming --cache-dir) when they must be computed and the cache folder cannot be written."""
    version = pycocoevalcap_version()
    key = cache_key(items, label, version)
    path = cache_file(cache_dir, label, key)
    ids = tuple(item.item_id for item in items)
    if path.exists():
        cached, _ = read_cache(path, key, ids)
        if cached is not None:
            return CachedBaselines(cached[0], version, path, True, cached[1])

    writable_folder(path.parent, "--cache-dir")  # before minutes of work: a folder we cannot write fails now
    with _computing_alone(path):
        note = None
        if path.exists():  # written by another process while this one waited, or unusable
            cached, problem = read_cache(path, key, ids)
            if cached is not None:
                return CachedBaselines(cached[0], version, path, True, cached[1])
            note = f"{path}: {problem}; not used: recomputed and replaced"
            say(note)
        if computing:
            say(computing)
        started = time.perf_counter()
        computed = caption_metric_scores(items)
        seconds = time.perf_counter() - started
        write_replacing(path, json.dumps(sealed({
            "format": CACHE_FORMAT,
            "key": key,
            "label": label,
            "pycocoevalcap": version,
            "n_items": len(items),
            "data": str(data),
            "seconds": seconds,
            # json writes floats with repr: they read back bit for bit. An item without a candidate is null.
            "scores": {name: list(computed.scores[name]) for name in BASELINE_SCORERS},
        })))
        return CachedBaselines(computed, version, path, False, seconds, note)


def content_digest(record: dict[str, Any]) -> str:
    """sha256 of `record` without its digest field, as canonical JSON (sorted keys, no spaces). Floats are
    written by repr and read back bit for bit, so the digest of a file as read equals the one it was sealed with
    exactly when nothing in it has changed."""
    body = {name: value for name, value in record.items() if name != DIGEST_FIELD}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sealed(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with the digest of its contents, as a cache file is written."""
    return {**record, DIGEST_FIELD: content_digest(record)}


@contextmanager
def _computing_alone(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`'s lock file (released by the kernel if this process dies)."""
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read_cache(path: Path, key: str, ids: tuple[str, ...]) -> tuple[tuple[BaselineScores, float] | None, str]:
    """(scores, seconds) when the file holds `key`'s scores for every item, unchanged since it was written;
    else (None, what is wrong)."""
    try:
        # A key twice (two "scores") would leave which copy counts to the JSON reader: corrupt too.
        raw: Any = decode_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"cache file is unreadable or corrupt ({type(error).__name__})"
    if not isinstance(raw, dict) or raw.get("format") != CACHE_FORMAT:
        return None, f"cache file is not in cache format {CACHE_FORMAT} (an older capjudge's has no digest)"
    if raw.get("key") != key:
        return None, "cache file belongs to other content (its key is not this data's)"
    scores = raw.get("scores")
    if not isinstance(scores, dict) or set(scores) != set(BASELINE_SCORERS):
        return None, f"cache file does not hold the scores {', '.join(BASELINE_SCORERS)}"
    for name in BASELINE_SCORERS:
        values = scores[name]
        if (not isinstance(values, list) or len(values) != len(ids)
                or not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
                           for v in values)):
            # (json reads Infinity and NaN: neither is a score any baseline gives, so the file was not written here)
            return None, f"cache file's {name} is not {len(ids)} finite numbers"
    # Last, so that a file of the wrong shape is named for that: a digest that does not match means the
    # contents were changed after they were written (a score edited by hand keeps the shape).
    if raw.get(DIGEST_FIELD) != content_digest(raw):
        return None, f"cache file's contents do not match its {DIGEST_FIELD} digest (changed since it was written)"
    seconds = raw.get("seconds")
    baselines = BaselineScores(ids, {name: tuple(None if v is None else float(v) for v in scores[name])
                                     for name in BASELINE_SCORERS})
    return (baselines, float(seconds) if isinstance(seconds, (int, float)) else math.nan), ""

"""VATEX-EVAL's classic baselines (BLEU-1, BLEU-4, METEOR, ROUGE-L, CIDEr) with 1 and with 9 references,
computed once per content and cached as a JSON file.

The scores come from :func:`capjudge.metrics.human_correlation.baselines.caption_metric_scores` (pycocoevalcap's
PTB tokenizer and scorers, as the MSVD-Eval baselines), over every candidate of the file at once: CIDEr's
document frequencies are taken over the whole set scored, as the field computes it, so the set scored is part of
what a cached score means. The "1-ref" setting is EMScore's ``refs[:1]``; "9-ref" is all nine.

Computing the 9-reference setting over the 18,000 candidates takes minutes (METEOR and the tokenizer are Java),
so the result is cached. The cache key is the sha256 of exactly what was scored (every candidate's clip id,
index, caption and the references shown) plus the reference setting, the pycocoevalcap version and this
module's cache format: a different data file, an edited caption, another pycocoevalcap or another setting is a
different key, hence a different file. The key is also stored inside the file and checked on every read; a file
that cannot be parsed, lacks a score, or holds another key (copied or renamed by hand) is never used: it is
recomputed and replaced, and one line says so (``VatexBaselines.cache_note``; the CLI prints it on stderr).
A cache hit imports nothing from pycocoevalcap and starts no Java.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from capjudge.metrics.files.outputs import writable_folder, write_replacing
from capjudge.metrics.human_correlation.baselines import (
    BASELINE_SCORERS,
    BaselineUnavailable,
    caption_metric_scores,
)
from capjudge.metrics.human_correlation.vatex_eval import VatexCandidate
from capjudge.metrics.human_correlation.vatex_report import Scorer

REFERENCE_SETTINGS: tuple[int, ...] = (1, 9)
CACHE_FORMAT = 1  # bump when the file layout or what the scores mean changes: old files then miss
# Beside the judge reply cache's default (~/.cache/capjudge/judge_cache.sqlite, capjudge.judges.client.config).
DEFAULT_CACHE_DIR = Path("~/.cache/capjudge/vatex_baselines")


@dataclass(frozen=True)
class _Item:
    """What caption_metric_scores reads (its CaptionItem protocol)."""

    item_id: str
    candidate: str | None
    references: Sequence[str]


@dataclass(frozen=True)
class VatexBaselines:
    """Every baseline's score per candidate, in the candidates' order, for one reference setting."""

    references: int
    scores: dict[str, np.ndarray]  # metric (BLEU-1, ...) -> one value per candidate
    pycocoevalcap_version: str
    cache_file: Path
    from_cache: bool
    seconds: float  # time to compute them (when read from the cache: the time the cached run took)
    cache_note: str | None = None  # a cache file that could not be used, and what was done instead

    def named(self) -> dict[str, np.ndarray]:
        """The scores under their report names, e.g. "CIDEr (9 refs)"."""
        return {baseline_name(metric, self.references): values for metric, values in self.scores.items()}


def baseline_name(metric: str, references: int) -> str:
    return f"{metric} ({references} ref{'s' if references != 1 else ''})"


def pycocoevalcap_version() -> str:
    """Read from the installed distribution's metadata, so a cache hit needs no import of pycocoevalcap."""
    try:
        return importlib.metadata.version("pycocoevalcap")
    except importlib.metadata.PackageNotFoundError:
        raise BaselineUnavailable("the Python package 'pycocoevalcap' is not installed") from None


def _check_setting(references: int) -> None:
    if references not in REFERENCE_SETTINGS:
        raise ValueError(f"references must be one of {REFERENCE_SETTINGS}, got {references!r}")


def cache_key(candidates: Sequence[VatexCandidate], references: int, version: str) -> str:
    """sha256 of exactly what is scored, with the setting, the pycocoevalcap version and the cache format."""
    _check_setting(references)
    digest = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "pycocoevalcap": version, "references": references})
                            .encode("utf-8"))
    for c in candidates:
        # One JSON array per candidate: unambiguous boundaries between captions, whatever characters they hold.
        digest.update(json.dumps([c.clip_id, c.candidate_index, c.caption, c.references[:references]],
                                 ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def cache_path(cache_dir: Path, candidates: Sequence[VatexCandidate], references: int) -> Path:
    """Where `candidates`' baselines with `references` references are (or will be) cached."""
    return _file(cache_dir, cache_key(candidates, references, pycocoevalcap_version()), references)


def _file(cache_dir: Path, key: str, references: int) -> Path:
    # 20 hex digits name the file; the whole key inside it is what a read checks.
    return Path(cache_dir).expanduser() / f"vatex_baselines_{references}ref_{key[:20]}.json"


def baseline_scorers(candidates: Sequence[VatexCandidate], cache_dir: Path, data: str = "",
                     say: Callable[[str], None] = lambda line: None) -> list[Scorer]:
    """Every baseline in both reference settings as a report scorer ("BLEU-1 (1 ref)", ..., "CIDEr (9 refs)").
    `say` gets one line per cache file that could not be used and one before each computation (it takes minutes
    on the full set)."""
    scorers = []
    for references in REFERENCE_SETTINGS:
        baselines = vatex_baselines(candidates, references, cache_dir, data, say)
        setting = f"{references} reference{'s' if references != 1 else ''} per clip (refs[:{references}])"
        source = (f"pycocoevalcap {baselines.pycocoevalcap_version} (PTB tokenizer), {setting}, CIDEr document "
                  f"frequencies over the {len(candidates):,} candidates scored; cached in {baselines.cache_file}")
        scorers += [Scorer(name, source, values) for name, values in baselines.named().items()]
    return scorers


def vatex_baselines(candidates: Sequence[VatexCandidate], references: int, cache_dir: Path,
                    data: str = "", say: Callable[[str], None] = lambda line: None) -> VatexBaselines:
    """The baselines for `candidates` with `references` references per clip: from the cache when it holds this
    exact content, else computed (pycocoevalcap, Java) and cached; `say` gets a line about a cache file not used
    and one before computing. `data` (the file's path) is recorded in a new
    cache file for whoever reads it; it is not part of the key. Raises BaselineUnavailable when they must be
    computed and pycocoevalcap or Java is missing; OutputError (naming --cache-dir) when they must be computed
    and the cache folder cannot be written."""
    version = pycocoevalcap_version()
    key = cache_key(candidates, references, version)
    path = _file(cache_dir, key, references)
    note = None
    if path.exists():
        cached, problem = _read_cache(path, key, len(candidates))
        if cached is not None:
            scores, seconds = cached
            return VatexBaselines(references, scores, version, path, True, seconds)
        note = f"{path}: {problem}; not used: recomputed and replaced"
        say(note)

    writable_folder(path.parent, "--cache-dir")  # before minutes of work: a folder we cannot write fails now
    say(f"computing the classic baselines with {references} reference(s) over {len(candidates):,} candidates "
        f"(pycocoevalcap, Java: minutes for all 18,000); cached in {path.parent}")
    started = time.perf_counter()
    items = [_Item(f"{c.clip_id}#{c.candidate_index}", c.caption, c.references[:references]) for c in candidates]
    computed = caption_metric_scores(items)
    scores = {name: np.array([math.nan if v is None else v for v in computed.scores[name]], dtype=np.float64)
              for name in BASELINE_SCORERS}
    seconds = time.perf_counter() - started
    write_replacing(path, json.dumps({
        "format": CACHE_FORMAT,
        "key": key,
        "references": references,
        "pycocoevalcap": version,
        "n_candidates": len(candidates),
        "data": str(data),
        "seconds": seconds,
        # json writes floats with repr: they read back bit for bit. NaN (no candidate) is written as null.
        "scores": {name: [None if math.isnan(v) else v for v in values.tolist()] for name, values in scores.items()},
    }))
    return VatexBaselines(references, scores, version, path, False, seconds, note)


def _read_cache(path: Path, key: str, n_candidates: int) -> tuple[tuple[dict[str, np.ndarray], float] | None, str]:
    """(scores, seconds) when the file holds `key`'s scores for every candidate; else (None, what is wrong)."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return None, f"cache file is unreadable or corrupt ({type(error).__name__})"
    if not isinstance(raw, dict) or raw.get("format") != CACHE_FORMAT:
        return None, f"cache file is not in cache format {CACHE_FORMAT}"
    if raw.get("key") != key:
        return None, "cache file belongs to other content (its key is not this data's)"
    scores = raw.get("scores")
    if not isinstance(scores, dict) or set(scores) != set(BASELINE_SCORERS):
        return None, f"cache file does not hold the scores {', '.join(BASELINE_SCORERS)}"
    arrays = {}
    for name in BASELINE_SCORERS:
        values = scores[name]
        if (not isinstance(values, list) or len(values) != n_candidates
                or not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
                           for v in values)):
            # (json reads Infinity and NaN: neither is a score any baseline gives, so the file was not written here)
            return None, f"cache file's {name} is not {n_candidates} finite numbers"
        arrays[name] = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    seconds = raw.get("seconds")
    return (arrays, float(seconds) if isinstance(seconds, (int, float)) else math.nan), ""

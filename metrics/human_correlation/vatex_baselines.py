"""VATEX-EVAL's classic baselines (BLEU-1, BLEU-4, METEOR, ROUGE-L, CIDEr) with 1 and with 9 references,
computed once per content and cached (capjudge.metrics.human_correlation.baseline_cache).

The scores come from :func:`capjudge.metrics.human_correlation.baselines.caption_metric_scores` (pycocoevalcap's
PTB tokenizer and scorers, as the MSVD-Eval baselines), over every candidate of the file at once: CIDEr's
document frequencies are taken over the whole set scored, as the field computes it, so the set scored is part of
what a cached score means. The "1-ref" setting is EMScore's ``refs[:1]``; "9-ref" is all nine.

Computing the 9-reference setting over the 18,000 candidates takes minutes (METEOR and the tokenizer are Java),
so the result is cached, keyed by exactly what was scored (each candidate as "clip#index", its caption and the
references shown) and the setting; a cache file that cannot be used is recomputed and replaced, and one line
says so (``VatexBaselines.cache_note``; the CLI prints it on stderr).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from capjudge.metrics.human_correlation.baseline_cache import (
    cache_file,
    cache_key as content_key,
    cached_baselines,
    pycocoevalcap_version,
)
from capjudge.judges.datasets.vatex_eval import VatexCandidate
from capjudge.metrics.human_correlation.vatex_report import Scorer

REFERENCE_SETTINGS: tuple[int, ...] = (1, 9)


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


def _check_setting(references: int) -> None:
    if references not in REFERENCE_SETTINGS:
        raise ValueError(f"references must be one of {REFERENCE_SETTINGS}, got {references!r}")


def _items(candidates: Sequence[VatexCandidate], references: int) -> list[_Item]:
    _check_setting(references)
    return [_Item(c.item_id, c.caption, tuple(c.references[:references])) for c in candidates]


def _label(references: int) -> str:
    return f"vatex_baselines_{references}ref"


def vatex_cache_key(candidates: Sequence[VatexCandidate], references: int, version: str) -> str:
    """sha256 of exactly what is scored with `references` references, the pycocoevalcap version and the format."""
    return content_key(_items(candidates, references), _label(references), version)


def cache_path(cache_dir: Path, candidates: Sequence[VatexCandidate], references: int) -> Path:
    """Where `candidates`' baselines with `references` references are (or will be) cached."""
    return cache_file(cache_dir, _label(references), vatex_cache_key(candidates, references, pycocoevalcap_version()))


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
    and one before computing. Raises BaselineUnavailable when they must be computed and pycocoevalcap or Java is
    missing; OutputError (naming --cache-dir) when they must be computed and the cache folder cannot be written."""
    cached = cached_baselines(
        _items(candidates, references), _label(references), cache_dir, data=data, say=say,
        computing=(f"computing the classic baselines with {references} reference(s) over {len(candidates):,} "
                   f"candidates (pycocoevalcap, Java: minutes for all 18,000); cached in {Path(cache_dir).expanduser()}"))
    scores = {name: np.array([math.nan if v is None else v for v in values], dtype=np.float64)
              for name, values in cached.baselines.scores.items()}
    return VatexBaselines(references, scores, cached.pycocoevalcap_version, cached.cache_file, cached.from_cache,
                          cached.seconds, cached.cache_note)

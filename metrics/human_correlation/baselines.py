"""Classic caption metrics per item (BLEU-1, BLEU-4, METEOR, ROUGE-L, CIDEr), as baselines for the judges.

Follows the published G-VEval procedure: whitespace-normalise captions, PTB-tokenise references and
candidates with pycocoevalcap's Stanford tokenizer, then take the per-item scores pycocoevalcap returns
(BLEU with its default "closest" reference length; CIDEr with document frequencies over the whole set, so an
item's CIDEr depends on the set it is scored in). The tokenizer and METEOR are Java programs shipped inside
pycocoevalcap; when Java or a bundled file is missing this module says exactly which, rather than
substituting another implementation.
"""

from __future__ import annotations

import atexit
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

BASELINE_SCORERS: tuple[str, ...] = ("BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")

# Files pycocoevalcap runs or reads, relative to its package directory.
_REQUIRED_FILES = {
    "PTB tokenizer": "tokenizer/stanford-corenlp-3.4.1.jar",
    "METEOR": "meteor/meteor-1.5.jar",
    "METEOR paraphrase table": "meteor/data/paraphrase-en.gz",
}


class BaselineUnavailable(RuntimeError):
    """A piece pycocoevalcap needs (Java, a bundled jar or data file) is missing; the message names it."""


class CaptionItem(Protocol):
    item_id: str
    candidate: str | None
    references: Sequence[str]


@dataclass(frozen=True)
class BaselineScores:
    """Per-item scores of every baseline, aligned with ``item_ids``; None where an item has no candidate."""

    item_ids: tuple[str, ...]
    scores: Mapping[str, tuple[float | None, ...]]


def check_requirements() -> None:
    """Raise BaselineUnavailable naming the first missing piece; return quietly when everything is there."""
    try:
        import pycocoevalcap
    except ModuleNotFoundError as error:
        raise BaselineUnavailable("the Python package 'pycocoevalcap' is not installed") from error
    if shutil.which("java") is None:
        raise BaselineUnavailable("'java' is not on PATH: pycocoevalcap's PTB tokenizer and METEOR run on Java")
    package_dir = Path(list(pycocoevalcap.__path__)[0])  # a namespace package: no __file__
    for purpose, relative in _REQUIRED_FILES.items():
        if not (package_dir / relative).is_file():
            raise BaselineUnavailable(f"{purpose}: pycocoevalcap file {package_dir / relative} is missing")


def _normalise(text: str) -> str:
    return " ".join(text.split())


def caption_metric_scores(items: Sequence[CaptionItem]) -> BaselineScores:
    """Score every item's candidate against its references with each baseline metric."""
    check_requirements()
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    scored = [item for item in items if item.candidate is not None and item.candidate.strip()]
    for item in scored:
        if not item.references:
            raise ValueError(f"item {item.item_id!r}: no reference captions to score against")
    if not scored:
        raise ValueError("no item has a candidate caption to score")
    tokenizer = PTBTokenizer()
    references = tokenizer.tokenize({i.item_id: [{"caption": _normalise(r)} for r in i.references] for i in scored})
    candidates = tokenizer.tokenize({i.item_id: [{"caption": _normalise(i.candidate or "")}] for i in scored})
    missing = [i.item_id for i in scored if i.item_id not in references or i.item_id not in candidates]
    if missing:
        raise BaselineUnavailable(f"the PTB tokenizer returned no output for items {missing[:5]} (Java tokenizer failed?)")
    # pycocoevalcap's scorers iterate gts.keys(); both dicts must list the ids in the same order.
    references = {i.item_id: references[i.item_id] for i in scored}
    candidates = {i.item_id: candidates[i.item_id] for i in scored}

    per_item: dict[str, list[float]] = {}
    _, bleu = Bleu(4).compute_score(references, candidates, verbose=0)  # verbose would print to stdout
    per_item["BLEU-1"], per_item["BLEU-4"] = list(bleu[0]), list(bleu[3])
    per_item["METEOR"] = _meteor(Meteor, references, candidates)
    per_item["ROUGE-L"] = list(Rouge().compute_score(references, candidates)[1])
    per_item["CIDEr"] = list(Cider().compute_score(references, candidates)[1])

    position = {item.item_id: k for k, item in enumerate(scored)}
    all_ids = tuple(item.item_id for item in items)
    return BaselineScores(
        item_ids=all_ids,
        scores={
            name: tuple(float(values[position[i]]) if i in position else None for i in all_ids)
            for name, values in per_item.items()
        },
    )


# One METEOR process for every computation of this process: the jar spends ~13 s loading its paraphrase
# table before its first score, and `capjudge vatex --baselines` scores two reference settings in a row. Each
# EVAL line is scored on its own (no state carries from one to the next), so reuse changes no score.
_meteor_lock = threading.Lock()
_meteor_running: Any = None


def _meteor(meteor_class, references: dict[str, list[str]], candidates: dict[str, list[str]]) -> list[float]:
    global _meteor_running
    with _meteor_lock:
        if _meteor_running is None or _meteor_running.meteor_p.poll() is not None:
            _meteor_running = meteor_class()  # starts `java -jar meteor-1.5.jar -stdio`
            atexit.register(_stop_meteor, _meteor_running)
        meteor = _meteor_running
        try:
            _, scores = meteor.compute_score(references, candidates)
        except ValueError as error:  # the jar died, so a score line came back empty
            _meteor_running = None
            _stop_meteor(meteor)
            stderr = meteor.meteor_p.stderr.read(2000).decode(errors="replace") if meteor.meteor_p.stderr else ""
            raise BaselineUnavailable(f"METEOR (java -jar meteor-1.5.jar) produced no score: {stderr.strip()}") from error
    if len(scores) != len(references):
        raise BaselineUnavailable(f"METEOR returned {len(scores)} scores for {len(references)} items")
    return [float(s) for s in scores]


def _stop_meteor(meteor: Any) -> None:
    # compute_score holds the wrapper's lock when it fails, and the wrapper's __del__ waits for that lock.
    if meteor.lock.locked():
        meteor.lock.release()
    if meteor.meteor_p.poll() is None:
        meteor.meteor_p.kill()
        meteor.meteor_p.wait()

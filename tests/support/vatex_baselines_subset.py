"""A real 20-clip subset of VATEX-EVAL (../shared) with its classic baselines computed once per test run.

The subset (every 150th clip of the file, 120 candidates) is written verbatim from the shared file: a derived
fixture, so computing the baselines (pycocoevalcap: Java's PTB tokenizer and METEOR, ~20 s of CPU whatever the
size, most of it METEOR loading its paraphrase table) takes seconds rather than the minutes of all 18,000.
`capjudge vatex --baselines` computes them once per test run for every xdist worker
(tests/support/once_per_run.py): the tests read the cache it wrote, and a test that changes a cache file
changes a copy of the folder.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.harness_runs import run_capjudge
from tests.support.once_per_run import built_once
from tests.support.paths import shared_path

VATEX = ("data", "vatex_eval", "vid_cans_score_dict.json")
EVERY = 150  # 3,000 clips / 150 = 20 clips, 120 candidates


@dataclass(frozen=True)
class BaselinesSubset:
    data: Path  # the subset, as a VATEX-EVAL file
    cache_dir: Path  # the baselines' cache, as the first run wrote it: read it, or copy it to change it
    first: subprocess.CompletedProcess[str]  # that run, `--format json` (its report on stdout)


def subset_clips(offset: int = 0) -> dict:
    """Every EVERY-th clip of the shared VATEX-EVAL file, from `offset`."""
    clips = json.loads(shared_path(*VATEX).read_text(encoding="utf-8"))
    return {clip_id: clips[clip_id] for clip_id in list(clips)[offset::EVERY]}


def baselines_json(data: Path, cache_dir: Path, env: dict[str, str] | None = None,
                   warm: bool = True) -> subprocess.CompletedProcess[str]:
    """`capjudge vatex DATA --baselines --cache-dir CACHE_DIR --format json --resamples 20`."""
    return run_capjudge("vatex", str(data), "--baselines", "--cache-dir", str(cache_dir), "--format", "json",
                        "--resamples", "20", env=env, warm=warm, timeout=600)


def baselines_subset(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> BaselinesSubset:
    """The subset and its computed baselines, built by the first worker to ask."""
    def build(root: Path) -> None:
        data = root / "subset.json"
        data.write_text(json.dumps(subset_clips()), encoding="utf-8")
        first = baselines_json(data, root / "cache")
        assert first.returncode == 0, first.stderr
        (root / "first.json").write_text(json.dumps({"stdout": first.stdout, "stderr": first.stderr}), encoding="utf-8")

    root = built_once(tmp_path_factory, worker_id, "vatex_baselines_subset", build)
    first = json.loads((root / "first.json").read_text(encoding="utf-8"))
    return BaselinesSubset(root / "subset.json", root / "cache",
                           subprocess.CompletedProcess(["capjudge", "vatex"], 0, first["stdout"], first["stderr"]))

"""Helpers of the `capjudge arena` tests (test_arena_judging*.py): the command through the real CLI, in a
subprocess, against the OpenAI-compatible test server, with the scripted pairwise judges."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge_cli
from tests.support.scripted_caption_judges import judge_env

DEMO = REPO_ROOT / "tasks" / "demo"
CAPTION_SETS = ("good", "fair", "poor")


def caption_flags(*names: str) -> list[str]:
    return [flag for name in (names or CAPTION_SETS) for flag in ("--captions", str(DEMO / f"captions_{name}.jsonl"))]


def arena(tmp_path: Path, server, judge: str, *args: str, env: dict | None = None):
    """`capjudge arena ARGS` judged by scripted judge `judge` (its reply cache under tmp_path), through the
    warm launcher as every other CLI test."""
    return run_capjudge_cli(["arena", *args], env={**judge_env(tmp_path, server, judge), **(env or {})}, cwd=REPO_ROOT)


def panel_file(path: Path, server, members: tuple[str, ...], quorum: int | None = None) -> Path:
    """A CAPJUDGE_PANEL file of scripted judges `members` (each its own name and model) on the test server."""
    import json

    document = {"members": [{"name": name, "model": name, "base_url": server.base_url} for name in members]}
    path.write_text(json.dumps(document if quorum is None else {"quorum": quorum, **document}), encoding="utf-8")
    return path


def one_line_refusal(done) -> str:
    """The one line a refused command printed (asserting it is one line, exit 2, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("capjudge arena: ")
    return lines[0]


# ---------------------------------------------------------------------------------------------------------
# VATEX-EVAL's candidates (`capjudge arena --candidates`, `capjudge vatex --arena-verdicts`)

VATEX_TASK = "gveval_vatex_references"


def vatex_subset(path: Path, clips: int, seed: int) -> Path:
    """A VATEX-EVAL file of `clips` clips of the real one (../shared), drawn by `seed` among the clips whose six
    captions are all different (the scripted `human` judge knows a candidate by its caption), rows untouched."""
    import json

    import numpy as np

    from tests.support.paths import shared_path

    whole = json.loads(shared_path("data", "vatex_eval", "vid_cans_score_dict.json").read_text(encoding="utf-8"))
    distinct = [clip for clip, row in whole.items() if len(set(row["cands"])) == len(row["cands"])]
    chosen = sorted(np.random.default_rng(seed).choice(len(distinct), clips, replace=False))
    path.write_text(json.dumps({distinct[k]: whole[distinct[k]] for k in chosen}), encoding="utf-8")
    return path


def vatex_arena(tmp_path: Path, server, judge: str, data: Path, *args: str):
    """`capjudge arena --task gveval_vatex_references --candidates ARGS` on the VATEX-EVAL file `data`, text only."""
    return arena(tmp_path, server, judge, "--task", VATEX_TASK, "--candidates", *args,
                 env={"CAPJUDGE_VATEX_EVAL_JSON": str(data), "CAPJUDGE_GVEVAL_MODE": "references"})

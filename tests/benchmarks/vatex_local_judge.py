"""The embedded local judge on VATEX-EVAL's human ratings: a fixed stratified subset of clips (`make vatex-local-judge`).

Not a test and not part of `make test`. What it runs, in order:

1. picks the subset: every clip's mean rating (6 candidates x 3 annotators), clips split into --strata
   equal-count strata by the quantiles of that mean, the same number of clips drawn from each stratum with a
   seeded generator (--seed). The subset depends only on the data file and the arguments; its clip ids are in
   the summary. Stratifying by rating keeps the good, middling and poor clips all present in a small subset,
   so the correlations are not computed over a narrow band of quality by chance;
2. the local judge (llama.cpp serving the PyPI-packaged Gemma 3 270M GGUF, as `capjudge demo` does);
3. lmms-eval, task `gveval_vatex_references` (G-VEval's ACCR prompt, text only: the candidate against the
   clip's references; the 270M model could not see the clips anyway, and they are not here), model
   `captions_file field=candidate`, over the subset's candidates, one reply each. lmms-eval has no option to pick
   items, so the task reads a copy of the chosen clips written to a temporary folder (outside the repository,
   deleted at the end);
4. `capjudge vatex` on the FULL VATEX-EVAL file and that run, with --baselines: EMScore's per-annotator
   protocol, G-VEval's pooled protocol, the mean-rating variant, caption length, the classic baselines (scored
   over all 18,000 candidates as the field does, cached; then correlated over the same subset) and the human
   ceiling, each with a bootstrap interval clustered by clip. The candidates outside the subset (and any the
   judge gave no score) are left out and counted in the report's first line.

Sizing: about 15 minutes on this 2-core machine. A 30-candidate probe judged at 13-18 s per candidate (a 770-token
prompt with the 9 references, ~70 tokens back; other jobs were running, load ~4), so the default is 10 clips,
2 per stratum = 60 candidates: the first full run took 10 minutes (9.7 s per candidate). The first run on a machine also computes the classic baselines over all 18,000
candidates (~6.5 minutes here, once; then cached in ~/.cache/capjudge/vatex_baselines); a rerun answers every
judge request from OUT/judge_cache.sqlite. 10 clips give wide intervals: the subset shows what the embedded
judge does, it does not rank judges. A 270M text model is not expected to judge well: what it does is
reported as it is.

    .venv/bin/python -m tests.benchmarks.vatex_local_judge --vatex-eval ../shared/data/vatex_eval/vid_cans_score_dict.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
from tests.benchmarks.timed_steps import timed_step  # noqa: E402
TASK = "gveval_vatex_references"
DEFAULT_CLIPS = 10
DEFAULT_STRATA = 5


@dataclass(frozen=True)
class ChosenClip:
    clip_id: str
    stratum: int  # 0 = the lowest-rated fifth (with 5 strata)
    mean_rating: float


def choose_clips(path: Path, n_clips: int, n_strata: int, seed: int) -> list[ChosenClip]:
    """`n_clips` clips, `n_clips / n_strata` from each clip-mean-rating quantile stratum, in file order."""
    from capjudge.judges.datasets.vatex_eval import load_vatex_eval

    if n_strata < 1 or n_clips < n_strata or n_clips % n_strata:
        raise SystemExit(f"error: --clips {n_clips} must be a positive multiple of --strata {n_strata}")
    candidates = load_vatex_eval(path)
    clip_ids = list(dict.fromkeys(c.clip_id for c in candidates))
    ratings: dict[str, list[int]] = {clip_id: [] for clip_id in clip_ids}
    for candidate in candidates:
        ratings[candidate.clip_id].extend(candidate.ratings)
    means = np.array([np.mean(ratings[clip_id]) for clip_id in clip_ids])
    # Equal-count strata: rank the clips by mean rating (ties broken by file order, so it is deterministic),
    # then cut the ranking into n_strata consecutive blocks.
    order = np.lexsort((np.arange(len(clip_ids)), means))
    stratum_of = np.empty(len(clip_ids), dtype=int)
    for stratum, block in enumerate(np.array_split(order, n_strata)):
        stratum_of[block] = stratum
    rng = np.random.default_rng(seed)
    chosen = sorted(
        int(position)
        for stratum in range(n_strata)
        for position in rng.choice(np.flatnonzero(stratum_of == stratum), n_clips // n_strata, replace=False)
    )
    return [ChosenClip(clip_ids[p], int(stratum_of[p]), float(means[p])) for p in chosen]


def write_subset(source: Path, clips: list[ChosenClip], target: Path) -> None:
    """The chosen clips' entries, verbatim from the source file."""
    raw = json.loads(source.read_text(encoding="utf-8"))
    target.write_text(json.dumps({c.clip_id: raw[c.clip_id] for c in clips}), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vatex-eval", required=True, type=Path, help="VATEX-EVAL's vid_cans_score_dict.json")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "vatex_local_judge")
    parser.add_argument("--summary", type=Path, default=REPO / "results" / "vatex_local_judge.md")
    parser.add_argument("--clips", type=int, default=DEFAULT_CLIPS, help="clips judged (x 6 candidates)")
    parser.add_argument("--strata", type=int, default=DEFAULT_STRATA, help="clip mean-rating quantile strata")
    parser.add_argument("--seed", type=int, default=0, help="which clips each stratum contributes")
    parser.add_argument("--references", choices=("1", "9"), default="9", help="references shown to the judge")
    parser.add_argument("--resamples", type=int, default=1000, help="clip-clustered bootstrap resamples")
    parser.add_argument("--cache-dir", type=Path, help="capjudge vatex --cache-dir for the baselines (default: its own)")
    args = parser.parse_args(argv)
    if not args.vatex_eval.is_file():
        print(f"error: {args.vatex_eval}: no such file (VATEX-EVAL's vid_cans_score_dict.json)", file=sys.stderr)
        return 2

    from capjudge.judges.local.launcher import LocalJudgeServer
    from capjudge.tasks.runs.demo_pipeline import judge_environment

    data = args.vatex_eval.resolve()
    clips = choose_clips(data, args.clips, args.strata, args.seed)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for previous in ("runs",):  # lmms-eval adds runs beside old ones; the cache stays
        shutil.rmtree(out / previous, ignore_errors=True)
    steps: list[tuple[str, str, float]] = []  # (what, command, seconds)
    with tempfile.TemporaryDirectory(prefix="capjudge-vatex-subset-") as scratch, \
            LocalJudgeServer(log_path=out / "local_judge.log") as local:
        subset = Path(scratch) / "vatex_eval_subset.json"
        write_subset(data, clips, subset)
        env = judge_environment(dict(os.environ), out, local)
        env.update({"CAPJUDGE_VATEX_EVAL_JSON": str(subset), "CAPJUDGE_VATEX_REFERENCES": args.references})
        env.pop("CAPJUDGE_JUDGE_SAMPLES", None)
        judge_label = f"{local.model} (llama.cpp, embedded; constrained output)"
        shown = f"CAPJUDGE_VATEX_EVAL_JSON=<the {len(clips)} clips> CAPJUDGE_VATEX_REFERENCES={args.references}"
        steps.append(timed_step(f"judge the {6 * len(clips)} candidates of {len(clips)} clips, k = 1",
                            _lmms_eval(out / "runs"), env, shown_env=shown))

    report_json, report_table = out / "vatex.json", out / "vatex.txt"
    vatex = [sys.executable, "-m", "capjudge.tasks.cli", "vatex", str(data), str(out / "runs"), "--metric", "gveval_mean",
             "--baselines", "--resamples", str(args.resamples), "--seed", "0"]
    vatex += ["--cache-dir", str(args.cache_dir)] if args.cache_dir else []
    steps.append(timed_step("capjudge vatex (--format json): every protocol, baselines, ceiling",
                        [*vatex, "--format", "json"], env, stdout_to=report_json))
    steps.append(timed_step("capjudge vatex (table)", vatex, env, stdout_to=report_table))

    summary = render_summary(json.loads(report_json.read_text()), report_table.read_text(), clips, steps,
                             judge_label, args)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(summary, encoding="utf-8")
    print(summary)
    return 0


def _lmms_eval(output: Path) -> list[str]:
    return [sys.executable, "-m", "lmms_eval", "--model", "captions_file", "--model_args", "field=candidate",
            "--tasks", TASK, "--include_path", str(REPO / "tasks"), "--output_path", str(output),
            "--log_samples", "--verbosity", "WARNING"]


def render_summary(report: dict, table: str, clips: list[ChosenClip], steps: list[tuple[str, str, float]],
                   judge_label: str, args: argparse.Namespace) -> str:
    n_subset = 6 * len(clips)
    judge, *_ = report["scorers"]
    emscore = {s["name"]: s for s in judge["protocols"][0]["statistics"]}

    def cell(statistic: dict) -> str:
        interval = (f" [{100 * statistic['ci_low']:.1f}, {100 * statistic['ci_high']:.1f}]"
                    if statistic.get("ci_low") is not None else "")
        return f"{100 * statistic['value']:.1f}{interval}"

    judging_seconds = steps[0][2]
    lines = [
        "# The embedded local judge on VATEX-EVAL's human ratings", "",
        f"Judge: {judge_label}; task `{TASK}` (G-VEval's ACCR prompt, text only: the candidate against "
        f"{args.references} reference(s) of its clip), metric `gveval_mean`.",
        f"Subset: {len(clips)} of VATEX-EVAL's 3,000 clips ({n_subset} of 18,000 candidates), {len(clips) // args.strata} "
        f"from each of {args.strata} equal-count strata of the clip's mean rating, seed {args.seed} "
        "(the clip ids are listed below).",
        f"Candidates with a judge score: {report['n_candidates']} of {n_subset}.", "",
        f"Headline, EMScore's protocol (per annotator, mean of 3), x 100: judge tau-b {cell(emscore['kendall_b'])}, "
        f"rho {cell(emscore['spearman'])}; human ceiling tau-b {cell(report['human_ceiling']['statistics'][0])}. "
        f"Intervals: {report['ci_method']}.", "",
        "## `capjudge vatex` on this run (every protocol, caption length, the classic baselines, the human ceiling)", "",
        "The report is over the full VATEX-EVAL file: the candidates outside the subset are the ones \"left out\".",
        "The classic baselines are scored over all 18,000 candidates (CIDEr's document frequencies included) and "
        "correlated over the same judged candidates.", "",
        "```", table.rstrip(), "```", "",
        "## The subset's clips", "",
        "| # | clip id | stratum (0 = lowest-rated) | clip mean rating |", "|---|---|---|---|",
        *(f"| {k} | `{c.clip_id}` | {c.stratum} | {c.mean_rating:.2f} |" for k, c in enumerate(clips, 1)), "",
        "## Commands and times (this machine: 2 cores, no GPU)", "",
        f"Judging took {judging_seconds / max(n_subset, 1):.1f} s per candidate in this invocation, lmms-eval's start "
        "included (a rerun answers every judge request from OUT/judge_cache.sqlite, so its times are not judging "
        "times).", "",
        "| step | seconds | command |", "|---|---|---|",
        *(f"| {what} | {seconds:.0f} | `{command}` |" for what, command, seconds in steps), "",
        "Reproduce: `make vatex-local-judge` (or the script's docstring command).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

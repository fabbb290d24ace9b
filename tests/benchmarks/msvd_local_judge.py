"""The embedded local judge against real human ratings: MSVD-Eval, all 197 items (`make msvd-local-judge`).

Not a test and not part of `make test`: it takes tens of minutes on two cores. What it runs, in order:

1. the local judge (llama.cpp serving the PyPI-packaged Gemma 3 270M GGUF, as `capjudge demo` does);
2. lmms-eval, task `gveval_references` (G-VEval's ACCR judge, text-only: the references stand in for the
   video, which the 270M model could not see anyway), model `captions_file` with MSVD-Eval's rated candidate
   captions, every item, one reply each (the published protocol);
3. the same with `CAPJUDGE_JUDGE_SAMPLES=3` on the first `--retest-items` items: their first reply is the
   cached one from step 2, two more are asked;
4. `capjudge correlate --msvd-eval ... --judge-scores ... --baselines`: the judge's Kendall tau-b and tau-c per
   ACCR dimension with BCa CIs, beside BLEU/METEOR/ROUGE-L/CIDEr and the annotators' own agreement;
5. `capjudge reliability` on the k = 3 run: per-item SD, ICC, Krippendorff's alpha, replies needed.

Plots (judge vs human scatter per dimension, tau-b with CIs beside the baselines and the ceiling) go to
OUT/plots/correlation.html. A second run answers every judge request from OUT/judge_cache.sqlite.

Everything is written under --out (runs, cache, reports); the summary goes to --summary (markdown) with the
commands and the time each step took. A 270M text model is not expected to judge well: the point is that the
whole judge-human pipeline runs end to end on real human ratings, and what it measures is reported as it is.

    .venv/bin/python -m tests.benchmarks.msvd_local_judge --msvd-eval ../shared/data/msvd_eval/MSVD-Eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from tests.benchmarks.timed_steps import timed_step  # noqa: E402
TASK = "gveval_references"
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msvd-eval", required=True, type=Path, help="G-VEval's MSVD-Eval.json")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "msvd_local_judge")
    parser.add_argument("--summary", type=Path, default=REPO / "results" / "msvd_local_judge.md")
    parser.add_argument("--retest-items", type=int, default=40, help="items judged k = 3 times for test-retest")
    parser.add_argument("--bootstrap", type=int, default=1000)
    args = parser.parse_args(argv)
    if not args.msvd_eval.is_file():
        print(f"error: {args.msvd_eval}: no such file (G-VEval's MSVD-Eval.json)", file=sys.stderr)
        return 2

    from capjudge.judges.local.launcher import LocalJudgeServer
    from capjudge.tasks.runs.demo_pipeline import judge_environment

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for previous in ("runs_k1", "runs_k3", "plots"):  # lmms-eval adds runs beside old ones; the cache stays
        shutil.rmtree(out / previous, ignore_errors=True)
    steps: list[tuple[str, str, float]] = []  # (what, command, seconds)
    with LocalJudgeServer(log_path=out / "local_judge.log") as local:
        env = judge_environment(dict(os.environ), out, local)
        env["CAPJUDGE_MSVD_EVAL_JSON"] = str(args.msvd_eval.resolve())
        env.pop("CAPJUDGE_JUDGE_SAMPLES", None)
        judge_label = f"{local.model} (llama.cpp, embedded; constrained output)"

        one_reply = out / "runs_k1"
        steps.append(timed_step("judge all items, k = 1", _lmms_eval(one_reply), env))
        k3 = out / "runs_k3"
        steps.append(timed_step(f"judge the first {args.retest_items} items, k = 3",
                            _lmms_eval(k3, limit=args.retest_items), {**env, "CAPJUDGE_JUDGE_SAMPLES": "3"}))

    scores_file = out / "judge_scores.jsonl"
    n_scored = write_judge_scores(one_reply, scores_file)
    correlation_json = out / "correlation.json"
    correlate = [sys.executable, "-m", "capjudge.tasks.cli", "correlate", "--msvd-eval", str(args.msvd_eval.resolve()),
                 "--judge-scores", str(scores_file), "--baselines", "--bootstrap", str(args.bootstrap),
                 "--format", "json", "--output", str(correlation_json)]
    steps.append(timed_step("correlate with the human ratings (+ baselines, ceiling)", correlate, env))
    correlation_md = out / "correlation.md"
    markdown = correlate[:-4] + ["--format", "markdown", "--output", str(correlation_md), "--plot", str(out / "plots")]
    steps.append(timed_step("the same report as markdown, and its plots", markdown, env))
    reliability_md = out / "reliability.md"
    reliability = [sys.executable, "-m", "capjudge.tasks.cli", "reliability", str(k3), "--task", TASK]
    steps.append(timed_step("test-retest on the k = 3 run", reliability, env, stdout_to=reliability_md))

    summary = render_summary(json.loads(correlation_json.read_text()), correlation_md.read_text(),
                             reliability_md.read_text(), steps, n_scored, judge_label, args)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(summary, encoding="utf-8")
    print(summary)
    return 0


def _lmms_eval(output: Path, limit: int | None = None) -> list[str]:
    command = [sys.executable, "-m", "lmms_eval", "--model", "captions_file", "--model_args", "field=candidate",
               "--tasks", TASK, "--include_path", str(REPO / "tasks"), "--output_path", str(output),
               "--log_samples", "--verbosity", "WARNING"]
    return command + (["--limit", str(limit)] if limit is not None else [])


def write_judge_scores(run_folder: Path, path: Path) -> int:
    """The run's per-item dimension scores as `capjudge correlate --judge-scores` reads them."""
    from capjudge.metrics.files.task_run import logged_record

    samples_files = sorted(run_folder.rglob(f"*_samples_{TASK}.jsonl"))
    if len(samples_files) != 1:
        raise SystemExit(f"{run_folder}: expected one {TASK} samples file (--log_samples), found {len(samples_files)}")
    samples_file = samples_files[0]
    n_scored = 0
    with open(path, "w", encoding="utf-8") as handle:
        for line in samples_file.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            item_id = str(logged_record(sample)["item_id"])  # MSVD-Eval's own id (doc_id is lmms-eval's index)
            row = {"id": item_id, **{f"judge_{name}": sample.get(f"gveval_{name}") for name in DIMENSIONS}}
            n_scored += all(row[f"judge_{name}"] is not None for name in DIMENSIONS)
            handle.write(json.dumps(row) + "\n")
    return n_scored


def render_summary(report: dict, full_report: str, reliability: str, steps: list[tuple[str, str, float]], n_scored: int,
                   judge_label: str, args: argparse.Namespace) -> str:
    def cell(entry: dict | None) -> str:
        if not entry or entry.get("value") is None:
            return "n/a"
        low, high = entry.get("ci") or (None, None)
        interval = f" [{100 * low:.1f}, {100 * high:.1f}]" if low is not None else ""
        return f"{100 * entry['value']:.1f}{interval}"

    lines = ["# The embedded local judge on MSVD-Eval's human ratings", "",
             f"Judge: {judge_label}; task `{TASK}` (G-VEval ACCR prompt, references instead of frames); "
             f"items with all four scores parsed: {n_scored} of 197.", "",
             "Kendall coefficients x100 with 95% BCa item-bootstrap CIs "
             f"({args.bootstrap} resamples); each annotator's rating is a pair with the item's score (G-VEval's protocol).",
             "", "| scorer | target | tau-b | tau-c |", "|---|---|---|---|"]
    scorers = [key for key in report if not key.startswith("_")]
    for scorer in scorers:
        targets = report[scorer]
        for target, entry in targets.items():
            # Every scorer against the humans' mean; a judge dimension also against the same human dimension.
            if target == "mean" or scorer == f"judge_{target}":
                lines.append(f"| {scorer} | {target} | {cell(entry.get('kendall_b'))} | {cell(entry.get('kendall_c'))} |")
    lines += ["", "## The full correlation report (every scorer against every target, and the annotator ceiling)", "",
              full_report.strip()]
    lines += ["", f"## Test-retest: the first {args.retest_items} items, k = 3 replies each", "", reliability.strip(), "",
              "## Commands and times (this machine: 2 cores, no GPU)", "",
              "Seconds are this invocation's: a rerun answers every judge request from OUT/judge_cache.sqlite.", "",
              "| step | seconds | command |", "|---|---|---|"]
    lines += [f"| {what} | {seconds:.0f} | `{command}` |" for what, command, seconds in steps]
    lines += ["", "Reproduce: `make msvd-local-judge` (or the script's docstring command)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""What fools the embedded local judge: `capjudge sensitivity` on the demo items and a fixed subset of MSVD-Eval
(`make sensitivity-local-judge`, issue #39 item 6).

Not a test and not part of `make test`. What it runs, in order:

1. the local judge (llama.cpp serving the PyPI-packaged Gemma 3 270M GGUF, as `capjudge demo` does);
2. `capjudge sensitivity` on the demo task `gveval_demo` (10 clips, the `good` caption set, frames +
   references as the demo judges them), every perturbation: 10 x 6 = 60 judgments;
3. the same again: every judgment from the cache (the request count it reports is the check);
4. `capjudge sensitivity` on MSVD-Eval's rated candidates, task `gveval_references` (text only: the references
   stand in for the video, which the 270M model could not see anyway), the first `--msvd-items` items in the
   file's order (a fixed subset: the first N of MSVD-Eval.json), every perturbation.

The subset is small because this machine has two shared cores and the run should take a few minutes: the
summary states the size and the time each step took. Everything is written under --out (reports, cache);
the summary goes to --summary (markdown) with the commands. A 270M text model is not expected to judge well;
what it shows is reported as it is.

    .venv/bin/python -m tests.benchmarks.sensitivity_local_judge --msvd-eval ../shared/data/msvd_eval/MSVD-Eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from tests.benchmarks.timed_steps import shorten, timed_step  # noqa: E402

DEMO_TASK, MSVD_TASK = "gveval_demo", "gveval_references"
CAPTIONS = REPO / "tasks" / "demo" / "captions_good.jsonl"


def _sensitivity(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "capjudge.tasks.cli", "sensitivity", *arguments]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--msvd-eval", required=True, type=Path, help="G-VEval's MSVD-Eval.json")
    parser.add_argument("--msvd-items", type=int, default=8, help="the first N MSVD-Eval items (default 8)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "sensitivity_local_judge")
    parser.add_argument("--summary", type=Path, default=REPO / "results" / "sensitivity_local_judge.md")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args(argv)
    if not args.msvd_eval.is_file():
        print(f"error: {args.msvd_eval}: no such file (G-VEval's MSVD-Eval.json)", file=sys.stderr)
        return 2
    if not 2 <= args.msvd_items <= 197:
        print(f"error: --msvd-items {args.msvd_items}: MSVD-Eval has 197 items, and a mismatch needs 2", file=sys.stderr)
        return 2

    from capjudge.judges.local.launcher import LocalJudgeServer
    from capjudge.tasks.runs.demo_pipeline import judge_environment

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps: list[tuple[str, str, float]] = []  # (what, command, seconds)
    demo_md, rerun_md, msvd_md = out / "demo.md", out / "demo_rerun.md", out / "msvd.md"
    common = ["--resamples", str(args.resamples)]
    with LocalJudgeServer(log_path=out / "local_judge.log") as local:
        env = judge_environment(dict(os.environ), out, local)
        env["CAPJUDGE_MSVD_EVAL_JSON"] = str(args.msvd_eval.resolve())
        for name in ("CAPJUDGE_JUDGE_SAMPLES", "CAPJUDGE_GVEVAL_MODE", "CAPJUDGE_PANEL"):
            env.pop(name, None)  # the tasks' own settings, one judge
        judge_label = f"{local.model} (llama.cpp, embedded; constrained output)"
        demo = ["--task", DEMO_TASK, "--captions", str(CAPTIONS), "--out", str(out / "demo"), *common]
        steps.append(timed_step("demo items, every perturbation", _sensitivity(*demo), env, stdout_to=demo_md))
        again = [*demo[:4], "--out", str(out / "demo_rerun"), *common]
        steps.append(timed_step("the same again (every judgment from the cache)", _sensitivity(*again), env,
                                stdout_to=rerun_md))
        msvd = ["--task", MSVD_TASK, "--candidates", "--limit", str(args.msvd_items), "--out", str(out / "msvd"), *common]
        steps.append(timed_step(f"MSVD-Eval, the first {args.msvd_items} items, every perturbation",
                                _sensitivity(*msvd), env, stdout_to=msvd_md,
                                shown_env=f"CAPJUDGE_MSVD_EVAL_JSON={args.msvd_eval}"))

    demo_report = json.loads((out / "demo" / f"sensitivity_{DEMO_TASK}.json").read_text(encoding="utf-8"))
    msvd_report = json.loads((out / "msvd" / f"sensitivity_{MSVD_TASK}.json").read_text(encoding="utf-8"))
    rerun = json.loads((out / "demo_rerun" / f"sensitivity_{DEMO_TASK}.json").read_text(encoding="utf-8"))["counts"]
    requests = [demo_report["counts"]["requests"], rerun["requests"], msvd_report["counts"]["requests"]]
    summary = render_summary(demo_report, msvd_report, rerun, demo_md.read_text(), msvd_md.read_text(),
                             list(zip(steps, requests)), judge_label, args)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(summary, encoding="utf-8")
    print(summary)
    return 0


def _fooled(report: dict) -> str:
    fooled = report["fooled_by"]["judge"]
    unmeasured = report.get("no_verdict", {}).get("judge", {})  # e.g. no variant changed its caption: no verdict
    passed = [p["name"] for p in report["perturbations"] if p["name"] not in fooled and p["name"] not in unmeasured]
    return (f"passes {', '.join(passed) or 'nothing'}; fooled by "
            + ("; ".join(f"{name} ({', '.join(dims)})" for name, dims in fooled.items()) or "nothing")
            + "".join(f"; no verdict on {name} ({why})" for name, why in unmeasured.items()))


def _example(report: dict, item_index: int = 0) -> list[str]:
    """One item's texts and the judge's mean score of each, as the report file logs them."""
    item = report["items"][item_index]
    lines = [f"Item `{item['item_id']}`:", "", "| caption | text | judge's mean |", "|---|---|---|"]
    for caption in (item["original"], *item["variants"]):
        score = caption["judgments"]["judge"]["scores"].get("mean")
        shown = "unjudged" if score is None else f"{score:.1f}"
        text = caption["text"].replace("|", "\\|")
        lines.append(f"| {caption['perturbation'] or 'original'} | {text} | {shown} |")
    return lines


def render_summary(demo: dict, msvd: dict, rerun_counts: dict, demo_md: str, msvd_md: str,
                   steps: list[tuple[tuple[str, str, float], int]], judge_label: str, args: argparse.Namespace) -> str:
    def counts(report: dict) -> str:
        c = report["counts"]
        return (f"{c['items']} items x (1 + {c['perturbations']}) = {c['judgments']} judgments, {c['requests']} requests, "
                f"{c['unjudged']} unjudged")

    lines = ["# What fools the embedded local judge", "",
             f"Judge: {judge_label}. `capjudge sensitivity` (issue #39), one reply per judgment, seed 0, "
             f"{args.resamples} clip-bootstrap resamples per 95% CI.", "",
             f"- Demo (`{DEMO_TASK}`, frames + references, the `good` captions): {counts(demo)}; {_fooled(demo)}.",
             f"- MSVD-Eval (`{MSVD_TASK}`, references only, the first {args.msvd_items} rated candidates of "
             f"MSVD-Eval.json, kept small for a 2-core machine): {counts(msvd)}; {_fooled(msvd)}.",
             f"- Rerun of the demo step: {rerun_counts['requests']} requests, {rerun_counts['cache_hits']} of "
             f"{rerun_counts['judgments']} judgments from the cache.",
             "", "A 270M text-only model is not expected to judge well: these figures show what the command "
             "measures on a real judge, reported as they came out.", "",
             "## Demo items", "", *_example(demo), "", _body(demo_md),
             "", f"## MSVD-Eval, the first {args.msvd_items} items", "", *_example(msvd), "", _body(msvd_md),
             "", "## Commands and times (this machine: 2 shared cores, no GPU)", "",
             "Seconds are this invocation's (judgments an earlier run made come from OUT/judge_cache.sqlite: see "
             "the requests column); the local judge answers one request at a time.", "",
             "| step | seconds | requests sent | command |", "|---|---|---|---|"]
    lines += [f"| {what} | {seconds:.0f} | {requests} | `{command}` |" for (what, command, seconds), requests in steps]
    lines += ["", "Reproduce: `make sensitivity-local-judge` (or the script's docstring command); every text and "
              "judgment: results/sensitivity_local_judge/{demo,msvd}/sensitivity_*.json (not committed)."]
    return "\n".join(lines) + "\n"


def _body(markdown: str) -> str:
    """The command's table without its title (the summary has its own headings), headings one level down."""
    kept = [shorten(line) for line in markdown.strip().splitlines() if not line.startswith(("# ", "Every text", "Plot: "))]
    return "\n".join(("#" + line) if line.startswith("## ") else line for line in kept).strip()


if __name__ == "__main__":
    sys.exit(main())

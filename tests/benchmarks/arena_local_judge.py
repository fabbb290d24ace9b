"""The embedded local judge in the arena: pairwise judging in both orders on the demo's three caption sets and on
a fixed VATEX-EVAL subset (`make arena-local-judge`, issue #49 item 7).

Not a test and not part of `make test`. What it runs, in order:

1. the local judge (llama.cpp serving the PyPI-packaged Gemma 3 270M GGUF, as `capjudge demo` does, with the
   environment the demo gives its judge: constrained output, one request in flight, a reply cache under --out);
2. `capjudge arena --task gveval_demo` on the packaged caption sets good, fair and poor (10 items x 3 pairs x
   2 orders = 60 requests); the sets were written to be ordered good > fair > poor, so the ranking has a
   known answer;
3. the same with `anycap_style_demo` (AnyCap's pairwise prompt and JSON reply; --skip-anycap leaves it out);
4. `capjudge arena --task gveval_vatex_references --candidates --pairs-per-clip 3 --seed 0` on the 10 VATEX-EVAL
   clips of results/vatex_local_judge.md (the same stratified draw, `vatex_local_judge.choose_clips`, passed as
   --clip): 30 human-preference pairs x 2 orders = 60 requests, text only (9 references, no clip);
5. `capjudge vatex` on the full VATEX-EVAL file with the same --pairs-per-clip and --seed and --arena-verdicts:
   the human-preference table (caption length, the raters' ceiling, the pairwise judge's row, every row again
   on the judge's 30 pairs). No pointwise judge row: that needs a pointwise run of the same clips
   (`make vatex-local-judge` makes one; --pointwise-run adds it). --baselines only on request: the first
   computation over 18,000 candidates takes minutes (then cached).

Sizing: the embedded judge answers a pairwise request in 5-7 s here (2 cores): the arenas took 397 s
(gveval_demo), 280 s (anycap_style_demo) and 415 s (VATEX-EVAL), about 19 minutes in all with `capjudge vatex`.
Every arena runs, whatever the time the one before took: a rule like "anycap only if gveval_demo was quick"
would run it on a rerun (answered from the cache) and not on the first run, so the summary would depend on the
cache.

A `capjudge arena` exit status of 3 (more failed orders than CAPJUDGE_MAX_FAILURE_RATE) is a result, not a
crash: its verdict file and report are written first, and the summary counts the failed orders by kind.
Everything goes under --out (verdict files, reports, pages, reply cache); the summary to --summary with the
commands and times. A rerun answers every request from the cache, so only a first run's times are judging times.
A 270M text-only model is not expected to judge well: what it does is reported as it came out.

    .venv/bin/python -m tests.benchmarks.arena_local_judge --vatex-eval ../shared/data/vatex_eval/vid_cans_score_dict.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from tests.benchmarks.timed_steps import shorten, timed_step, timed_step_status  # noqa: E402
from tests.benchmarks.vatex_local_judge import DEFAULT_CLIPS, DEFAULT_STRATA, choose_clips  # noqa: E402

DEMO_TASKS = ("gveval_demo", "anycap_style_demo")
VATEX_TASK = "gveval_vatex_references"
CAPTION_SETS = ("good", "fair", "poor")
TOO_MANY_FAILED = 3  # capjudge arena: above CAPJUDGE_MAX_FAILURE_RATE failed orders (files written first)


def _capjudge(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "capjudge.tasks.cli", *arguments]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vatex-eval", required=True, type=Path, help="VATEX-EVAL's vid_cans_score_dict.json")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "arena_local_judge")
    parser.add_argument("--summary", type=Path, default=REPO / "results" / "arena_local_judge.md")
    parser.add_argument("--pairs-per-clip", type=int, default=3, help="human preferences asked per clip")
    parser.add_argument("--seed", type=int, default=0, help="the pairs' draw (and the vatex bootstrap's)")
    parser.add_argument("--skip-anycap", action="store_true", help="leave out the anycap_style_demo arena")
    parser.add_argument("--pointwise-run", type=Path, help="a gveval_vatex_references run: the pointwise judge's row")
    parser.add_argument("--baselines", action="store_true", help="capjudge vatex --baselines (minutes when uncached)")
    args = parser.parse_args(argv)
    if not args.vatex_eval.is_file():
        print(f"error: {args.vatex_eval}: no such file (VATEX-EVAL's vid_cans_score_dict.json)", file=sys.stderr)
        return 2

    from capjudge.judges.local.launcher import LocalJudgeServer
    from capjudge.tasks.runs.demo_pipeline import judge_environment

    started = time.monotonic()
    data = args.vatex_eval.resolve()
    clips = choose_clips(data, DEFAULT_CLIPS, DEFAULT_STRATA, seed=0)  # results/vatex_local_judge.md's subset
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    steps: list[tuple[tuple[str, str, float], int]] = []  # ((what, command, seconds), exit status)
    skipped: list[str] = []
    judged: list[str] = []  # the tasks whose arena ran, in order
    captions = [word for name in CAPTION_SETS for word in ("--captions", f"tasks/demo/captions_{name}.jsonl")]
    with LocalJudgeServer(log_path=out / "local_judge.log") as local:
        env = judge_environment(dict(os.environ), out, local)
        for name in ("CAPJUDGE_JUDGE_SAMPLES", "CAPJUDGE_GVEVAL_MODE", "CAPJUDGE_PANEL", "CAPJUDGE_MAX_FAILURE_RATE"):
            env.pop(name, None)  # the tasks' own settings, one judge, the default failure threshold
        env.update({"CAPJUDGE_VATEX_EVAL_JSON": str(data), "CAPJUDGE_VATEX_REFERENCES": "9"})
        judge = {"model": local.model, "sees_images": local.info.sees_images}
        for task in DEMO_TASKS:
            if task == "anycap_style_demo" and args.skip_anycap:
                skipped.append(f"`{task}`: not run (--skip-anycap)")
                continue
            command = _capjudge("arena", "--task", task, *captions, "--out", str(out))
            steps.append(timed_step_status(f"arena `{task}`: 3 caption sets, all pairs, both orders", command, env,
                                           stdout_to=out / f"arena_{task}.stdout.md", accepted=(0, TOO_MANY_FAILED)))
            judged.append(task)
        pairs = ["--pairs-per-clip", str(args.pairs_per_clip), "--seed", str(args.seed)]
        command = _capjudge("arena", "--task", VATEX_TASK, "--candidates", *pairs,
                            *(word for clip in clips for word in ("--clip", clip.clip_id)), "--out", str(out))
        steps.append(timed_step_status(
            f"arena `{VATEX_TASK}`: {len(clips)} VATEX-EVAL clips, {args.pairs_per_clip} preferences each, both orders",
            command, env, stdout_to=out / f"arena_{VATEX_TASK}.stdout.md", accepted=(0, TOO_MANY_FAILED),
            shown_env=f"CAPJUDGE_VATEX_EVAL_JSON={args.vatex_eval} CAPJUDGE_VATEX_REFERENCES=9"))
        judged.append(VATEX_TASK)

    vatex = _capjudge("vatex", str(data), *([str(args.pointwise_run)] if args.pointwise_run else []), *pairs,
                      "--arena-verdicts", str(out / f"arena_{VATEX_TASK}.jsonl"), *(["--baselines"] * args.baselines))
    steps.append((timed_step("capjudge vatex (--format json)", [*vatex, "--format", "json"], env,
                             stdout_to=out / "vatex.json"), 0))
    steps.append((timed_step("capjudge vatex (table): the human-preference table", vatex, env,
                             stdout_to=out / "vatex.txt"), 0))

    # The data file as it was given (a path outside the repository is not shortened to a relative one)
    steps = [((what, command.replace(str(data), str(args.vatex_eval)), seconds), status)
             for (what, command, seconds), status in steps]
    summary = render_summary([_arena_outcome(out, task) for task in judged],
                             json.loads((out / "vatex.json").read_text(encoding="utf-8")),
                             (out / "vatex.txt").read_text(encoding="utf-8"), clips, steps, skipped, judge, args,
                             time.monotonic() - started)
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(summary, encoding="utf-8")
    print(summary)
    return 0


def _arena_outcome(out: Path, task: str) -> dict:
    """What one arena printed and wrote: its report JSON, printed output, and its orders counted from the
    verdict file (failures by kind, requests sent, cache hits)."""
    from capjudge.judges.pairwise.record import read_arena_file

    _, records = read_arena_file(out / f"arena_{task}.jsonl")
    orders = [order for record in records for order in (record.a_first, record.b_first)]
    return {"task": task, "report": json.loads((out / f"arena_{task}.json").read_text(encoding="utf-8")),
            "printed": (out / f"arena_{task}.stdout.md").read_text(encoding="utf-8"),
            "orders": len(orders), "failures": Counter(o.failure for o in orders if not o.ok),
            "requests": sum(o.requests for o in orders), "cache_hits": sum(o.cache_hit for o in orders)}


# ---------------------------------------------------------------------------------------------------------------
# The summary


def _ci(figure: dict, digits: int = 2) -> str:
    if figure.get("value") is None:
        return "—"
    if figure.get("ci_low") is None:
        return f"{figure['value']:.{digits}f}"
    return f"{figure['value']:.{digits}f} [{figure['ci_low']:.{digits}f}, {figure['ci_high']:.{digits}f}]"


def _host_lines(judge: dict) -> list[str]:
    import llama_cpp

    flags = sorted({flag for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
                    for flag in line.split(":", 1)[1].split()
                    if flag.startswith(("avx", "amx", "fma", "f16c", "bmi2", "sse4"))})
    features = " ".join(part.strip().replace(" = 1", "").replace("CPU : ", "")
                        for part in llama_cpp.llama_print_system_info().decode().split("|") if "= 1" in part)
    version = metadata.version("llama-cpp-python")
    stamp = REPO / ".venv" / f".llama-cpp-python-{version}-wheel"
    cmake = stamp.read_text().strip() if stamp.is_file() else "(not built by make setup: no stamp)"
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    sight = "yes" if judge["sees_images"] else "no: text only, the demo tasks' frames are not shown to it"
    return [f"Judge: {judge['model']} (llama.cpp, embedded, as `capjudge demo` starts it; sees images: {sight}; "
            "constrained output, 1 request in flight).",
            f"llama.cpp: llama-cpp-python {version}, built with `{cmake}`; CPU features in use: {features}.",
            f"Host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, no GPU, CPU flags: "
            f"{' '.join(flags)}. Python {platform.python_version()}, capjudge at {commit}."]


def _headline(arena: dict) -> str:
    report = arena["report"]
    member, = report["judges"]
    bias = member["position_bias"]["overall"]
    ranking = member["ranking"]["overall"]
    ranked = ("no ranking: " + ranking["reason"] if "ranking" not in ranking else
              " > ".join(f"{m} {ranking['elo'][m]['value']:.0f}" for m in ranking["ranking"]))
    controlled = member["length_controlled"]
    beside = ("" if "ranking" not in controlled else
              "; length-controlled: " + " > ".join(controlled["ranking"]))
    failures = ", ".join(f"{n} {kind}" for kind, n in arena["failures"].most_common()) or "none"
    return (f"- `{report['task']}`: {report['pairs']} pairs on {report['items']} items; overall verdict: position "
            f"consistency {_ci(bias['position_consistency'])}, preference fairness {_ci(bias['preference_fairness'])}, "
            f"order-flipped share {_ci(bias['order_flipped_share'])} (pairs: {bias['consistent']} consistent, "
            f"{bias['primacy_preferred']} primacy-preferred, {bias['recency_preferred']} recency-preferred, "
            f"{bias['pairs_with_a_failed_order']} with a failed order); failed orders "
            f"{sum(arena['failures'].values())} of {arena['orders']} ({failures}); Bradley-Terry (Elo): "
            f"{ranked}{beside}.")


def _reading(arena: dict, vatex: dict) -> str:
    """What the figures say, from their values and intervals alone (the same words whatever the run gives)."""
    member, = arena["report"]["judges"]
    bias = member["position_bias"]
    consistency = bias["overall"]["position_consistency"]
    parts = []
    if consistency.get("value") is not None:
        parts.append(f"the overall verdict stayed the same when the captions swapped places in "
                     f"{100 * consistency['value']:.0f}% of the pairs judged in both orders")
    for dimension, figures in bias.items():
        low, high = figures["preference_fairness"].get("ci_low"), figures["preference_fairness"].get("ci_high")
        if low is None or high is None:
            continue
        side = "FIRST" if high < 0 else "SECOND" if low > 0 else None
        if side is not None:
            parts.append(f"{dimension}: a position bias toward the caption shown {side} (fairness "
                         f"{_ci(figures['preference_fairness'])}, its CI excludes 0)")
        elif dimension == "overall":
            parts.append("overall: no net position preference shown (the fairness CI spans 0)")
    ranking = member["ranking"]["overall"]
    if arena["task"] in DEMO_TASKS and "ranking" in ranking:
        expected = [f"captions_{name}" for name in CAPTION_SETS]
        shown = " > ".join(ranking["ranking"])
        basis = (f", on {ranking['battles']} battles of which {ranking['ties']} ties "
                 f"({ranking['position_inconsistent_ties']} of them position-inconsistent pairs)")
        parts.append(("the ranking is the designed one (good > fair > poor)" if ranking["ranking"] == expected else
                      f"the ranking is the designed order reversed ({shown})" if ranking["ranking"] == expected[::-1]
                      else f"the ranking ({shown}) is not the designed good > fair > poor") + basis)
    if arena["task"] == VATEX_TASK:
        preferences = vatex["preferences"]
        rows = (preferences["arena"] or {}).get("rows") or preferences["rows"]
        judge = next(row for row in rows if row["scorer"].startswith("pairwise judge"))
        decided = judge["n_scored"] - judge["n_ties"]
        low, high = judge["without_ties"].get("ci_low"), judge["without_ties"].get("ci_high")
        if low is not None and high is not None:
            chance = "cannot be told from a coin flip (50% lies in its CI)" if low <= 0.5 <= high else (
                "is above chance (its CI is above 50%)" if low > 0.5 else "is below chance (its CI is below 50%)")
            parts.append(f"on the {decided} human-preference pairs it decided the same way in both orders, its "
                         f"agreement with the raters {chance}; every position-inconsistent pair is a tie, so with "
                         f"ties counted it agrees on {100 * judge['with_ties']['value']:.0f}% of the pairs")
    return f"- `{arena['task']}`: " + "; ".join(parts) + "."


def _preference_section(vatex_text: str) -> str:
    """The human-preference part of `capjudge vatex`'s table, as printed (the correlations over all 18,000
    candidates above it are caption length's and the ceiling's only; they are in OUT/vatex.txt)."""
    start = vatex_text.index("Agreement with humans' preferences")
    end = vatex_text.find("Published VATEX-EVAL figures", start)
    return vatex_text[start:end if end >= 0 else None].rstrip()


def _pairwise_rows(vatex: dict) -> list[str]:
    """Each row of the table on the pairwise judge's own pairs (all rows when it covers every compared pair)."""
    preferences = vatex["preferences"]
    rows = (preferences["arena"] or {}).get("rows") or preferences["rows"]

    def percent(figure: dict) -> str:
        return _ci({key: None if value is None else 100 * value for key, value in figure.items()}, 1)

    return [f"{row['scorer']}: {percent(row['with_ties'])}% with its ties counted as misses, "
            f"{percent(row['without_ties'])}% without ({row['n_scored']} pairs scored, {row['n_ties']} ties, "
            f"{row['n_missing']} missing)" for row in rows]


def _body(markdown: str) -> str:
    """A command's printed Markdown under the summary's own headings: every heading one level down, paths as
    typed from the repository; nothing else changed."""
    return "\n".join(("#" + line) if line.startswith("#") else shorten(line) for line in markdown.strip().splitlines())


def render_summary(arenas: list[dict], vatex: dict, vatex_text: str, clips: list, steps: list, skipped: list[str],
                   judge: dict, args: argparse.Namespace, total_seconds: float | None, note: str = "") -> str:
    """`total_seconds`: the whole invocation's wall time; None with a `note` saying how the figures were made
    when they do not come from one invocation."""
    statuses = [f"exit {status} (more failed orders than CAPJUDGE_MAX_FAILURE_RATE allows)" if status else "exit 0"
                for _, status in steps]
    lines = ["# The embedded local judge in the arena (pairwise judging, both orders)", "",
             *_host_lines(judge), "",
             "Reproduce: `make arena-local-judge` (or the script's docstring command: `python -m "
             "tests.benchmarks.arena_local_judge --vatex-eval ../shared/data/vatex_eval/vid_cans_score_dict.json`)."
             + (f" Whole job: {total_seconds / 60:.1f} minutes wall time on this machine, one request at a time."
                if total_seconds is not None else ""), "", *([note, ""] if note else []),
             "## Headline (as the commands printed them; 95% item-clustered CIs)", "",
             *(_headline(arena) for arena in arenas), *(f"- {line}" for line in skipped), "",
             f"VATEX-EVAL, agreement with the raters' preferences on the {len(clips)} clips' pairs the verdict file "
             "covers (share of pairs, clip-clustered 95% CI):", "",
             *(f"- {row}" for row in _pairwise_rows(vatex)), "",
             "## Reading", "",
             *(_reading(arena, vatex) for arena in arenas), "",
             "A 270M text-only model answering a pairwise rubric prompt through a grammar is not expected to judge "
             "well, and the demo tasks' frames are not shown to it (it has no vision). What these figures measure is "
             "the judge, not the arena: a strong position bias or a ranking against the designed order is a finding "
             "about this judge, which the both-orders design is there to expose. The pairwise prompts are "
             "capjudge's own (no published pairwise G-VEval/AnyCap prompt exists). Small samples: 10 items or 10 "
             "clips, so every interval is wide.", ""]
    for arena in arenas:
        lines += [f"## `capjudge arena --task {arena['task']}`, as printed", "",
                  f"Orders: {arena['orders']}; requests sent in this invocation: {arena['requests']}; answered from "
                  f"the reply cache: {arena['cache_hits']}; failed orders by kind: "
                  + (", ".join(f"{kind} {n}" for kind, n in arena["failures"].most_common()) or "none") + ".", "",
                  _body(arena["printed"]), ""]
    lines += ["## `capjudge vatex --arena-verdicts`: the human-preference table, as printed", "",
              f"VATEX-EVAL subset: the {len(clips)} clips of results/vatex_local_judge.md (2 per fifth of the clips "
              "ranked by mean rating, seed 0): " + ", ".join(f"`{c.clip_id}`" for c in clips) + ". The table's first "
              "part is over every clip of the file (the pairwise judge only covers the subset's pairs); the rows "
              "after it are computed again on the judge's own pairs. No pointwise judge row"
              + (" (--pointwise-run given)" if args.pointwise_run else
                 ": no pointwise run was given (`make vatex-local-judge` judged the same clips pointwise: "
                 "results/vatex_local_judge.md)")
              + "; " + ("classic baselines included." if args.baselines else
                        "no classic baselines (--baselines not given: their first computation over the 18,000 "
                        "candidates takes minutes on this machine; then cached)."), "",
              "```", shorten(_preference_section(vatex_text)), "```", "",
              "## Commands and times (this machine: 2 cores, no GPU)", "",
              "Seconds are this invocation's; a rerun answers every request from OUT/judge_cache.sqlite (see the "
              "requests sent above), so only a first run's times are judging times.", "",
              "| step | seconds | exit | command |", "|---|---|---|---|"]
    lines += [f"| {what} | {seconds:.0f} | {status} | `{command}` |"
              for ((what, command, seconds), _), status in zip(steps, statuses)]
    lines += ["", "Every verdict, reply and page: results/arena_local_judge/ (not committed): arena_<task>.jsonl "
              "(both orders' verdicts and replies), .md/.json/.png/.html (the report and the battles' page), "
              "vatex.txt / vatex.json (the whole `capjudge vatex` output), local_judge.log."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""A `capjudge sensitivity` run, below its argument parsing (capjudge.tasks.cli.sensitivity): the dry run's
estimate, or the judging and the files it writes.

Writes OUT/sensitivity_<task>.json (every text the judge saw, both judgments per pair with the replies, every
shift), OUT/sensitivity_<task>.png (the shifts with their CIs) and OUT/sensitivity_<task>.html (per item, the
original and each perturbed caption side by side with every judgment and shift), each name checked before the
first judgment (capjudge.metrics.sensitivity.outputs). The judging is capjudge.tasks.runs.sensitivity.judging,
the statistics capjudge.metrics.sensitivity.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Below this many resamples the 2.5% and 97.5% percentiles of a 95% CI rest on a handful of draws.
MIN_RESAMPLES = 100
DEFAULT_RESAMPLES = 2000
REPORT_NAME = "sensitivity_{task}.json"


@dataclass(frozen=True)
class SensitivityRun:
    """What a sensitivity run was asked for, once its arguments are checked."""

    task: str
    include_path: Path
    run: Path | None = None  # an lmms-eval output with samples; or
    captions: Path | None = None  # a captions file keyed by item id; or
    candidates: bool = False  # the task's own rated candidates
    limit: int | None = None
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES
    output_format: str = "table"  # what is printed: "table" or "json"
    command: str = ""  # the command as it can be typed again (what the report records)


def _planned(options: SensitivityRun, task: Any, perturbations: list[Any]) -> list[Any]:
    from capjudge.tasks.runs.sensitivity.judging import original_captions, plan

    pairs = original_captions(task, options.task, options.run, options.captions, options.candidates, options.limit)
    return plan(pairs, perturbations, options.seed)


def dry_run(options: SensitivityRun, perturbations: list[Any], prices: tuple[float, float] | None,
            output_tokens: float) -> int:
    """Print the judgments, requests, tokens and cost of the run; nothing is sent."""
    from capjudge.tasks.harness.judged_task import counting_requests_only
    from capjudge.tasks.runs.judging.stage import load_judged_task
    from capjudge.tasks.runs.sensitivity.pricing import price_planned

    with counting_requests_only():  # nothing is sent: no judge or key is needed (the cache is only read)
        task = load_judged_task(options.task, options.include_path)
        who = task.who_judges()  # a panel's members, read without their keys
    planned = _planned(options, task, perturbations)
    estimate = price_planned(task, planned, len(perturbations), output_tokens=output_tokens, prices=prices, who=who)
    print("\n".join(estimate.lines()))
    return 0


def judge_into(options: SensitivityRun, perturbations: list[Any], out: Path) -> int:
    """Judge the captions and their perturbations, write the report, its plot and its page into `out`, print
    the table (or the JSON summary); the exit status (3 above CAPJUDGE_MAX_FAILURE_RATE unjudged)."""
    from capjudge.judges.atomic_files import write_replacing
    from capjudge.metrics.sensitivity.items_page import page_path
    from capjudge.metrics.sensitivity.outputs import check_outputs, page_found, plot_found, report_found, run_stamp
    from capjudge.metrics.sensitivity.plot import render_shifts_png
    from capjudge.metrics.sensitivity.report import markdown, sensitivity_json, summary_json
    from capjudge.judges.run_outcome import EXIT_STATUS, failure_rate_problem
    from capjudge.tasks.runs.judging.stage import load_judged_task
    from capjudge.judges.client.preflight import held_preflight, probe_if_left
    from capjudge.tasks.runs.sensitivity.judging import judge_label, judge_planned, judgments_left_to_ask, unjudged_share

    # Loaded without its pre-flight probe, sent below once the names are free and a judgment is left to ask: a
    # name that cannot be written is refused before any request, and a fully cached rerun sends none at all.
    with held_preflight():
        task = load_judged_task(options.task, options.include_path)
    planned = _planned(options, task, perturbations)
    command = options.command
    path = out / REPORT_NAME.format(task=options.task)
    plot = path.with_suffix(".png")
    # Every file this run writes, checked before a judgment is asked: a folder, a link or another run's file
    # under one of the names is one line now, not a traceback (or a silent replacement) after the judging.
    stamp = run_stamp(task.config.task, judge_label(task.identity()), command,
                      [(item.item_id, item.original) for item in planned])
    check_outputs([(path, report_found), (plot, plot_found), (page_path(path), page_found)], stamp)
    probes = probe_if_left(judgments_left_to_ask(task, planned), task.check_judge)
    report = judge_planned(task, planned, perturbations, n_resamples=options.resamples, seed=options.seed)
    document = {**sensitivity_json(report, command), "judge_identity": dict(task.identity())}
    write_replacing(path, json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n")
    write_replacing(plot, render_shifts_png(report, stamp))
    page = _write_page(path)
    page_line = f"\nPer item, each perturbed caption beside its original: {page}" if page else ""
    if options.output_format == "json":
        print(json.dumps({**summary_json(report, command), "preflight_probes": probes, "report_file": str(path),
                          "plot": str(plot), "page": str(page) if page else None}, indent=2, ensure_ascii=False))
    else:
        # The probes apart from the judgments' requests: the server counts both.
        print(markdown(report, command) + f"\nPre-flight probe requests: {probes} (not among the requests above; none "
              f"when every judgment is in the reply cache)\nEvery text the judge saw, with both judgments: {path}"
              f"\nPlot: {plot}" + page_line)
    problem = failure_rate_problem(*unjudged_share(report))
    if problem is not None:
        print(f"capjudge sensitivity: {problem}", file=sys.stderr)
        return EXIT_STATUS
    return 0


def _write_page(report_file: Path) -> Path | None:
    """The per-item page, from the JSON just written, read back as any reader would (one path for it and for
    `capjudge report --sensitivity`). The page is a view: when it cannot be made, the run's files still stand
    and the one line says why."""
    from capjudge.metrics.sensitivity.items_file import SensitivityFileError, read_sensitivity_file
    from capjudge.metrics.sensitivity.items_page import page_path, write_sensitivity_page

    try:
        return write_sensitivity_page(read_sensitivity_file(report_file), page_path(report_file)).path
    except SensitivityFileError as error:
        print(f"capjudge sensitivity: the per-item page was not written: {error}", file=sys.stderr)
        return None

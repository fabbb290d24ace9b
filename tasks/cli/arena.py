"""`capjudge arena`: pairs of captions of the same item, from two or more caption sources, judged by the task's
judge with its pairwise rubric prompt (capjudge's own: judges/templates/<judge>_pairwise_v1.txt), every pair
asked in BOTH orders; one verdict record per (item, pair, judge) with both orders' verdicts and replies.

    capjudge arena --task gveval_demo --captions tasks/demo/captions_good.jsonl \
        --captions tasks/demo/captions_fair.jsonl --captions tasks/demo/captions_poor.jsonl --out results/arena
    capjudge arena RUN_A RUN_B RUN_C --task gveval --anchors 1 --seed 0 --out results/arena   # vs 1 anchor
    capjudge arena --task gveval_vatex_references --candidates --pairs-per-clip 2 --limit 50 --out results/arena
    capjudge arena ... --dry-run --price-input 2.50 --price-output 10.00   # requests, tokens, cost; sends nothing
    capjudge arena ... --out results/arena --batch --no-wait   # through the Batch API; the same command again collects

`--candidates`: the task's own rated candidates instead of RUNs (VATEX-EVAL's six per clip): same-clip pairs,
a candidate a model only within its clip; `--pairs-per-clip K` asks the K human preferences per clip that
`capjudge vatex --pairs-per-clip K --seed S` compares (capjudge.tasks.runs.arena.candidate_pairs), and
`capjudge vatex --arena-verdicts FILE` reads the verdicts back into its human-preference table.

The parser only: sources, pairs and judging are capjudge.tasks.runs.arena (through the task's own client, reply
cache, rate budget, pre-flight and panel), the record capjudge.judges.pairwise.record. Writes
OUT/arena_<task>.jsonl (checked before the first request, the pre-flight probe included; a rerun of the same command
replaces its own, from the cache, and sends nothing, probe included: the judges are probed only when an order is
left to ask) and prints per judge: pairs, pairs with verdicts in both orders, position-inconsistent verdicts, failed
orders, requests, cache hits, and the pre-flight probes sent besides; then the
arena report beside it (capjudge.metrics.arena.verdict_outputs: OUT/arena_<task>.md/.json/.png/.html, position
bias and rankings; `capjudge report --arena OUT/arena_<task>.jsonl --out DIR` recomputes it without a judge). Exit status:
2 bad input, 3 above CAPJUDGE_MAX_FAILURE_RATE failed orders (the file is written first). With `--batch`, every
order goes through the Batch API first (OUT/batch/: the state of `capjudge judge --batch`, one per panel member),
and the verdicts are read from the reply cache once every batch has ended.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.cli.batch_flags import add_batch_arguments, batch_options
from capjudge.tasks.cli.bounds import MAX_ITEMS, MAX_PAIRS_PER_CLIP, MAX_SEED, count_argument
from capjudge.tasks.cli.dry_run_flags import add_dry_run_arguments, dry_run_prices

# More anchors than this is no longer the O(models) design: every pair (no --anchors) is then cheaper to think about.
MAX_ANCHORS = 100


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "arena", help="judge pairs of captions of the same item in both orders (pairwise rubric prompt)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, metavar="RUN",
                        help="lmms-eval output folders or *_results.json with samples (one model each)")
    parser.add_argument("--captions", type=Path, action="append", default=[], metavar="FILE",
                        help="a captions JSONL/JSON keyed by item id (one model each; repeatable)")
    parser.add_argument("--candidates", action="store_true",
                        help="instead of RUNs: the task's own rated candidates, pairs of one clip's (VATEX-EVAL)")
    parser.add_argument("--task", required=True, help="the capjudge task whose items and judge to use")
    parser.add_argument("--out", type=folder_argument,
                        help="output folder for arena_<task>.jsonl (a --dry-run writes nothing there)")
    count_argument(parser, "--pairs-per-clip", low=1, high=MAX_PAIRS_PER_CLIP, metavar="K",
                   help="with --candidates: K of each clip's human preferences, drawn by --seed as capjudge vatex "
                        "draws them (default: every same-clip pair)")
    parser.add_argument("--clip", action="append", default=[], metavar="ID",
                        help="with --candidates: only this clip (repeatable; default: every clip; an id that starts "
                             "with '-', as some VATEX clip ids do: --clip=ID)")
    count_argument(parser, "--anchors", low=1, high=MAX_ANCHORS,
                   help="each model against K anchor models drawn by --seed, the same on every item (default: all pairs)")
    parser.add_argument("--anchor", action="append", default=[], metavar="NAME",
                        help="an anchor model by name (repeatable; instead of --anchors)")
    count_argument(parser, "--seed", low=0, high=MAX_SEED, default=0,
                   help="seed of the anchors' draw, or of --pairs-per-clip's (default 0)")
    count_argument(parser, "--limit", low=1, high=MAX_ITEMS,
                   help="only the first N items (with --candidates: clips) with a pair, in the task's order")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="what to print (default table)")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="task folders (default: capjudge's)")
    add_batch_arguments(parser, "both orders of every pair")
    add_dry_run_arguments(parser, "pairs")
    parser.set_defaults(func=run)


def arena_command_line(args: argparse.Namespace) -> str:
    """The command as it can be typed again (what the verdict file records)."""
    words = ["capjudge", "arena", *(str(run) for run in args.runs), "--task", args.task]
    for file in args.captions:
        words += ["--captions", str(file)]
    if args.candidates:
        words.append("--candidates")
    for clip in args.clip:
        words += ["--clip", clip]
    if args.pairs_per_clip is not None:
        words += ["--pairs-per-clip", str(args.pairs_per_clip)]
    for name in args.anchor:
        words += ["--anchor", name]
    if args.anchors is not None:
        words += ["--anchors", str(args.anchors)]
    if args.limit:
        words += ["--limit", str(args.limit)]
    words += ["--seed", str(args.seed)]
    if args.out:
        words += ["--out", str(args.out)]
    if args.include_path != TASKS_DIR:
        words += ["--include-path", str(args.include_path)]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    # Imported here: `capjudge --help` should not load the client machinery and lmms-eval.
    from capjudge.judges.client.charge import BudgetFileError
    from capjudge.judges.client.config import ConfigError
    from capjudge.judges.pairwise.record import ArenaFileError
    from capjudge.metrics.files.outputs import OutputError, writable_folder
    from capjudge.models.captions_file import CaptionsFileError
    from capjudge.tasks.harness.sources import DatasetError
    from capjudge.tasks.runs.judging.estimate import EstimateError
    from capjudge.tasks.runs.judging.stage import JudgeStageError
    from capjudge.tasks.runs.arena.sources import ArenaInputError
    from capjudge.tasks.runs.judging.batch_stage import BatchStageError

    try:
        _check_sources(args)
        try:
            batch = batch_options(args)
        except ValueError as error:
            raise ArenaInputError(str(error)) from None
        prices = dry_run_prices(args)
        if args.dry_run:
            if batch is not None:
                raise ArenaInputError("--dry-run sends nothing: not with --batch (price the orders without it)")
            return _dry_run(args, prices)
        if args.out is None:
            raise ArenaInputError("--out is required: the verdicts (both orders, with the replies) are written there")
        return _judge(args, writable_folder(args.out), batch)
    except (ArenaInputError, JudgeStageError, ConfigError, DatasetError, CaptionsFileError, OutputError, EstimateError,
            BudgetFileError, BatchStageError, ArenaFileError) as error:
        print(f"capjudge arena: {error}", file=sys.stderr)
        return 2


def _planned(args: argparse.Namespace, task: Any) -> tuple[Any, int, list[Any]]:
    """The pairwise judge, how many models, and the pairs to ask."""
    from capjudge.tasks.runs.arena.candidate_pairs import plan_candidate_pairs
    from capjudge.tasks.runs.arena.pairs import choose_anchors, plan_pairs
    from capjudge.tasks.runs.arena.pairwise_judges import pairwise_judge_for
    from capjudge.tasks.runs.arena.sources import read_sources

    judge = pairwise_judge_for(task)
    if args.candidates:
        pairs = plan_candidate_pairs(task, args.task, clips=args.clip, limit=args.limit,
                                     pairs_per_clip=args.pairs_per_clip, seed=args.seed)
        return judge, len({name for pair in pairs for name in (pair.model_a, pair.model_b)}), pairs
    models = read_sources(task, args.task, args.runs, args.captions)
    anchors = choose_anchors(models, args.anchor, args.anchors, args.seed)
    return judge, len(models), plan_pairs(task, models, anchors, args.limit)


def _check_sources(args: argparse.Namespace) -> None:
    """--candidates is a caption source of its own; its flags go with it alone."""
    from capjudge.tasks.runs.arena.sources import ArenaInputError

    if args.candidates:
        given = [flag for flag, used in (("RUN", args.runs), ("--captions", args.captions), ("--anchor", args.anchor),
                                         ("--anchors", args.anchors is not None)) if used]
        if given:
            raise ArenaInputError(f"--candidates pairs the task's own candidates of each clip: not with {given[0]}")
        return
    given = [flag for flag, used in (("--pairs-per-clip", args.pairs_per_clip is not None), ("--clip", args.clip))
             if used]
    if given:
        raise ArenaInputError(f"{given[0]} goes with --candidates (the task's own rated candidates of each clip)")


def _dry_run(args: argparse.Namespace, prices: tuple[float, float] | None) -> int:
    from capjudge.tasks.harness.judged_task import counting_requests_only
    from capjudge.tasks.runs.judging.stage import load_judged_task
    from capjudge.tasks.runs.arena.pricing import price_pairs

    with counting_requests_only():  # nothing is sent: no judge or key is needed (the cache is only read)
        task = load_judged_task(args.task, args.include_path)
        who = task.who_judges()  # a panel's members, read without their keys
    judge, models, pairs = _planned(args, task)
    estimate = price_pairs(task, judge, pairs, models, output_tokens=args.output_tokens, prices=prices, who=who)
    if args.format == "json":
        import dataclasses
        import json

        print(json.dumps({"task": args.task, "models": estimate.models, "items": estimate.items,
                          "pairs": estimate.pairs, "orders_per_judge": estimate.distinct,
                          "estimate": dataclasses.asdict(estimate.cost)}, indent=2, default=str))
    else:
        print("\n".join(estimate.lines()))
    return 0


def _judge(args: argparse.Namespace, out: Path, batch: Any) -> int:
    from contextlib import nullcontext

    from capjudge.judges.client.preflight import batch_preflight, held_preflight, probe_if_left
    from capjudge.judges.atomic_files import write_replacing
    from capjudge.judges.pairwise.record import arena_file_text
    from capjudge.metrics.arena.verdict_outputs import arena_report
    from capjudge.metrics.arena.verdict_text import report_terminal, verdict_report_json
    from capjudge.judges.run_outcome import EXIT_STATUS, failure_rate_problem
    from capjudge.tasks.runs.judging.stage import load_judged_task
    from capjudge.tasks.runs.arena.judging import batch_pairs, judge_pairs, member_counts, orders_left_to_ask
    from capjudge.tasks.runs.judging.batch_stage import cache_only_recorders
    from capjudge.tasks.runs.arena.outputs import FILE_NAME, check_arena_output, arena_summary_json, summary_table
    from capjudge.tasks.runs.sensitivity.judging import judge_label

    # The task is loaded without its pre-flight probe: the output names are checked first (a name that cannot be
    # written is refused before any request, the probe included), and a rerun with every order in the reply cache
    # sends nothing at all.
    with held_preflight():
        task = load_judged_task(args.task, args.include_path)
    judge, models, pairs = _planned(args, task)
    command, label = arena_command_line(args), judge_label(task.identity())
    members = task.who_judges().record_members()
    path = out / FILE_NAME.format(task=args.task)
    check_arena_output(path, args.task, label, command,
                       [[p.item_id, p.model_a, p.caption_a, p.model_b, p.caption_b, m] for p in pairs for m in members])
    left_to_ask = orders_left_to_ask(task, judge, pairs)
    # A --batch run's pre-flight probes the Batch API path, not an online completion (as `capjudge judge --batch`).
    with batch_preflight() if batch is not None else nullcontext():
        probes = probe_if_left(left_to_ask, task.check_judge)
    recorder_for = None
    if batch is not None:
        summary = batch_pairs(task, judge, pairs, out / "batch", batch)
        if summary.open_batches:
            print(f"capjudge arena: {summary.open_batches} batch(es) still running; run the same command again to "
                  "collect them (nothing is submitted twice)")
            return 0
        if not batch.retry_online:  # the verdicts come from the cache only: nothing is asked online
            recorder_for = cache_only_recorders(summary)
        # The summary's requests column counts online requests; what the batches carried is said here.
        print(f"capjudge arena --batch: {summary.lines_submitted} requests sent in {summary.submitted} batch(es) by this "
              "command; the orders below read their replies from the reply cache the batches filled", file=sys.stderr)
    records = judge_pairs(task, judge, pairs, recorder_for)
    write_replacing(path, arena_file_text(args.task, label, command, records))
    report, _ = arena_report(path, out)  # position bias and rankings, read back from the file just written
    counts = member_counts(records, members)
    print(arena_summary_json(args.task, label, command, counts, path, verdict_report_json(report), probes)
          if args.format == "json"
          else summary_table(args.task, label, models, records, counts, path, probes) + "\n\n" + report_terminal(report))
    failed = sum(row.failed_orders for row in counts)
    problem = failure_rate_problem(failed, 2 * len(records))
    if problem is not None:
        print(f"capjudge arena: {problem.replace('items', 'orders', 1)}", file=sys.stderr)
        return EXIT_STATUS
    return 0

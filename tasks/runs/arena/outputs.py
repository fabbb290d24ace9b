"""What an arena run writes and prints: OUT/arena_<task>.jsonl (capjudge.judges.pairwise.record), checked before
the first request (the pre-flight probe included), and the summary.

The file is checked (with the names of the report written beside it) as `capjudge sensitivity` checks its report (capjudge.metrics.sensitivity.outputs): a name
taken by a folder, a link, another run's verdict file or a file that is no verdict file as capjudge wrote it
(edited by hand: its records no longer match its hashes) is one OutputError naming it; a rerun of the same
command on the same captions with the same judge replaces its own file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capjudge.judges.pairwise.record import ArenaFileError, PairRecord, arena_stamp, read_arena_file
from capjudge.judges.text import one_line, plural
from capjudge.metrics.arena.verdict_outputs import check_report_files, report_files
from capjudge.metrics.sensitivity.outputs import Found, check_outputs
from capjudge.tasks.runs.arena.judging import MemberCounts
from capjudge.tasks.harness.panel_pairwise import COMBINED

FILE_NAME = "arena_{task}.jsonl"


def arena_found(path: Path) -> Found:
    """An existing file under the verdict file's name: the stamp of the run that wrote it, when it reads back
    exactly as capjudge wrote it."""
    try:
        header, _ = read_arena_file(path)
    except ArenaFileError as error:
        return Found(None, f"a file that is not an arena verdict file as capjudge wrote it ({error})")
    # repr: a command quoting a path with a line break (or a file's text) stays one line of the refusal
    return Found(header.stamp, f"the verdicts of another arena run ({header.command[:300]!r})")


def check_arena_output(path: Path, task: str, judge: str, command: str, keys: Sequence[Sequence[str]]) -> None:
    """Before any request: `path` is free, or holds this very run's own verdict file; and so are the names of
    the report written beside it (arena_<task>.md/.json/.png/.html, capjudge.metrics.arena.verdict_outputs)."""
    stamp = arena_stamp(task, judge, command, keys)
    check_outputs([(path, arena_found)], stamp)
    check_report_files(report_files(path), stamp)


def summary_rows(counts: Sequence[MemberCounts]) -> list[dict[str, Any]]:
    return [{"judge": row.member, "pairs": row.pairs, "both_orders": row.both_orders, "order_flips": row.flips,
             "failed_orders": row.failed_orders, "requests": row.requests, "cache_hits": row.cache_hits}
            for row in counts]


def probes_line(probes: int) -> str:
    """The pre-flight probes the run sent, apart from its judgments: the server counts both."""
    return (f"Pre-flight probe requests: {probes} (not in the requests column; none when every order is in the reply "
            "cache)")


def summary_table(task: str, judge: str, models: int, records: Sequence[PairRecord], counts: Sequence[MemberCounts],
                  path: Path, probes: int = 0) -> str:
    """The printed summary: what was asked, then a row per judge (or panel member), then the probes sent. Names
    are printed as they are (a terminal needs no Markdown escapes), each on one printable line."""
    items = len({record.item_id for record in records})
    lines = [f"capjudge arena: task {one_line(task)}, {one_line(judge)}; {plural(models, 'model')}, "
             f"{plural(items, 'item')}, {plural(counts[0].pairs, 'pair')}, each asked in both orders",
             "",
             "| judge | pairs | verdicts in both orders | position-inconsistent (overall) | failed orders | requests | from cache |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {one_line(r.member)} | {r.pairs} | {r.both_orders} | {r.flips} | {r.failed_orders} | {r.requests} | "
              f"{r.cache_hits} |" for r in counts]
    lines += ["", "Position-inconsistent: the overall verdict changed when the captions swapped places (a tie for the "
              "ranking); the report's order-flipped share counts only the pairs whose winner reversed."]
    if any(r.member == COMBINED for r in counts):
        lines.append(f"{COMBINED}: the panel's own verdict per order, its members' majority (a split is a tie; below "
                     "the quorum, a failed order); its requests are its members'.")
    lines.append(probes_line(probes))
    lines.append(f"Verdicts, both orders and the replies: {path}")
    return "\n".join(lines)


def arena_summary_json(task: str, judge: str, command: str, counts: Sequence[MemberCounts], path: Path,
                       report: dict[str, Any] | None = None, probes: int = 0) -> str:
    """The summary as JSON; with `report` (the arena report's JSON: position bias and rankings) under "report".
    `preflight_probes`: the probes sent besides the judges' requests."""
    document = {"task": task, "judge": judge, "command": command, "judges": summary_rows(counts),
                "preflight_probes": probes, "verdict_file": str(path)}
    if report is not None:
        document["report"] = report
    return json.dumps(document, indent=2, ensure_ascii=False)

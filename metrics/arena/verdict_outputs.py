"""The files of an arena report, written beside (or from) a verdict file arena_<task>.jsonl under its stem:
arena_<task>.md (position bias and rankings), .json (the same as data), .png (the figure) and .html (the
per-battle page). What `capjudge arena` writes after judging and `capjudge report --arena FILE` writes from
an existing file, without a judge.

Each carries the verdict file's stamp (the md on its first line, the JSON as its first key, the page as its
data's first key, the PNG in a text chunk): a name taken by a folder, a link, a file another command or
another run wrote is one OutputError naming it (`capjudge.metrics.sensitivity.outputs.check_outputs`), and
nothing is written; the same run's own files are replaced. The files are written whole or not at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from capjudge.judges.pairwise.record import PairRecord, read_arena_file
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.arena.verdict_report import VerdictReport, verdict_report
from capjudge.metrics.arena.verdict_text import (
    SCHEMA,
    STAMP_KEY,
    report_markdown,
    verdict_report_json,
)
from capjudge.metrics.sensitivity.outputs import (
    Found,
    check_outputs,
    page_found,
    plot_found,
)

_MD_STAMP = re.compile(r"<!-- capjudge arena report, run ([0-9a-f]{64}) -->")
_MAX_REPORT_BYTES = 256 * 2**20  # a report is KBs to MBs: a larger file under the name is not one, and is not read


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    json: Path
    figure: Path
    page: Path

    def all(self) -> tuple[Path, Path, Path, Path]:
        return (self.markdown, self.json, self.figure, self.page)


def report_files(verdict_name: Path) -> ReportFiles:
    """The report's files for a verdict file named `verdict_name` (a path: its folder is where they go)."""
    return ReportFiles(*(verdict_name.with_suffix(suffix) for suffix in (".md", ".json", ".png", ".html")))


def markdown_found(path: Path) -> Found:
    try:
        with path.open(encoding="utf-8") as file:
            first = file.readline(200)
    except (OSError, UnicodeDecodeError):
        return Found(None, "a file that cannot be read as text")
    match = _MD_STAMP.match(first)
    return (Found(None, "a file that is not a capjudge arena report") if match is None
            else Found(match.group(1), "the report of another arena run"))


def json_found(path: Path) -> Found:
    from capjudge.judges.jsonl import DuplicateKey, decode_json

    try:
        if path.stat().st_size > _MAX_REPORT_BYTES:
            raise ValueError("too large")
        document = decode_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, DuplicateKey, ValueError, RecursionError):
        document = None
    if not isinstance(document, dict) or document.get("format") != SCHEMA or not isinstance(document.get(STAMP_KEY), str):
        return Found(None, "a file that is not a capjudge arena report")
    return Found(document[STAMP_KEY], "the report of another arena run")


def figure_found(path: Path) -> Found:
    found = plot_found(path)
    return found if found.stamp is not None else Found(None, "a file that is not a capjudge arena figure")


def arena_page_found(path: Path) -> Found:
    found = page_found(path)
    return found if found.stamp is not None else Found(None, "a page that is not a capjudge arena page")


def check_report_files(files: ReportFiles, stamp: str, flag: str = "--out") -> None:
    """Before writing (or judging): every file free, or the run `stamp`'s own; else one OutputError."""
    readers = (markdown_found, json_found, figure_found, arena_page_found)
    check_outputs(list(zip(files.all(), readers)), stamp, flag)


def markdown_file_text(report: VerdictReport) -> str:
    return f"<!-- capjudge arena report, run {report.stamp} -->\n" + report_markdown(report)


def write_report_files(report: VerdictReport, records: tuple[PairRecord, ...], files: ReportFiles) -> None:
    from capjudge.judges.atomic_files import write_replacing
    from capjudge.metrics.arena.verdict_plot import verdict_png
    from capjudge.metrics.item_report.arena_page import render_arena_page

    write_replacing(files.markdown, markdown_file_text(report))
    write_replacing(files.json, json.dumps(verdict_report_json(report), indent=2, ensure_ascii=False) + "\n")
    write_replacing(files.figure, verdict_png(report))
    write_replacing(files.page, render_arena_page(report, records))


def arena_report(verdict_file: Path, out: Path, settings: ArenaSettings = ArenaSettings(),
                 flag: str = "--out") -> tuple[VerdictReport, ReportFiles]:
    """Read and check `verdict_file` (ArenaFileError), check the report's names under `out` (OutputError),
    compute and write the report."""
    header, records = read_arena_file(verdict_file)
    files = report_files(out / verdict_file.name)
    check_report_files(files, header.stamp, flag)
    report = verdict_report(header, records, verdict_file.name, settings)
    write_report_files(report, records, files)
    return report, files

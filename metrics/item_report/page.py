"""Write the item report as one HTML page (templates/item_report.*) with its frames in `frames/` beside it.

The page is self-contained: its style, script and data are inline, the frames are files next to it, and its
Content-Security-Policy forbids any other request, so opening it asks nothing of the network. The data is
the report as JSON; the page's script draws it (text only, through textContent) and filters and sorts it.
`fill_page` and `script_json` are the machinery other per-item pages (the sensitivity page) are built with too.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from capjudge.judges.record import LoggedJudge
from capjudge.metrics.item_report.report import PAGE_NAME, ItemReport

_SLOT = re.compile(r"\{\{(title|style|script|data)\}\}")


@functools.cache
def _template(name: str) -> str:
    return resources.files("capjudge.metrics").joinpath("templates", name).read_text(encoding="utf-8")


# Keys only a run judged by a panel has data for (ModelJudgment.panel, ReportSection.panels): left out of the page's
# data when empty, so a page of one-judge runs carries exactly what it did before panels.
_PANEL_KEYS = frozenset({"panel", "panels"})


def _without_empty_panels(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {key: value for key, value in pairs if not (key in _PANEL_KEYS and value in (None, ()))}


def _judge_json(judge: LoggedJudge) -> dict[str, Any]:
    """A section's judge as the page's script reads it (item_report.js `judgeLine`): settings as canonical JSON."""
    return {"name": judge.name, "model": judge.model, "endpoint": judge.endpoint, "version": judge.judge_version,
            "settings": judge.settings_text}


def script_json(data: Any) -> str:
    """`data` as JSON that is safe inside a <script> element (no "</script>", no "<!--"): what a page built on
    these templates carries as its data, for its script to draw through textContent."""
    # ASCII: a lone surrogate read from a file (valid JSON, "\\ud800") is no UTF-8 and would fail the page's
    # write; escaped, the page's JSON.parse reads every text back as it was.
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c")


def report_json(report: ItemReport) -> str:
    """The report as the page's data (`script_json`)."""
    data = asdict(report, dict_factory=_without_empty_panels)
    for section, drawn in zip(report.sections, data["sections"]):
        drawn["judges"] = [_judge_json(judge) for judge in section.judges]
    return script_json(data)


def fill_page(template: str, title: str, styles: tuple[str, ...], scripts: tuple[str, ...], data: str) -> str:
    """A page from the HTML template `template` (slots {{title}}, {{style}}, {{script}}, {{data}}): the style
    and script templates inlined in order (the shared ones first), `data` from `script_json`."""
    values = {
        "title": escape(title),
        "style": "\n".join(_template(name) for name in styles),
        "script": "\n".join(_template(name) for name in scripts),
        "data": data,
    }
    # One pass: text put into one slot is never scanned for another.
    return _SLOT.sub(lambda match: values[match.group(1)], _template(template))


def render_page(report: ItemReport, title: str = "capjudge: items and judgments") -> str:
    return fill_page("item_report.html", title, ("item_report.css",), ("page_common.js", "item_report.js"),
                     report_json(report))


def write_page(report: ItemReport, out: Path) -> Path:
    """Write the page whole or not at all (a reader never finds half a page)."""
    from capjudge.judges.atomic_files import write_replacing

    out.mkdir(parents=True, exist_ok=True)
    page = out / PAGE_NAME
    write_replacing(page, render_page(report))
    return page

"""Published VATEX-EVAL figures, with their sources, to print beside capjudge's own (never to tune to).

The figures live in metrics/templates/vatex_published.json, as data: each source names the paper, where the
table was read (a page a reader can open), the reference setting and the correlation protocol as the source
states it ("not stated" where it does not). Only figures that were read in a retrieved source are there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

_DATA = "vatex_published.json"


@dataclass(frozen=True)
class PublishedFigure:
    scorer: str
    kendall_b: float | None  # x100, as printed
    spearman: float | None
    citation: str
    where: str
    references: str
    protocol: str


def published_figures() -> tuple[PublishedFigure, ...]:
    text = resources.files("capjudge.metrics").joinpath("templates", _DATA).read_text(encoding="utf-8")
    figures = []
    for source in json.loads(text)["sources"]:
        for row in source["figures"]:
            figures.append(PublishedFigure(
                scorer=row["scorer"], kendall_b=row.get("kendall_b"), spearman=row.get("spearman"),
                citation=source["citation"], where=source["where"], references=source["references"],
                protocol=source["protocol"]))
    return tuple(figures)


def published_to_table(figures: tuple[PublishedFigure, ...]) -> str:
    """The published figures as a plain-text block: one line per figure, then each source once."""
    lines = ["Published VATEX-EVAL figures (copied from their sources, not computed here; x100):",
             f"  {'scorer':<22} {'tau-b':>7} {'rho':>7}"]
    for figure in figures:
        cells = [f"{value:7.2f}" if value is not None else f"{'-':>7}" for value in (figure.kendall_b, figure.spearman)]
        lines.append(f"  {figure.scorer:<22} {cells[0]} {cells[1]}")
    for citation, where, references, protocol in dict.fromkeys((f.citation, f.where, f.references, f.protocol) for f in figures):
        lines.append(f"  source: {citation}. References: {references}. Protocol: {protocol}. Read at {where}.")
    return "\n".join(lines) + "\n"


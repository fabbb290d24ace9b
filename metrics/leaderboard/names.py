"""Model names cut to a width for tables and figures: the one rule both use (capjudge.metrics.leaderboard.render's
Markdown tables, the charts' labels in capjudge.metrics.leaderboard.length_plot)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def cut_names(names: Iterable[str], width: int, shown: Callable[[str], str] = str) -> dict[str, str]:
    """Each name (as `shown` makes it) within `width` characters: a longer one loses its middle (the end of a
    model name is as telling as its start: sizes, variants), numbered when two cuts would read the same."""
    cut: dict[str, str] = {}
    for name in names:
        text = shown(name)
        short = cut_middle(text, width)
        number = 2
        while short in cut.values():
            short, number = cut_middle(text, width - len(str(number)) - 1) + f"#{number}", number + 1
        cut[name] = short
    return cut


def cut_middle(text: str, width: int) -> str:
    """`text` within `width` characters, its middle replaced by an ellipsis where it is longer."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]

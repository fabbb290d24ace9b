"""Model names as tables and figures show them: cut to a width by one rule (the leaderboard's Markdown tables and
charts, the arena's plots), and drawable on one line of a figure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

LABEL_WIDTH = 32  # characters of a model name in a figure's label; longer names lose their middle
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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


def drawable_names(names: list[str], width: int = LABEL_WIDTH) -> dict[str, str]:
    """Each name as one line a figure can draw: line breaks as ↵, other control characters as their escapes (no
    font has a glyph for them), cut to `width` (`cut_names`)."""
    return cut_names(names, width, lambda name: _CONTROL.sub(lambda m: "↵" if m.group() in "\n\r" else repr(m.group())[1:-1], name))

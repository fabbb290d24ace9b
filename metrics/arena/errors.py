"""ArenaError: input an arena cannot be built from, said in one line that names what is wrong (the model, the
item, the run, the file); the command line turns it into exit 2."""

from __future__ import annotations


class ArenaError(ValueError):
    """Battles that cannot be fitted or counted as given: one model, no shared items, a run without per-item
    values or captions, a score that is not a number, a verdict that is not A, B or tie."""

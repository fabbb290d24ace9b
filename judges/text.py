"""Plain text for people: a count with its noun, and untrusted text (a model or judge name from a file) as one
printable line. Standard library only, on the bottom floor, so every command and page words these alike."""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """`1 item`, `3 items`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def one_line(text: str) -> str:
    """`text` with every character a terminal or a page cannot show as itself (a line break, an escape
    sequence) replaced by `?`: a name from a file stays on its line and cannot move the cursor or recolour
    the terminal."""
    return "".join(character if character.isprintable() else "?" for character in text)


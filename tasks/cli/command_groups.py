"""`CommandGroups`: where a command module hangs its subcommands (main.py builds it, each `register` takes it)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandGroups:
    """Where a feature module hangs its subcommands: top level, or under `render` / `parse`."""

    top: argparse._SubParsersAction
    render: argparse._SubParsersAction
    parse: argparse._SubParsersAction

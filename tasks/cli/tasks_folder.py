"""`capjudge tasks-folder`: print the installed task folder, the path lmms-eval's `--include_path` takes.

LMMS_EVAL_PLUGINS=capjudge makes lmms-eval find the same folder itself; this is the stable way for a script
or a harness that passes `--include_path` (a checkout, a wheel, an sdist or `pip install git+...` alike).
"""

from __future__ import annotations

import argparse
from typing import Any


def register(groups: Any) -> None:
    parser = groups.top.add_parser("tasks-folder", help="print the folder of capjudge's lmms-eval tasks (for --include_path)")
    parser.set_defaults(func=_print_tasks_folder)


def _print_tasks_folder(args: argparse.Namespace) -> int:
    from capjudge.tasks import TASKS_DIR

    print(TASKS_DIR)
    return 0

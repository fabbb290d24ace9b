"""`capjudge cache merge`: join the reply caches of several nodes into one.

A run across nodes keeps one cache per node (CAPJUDGE_CACHE on local disk: SQLite on a network file system is
refused, see capjudge.judges.client.cache). Merged, they make a later run or leaderboard ask nothing again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(groups: Any) -> None:
    parser = groups.top.add_parser("cache", help="the judge reply cache: merge node-local caches")
    commands = parser.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")
    merge = commands.add_parser("merge", help="copy every reply of SOURCE caches into --into (existing keys kept)")
    merge.add_argument("sources", nargs="+", type=Path, help="cache files (SQLite) to read")
    merge.add_argument("--into", type=Path, required=True, help="the cache file to write (created if missing)")
    merge.set_defaults(func=_merge)


def _merge(args: argparse.Namespace) -> int:
    from capjudge.judges.client.cache import ReplyCache
    from capjudge.judges.client.cache_files import CacheError
    from capjudge.judges.client.cache_merge import merge_caches

    try:
        added = merge_caches(list(args.sources), args.into)
    except CacheError as error:
        print(f"capjudge cache merge: {error}", file=sys.stderr)
        return 2
    for source, count in added.items():
        print(f"{source}: {count} new replies")
    print(f"{args.into}: {len(ReplyCache(args.into))} replies")
    return 0

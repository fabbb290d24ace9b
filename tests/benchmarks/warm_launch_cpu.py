"""CPU of one warm lmms-eval run (tests/support/warm_launch.py), with the forkserver as the suite uses it and as it was
before it preloaded the late imports and froze its heap (`--bare`), side by side in one invocation.

    .venv/bin/python -m tests.benchmarks.warm_launch_cpu [--runs 4]

Each side is its own process (one forkserver per process), started one after the other; each runs the two demo
tasks against the test judge `runs` times, each with a fresh cache (every item judged), and prints the
machine's busy core-seconds (/proc/stat) and the wall time of each run. The first run of a side includes
starting its forkserver. Nothing here asserts; the figures go into the note that cites them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BARE_PRELOAD = ("tests.support.warm_launch", "lmms_eval.__main__", "lmms_eval.cli.dispatch", "tests.support.warm_task_index")


def busy_core_seconds() -> float:
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / 100  # all but idle and iowait, in USER_HZ ticks


def one_side(bare: bool, runs: int) -> None:
    from tests.support import warm_launch
    from tests.support.harness_runs import judge_server, run_lmms_eval

    if bare:  # as before: no late imports preloaded, no freeze (warm_launch is imported already: a no-op)
        warm_launch.PRELOAD, warm_launch.FREEZE = BARE_PRELOAD, "tests.support.warm_launch"
    scratch = Path(tempfile.mkdtemp(prefix="warm-bench-"))
    warm_launch.use_scratch(scratch / "warm")
    with judge_server() as judge:
        for run in range(runs):
            busy, started = busy_core_seconds(), time.monotonic()
            run_lmms_eval(model="captions_file", model_args=f"path={REPO / 'tasks/demo/captions_good.jsonl'},model_name=good",
                          tasks="gveval_demo,anycap_style_demo", output_path=scratch / f"out{run}",
                          judge_base_url=judge.base_url, cache_path=scratch / f"cache{run}.sqlite")
            print(f"BENCH warm_run_{'bare' if bare else 'suite'}_{run} {busy_core_seconds() - busy:.1f} core-s "
                  f"(wall {time.monotonic() - started:.1f} s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--side", choices=("bare", "suite"), help=argparse.SUPPRESS)  # one side, in a child
    args = parser.parse_args()
    if args.side:
        one_side(args.side == "bare", args.runs)
        return 0
    for side in ("bare", "suite"):
        subprocess.run([sys.executable, "-m", "tests.benchmarks.warm_launch_cpu", "--side", side, "--runs", str(args.runs)], cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

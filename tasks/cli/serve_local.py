"""`capjudge serve-local`: the embedded local judge as a command (the server: capjudge.judges.local.launcher).

The flags are the serving process's own (`llama_server.add_arguments`, which `LocalJudgeServer` passes on to
the child) plus --log.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from capjudge.judges.local.llama_server import add_arguments
from capjudge.tasks.cli.bounds import MAX_CONTEXT_TOKENS, MAX_PID, MAX_PORT, MAX_THREADS, bound_flag


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "serve-local",
        help="serve a local GGUF judge (default: Gemma 3 270M) as an OpenAI-compatible API on 127.0.0.1",
        description="Serve a GGUF model with llama.cpp as an OpenAI-compatible judge on 127.0.0.1 (no API key).",
    )
    add_arguments(parser)
    # The serving process checks its flags' lower limits (--n-ctx >= 512 ...); the bounds add the upper ones.
    bound_flag(parser, "--port", low=0, high=MAX_PORT)
    bound_flag(parser, "--n-ctx", low=1, high=MAX_CONTEXT_TOKENS)
    bound_flag(parser, "--threads", low=1, high=MAX_THREADS)
    bound_flag(parser, "--parent-pid", low=1, high=MAX_PID)
    parser.add_argument("--log", type=Path, help="the server's log file (default: a temporary file)")
    parser.set_defaults(func=run_supervised)


def run_supervised(args: argparse.Namespace) -> int:
    """The server in a child process, health-checked with one completion before it is announced, and watched:
    a crash is reported with its signal, log and advice instead of a bare "Segmentation fault" from the shell."""
    from capjudge.judges.local.launcher import LocalJudgeServer
    from capjudge.judges.local.options import LocalServerError

    # SIGTERM (a service manager, `kill`, a test harness) or SIGHUP (the terminal closed) would otherwise end
    # Python without running `finally`: the server child is orphaned and its capjudge-local-judge-* folder
    # stays in the temporary directory. Both become the same clean stop as Ctrl-C.
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, _stop_requested)
    try:
        # Inside the try: the constructor checks the flags (--n-ctx, --port, --model ...), one line each.
        server = LocalJudgeServer(
            args.model, args.port, mmproj_path=args.mmproj, chat_format=args.chat_format, n_ctx=args.n_ctx,
            n_threads=args.threads, alias=args.alias, startup_timeout=600.0, log_path=args.log,
        )
        server.start()
    except LocalServerError as error:
        print(f"capjudge serve-local: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0  # stopped while starting: start() has already stopped the child and removed its folder
    try:
        if not args.quiet:
            print(server.notice(), flush=True)
        print(f"Serving {server.model} at {server.base_url} (log: {server.log_path}); Ctrl-C stops it.", flush=True)
        server.wait()
        print(f"capjudge serve-local: {server.death_report()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _stop_requested(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)

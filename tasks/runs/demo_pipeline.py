"""The demo pipeline: the whole product, offline, on the demo split shipped in tasks/demo/. `capjudge demo`
(capjudge.tasks.cli.demo) is its command line.

Steps: start the embedded local judge (llama.cpp serving a tiny GGUF from PyPI), run lmms-eval on both demo
tasks once per caption set with the captions_file model (so each caption set is a "model" on the
leaderboard), build the leaderboard, stop the judge, and print where everything is. Judge replies are cached
in results/demo/judge_cache.sqlite, so a second run makes no judge requests.

With `--remote-judge` the local server is not started and the judge comes from the environment exactly as
in any lmms-eval run (OPENAI_API_KEY + MODEL_VERSION, API_TYPE=azure ..., or OPENAI_BASE_URL for a
vLLM/SGLang server).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.tasks import TASKS_DIR

DEMO_DATA = TASKS_DIR / "demo"
DEMO_TASKS = ("gveval_demo", "anycap_style_demo")
CAPTION_SETS = ("good", "fair", "poor")


@dataclass(frozen=True)
class DemoOptions:
    """What `capjudge demo` was asked for."""

    out: Path
    remote_judge: bool = False  # judge with the backend configured in the environment, not the local model
    limit: int | None = None  # items per task; None: all
    caption_sets: tuple[str, ...] = CAPTION_SETS


def lmms_eval_command(caption_set: str, out: Path, limit: int | None) -> list[str]:
    command = [
        sys.executable, "-m", "lmms_eval",
        "--model", "captions_file",
        "--model_args", f"path={DEMO_DATA / f'captions_{caption_set}.jsonl'},model_name={caption_set}",
        "--tasks", ",".join(DEMO_TASKS),
        "--include_path", str(TASKS_DIR),
        "--output_path", str(out / "runs"),
        "--log_samples",
        "--verbosity", "WARNING",
    ]
    if limit is not None:
        command += ["--limit", str(limit)]
    return command


def judge_environment(base_env: dict[str, str], out: Path, local: Any | None) -> dict[str, str]:
    env = dict(base_env)
    env["CAPJUDGE_CACHE"] = str((out / "judge_cache.sqlite").resolve())
    if local is not None:
        env.update({
            "OPENAI_BASE_URL": local.base_url,
            "MODEL_VERSION": local.model,
            # The tiny model needs its output shape enforced by a grammar to produce parseable replies.
            "CAPJUDGE_CONSTRAINED_OUTPUT": "1",
            # llama.cpp answers one request at a time; more in flight would only queue and time out.
            "CAPJUDGE_MAX_CONCURRENCY": "1",
        })
        env.pop("OPENAI_API_URL", None)
        env.pop("API_TYPE", None)
    return env


def run_demo(options: DemoOptions) -> int:
    from capjudge.judges.local.options import LocalServerError, MissingLocalExtra

    out = options.out
    started = time.perf_counter()
    if options.remote_judge:
        from capjudge.judges.client.config import ConfigError, JudgeConfig

        try:
            JudgeConfig.from_env()  # one clear error now if the judge is not configured, before any folder is made
        except ConfigError as error:
            print(f"capjudge demo: {error}", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    if options.remote_judge:
        server_context: Any = nullcontext(None)
    else:
        from capjudge.judges.local.launcher import LocalJudgeServer

        server_context = LocalJudgeServer(log_path=out / "local_judge.log")
    steps = [*(f"lmms-eval: captions '{name}'" for name in options.caption_sets), "report and leaderboard"]
    try:
        return _run_steps(options, out, steps, server_context, started)
    except LocalServerError as error:
        print(f"capjudge demo: {error}", file=sys.stderr)
        return 2 if isinstance(error, MissingLocalExtra) else 1


def _refusal_in(log_file: Path) -> str | None:
    """The last line capjudge itself printed in an lmms-eval log ("capjudge: ..."): a refusal's reason (an
    unreachable judge, a missing key), which the user should not have to open the log for."""
    try:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = [line for line in lines if line.startswith("capjudge: ")]
    return said[-1].removeprefix("capjudge: ") if said else None


def _run_steps(options: DemoOptions, out: Path, steps: list[str], server_context: Any, started: float) -> int:
    from tqdm import tqdm

    from capjudge.judges.text import EMBEDDED_JUDGE_CAVEAT
    from capjudge.metrics.item_report.page import write_page
    from capjudge.metrics.item_report.report import build_item_report, items_link
    from capjudge.metrics.leaderboard.board import LeaderboardSettings, build_leaderboard
    from capjudge.metrics.files.runs import RESULTS_SUFFIX, read_runs
    from capjudge.metrics.leaderboard.render import write_leaderboard

    with server_context as local:
        if local is not None:
            print(local.notice(), flush=True)
        env = judge_environment(dict(os.environ), out, local)
        run_dirs: list[Path] = []
        with tqdm(total=len(steps), desc="capjudge demo", unit="step") as progress:
            for caption_set in options.caption_sets:
                progress.set_postfix_str(caption_set)
                log_file = out / f"lmms_eval_{caption_set}.log"
                run_dir = out / "runs" / caption_set
                before = set(run_dir.rglob(f"*{RESULTS_SUFFIX}")) if run_dir.exists() else set()
                with log_file.open("w") as log:
                    process = subprocess.Popen(lmms_eval_command(caption_set, out, options.limit), env=env,
                                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                    died = _wait_unless_judge_dies(process, local)
                if died is not None:
                    print(f"capjudge demo stopped: {died}\nlmms-eval (caption set '{caption_set}') was stopped "
                          f"with it; its log: {log_file}", file=sys.stderr)
                    return 1
                # lmms-eval can exit 0 after a failed evaluation: a new results file is the proof of success.
                written = set(run_dir.rglob(f"*{RESULTS_SUFFIX}")) - before if run_dir.exists() else set()
                if process.returncode != 0 or not written:
                    reason = _refusal_in(log_file)
                    print(f"lmms-eval failed for caption set '{caption_set}' (exit {process.returncode}, "
                          f"no new results file){': ' + reason if reason else ''}; see {log_file}", file=sys.stderr)
                    return 2 if process.returncode == 2 else 1  # lmms-eval's 2: capjudge refused its input
                run_dirs.append(max(written, key=lambda path: path.stat().st_mtime))
                progress.update(1)
            progress.set_postfix_str("report and leaderboard")
            named_runs = [f"{name}={path}" for name, path in zip(options.caption_sets, run_dirs)]
            # Every item of every run in one page (frames, replies, scores), and each leaderboard row linked to
            # its model's items there.
            write_page(build_item_report(named_runs, out / "report"), out / "report")
            runs, notes = read_runs(named_runs)
            board = build_leaderboard(runs, LeaderboardSettings(), warnings=notes,
                                      report_url=lambda task, model: f"report/{items_link(task, model)}")
            write_leaderboard(board, out)
            progress.update(1)
    elapsed = time.perf_counter() - started
    print(f"\nDemo finished in {elapsed:.0f} s. Results in {out}/:")
    print(f"  lmms-eval outputs: {out / 'runs'}/<caption set>/")
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png", "report/report.html"):
        print(f"  {out / name}")
    for plot in sorted(out.glob("leaderboard_length_*.png")):  # one per task with length-controlled scores
        print(f"  {plot}")
    print("\n" + (out / "leaderboard.md").read_text())
    if board.warnings:
        print("Warnings:", *board.warnings, sep="\n  ")
    if local is not None:
        # The files say it too: the leaderboard's and the report's caveats key on the judge model the runs logged.
        print(f"\nThese scores come from {EMBEDDED_JUDGE_CAVEAT}. Run `capjudge demo --remote-judge` with a real "
              "judge configured (see README) for meaningful ones.")
    return 0


def _wait_unless_judge_dies(process: subprocess.Popen[bytes], local: Any | None, poll: float = 0.5) -> str | None:
    """Wait for lmms-eval; if the local judge server dies first, stop lmms-eval at once and return why.

    Without this, every remaining item would wait through the client's backoff against a closed port and end
    `request_failed`: minutes of failures and a leaderboard of nothing. Replies already received are in the
    cache, so the next run resumes where this one stopped."""
    while True:
        try:
            process.wait(timeout=poll)
            return None
        except subprocess.TimeoutExpired:
            pass
        died = local.death_report() if local is not None else None
        if died is not None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            return died

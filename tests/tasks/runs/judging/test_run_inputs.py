"""Run inputs and output folders a user can act on: each problem is one line naming the flag, the file and the
item, never a traceback, never a silent ranking, and nothing half-written.

A real `capjudge judge` run (the demo G-VEval task, judged by the test server) is the material; copies of it
are broken the way real files break (another encoding, an item score that is no number), and the real CLI
reads them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server

pytestmark = pytest.mark.slow

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"


def _env(judge, tmp_path: Path) -> dict[str, str]:
    return harness_env(judge.base_url, cache_path=tmp_path / "cache" / "judge.sqlite",
                       datasets_cache=tmp_path / "hf_datasets_cache")


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Path:
    """The folder of one real `capjudge judge` run of the good captions on the demo G-VEval task."""
    root = tmp_path_factory.mktemp("judged_run")
    with judge_server() as judge:
        done = run_capjudge("judge", "--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK,
                            "--out", str(root / "out"), env=_env(judge, root))
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = [path.parent for path in (root / "out").rglob("*_results.json")]
    return folder


def _copy(run: Path, destination: Path) -> Path:
    shutil.copytree(run, destination)
    return destination


def _error_lines(stderr: str, command: str) -> list[str]:
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith(f"capjudge {command}:")]


def _tree(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------------------
# --out
# ---------------------------------------------------------------------------------------------------------


def test_an_out_that_is_a_file_or_under_one_is_one_line_before_any_work(judged, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder\n", encoding="utf-8")
    before = _tree(tmp_path)
    for out, problem in ((taken, "is a file, not a folder"), (taken / "sub", "cannot write there")):
        with judge_server() as judge:
            judged_again = run_capjudge("judge", "--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK,
                                        "--out", str(out), env=_env(judge, tmp_path / "run"))
            # Refused before the task was loaded: not even the pre-flight probe was sent, nothing was paid for.
            assert judge.log == [] and judge.preflights == []
        assert judged_again.returncode == 2
        assert _error_lines(judged_again.stderr, "judge") == [f"capjudge judge: --out {out}: {problem}" + (
            "" if problem.startswith("is") else " (Not a directory)")]

        board = run_capjudge("leaderboard", str(judged), "--out", str(out))
        assert board.returncode == 2
        assert [line for line in _error_lines(board.stderr, "leaderboard")] == [
            f"capjudge leaderboard: --out {out}: {problem}" + ("" if problem.startswith("is") else " (Not a directory)")]

        report = run_capjudge("report", str(judged), "--out", str(out))
        assert report.returncode == 2
        assert _error_lines(report.stderr, "report") == [
            f"capjudge report: --out {out}: {problem}" + ("" if problem.startswith("is") else " (Not a directory)")]
    # Nothing was written anywhere: the file is untouched, and no leaderboard, report or run appeared.
    assert taken.read_text(encoding="utf-8") == "not a folder\n"
    assert [path for path in _tree(tmp_path) if not path.startswith("run")] == before


def test_a_rerun_removes_the_temporary_files_a_killed_run_left_and_only_those(judged, tmp_path):
    import os
    import socket
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    folder = out / judged.name  # the run folder `capjudge judge --model-name good` writes into
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)  # a writer that has ended
    host = socket.gethostname().split(".")[0]
    left = folder / f".20260101_000000_000000_results.json.{host}-{dead_pid}.k3j2.partial"
    live = folder / f".20260101_000000_000000_results.json.{host}-{os.getpid()}.x8q1.partial"
    elsewhere = folder / f".20260101_000000_000000_results.json.otherhost-{dead_pid}.p0z9.partial"
    not_ours = folder / ".notes.partial"
    just_left = folder / f".20260101_000000_000001_results.json.{host}-{dead_pid}.m2n4.partial"  # too recent
    for path in (left, live, elsewhere, not_ours, just_left):
        path.write_text("half a file", encoding="utf-8")
        if path != just_left:  # two hours old: past the age at which a dead writer's file is swept
            two_hours_ago = time.time() - 7200
            os.utime(path, (two_hours_ago, two_hours_ago))
    with judge_server() as judge:
        done = run_capjudge("judge", "--captions", str(CAPTIONS), "--model-name", "good", "--task", TASK,
                            "--out", str(out), env=_env(judge, tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"capjudge judge: removed {left}, left by a killed run" in done.stderr
    assert not left.exists()
    # A live writer's, another host's, not a writer's name, and one too recent to call abandoned.
    assert live.exists() and elsewhere.exists() and not_ours.exists() and just_left.exists()
    assert len(list(folder.glob("*_results.json"))) == 1


def _capjudge_under_umask(umask: int, *args: str, env: dict[str, str] | None = None):
    """`capjudge ARGS` in a warm child whose umask is `umask` (the forkserver's own is whatever the suite had)."""
    import os
    import subprocess

    from tests.support.warm_launch import warm_start

    code = (f"import os, sys; os.umask({umask:#o}); from capjudge.tasks.cli.main import main; "
            "sys.argv[0] = 'capjudge'; raise SystemExit(main(sys.argv[1:]))")
    process = warm_start("code", [code, *args], env=env or dict(os.environ), cwd=REPO_ROOT)
    stdout, stderr = process.communicate(300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_files_for_people_get_the_mode_the_umask_gives_and_a_batch_state_stays_owner_only(judged, tmp_path):
    import stat

    def modes(folder: Path) -> dict[str, int]:
        return {str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode)
                for path in folder.rglob("*") if path.is_file()}

    board = _capjudge_under_umask(0o027, "leaderboard", str(judged), "--out", str(tmp_path / "board"))
    assert board.returncode == 0, board.stderr[-3000:]
    report = _capjudge_under_umask(0o027, "report", str(judged), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-3000:]
    with judge_server() as judge:
        run = _capjudge_under_umask(0o022, "judge", "--captions", str(CAPTIONS), "--model-name", "good", "--task",
                                    TASK, "--out", str(tmp_path / "run"), env=_env(judge, tmp_path / "j"))
    assert run.returncode == 0, run.stderr[-3000:]
    board_modes, report_modes, run_modes = modes(tmp_path / "board"), modes(tmp_path / "report"), modes(tmp_path / "run")
    assert {"leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png"} <= set(board_modes)
    assert set(board_modes.values()) == {0o640}, board_modes  # 0o666 less the umask 027: the group may read
    assert "report.html" in report_modes and set(report_modes.values()) == {0o640}, report_modes
    assert len(run_modes) == 2 and set(run_modes.values()) == {0o644}, run_modes  # results and samples


def test_a_batch_state_file_is_written_owner_only_whatever_the_umask(tmp_path):
    import os
    import stat

    from capjudge.judges.atomic_files import write_replacing

    previous = os.umask(0o022)
    try:
        write_replacing(tmp_path / "batch_state.json", "{}", private=True)
        write_replacing(tmp_path / "leaderboard.md", "# board")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "batch_state.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "leaderboard.md").stat().st_mode) == 0o644


# ---------------------------------------------------------------------------------------------------------
# Results and samples files that cannot be read as they are
# ---------------------------------------------------------------------------------------------------------


def test_a_results_file_that_is_not_utf8_is_named(judged, tmp_path):
    broken = _copy(judged, tmp_path / "latin1")
    (results_file,) = broken.glob("*_results.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results["config"]["captions_from"] = "légendes"
    results_file.write_bytes(json.dumps(results, ensure_ascii=False).encode("latin-1"))

    board = run_capjudge("leaderboard", f"clean={judged}", f"broken={broken}", "--out", str(tmp_path / "board"))
    assert board.returncode == 2
    (line,) = _error_lines(board.stderr, "leaderboard")
    assert str(results_file) in line and "not UTF-8" in line
    assert not list((tmp_path / "board").glob("leaderboard.*"))

    report = run_capjudge("report", f"clean={judged}", f"broken={broken}", "--out", str(tmp_path / "report"))
    assert report.returncode == 1  # the report's exit status for runs it cannot show (see `capjudge report -h`)
    (line,) = _error_lines(report.stderr, "report")
    assert str(results_file) in line and "not UTF-8" in line
    assert not (tmp_path / "report" / "report.html").exists()


def _with_scores(run: Path, destination: Path, score_of) -> tuple[Path, Path]:
    """A copy of the run whose gveval_mean of item number i (0-based) is score_of(i) (unchanged when it
    returns the sentinel `...`)."""
    folder = _copy(run, destination)
    (samples,) = folder.glob(f"*_samples_{TASK}.jsonl")
    lines = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines() if line.strip()]
    for index, line in enumerate(lines):
        value = score_of(index)
        if value is not ...:
            line["gveval_mean"] = value
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return folder, samples


@pytest.mark.parametrize(("case", "score_of", "first_bad", "problem"), [
    ("huge_integer", lambda i: 10**400 if i == 3 else ..., 3, "an integer of 1329 bits is beyond ±2**53"),
    ("minus_1e308", lambda i: -1e308, 0, "-1e+308 is beyond ±2**53"),
    ("strings", lambda i: "85", 0, "'85' is text, not a number"),
    ("nan", lambda i: float("nan"), 0, "NaN is not a number"),
])
def test_an_item_score_that_is_no_number_is_refused_naming_file_line_and_item(judged, tmp_path, case, score_of,
                                                                               first_bad, problem):
    folder, samples = _with_scores(judged, tmp_path / case, score_of)
    item = json.loads(samples.read_text(encoding="utf-8").splitlines()[first_bad])["judged"]["item_id"]
    expected = f"{samples}, line {first_bad + 1} (item {item}): gveval_mean: {problem}"

    board = run_capjudge("leaderboard", f"clean={judged}", f"{case}={folder}", "--out", str(tmp_path / "board"))
    assert board.returncode == 2, board.stdout
    (line,) = _error_lines(board.stderr, "leaderboard")
    assert expected in line
    assert not list((tmp_path / "board").glob("leaderboard.*"))  # never ranked, on the aggregate or otherwise

    report = run_capjudge("report", f"clean={judged}", f"{case}={folder}", "--out", str(tmp_path / "report"))
    assert report.returncode == 1, report.stdout
    (line,) = _error_lines(report.stderr, "report")
    assert expected in line
    assert not (tmp_path / "report" / "report.html").exists()

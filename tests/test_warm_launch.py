"""The warm launcher (tests/support/warm_launch.py) against real capjudge commands: a warm child must give what the
real command line gives (exit status, stdout, stderr, traceback), see exactly the environment and working
directory it is given, and die at its timeout; the task index its server builds once is the one lmms-eval
builds; the demo clips' frames it renders once are the ones a child renders, and only theirs are kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, run_capjudge_cli
from tests.support.warm_launch import warm_start

PUBLISHED_GVEVAL_MODEL = "gpt-4o-2024-05-13"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **extra}


def _render(tmp_path: Path, out: str, env: dict[str, str], *, cwd: Path, warm: bool = True) -> subprocess.CompletedProcess[str]:
    return run_capjudge_cli(["render", "gveval", "--caption", "a dog runs", "--mode", "references", "--reference",
                             "a dog is running", "--out", out], env=env, cwd=cwd, timeout=120, warm=warm)


@pytest.mark.parametrize("case", ["help", "usage error", "uncaught exception"])
def test_a_warm_child_exits_and_writes_as_the_real_command_does(tmp_path, case):
    (tmp_path / "a_file").write_text("not a folder")
    args = {
        "help": ["render", "gveval", "--help"],
        "usage error": ["render", "gveval", "--caption"],
        "uncaught exception": ["render", "gveval", "--caption", "x", "--mode", "references", "--reference", "r",
                               "--out", str(tmp_path / "a_file" / "inside")],  # mkdir under a file raises
    }[case]
    warm = run_capjudge_cli(args, env=_env(tmp_path), cwd=tmp_path, timeout=120)
    real = run_capjudge_cli(args, env=_env(tmp_path), cwd=tmp_path, timeout=120, warm=False)
    assert (warm.returncode, warm.stdout) == (real.returncode, real.stdout)
    assert warm.stderr.splitlines()[-1:] == real.stderr.splitlines()[-1:]
    expected_status = {"help": 0, "usage error": 2, "uncaught exception": 1}[case]
    assert warm.returncode == expected_status, warm.stderr
    if case == "help":
        assert warm.stdout.startswith("usage: capjudge render gveval") and warm.stderr == ""
    if case == "usage error":
        assert warm.stdout == "" and "error: argument --caption: expected one argument" in warm.stderr
    if case == "uncaught exception":
        assert warm.stdout == "" and warm.stderr.startswith("Traceback (most recent call last):")
        assert warm.stderr.rstrip().endswith(f"NotADirectoryError: [Errno 20] Not a directory: '{tmp_path / 'a_file' / 'inside'}'")


def test_a_warm_child_sees_exactly_its_environment_and_working_directory(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    given = _render(tmp_path, "request", _env(tmp_path, MODEL_VERSION="model-from-env"), cwd=first)
    assert given.returncode == 0, given.stderr
    assert json.loads((first / "request" / "request.json").read_text())["model"] == "model-from-env"

    # Neither the test process's MODEL_VERSION nor the server's (warm_launch.SERVER_ENV) is in the child's env.
    monkeypatch.setenv("MODEL_VERSION", "model-of-the-test-process")
    default = _render(tmp_path, "request", _env(tmp_path), cwd=second)
    assert default.returncode == 0, default.stderr
    assert json.loads((second / "request" / "request.json").read_text())["model"] == PUBLISHED_GVEVAL_MODEL
    assert not (REPO_ROOT / "request").exists()


def test_a_warm_judge_run_uses_the_judge_and_cache_its_environment_names(tmp_path, server):
    env = _env(tmp_path, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=TEST_API_KEY, MODEL_VERSION=TEST_JUDGE_MODEL,
               CAPJUDGE_CACHE=str(tmp_path / "cache.sqlite"), HF_DATASETS_CACHE=str(tmp_path / "hf"))
    done = run_capjudge_cli(["judge", "--captions", REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl",
                             "--task", "gveval_demo", "--out", tmp_path / "out"],
                            env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert server.log, "the judge named in env got no request"
    assert all({key.lower(): value for key, value in request.headers.items()}["authorization"] == f"Bearer {TEST_API_KEY}"
               for request in server.log)
    assert {request.body["model"] for request in server.log} == {TEST_JUDGE_MODEL}
    assert (tmp_path / "cache.sqlite").is_file()
    assert len(list((tmp_path / "out").rglob("*_samples_gveval_demo.jsonl"))) == 1


def _processes_working_in(folder: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def test_a_warm_child_past_its_timeout_is_killed_and_raises(tmp_path, server):
    server.latency = 30.0  # every judge request hangs far past the timeout
    env = _env(tmp_path, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=TEST_API_KEY, MODEL_VERSION=TEST_JUDGE_MODEL,
               CAPJUDGE_CACHE=str(tmp_path / "cache.sqlite"), HF_DATASETS_CACHE=str(tmp_path / "hf"))
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        run_capjudge_cli(["judge", "--captions", REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl",
                          "--task", "gveval_demo", "--out", tmp_path / "out"], env=env, cwd=tmp_path, timeout=3)
    assert expired.value.timeout == 3
    assert time.monotonic() - started < 15
    assert _processes_working_in(tmp_path) == []


_INDEX_CHECK = """
import json, os, pathlib, shutil, sys
sys.path.insert(0, sys.argv[1])
from tests.support import warm_task_index as remembered  # builds both indexes, with lmms-eval's code
from lmms_eval.tasks import TaskManager

built_by_lmms_eval = []
lmms_eval_code = remembered.index_lmms_eval_builds
remembered.index_lmms_eval_builds = lambda self, folder: built_by_lmms_eval.append(folder) or lmms_eval_code(self, folder)
index = lambda folder: TaskManager._get_task_and_group(remembered.bare_task_manager(), folder)
fresh = lambda folder: lmms_eval_code(remembered.bare_task_manager(), folder)

built = remembered._lmms_eval_index
first = index(remembered.LMMS_EVAL_TASKS)
first["gveval_references"] = "changed by a run"  # a run that changes its copy changes no other run's
second = index(remembered.LMMS_EVAL_TASKS)
ours = os.path.join(sys.argv[2], "tasks")  # capjudge's folder, remembered while unchanged
kept = index(ours)
found = {"tasks": len(built), "equal": second == built and second is not built, "own_copy": second is not first,
         "ours_remembered": kept == fresh(ours) and "gveval_demo" in kept and built_by_lmms_eval == []}

os.chdir(sys.argv[3])
copied = shutil.copytree(ours, "copy", ignore=shutil.ignore_patterns("*.mp4", "*.jsonl", "__pycache__"))
found["copy_indexed_afresh"] = index(copied) == fresh(copied) and built_by_lmms_eval[-1:] == [copied]
found["copy_remembered"] = remembered.remember(copied) and index(copied) == fresh(copied)
demo = os.path.join(copied, "gveval", "gveval_demo.yaml")
with open(demo, encoding="utf-8") as handle:
    text = handle.read()
with open(demo, "w", encoding="utf-8") as handle:  # the same length: only the bytes tell
    handle.write(text.replace("task: gveval_demo", "task: gveval_dem0"))
changed = index(copied)
found["changed_indexed_afresh"] = changed == fresh(copied) and "gveval_dem0" in changed and "gveval_demo" not in changed
with open(demo, "w", encoding="utf-8") as handle:
    handle.write(text)
with open("gveval.yaml", "w", encoding="utf-8") as handle:  # lmms-eval reads an include from the working folder first
    handle.write("group: from_the_working_folder\\n")  # a tag of every task that includes gveval.yaml
shadowed = index(copied)
found["shadowed_indexed_afresh"] = shadowed == fresh(copied) and "from_the_working_folder" in shadowed
os.remove("gveval.yaml")
found["unchanged_again"] = index(copied) == remembered._remembered[copied].index
found["built_by_lmms_eval"] = built_by_lmms_eval
found["patched"] = TaskManager._get_task_and_group.__module__

# lmms-eval's index, shared by the run's servers: this process, the first in the folder, built and wrote it; a
# second server reads it without lmms-eval's code; a file cut short or written by another lmms-eval is indexed
# afresh (here by a stand-in for lmms-eval's code) and replaced.
shared = os.environ["CAPJUDGE_TEST_WARM_SHARED"]
stored = os.path.join(shared, "lmms_eval_task_index.json")
read_stored = lambda: json.loads(pathlib.Path(stored).read_text(encoding="utf-8"))
calls = len(built_by_lmms_eval)
found["shared_written"] = read_stored()["index"] == built
found["shared_read"] = remembered.shared_lmms_eval_index(pathlib.Path(shared)) == built and len(built_by_lmms_eval) == calls
stand_in, stand_in_builds = {"stand_in": {"type": "task", "yaml_path": "stand_in.yaml"}}, []
remembered.index_lmms_eval_builds = lambda self, folder: stand_in_builds.append(folder) or stand_in
with open(stored, "w", encoding="utf-8") as handle:
    handle.write('{"stamp": {')
found["cut_short_indexed_afresh"] = remembered.shared_lmms_eval_index(pathlib.Path(shared)) == stand_in == read_stored()["index"]
other = read_stored()
other["stamp"]["lmms_eval"], other["index"] = "0.0.1", {"elsewhere": {"type": "task", "yaml_path": "x.yaml"}}
with open(stored, "w", encoding="utf-8") as handle:
    json.dump(other, handle)
found["other_lmms_eval_indexed_afresh"] = (remembered.shared_lmms_eval_index(pathlib.Path(shared)) == stand_in
                                          and read_stored()["stamp"]["lmms_eval"] != "0.0.1")
found["stand_in_builds"] = len(stand_in_builds)
print(json.dumps(found))
"""


def test_the_task_indexes_the_warm_server_builds_once_are_the_ones_lmms_eval_builds(tmp_path):
    """tests/support/warm_task_index.py: lmms-eval's own task folder and capjudge's indexed once in the server, by
    lmms-eval's code, each run given its own copy; capjudge's only while every YAML it was built from is unchanged
    (a changed file, or an include name shadowed by the working folder, is indexed afresh); every other folder
    indexed as lmms-eval does (in a subprocess: the patch must not reach this test process). lmms-eval's index
    is shared by the run's servers through a folder (CAPJUDGE_TEST_WARM_SHARED): written by the first, read by the
    next, indexed afresh when the file is cut short or another lmms-eval wrote it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    done = subprocess.run([sys.executable, "-c", _INDEX_CHECK, str(REPO_ROOT), str(REPO_ROOT), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                          env={**os.environ, "CAPJUDGE_TEST_WARM_SHARED": str(shared)})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tasks"] > 1000  # lmms-eval's own tasks, not an empty folder
    # lmms-eval's code ran for the copy before it was remembered, to remember it, and for the changed and the
    # shadowed copy; never for capjudge's unchanged folder nor the copy back to its remembered state (the fresh
    # indexes compared with call lmms-eval's code directly, uncounted).
    assert found == {"tasks": found["tasks"], "equal": True, "own_copy": True, "ours_remembered": True,
                     "built_by_lmms_eval": ["copy", "copy", "copy", "copy"], "copy_indexed_afresh": True,
                     "copy_remembered": True, "changed_indexed_afresh": True, "shadowed_indexed_afresh": True,
                     "unchanged_again": True, "patched": "tests.support.warm_task_index",
                     "shared_written": True, "shared_read": True, "cut_short_indexed_afresh": True,
                     "other_lmms_eval_indexed_afresh": True, "stand_in_builds": 2}


_FRAMES_CHECK = """
import json, shutil, sys
from capjudge.judges import descriptor
from capjudge.judges.known_judges import SHIPPED_JUDGES
from capjudge.tasks import TASKS_DIR

at_start = descriptor._rendered_video.cache_info()
clip = TASKS_DIR / "demo" / "red_ball.mp4"
same = {name: judge.frames.render(video=clip) == judge.frames._render_now(clip, None)
        for name, judge in SHIPPED_JUDGES.items()}
after_demo = descriptor._rendered_video.cache_info()
copy = shutil.copy(clip, sys.argv[1])  # the same bytes under another identity
SHIPPED_JUDGES["gveval"].frames.render(video=copy)
after_copy = descriptor._rendered_video.cache_info()
print(json.dumps({"kept_at_start": at_start.currsize, "demo_hits": after_demo.hits - at_start.hits,
                  "demo_misses": after_demo.misses - at_start.misses, "same_as_rendered_here": same,
                  "copy_misses": after_copy.misses - after_demo.misses}))
"""


def test_a_warm_child_starts_with_the_demo_clips_frames_its_server_rendered_and_renders_any_other_video(tmp_path):
    """tests/support/warm_demo_frames.py: the ten demo clips rendered once in the server, for both shipped judges'
    geometries, are what the child would render itself (byte for byte); a copy of one is rendered anew."""
    child = warm_start("code", [_FRAMES_CHECK, str(tmp_path / "copied.mp4")], env=_env(tmp_path), cwd=tmp_path)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 0, stderr[-3000:]
    found = json.loads(stdout.strip().splitlines()[-1])
    assert found == {"kept_at_start": 2 * 10, "demo_hits": 2, "demo_misses": 0,
                     "same_as_rendered_here": {"gveval": True, "anycap": True}, "copy_misses": 1}

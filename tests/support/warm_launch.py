"""Run `python -m lmms_eval ARGS` or `python -m capjudge.tasks.cli ARGS` without paying their start-up again.

    completed = warm_run("capjudge", ["judge", "--captions", ...], env=env, cwd=REPO_ROOT, timeout=600)
    completed.returncode, completed.stdout, completed.stderr          # as subprocess.run(..., text=True) gives them

Each command is a fresh process forked from a server that has already imported lmms-eval, torch, transformers and
the capjudge CLI (multiprocessing's "forkserver", one per test process, started on first use): importing those
costs ~10 s of CPU per launch, most of the test suite's time. The child is made to look like the real command's
process: its environment is exactly `env` (and the Hugging Face settings read at import are re-read from it), its
working directory `cwd`, stdin /dev/null, fd 1 and 2 files the parent reads back, `sys.argv` and `sys.path` as
`python -m` sets them; the entry point runs as `python -m` runs it, and the exit status, tracebacks, atexit
handlers and non-daemon threads behave as the interpreter's own exit does.

What a warm child cannot show: an import-time failure of the preloaded modules, an effect of PYTHONPATH or
sitecustomize on them, handled signals (SIGKILL, which no process handles, is the same) and stdin, or the real
command line. Tests of those keep a real subprocess. `warm_start` returns a running child (a `python -m` command
or a `python -c` program) for tests that watch one or kill it.
A script (not pytest) that calls warm_run needs an `if __name__ == "__main__":` guard: multiprocessing imports
the parent's main module in each child.
"""

from __future__ import annotations

import atexit
import importlib
import json
import multiprocessing
import multiprocessing.forkserver
import os
import pkgutil
import runpy
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

ArgvKind = Literal["lmms_eval", "capjudge"]

# The module `python -m` runs for each kind.
MODULES: dict[str, str] = {"lmms_eval": "lmms_eval", "capjudge": "capjudge.tasks.cli"}

# Imported once in the server, before every module of capjudge's packages (see _preload_modules): these bring
# torch, transformers, accelerate, datasets and lmms_eval.tasks, whose imports are most of a launch's cost.
# warm_task_index: lmms-eval's index of its own task YAMLs, built once in the server (see that module).
# warm_late_imports: what every run imported only once it ran (see that module).
# warm_demo_frames: the demo clips' frames, which most runs judge, rendered once in the server (see that module).
PRELOAD = ("tests.support.warm_launch", "lmms_eval.__main__", "lmms_eval.cli.dispatch", "tests.support.warm_task_index",
           "tests.support.warm_late_imports", "tests.support.warm_demo_frames")
# Imported last: freezes what the server has built so far out of the garbage collector's reach (see it).
FREEZE = "tests.support.warm_gc_freeze"
CAPJUDGE_PACKAGES = ("capjudge.judges", "capjudge.metrics", "capjudge.tasks")

# Set in the server's environment (never the test process's own): its import-time reads must not reach the
# network or the user's Hugging Face cache. Children re-read these modules from their own environment. The
# judge model is a sentinel no child may see (tests/test_warm_launch.py renders a request without one).
SERVER_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
              "MODEL_VERSION": "warm-launch-server-only"}
REREAD_AT_START = ("huggingface_hub.constants", "datasets.config")
# The server's environment only: the folder it shares with the other servers of the test run (use_scratch).
SHARED_WITH_OTHER_SERVERS = "CAPJUDGE_TEST_WARM_SHARED"

_lock = threading.Lock()
_scratch: Path | None = None
_shared: Path | None = None
_base_sys_path: list[str] | None = None


def use_scratch(folder: Path, shared: Path | None = None) -> None:
    """Where the server's datasets cache and the children's output files go (the test session's temp dir);
    without a call, a new folder under the system temp dir. `shared`: a folder every server of this test run
    (one per xdist worker) may read, where the first writes what they would all build alike
    (tests/support/warm_task_index.py); without it each builds its own."""
    global _scratch, _shared
    _scratch = Path(folder)
    _shared = Path(shared) if shared is not None else None


def warm_run(argv_kind: ArgvKind, args: Sequence[str], *, env: Mapping[str, str], cwd: str | Path,
             timeout: float | None) -> subprocess.CompletedProcess[str]:
    """`python -m <module of argv_kind> ARGS` in a warm child; raises subprocess.TimeoutExpired (after
    killing it) as subprocess.run does."""
    process = warm_start(argv_kind, args, env=env, cwd=cwd)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise subprocess.TimeoutExpired(process.args, timeout, output=stdout, stderr=stderr) from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def warm_start(argv_kind: ArgvKind | Literal["code"], args: Sequence[str], *, env: Mapping[str, str],
               cwd: str | Path) -> WarmProcess:
    """Start `python -m <module of argv_kind> ARGS` (or `python -c ARGS[0] ARGS[1:]` for "code") in a warm child
    and return at once, for tests that watch or signal a running command (see WarmProcess)."""
    _ensure_server()
    if argv_kind == "code":
        command, target = [sys.executable, "-c", *args], None
    else:
        command, target = [sys.executable, "-m", MODULES[argv_kind], *args], MODULES[argv_kind]
    folder = Path(tempfile.mkdtemp(dir=_scratch))
    stdout_path, stderr_path = folder / "stdout", folder / "stderr"
    child = multiprocessing.get_context("forkserver").Process(
        target=_child_main,
        args=(target, list(args), dict(env), str(cwd), str(stdout_path), str(stderr_path), _base_sys_path),
        name=f"warm {target or '-c'}",
    )
    child.start()
    return WarmProcess(command, child, folder)


class WarmProcess:
    """A running warm child, as much of subprocess.Popen as the tests use: `pid`, `poll()`, `wait(timeout)`,
    `send_signal(signal)`, `kill()`, `returncode` (-N after death by signal N, as subprocess reports it) and
    `communicate(timeout)`, which gives its stdout and stderr as text once it has ended. The child is a
    process of the forkserver, not of the test: it is waited for through multiprocessing."""

    def __init__(self, args: list[str], child: multiprocessing.process.BaseProcess, folder: Path):
        self.args, self._child, self._folder = args, child, folder
        assert child.pid is not None
        self.pid: int = child.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._child.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._child.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signal_number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def kill(self) -> None:
        if self.poll() is None:
            self._child.kill()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Its stdout and stderr once it has ended; then its files and multiprocessing's handles are let go
        (a suite makes hundreds of warm runs per process)."""
        self.wait(timeout)
        stdout, stderr = _read(self._folder / "stdout"), _read(self._folder / "stderr")
        shutil.rmtree(self._folder, ignore_errors=True)
        self._child.close()
        return stdout, stderr


def _read(path: Path) -> str:
    """The file as subprocess.run(text=True) decodes a pipe: universal newlines."""
    data = path.read_bytes() if path.exists() else b""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _ensure_server() -> None:
    global _scratch, _base_sys_path
    with _lock:
        if _base_sys_path is not None:
            return
        if _scratch is None:
            _scratch = Path(tempfile.mkdtemp(prefix="warm-launch-"))
        _scratch.mkdir(parents=True, exist_ok=True)
        _base_sys_path = _interpreter_sys_path()
        multiprocessing.set_forkserver_preload(_preload_modules())
        # PYTHONPATH: the server imports PRELOAD with a new interpreter's sys.path (multiprocessing's forkserver
        # does not pass the parent's on to it), so the helpers in it (tests.support.*) need the checkout's root
        # named; the children set their own sys.path and environment (without it) before they run anything.
        server_env = {**SERVER_ENV, "HF_DATASETS_CACHE": str(_scratch / "server_hf_datasets"),
                      "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        if _shared is not None:
            server_env[SHARED_WITH_OTHER_SERVERS] = str(_shared)
        saved = {key: os.environ.get(key) for key in server_env}
        os.environ.update(server_env)  # the server inherits the environment at its start, only then
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _preload_modules() -> list[str]:
    """PRELOAD, then capjudge's modules (its commands import most of them inside their handlers), then FREEZE.
    Not the `__main__` modules, which would run; not the task folders' utils.py files, which are no package's
    modules (lmms-eval loads them from their paths). A module that fails to import is left to the child, which
    then fails as the real command would."""
    modules = list(PRELOAD)
    for package_name in CAPJUDGE_PACKAGES:
        package = importlib.import_module(package_name)
        modules += [found.name for found in pkgutil.walk_packages(package.__path__, f"{package_name}.", onerror=lambda name: None)
                    if not found.name.endswith(".__main__")]
    return [*modules, FREEZE]


def _interpreter_sys_path() -> list[str]:
    """sys.path of a new interpreter after its first entry (the script's folder) and without PYTHONPATH:
    the standard library, site-packages and the editable install's entries."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    probe = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                           env=env, capture_output=True, text=True, check=True)
    return json.loads(probe.stdout)


# ---------------------------------------------------------------------------------------------------------
# In the child
# ---------------------------------------------------------------------------------------------------------


def _child_main(module: str | None, args: list[str], env: dict[str, str], cwd: str, stdout_path: str, stderr_path: str,
                base_sys_path: list[str]) -> None:
    os.environ.clear()
    os.environ.update(env)
    time.tzset()  # the local time zone is read from TZ at start-up; a test may set TZ
    os.chdir(cwd)
    # `python -m` puts the working directory first, then PYTHONPATH, then the interpreter's own entries.
    sys.path[:] = [cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *base_sys_path]
    _redirect(0, os.devnull, os.O_RDONLY)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - fd 0 lives as long as the process
    # Whatever the server's imports left in sys.stdout's buffer is flushed into the child's file, as a real
    # process would print it after the same imports; never into the test process's stdout.
    _redirect(1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for name in REREAD_AT_START:  # after the redirection: their warnings belong to the child's stderr
        if name in sys.modules:
            importlib.reload(sys.modules[name])
    if module is None:  # `python -c CODE ARGS`
        sys.argv = ["-c", *args[1:]]
        status = _run_code_as_interpreter(args[0])
    else:
        sys.argv = ["-m", *args]  # as `python -m` has it until the module is found
        status = _run_as_interpreter(module)
    os._exit(_exit_like_interpreter(status))


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)


def _run_as_interpreter(module: str) -> int:
    """What `python -m module` does: run its __main__ as the module `__main__` (capjudge's run_outcome asks
    whether `__main__` is lmms-eval's)."""
    # run_module sets sys.argv[0] and sys.modules["__main__"]
    return _status_like_interpreter(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))


def _run_code_as_interpreter(code: str) -> int:
    """What `python -c CODE` does: run it as the module `__main__`."""
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    return _status_like_interpreter(lambda: exec(compile(code, "<string>", "exec"), main.__dict__))  # noqa: S102


def _status_like_interpreter(run: Callable[[], object]) -> int:
    """The exit status of `run` as the interpreter gives it for its main module: SystemExit's code is the
    status; an uncaught exception prints its traceback and exits 1; else 0."""
    try:
        run()
        return 0
    except SystemExit as exit_:
        return _status_of(exit_)
    except BaseException:  # noqa: BLE001 - the interpreter reports every uncaught exception the same way
        sys.excepthook(*sys.exc_info())
        return 1


def _status_of(exit_: SystemExit) -> int:
    code = exit_.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _exit_like_interpreter(status: int) -> int:
    """The interpreter's exit after the main module: join non-daemon threads, run atexit handlers (which may
    end the process themselves), flush stdout and stderr."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as the interpreter does when flushing stdout fails
    return status

"""The embedded local judge from the caller's side: `LocalJudgeServer` starts the serving process
(`capjudge.judges.local.llama_server`) in a subprocess, waits until it listens, health-checks it with one
completion, and reports a crash with its signal, log tail and what to try. `capjudge serve-local`
(capjudge.tasks.cli.serve_local) is the same thing as a command.

Why a subprocess, not a thread: uvicorn wants the main thread for its signal handlers, and a child process is
stopped cleanly with SIGTERM, gives its memory back, and reports a crash as an error instead of taking the
caller down. It also stops by itself when the process that started it dies (no orphaned servers). The child
binds its socket itself (port 0 allowed) and reports the real port in a ready file; the parent then waits
until /v1/models answers — no guessing a free port in the parent, so no race between them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.local.options import (
    DEFAULT_CONTEXT, LocalServerError, ServeOptions, check_local_extra, honesty_notice,
)

# ------------------------------------------------------------------------------------------------------------
# The parent side: a server in a subprocess


@dataclass(frozen=True)
class ServerInfo:
    """What the serving process reported once it was listening."""

    base_url: str
    port: int
    model: str
    model_path: str
    sees_images: bool
    pid: int


class LocalJudgeServer:
    """Run `serve-local` in a subprocess for the duration of a `with` block.

        with LocalJudgeServer() as server:
            client = JudgeClient(server.judge_config(cache_path=...))

    Entering returns once /v1/models answers; a server that dies or does not answer within
    `startup_timeout` seconds raises `LocalServerError` with the end of its log.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        port: int = 0,
        *,
        mmproj_path: str | os.PathLike[str] | None = None,
        chat_format: str | None = None,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
        alias: str | None = None,
        startup_timeout: float = 180.0,
        log_path: str | os.PathLike[str] | None = None,
    ):
        self.options = ServeOptions(
            model_path=Path(model_path) if model_path is not None else None,
            mmproj_path=Path(mmproj_path) if mmproj_path is not None else None,
            chat_format=chat_format,
            port=port,
            n_ctx=n_ctx,
            n_threads=n_threads,
            alias=alias,
        )
        self.options.validate()
        self.startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._info: ServerInfo | None = None

    # -- what callers use ---------------------------------------------------------------------------------

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise LocalServerError("the local judge server is not running (use it inside `with`)")
        return self._info

    @property
    def base_url(self) -> str:
        return self.info.base_url

    @property
    def model(self) -> str:
        return self.info.model

    @property
    def log_path(self) -> Path:
        if self._log_path is None:
            raise LocalServerError("the local judge server has not been started")
        return self._log_path

    def notice(self) -> str:
        return honesty_notice(self.options, self.base_url, self.model)

    def judge_config(self, **overrides: Any) -> JudgeConfig:
        """A JudgeConfig for this server. The server answers one request at a time, so one in flight
        (more would only queue there and hit client timeouts), and a timeout sized for a 2-core CPU."""
        settings: dict[str, Any] = {
            "base_url": self.base_url, "model": self.model, "max_concurrency": 1, "timeout": 300.0,
        }
        settings.update(overrides)
        return JudgeConfig(**settings)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> LocalJudgeServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._process is not None:
            raise LocalServerError("the local judge server is already running")
        check_local_extra()
        self._workdir = tempfile.TemporaryDirectory(prefix="capjudge-local-judge-")
        ready_file = Path(self._workdir.name) / "ready.json"
        if self._log_path is None:
            self._log_path = Path(self._workdir.name) / "server.log"
        command = [
            sys.executable, "-u", "-m", "capjudge.judges.local.llama_server",
            *self.options.to_args(), "--ready-file", str(ready_file), "--quiet", "--parent-pid", str(os.getpid()),
        ]
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._info = self._wait_until_ready(ready_file)
        except BaseException:
            self.stop()
            raise

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), then SIGKILL if it has not exited after `grace` seconds."""
        process, self._process, self._info = self._process, None, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._workdir is not None:
            if self._log_path is not None and self._log_path.parent == Path(self._workdir.name):
                self._log_path = None  # it goes with the directory
            self._workdir.cleanup()
            self._workdir = None

    def _wait_until_ready(self, ready_file: Path) -> ServerInfo:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        info: ServerInfo | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalServerError(
                    f"the local judge server exited with code {self._process.returncode} before it was ready:\n"
                    f"{self._log_tail()}"
                )
            if info is None and ready_file.exists():
                info = ServerInfo(**json.loads(ready_file.read_text(encoding="utf-8")))
            if info is not None and _answers_models(info.base_url):
                self._health_check(info)
                return info
            time.sleep(0.2)
        raise LocalServerError(
            f"the local judge server did not answer /v1/models within {self.startup_timeout:.0f} s:\n{self._log_tail()}"
        )

    def _health_check(self, info: ServerInfo) -> None:
        """One tiny completion before any item is judged. Listing models proves only that the weights loaded;
        a llama.cpp build that cannot run on this CPU (SIGILL, or SIGSEGV in llama_decode) dies on the first
        decode, and it should do so here, not half-way through a run as a stream of failed items."""
        body = json.dumps({
            "model": info.model, "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}],
        }).encode("utf-8")
        request = urllib.request.Request(
            f"{info.base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout) as response:
                reply = json.loads(response.read().decode("utf-8"))
            if not reply.get("choices"):
                raise ValueError(f"no choices in {str(reply)[:200]}")
        except (urllib.error.URLError, OSError, ValueError) as error:
            assert self._process is not None
            try:
                self._process.wait(timeout=2)  # a crash closes the connection a moment before the exit is seen
            except subprocess.TimeoutExpired:
                pass
            died = self.death_report()
            if died is not None:
                raise LocalServerError(f"{died}\n(during the start-up check: one 2-token completion)") from None
            raise LocalServerError(
                f"the local judge server answers /v1/models but failed a 2-token completion: {error}\n{self._log_tail()}"
            ) from None

    def death_report(self) -> str | None:
        """None while the server runs; once it has exited (crash, signal, OOM kill), one message that names the
        cause, shows the end of its log and says what to try. Callers poll this to stop a run at once."""
        process = self._process
        if process is None or process.poll() is None:
            return None
        return (
            f"the local judge server (pid {process.pid}) {describe_exit(process.returncode)}.\n"
            f"Last lines of its log ({self._log_path}):\n{self._log_tail(15)}\n{_what_to_try(process.returncode)}"
        )

    def wait(self) -> int:
        """Block until the server process exits; its return code (negative: the signal that ended it)."""
        if self._process is None:
            raise LocalServerError("the local judge server is not running")
        return self._process.wait()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = Path(self.log_path).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            return f"(no server log: {error})"
        return "\n".join(text.splitlines()[-lines:]) or "(the server wrote nothing)"


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {returncode})"
    return f"exited with code {returncode}"


def _what_to_try(returncode: int) -> str:
    advice = {
        -signal.SIGSEGV: "A crash inside llama.cpp usually means llama-cpp-python was built for another CPU "
        "(a -march=native build copied or cached from another machine). Rebuild it portably: `make clean setup`.",
        -signal.SIGILL: "An illegal instruction: llama-cpp-python was built for a CPU with instructions this one "
        "lacks. Rebuild it portably: `make clean setup` (or set LLAMA_CMAKE_ARGS for your CPU).",
        -signal.SIGKILL: "Killed from outside: often the kernel's out-of-memory killer (see `dmesg`); close other "
        "programs or use a smaller --n-ctx.",
    }.get(returncode, "See the log above.")
    return (
        f"What to try: {advice} Every judge reply received so far is in the reply cache: running the same "
        "command again judges only what is missing."
    )


def _answers_models(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False

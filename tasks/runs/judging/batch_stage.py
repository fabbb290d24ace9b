"""`capjudge judge --batch`: the judging stage through the OpenAI Batch API (half the price, up to 24 h).

Rounds, each the same three steps, until nothing is left to ask:

1. finish what is open: every batch recorded in the state file and not yet downloaded is polled until it ends
   (completed, failed, expired, cancelled), its output lines go into the reply cache under the request's
   cache key, its failed lines are counted;
2. collect: every item is judged with a `BatchRecorder` as its client (capjudge.judges.client.batch): what the cache
   answers is parsed as online; the first sample index without a reply is written to this round's input files
   (split at the API's per-file limits, streamed to disk);
3. submit: each input file is uploaded and a batch created, each step recorded in the state file first.

So a reply that does not parse is re-asked (next sample index) in the next round's batch, or online with
`--retry-online`; a line that failed (a per-line error, an expired or cancelled batch) is submitted again, up
to `MAX_LINE_FAILURES` times, then reported unjudged with the API's error. A batch that ends `failed` (a
validation error, or the organisation's enqueued-token limit, the most common and a transient cause) stops
the stage with its errors, and is recorded as ended: the same command run again, once the cause is gone,
submits what it left unjudged in a new batch (its lines are not counted as line failures: nothing of it was
tried). Nothing is ever submitted twice: a request whose reply is cached is never
written, and an open batch is always finished before collecting. Running the same command again after a
kill, a reboot or the next day re-attaches to the batches in the state file — and to a batch created just
before a kill, before the state file could name it (found by its `capjudge_input` metadata).

The state file lives in the output folder and names the run it belongs to (task, captions, judge model and
endpoint): another run's state file is an error, not a silent mix. A panel of judges (CAPJUDGE_PANEL) has one
state file, and its own batches, per member (`<out>/batch/<member>/`), sent through that member's endpoint and
key: each member's batches resume on their own, and one collect pass per round writes every member's requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.judges.atomic_files import write_replacing
from capjudge.judges.client.batch import (
    BatchApi,
    BatchInputWriter,
    BatchLimits,
    BatchLineTooLarge,
    BatchRecorder,
    BatchStatus,
    LineRef,
)

STATE_FILE = "batch_state.json"
MAX_LINE_FAILURES = 3
MAX_ROUNDS = 12  # more than any judge's max_tries, with room for resubmitted lines


class BatchStageError(ValueError):
    """The batch stage cannot go on; the message names the batch, the file or the state."""


@dataclass(frozen=True)
class BatchOptions:
    wait: bool = True
    poll_seconds: float = 60.0
    retry_online: bool = False
    limits: BatchLimits = BatchLimits()


@dataclass(frozen=True)
class BatchSummary:
    submitted: int  # batches created by this invocation
    lines_submitted: int
    open_batches: int  # still running (only without waiting)
    # member name -> custom_id -> the API's last error, for the lines given up (see capjudge.tasks.harness.who_judges)
    given_up: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class BatchState:
    """The state file: which run it belongs to, every input file uploaded and batch created, and the lines
    that failed. Written atomically after every change, so a kill at any point leaves a usable file."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data

    @classmethod
    def open(cls, path: Path, run: Mapping[str, str]) -> BatchState:
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as error:
                raise BatchStageError(f"{path}: unreadable batch state ({error}); move it away to start over") from None
            if data.get("run") != dict(run):
                raise BatchStageError(
                    f"{path}: this batch state belongs to another run ({data.get('run')}), not to {dict(run)}; "
                    "use another --out folder, or move the file away to start over"
                )
            return cls(path, data)
        return cls(path, {"run": dict(run), "round": 0, "batches": [], "line_failures": {}})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Owner-only: the batch and file ids in it reach the judged captions with the user's key.
        write_replacing(self.path, json.dumps(self.data, indent=1), private=True)

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.data["batches"]

    def open_entries(self) -> list[dict[str, Any]]:
        return [entry for entry in self.batches if not entry.get("downloaded")]

    def fail_line(self, custom_id: str, error: str) -> None:
        count, _ = self.data["line_failures"].get(custom_id, (0, ""))
        self.data["line_failures"][custom_id] = [count + 1, error]

    def given_up(self) -> dict[str, str]:
        return {
            custom_id: f"the Batch API failed this request {count} times; last: {error}"
            for custom_id, (count, error) in self.data["line_failures"].items()
            if count >= MAX_LINE_FAILURES
        }


@dataclass
class _MemberBatches:
    """One member's share of the stage: its client (the reply cache the batches fill), its Batch API and state."""

    client: Any
    api: BatchApi
    state: BatchState


# What a collect pass is given: recorder_for(member, line_id) is the client through which the member asks the
# request `line_id` names (the item id in the judging stage; item and order in the arena): unique in the run,
# the same in every run of the same command, since a batch line's custom_id is made from it.
RecorderFor = Callable[[Any, str], BatchRecorder]
# collect(recorder_for, description): judge everything once through those clients (a judging stage's items, an
# arena's orders); what it returns is not used.
Collect = Callable[[RecorderFor, str], Any]


def items_collect(task: Any, items: Sequence[tuple[Mapping[str, Any], str]]) -> tuple[Collect, dict[str, str]]:
    """The judging stage's collect pass (every (doc, caption) item by every member, its line id the item id)
    and the run its state files name."""
    return (lambda recorder_for, description: task.judge_all(
        items, client_for=lambda member, doc: recorder_for(member, str(doc["id"])), description=description),
        {"task": task.config.task, "items": str(len(items))})


def run_batches(
    task: Any,
    folder: Path,
    options: BatchOptions,
    *,
    collect: Collect,
    run: Mapping[str, str],
    say: Callable[[str], None] = print,
    command: str = "capjudge judge --batch",
) -> BatchSummary:
    """Fill the reply cache of every member of the task's judges, for what `collect` asks, through the Batch API
    (see the module docstring). `run` names the run in each member's state file, beside the member's model and
    endpoint; `command` starts each printed line."""
    from capjudge.judges.client.registry import shared_client

    def tell(line: str) -> None:
        say(f"{command}: {line}")

    who = task.who_judges()
    by_member: dict[str, _MemberBatches] = {}
    for member in who.members:
        client = shared_client(member.config)
        if not client.has_cache:
            raise BatchStageError("--batch needs the reply cache (unset CAPJUDGE_NO_CACHE): batch replies are read from it")
        # Error texts from the API go into the state file and onto the screen: redacted as the online path does.
        api = BatchApi(client.sdk, endpoint=client.backend.batch_endpoint, redact=client.redact)
        state = BatchState.open(who.batch_folder(folder, member) / STATE_FILE, {
            **run, "model": str(member.identity["model"]), "endpoint": str(member.identity["endpoint"]),
        })
        by_member[member.name] = _MemberBatches(client, api, state)
    submitted = lines = 0
    for _ in range(MAX_ROUNDS):
        still_open = sum(_finish_open(m.state, m.api, m.client, options, tell) for m in by_member.values())
        if still_open:
            return BatchSummary(submitted, lines, still_open, _given_up(by_member))
        if options.retry_online and submitted:
            break  # what is left (re-asks, failed lines) is asked online by the final pass
        writers = {name: BatchInputWriter(m.state.path.parent, f"input_round{m.state.data['round']}", m.api.endpoint,
                                          options.limits) for name, m in by_member.items()}
        given_up = _given_up(by_member)
        try:
            collect(lambda member, line_id: BatchRecorder(
                by_member[member.name].client, writers[member.name], line_id, given_up[member.name]),
                f"capjudge: collecting batch requests for {task.config.task}")
        except BatchLineTooLarge as error:  # nothing of this round is uploaded: its files are written again
            raise BatchStageError(f"{error}: give --batch-max-bytes at least that (the API's own limit is "
                                  f"{BatchLimits().max_bytes:,} bytes); nothing was submitted") from None
        files = {name: writer.close() for name, writer in writers.items()}
        if not any(files.values()):
            break
        for name, member_files in files.items():
            if not member_files:
                continue
            state = by_member[name].state
            for path, refs in member_files:
                _submit(state, by_member[name].api, path, refs, tell)
                submitted += 1
                lines += len(refs)
            state.data["round"] += 1
            state.save()
    return BatchSummary(submitted, lines, 0, _given_up(by_member))


def _given_up(by_member: Mapping[str, _MemberBatches]) -> dict[str, dict[str, str]]:
    return {name: m.state.given_up() for name, m in by_member.items()}


def _submit(state: BatchState, api: BatchApi, path: Path, refs: list[LineRef], say: Callable[[str], None]) -> None:
    refs_path = path.with_suffix(".refs.json")
    write_replacing(refs_path, json.dumps({ref.custom_id: [ref.key, ref.judge_version] for ref in refs}))
    entry: dict[str, Any] = {"input": path.name, "refs": refs_path.name, "lines": len(refs), "bytes": path.stat().st_size}
    state.batches.append(entry)
    state.save()
    entry["file_id"] = api.upload(path)
    state.save()
    _create(entry, api)
    state.save()
    say(f"submitted {entry['batch_id']} ({len(refs)} requests, {entry['bytes'] / 1e6:.1f} MB)")


def _create(entry: dict[str, Any], api: BatchApi) -> None:
    # A kill between creating the batch and saving its id leaves a batch the state does not name: find it by
    # the input file it was made from before creating another.
    found = api.find("capjudge_input", entry["file_id"])
    status = found or api.create(entry["file_id"], {"capjudge_input": entry["file_id"]})
    entry["batch_id"] = status.id
    entry["status"] = status.status


def _finish_open(state: BatchState, api: BatchApi, client: Any, options: BatchOptions, say: Callable[[str], None]) -> int:
    """Poll every open batch until it ends (or once each, without waiting); download what ended. Returns how
    many are still running."""
    entries = state.open_entries()
    for entry in entries:
        if "file_id" not in entry:  # killed before the upload finished: upload again
            entry["file_id"] = api.upload(state.path.parent / entry["input"])
            state.save()
        if "batch_id" not in entry:
            _create(entry, api)
            state.save()
    running = list(entries)
    last_seen: dict[str, str] = {}
    while running:
        for entry in list(running):
            status = api.retrieve(entry["batch_id"])
            if last_seen.get(entry["batch_id"]) != status.describe():
                say(status.describe())
                last_seen[entry["batch_id"]] = status.describe()
            entry["status"] = status.status
            if status.terminal:
                _download(state, entry, status, api, client, say)
                running.remove(entry)
            state.save()
        if running and not options.wait:
            return len(running)
        if running:
            time.sleep(options.poll_seconds)
    return 0


def _download(state: BatchState, entry: dict[str, Any], status: BatchStatus, api: BatchApi, client: Any,
              say: Callable[[str], None]) -> None:
    refs = json.loads((state.path.parent / entry["refs"]).read_text(encoding="utf-8"))
    answered: set[str] = set()
    stored = failed = 0
    for file_id in (status.output_file_id, status.error_file_id):
        if not file_id:
            continue
        for line in api.lines(file_id):
            ref = refs.get(line.custom_id)
            if ref is None:
                raise BatchStageError(f"batch {status.id}: output line {line.custom_id!r} was not in its input {entry['input']}")
            answered.add(line.custom_id)
            if line.reply is not None:
                client.store_reply(ref[0], ref[1], line.reply)
                stored += 1
            else:
                state.fail_line(line.custom_id, f"batch {status.id}: {line.error}")
                failed += 1
    if status.status == "failed":
        # Ended: a rerun does not re-report it but collects again, and what it left unanswered (every line
        # no other batch answered, since the collect pass writes only requests without a cached reply) goes
        # into a new batch.
        entry["downloaded"] = True
        entry["replies"], entry["failed_lines"], entry["errors"] = stored, failed, list(status.errors)
        state.save()
        raise BatchStageError(
            f"batch {status.id} failed: {'; '.join(status.errors) or 'no reason given'} (input {entry['input']}); "
            f"{'nothing' if not stored else f'only {stored} replies'} of it judged. Fix the cause (or wait, for "
            "an enqueued-token limit) and run the same command again: what it left unjudged is submitted again"
        )
    unanswered = [custom_id for custom_id in refs if custom_id not in answered]
    for custom_id in unanswered:  # an expired or cancelled batch leaves lines in no file: submitted again
        state.fail_line(custom_id, f"batch {status.id} ended {status.status} before answering it")
    entry["downloaded"] = True
    entry["replies"], entry["failed_lines"], entry["unanswered"] = stored, failed, len(unanswered)
    say(f"{status.id} {status.status}: {stored} replies cached, {failed} lines failed"
        + (f", {len(unanswered)} not answered (submitted again)" if unanswered else ""))


def cache_only_recorders(summary: BatchSummary) -> RecorderFor:
    """The final pass's clients (`recorder_for(member, line_id)`): every reply from the member's cache, nothing
    asked online; a line the Batch API failed too often comes back as `request_failed` with its error."""
    from capjudge.judges.client.registry import shared_client

    return lambda member, line_id: BatchRecorder(shared_client(member.config), None, line_id,
                                                 summary.given_up.get(member.name, {}))


def cache_only_clients(summary: BatchSummary) -> Callable[[Any, Mapping[str, Any]], BatchRecorder]:
    """The judging stage's final pass: `client_for(member, doc)`, the item id as the line id."""
    recorder_for = cache_only_recorders(summary)
    return lambda member, doc: recorder_for(member, str(doc["id"]))

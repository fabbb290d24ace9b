"""The OpenAI Files and Batches endpoints for the test server (`openai_server.py`), with scripted lifecycles.

Real HTTP through the real SDK: `files.create` (multipart upload, purpose "batch"), `files.content`,
`batches.create / retrieve / list / cancel`. A batch moves one status per retrieve (validating ->
in_progress -> finalizing -> completed), so a client must poll; each line is answered by the server's own
responder (the same replies a chat.completions request would get), and counted in `lines_answered`, never in
the server's online request log.

With `echo_key` set, every scripted error (failed lines, a failed batch) quotes the bearer key the batch was
created with, as some gateways do.

What happens to the next batches created is scripted (`script(...)`, default "success"):
- "success": every line answered;
- "partial_errors": every third line fails with a 500 in the error file, the rest answered;
- "expire": the window runs out with half the lines done (outputs for those only, the rest in no file);
- "fail_validation": status failed with a validation error, no line answered;
- "fail_token_limit": status failed as OpenAI fails a batch over the organisation's enqueued-token limit
  (transient: the same input succeeds once earlier batches finish), no line answered;
- "slow_finalize": like success, but it stays "finalizing" for three more polls;
- "hold": stays "in_progress" until `release()` (for cancel and kill -9 tests).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Callable

SCRIPTS = ("success", "partial_errors", "expire", "fail_validation", "fail_token_limit", "slow_finalize", "hold")
FAILURES = {  # a failed batch's scripted error: (code, message)
    "fail_validation": ("invalid_request", "scripted validation failure"),
    "fail_token_limit": ("token_limit_exceeded", ("Enqueued token limit reached for test-judge in organization "
                         "org-capjudge-tests. Limit: 90,000 enqueued tokens. Please try again once some in_progress "
                         "batches have been completed.")),
}


class BatchService:
    def __init__(self, answer_line: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]):
        # answer_line(body) -> (status code, response body): the server's answer to one chat.completions body
        self._answer_line = answer_line
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.scripts: deque[str] = deque()
        self.lines_answered = 0
        self.created = 0
        self.uploads = 0
        self.echo_key = False
        self._ids = itertools.count(1)
        self._held = threading.Event()
        self._lock = threading.Lock()

    # -- control -----------------------------------------------------------------------------------
    def script(self, *names: str) -> None:
        for name in names:
            if name not in SCRIPTS:
                raise ValueError(f"unknown batch script {name!r}")
        self.scripts.extend(names)

    def release(self) -> None:
        self._held.set()

    def reset(self) -> None:
        with self._lock:
            self.files.clear()
            self.batches.clear()
            self.scripts.clear()
            self.lines_answered = self.created = self.uploads = 0
            self.echo_key = False
            self._held.clear()

    # -- routing -----------------------------------------------------------------------------------
    def handles(self, path: str) -> bool:
        path = path.split("?", 1)[0]
        return "/files" in path or "/batches" in path

    def get(self, path: str) -> tuple[int, Any]:
        path = path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        if parts[-1] == "content" and parts[-3] == "files":
            record = self.files.get(parts[-2])
            return (200, record["data"]) if record else (404, _error("no such file"))
        if parts[-2] == "files":
            record = self.files.get(parts[-1])
            return (200, _file_object(parts[-1], record)) if record else (404, _error("no such file"))
        if parts[-1] == "batches":
            with self._lock:
                data = [self._batch_object(batch) for batch in sorted(self.batches.values(), key=lambda b: -b["created_at"])]
            return 200, {"object": "list", "data": data, "has_more": False,
                         "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}
        if parts[-2] == "batches":
            batch = self.batches.get(parts[-1])
            if batch is None:
                return 404, _error("no such batch")
            self._advance(batch)
            return 200, self._batch_object(batch)
        return 404, _error("not found")

    def post(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        path = path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        if parts[-1] == "files":
            return self._upload(headers, raw)
        if parts[-1] == "batches":
            return self._create(json.loads(raw), headers.get("authorization", "").removeprefix("Bearer "))
        if parts[-1] == "cancel" and parts[-3] == "batches":
            batch = self.batches.get(parts[-2])
            if batch is None:
                return 404, _error("no such batch")
            with self._lock:
                if batch["status"] not in ("completed", "failed", "expired", "cancelled"):
                    batch["status"] = "cancelling"
            return 200, self._batch_object(batch)
        return 404, _error("not found")

    # -- files -------------------------------------------------------------------------------------
    def _upload(self, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        message = BytesParser(policy=HTTP).parsebytes(
            f"content-type: {headers.get('content-type', '')}\r\n\r\n".encode() + raw
        )
        fields: dict[str, Any] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[name] = part.get_payload(decode=True)
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return 400, _error("expected a file with purpose 'batch'")
        data = fields["file"]
        for number, line in enumerate(data.splitlines(), 1):
            try:
                request = json.loads(line)
                assert {"custom_id", "method", "url", "body"} <= set(request)
            except Exception:
                return 400, _error(f"line {number} is not a batch request line")
        file_id = f"file-{next(self._ids)}"
        with self._lock:
            self.files[file_id] = {"data": data, "purpose": "batch", "created_at": int(time.time())}
            self.uploads += 1
        return 200, _file_object(file_id, self.files[file_id])

    # -- batches -----------------------------------------------------------------------------------
    def _create(self, request: dict[str, Any], key: str = "") -> tuple[int, Any]:
        source = self.files.get(request.get("input_file_id", ""))
        if source is None:
            return 400, _error("input_file_id does not exist")
        if request.get("completion_window") != "24h":
            return 400, _error("completion_window must be 24h")
        lines = [json.loads(line) for line in source["data"].splitlines() if line.strip()]
        ids = [line["custom_id"] for line in lines]
        if len(set(ids)) != len(ids):
            return 400, _error("custom_id values must be unique within a batch")
        with self._lock:
            script = self.scripts.popleft() if self.scripts else "success"
            batch_id = f"batch_{next(self._ids)}"
            self.batches[batch_id] = {
                "id": batch_id, "status": "validating", "script": script, "input_file_id": request["input_file_id"],
                "endpoint": request.get("endpoint"), "metadata": request.get("metadata") or {}, "lines": lines,
                "created_at": time.time(), "polls": 0, "finalize_polls": 0, "done": 0, "failed": 0,
                "output_file_id": None, "error_file_id": None, "errors": None, "key": key,
            }
            self.created += 1
        return 200, self._batch_object(self.batches[batch_id])

    def _advance(self, batch: dict[str, Any]) -> None:
        """One step of the scripted lifecycle per retrieve."""
        with self._lock:
            batch["polls"] += 1
            status, script = batch["status"], batch["script"]
            if status == "validating":
                if script in FAILURES:
                    code, message = FAILURES[script]
                    batch["status"] = "failed"
                    batch["errors"] = {"object": "list", "data": [
                        {"code": code, "message": message + self._key_note(batch), "param": None,
                         "line": 1 if script == "fail_validation" else None}]}
                else:
                    batch["status"] = "in_progress"
            elif status == "in_progress":
                if script == "hold" and not self._held.is_set():
                    return
                if script == "expire":
                    self._answer(batch, batch["lines"][: len(batch["lines"]) // 2])
                    batch["status"] = "expired"
                else:
                    batch["status"] = "finalizing"
            elif status == "finalizing":
                if script == "slow_finalize" and batch["finalize_polls"] < 3:
                    batch["finalize_polls"] += 1
                    return
                self._answer(batch, batch["lines"])
                batch["status"] = "completed"
            elif status == "cancelling":
                self._answer(batch, [])
                batch["status"] = "cancelled"

    def _answer(self, batch: dict[str, Any], lines: list[dict[str, Any]]) -> None:
        outputs, errors = [], []
        for number, line in enumerate(lines):
            self.lines_answered += 1
            if batch["script"] == "partial_errors" and number % 3 == 2:
                errors.append({"id": f"req_{number}", "custom_id": line["custom_id"],
                               "response": {"status_code": 500, "request_id": f"req_{number}",
                                            "body": {"error": {"message": "scripted line failure" + self._key_note(batch),
                                                               "type": "server_error"}}},
                               "error": None})
                continue
            status, body = self._answer_line(line["body"])
            target = outputs if status == 200 else errors
            target.append({"id": f"req_{number}", "custom_id": line["custom_id"],
                           "response": {"status_code": status, "request_id": f"req_{number}", "body": body}, "error": None})
        batch["done"], batch["failed"] = len(outputs), len(errors)
        for kind, rows in (("output_file_id", outputs), ("error_file_id", errors)):
            if rows:
                file_id = f"file-{next(self._ids)}"
                data = "".join(json.dumps(row) + "\n" for row in rows).encode()
                self.files[file_id] = {"data": data, "purpose": "batch_output", "created_at": int(time.time())}
                batch[kind] = file_id

    def _key_note(self, batch: dict[str, Any]) -> str:
        return f" (request authorised with key {batch['key']})" if self.echo_key else ""

    def _batch_object(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": batch["id"], "object": "batch", "endpoint": batch["endpoint"], "errors": batch["errors"],
            "input_file_id": batch["input_file_id"], "completion_window": "24h", "status": batch["status"],
            "output_file_id": batch["output_file_id"], "error_file_id": batch["error_file_id"],
            "created_at": int(batch["created_at"]), "metadata": batch["metadata"],
            "request_counts": {"total": len(batch["lines"]), "completed": batch["done"], "failed": batch["failed"]},
        }


def _file_object(file_id: str, record: dict[str, Any]) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": len(record["data"]), "created_at": record["created_at"],
            "filename": f"{file_id}.jsonl", "purpose": record["purpose"], "status": "processed"}


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}

"""An OpenAI-compatible chat-completions server for tests, on 127.0.0.1 (port 0 = any free port).

Real HTTP, real JSON: the client under test talks to it through the `openai` SDK exactly as it would talk to
OpenAI or vLLM. What the server answers is decided per request by a *responder*: a function from the request
body to a `Reply` (content + optional logprobs) or a `Fault` (429 with Retry-After, 500, a hang past the
client's timeout, a truncated body, a reset connection, empty choices, null content, a refusal). A queue of
scripted answers can be pushed in front of the responder. Every request is logged (body, arrival time, what
was answered) and the number of requests in flight is tracked, so tests can assert on all of it.

Run standalone (for lmms-eval subprocesses and benchmarks):
    python -m tests.support.openai_server --port 0 --latency 0.2 --responder rubric
It prints `READY <base_url>` on stdout once listening.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from tests.support.batch_service import BatchService


@dataclass(frozen=True)
class Reply:
    content: str | None
    # Per generated token: (token, [(alternative, logprob), ...]); the token's own logprob is the first
    # alternative whose text equals the token, else 0.0.
    logprobs: list[tuple[str, list[tuple[str, float]]]] | None = None
    finish_reason: str = "stop"
    refusal: str | None = None


@dataclass(frozen=True)
class Fault:
    kind: str  # "429", "500", "503", "400", "hang", "truncated", "truncated_json", "reset", "empty_choices", "not_json"
    retry_after: float | None = None
    hang_seconds: float = 30.0
    headers: tuple[tuple[str, str], ...] = ()  # (name, value) sent with a 429/500/503/400 (e.g. x-ratelimit-*)
    message: str | None = None  # the error's message (default "injected <kind>")


Answer = Reply | Fault
Responder = Callable[[dict[str, Any]], Answer]


@dataclass
class LoggedRequest:
    body: dict[str, Any]
    arrived: float
    answer: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""
    replied: float | None = None  # when the handler finished answering (benchmarks split the round trip)
    peer: tuple[str, int] | None = None  # the client's address: one per connection
    client_pid: int | None = None  # the process that opened the connection (server.identify_clients only)

    @property
    def prompt_text(self) -> str:
        parts = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            else:
                parts.extend(p.get("text", "") for p in content if p.get("type") == "text")
        return "\n".join(parts)


def prompt_text(body: dict[str, Any]) -> str:
    return LoggedRequest(body, 0.0).prompt_text


def prompt_tokens_of(body: dict[str, Any]) -> int:
    """The prompt tokens this server reports (and counts against its TPM limit) by default: one per word."""
    return len(prompt_text(body).split())


def openai_prompt_tokens_of(body: dict[str, Any]) -> int:
    """The prompt tokens as OpenAI documents its charging (the `--charge openai` mode): about 4 characters a
    token for text, and per image 85 tokens plus 170 per 512-pixel tile after fitting within 2048 x 2048 and
    scaling the shorter side to at most 768 ("low" detail: 85). Written here from the documentation, apart from
    capjudge's own estimate, so a benchmark measures the client against the API's rule, not against itself."""
    import base64
    import io
    import math

    from PIL import Image

    characters, tokens = 0, 0
    for message in body.get("messages", []):
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
        for part in parts:
            if part.get("type") == "text":
                characters += len(part.get("text", ""))
            elif part.get("type") == "image_url":
                image_url = part.get("image_url") or {}
                if image_url.get("detail") == "low":
                    tokens += 85
                    continue
                data = base64.b64decode(image_url.get("url", "").split(",", 1)[-1])
                width, height = Image.open(io.BytesIO(data)).size
                fit = min(1.0, 2048 / max(width, height))
                width, height = width * fit, height * fit
                shorter = min(1.0, 768 / min(width, height))
                width, height = width * shorter, height * shorter
                tokens += 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)
    return tokens + round(characters / 4)


def limiter_charge_of(body: dict[str, Any], token_charge: str = "words", charge_scale: float = 1.0,
                      default_reply_charge: int = 0) -> int:
    """What the server's rate limiter charges a judgment at admission: the prompt by `token_charge`, and the
    reply's `max_tokens`, reserved whatever the reply's length (as OpenAI counts), else `default_reply_charge`;
    times `charge_scale`."""
    prompt = openai_prompt_tokens_of(body) if token_charge == "openai" else prompt_tokens_of(body)
    reply = int(body.get("max_tokens") or body.get("max_completion_tokens") or default_reply_charge)
    return round(charge_scale * (prompt + reply))


def tokens_of(text: str) -> list[str]:
    """Split a reply into tokens the way GPT-4o-class tokenizers roughly do: numbers stay whole."""
    return re.findall(r"[^\W\d_]+|\d+|\s+|[^\w\s]|_", text)


def with_logprobs(content: str, alternatives: dict[int, list[tuple[str, float]]] | None = None) -> Reply:
    """A reply whose every token has logprob 0 (probability 1) unless `alternatives` overrides a token
    index with its own top list."""
    alternatives = alternatives or {}
    tokens = tokens_of(content)
    return Reply(content, [(tok, alternatives.get(i, [(tok, 0.0)])) for i, tok in enumerate(tokens)])


def pid_of_connection(client_port: int, server_port: int, attempts: int = 20) -> int | None:
    """The local process holding the client end of a loopback TCP connection (Linux /proc), or None.

    Called while the server handles a request on that connection, so the client end is certainly open (its
    owner waits for the reply). What can still race is the scan itself: a busy client opens and closes other
    files and sockets while its fd table is read, and one of them vanishing between listdir and readlink must
    not hide the whole process (it once did: one run in five counted requests for no process). A process that
    forked after opening the socket shares it; the lowest pid, the opener, is the one named."""
    import os
    import time

    for attempt in range(attempts):
        inode = _client_socket_inode(client_port, server_port)
        if inode is not None:
            target = f"socket:[{inode}]"
            for pid in sorted(map(int, filter(str.isdigit, os.listdir("/proc")))):
                try:
                    fds = os.listdir(f"/proc/{pid}/fd")
                except OSError:  # a process that ended, or one we may not look into
                    continue
                for fd in fds:
                    try:
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                            return pid
                    except OSError:  # that fd closed while we looked: the others still count
                        continue
        time.sleep(0.01 * (attempt + 1))
    return None


def _client_socket_inode(client_port: int, server_port: int) -> str | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port, remote_port = int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
            if local_port == client_port and remote_port == server_port and fields[9] != "0":
                return fields[9]
    return None


def _stable_fraction(text: str) -> float:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def rubric_responder(body: dict[str, Any]) -> Reply:
    """A deterministic stand-in judge for both rubrics.

    It reads the caption out of the prompt and scores it by a simple, visible rule so that better caption sets
    score higher: longer, more specific captions get more points, and a caption containing "wrong" gets few.
    G-VEval prompts get the four marker statements with logprobs; AnyCap prompts get the JSON object.
    """
    text = prompt_text(body)
    if "Generated Caption:" in text:
        caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
        base = min(95, 40 + 3 * len(caption.split()))
        if "wrong" in caption.lower():
            base = 10
        jitter = int(_stable_fraction(caption) * 6)
        scores = [base - jitter, base - 2 * jitter // 3, base, base - jitter // 2]
        scores = [max(0, min(100, s)) for s in scores]
        content = (
            "The caption is compared with the frames. "
            f"The Accuracy score is α{scores[0]}α.\n"
            f"The Completeness score is β{scores[1]}β.\n"
            f"The Conciseness score is ψ{scores[2]}ψ.\n"
            f"The Relevance score is δ{scores[3]}δ."
        )
        return with_logprobs(content)
    if "Model Output:" in text:
        output = text.split("Model Output:", 1)[1].split("Reference:", 1)[0].strip()
        score = 1 if "wrong" in output.lower() else min(4, 1 + len(output.split()) // 8)
        content = json.dumps({"score": score, "reason": f"test judge: {len(output.split())} words"})
        return Reply(content)
    return Reply("I am a test server and did not recognise this prompt.")


# Three scripted judges with known, different biases (a panel's test: tests/judges/client/test_judge_panel.py). Each sees the
# same caption quality as the rubric responder, then adds its bias and its own noise (a stable hash of the
# caption and the model: the same request always gets the same reply, so a rerun from the cache is exact).
# A caption with the word "wrong" is poor for every member, but "long" still adds its length bias: a model
# of long "wrong" captions is ranked above one of short correct captions by "long" and below it by the others
# (the order flip tests/metrics/leaderboard/test_leaderboard_panel.py looks for).
PANEL_MODELS = ("harsh", "lenient", "long")
PANEL_NOISE = 3  # G-VEval points either way
_WRONG = re.compile(r"\bwrong\b", re.IGNORECASE)


def panel_scores(model: str, caption: str) -> list[int] | None:
    """The G-VEval scores (accuracy, completeness, conciseness, relevance) judge `model` gives `caption`."""
    words = len(caption.split())
    # With the biases and noise below, never clipped at 0 or 100 unless the caption is "wrong".
    quality = 10 if _WRONG.search(caption) else min(70, 20 + 2 * words)
    bias = {"harsh": -20, "lenient": 10, "long": 2 * (words - 12)}.get(model)
    if bias is None:
        return None
    noise = [round((2 * _stable_fraction(f"{model}|{d}|{caption}") - 1) * PANEL_NOISE) for d in range(4)]
    return [max(0, min(100, quality + bias + n)) for n in noise]


def panel_grade(model: str, output: str) -> int | None:
    """The AnyCap grade (0-4) judge `model` gives a model output."""
    words = len(output.split())
    quality = 0 if _WRONG.search(output) else min(3, words // 20)  # the demo's outputs (19-64 words) spread over 0-3
    bias = {"harsh": -1, "lenient": 1, "long": (words - 40) // 20}.get(model)
    if bias is None:
        return None
    return max(0, min(4, quality + bias))


def panel_responder(body: dict[str, Any]) -> Reply:
    """The scripted judge named by the request's model; any other model gets the rubric responder."""
    model = str(body.get("model"))
    text = prompt_text(body)
    if "Generated Caption:" in text:
        caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
        scores = panel_scores(model, caption)
        if scores is not None:
            return with_logprobs(f"The Accuracy score is α{scores[0]}α.\nThe Completeness score is β{scores[1]}β.\n"
                                 f"The Conciseness score is ψ{scores[2]}ψ.\nThe Relevance score is δ{scores[3]}δ.")
    if "Model Output:" in text:
        output = text.split("Model Output:", 1)[1].split("Reference:", 1)[0].strip()
        grade = panel_grade(model, output)
        if grade is not None:
            return Reply(json.dumps({"score": grade, "reason": f"{model} judge"}))
    return rubric_responder(body)


RESPONDERS: dict[str, Responder] = {"rubric": rubric_responder, "panel": panel_responder}


def echoing_credentials(reply: Reply, headers: dict[str, str], path: str) -> Reply:
    """`reply` prefixed with what a hostile server could echo of the request: its Authorization header (a
    bearer key, or HTTP Basic auth made of a URL's `user:password@`), its `api-key` header (Azure) and its
    path with any query, and the credentials' bytes in hex (lower and upper case), as a debugging server dumps
    them. The prefix's tokens come first in the logprobs (logprob 0), so the reply still scores as before. See
    `OpenAITestServer.echo_credentials`."""
    authorization, api_key = headers.get("authorization", ""), headers.get("api-key", "")
    credentials = [text.encode() for text in (authorization.split(" ", 1)[-1], api_key) if text]
    dumped = " ".join(f"{raw.hex()} {raw.hex().upper()}" for raw in credentials)
    prefix = f"(received Authorization: {authorization}; api-key: {api_key}; path: {path}; bytes: {dumped}) "
    logprobs = None if reply.logprobs is None else [(token, [(token, 0.0)]) for token in tokens_of(prefix)] + reply.logprobs
    return Reply(prefix + (reply.content or ""), logprobs, reply.finish_reason, reply.refusal)


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) refuses connections when 32+ clients connect at once.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up before its reply was written (a test killed it, or its own timeout fired) is what
        # several tests do on purpose: not worth a traceback in the suite's output. Anything else is printed.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class OpenAITestServer:
    def __init__(self, responder: Responder = rubric_responder, latency: float = 0.0, host: str = "127.0.0.1"):
        self.responder = responder
        self.latency = latency
        self.scripted: deque[Answer] = deque()
        self.log: list[LoggedRequest] = []
        # Pre-flight probes (header X-Capjudge-Preflight) are logged here, not in `log`, and never consume a
        # scripted answer: tests count and script judgments, and a run's one probe is not one.
        self.preflights: list[LoggedRequest] = []
        # Server-wide behaviour, for probes and judgments alike: a required key (401 otherwise), the models
        # served (404 otherwise), and whether logprobs are returned when asked for.
        self.required_key: str | None = None
        self.models: set[str] | None = None
        self.logprobs_supported = True
        # False: like an Azure batch deployment, chat completions are refused (404); files/batches still work.
        self.online_chat = True
        # GET /models entries to list instead of one per served name (e.g. with a `meta` saying which weights).
        self.model_listing: list[dict[str, Any]] | None = None
        # Look up which local process opened each connection (from /proc), so a multi-process test can count
        # the processes that sent requests and the requests each sent.
        self.identify_clients = False
        # Echo the request's credentials at the start of every judgment reply (`echoing_credentials`), as a
        # hostile or debugging server may: for tests that no credential, in any form, reaches a file or the screen.
        self.echo_credentials = False
        # Rate limits the server enforces on judgments, OpenAI-style: requests and tokens (the reported prompt
        # tokens plus max_tokens) over a sliding window; over a limit it answers 429 with Retry-After. Every
        # judgment answer carries x-ratelimit-* headers while a limit is set. `rate_limited` counts the 429s.
        self.rpm_limit: int | None = None
        self.tpm_limit: int | None = None
        self.rate_window = 60.0
        self.rate_limited = 0
        # How prompt tokens are counted (and reported as usage): "words" (one per word) or "openai" (as OpenAI
        # documents it: see openai_prompt_tokens_of).
        self.token_charge = "words"
        # What x-ratelimit-reset-* say. Both meanings exist in the wild: "oldest" = until the window frees its
        # oldest entry (room for something again); "empty" = until the window is empty, i.e. the limit is back
        # to its initial state (OpenAI's documented wording for its headers).
        self.reset_meaning = "oldest"
        # The limiter's own charge, apart from the usage reported (issue 40: a real API's limiter charges by its
        # rule, not by the tokenizer count it bills): `charge_scale` times (the prompt tokens by `token_charge`
        # plus the reply's reservation: `max_tokens`, else `default_reply_charge`). The defaults charge as before.
        self.charge_scale = 1.0
        self.default_reply_charge = 0
        # (n, scale): once n judgments have been charged, the limiter charges `scale` instead (a sudden change
        # of the API's charge mid-run, as when its reply reservation or tokenizer changes).
        self.charge_change: tuple[int, float] | None = None
        self.refusal_wording = "openai"  # or "plain": a 429 whose message names no counts
        self._window: deque[tuple[float, int]] = deque()
        self.charged: list[tuple[float, int]] = []  # (time, tokens) of every judgment the limits admitted
        self.refused: list[tuple[float, int]] = []  # (time, tokens it would have been charged) of every 429
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop_hangs = threading.Event()
        self._httpd = _Server((host, 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        # The Files and Batches endpoints; each batch line is answered by the same responder (tests/support/batch_service.py).
        self.batch = BatchService(self._answer_batch_line)

    # -- control ---------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reset(self, responder: Responder = rubric_responder) -> "OpenAITestServer":
        """Forget earlier requests and scripts, so one running server can serve many tests in turn."""
        with self._lock:
            self.log.clear()
            self.preflights.clear()
            self.scripted.clear()
            self.required_key = None
            self.models = None
            self.logprobs_supported = True
            self.online_chat = True
            self.model_listing = None
            self.echo_credentials = False
            self.rpm_limit = self.tpm_limit = None
            self.rate_window = 60.0
            self.rate_limited = 0
            self.token_charge = "words"
            self.reset_meaning = "oldest"
            self.charge_scale = 1.0
            self.default_reply_charge = 0
            self.charge_change = None
            self.refusal_wording = "openai"
            self._window.clear()
            self.charged.clear()
            self.refused.clear()
            self.responder = responder
            self.latency = 0.0
            self.max_in_flight = self.in_flight
        self.batch.reset()
        return self

    def script(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order, before falling back to the responder."""
        with self._lock:
            self.scripted.extend(answers)

    def start(self) -> "OpenAITestServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="openai-test-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop_hangs.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "OpenAITestServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def completions(self) -> list[LoggedRequest]:
        return [r for r in self.log if r.answer]

    # -- serving ---------------------------------------------------------------------------------
    def _next_answer(self, body: dict[str, Any]) -> Answer:
        with self._lock:
            if self.scripted:
                return self.scripted.popleft()
        return self.responder(body)

    def _rate_check(self, body: dict[str, Any]) -> tuple[bool, dict[str, str], str]:
        """Whether this judgment fits the rate limits (and is counted if so), the headers to send, and a 429's
        message: OpenAI's own wording, which names the limit, what its window holds and what the refused
        request would have been charged ("... on tokens per min (TPM): Limit 30000, Used 29937, Requested 385.
        Please try again in 644ms."), or a bare one (`refusal_wording` "plain", like servers that say less)."""
        if self.rpm_limit is None and self.tpm_limit is None:
            return True, {}, ""
        with self._lock:
            if self.charge_change is not None and len(self.charged) >= self.charge_change[0]:
                self.charge_scale, self.charge_change = self.charge_change[1], None
        tokens = self.limiter_charge(body)
        with self._lock:
            now = time.time()
            while self._window and self._window[0][0] <= now - self.rate_window:
                self._window.popleft()
            count, used = len(self._window), sum(t for _, t in self._window)
            fits = (self.rpm_limit is None or count + 1 <= self.rpm_limit) and \
                   (self.tpm_limit is None or used + tokens <= self.tpm_limit)
            if fits:
                self._window.append((now, tokens))
                self.charged.append((now, tokens))
                count, used = count + 1, used + tokens
            else:
                self.rate_limited += 1
                self.refused.append((now, tokens))
            entry = (self._window[0] if self.reset_meaning == "oldest" else self._window[-1]) if self._window else None
            reset = max(0.0, entry[0] + self.rate_window - now) if entry else 0.0
            over_tokens = self.tpm_limit is not None and used + tokens > self.tpm_limit
        message = ""
        if not fits:
            kind = ("tokens per min (TPM)", self.tpm_limit, used, tokens) if over_tokens else \
                   ("requests per min (RPM)", self.rpm_limit, count, 1)
            message = "Rate limit reached" if self.refusal_wording == "plain" else (
                f"Rate limit reached for test-judge in organization org-test on {kind[0]}: Limit {kind[1]}, Used {kind[2]}, "
                f"Requested {kind[3]}. Please try again in {max(reset, 0.01):.3f}s.")
        headers = {}
        if self.rpm_limit is not None:
            headers.update({"x-ratelimit-limit-requests": str(self.rpm_limit),
                            "x-ratelimit-remaining-requests": str(max(0, self.rpm_limit - count)),
                            "x-ratelimit-reset-requests": f"{reset:.3f}s"})
        if self.tpm_limit is not None:
            headers.update({"x-ratelimit-limit-tokens": str(self.tpm_limit),
                            "x-ratelimit-remaining-tokens": str(max(0, self.tpm_limit - used)),
                            "x-ratelimit-reset-tokens": f"{reset:.3f}s"})
        if not fits:
            headers["retry-after"] = f"{max(reset, 0.01):.3f}"
        return fits, headers, message

    def _answer_batch_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answer = self._next_answer(body)
        if isinstance(answer, Fault):
            status = int(answer.kind) if answer.kind.isdigit() else 500
            return status, {"error": {"message": f"injected {answer.kind}", "type": "server_error"}}
        return 200, self._completion(body, answer, self.logprobs_supported, self.prompt_tokens(body))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the client's delayed ACK adds ~40 ms to
            # every response, which would dominate any throughput measurement.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _refused_key(self) -> bool:
                """Answer 401 (and say so) when the server requires a key this request does not carry."""
                if server.required_key is None or self.headers.get("authorization") == f"Bearer {server.required_key}":
                    return False
                self._send_json(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
                return True

            def do_GET(self) -> None:
                if self.path != "/_stats" and self._refused_key():
                    return
                model_path = re.fullmatch(r"/v1/models/([^/?]+)", self.path)
                if model_path is not None:  # a model served (any, unless `models` is set), or 404 as OpenAI answers
                    if server.models is None or model_path[1] in server.models:
                        self._send_json(200, {"id": model_path[1], "object": "model", "owned_by": "capjudge-tests"})
                    else:
                        self._send_json(404, {"error": {"message": f"The model `{model_path[1]}` does not exist",
                                                        "code": "model_not_found"}})
                    return
                if server.batch.handles(self.path):
                    status, payload = server.batch.get(self.path)
                    if isinstance(payload, bytes):
                        self._raw(status, payload, content_type="application/octet-stream")
                    else:
                        self._send_json(status, payload)
                    return
                if self.path == "/_stats":  # for tests and benchmarks that run the server in another process
                    with server._lock:
                        stats = {"requests": len(server.log), "max_in_flight": server.max_in_flight,
                                 "rate_limited": server.rate_limited,
                                 "arrivals": [entry.arrived for entry in server.log if entry.answer != "429"],
                                 "charged": server.charged, "refused": server.refused,
                                 "preflights": len(server.preflights), "batches_created": server.batch.created,
                                 "batch_lines_answered": server.batch.lines_answered}
                    self._send_json(200, stats)
                elif self.path.rstrip("/").endswith("/models"):
                    served = sorted(server.models) if server.models is not None else ["test-judge"]
                    listing = server.model_listing or [{"id": name, "object": "model"} for name in served]
                    self._send_json(200, {"object": "list", "data": listing})
                else:
                    self._send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                if server.batch.handles(self.path):
                    if self._refused_key():
                        return
                    status, payload = server.batch.post(self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                    self._send_json(status, payload)
                    return
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send_json(400, {"error": {"message": "body is not JSON"}})
                    return
                entry = LoggedRequest(
                    body, time.time(), headers={k.lower(): v for k, v in self.headers.items()}, path=self.path,
                    peer=tuple(self.client_address[:2]),
                )
                if server.identify_clients:
                    if not hasattr(self, "client_pid"):  # one handler per connection: looked up once
                        self.client_pid = pid_of_connection(self.client_address[1], self.server.server_address[1])
                    entry.client_pid = self.client_pid
                is_probe = "x-capjudge-preflight" in entry.headers
                rejection = None
                if server.required_key is not None and entry.headers.get("authorization") != f"Bearer {server.required_key}":
                    rejection = (401, {"message": "Incorrect API key provided", "code": "invalid_api_key"})
                elif server.models is not None and body.get("model") not in server.models:
                    rejection = (404, {"message": f"The model `{body.get('model')}` does not exist", "code": "model_not_found"})
                elif not server.online_chat:
                    rejection = (404, {"message": "The chatCompletion operation does not work with this deployment "
                                                  "(a batch deployment)", "code": "OperationNotSupported"})
                if rejection is not None or is_probe:
                    entry.answer = str(rejection[0]) if rejection is not None else "reply"
                    with server._lock:
                        (server.preflights if is_probe else server.log).append(entry)
                    if rejection is not None:
                        self._send_json(rejection[0], {"error": rejection[1]})
                    else:
                        self._send_json(200, server._completion(body, with_logprobs("1"), server.logprobs_supported, server.prompt_tokens(body)))
                    return
                with server._lock:
                    server.log.append(entry)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    fits, rate_headers, message = server._rate_check(body)
                    if not fits:
                        entry.answer = "429"
                        self._send_json(429, {"error": {"message": message, "type": "tokens" if "TPM" in message else "requests",
                                                        "code": "rate_limit_exceeded"}}, rate_headers)
                        return
                    if server.latency:
                        time.sleep(server.latency)
                    answer = server._next_answer(body)
                    if server.echo_credentials and isinstance(answer, Reply):
                        answer = echoing_credentials(answer, entry.headers, self.path)
                    entry.answer = answer.kind if isinstance(answer, Fault) else "reply"
                    if isinstance(answer, Fault):
                        self._send_fault(answer)
                    else:
                        self._send_json(200, server._completion(body, answer, server.logprobs_supported, server.prompt_tokens(body)), rate_headers)
                finally:
                    entry.replied = time.time()
                    with server._lock:
                        server.in_flight -= 1

            def _send_fault(self, fault: Fault) -> None:
                if fault.kind in ("429", "500", "503", "400"):
                    headers = dict(fault.headers)
                    if fault.retry_after is not None:
                        headers["retry-after"] = f"{fault.retry_after:g}"
                    self._send_json(int(fault.kind), {"error": {"message": fault.message or f"injected {fault.kind}"}}, headers)
                elif fault.kind == "hang":
                    server._stop_hangs.wait(fault.hang_seconds)
                    self.close_connection = True
                elif fault.kind == "truncated_json":  # well-framed HTTP, JSON cut in half
                    payload = json.dumps(server._completion({}, Reply("cut"))).encode()
                    self._raw(200, payload[: len(payload) // 2], declared_length=len(payload) // 2)
                elif fault.kind == "truncated":  # the connection drops mid-body
                    payload = json.dumps(server._completion({}, Reply("cut"))).encode()
                    self._raw(200, payload[: len(payload) // 2], declared_length=len(payload))
                    self.close_connection = True
                elif fault.kind == "not_json":
                    self._raw(200, b"<html>gateway says hello</html>", content_type="application/json")
                elif fault.kind == "empty_choices":
                    self._send_json(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "test-judge", "choices": []})
                elif fault.kind == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.close_connection = True
                    self.connection.close()
                else:
                    raise ValueError(f"unknown fault {fault.kind}")

            def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._raw(status, json.dumps(payload).encode(), headers=headers)

            def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                     content_type: str = "application/json", declared_length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data) if declared_length is None else declared_length))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def limiter_charge(self, body: dict[str, Any]) -> int:
        """The tokens the rate limiter charges a judgment at admission (see `limiter_charge_of`)."""
        return limiter_charge_of(body, self.token_charge, self.charge_scale, self.default_reply_charge)

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt tokens this server charges and reports for a request, by its `token_charge` rule."""
        return openai_prompt_tokens_of(body) if self.token_charge == "openai" else prompt_tokens_of(body)

    @staticmethod
    def _completion(body: dict[str, Any], reply: Reply, logprobs_supported: bool = True,
                    prompt_tokens: int | None = None) -> dict[str, Any]:
        logprobs = None
        if reply.logprobs is not None and body.get("logprobs") and logprobs_supported:
            top_n = int(body.get("top_logprobs") or 0)
            content = []
            for token, alternatives in reply.logprobs:
                own = next((lp for alt, lp in alternatives if alt == token), 0.0)
                content.append({
                    "token": token,
                    "logprob": own,
                    "bytes": list(token.encode()),
                    "top_logprobs": [{"token": alt, "logprob": lp, "bytes": list(alt.encode())} for alt, lp in alternatives[:top_n]],
                })
            logprobs = {"content": content}
        if prompt_tokens is None:
            prompt_tokens = prompt_tokens_of(body) if body else 0
        completion_tokens = len(tokens_of(reply.content or ""))
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "test-judge"),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": reply.refusal},
                "logprobs": logprobs,
                "finish_reason": reply.finish_reason,
            }],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


class ServerProcess:
    """The test server in its own process (so it does not share the GIL with the code under test).

    Serves until `stop()` (or leaving the `with` block) closes its stdin; `stats()` reads its request count.
    """

    def __init__(self, *extra_args: str, responder: str = "rubric", latency: float = 0.0,
                 log_path: str | None = None, python: str | None = None, ready_timeout: float = 60.0):
        import os
        import subprocess

        from tests.support.paths import with_checkout_on_path

        command = [python or sys.executable, "-m", "tests.support.openai_server", "--responder", responder,
                   "--latency", str(latency), *extra_args]
        if log_path is not None:
            command += ["--log", str(log_path)]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                         env=with_checkout_on_path(os.environ))
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self._process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(ready_timeout)
        line = found[0].strip() if found else ""
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"test server did not start (first line: {line!r})")
        self.base_url = line.split()[1]

    def stats(self) -> dict[str, int]:
        import urllib.request

        root = self.base_url.rsplit("/v1", 1)[0]
        with urllib.request.urlopen(f"{root}/_stats", timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        import subprocess

        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--responder", choices=sorted(RESPONDERS), default="rubric")
    parser.add_argument("--fixed-reply", help="answer every request with this text instead of a responder")
    parser.add_argument("--no-logprobs", action="store_true", help="never return logprobs (like some backends)")
    parser.add_argument("--rpm", type=int, help="enforce this many judgments per window (429 above), with headers")
    parser.add_argument("--tpm", type=int, help="enforce this many tokens per window (429 above), with headers")
    parser.add_argument("--rate-window", type=float, default=60.0, help="the window of --rpm/--tpm, in seconds")
    parser.add_argument("--charge", choices=("words", "openai"), default="words",
                        help="prompt tokens: one per word, or as OpenAI documents (4 characters a token, image tiles)")
    parser.add_argument("--reset-meaning", choices=("oldest", "empty"), default="oldest",
                        help="x-ratelimit-reset-*: until the oldest entry leaves the window, or until it is empty")
    parser.add_argument("--charge-scale", type=float, default=1.0,
                        help="the rate limiter charges this times its count (usage reports the count unscaled)")
    parser.add_argument("--charge-change", metavar="N:SCALE",
                        help="once N judgments have been charged, the rate limiter charges SCALE instead of --charge-scale")
    parser.add_argument("--plain-429", action="store_true",
                        help="a 429's message names no counts (OpenAI's names the limit, what is used and what was requested)")
    parser.add_argument("--default-reply-charge", type=int, default=0,
                        help="tokens the rate limiter reserves for a reply when the request gives no max_tokens")
    parser.add_argument("--log", help="write the request log (JSON lines, bodies without images) here on exit")
    args = parser.parse_args(argv)
    responder = (lambda body: Reply(args.fixed_reply)) if args.fixed_reply else RESPONDERS[args.responder]
    server = OpenAITestServer(responder, latency=args.latency)
    server.logprobs_supported = not args.no_logprobs
    server.rpm_limit, server.tpm_limit, server.rate_window = args.rpm, args.tpm, args.rate_window
    server.token_charge, server.reset_meaning = args.charge, args.reset_meaning
    server.charge_scale, server.default_reply_charge = args.charge_scale, args.default_reply_charge
    if args.charge_change:
        after, scale = args.charge_change.split(":")
        server.charge_change = (int(after), float(scale))
    server.refusal_wording = "plain" if args.plain_429 else "openai"
    server.start()
    print(f"READY {server.base_url}", flush=True)
    try:
        sys.stdin.read()  # runs until stdin closes (the parent ends or closes the pipe)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if args.log:
            with open(args.log, "w") as handle:
                for entry in server.log:
                    handle.write(json.dumps({"arrived": entry.arrived, "replied": entry.replied, "answer": entry.answer, "prompt": entry.prompt_text}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

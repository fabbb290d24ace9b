"""The API key never leaves the SDK client: not in logs, caches, results, samples, failures or leaderboards.

The judge here is hostile on purpose: it reads the key from the Authorization header and echoes it back —
in 401 error bodies (as OpenAI's "Incorrect API key provided: ..." does), in 500 error bodies, in reply text,
and as one whole logprob token. A real lmms-eval run (gveval_references on MSVD-Eval from ../shared) and the
leaderboard CLI run with a recognisable key, and every byte they write is searched for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Self

import pytest
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.gveval.judge import GVEvalJudge
from tests.support.paths import REPO_ROOT, shared_path
from tests.support.harness_runs import launch_lmms_eval, run_capjudge_cli
from tests.support.openai_server import OpenAITestServer, Reply, prompt_text, rubric_responder, with_logprobs

MSVD = ("data", "msvd_eval", "MSVD-Eval.json")
N_ITEMS = 16
KEY = f"sk-capjudge-LEAKCHECK-{secrets.token_hex(12)}"
REFERENCES = ["A dog runs across a park.", "A brown dog plays fetch."]


class EchoingJudge:
    """An OpenAI-compatible judge on 127.0.0.1 that echoes the bearer key it receives.

    What it does with a request depends on the caption (stable across processes): "reject" answers 401 with
    the key in the message, "fail" answers 500 with the key, "echo" answers a valid judgment whose text and
    one logprob token contain the key; anything else is an ordinary rubric reply.
    """

    def __init__(self, choose=None):
        self.keys_seen: list[str] = []
        self.choose = choose or self.by_caption_hash
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True

    @staticmethod
    def by_caption_hash(body) -> str:
        digest = hashlib.sha256(prompt_text(body).encode()).digest()[0]
        return ("reject", "fail", "echo", "plain")[digest % 4]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        judge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                key = self.headers.get("authorization", "").removeprefix("Bearer ")
                with judge._lock:
                    judge.keys_seen.append(key)
                if "x-capjudge-preflight" in {name.lower() for name in self.headers}:
                    # The run's one pre-flight probe: answered, its key recorded like any other request's.
                    self._send(200, OpenAITestServer._completion(body, with_logprobs("1")))
                    return
                behaviour = judge.choose(body)
                if behaviour == "reject":
                    message = f"Incorrect API key provided: {key}. You can find your API key at https://example.invalid."
                    self._send(401, {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}})
                elif behaviour == "fail":
                    self._send(500, {"error": {"message": f"upstream failed for key {key}"}})
                else:
                    reply = rubric_responder(body)
                    if behaviour == "echo":
                        text = f"(authorised as {key}) {reply.content}"
                        tokens = [(f"(authorised as {key}) ", [(f"(authorised as {key}) ", 0.0)]), *(reply.logprobs or [])]
                        reply = Reply(text, tokens)
                    self._send(200, OpenAITestServer._completion(body, reply))

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def assert_no_key_in_files(root: Path) -> int:
    """Search every file under `root` byte by byte; returns how many files were searched."""
    files = [path for path in root.rglob("*") if path.is_file()]
    for path in files:
        assert KEY.encode() not in path.read_bytes(), f"the API key leaked into {path}"
    return len(files)


# ---------------------------------------------------------------------------------------------------------
# In process: failures, replies, logs and the cache


def judge_once(behaviour: str, tmp_path: Path, caplog):
    with EchoingJudge(choose=lambda body: behaviour) as judge:
        config = JudgeConfig(base_url=judge.base_url, api_key=KEY, model="test-judge", cache_path=tmp_path / "cache.sqlite",
                             max_attempts=2)
        client = JudgeClient(config, sleep=lambda seconds: None)
        with caplog.at_level(logging.DEBUG):
            result = GVEvalJudge(client, mode="references").judge("A dog runs.", references=REFERENCES)
        outcome_text = repr(client.judge(GVEvalJudge(client, mode="references").request_for("A dog runs.", references=REFERENCES),
                                         lambda reply: reply.content or "", judge_version="leakcheck"))
        client.close()
        assert judge.keys_seen and set(judge.keys_seen) == {KEY}  # the key really was sent, and echoed
    return result, outcome_text


@pytest.mark.parametrize("behaviour, failure", [("reject", "request_failed"), ("fail", "request_failed"), ("echo", None)])
def test_an_echoed_key_is_redacted_from_failures_replies_logs_and_the_cache(behaviour, failure, tmp_path, caplog):
    result, outcome_text = judge_once(behaviour, tmp_path, caplog)
    assert result.failure_kind == failure
    everything = "\n".join([repr(result), outcome_text, caplog.text])
    assert KEY not in everything
    assert "[REDACTED]" in everything  # there was something to redact, and it was
    assert_no_key_in_files(tmp_path)
    if behaviour == "echo":
        assert result.judged and "[REDACTED]" in result.raw_reply


def test_configuration_errors_and_reprs_never_show_the_key():
    config = JudgeConfig(api_key=KEY, model="gpt-4o")
    assert KEY not in repr(config) and KEY not in str(config)
    messages = []
    for broken in ({"max_attempts": 0}, {"timeout": -1}, {"api_type": "azure"}, {"max_concurrency": 0}):
        with pytest.raises(ConfigError) as raised:
            config.with_overrides(**broken)
        messages.append(str(raised.value))
    with pytest.raises(ConfigError) as raised:
        JudgeConfig.from_env({"OPENAI_API_KEY": KEY, "CAPJUDGE_TIMEOUT": "soon"})
    messages.append(str(raised.value))
    assert all(KEY not in message for message in messages)


# ---------------------------------------------------------------------------------------------------------
# A real lmms-eval run and the leaderboard CLI


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    msvd = shared_path(*MSVD)
    root = tmp_path_factory.mktemp("leakcheck")
    with EchoingJudge() as judge:
        outcome = launch_lmms_eval(
            model="captions_file", model_args="field=candidate,model_name=leakcheck", tasks="gveval_references",
            output_path=root / "out", judge_base_url=judge.base_url, cache_path=root / "cache" / "judge.sqlite",
            limit=N_ITEMS, verbosity="INFO",
            # Every item must meet its behaviour (401s included): no breaker, and a mostly failed run is the point.
            env={"OPENAI_API_KEY": KEY, "CAPJUDGE_MSVD_EVAL_JSON": str(msvd), "CAPJUDGE_MAX_ATTEMPTS": "2",
                 "CAPJUDGE_BREAKER_THRESHOLD": "0", "CAPJUDGE_MAX_FAILURE_RATE": "1"},
        )
        keys_seen = list(judge.keys_seen)
    run = outcome.require_run()
    board = run_capjudge_cli(
        ["leaderboard", str(root / "out"), "--out", str(root / "board"),
         "--resamples", "200", "--permutations", "199"],
        env=dict(os.environ), cwd=REPO_ROOT, timeout=120,
    )
    return SimpleNamespace(root=root, outcome=outcome, run=run, board=board, keys_seen=keys_seen)


def test_the_run_really_used_the_key_and_met_every_echo(leak_run):
    assert leak_run.keys_seen and set(leak_run.keys_seen) == {KEY}
    failures = [sample["judged"]["judgment"]["failure"] for sample in leak_run.run.samples("gveval_references")]
    assert len(failures) == N_ITEMS
    assert "request_failed" in failures and None in failures  # some items rejected/failed, some judged
    details = " ".join(sample["judged"]["judgment"]["failure_detail"] or "" for sample in leak_run.run.samples("gveval_references"))
    replies = " ".join(sample["judged"]["judgment"]["raw_reply"] or "" for sample in leak_run.run.samples("gveval_references"))
    assert "[REDACTED]" in details and "[REDACTED]" in replies


def test_no_key_in_lmms_eval_output_results_samples_or_cache(leak_run):
    assert KEY not in leak_run.outcome.stdout and KEY not in leak_run.outcome.stderr
    assert "unjudged: request_failed" in leak_run.outcome.stderr  # the failures were logged, redacted
    searched = assert_no_key_in_files(leak_run.root / "out")
    assert searched >= 2  # the results JSON and the samples JSONL at least
    assert assert_no_key_in_files(leak_run.root / "cache") >= 1


def test_no_key_in_the_leaderboard_cli_output_or_its_files(leak_run):
    assert leak_run.board.returncode == 0, leak_run.board.stderr[-2000:]
    assert KEY not in leak_run.board.stdout and KEY not in leak_run.board.stderr
    board_files = {path.suffix for path in (leak_run.root / "board").iterdir()}
    assert {".html", ".md", ".csv"} <= board_files
    assert "leakcheck" in (leak_run.root / "board" / "leaderboard.html").read_text(encoding="utf-8")
    assert_no_key_in_files(leak_run.root / "board")

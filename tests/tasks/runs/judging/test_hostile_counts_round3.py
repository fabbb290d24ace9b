"""Issue 46 item 1: every count of requests and tokens capjudge prints or logs equals what the server received.

A judgment that failed at the request level (it gave up after its attempts: 500s, 429s, timeouts) used to be
logged with `requests: 0`, and a reply that came after retries counted 1: `capjudge sensitivity` printed "19
requests sent" where the server received 22, and a panel 140 where it received 180. Here real `capjudge
judge` and `capjudge sensitivity` runs (one judge, and a panel of two) meet a test server that answers each
prompt by a fixed script of faults (`FaultyJudge`): some always fail (500 on every attempt, 429 on every
attempt), some fail once or twice and then answer (a 500, a 429, a timeout), the rest answer at once.
Every count printed or logged is compared with the server's own request log, exactly: per item, in total,
per worker process, and the tokens the server reported in its replies.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, run_capjudge_cli
from tests.support.openai_server import (
    Fault,
    OpenAITestServer,
    panel_responder,
    prompt_text,
    tokens_of,
)

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
TASK = "gveval_demo"
N_ITEMS = 10
ATTEMPTS = 3  # CAPJUDGE_MAX_ATTEMPTS: a judgment that fails every attempt sends exactly this many

# What a prompt meets before its reply, by kind (None: it never gets one). Every kind is met by some item.
HANG = Fault("hang", hang_seconds=2.0)  # past the client's 1 s timeout: received, never answered
SCRIPTS = (
    (),  # answered at once
    (Fault("500"),),
    (Fault("429", retry_after=0.01),),
    (HANG,),
    (Fault("500"), Fault("503")),
    None,  # 500 on every attempt: "gave up after 3 attempts"
    (),
    (Fault("500"), HANG),
)
ALWAYS_FAILING = Fault("500")


class FaultyJudge:
    """A responder that answers each (model, prompt) by its script: the faults first, then the panel judge's
    reply (or, for a prompt scripted to fail, the same fault for ever). Thread-safe: the server answers many
    requests at once."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @staticmethod
    def script(model: str, prompt: str) -> tuple[Fault, ...] | None:
        digest = int(hashlib.sha256(f"{model}|{prompt}".encode()).hexdigest()[:8], 16)
        return SCRIPTS[digest % len(SCRIPTS)]

    def __call__(self, body):
        key = (str(body.get("model")), prompt_text(body))
        with self._lock:
            asked = self.seen[key]
            self.seen[key] += 1
        script = self.script(*key)
        if script is None:
            return ALWAYS_FAILING
        return script[asked] if asked < len(script) else panel_responder(body)


def _env(tmp_path: Path, server: OpenAITestServer, **extra: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
            "CAPJUDGE_CACHE": str(tmp_path / "cache" / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path), "CAPJUDGE_MAX_ATTEMPTS": str(ATTEMPTS), "CAPJUDGE_TIMEOUT": "1",
            # Half the items may fail here: the run must still write everything it counted.
            "CAPJUDGE_MAX_FAILURE_RATE": "1", **extra}


def _panel(tmp_path: Path, server: OpenAITestServer) -> Path:
    path = tmp_path / "panel.json"
    path.write_text(json.dumps({"members": [{"name": model, "model": model, "base_url": server.base_url}
                                            for model in ("harsh", "lenient")]}))
    return path


def _received(server: OpenAITestServer) -> dict[str, int]:
    """What the server received and reported: requests, and the tokens of the replies it sent."""
    answered = [entry for entry in server.log if entry.answer == "reply"]
    return {"requests": len(server.log),
            "prompt_tokens": sum(server.prompt_tokens(entry.body) for entry in answered),
            "completion_tokens": sum(len(tokens_of(panel_responder(entry.body).content or "")) for entry in answered)}


def _records(out: Path) -> list[dict]:
    (path,) = list(out.rglob(f"*_samples_{TASK}.jsonl"))
    return [json.loads(line)["judged"]["judgment"] for line in path.read_text(encoding="utf-8").splitlines()]


def _requests_per_caption(server: OpenAITestServer) -> Counter[str]:
    """Requests the server received per caption (the G-VEval prompt quotes it after "Generated Caption:")."""
    return Counter(entry.prompt_text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
                   for entry in server.log)


def _expected_failures(server: OpenAITestServer, members: tuple[str, ...]) -> int:
    return sum(FaultyJudge.script(model, prompt) is None
               for model, prompt in {(str(e.body.get("model")), e.prompt_text) for e in server.log} if model in members)


@pytest.mark.parametrize("panel, processes", [(False, 1), (False, 2), (True, 1)],
                         ids=["one-judge", "one-judge-two-processes", "panel-of-two"])
def test_capjudge_judge_logs_every_request_the_server_received(tmp_path, panel, processes):
    with OpenAITestServer(responder=FaultyJudge()) as server:
        extra = {"CAPJUDGE_PANEL": str(_panel(tmp_path, server))} if panel else {}
        done = run_capjudge_cli(["judge", "--captions", CAPTIONS, "--task", TASK, "--out", tmp_path / "out",
                                 "--processes", str(processes)], env=_env(tmp_path, server, **extra), timeout=300)
        received = _received(server)
        per_caption = _requests_per_caption(server)
        members = ("harsh", "lenient") if panel else (TEST_JUDGE_MODEL,)
        gave_up = _expected_failures(server, members)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    records = _records(tmp_path / "out")
    assert len(records) == N_ITEMS
    # The faults the script promises happened: retried requests, and judgments that gave up.
    assert received["requests"] > N_ITEMS * len(members) and gave_up >= 1
    # Per item: the requests it cost are the requests the server received for its caption (all members).
    assert {record["caption"]: record["requests"] for record in records} == dict(per_caption)
    # In total: requests and the tokens the server reported.
    assert sum(record["requests"] for record in records) == received["requests"]
    assert sum(record["usage"]["prompt_tokens"] for record in records) == received["prompt_tokens"]
    assert sum(record["usage"]["completion_tokens"] for record in records) == received["completion_tokens"]
    # An item that gave up after its attempts says so, and counts every attempt (it used to count 0).
    failed = [record for record in records if record.get("failure") == "request_failed"]
    if not panel:
        assert len(failed) == gave_up
        assert all(record["requests"] == ATTEMPTS and "gave up after 3 attempts" in record["failure_detail"]
                   for record in failed)
    if processes > 1:  # each worker's printed count; together, what the server received
        printed = [int(n) for n in re.findall(r"process \d/\d \(pid \d+\): \d+ items, \d+ failed, (\d+) requests",
                                              done.stderr)]
        assert len(printed) == processes and sum(printed) == received["requests"], done.stderr[-3000:]


@pytest.mark.parametrize("panel", [False, True], ids=["one-judge", "panel-of-two"])
def test_capjudge_sensitivity_prints_the_requests_the_server_received(tmp_path, panel):
    with OpenAITestServer(responder=FaultyJudge()) as server:
        extra = {"CAPJUDGE_PANEL": str(_panel(tmp_path, server))} if panel else {}
        done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", CAPTIONS, "--out", tmp_path / "out",
                                 "--resamples", "100"], env=_env(tmp_path, server, **extra), timeout=600)
        received = _received(server)
    assert done.returncode == 0, done.stderr[-3000:]
    (printed,) = re.findall(r"(\d+) requests sent", done.stdout)
    counts = json.loads((tmp_path / "out" / f"sensitivity_{TASK}.json").read_text(encoding="utf-8"))["counts"]
    assert received["requests"] > counts["judgments"] * (2 if panel else 1)  # retries happened
    assert counts["unjudged"] >= 1  # and some judgments gave up
    assert int(printed) == counts["requests"] == received["requests"]

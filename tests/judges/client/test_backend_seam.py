"""The judge backend seam (issue 48): a new backend is one file and one `register` call, `api_type` is read in
one module only, and an unknown API_TYPE is one line naming the variable and the known backends (exit 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from capjudge.judges.client import backends
from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.client.judge_client import JudgeClient
from capjudge.judges.types import ChatRequest
from tests.support.paths import REPO_ROOT
from tests.support.echo_backend import ECHO, ECHO_HEADER
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, run_capjudge_cli
from tests.support.openai_server import Fault, Reply

PACKAGE_FOLDERS = ("judges", "metrics", "tasks")


@pytest.fixture
def echo_registered():
    backends.register_backend(ECHO)
    yield ECHO
    backends.unregister_backend(ECHO.api_type)


def test_a_backend_of_one_file_judges_against_the_test_server_with_its_own_headers(echo_registered, server, tmp_path):
    env = {"API_TYPE": "echo", "ECHO_API_KEY": "echo-key-0123456789", "ECHO_BASE_URL": server.base_url,
           "MODEL_VERSION": "test-judge", "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite")}
    config = JudgeConfig.from_env(env)
    assert config.backend is ECHO and config.endpoint_label == f"echo:{server.base_url}"
    # A 429 in the backend's own header names: its limit is learned (OpenAI's names would be ignored here).
    refusal = (("echo-ratelimit-requests-limit", "7"), ("echo-ratelimit-requests-remaining", "6"),
               ("echo-ratelimit-requests-reset", "10ms"), ("echo-retry-after", "0.01"))
    server.script(Fault("429", headers=refusal), Reply("8"))
    sleeps: list[float] = []
    client = JudgeClient(config, sleep=sleeps.append)
    try:
        outcome = client.judge(ChatRequest(parts=("rate this",)), lambda reply: reply.content, judge_version="echo-1")
        assert outcome.ok and outcome.value == "8", outcome
        assert client.budget.rpm == 7
    finally:
        client.close()
    sent = server.completions
    assert len(sent) == 2 and all(request.headers.get(ECHO_HEADER) == "1" for request in sent)
    assert all(request.headers.get("authorization") == "Bearer echo-key-0123456789" for request in sent)


def test_the_built_in_backends_ignore_another_backends_header_names(server, make_client):
    server.script(Fault("429", headers=(("echo-ratelimit-requests-limit", "7"),)), Reply("8"))
    client = make_client(server)
    assert client.backend.name == "local"
    assert client.judge(ChatRequest(parts=("rate this",)), lambda reply: reply.content, judge_version="echo-1").ok
    assert client.budget.rpm is None


def test_an_unknown_api_type_names_the_variable_and_the_known_backends(echo_registered):
    with pytest.raises(ConfigError) as refused:
        JudgeConfig.from_env({"API_TYPE": "anthropic", "OPENAI_API_KEY": "k"})
    assert str(refused.value) == "API_TYPE must be 'openai', 'azure' or 'echo', got 'anthropic'"


def test_an_unknown_api_type_through_the_cli_is_one_line_and_exit_2(tmp_path):
    env = {"API_TYPE": "anthropic", "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = run_capjudge_cli(["judge", "--captions", str(REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"),
                             "--task", "gveval_demo", "--out", str(tmp_path / "out")], env=env, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "API_TYPE must be 'openai' or 'azure', got 'anthropic'" in output, output[-3000:]
    assert "Traceback" not in output


def _api_type_reads(path: Path) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(isinstance(node, ast.Attribute) and node.attr == "api_type" and isinstance(node.ctx, ast.Load)
               for node in ast.walk(tree))


def _backend_name_comparisons(path: Path) -> int:
    """Comparisons with a backend's name ("azure" == ..., ... in ("openai", "azure")): a branch on the backend."""
    names = {"openai", "azure", "compatible", "local"}
    found = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += any(isinstance(item, ast.Constant) and item.value in names for item in items)
    return found


def test_api_type_is_read_in_one_module_and_nothing_branches_on_a_backend_name():
    modules = [path for folder in PACKAGE_FOLDERS for path in (REPO_ROOT / folder).rglob("*.py")]
    reading = sorted(path.relative_to(REPO_ROOT).as_posix() for path in modules if _api_type_reads(path))
    assert reading == ["judges/client/backends/__init__.py"]
    branching = sorted(path.relative_to(REPO_ROOT).as_posix() for path in modules if _backend_name_comparisons(path))
    assert branching == []

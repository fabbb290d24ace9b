"""Hostile judge configurations (issue 36): each is judged correctly or refused with one line, status 2,
naming the input and the problem, before any request; no credential in any form on the screen or on disk.

Real commands (`capjudge judge` on the demo captions) against the OpenAI-compatible test server
(tests/support/openai_server.py), which for the credential cases echoes what each request carried (its Authorization
and api-key headers, its path) at the start of every reply: a key sent as a bearer token, a URL's
`user:password@` sent as HTTP Basic auth, a `?api-key=` in the URL.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from pathlib import Path
from urllib.parse import quote

import pytest
from capjudge.judges.client.config import MAX_CONCURRENCY, ConfigError, JudgeConfig
from capjudge.judges.client.redaction import Redactor
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, run_capjudge_cli
from tests.support.hostile import assert_no_secret, assert_no_secret_on_disk, refusal_line
from tests.support.openai_server import OpenAITestServer, panel_responder, panel_scores

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
CAPTION_OF = {row["id"]: row["caption"] for row in map(json.loads, CAPTIONS.read_text().splitlines())}
TASK = "gveval_demo"
N_ITEMS = 10
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance")
JUDGE = "capjudge judge:"  # the command's own line (a task also logs its load error, unprefixed)


def scripted_as(model: str):
    """A server whose judge scores every request as the test server's scripted panel judge `model` does,
    whatever model name the request carries."""
    return lambda body: panel_responder({**body, "model": model})


def judge(work: Path, base_url: str | None = None, **variables: str):
    """`capjudge judge` on the demo captions with exactly this environment: everything it writes (output, reply
    cache, home folder, datasets cache) under `work`, the judge at `base_url` unless `variables` say otherwise."""
    env = {"OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(work / "cache" / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(work / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(work)}
    if base_url is not None:
        env["OPENAI_BASE_URL"] = base_url
    env.update(variables)
    out = work / "out"
    done = run_capjudge_cli(["judge", "--captions", str(CAPTIONS), "--task", TASK, "--out", str(out)],
                            env=env, cwd=REPO_ROOT, timeout=600)
    return done


def samples(work: Path) -> dict[str, dict]:
    (path,) = (work / "out").rglob(f"*_samples_{TASK}.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {line["judged"]["item_id"]: line for line in lines}


def write_panel(folder: Path, *members: dict) -> Path:
    """A panel file in `folder`, which the tests keep apart from what the command writes: the file itself holds
    the URLs (with their credentials) the user wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "panel.json"
    path.write_text(json.dumps({"members": list(members), "quorum": 1}))
    return path


def host_of(server: OpenAITestServer) -> str:
    return server.base_url.split("//", 1)[1].removesuffix("/v1")


# ---------------------------------------------------------------------------------------------------------
# Item 1: panel members are told apart by where they are, not by their model name


def test_two_members_with_one_model_name_on_two_servers_each_get_their_own_servers_scores(tmp_path):
    """Two servers serve a model of the same name and judge differently (one harsh, one lenient). Each member
    is asked about every item at its own server and gets that server's scores; a rerun answers both from the
    cache, still each its own. (Before issue 36 the two shared cache keys: one server was never asked and its
    member silently carried the other's scores.)"""
    with OpenAITestServer(scripted_as("harsh")) as harsh, OpenAITestServer(scripted_as("lenient")) as lenient:
        panel = write_panel(tmp_path / "in", {"name": "first", "model": "shared-name", "base_url": harsh.base_url},
                            {"name": "second", "model": "shared-name", "base_url": lenient.base_url})
        first = judge(tmp_path / "first", harsh.base_url, CAPJUDGE_PANEL=str(panel),
                      CAPJUDGE_CACHE=str(tmp_path / "cache.sqlite"))
        assert first.returncode == 0, first.stderr[-3000:]
        assert len(harsh.log) == N_ITEMS and len(lenient.log) == N_ITEMS, (len(harsh.log), len(lenient.log))
        rerun = judge(tmp_path / "rerun", harsh.base_url, CAPJUDGE_PANEL=str(panel),
                      CAPJUDGE_CACHE=str(tmp_path / "cache.sqlite"))
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert len(harsh.log) == N_ITEMS and len(lenient.log) == N_ITEMS  # the rerun asked nobody
    for run in (samples(tmp_path / "first"), samples(tmp_path / "rerun")):
        assert len(run) == N_ITEMS
        for item_id, sample in run.items():
            caption = CAPTION_OF[item_id]
            for member, script in (("first", "harsh"), ("second", "lenient")):
                assert [sample[f"gveval_{d}@{member}"] for d in DIMENSIONS] == pytest.approx(
                    panel_scores(script, caption), abs=1e-9), (item_id, member)


@pytest.mark.parametrize("spellings", [
    ("http://127.0.0.1:{port}/v1", "http://localhost:{port}/v1/"),
    ("http://LOCALHOST:{port}/v1", "http://[::1]:{port}/v1/chat/completions"),
    ("https://judge.example.com/v1", "HTTPS://Judge.Example.COM:443/v1"),
], ids=["localhost", "case-and-ipv6", "default-port"])
def test_one_model_at_one_server_spelled_two_ways_is_one_judge_refused_naming_both_members(spellings, tmp_path):
    first, second = (spelling.format(port=8123) for spelling in spellings)
    panel = write_panel(tmp_path / "in", {"name": "one", "model": "m", "base_url": first, "api_key_env": "K"},
                        {"name": "two", "model": "m", "base_url": second, "api_key_env": "K"})
    with OpenAITestServer() as server:
        done = judge(tmp_path / "work", server.base_url, CAPJUDGE_PANEL=str(panel), K="sk-" + "k" * 40)
        assert server.log == [] and server.preflights == []
    line = refusal_line(done, JUDGE, str(panel), "'one'", "'two'", "one judge, not two opinions")
    assert "model 'm'" in line


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "localhost.", "LOCALHOST", "127.0.0.2", "[::1]",
                                  "[::ffff:127.0.0.1]", "judge.localhost", "0.0.0.0"])
def test_every_name_of_this_machine_is_local_for_the_key_rule_and_one_server_for_the_cache(host):
    """`is_local` (a server here needs no real key) and `endpoint_identity` (the cache's server) agree on which
    URLs are this machine."""
    config = JudgeConfig.from_env({}, base_url=f"http://{host}:8123/v1")
    assert config.is_local
    assert config.endpoint_identity == "http://127.0.0.1:8123/v1"


@pytest.mark.parametrize("host", ["localhost.example.com", "127.0.0.1.nip.io", "10.0.0.1", "judge.example.com"])
def test_a_name_that_only_looks_local_is_not_local(host):
    with pytest.raises(ConfigError, match=f"no API key for the judge at http://{re.escape(host)}:8123/v1"):
        JudgeConfig.from_env({}, base_url=f"http://{host}:8123/v1")
    config = JudgeConfig.from_env({"OPENAI_API_KEY": "sk-" + "k" * 40}, base_url=f"http://{host}:8123/v1")
    assert not config.is_local
    assert config.endpoint_identity == f"http://{host}:8123/v1"  # its own server, not this machine


# ---------------------------------------------------------------------------------------------------------
# Item 2: no credential in any form reaches a file or the screen


def test_every_form_a_credential_is_sent_in_is_redacted():
    """The Redactor of a configuration takes out each credential as configured, percent-decoded and -encoded,
    base64, and the Basic auth token the URL's userinfo becomes."""
    password = f"p@ss:{secrets.token_hex(8)}/x"
    url = f"http://capuser:{quote(password, safe='')}@127.0.0.1:9/v1?api-key=Q{secrets.token_hex(10)}"
    config = JudgeConfig(base_url=url, api_key=f"sk-{secrets.token_hex(20)}")
    query_key = url.rsplit("=", 1)[1]
    redact = Redactor.for_config(config)
    basic = base64.b64encode(f"capuser:{password}".encode()).decode()
    credentials = [password, f"capuser:{password}", config.api_key, query_key]
    text = " | ".join([f"Authorization: Basic {basic}", f"Bearer {config.api_key}", url, password, quote(password, safe=""),
                       base64.b64encode(config.api_key.encode()).decode(), f"capuser:{password}", quote(query_key)])
    assert_no_secret([redact(text)], credentials)


def echo_case(server: OpenAITestServer, case: str, work: Path) -> tuple[dict[str, str], list[str], str]:
    """The environment of one credential case, the credentials it uses, and the Authorization header the
    server must have received (proof the credential was really sent)."""
    user, password = "capuser", f"pw/{secrets.token_hex(8)}@x"
    key = f"sk-capjudge-{secrets.token_hex(16)}"
    userinfo = f"{user}:{quote(password, safe='')}@{host_of(server)}"
    basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    if case == "bearer-key":
        return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": key}, [key], f"Bearer {key}"
    if case == "userinfo":
        return {"OPENAI_BASE_URL": f"http://{userinfo}/v1"}, [password, f"{user}:{password}"], basic
    if case == "query-key":
        query = f"q{secrets.token_hex(12)}"
        return ({"OPENAI_BASE_URL": f"{server.base_url}?api-key={query}", "OPENAI_API_KEY": key}, [query, key],
                f"Bearer {key}")
    assert case == "panel-member"
    panel = write_panel(work.parent / "in", {"name": "a", "model": TEST_JUDGE_MODEL, "base_url": f"http://{userinfo}/v1"},
                        {"name": "b", "model": "other", "base_url": server.base_url, "api_key_env": "B_KEY"})
    return {"CAPJUDGE_PANEL": str(panel), "B_KEY": key}, [password, f"{user}:{password}", key], basic


@pytest.mark.parametrize("case", ["bearer-key", "userinfo", "query-key", "panel-member"])
def test_no_credential_an_echoing_server_sends_back_reaches_disk_or_screen(case, tmp_path):
    work = tmp_path / "work"
    with OpenAITestServer() as server:
        server.echo_credentials = True
        variables, credentials, sent = echo_case(server, case, work)
        done = judge(work, **{"OPENAI_API_KEY": TEST_API_KEY, **variables})
        headers = {entry.headers.get("authorization") for entry in server.log}
    assert done.returncode == 0, done.stderr[-3000:]
    assert sent in headers  # the credential really went out, and came back in every reply
    assert_no_secret([done.stdout, done.stderr], credentials, where="screen")
    assert_no_secret_on_disk(work, credentials)
    record = "judged@a" if case == "panel-member" else "judged"  # the member whose URL carries the credential
    replies = [sample[record]["judgment"]["raw_reply"] for sample in samples(work).values()]
    assert len(replies) == N_ITEMS and all("[REDACTED]" in reply for reply in replies), replies[:1]


# ---------------------------------------------------------------------------------------------------------
# Item 3: a key pasted where a variable's name belongs is never shown


@pytest.mark.parametrize("pasted", [f"sk-proj-{secrets.token_hex(24)}", secrets.token_hex(16), f"AIzaSyB3{secrets.token_hex(14)}"],
                         ids=["openai", "azure", "google"])
def test_a_key_pasted_into_api_key_env_is_refused_without_showing_it(pasted, tmp_path):
    panel = write_panel(tmp_path / "in", {"name": "a", "model": "gpt-4o", "api_key_env": pasted},
                        {"name": "b", "model": "gpt-4o-mini", "api_key_env": "B_KEY"})
    done = judge(tmp_path / "work", None, CAPJUDGE_PANEL=str(panel), B_KEY="sk-" + "b" * 40)
    refusal_line(done, JUDGE, str(panel), "'a'", "`api_key_env` does not look like a variable name", secrets=[pasted])
    assert_no_secret_on_disk(tmp_path / "work", [pasted])


# ---------------------------------------------------------------------------------------------------------
# Item 4: a judge model name with whitespace around it


@pytest.mark.parametrize("variable, value", [("MODEL_VERSION", " test-judge"), ("CAPJUDGE_JUDGE_MODEL", "test-judge\t"),
                                             ("panel", "test-judge ")])
def test_a_judge_model_name_with_surrounding_whitespace_is_refused_naming_where_it_came_from(variable, value, tmp_path):
    with OpenAITestServer() as server:
        if variable == "panel":
            panel = write_panel(tmp_path / "in", {"name": "a", "model": value, "base_url": server.base_url},
                                {"name": "b", "model": "test-judge", "base_url": server.base_url})
            done = judge(tmp_path / "work", server.base_url, CAPJUDGE_PANEL=str(panel))
            wanted = (str(panel), "'a'", "`model`")
        else:
            env = {"MODEL_VERSION": ""} if variable == "CAPJUDGE_JUDGE_MODEL" else {}
            done = judge(tmp_path / "work", server.base_url, **{**env, variable: value})
            wanted = (variable,)
        assert server.log == [] and server.preflights == []
    refusal_line(done, JUDGE, *wanted, repr(value), "leading or trailing whitespace")


# ---------------------------------------------------------------------------------------------------------
# Item 6: every count has an upper bound, checked before any request


@pytest.mark.parametrize("variable, value, problem", [
    ("CAPJUDGE_MAX_CONCURRENCY", "100000", f"must be at most {MAX_CONCURRENCY:,}"),
    ("CAPJUDGE_RPM", "1000000000000", "must be at most 1,000,000"),
    ("CAPJUDGE_TPM", "1" + "0" * 15, "must be at most 10,000,000,000"),
    ("CAPJUDGE_TIMEOUT", "inf", "must be at most 3,600"),
    ("CAPJUDGE_TIMEOUT", "nan", "must be positive"),
    ("CAPJUDGE_MAX_ATTEMPTS", "1000000", "must be at most 100"),
    ("CAPJUDGE_BREAKER_THRESHOLD", "1000000000", "must be at most 100,000"),
    ("CAPJUDGE_RATE_WINDOW_SECONDS", "1e9", "must be at most 3,600"),
])
def test_a_count_beyond_its_bound_is_one_line_before_any_request(variable, value, problem, tmp_path):
    with OpenAITestServer() as server:
        done = judge(tmp_path / "work", server.base_url, **{variable: value})
        assert server.log == [] and server.preflights == []
    refusal_line(done, JUDGE, variable, problem)


def test_a_panel_members_count_beyond_its_bound_is_refused_and_nothing_judged_is_lost(tmp_path):
    """A judged run, then the same run with a member's `max_concurrency` out of bounds: refused before any
    request, the reply cache untouched; the corrected run is answered wholly from the cache."""
    cache = tmp_path / "cache.sqlite"
    with OpenAITestServer() as server:
        members = ({"name": "a", "model": "test-judge", "base_url": server.base_url},
                   {"name": "b", "model": "second-judge", "base_url": server.base_url})
        good = write_panel(tmp_path / "good", *members)
        assert judge(tmp_path / "first", server.base_url, CAPJUDGE_PANEL=str(good), CAPJUDGE_CACHE=str(cache)).returncode == 0
        asked, before = len(server.log), cache.read_bytes()
        bad = write_panel(tmp_path / "bad", {**members[0], "max_concurrency": 5000}, members[1])
        done = judge(tmp_path / "refused", server.base_url, CAPJUDGE_PANEL=str(bad), CAPJUDGE_CACHE=str(cache))
        refusal_line(done, JUDGE, str(bad), "'a'", "`max_concurrency` must be at most 1,024, got 5000")
        assert len(server.log) == asked and cache.read_bytes() == before
        again = judge(tmp_path / "again", server.base_url, CAPJUDGE_PANEL=str(good), CAPJUDGE_CACHE=str(cache))
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(server.log) == asked  # all from the cache


def test_the_demo_with_a_remote_judge_and_none_configured_is_one_line_before_anything_is_made(tmp_path):
    """`capjudge demo --remote-judge` with no key and no server: the pre-flight's one line, exit 2 (it was a
    traceback, found by a first-hour walkthrough), and no output folder made."""
    env = {"CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = run_capjudge_cli(["demo", "--remote-judge", "--limit", "1", "--out", str(tmp_path / "demo")], env=env,
                            cwd=REPO_ROOT, timeout=600)
    line = refusal_line(done, "capjudge demo: no API key for the judge at https://api.openai.com/v1")
    assert "set OPENAI_API_KEY" in line
    assert not (tmp_path / "demo").exists()


def test_a_run_refused_at_its_pre_flight_leaves_no_empty_folder_behind(tmp_path):
    """An unreachable judge: one line, exit 2, and neither --out nor the model's folder in it left behind empty
    (found by a first-hour walkthrough)."""
    done = judge(tmp_path / "work", "http://127.0.0.1:9/v1")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "work" / "out").exists()


def test_the_demo_with_an_unreachable_remote_judge_says_why_not_only_where_the_log_is(tmp_path):
    """The pre-flight's reason is printed with the failure (it was only in lmms-eval's log), exit 2 as the
    refusal's own (found by a first-hour walkthrough)."""
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
           "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    done = run_capjudge_cli(["demo", "--remote-judge", "--limit", "1", "--caption-sets", "good", "--out",
                             str(tmp_path / "demo")], env=env, cwd=REPO_ROOT, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.replace("\r", "\n").splitlines() if "lmms-eval failed" in line]
    assert "caption set 'good' (exit 2, no new results file): pre-flight: cannot reach the judge at " \
           "http://127.0.0.1:9/v1" in line and str(tmp_path / "demo" / "lmms_eval_good.log") in line

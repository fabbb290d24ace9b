"""A panel of judges in one lmms-eval run (#28): three scripted judges on the test server with known biases
(tests/support/openai_server.py `panel_responder`: one harsh, one lenient, one that prefers longer captions, each with
its own noise), a panel file naming them, and the real demo tasks (real videos, real lmms-eval).

What is checked: every member's per-item metrics are exactly its script; the panel's are the pooled scripts;
the agreement figures are the statistics of those scores and recover the known biases within their intervals;
a member that dies mid-run is reported by name while the quorum carries the panel, and the rerun asks only
that member's missing replies; `capjudge judge` gives the same values; a panel file's problems are one line.
"""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import statistics
from collections import Counter
from pathlib import Path

import krippendorff
import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr

from capjudge.judges.client.config import ConfigError
from capjudge.judges.client.panel import load_panel
from tests.support.paths import REPO_ROOT, shared_path
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import REPO_TASKS, harness_env, judge_server, launch_lmms_eval, run_capjudge_cli, run_lmms_eval, venv_python
from tests.support.openai_server import PANEL_MODELS, Fault, panel_grade, panel_responder, panel_scores

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
CAPTION_OF = {row["id"]: row["caption"] for row in map(json.loads, CAPTIONS.read_text().splitlines())}
TASKS = ("gveval_demo", "anycap_style_demo")
N_ITEMS = 10
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance")


def write_panel(folder: Path, base_url: str, quorum: int | None = None) -> Path:
    members = [{"name": model, "model": model, "base_url": base_url} for model in PANEL_MODELS]
    path = folder / "panel.yaml"
    path.write_text(json.dumps({"members": members, **({"quorum": quorum} if quorum else {})}))
    return path


def panel_run(tmp_path: Path, judge, panel_file: Path, name: str, cache: Path, **extra):
    env = {"CAPJUDGE_PANEL": str(panel_file), **extra}
    return launch_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=",".join(TASKS),
                            output_path=tmp_path / name, judge_base_url=judge.base_url, cache_path=cache, env=env)


@pytest.fixture(scope="module")
def panel_outcome(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("panel")
    with judge_server(responder=panel_responder) as judge:
        run = panel_run(tmp_path, judge, write_panel(tmp_path, judge.base_url), "run", tmp_path / "cache.sqlite").require_run()
        models = [entry.body["model"] for entry in judge.log]
    return run, models, tmp_path


def by_item(run, task):
    return {sample["judged"]["item_id"]: sample for sample in run.samples(task)}


def test_every_member_judges_every_item_once_and_its_metrics_are_its_script(panel_outcome):
    run, models, _ = panel_outcome
    assert sorted(models) == sorted(PANEL_MODELS * N_ITEMS * len(TASKS))  # one request per member, item and task
    results = run.results()["results"]
    for item_id, sample in by_item(run, "gveval_demo").items():
        caption = CAPTION_OF[item_id]
        for model in PANEL_MODELS:
            script = panel_scores(model, caption)
            assert [sample[f"gveval_{d}@{model}"] for d in DIMENSIONS] == pytest.approx(script, abs=1e-9)
            record = sample[f"judged@{model}"]
            assert record["judge"]["model"] == model and record["judge"]["panel_member"] == model
            assert record["judgment"]["failure"] is None and record["judgment"]["requests"] == 1
        # The panel: the mean of the members' scores, dimension by dimension.
        for column, dimension in enumerate(DIMENSIONS):
            pooled = statistics.fmean(panel_scores(m, caption)[column] for m in PANEL_MODELS)
            assert sample[f"gveval_{dimension}"] == pytest.approx(pooled, abs=1e-9)
        panel_record = sample["judged"]
        assert panel_record["judge"]["model"] == "panel(harsh,lenient,long)"
        assert panel_record["judge"]["panel"]["quorum"] == 2
        assert panel_record["judgment"]["panel"] == {"judged_by": list(PANEL_MODELS), "not_judged": {}, "quorum": 2}
    gveval = results["gveval_demo"]
    for model in PANEL_MODELS:
        per_item = [s[f"gveval_mean@{model}"] for s in run.samples("gveval_demo")]
        assert gveval[f"gveval_mean@{model},none"] == pytest.approx(statistics.fmean(per_item), abs=1e-9)
        assert gveval[f"gveval_failed@{model},none"] == 0 and gveval[f"judged@{model},none"] == N_ITEMS
    assert gveval["gveval_mean,none"] == pytest.approx(
        statistics.fmean(gveval[f"gveval_mean@{m},none"] for m in PANEL_MODELS), abs=1e-9)


def test_anycap_panel_reports_the_mean_and_the_median_grade(panel_outcome):
    run, _, _ = panel_outcome
    results = run.results()["results"]["anycap_style_demo"]
    medians = []
    for item_id, sample in by_item(run, "anycap_style_demo").items():
        for model in PANEL_MODELS:
            judged = sample[f"judged@{model}"]["judgment"]
            assert judged["judge_score"] == panel_grade(model, CAPTION_OF[item_id])  # before the length rule
        finals = [sample[f"anycap_score@{m}"] for m in PANEL_MODELS]
        assert sample["anycap_score"] == pytest.approx(statistics.fmean(finals), abs=1e-9)
        assert sample["anycap_score_median"] == statistics.median(finals)
        medians.append(statistics.median(finals))
    assert results["anycap_score_median,none"] == pytest.approx(statistics.fmean(medians), abs=1e-9)


def member_pairs():
    """(i, j, the metric of their tau-b) for every pair of the scripted members."""
    return [(i, j, f"panel_kendall_b@{PANEL_MODELS[i]}~{PANEL_MODELS[j]}")
            for i in range(len(PANEL_MODELS)) for j in range(i + 1, len(PANEL_MODELS))]


def _member_matrix(run, task, metric):
    samples = run.samples(task)
    scores = np.array([[s[f"{metric}@{m}"] for m in PANEL_MODELS] for s in samples], dtype=float)
    return samples, scores, np.array([s[metric] for s in samples], dtype=float)


def test_agreement_is_the_statistics_of_the_members_scores_and_recovers_their_biases(panel_outcome):
    run, _, _ = panel_outcome
    results = run.results()["results"]["gveval_demo"]
    samples, scores, panel = _member_matrix(run, "gveval_demo", "gveval_mean")
    alpha = krippendorff.alpha(reliability_data=scores.T, level_of_measurement="interval")
    assert results["panel_alpha,none"] == pytest.approx(alpha, abs=1e-9)
    assert results["panel_alpha_ci_low,none"] <= alpha <= results["panel_alpha_ci_high,none"]
    for i, j, name in member_pairs():
        assert results[f"{name},none"] == pytest.approx(kendalltau(scores[:, i], scores[:, j]).statistic, abs=1e-9)
        assert results[f"{name.replace('@', '_ci_low@')},none"] <= results[f"{name},none"]
    # Offsets: the observed mean (member - panel), and the noise-free offset of each script inside its interval.
    words = np.array([len(CAPTION_OF[s["judged"]["item_id"]].split()) for s in samples])
    biases = np.stack([np.full(len(words), -20.0), np.full(len(words), 10.0), 2.0 * (words - 12)], axis=1)
    true_offsets = (biases - biases.mean(axis=1, keepdims=True)).mean(axis=0)
    for column, model in enumerate(PANEL_MODELS):
        observed = results[f"panel_offset@{model},none"]
        assert observed == pytest.approx(float(np.mean(scores[:, column] - panel)), abs=1e-9)
        low, high = results[f"panel_offset_ci_low@{model},none"], results[f"panel_offset_ci_high@{model},none"]
        assert low <= true_offsets[column] <= high, (model, low, true_offsets[column], high)
    assert results["panel_offset_ci_high@harsh,none"] < 0 < results["panel_offset_ci_low@lenient,none"]
    # The length-biased member's offset from the panel grows with the caption's length.
    long_offset = scores[:, PANEL_MODELS.index("long")] - panel
    assert spearmanr(words, long_offset).statistic > 0.8


def test_anycap_agreement_is_ordinal(panel_outcome):
    run, _, _ = panel_outcome
    results = run.results()["results"]["anycap_style_demo"]
    _, scores, _ = _member_matrix(run, "anycap_style_demo", "anycap_score")
    expected = krippendorff.alpha(reliability_data=scores.T, level_of_measurement="ordinal")
    assert results["panel_alpha,none"] == pytest.approx(expected, abs=1e-9)
    for i, j, name in member_pairs():
        tau = kendalltau(scores[:, i], scores[:, j]).statistic
        assert math.isfinite(tau) and results[f"{name},none"] == pytest.approx(tau)


def test_capjudge_judge_gives_the_same_values_in_one_process_from_the_cache_and_in_two_afresh(panel_outcome):
    run, _, tmp_path = panel_outcome
    (tmp_path / "again").mkdir()
    with judge_server(responder=panel_responder) as judge:
        judge.identify_clients = True  # the server finds which process opened each connection
        panel_file = write_panel(tmp_path / "again", judge.base_url)
        for name, cache, processes in (("cached", tmp_path / "cache.sqlite", "1"), ("two", tmp_path / "two.sqlite", "2")):
            env = harness_env(judge.base_url, cache_path=cache, datasets_cache=tmp_path / "hf",
                              extra={"CAPJUDGE_PANEL": str(panel_file)})
            judge.log.clear()
            done = run_capjudge("judge", "--captions", str(CAPTIONS), "--task", "gveval_demo", "--out",
                                str(tmp_path / name), "--processes", processes, env=env, timeout=300)
            assert done.returncode == 0, done.stderr
            samples_file = next((tmp_path / name).rglob("*_samples_gveval_demo.jsonl"))
            judged = {json.loads(line)["judged"]["item_id"]: json.loads(line)
                      for line in samples_file.read_text().splitlines()}
            if name == "cached":
                # Same models at another port: the cache keys name the model and the request, so all is cached.
                assert judge.log == []
            else:
                # Two worker processes, each asking every member about its half of the items, once: each reports
                # its pid, items and requests; the server saw every member asked about every item once, and
                # only from those two processes (it names the owner of every connection).
                reported = {int(pid): (int(items), int(requests)) for pid, items, requests in
                            re.findall(r"process \d/2 \(pid (\d+)\): (\d+) items, 0 failed, (\d+) requests", done.stderr)}
                assert sorted(reported.values()) == [(N_ITEMS // 2, N_ITEMS // 2 * len(PANEL_MODELS))] * 2, done.stderr
                assert Counter(entry.body["model"] for entry in judge.log) == {m: N_ITEMS for m in PANEL_MODELS}
                seen = {entry.client_pid for entry in judge.log}
                assert seen == set(reported), (seen, reported)
            for item_id, sample in by_item(run, "gveval_demo").items():
                for key, value in sample.items():
                    if key.startswith(("gveval_", "panel_")):
                        assert judged[item_id][key] == value, (name, item_id, key)


def test_a_member_that_dies_is_reported_the_quorum_carries_the_panel_and_the_rerun_asks_only_its_replies(tmp_path):
    alive = {"long": 3}  # replies the "long" judge gives before it dies

    def dying_long(body):
        if body.get("model") == "long":
            if alive["long"] <= 0:
                return Fault("reset")
            alive["long"] -= 1
        return panel_responder(body)

    cache = tmp_path / "cache.sqlite"
    with judge_server(responder=dying_long) as judge:
        panel_file = write_panel(tmp_path, judge.base_url, quorum=2)
        extra = {"CAPJUDGE_MAX_ATTEMPTS": "1", "CAPJUDGE_PREFLIGHT": "0", "CAPJUDGE_MAX_CONCURRENCY": "1"}
        outcome = launch_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good",
                                   tasks="gveval_demo", output_path=tmp_path / "first", judge_base_url=judge.base_url,
                                   cache_path=cache, env={"CAPJUDGE_PANEL": str(panel_file), **extra})
        first = outcome.require_results()
        # The member is named with its failures; the run says so in its status (its failure rate is 70%).
        assert outcome.returncode == 3, outcome.output[-3000:]
        assert "7 of 10 items (70%) were not judged by panel member 'long'" in outcome.stderr
        results = first.results()["results"]["gveval_demo"]
        assert results["gveval_failed@long,none"] == 7 and results["gveval_failed,none"] == 0
        for sample in first.samples("gveval_demo"):
            caption = CAPTION_OF[sample["judged"]["item_id"]]
            judged_by = sample["judged"]["judgment"]["panel"]["judged_by"]
            assert sample["gveval_accuracy"] == pytest.approx(
                statistics.fmean(panel_scores(m, caption)[0] for m in judged_by), abs=1e-9)
        failed_items = {s["judged"]["item_id"] for s in first.samples("gveval_demo") if s["gveval_failed@long"]}
        assert len(failed_items) == 7

        # The member is back: the rerun asks only its 7 missing replies, and the panel is whole again.
        alive["long"] = 100
        judge.log.clear()
        second = run_lmms_eval(model="captions_file", model_args=f"path={CAPTIONS},model_name=good",
                               tasks="gveval_demo", output_path=tmp_path / "second", judge_base_url=judge.base_url,
                               cache_path=cache, env={"CAPJUDGE_PANEL": str(panel_file), **extra})
        asked = [(entry.body["model"], entry.prompt_text) for entry in judge.log]
        assert [model for model, _ in asked] == ["long"] * 7
        assert {item for item in failed_items if any(CAPTION_OF[item] in text for _, text in asked)} == failed_items
        assert second.results()["results"]["gveval_demo"]["gveval_failed@long,none"] == 0


def test_panel_file_problems_are_one_line_naming_the_member(tmp_path, monkeypatch):
    def problem(content: object, env: dict[str, str] | None = None) -> str:
        path = tmp_path / "panel.json"
        path.write_text(json.dumps(content) if not isinstance(content, str) else content)
        with pytest.raises(ConfigError) as raised:
            load_panel(path, env or {})
        assert "\n" not in str(raised.value)
        return str(raised.value)

    local = "http://127.0.0.1:9/v1"
    two = [{"name": "a", "model": "m1", "base_url": local}, {"name": "b", "model": "m2", "base_url": local}]
    assert "an API key does not belong in a file" in problem({"members": [{**two[0], "api_key": "sk-x"}, two[1]]})
    assert "member 'a': unknown keys ['temprature']" in problem({"members": [{**two[0], "temprature": 0}, two[1]]})
    assert "two members are named 'a'" in problem({"members": [two[0], {**two[1], "name": "a"}]})
    assert "one judge, not two opinions" in problem({"members": [two[0], {**two[0], "name": "c"}]})
    assert "`quorum` must be a whole number from 1 to 2" in problem({"members": two, "quorum": 3})
    assert "at least two judges" in problem({"members": two[:1]})
    assert "member 1: `name` must be" in problem({"members": [{**two[0], "name": "a b"}, two[1]]})
    assert "member 'b': `model` is missing" in problem({"members": [two[0], {"name": "b", "base_url": local}]})
    assert "not YAML or JSON" in problem("members: [")
    remote = {"name": "r", "model": "gpt-4o"}
    assert "member 'r': api_key_env names MY_KEY, which is not set" in problem(
        {"members": [two[0], {**remote, "api_key_env": "MY_KEY"}]})
    assert "member 'r': no API key for OpenAI: name the variable" in problem({"members": [two[0], remote]},
                                                                               {"OPENAI_API_KEY": "sk-" + "x" * 40})
    # A member is exactly what its entry says: the single judge's endpoint, model and key do not leak into it.
    path = tmp_path / "ok.yaml"
    path.write_text(json.dumps({"members": [two[0], {**remote, "api_key_env": "R_KEY"}]}))
    secret = "sk-" + "s" * 40
    panel = load_panel(path, {"OPENAI_BASE_URL": "http://elsewhere:1/v1", "MODEL_VERSION": "other", "R_KEY": secret,
                              "CAPJUDGE_MAX_CONCURRENCY": "3"})
    assert panel.quorum == 2 and panel.names == ("a", "r")
    assert panel.members[1].config.endpoint_label == "https://api.openai.com/v1"
    assert panel.members[1].config.model == "gpt-4o" and panel.members[1].config.api_key == secret
    assert panel.members[1].config.max_concurrency == 16  # the default, not the single judge's setting
    assert secret not in json.dumps(panel.logged())


def test_a_panel_read_without_keys_has_each_members_configuration_less_its_key(tmp_path):
    """`capjudge estimate` reads the panel without keys (configs=False) and finds each member's budget folder from
    its `keyless` configuration: the configuration a run sends with, less the key, cache scope included."""
    from dataclasses import replace

    from capjudge.judges.client.budget import judge_budget_folder

    secret = "sk-" + "k" * 40
    members = [{"name": "here", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
               {"name": "there", "model": "m", "base_url": "http://127.0.0.1:10/v1"},  # one model, two servers
               {"name": "openai", "model": "gpt-4o", "api_key_env": "THE_KEY"}]
    path = tmp_path / "panel.json"
    path.write_text(json.dumps({"members": members}))
    env = {"CAPJUDGE_CACHE": str(tmp_path / "c" / "cache.sqlite"), "CAPJUDGE_TIMEOUT": "7"}
    run = load_panel(path, {**env, "THE_KEY": secret})
    counted = load_panel(path, env, configs=False)  # THE_KEY unset
    for sent, read in zip(run.members, counted.members):
        assert read.config is None and read.keyless is not None and read.keyless.api_key is None
        assert replace(read.keyless, api_key=sent.config.api_key) == sent.config
        assert judge_budget_folder(read.keyless) == judge_budget_folder(sent.config)
    assert [m.keyless.cache_scope is not None for m in counted.members] == [True, True, False]
    assert secret not in repr(counted) and secret not in repr(run.members[2].keyless)
    # What a run refuses in a member's place is refused by the keyless read too: one line naming the member.
    path.write_text(json.dumps({"members": [members[0], {"name": "az", "model": "d", "api_type": "azure"}]}))
    with pytest.raises(ConfigError, match=r"^panel file .*: member 'az': API_TYPE=azure needs AZURE_OPENAI_ENDPOINT"):
        load_panel(path, env, configs=False)


def test_estimate_prices_a_panel_run_per_member_without_any_key(tmp_path):
    members = [{"name": "cheap", "model": "gpt-4o-mini", "api_key_env": "NOT_SET_HERE", "price_input": 0.15,
                "price_output": 0.6},
               {"name": "big", "model": "gpt-4o", "api_key_env": "NOT_SET_HERE", "price_input": 2.5, "price_output": 10},
               {"name": "local", "model": "qwen", "base_url": "http://127.0.0.1:9/v1"}]
    panel_file = tmp_path / "panel.yaml"
    panel_file.write_text(json.dumps({"members": members}))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "hf"), "CAPJUDGE_PANEL": str(panel_file)}
    done = run_capjudge_cli(["estimate", "--task", "gveval_demo", "--price-input", "1", "--price-output", "1"],
                            env=env, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    tokens_in = int(re.search(r"input tokens:\s+([\d,]+)", out).group(1).replace(",", ""))
    tokens_out = float(re.search(r"output tokens:\s+([\d,]+)", out).group(1).replace(",", ""))
    assert f"task gveval_demo: {N_ITEMS} items, {N_ITEMS} requests expected per judge" in out

    def cost(price_in, price_out):
        return f"${(tokens_in * price_in + tokens_out * price_out) / 1e6:,.2f}"

    assert f"cheap (gpt-4o-mini): {N_ITEMS} requests, cost {cost(0.15, 0.6)} (prices from the panel file)" in out
    assert f"big (gpt-4o): {N_ITEMS} requests, cost {cost(2.5, 10)} (prices from the panel file)" in out
    assert f"local (qwen): {N_ITEMS} requests, cost {cost(1, 1)} (prices from --price-input/--price-output)" in out
    total = (tokens_in * (0.15 + 2.5 + 1) + tokens_out * (0.6 + 10 + 1)) / 1e6
    assert f"panel total: {3 * N_ITEMS} requests, cost ${total:,.2f}" in out
    # Each member's learned charge is looked up where a run of it would keep it (no run yet: none), found
    # without the key its variable would hold (OpenAI's members need one to run), and no folder is made to look.
    for name, where in (("cheap", "https://api.openai.com/v1, gpt-4o-mini"), ("big", "https://api.openai.com/v1, gpt-4o"),
                        ("local", "http://127.0.0.1:9/v1, qwen")):
        assert re.search(rf"^learned charge of panel member {name} \({re.escape(where)}\): none learned yet "
                         rf"\({re.escape(str(tmp_path / '.cache' / 'capjudge'))}/budget-[0-9a-f]+ holds none\)$", out, re.MULTILINE), out
    assert not (tmp_path / ".cache").exists()


def _panel_references_run(tmp_path, task: str, limit: int, data_env: dict[str, str]):
    """A panel run of a text-only references task over the rated candidates of a human-rated set."""
    with judge_server(responder=panel_responder) as judge:
        return run_lmms_eval(model="captions_file", model_args="field=candidate", tasks=task,
                             output_path=tmp_path / task, judge_base_url=judge.base_url,
                             cache_path=tmp_path / "cache.sqlite", limit=limit,
                             env={"CAPJUDGE_PANEL": str(write_panel(tmp_path, judge.base_url)), **data_env})


def test_correlate_gives_each_member_and_the_panel_against_the_human_ratings(tmp_path):
    """`capjudge correlate --msvd-eval --run` on a panel run of MSVD-Eval (the text-only `gveval_references`
    task, 20 items): one scorer for the panel and one per member, each its per-item main score against the
    raters (annotators expanded, as G-VEval does), equal to scipy's tau-b on the same pairs."""
    msvd = shared_path("data", "msvd_eval", "MSVD-Eval.json")
    run = _panel_references_run(tmp_path, "gveval_references", 20, {"CAPJUDGE_MSVD_EVAL_JSON": str(msvd)})
    done = run_capjudge("correlate", "--msvd-eval", str(msvd), "--run", str(run.results_file), "--task",
                        "gveval_references", "--bootstrap", "0", "--format", "json", timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {key for key in report if not key.startswith("_")} == {"panel", *PANEL_MODELS}
    human = {item_id: row["human_score"] for item_id, row in json.loads(msvd.read_text()).items()}
    samples = run.samples("gveval_references")
    for scorer, field in (("panel", "gveval_mean"), *((m, f"gveval_mean@{m}") for m in PANEL_MODELS)):
        judge_values, human_values = [], []
        for sample in samples:
            for annotator in human[sample["judged"]["item_id"]]:
                judge_values.append(sample[field])
                human_values.append(annotator[4])  # the mean column
        cell = report[scorer]["mean"]
        assert cell["n"] == len(judge_values) == 2 * 20
        assert cell["kendall_b"]["value"] == pytest.approx(kendalltau(judge_values, human_values).statistic, abs=1e-9)
    # A run without samples of the task named is one line, exit 2.
    wrong = run_capjudge("correlate", "--msvd-eval", str(msvd), "--run", str(run.results_file), "--task", "gveval")
    assert wrong.returncode == 2 and "no samples of task 'gveval'" in wrong.stderr, wrong.stderr


def test_vatex_reads_each_members_scores_of_a_panel_run(tmp_path):
    """`capjudge vatex FILE RUN --metric gveval_mean@<member>` (VATEX-EVAL, the text-only references task, 12
    candidates) reports the member exactly as the same scores given as a JSONL scorer file."""
    vatex = shared_path("data", "vatex_eval", "vid_cans_score_dict.json")
    run = _panel_references_run(tmp_path, "gveval_vatex_references", 12, {"CAPJUDGE_VATEX_EVAL_JSON": str(vatex)})
    as_jsonl = tmp_path / "lenient.jsonl"
    lines = []
    for sample in run.samples("gveval_vatex_references"):
        clip_id, index = sample["judged"]["item_id"].rsplit("#", 1)
        lines.append(json.dumps({"clip_id": clip_id, "candidate_index": int(index), "score": sample["gveval_mean@lenient"]}))
    as_jsonl.write_text("\n".join(lines) + "\n")

    def rows(scorer, *extra):
        done = run_capjudge("vatex", str(vatex), str(scorer), *extra, "--resamples", "0", "--format", "json", timeout=300)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        return [{k: v for k, v in row.items() if k not in ("name", "source")} for row in report["scorers"][:1]]

    assert rows(run.run_dir, "--metric", "gveval_mean@lenient") == rows(as_jsonl)
    assert rows(run.run_dir, "--metric", "gveval_mean@lenient") != rows(run.run_dir, "--metric", "gveval_mean@harsh")
    missing = run_capjudge("vatex", str(vatex), str(run.run_dir), "--metric", "gveval_mean@nobody", "--resamples", "0")
    assert missing.returncode == 2 and "has no per-item metric 'gveval_mean@nobody'" in missing.stderr, missing.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_accelerate_processes_judge_with_the_panel_as_one_process_does(panel_outcome, tmp_path):
    """lmms-eval under `accelerate launch` with 2 CPU processes (gloo; see tests/tasks/harness/test_multi_process.py for why
    --multi_gpu): each rank asks every member about its half of the items, once, and every per-item value
    and aggregate equals the one-process panel run's."""
    run, _, _ = panel_outcome
    with judge_server(responder=panel_responder) as judge:
        env = harness_env(judge.base_url, cache_path=tmp_path / "cache.sqlite", datasets_cache=tmp_path / "hf",
                          extra={"ACCELERATE_USE_CPU": "true",
                                 "CAPJUDGE_PANEL": str(write_panel(tmp_path, judge.base_url))})
        command = [str(Path(venv_python()).with_name("accelerate")), "launch", "--num_processes", "2", "--multi_gpu",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(_free_port()), "-m", "lmms_eval", "--model", "captions_file",
                   "--model_args", f"path={CAPTIONS},model_name=good", "--tasks", "gveval_demo", "--output_path",
                   str(tmp_path / "out"), "--include_path", str(REPO_TASKS), "--log_samples", "--verbosity", "WARNING"]
        done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
        asked = Counter(entry.body["model"] for entry in judge.log)
    results = list((tmp_path / "out").rglob("*_results.json"))
    assert done.returncode == 0 and len(results) == 1, done.stderr[-3000:]
    assert asked == {model: N_ITEMS for model in PANEL_MODELS}
    date_id = results[0].name.removesuffix("_results.json")
    lines = [json.loads(line) for line in results[0].with_name(f"{date_id}_samples_gveval_demo.jsonl").read_text().splitlines()]
    for model in PANEL_MODELS:  # both ranks judged, each its half, with every member
        assert Counter(line[f"judged@{model}"]["judgment"]["process"]["rank"] for line in lines) == {0: 5, 1: 5}
    two = {line["judged"]["item_id"]: line for line in lines}
    for item_id, sample in by_item(run, "gveval_demo").items():
        assert {k: v for k, v in two[item_id].items() if k.startswith(("gveval_", "panel_"))} == \
               {k: v for k, v in sample.items() if k.startswith(("gveval_", "panel_"))}, item_id
    one_results = run.results()["results"]["gveval_demo"]
    two_results = json.loads(results[0].read_text())["results"]["gveval_demo"]
    assert {k: v for k, v in two_results.items() if "stderr" not in k and k != "alias"} == \
           {k: v for k, v in one_results.items() if "stderr" not in k and k != "alias"}

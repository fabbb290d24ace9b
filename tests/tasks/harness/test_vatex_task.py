"""The VATEX-EVAL tasks run by the real lmms-eval CLI over the real ../shared file, judged by the test server.

Two lmms-eval runs (module-scoped, ~25 s each), both with `captions_file field=candidate` (the judge scores the
captions the annotators rated) and --limit 12 (the first 2 clips' 6 candidates each):
- `gveval_vatex_references` (text only, the YAML's 9 references); `capjudge vatex` then reads that run folder;
- `gveval_vatex` (frames, reference-free) and `gveval_vatex_combined` (frames + references) with
  CAPJUDGE_VATEX_REFERENCES=1, on generated STAND-IN clips named like the VATEX ids (the real clips are on
  YouTube, not here): the judge sees their strips, and the combined prompt carries only the first reference.
Plus the settings unit-tested, and the runs that must stop at load (bad reference count, no data variable).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from capjudge.judges.client.config import ConfigError
from capjudge.judges.datasets.vatex_eval import load_vatex_eval, ratings_matrix
from capjudge.tasks.harness.gveval_task import GVEvalSettings
from tests.support.paths import shared_path
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_server, launch_lmms_eval, run_lmms_eval
from scipy.stats import kendalltau, spearmanr
from tests.support.videos import make_video

pytestmark = pytest.mark.slow

VATEX = ("data", "vatex_eval", "vid_cans_score_dict.json")
LIMIT = 12  # the first 2 clips, 6 candidates each
CLIPS = 2
SCORE_METRICS = ("gveval_mean", "gveval_accuracy", "gveval_completeness", "gveval_conciseness", "gveval_relevance")


def _metric(results: dict, task: str, name: str):
    return results["results"][task][f"{name},none"]


@pytest.fixture(scope="module")
def vatex():
    path = shared_path(*VATEX)
    return SimpleNamespace(path=path, candidates=load_vatex_eval(path))


@pytest.fixture(scope="module")
def references_run(vatex, tmp_path_factory):
    root = tmp_path_factory.mktemp("vatex_references")
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_vatex_references",
            output_path=root / "out", judge_base_url=judge.base_url, cache_path=root / "cache.sqlite", limit=LIMIT,
            env={"CAPJUDGE_VATEX_EVAL_JSON": str(vatex.path)},
        )
        requests = list(judge.log)
    return SimpleNamespace(run=run, requests=requests, root=root)


@pytest.fixture(scope="module")
def video_run(vatex, tmp_path_factory):
    root = tmp_path_factory.mktemp("vatex_videos")
    clips = root / "clips"
    clips.mkdir()
    for clip_id in dict.fromkeys(c.clip_id for c in vatex.candidates[:LIMIT]):
        make_video(clips / f"{clip_id}.mp4", n_frames=12)  # a stand-in clip under the real VATEX id
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_vatex,gveval_vatex_combined",
            output_path=root / "out", judge_base_url=judge.base_url, cache_path=root / "cache.sqlite", limit=LIMIT,
            env={"CAPJUDGE_VATEX_EVAL_JSON": str(vatex.path), "CAPJUDGE_VATEX_VIDEOS": str(clips),
                 "CAPJUDGE_VATEX_REFERENCES": "1"},
        )
        requests = list(judge.log)
    return SimpleNamespace(run=run, requests=requests, clips=clips)


def _reference_lines(prompt: str, references) -> list[bool]:
    return [f"- {reference.strip()}\n" in prompt + "\n" for reference in references]


def test_the_references_task_judges_the_rated_candidates_against_all_9_references(references_run, vatex):
    results = references_run.run.results()
    assert results["n-samples"]["gveval_vatex_references"]["effective"] == LIMIT
    assert _metric(results, "gveval_vatex_references", "gveval_failed") == 0
    for name in SCORE_METRICS:
        assert 0 <= _metric(results, "gveval_vatex_references", name) <= 100, name
    assert not any(key.startswith("gveval_kendall") for key in results["results"]["gveval_vatex_references"])
    assert len(references_run.requests) == LIMIT
    for candidate in vatex.candidates[:LIMIT]:
        request = next(e for e in references_run.requests if candidate.caption.strip() in e.prompt_text)
        assert len(request.body["messages"][0]["content"]) == 1  # text only: no clip needed
        assert all(_reference_lines(request.prompt_text, candidate.references)), candidate.clip_id
        assert len(candidate.references) == 9


def test_each_record_keeps_clip_id_and_candidate_index(references_run, vatex):
    samples = references_run.run.samples("gveval_vatex_references")
    assert len(samples) == LIMIT
    for sample, candidate in zip(samples, vatex.candidates[:LIMIT]):
        record = sample["judged"]
        # <clip_id>#<candidate_index>: the 6 candidates of a clip share the clip id and differ in the index.
        assert record["item_id"] == f"{candidate.clip_id}#{candidate.candidate_index}"
        assert record["judgment"]["caption"] == candidate.caption and record["judgment"]["video"] is None
        assert record["judge"]["settings"]["references"] == 9 and record["judge"]["settings"]["mode"] == "references"
        assert sample["gveval_mean"] == record["judgment"]["scores"]["mean"]
        assert sample["gveval_failed"] == 0
    assert len({s["judged"]["item_id"].split("#")[0] for s in samples}) == CLIPS


def test_capjudge_vatex_reads_the_run_folder(references_run, vatex):
    result = run_capjudge("vatex", str(vatex.path), str(references_run.root / "out"), "--format", "json",
                          "--resamples", "50")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["n_candidates"] == LIMIT and report["n_clips"] == CLIPS
    assert report["n_unscored"] == len(vatex.candidates) - LIMIT
    judge = report["scorers"][0]
    assert judge["name"].endswith("gveval_vatex_references gveval_mean")
    # The point estimate is scipy's on the logged per-item scores against each annotator's ratings.
    logged = [s["gveval_mean"] for s in references_run.run.samples("gveval_vatex_references")]
    ratings = ratings_matrix(vatex.candidates[:LIMIT])
    emscore = {s["name"]: s["value"] for s in judge["protocols"][0]["statistics"]}
    assert emscore["kendall_b"] == pytest.approx(np.mean([kendalltau(logged, ratings[:, a]).statistic for a in range(3)]))
    assert emscore["spearman"] == pytest.approx(np.mean([spearmanr(logged, ratings[:, a]).statistic for a in range(3)]))


def test_the_video_tasks_show_the_stand_in_clips_and_the_1_reference_setting_reaches_the_prompt(video_run, vatex):
    results = video_run.run.results()
    for task in ("gveval_vatex", "gveval_vatex_combined"):
        assert results["n-samples"][task]["effective"] == LIMIT
        assert _metric(results, task, "gveval_failed") == 0, task
    assert len(video_run.requests) == 2 * LIMIT
    for task, mode in (("gveval_vatex", "frames"), ("gveval_vatex_combined", "frames+references")):
        for sample, candidate in zip(video_run.run.samples(task), vatex.candidates[:LIMIT]):
            record = sample["judged"]
            assert record["item_id"] == f"{candidate.clip_id}#{candidate.candidate_index}"
            assert record["judgment"]["video"] == str(video_run.clips / f"{candidate.clip_id}.mp4")
            assert record["judge"]["settings"]["mode"] == mode
            # Only the tasks that show references carry the setting (the reference-free one has none).
            assert record["judge"]["settings"].get("references") == (1 if mode == "frames+references" else None)
    for candidate in vatex.candidates[:LIMIT]:
        prompts = [e for e in video_run.requests if candidate.caption.strip() in e.prompt_text]
        assert all(len(e.body["messages"][0]["content"]) == 2 for e in prompts)  # text + the frame strip
        combined = [e for e in prompts if "- " + candidate.references[0].strip() in e.prompt_text]
        assert len(combined) >= 1
        for entry in combined:  # CAPJUDGE_VATEX_REFERENCES=1: the first reference only
            assert _reference_lines(entry.prompt_text, candidate.references) == [True] + [False] * 8


def test_a_bad_reference_count_stops_the_run_at_load_with_one_line(vatex, tmp_path):
    with judge_server() as judge:
        outcome = launch_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_vatex_references",
            output_path=tmp_path / "out", judge_base_url=judge.base_url, limit=2,
            env={"CAPJUDGE_VATEX_EVAL_JSON": str(vatex.path), "CAPJUDGE_VATEX_REFERENCES": "3"},
        )
        assert judge.log == []
    assert outcome.returncode == 2 and not outcome.new_results_files, outcome.output[-3000:]
    assert "environment variable CAPJUDGE_VATEX_REFERENCES: expected 1 or 9 (references per clip); got '3'" in outcome.stderr


def test_without_the_data_variable_the_task_names_it_and_the_run_exits_2(tmp_path):
    with judge_server() as judge:
        outcome = launch_lmms_eval(
            model="captions_file", model_args="field=candidate", tasks="gveval_vatex_references",
            output_path=tmp_path / "out", judge_base_url=judge.base_url, limit=2,
            env={"CAPJUDGE_VATEX_EVAL_JSON": ""},
        )
        assert judge.log == []
    assert outcome.returncode == 2 and not outcome.new_results_files, outcome.output[-3000:]
    assert "task data not found: set CAPJUDGE_VATEX_EVAL_JSON" in outcome.output


def test_the_reference_setting_is_read_only_by_tasks_that_declare_it():
    vatex = {"mode": "references", "references": 9}
    assert GVEvalSettings.resolve(vatex, env={}).references == 9
    assert GVEvalSettings.resolve(vatex, env={"CAPJUDGE_VATEX_REFERENCES": "1"}).references == 1
    for bad in ("3", "0", "nine", "1.0"):
        with pytest.raises(ConfigError, match="environment variable CAPJUDGE_VATEX_REFERENCES: expected 1 or 9"):
            GVEvalSettings.resolve(vatex, env={"CAPJUDGE_VATEX_REFERENCES": bad})
    with pytest.raises(ConfigError, match="task metadata 'references': expected 1 or 9"):
        GVEvalSettings.resolve({"references": 5}, env={})
    # MSVD-Eval's tasks declare no count: every reference is shown and the VATEX variable does not apply.
    msvd = GVEvalSettings.resolve({"mode": "references"}, env={"CAPJUDGE_VATEX_REFERENCES": "1"})
    assert msvd.references is None and "references" not in msvd.logged_settings()

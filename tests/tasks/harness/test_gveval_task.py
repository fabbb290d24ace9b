"""The G-VEval task run by the real lmms-eval CLI, judged by the test server.

Two lmms-eval runs (module-scoped, ~25 s each):
- MSVD-Eval from ../shared, --limit 8, videos for the first half of the items only: `gveval` judges those and
  reports the rest unjudged (video_missing), and the run still finishes; `gveval_references` judges the
  human-rated candidates against the references, so the results carry the means and the Kendall tau-b with
  the annotators. (With no video at all the run stops at load: tests/judges/client/test_preflight.py.)
- a tiny MSVD-Eval-shaped set pointing at videos encoded here with PyAV: frames mode end to end (the judge
  receives the 1536x512 three-frame strip sampled from each video), one unreadable video, and a judge setting
  overridden from the environment.
"""

from __future__ import annotations

import base64
import io
import json
from types import SimpleNamespace

import pytest
from capjudge.judges.datasets.msvd_eval import parse_msvd_record
from capjudge.tasks.harness.gveval_task import GVEvalSettings, judge_item
from tests.support.paths import shared_path
from tests.support.harness_runs import TEST_JUDGE_MODEL, judge_server, run_lmms_eval
from scipy.stats import kendalltau
from tests.support.videos import frame_index_of, make_video

pytestmark = pytest.mark.slow

MSVD = ("data", "msvd_eval", "MSVD-Eval.json")
LIMIT = 8
WITH_VIDEO = 4  # the shared run has clips for the first 4 items only
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance", "mean")
SCORE_METRICS = tuple(f"gveval_{name}" for name in DIMENSIONS)
KENDALL_METRICS = tuple(f"gveval_kendall_b_{name}" for name in DIMENSIONS)


def _metric(results: dict, task: str, name: str):
    return results["results"][task][f"{name},none"]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    msvd = shared_path(*MSVD)
    root = tmp_path_factory.mktemp("gveval_shared")
    no_videos = root / "half_the_videos"
    no_videos.mkdir()
    items = list(json.loads(msvd.read_text()).items())[:LIMIT]
    for _, item in items[:WITH_VIDEO]:
        make_video(no_videos / item["vname"], n_frames=12)
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file",
            model_args="field=candidate",  # the candidates the annotators rated
            tasks="gveval,gveval_references",
            output_path=root / "out",
            judge_base_url=judge.base_url,
            cache_path=root / "cache.sqlite",
            limit=LIMIT,
            # Half the items unjudged is the point here, not a failed run.
            env={"CAPJUDGE_MSVD_EVAL_JSON": str(msvd), "CAPJUDGE_MSVD_VIDEOS": str(no_videos),
                 "CAPJUDGE_MAX_FAILURE_RATE": "1"},
            extra_args=["--process_docs_parallel", "4"],
        )
        requests = [entry for entry in judge.log if "Reference Captions:" in entry.prompt_text]
    return SimpleNamespace(run=run, requests=requests, items=items, cache=root / "cache.sqlite", msvd=msvd, no_videos=no_videos)


def test_items_without_videos_are_unjudged_and_left_out_and_the_run_finishes(shared_run):
    results = shared_run.run.results()
    assert _metric(results, "gveval", "gveval_failed") == LIMIT - WITH_VIDEO
    samples = shared_run.run.samples("gveval")
    assert len(samples) == LIMIT
    judged = [sample["gveval_mean"] for sample in samples[:WITH_VIDEO]]
    assert all(isinstance(value, float) for value in judged)
    assert _metric(results, "gveval", "gveval_mean") == pytest.approx(sum(judged) / len(judged))  # never a 0
    for sample, (item_id, item) in list(zip(samples, shared_run.items))[WITH_VIDEO:]:
        judgment = sample["judged"]["judgment"]
        expected_path = shared_run.no_videos / item["vname"]
        assert sample["judged"]["item_id"] == item_id
        assert judgment["failure"] == "video_missing" and judgment["raw_reply"] is None
        assert judgment["failure_detail"] == f"item {item_id}: video file not found: {expected_path}"
        assert all(value is None for value in judgment["scores"].values())
        assert sample["gveval_mean"] is None and sample["gveval_failed"] == 1
        # The log names each item and its path.
        assert f"item {item_id}: video file not found: {expected_path}" in shared_run.run.outcome.stderr


def test_gveval_references_judges_every_item_and_reports_means_and_kendall(shared_run):
    results = shared_run.run.results()
    assert results["n-samples"]["gveval_references"]["effective"] == LIMIT
    assert _metric(results, "gveval_references", "gveval_failed") == 0
    for name in SCORE_METRICS:
        assert 0 <= _metric(results, "gveval_references", name) <= 100, name
    for name in KENDALL_METRICS:
        assert -1 <= _metric(results, "gveval_references", name) <= 1, name
    # Only the references task asked the judge: one text-only request per item.
    assert len(shared_run.requests) == LIMIT
    assert all(len(entry.body["messages"][0]["content"]) == 1 for entry in shared_run.requests)
    assert all("Reference Captions:" in entry.prompt_text for entry in shared_run.requests)


def test_the_means_and_the_kendall_tau_are_those_of_the_logged_items(shared_run):
    results = shared_run.run.results()
    samples = shared_run.run.samples("gveval_references")
    for column, name in enumerate(DIMENSIONS):
        judged = [sample[f"gveval_{name}"] for sample in samples]
        assert _metric(results, "gveval_references", f"gveval_{name}") == pytest.approx(sum(judged) / len(judged))
        # Every annotator is a pair with the item's judge score (the G-VEval protocol); scipy's tau-b.
        judge_scores, human_scores = [], []
        for sample, (_, item) in zip(samples, shared_run.items):
            pair = sample[f"gveval_kendall_b_{name}"]
            assert pair["human"] == [annotator[column] for annotator in item["human_score"]]
            for human in pair["human"]:
                judge_scores.append(pair["judge"])
                human_scores.append(human)
        expected = kendalltau(judge_scores, human_scores, variant="b").statistic
        assert _metric(results, "gveval_references", f"gveval_kendall_b_{name}") == pytest.approx(expected)
        # The harness results carry the interval too, around the coefficient.
        low = _metric(results, "gveval_references", f"gveval_kendall_b_{name}_ci_low")
        high = _metric(results, "gveval_references", f"gveval_kendall_b_{name}_ci_high")
        assert -1.0 <= low <= expected <= high <= 1.0 and low < high


def test_samples_carry_raw_reply_scores_failure_cache_hit_and_the_judge(shared_run):
    for sample, (item_id, item) in zip(shared_run.run.samples("gveval_references"), shared_run.items):
        judgment = sample["judged"]["judgment"]
        assert sample["judged"]["item_id"] == item_id and judgment["caption"] == item["candidate"]
        assert judgment["failure"] is None and judgment["cache_hit"] is False and judgment["requests"] == 1
        assert "The Accuracy score is α" in judgment["raw_reply"]
        assert judgment["scores"]["accuracy"] == sample["gveval_accuracy"]
        assert judgment["video"] is None  # mode "references" shows the judge no video
        judge = sample["judged"]["judge"]
        assert judge["model"] == TEST_JUDGE_MODEL and judge["judge_version"] == "gveval-accr-video/1"
        assert judge["settings"]["mode"] == "references" and judge["settings"]["scoring"] == "expected"
        assert judge["settings"]["sampling"] == {"temperature": 1, "top_p": 1, "logprobs": True, "top_logprobs": 5}


def test_judging_an_item_again_with_the_runs_cache_is_a_cache_hit(shared_run, server, make_client):
    item_id, item = shared_run.items[0]
    doc = {**parse_msvd_record({**item, "id": item_id}, 0), "_videos_dir": str(shared_run.no_videos), "_videos_env": ""}
    settings = GVEvalSettings.resolve({"mode": "references"}, env={})
    client = make_client(server, cache_path=shared_run.cache, model=TEST_JUDGE_MODEL)
    judgment = judge_item(doc, item["candidate"], settings, client)
    logged = shared_run.run.samples("gveval_references")[0]["judged"]["judgment"]
    assert judgment.cache_hit is True and judgment.requests == 0 and server.log == []
    assert judgment.logged().to_json()["scores"] == logged["scores"] and judgment.result.raw_reply == logged["raw_reply"]


def test_constrained_output_sends_the_local_servers_grammar(server, make_client):
    doc = {"id": "v1", "video": "", "references": ["a cat sleeps"], "_videos_dir": "", "_videos_env": ""}
    settings = GVEvalSettings.resolve({"mode": "references"}, env={"CAPJUDGE_CONSTRAINED_OUTPUT": "1"})
    judgment = judge_item(doc, "a cat is sleeping", settings, make_client(server))
    assert judgment.result.judged
    (request,) = server.log
    assert "The Accuracy score is α" in request.body["grammar"]  # extra_body fields reach the JSON body
    assert request.body["temperature"] == 1 and request.body["logprobs"] is True


# ---------------------------------------------------------------------------------------------------------
# Frames mode with real videos

N_FRAMES = 30  # sampled at int(linspace(0, 29, 4)) = 0, 9, 19, 29; the first three are shown
SHOWN_FRAMES = [0, 9, 19]


@pytest.fixture(scope="module")
def video_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gveval_videos")
    clips = root / "clips"
    clips.mkdir()
    items = {}
    captions = ["a red square fills the screen", "colours change from dark to bright over time", "a wrong caption"]
    for number, caption in enumerate(captions, start=1):
        make_video(clips / f"clip{number}.mp4", N_FRAMES)
        items[f"vid{number}"] = {
            "vname": f"clip{number}.mp4",
            "ref": ["a screen changes colour", "the colour of the screen shifts"],
            "candidate": caption,
            "human_score": [[number, number, 3, 4, (number * 2 + 7) / 4], [number, 2, 3, 4, (number + 9) / 4]],
        }
    (clips / "broken.mp4").write_bytes(b"this is not a video")
    items["vid9"] = {**items["vid1"], "vname": "broken.mp4"}
    data = root / "tiny_msvd_eval.json"
    data.write_text(json.dumps(items))
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file",
            model_args="field=candidate",
            tasks="gveval",
            output_path=root / "out",
            judge_base_url=judge.base_url,
            cache_path=root / "cache.sqlite",
            env={"CAPJUDGE_MSVD_EVAL_JSON": str(data), "CAPJUDGE_MSVD_VIDEOS": str(clips), "CAPJUDGE_GVEVAL_SCORING": "text"},
            extra_args=["--process_docs_parallel", "4"],
        )
        requests = list(judge.log)
    return SimpleNamespace(run=run, requests=requests, clips=clips)


def _strip_of(request):
    from PIL import Image

    text, image = request.body["messages"][0]["content"]
    assert text["type"] == "text" and image["type"] == "image_url"
    header, encoded = image["image_url"]["url"].split(",", 1)
    assert header == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(encoded)))


def test_frames_mode_sends_each_video_as_a_1536x512_strip_of_its_sampled_frames(video_run):
    assert len(video_run.requests) == 3  # the broken video never reaches the judge
    for request in video_run.requests:
        strip = _strip_of(request)
        assert strip.format == "PNG" and strip.size == (1536, 512)
        # Each 512-wide tile shows one frame (the top 462 rows); the test video's colour says which.
        shown = [frame_index_of(strip.crop((tile * 512 + 100, 100, tile * 512 + 412, 360))) for tile in range(3)]
        assert shown == SHOWN_FRAMES


def test_frames_run_judges_the_readable_videos_and_reports_the_unreadable_one(video_run):
    results = video_run.run.results()
    assert _metric(results, "gveval", "gveval_failed") == 1
    samples = {sample["judged"]["item_id"]: sample for sample in video_run.run.samples("gveval")}
    assert samples["vid9"]["judged"]["judgment"]["failure"] == "video_unreadable"
    assert str(video_run.clips / "broken.mp4") in samples["vid9"]["judged"]["judgment"]["failure_detail"]
    judged = [samples[item_id]["gveval_mean"] for item_id in ("vid1", "vid2", "vid3")]
    assert _metric(results, "gveval", "gveval_mean") == pytest.approx(sum(judged) / 3)
    assert samples["vid3"]["gveval_mean"] < samples["vid2"]["gveval_mean"]  # the rubric server punishes "wrong"
    for item_id in ("vid1", "vid2", "vid3"):
        judgment = samples[item_id]["judged"]["judgment"]
        assert judgment["video"] == str(video_run.clips / f"clip{item_id[-1]}.mp4")
        # CAPJUDGE_GVEVAL_SCORING=text, read when the item was judged, overrides the YAML's "expected".
        assert judgment["scoring"] == "text" and samples[item_id]["judged"]["judge"]["settings"]["scoring"] == "text"
        assert samples[item_id]["judged"]["judge"]["settings"]["mode"] == "frames"

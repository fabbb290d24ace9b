"""The AnyCapEval video style task run by the real lmms-eval CLI (dummy model), judged by the test server.

Two lmms-eval runs (module-scoped, ~25 s each):
- the shared 189-item JSONL with --limit 10 and only the first item's clip present: the items without a clip
  are unjudged (video_missing), the run finishes, and each sample still records its word counts and length
  check (with no clip at all the run stops at load: tests/judges/client/test_preflight.py);
- a tiny set of every caption type pointing at videos encoded here with PyAV: 8 JPEG frames per request,
  per-type metrics, a length cap that lowers a score, and a tolerance overridden from the environment.

The dummy model answers every item with RESPONSE (13 words); the test server's rubric gives that 2 of 4.
"""

from __future__ import annotations

import base64
import io
import json
from types import SimpleNamespace

import pytest
from capjudge.judges.datasets.anycap_video import parse_anycap_record
from capjudge.tasks.harness.anycap_task import AnyCapSettings, judge_item
from tests.support.paths import shared_path
from tests.support.harness_runs import TEST_JUDGE_MODEL, judge_server, run_lmms_eval
from tests.support.videos import frame_index_of, make_video

pytestmark = pytest.mark.slow

ANYCAP = ("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")
RESPONSE = "a red ball rolls slowly across a wooden table in a bright room"
RESPONSE_WORDS = 13
JUDGE_SCORE = 2  # the rubric server: 1 + words // 8
LIMIT = 10
PER_TYPE = ("anycap_brief", "anycap_detail", "anycap_poem", "anycap_narrative", "anycap_style")


def _metric(results: dict, name: str):
    return results["results"]["anycap_style"][f"{name},none"]


def _words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))


def _row(item_id: int, caption_type: str, reference: str, video: str) -> dict:
    return {
        "id": item_id,
        "video": video,
        "conversations": [
            {"from": "human", "value": f"Write a {caption_type} caption for this video."},
            {"from": "gpt", "value": reference},
        ],
        "restriction": [caption_type, "The generated caption's length needs to be 20 to 30 words."],
    }


def _run(root, data, videos, extra_env=None, limit=None, requests_filter=None):
    with judge_server() as judge:
        run = run_lmms_eval(
            model="dummy",
            model_args=f"response={RESPONSE}",
            tasks="anycap_style",
            output_path=root / "out",
            judge_base_url=judge.base_url,
            cache_path=root / "cache.sqlite",
            limit=limit,
            env={"CAPJUDGE_ANYCAP_JSONL": str(data), "CAPJUDGE_ANYCAP_VIDEOS": str(videos), **(extra_env or {})},
            extra_args=["--process_docs_parallel", "4"],
        )
        return run, list(judge.log)


# ---------------------------------------------------------------------------------------------------------
# The shared data without videos


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    data = shared_path(*ANYCAP)
    root = tmp_path_factory.mktemp("anycap_shared")
    no_videos = root / "one_video"
    no_videos.mkdir()
    rows = [json.loads(line) for line in data.read_text().splitlines()[:LIMIT]]
    make_video(no_videos / rows[0]["video"], n_frames=N_FRAMES)
    unjudged = [row for row in rows if row["video"] != rows[0]["video"]]
    # Most items unjudged is the point here, not a failed run.
    run, requests = _run(root, data, no_videos, limit=LIMIT, extra_env={"CAPJUDGE_MAX_FAILURE_RATE": "1"})
    return SimpleNamespace(run=run, requests=requests, rows=rows, unjudged=unjudged, no_videos=no_videos)


def test_items_without_videos_are_unjudged_and_the_run_finishes(shared_run):
    results = shared_run.run.results()
    judged = len(shared_run.rows) - len(shared_run.unjudged)
    assert len(shared_run.requests) == judged and judged >= 1
    assert _metric(results, "anycap_failed") == len(shared_run.unjudged) >= LIMIT // 2
    samples = shared_run.run.samples("anycap_style")
    scores = [sample["anycap_score"] for sample in samples if sample["anycap_score"] is not None]
    assert len(scores) == judged and _metric(results, "anycap_score") == pytest.approx(sum(scores) / judged)
    assert _metric(results, "anycap_output_words") == RESPONSE_WORDS


def test_unjudged_samples_name_item_and_path_and_keep_the_length_check(shared_run):
    stderr = shared_run.run.outcome.stderr
    unjudged_ids = {str(row["id"]) for row in shared_run.unjudged}
    pairs = [(sample, row) for sample, row in zip(shared_run.run.samples("anycap_style"), shared_run.rows)
             if str(row["id"]) in unjudged_ids]
    assert len(pairs) == len(shared_run.unjudged)
    for sample, row in pairs:
        judgment = sample["judged"]["judgment"]
        path = shared_run.no_videos / row["video"]
        problem = f"item {row['id']}: video file not found: {path}"
        assert sample["judged"]["item_id"] == str(row["id"]) and judgment["failure"] == "video_missing"
        assert judgment["failure_detail"] == problem and problem in stderr
        assert judgment["judge_score"] is None and judgment["final_score"] is None and judgment["raw_reply"] is None
        assert judgment["output_words"] == RESPONSE_WORDS
        assert judgment["reference_words"] == len(row["conversations"][1]["value"].split())
        assert sample["anycap_score"] is None and sample["anycap_failed"] == 1
        assert sample["judged"]["judge"]["model"] == TEST_JUDGE_MODEL and sample["judged"]["judge"]["settings"]["tolerance"] == 10


# ---------------------------------------------------------------------------------------------------------
# A tiny set with videos

N_FRAMES = 30  # sampled at int(linspace(0, 29, 8))
SAMPLED_FRAMES = [0, 4, 8, 12, 16, 20, 24, 29]
TOLERANCE = 30  # set through CAPJUDGE_ANYCAP_TOLERANCE; the YAML says 10


@pytest.fixture(scope="module")
def video_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("anycap_videos")
    clips = root / "clips"
    clips.mkdir()
    make_video(clips / "clip.mp4", N_FRAMES)
    rows = [
        _row(1, "brief", _words(RESPONSE_WORDS), "clip.mp4"),  # same length: within tolerance
        _row(2, "detail", _words(40), "clip.mp4"),  # 13 vs 40 words: capped at 1
        _row(3, "poem", _words(30), "clip.mp4"),  # poems are not length-checked
        _row(4, "narrative", _words(60), "clip.mp4"),
        _row(5, "theme", _words(20), "clip.mp4"),  # the dataset's name for style
        _row(6, "brief", _words(13), "absent.mp4"),  # no such video: unjudged
        _row(7, "brief", _words(11), "clip.mp4"),  # 18% longer: within 30%, outside the YAML's 10%
    ]
    data = root / "tiny_style.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run, requests = _run(root, data, clips, extra_env={"CAPJUDGE_ANYCAP_TOLERANCE": str(TOLERANCE)})
    return SimpleNamespace(run=run, requests=requests, clips=clips)


def test_results_hold_per_type_means_and_the_visible_length_cap(video_run):
    results = video_run.run.results()
    judged_final = {1: 2, 2: 1, 3: 2, 4: 2, 5: 2, 7: 2}
    assert _metric(results, "anycap_score") == pytest.approx(sum(judged_final.values()) / 6)
    assert _metric(results, "anycap_brief") == 2 and _metric(results, "anycap_detail") == 1
    assert _metric(results, "anycap_poem") == 2 and _metric(results, "anycap_narrative") == 2
    assert _metric(results, "anycap_style") == 2
    assert _metric(results, "anycap_length_capped") == pytest.approx(1 / 6)
    assert _metric(results, "anycap_failed") == 1
    assert _metric(results, "anycap_output_words") == RESPONSE_WORDS


def test_samples_show_judge_score_final_score_and_the_rule_that_capped(video_run):
    samples = {sample["judged"]["item_id"]: sample for sample in video_run.run.samples("anycap_style")}
    capped = samples["2"]["judged"]["judgment"]
    assert (capped["judge_score"], capped["final_score"], capped["capped_by"]) == (JUDGE_SCORE, 1, "length_tolerance")
    assert (capped["output_words"], capped["reference_words"], capped["within_tolerance"]) == (RESPONSE_WORDS, 40, False)
    assert json.loads(capped["raw_reply"])["score"] == JUDGE_SCORE and capped["cache_hit"] is False
    within = samples["7"]["judged"]["judgment"]
    assert (within["final_score"], within["capped_by"], within["within_tolerance"]) == (JUDGE_SCORE, None, True)
    assert samples["5"]["judged"]["judgment"]["caption_type"] == "style" and samples["5"]["anycap_style"] == JUDGE_SCORE
    assert samples["5"]["anycap_brief"] is None  # another type's metric: excluded, not 0
    assert samples["6"]["judged"]["judgment"]["failure"] == "video_missing"
    judge = samples["1"]["judged"]["judge"]
    assert judge["judge_version"] == "anycap-style-video/1" and judge["model"] == TEST_JUDGE_MODEL
    assert judge["settings"]["tolerance"] == TOLERANCE and judge["settings"]["instruction_rule"] is False
    assert judge["settings"]["sampling"] == {"temperature": 0.7, "max_tokens": 4096}


def test_each_request_carries_the_eight_sampled_frames_as_jpeg(video_run):
    from PIL import Image

    assert len(video_run.requests) == 6
    for request in video_run.requests:
        text, *images = request.body["messages"][0]["content"]
        assert text["type"] == "text" and f"Model Output: {RESPONSE}" in text["text"]
        frames = []
        for image in images:
            header, encoded = image["image_url"]["url"].split(",", 1)
            assert header == "data:image/jpeg;base64"
            frames.append(frame_index_of(Image.open(io.BytesIO(base64.b64decode(encoded)))))
        assert frames == SAMPLED_FRAMES


def test_constrained_output_sends_the_local_servers_json_schema(server, make_client, tmp_path):
    make_video(tmp_path / "clip.mp4", 10)
    doc = {**parse_anycap_record(_row(1, "poem", "a short poem", "clip.mp4"), 0), "_videos_dir": str(tmp_path), "_videos_env": ""}
    settings = AnyCapSettings.resolve({}, env={"CAPJUDGE_CONSTRAINED_OUTPUT": "1"})
    judgment = judge_item(doc, RESPONSE, settings, make_client(server))
    assert judgment.result.final_score == JUDGE_SCORE
    (request,) = server.log
    assert request.body["response_format"]["type"] == "json_object"
    assert "score" in request.body["response_format"]["schema"]["properties"]
    assert request.body["temperature"] == 0.7 and request.body["max_tokens"] == 4096

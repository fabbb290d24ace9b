"""Bad input, item by item: unusable videos, odd captions and references, malformed dataset rows.

The rule for a per-item problem: the judges (and the tasks' `judge_item`) return an unjudged result whose
failure kind says what went wrong and whose message names the file or the item; they never raise and never
score it 0. A dataset row that cannot be an item is a `DatasetError` naming the file and the item, at load.
Captions that are merely unusual (empty, 100,000 characters, Chinese, mixed scripts) are judged normally.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import av
import numpy as np
import pytest
from capjudge.judges.anycap.judge import AnyCapJudge
from capjudge.judges.gveval.judge import GVEvalJudge
from capjudge.judges.anycap.wordcount import count_words
from capjudge.judges.datasets.msvd_eval import MsvdEvalError, load_msvd_eval
from capjudge.judges.datasets.anycap_video import ANYCAP_FORMAT, parse_anycap_record
from capjudge.judges.datasets.items import DatasetError, load_rows, read_json_lines
from capjudge.judges.datasets.msvd_eval import MSVD_EVAL_FORMAT, parse_msvd_record
from capjudge.tasks.harness.anycap_task import AnyCapSettings
from capjudge.tasks.harness.anycap_task import judge_item as anycap_judge_item
from capjudge.tasks.harness.gveval_task import GVEvalSettings
from capjudge.tasks.harness.gveval_task import judge_item as gveval_judge_item
from capjudge.tasks.harness.sources import resolve_source
from tests.support.videos import make_video




REFERENCE = "A brown dog runs across a park and catches a red ball in its mouth."
CAPTION = "A brown dog runs across a park and catches a red ball."


# ---------------------------------------------------------------------------------------------------------
# Videos that cannot give frames: built for real in tmp_path


def _truncated(tmp_path: Path) -> Path:
    whole = make_video(tmp_path / "whole.mp4", n_frames=30).read_bytes()
    path = tmp_path / "truncated.mp4"
    path.write_bytes(whole[: len(whole) // 2])  # the moov box (at the end) is gone
    return path


def _zero_frame_decode(tmp_path: Path) -> Path:
    """An MP4 whose header promises 30 frames but whose sample data is all zeros: nothing decodes."""
    data = bytearray(make_video(tmp_path / "source.mp4", n_frames=30).read_bytes())
    at = data.find(b"mdat")
    size = int.from_bytes(data[at - 4 : at], "big")
    data[at + 4 : at - 4 + size] = bytes(size - 8)
    path = tmp_path / "zeroed.mp4"
    path.write_bytes(bytes(data))
    return path


def _cut_matroska(tmp_path: Path) -> Path:
    """A Matroska file cut in half: its duration says 60 frames, far fewer can be decoded."""
    whole = make_video(tmp_path / "long.mkv", n_frames=60).read_bytes()
    path = tmp_path / "cut.mkv"
    path.write_bytes(whole[: len(whole) // 2])
    return path


def _audio_only(tmp_path: Path) -> Path:
    path = tmp_path / "sound.m4a"
    with av.open(os.fspath(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono")
        frame.sample_rate, frame.pts = 16000, 0
        for packet in (*stream.encode(frame), *stream.encode()):
            container.mux(packet)
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.mp4"
    os.mkfifo(path)  # opening it would block forever: it must be refused before any open
    return path


def _write(name: str, data: bytes):
    def make(tmp_path: Path) -> Path:
        path = tmp_path / name
        path.write_bytes(data)
        return path

    return make


BAD_VIDEOS = {
    "missing": (lambda tmp_path: tmp_path / "nowhere.mp4", "file does not exist"),
    "directory": (lambda tmp_path: tmp_path, "not a regular file"),
    "fifo": (_fifo, "not a regular file"),
    "zero_length": (_write("empty.mp4", b""), "file is empty (0 bytes)"),
    "text_file": (_write("notes.mp4", b"this is not a video\n" * 20), "not a readable video file"),
    "random_bytes": (_write("noise.mp4", np.random.default_rng(0).bytes(4096)), ""),
    "truncated_mp4": (_truncated, "not a readable video file"),
    "zero_frame_decode": (_zero_frame_decode, "corrupt video data"),
    "cut_matroska": (_cut_matroska, "truncated or corrupt"),
    "audio_only": (_audio_only, "contains no video stream"),
}


@pytest.fixture(params=sorted(BAD_VIDEOS))
def bad_video(request, tmp_path):
    make, problem = BAD_VIDEOS[request.param]
    return make(tmp_path), problem


def test_gveval_reports_a_bad_video_unjudged_naming_the_file(bad_video, server, make_client):
    path, problem = bad_video
    result = GVEvalJudge(make_client(server)).judge(CAPTION, video=path)
    assert not result.judged and result.failure.kind == "video_unreadable"
    assert str(path) in result.failure.detail and problem in result.failure.detail
    assert result.mean is None and result.accuracy is None  # unjudged, not 0
    assert server.log == []  # no judge request for an item that has no frames


def test_anycap_reports_a_bad_video_unjudged_naming_the_file(bad_video, server, make_client):
    path, problem = bad_video
    result = AnyCapJudge(make_client(server)).judge("brief", CAPTION, REFERENCE, video=path, item="a17")
    assert not result.ok and result.failure == "video_unreadable"
    assert str(path) in result.failure_detail and problem in result.failure_detail
    assert result.judge_score is None and result.final_score is None
    assert result.output_words == count_words(CAPTION)  # the length facts are still recorded
    assert server.log == []


@pytest.mark.parametrize("n_frames", [1, 2, 3])
def test_a_video_with_fewer_frames_than_sample_points_repeats_frames_as_published(tmp_path, server, make_client, n_frames):
    # int(linspace(0, n - 1, 8)) repeats indices for short clips: the published rule, not an error.
    video = make_video(tmp_path / f"short{n_frames}.mp4", n_frames=n_frames)
    result = AnyCapJudge(make_client(server)).judge("brief", CAPTION, REFERENCE, video=video)
    assert result.ok
    images = [part for part in server.log[0].body["messages"][0]["content"] if part["type"] == "image_url"]
    assert len(images) == 8 and len({part["image_url"]["url"] for part in images}) == n_frames


def test_missing_frame_images_and_an_empty_frame_list_are_unjudged(tmp_path, server, make_client):
    judge = GVEvalJudge(make_client(server))
    missing = judge.judge(CAPTION, frames=[tmp_path / f"frame{i}.png" for i in range(4)])
    assert missing.failure.kind == "video_unreadable" and str(tmp_path / "frame0.png") in missing.failure.detail
    empty = judge.judge(CAPTION, frames=[])
    assert empty.failure.kind == "bad_input" and "no frames given" in empty.failure.detail
    no_visual = judge.judge(CAPTION)
    assert no_visual.failure.kind == "bad_input" and "needs exactly one of video, frames or image" in no_visual.failure.detail
    assert server.log == []


# ---------------------------------------------------------------------------------------------------------
# Captions: odd but valid ones are judged as written; text that cannot be sent is reported


UNUSUAL_CAPTIONS = {
    "empty": "",
    "whitespace": "   \n\t ",
    "100k_characters": ("A dog runs. " * 9000)[:100_000],
    "chinese": "一只棕色的狗在公园里奔跑，嘴里叼着一个红色的球。",
    "mixed_scripts": "A dog 狗 runs — собака бежит — كلب يجري — 犬が走る 🐕 naïve café",
    "control_characters": "A dog\x00 runs\x1b[31m in the park\u202e reversed",
}


@pytest.mark.parametrize("name", sorted(UNUSUAL_CAPTIONS))
def test_unusual_captions_reach_the_judge_exactly_and_are_judged(name, tmp_path, server, make_client):
    text = UNUSUAL_CAPTIONS[name]
    client = make_client(server)
    gveval = GVEvalJudge(client, mode="references").judge(text, references=[REFERENCE])
    anycap = AnyCapJudge(client).judge("narrative", text, REFERENCE)
    assert gveval.judged and 0 <= gveval.mean <= 100
    assert anycap.ok and anycap.output_words == count_words(text)
    gveval_prompt, anycap_prompt = (entry.prompt_text for entry in server.log)
    assert f"Generated Caption:\n{text}\n" in gveval_prompt  # byte for byte, nothing cut or escaped
    assert f"Model Output: {text}\n" in anycap_prompt
    # Cached under the same key on the way back (no second request, same verdict).
    again = GVEvalJudge(client, mode="references").judge(text, references=[REFERENCE])
    assert len(server.log) == 2 and again.scores() == gveval.scores()


def test_chinese_words_are_counted_per_character_for_the_length_rule(server, make_client):
    result = AnyCapJudge(make_client(server)).judge("brief", "一只狗在跑", "A dog runs in the park")
    assert (result.output_words, result.reference_words) == (5, 6)
    assert result.within_tolerance is False and result.final_score <= 1  # 5 vs 6 words is outside ±10%


def test_text_that_is_not_valid_unicode_is_reported_not_raised(server, make_client):
    # A lone surrogate (e.g. from a "\\ud83d" escape in a broken captions file) cannot be encoded as UTF-8:
    # it used to raise UnicodeEncodeError from the cache key and end the run.
    broken = "A dog \ud83d runs"
    client = make_client(server)
    gveval = GVEvalJudge(client, mode="references").judge(broken, references=[REFERENCE])
    assert gveval.failure.kind == "bad_input" and "U+D83D" in gveval.failure.detail and "A dog " in gveval.failure.detail
    anycap = AnyCapJudge(client).judge("brief", CAPTION, f"{REFERENCE} \udc80")
    assert anycap.failure == "bad_input" and "U+DC80" in anycap.failure_detail
    assert server.log == []


def test_a_caption_that_is_not_text_is_reported_not_raised(server, make_client):
    result = GVEvalJudge(make_client(server), mode="references").judge(None, references=[REFERENCE])
    assert result.failure.kind == "bad_input" and "caption must be a string" in result.failure.detail


def test_an_unknown_caption_type_is_an_unjudged_item_naming_item_and_type(server, make_client):
    result = AnyCapJudge(make_client(server)).judge("haiku", CAPTION, REFERENCE, item="a42")
    assert result.failure == "unknown_caption_type"
    assert "item a42: unknown caption type 'haiku'" in result.failure_detail
    assert result.final_score is None and result.output_words == count_words(CAPTION)
    assert server.log == []


def test_a_reference_with_no_words_is_flagged_not_capped(server, make_client):
    result = AnyCapJudge(make_client(server)).judge("brief", CAPTION, "... — !!!")
    assert result.ok and result.reference_words == 0
    assert result.length_rule_applied is False and "reference_has_no_words" in result.flags
    assert result.capped_by is None


@pytest.mark.parametrize(
    "references, message",
    [([], "needs at least one reference caption"), (["a dog runs", "  "], "reference caption 1 is empty")],
)
def test_gveval_without_usable_references_is_unjudged(references, message, server, make_client):
    result = GVEvalJudge(make_client(server), mode="references").judge(CAPTION, references=references)
    assert result.failure.kind == "bad_input" and message in result.failure.detail
    assert server.log == []


# ---------------------------------------------------------------------------------------------------------
# The tasks' judge_item: the log line and the record name the item


def _gveval_doc(video: str, videos_dir: Path, **extra) -> dict:
    return {"id": "vid77", "video": video, "references": [REFERENCE], "_videos_dir": str(videos_dir), "_videos_env": "V",
            **extra}


def test_gveval_task_item_with_a_corrupt_video_is_unjudged_and_logged_by_item(tmp_path, server, make_client, caplog):
    corrupt = _truncated(tmp_path)
    settings = GVEvalSettings.resolve({"mode": "frames"}, env={})
    with caplog.at_level(logging.WARNING):
        judgment = gveval_judge_item(_gveval_doc(corrupt.name, tmp_path), CAPTION, settings, make_client(server))
    record = judgment.logged().to_json()
    assert judgment.item_id == "vid77" and record["failure"] == "video_unreadable"
    assert str(corrupt) in record["failure_detail"] and all(value is None for value in record["scores"].values())
    assert "vid77" in caplog.text and str(corrupt) in caplog.text
    assert server.log == []


def test_gveval_task_item_with_an_empty_reference_is_unjudged_not_a_crash(tmp_path, server, make_client, caplog):
    # The loader lets an empty reference string through (see the report); the judge reports the item.
    settings = GVEvalSettings.resolve({"mode": "references"}, env={})
    doc = _gveval_doc("", tmp_path, references=["a dog", ""])
    with caplog.at_level(logging.WARNING):
        judgment = gveval_judge_item(doc, CAPTION, settings, make_client(server))
    assert judgment.result.failure.kind == "bad_input" and "vid77" in caplog.text


def test_anycap_task_item_with_a_corrupt_video_is_unjudged_and_logged_by_item(tmp_path, server, make_client, caplog):
    corrupt = _zero_frame_decode(tmp_path)
    doc = {"id": "a9", "video": corrupt.name, "caption_type": "brief", "reference": REFERENCE,
           "instruction": "Describe it in 10 to 20 words.", "length_restriction": "", "_videos_dir": str(tmp_path),
           "_videos_env": "V"}
    with caplog.at_level(logging.WARNING):
        judgment = anycap_judge_item(doc, CAPTION, AnyCapSettings.resolve({}, env={}), make_client(server))
    record = judgment.logged().to_json()
    assert judgment.item_id == "a9" and record["failure"] == "video_unreadable" and record["final_score"] is None
    assert str(corrupt) in record["failure_detail"] and "a9" in caplog.text


# ---------------------------------------------------------------------------------------------------------
# Malformed dataset rows and files (complementing tests/tasks/harness/test_task_loading.py)


def _msvd(**changes):
    return {"id": "vid5", "vname": "a.avi", "ref": ["a cat sleeps"], "candidate": "a cat", "human_score": [[4, 3, 4, 5, 4.0]],
            **changes}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"id": True}, "record 3: no usable 'id'"),
        ({"id": "  "}, "record 3: no usable 'id'"),
        ({"ref": "a cat sleeps"}, "item 'vid5': 'ref' must be a non-empty list of strings"),
        ({"ref": ["a cat", 7]}, "item 'vid5': 'ref' must be a non-empty list of strings"),
        ({"candidate": ["a cat"]}, "item 'vid5': 'candidate' must be a string"),
        ({"human_score": [[float("nan"), 3, 4, 5, 4.0]]}, "item 'vid5', annotator 0: scores must be finite"),
        ({"human_score": [[True, 3, 4, 5, 4.0]]}, "item 'vid5', annotator 0: scores must be finite"),
        ({"human_score": "4,3,4,5"}, "item 'vid5': 'human_score' must be a non-empty list"),
    ],
)
def test_malformed_msvd_rows_name_the_item(changes, message):
    with pytest.raises(DatasetError) as raised:
        parse_msvd_record(_msvd(**changes), 2)
    assert message in str(raised.value)


def _anycap(**changes):
    return {"id": "a3", "video": "clip.mp4", "restriction": ["brief", "needs to be 10 to 20 words."],
            "conversations": [{"from": "human", "value": "Describe."}, {"from": "gpt", "value": "A cat."}], **changes}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"conversations": "Describe. / A cat."}, "item a3: 'conversations' must hold"),
        ({"conversations": ["Describe.", "A cat."]}, "item a3: conversations[0] has no text"),
        ({"restriction": [3, "x"]}, "item a3: caption type must be a string"),
        ({"restriction": "brief"}, "item a3: 'restriction' must be"),
        ({"restriction": ["brief", 20]}, "item a3: restriction[1] must be the length instruction text"),
        ({"video": None}, "item a3: 'video' must be a file name"),
        ({"id": 1.5}, "record 1: no usable 'id'"),
    ],
)
def test_malformed_anycap_rows_name_the_item(changes, message):
    with pytest.raises(DatasetError) as raised:
        parse_anycap_record(_anycap(**changes), 0)
    assert message in str(raised.value)


def test_malformed_files_name_the_file_and_line(tmp_path):
    array_line = tmp_path / "arrays.jsonl"
    array_line.write_text(json.dumps(_anycap()) + "\n[1, 2]\n")
    with pytest.raises(DatasetError, match=r"arrays.jsonl, line 2: expected .*object, got list"):
        read_json_lines(array_line)
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(_anycap()).encode() + b"\n")
    with pytest.raises(DatasetError, match=r"bom.jsonl, line 1: not JSON"):
        read_json_lines(with_bom)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="empty.jsonl: no items"):
        load_rows(resolve_source({"data_env": "X"}, env={"X": str(empty)}), ANYCAP_FORMAT, "test")
    truncated = tmp_path / "msvd.json"
    truncated.write_text(json.dumps({"vid1": _msvd()})[:40])
    with pytest.raises(DatasetError, match="msvd.json: not valid JSON"):
        load_rows(resolve_source({"data_env": "X"}, env={"X": str(truncated)}), MSVD_EVAL_FORMAT, "test")
    with pytest.raises(MsvdEvalError, match="msvd.json: not valid JSON"):
        load_msvd_eval(truncated)
    missing_key = tmp_path / "missing_key.json"
    missing_key.write_text(json.dumps({"vid8": {"vname": "a.avi", "ref": ["a"]}}))
    with pytest.raises(MsvdEvalError, match="item 'vid8': missing key 'human_score'"):
        load_msvd_eval(missing_key)


def test_a_file_that_is_not_utf8_is_a_dataset_error_naming_the_file(tmp_path):
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps(_anycap(id="café"), ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(DatasetError, match="latin.jsonl"):
        read_json_lines(latin)


def test_a_captions_file_with_text_that_is_not_unicode_names_the_item(tmp_path):
    from capjudge.models.captions_file import CaptionsFileError, load_caption_set

    path = tmp_path / "captions.jsonl"
    path.write_text('{"id": "vid3", "caption": "A dog \\ud83d runs"}\n', encoding="utf-8")
    with pytest.raises(CaptionsFileError, match="vid3"):
        load_caption_set(path)

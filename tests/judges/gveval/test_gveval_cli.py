"""`capjudge render gveval` and `capjudge parse gveval`, run as the real command in a subprocess."""

from __future__ import annotations

import base64
import json

import pytest
from PIL import Image

from capjudge.judges.gveval.judge import render_prompt
from tests.support.harness_runs import run_capjudge as capjudge
from tests.support.videos import make_video

GOOD = "Reasoning.\nThe Accuracy score is α85α.\nThe Completeness score is β**70**β.\nψ 90 ψ\nδ80.5δ."




def test_parse_prints_the_four_scores_and_mean():
    done = capjudge("parse", "gveval", stdin=GOOD)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "accuracy": 85,
        "completeness": 70,
        "conciseness": 90,
        "relevance": 80.5,
        "mean": (85 + 70 + 90 + 80.5) / 4,
    }


def test_parse_failure_exits_1_with_the_kind_and_dimensions():
    done = capjudge("parse", "gveval", stdin="The Accuracy score is α{{accuracy_score}}α. β70β ψ190ψ δ8δ")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "error": "missing",
        "dimensions": {"accuracy": "missing", "conciseness": "out_of_range"},
    }


def test_parse_jsonl_gives_one_line_per_reply_and_exits_0(tmp_path):
    lines = [
        json.dumps({"reply": GOOD}),
        json.dumps({"reply": "α101α β1β ψ1ψ δ1δ"}),
        json.dumps({"reply": None}),
        "",
        json.dumps({"reply": "α1α β2β ψ3ψ δ4δ", "id": "x"}),
    ]
    (tmp_path / "replies.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = capjudge("parse", "gveval", "--jsonl", str(tmp_path / "replies.jsonl"))
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == 4
    assert results[0]["mean"] == pytest.approx(81.375) and "error" not in results[0]
    assert results[1] == {"error": "out_of_range", "dimensions": {"accuracy": "out_of_range"}}
    assert results[2]["error"] == "missing" and len(results[2]["dimensions"]) == 4
    assert results[3] == {"accuracy": 1, "completeness": 2, "conciseness": 3, "relevance": 4, "mean": 2.5}


def test_render_writes_the_exact_request_and_the_strip(tmp_path):
    video = make_video(tmp_path / "clip.mp4", 40, width=96, height=64, gop=10)
    out = tmp_path / "out"
    done = capjudge("render", "gveval", "--caption", "A colour ramp.", "--video", str(video), "--out", str(out))
    assert done.returncode == 0, done.stderr
    body = json.loads((out / "request.json").read_text(encoding="utf-8"))
    assert body["model"] == "gpt-4o-2024-05-13"
    assert {key: body[key] for key in ("temperature", "top_p", "logprobs", "top_logprobs")} == {
        "temperature": 1, "top_p": 1, "logprobs": True, "top_logprobs": 5,
    }
    (message,) = body["messages"]
    text, image = message["content"]
    assert message["role"] == "user"
    assert text == {"type": "text", "text": render_prompt("A colour ramp.")}
    assert image["image_url"]["detail"] == "high"
    header, data = image["image_url"]["url"].split(",", 1)
    assert header == "data:image/png;base64"
    assert base64.b64decode(data) == (out / "frames.png").read_bytes()
    assert Image.open(out / "frames.png").size == (1536, 512)


def test_render_model_comes_from_flag_then_environment(tmp_path):
    image = tmp_path / "strip.png"
    Image.new("RGB", (1536, 512), "white").save(image)
    from_env = capjudge(
        "render", "gveval", "--caption", "c", "--image", str(image), "--out", str(tmp_path / "a"),
        env={"MODEL_VERSION": "judge-from-env"},
    )
    assert from_env.returncode == 0, from_env.stderr
    assert json.loads((tmp_path / "a" / "request.json").read_text())["model"] == "judge-from-env"
    assert (tmp_path / "a" / "frames.png").read_bytes() == image.read_bytes()
    from_flag = capjudge(
        "render", "gveval", "--caption", "c", "--image", str(image), "--model", "judge-flag", "--out", str(tmp_path / "b"),
        env={"MODEL_VERSION": "judge-from-env"},
    )
    assert from_flag.returncode == 0, from_flag.stderr
    assert json.loads((tmp_path / "b" / "request.json").read_text())["model"] == "judge-flag"


def test_render_references_mode_is_text_only_without_a_strip(tmp_path):
    out = tmp_path / "refs"
    done = capjudge(
        "render", "gveval", "--caption", "c", "--mode", "references",
        "--reference", "first ref", "--reference", "second ref", "--out", str(out),
    )
    assert done.returncode == 0, done.stderr
    body = json.loads((out / "request.json").read_text(encoding="utf-8"))
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": render_prompt("c", ["first ref", "second ref"], "references")}
    ]
    assert not (out / "frames.png").exists()


def test_render_reports_a_bad_video_and_writes_nothing(tmp_path):
    out = tmp_path / "never"
    done = capjudge("render", "gveval", "--caption", "c", "--video", str(tmp_path / "gone.mp4"), "--out", str(out))
    assert done.returncode == 2
    assert "gone.mp4" in done.stderr and "does not exist" in done.stderr
    assert not out.exists()

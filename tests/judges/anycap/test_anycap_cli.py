"""The `capjudge render anycap`, `parse anycap` and `length-rule` contract, run as real subprocesses."""

from __future__ import annotations

import json

from capjudge.judges.anycap.judge import build_request
from tests.support.harness_runs import run_capjudge as capjudge
from tests.support.videos import make_video




def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


# ------------------------------------------------------------------------------------------------------
# render anycap


def test_render_writes_the_exact_request_body_and_makes_no_request(tmp_path) -> None:
    done = capjudge(
        "render",
        "anycap",
        "--caption-type",
        "theme",
        "--output",
        "Waves {reference} crash.",
        "--reference",
        "The sea at dusk.",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 0, done.stderr
    body = json.loads((tmp_path / "out" / "request.json").read_text(encoding="utf-8"))
    assert body == build_request("style", "Waves {reference} crash.", "The sea at dusk.").body()
    assert body["model"] == "gpt-4o-2024-08-06"
    assert (
        "Caption Type: style  \nModel Output: Waves {reference} crash.\nReference: The sea at dusk.\n"
        in body["messages"][0]["content"][0]["text"]
    )


def test_render_with_video_and_model_from_flag_or_environment(tmp_path) -> None:
    video = make_video(tmp_path / "clip.mp4", n_frames=40)
    done = capjudge(
        "render",
        "anycap",
        "--caption-type",
        "brief",
        "--output",
        "o",
        "--reference",
        "r",
        "--video",
        str(video),
        "--out",
        str(tmp_path / "a"),
        env={"MODEL_VERSION": "judge-from-env"},
    )
    assert done.returncode == 0, done.stderr
    body = json.loads((tmp_path / "a" / "request.json").read_text())
    assert body["model"] == "judge-from-env"
    assert [part["type"] for part in body["messages"][0]["content"]] == ["text"] + ["image_url"] * 8
    assert body == build_request("brief", "o", "r", video=video).body("judge-from-env")
    flagged = capjudge(
        "render",
        "anycap",
        "--caption-type",
        "brief",
        "--output",
        "o",
        "--reference",
        "r",
        "--model",
        "judge-from-flag",
        "--out",
        str(tmp_path / "b"),
        env={"MODEL_VERSION": "ignored"},
    )
    assert flagged.returncode == 0, flagged.stderr
    assert json.loads((tmp_path / "b" / "request.json").read_text())["model"] == "judge-from-flag"


def test_render_rejects_an_unknown_caption_type_and_a_missing_video(tmp_path) -> None:
    bad_type = capjudge(
        "render", "anycap", "--caption-type", "haiku", "--output", "o", "--reference", "r", "--out", str(tmp_path / "x")
    )
    assert bad_type.returncode == 2 and "unknown caption type 'haiku'" in bad_type.stderr  # as render gveval
    no_video = capjudge(
        "render",
        "anycap",
        "--caption-type",
        "brief",
        "--output",
        "o",
        "--reference",
        "r",
        "--video",
        str(tmp_path / "missing.mp4"),
        "--out",
        str(tmp_path / "y"),
    )
    assert no_video.returncode != 0 and "missing.mp4" in no_video.stderr
    assert not (tmp_path / "x" / "request.json").exists() and not (tmp_path / "y" / "request.json").exists()


# ------------------------------------------------------------------------------------------------------
# parse anycap


def test_parse_from_stdin() -> None:
    done = capjudge("parse", "anycap", stdin='Sure.\n```json\n{"score": "3", "reason": "Close to the reference."}\n```')
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"score": 3, "reason": "Close to the reference."}


def test_parse_failure_exits_1_with_the_kind() -> None:
    for reply, kind in (
        ("no object here", "no_json"),
        ('{"score": 2.5}', "non_integer"),
        ('{"score": 5}', "out_of_range"),
        ('{"reason": "x"}', "missing"),
    ):
        done = capjudge("parse", "anycap", stdin=reply)
        assert done.returncode == 1
        assert json.loads(done.stdout) == {"error": kind}


def test_parse_jsonl_batch_with_bad_lines(tmp_path) -> None:
    lines = [
        json.dumps({"reply": '{"score": 4, "reason": "Excellent."}'}),
        json.dumps({"reply": "I cannot judge this."}),
        "this line is not JSON",
        json.dumps({"text": "wrong field"}),
        json.dumps({"reply": "{'score': 0, 'reason': 'Hallucinated.'}"}),
    ]
    batch = tmp_path / "replies.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = capjudge("parse", "anycap", "--jsonl", str(batch))
    assert done.returncode == 0, done.stderr
    results = json_lines(done.stdout)
    assert len(results) == 5
    assert results[0] == {"score": 4, "reason": "Excellent."}
    assert results[1] == {"error": "no_json"}
    assert results[2]["error"] == "bad_input" and results[2]["line"] == 3  # the kind every judge uses
    assert results[3]["error"] == "bad_input" and results[3]["line"] == 4
    assert results[4] == {"score": 0, "reason": "Hallucinated."}


# ------------------------------------------------------------------------------------------------------
# length-rule


def test_length_rule_single_caption() -> None:
    reference = " ".join(["word"] * 10)
    inside = capjudge(
        "length-rule", "--caption-type", "brief", "--output", " ".join(["w"] * 11), "--reference", reference
    )
    assert inside.returncode == 0
    assert json.loads(inside.stdout) == {
        "applies": True,
        "output_words": 11,
        "reference_words": 10,
        "within": True,
        "max_score": 4,
    }
    outside = capjudge(
        "length-rule", "--caption-type", "detail", "--output", " ".join(["w"] * 12), "--reference", reference
    )
    assert json.loads(outside.stdout) == {
        "applies": True,
        "output_words": 12,
        "reference_words": 10,
        "within": False,
        "max_score": 1,
    }
    wider = capjudge(
        "length-rule",
        "--caption-type",
        "detail",
        "--output",
        " ".join(["w"] * 13),
        "--reference",
        reference,
        "--tolerance",
        "30",
    )
    assert json.loads(wider.stdout)["within"] is True
    poem = capjudge("length-rule", "--caption-type", "poem", "--output", "a b c", "--reference", reference)
    assert json.loads(poem.stdout) == {
        "applies": False,
        "output_words": 3,
        "reference_words": 10,
        "within": None,
        "max_score": 4,
    }
    empty_reference = capjudge("length-rule", "--caption-type", "brief", "--output", "a b c", "--reference", "...")
    assert json.loads(empty_reference.stdout) == {
        "applies": False,
        "output_words": 3,
        "reference_words": 0,
        "within": None,
        "max_score": 4,
    }


def test_length_rule_rejects_bad_tolerance_and_type() -> None:
    bad_tolerance = capjudge(
        "length-rule", "--caption-type", "brief", "--output", "a", "--reference", "b", "--tolerance", "7.5"
    )
    assert bad_tolerance.returncode == 2 and "integer percent" in bad_tolerance.stderr
    negative = capjudge(
        "length-rule", "--caption-type", "brief", "--output", "a", "--reference", "b", "--tolerance", "-5"
    )
    assert negative.returncode == 2 and "negative" in negative.stderr
    bad_type = capjudge("length-rule", "--caption-type", "summary", "--output", "a", "--reference", "b")
    assert bad_type.returncode == 1 and json.loads(bad_type.stdout)["error"] == "unknown_caption_type"


def test_length_rule_jsonl_batch_with_bad_lines(tmp_path) -> None:
    ten = " ".join(["word"] * 10)
    lines = [
        json.dumps({"caption_type": "brief", "output": " ".join(["w"] * 12), "reference": ten}),
        json.dumps({"caption_type": "brief", "output": " ".join(["w"] * 12), "reference": ten, "tolerance": 30}),
        json.dumps({"caption_type": "theme", "output": "a", "reference": ten}),
        "{broken",
        json.dumps({"caption_type": "brief", "output": "a"}),
        json.dumps({"caption_type": "sonnet", "output": "a", "reference": "b"}),
        json.dumps({"caption_type": "brief", "output": "a", "reference": "b", "tolerance": 2.5}),
        json.dumps(["not", "an", "object"]),
    ]
    batch = tmp_path / "items.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = capjudge("length-rule", "--jsonl", str(batch))
    assert done.returncode == 0, done.stderr
    results = json_lines(done.stdout)
    assert len(results) == len(lines)
    assert results[0] == {"applies": True, "output_words": 12, "reference_words": 10, "within": False, "max_score": 1}
    assert results[1]["within"] is True and results[1]["max_score"] == 4
    assert results[2] == {"applies": False, "output_words": 1, "reference_words": 10, "within": None, "max_score": 4}
    assert [(r["error"], r["line"]) for r in results[3:]] == [
        ("bad_input", 4),
        ("bad_input", 5),
        ("unknown_caption_type", 6),
        ("invalid_tolerance", 7),
        ("bad_input", 8),
    ]
    # The --tolerance flag is the default for lines without one.
    wide = capjudge("length-rule", "--jsonl", str(batch), "--tolerance", "30")
    assert json_lines(wide.stdout)[0]["within"] is True

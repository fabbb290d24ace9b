"""`capjudge sensitivity` against scripted judges of known behaviour, through the test server (issue #39 item 5).

Three judges answer G-VEval requests on the demo task, chosen by the request's model:

- `fair`: looks at the video. It knows a clip only by the frame strip in the request (its bytes, matched to the
  demo clip they were rendered from) and reads the clip's content off that clip's references; it scores what
  the caption says about the clip (precision, recall, true words per word), times the caption's fluency;
- `long`: the fair judge's scores, shrunk, plus points per word (it loves length);
- `blind`: never looks at the frames: every score is the caption's fluency alone.

Fluency is the share of the caption's word pairs that occur in well-formed demo captions and references.
The judges run with CAPJUDGE_GVEVAL_MODE=frames, so the request holds the frames and the caption and nothing
else about the clip. Every figure the command reports is checked against a direct computation from the
texts it logged and the scripted judge's own scores of them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import numpy as np
import pytest
from conftest import REPO_ROOT
from harness_runs import TEST_API_KEY, judge_server, run_capjudge_cli
from openai_server import prompt_text, rubric_responder, with_logprobs

from capjudge.judges.gveval.judge import DESCRIPTOR
from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, perturb_all

pytestmark = pytest.mark.slow

DEMO = REPO_ROOT / "tasks" / "demo"
CAPTIONS = DEMO / "captions_good.jsonl"
TASK = "gveval_demo"
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance")
STOPWORDS = frozenset("a an the is are of on in to and from with its it at by as then while into one".split())


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _pairs(words: list[str]) -> list[tuple[str, str]]:
    return list(zip(words, words[1:]))


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class DemoWorld:
    """What the scripted judges know: each demo clip's frame strip and references, and what fluent text reads like."""

    def __init__(self) -> None:
        items = _lines(DEMO / "gveval_demo.jsonl")
        self.ids = [item["id"] for item in items]
        self.truth = {item["id"]: {w for r in item["references"] for w in _words(r) if w not in STOPWORDS}
                      for item in items}
        # The frame strip the judge is shown for each clip, rendered here by the judge's own frame geometry.
        self.clip_of_strip = {hashlib.sha256(DESCRIPTOR.frames.render(video=DEMO / item["video"])[0].data).hexdigest():
                              item["id"] for item in items}
        captions = {line["id"]: line["caption"] for line in _lines(CAPTIONS)}
        self.captions = [(item_id, captions[item_id]) for item_id in self.ids]
        fluent = [caption for _, caption in self.captions] + [r for item in items for r in item["references"]]
        self.known_pairs = {pair for text in fluent for pair in _pairs(_words(text))}

    def fluency(self, text: str) -> float:
        pairs = _pairs(_words(text))
        return float(np.mean([pair in self.known_pairs for pair in pairs])) if pairs else 1.0

    def scores(self, judge: str, text: str, clip: str | None) -> list[int]:
        """What `judge` scores `text` on clip `clip` (None: the judge could not tell which clip it saw)."""
        fluency = self.fluency(text)
        if judge == "blind":
            return [round(100 * fluency)] * 4
        words = _words(text)
        content = [w for w in words if w not in STOPWORDS]
        truth = self.truth[clip] if clip else set()
        true_words = [w for w in content if w in truth]
        precision = len(true_words) / len(content) if content else 0.0
        fair = [100 * fluency * precision,
                100 * fluency * len(set(true_words)) / len(truth) if truth else 0.0,
                100 * fluency * min(1.0, 2 * len(set(true_words)) / len(words)),
                100 * fluency * precision ** 0.5]
        if judge == "long":
            return [min(100, round(0.4 * score + 2.5 * len(words))) for score in fair]
        return [round(score) for score in fair]

    def respond(self, body):
        judge = str(body.get("model"))
        text = prompt_text(body)
        if judge not in ("fair", "long", "blind") or "Generated Caption:" not in text:
            return rubric_responder(body)
        caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
        clip = None
        for message in body["messages"]:
            for part in message["content"] if isinstance(message["content"], list) else ():
                if part.get("type") == "image_url":
                    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                    clip = self.clip_of_strip.get(hashlib.sha256(data).hexdigest())
        scores = self.scores(judge, caption, clip)
        return with_logprobs(f"Scripted judge {judge}. The Accuracy score is α{scores[0]}α.\n"
                             f"The Completeness score is β{scores[1]}β.\nThe Conciseness score is ψ{scores[2]}ψ.\n"
                             f"The Relevance score is δ{scores[3]}δ.")


@pytest.fixture(scope="module")
def world():
    return DemoWorld()


def _env(tmp_path, server, judge: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": judge,
            "CAPJUDGE_CACHE": str(tmp_path / f"{judge}.sqlite"), "CAPJUDGE_GVEVAL_MODE": "frames",
            "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
            "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}


def _sensitivity(tmp_path, server, judge: str, *extra: str, out: str | None = None, env: dict | None = None):
    out_folder = tmp_path / (out or judge)
    done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--out", str(out_folder),
                             "--resamples", "1000", *extra], env={**_env(tmp_path, server, judge), **(env or {})},
                            cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out_folder / f"sensitivity_{TASK}.json").read_text(encoding="utf-8"))
    return done, report


def _rows(report):
    return {(row["perturbation"], row["dimension"]): row for row in report["shifts"]}


def test_a_fair_video_aware_judge_passes_everything_in_exactly_1_plus_p_judgments_per_item(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done, report = _sensitivity(tmp_path, server, "fair")
        n_items, n_perturbations = len(world.ids), len(PERTURBATIONS)
        # The speed contract: (1 + perturbations) x items judgments, one request each, counted at the server.
        assert len(server.log) == (1 + n_perturbations) * n_items == report["counts"]["judgments"]
        assert report["counts"] == {"items": n_items, "perturbations": n_perturbations, "judgments": 60,
                                    "requests": 60, "cache_hits": 0, "unjudged": 0}
        # A rerun is all cache hits: not one request, the same report.
        server.log.clear()
        again_done, again = _sensitivity(tmp_path, server, "fair", out="fair-again")
        assert server.log == []
        assert again["counts"]["cache_hits"] == 60 and again["counts"]["requests"] == 0
        assert again["shifts"] == report["shifts"]

    rows = _rows(report)
    assert [row for row in report["shifts"] if not row["passed"]] == []
    assert report["fooled_by"] == {"judge": {}}
    # Truncation speaks only about completeness; every other perturbation about all five scores.
    assert len(rows) == 4 * 5 + 1 and rows["mismatch", "accuracy"]["verdict"] == "expected direction"
    assert rows["padding", "conciseness"]["verdict"] == "expected direction"
    assert "Passes: padding, hallucination, truncation, shuffle, mismatch. Fooled by: nothing." in done.stdout
    assert "| padding | conciseness | down |" in done.stdout
    from PIL import Image

    with Image.open(tmp_path / "fair" / f"sensitivity_{TASK}.png") as plot:  # the shifts with their CIs
        assert plot.format == "PNG" and plot.size[0] > 300 and plot.size[1] > 200

    # The texts are exactly the perturbations of the captions, as the perturbations module makes them.
    expected_variants = perturb_all(world.captions, 0)
    logged = [(item["item_id"], variant["perturbation"], variant["text"])
              for item in report["items"] for variant in item["variants"]]
    assert logged == [(v.item_id, v.perturbation, v.text) for v in expected_variants]
    # Each judgment is the scripted judge's score of that text on that clip (it recognised every clip's frames).
    for item in report["items"]:
        for caption in (item["original"], *item["variants"]):
            scores = caption["judgments"]["judge"]["scores"]
            assert [scores[d] for d in DIMENSIONS] == pytest.approx(world.scores("fair", caption["text"], item["item_id"]))
            assert scores["mean"] == pytest.approx(np.mean([scores[d] for d in DIMENSIONS]))

    # Every statistic, recomputed from the logged judgments: mean shift, shares, and the clip-bootstrap CI
    # (clips in sorted id order, drawn as rng.integers(0, K, (B, K)) with the run's seed).
    ids = sorted(item["item_id"] for item in report["items"])
    draws = np.random.default_rng(0).integers(0, len(ids), size=(1000, len(ids)))
    for position, perturbation in enumerate(PERTURBATIONS):
        for dimension in ("accuracy", "completeness", "conciseness", "relevance", "mean"):
            if perturbation.expected(dimension) is None:
                continue
            by_id = {item["item_id"]: item["variants"][position]["judgments"]["judge"]["scores"][dimension]
                     - item["original"]["judgments"]["judge"]["scores"][dimension] for item in report["items"]}
            shift = np.array([by_id[i] for i in ids])
            row = rows[perturbation.name, dimension]
            assert row["mean_shift"] == pytest.approx(shift.mean())
            assert row["ci"] == pytest.approx(list(np.percentile(shift[draws].mean(axis=1), [2.5, 97.5])))
            strict = perturbation.expected(dimension) == "down"
            assert row["share_wrong_way"] == pytest.approx(np.mean(shift > 0))
            assert row["share_sound"] == pytest.approx(np.mean(shift < 0) if strict else np.mean(shift <= 0))


def test_a_length_loving_judge_fails_padding(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done, report = _sensitivity(tmp_path, server, "long")
    rows = _rows(report)
    assert rows["padding", "conciseness"]["verdict"] == "wrong direction" and not rows["padding", "conciseness"]["passed"]
    assert all(rows["padding", d]["share_wrong_way"] > 0.5 for d in DIMENSIONS)
    assert "padding" in report["fooled_by"]["judge"]
    assert "Fooled by: padding (accuracy, completeness, conciseness, relevance, mean)" in done.stdout


def test_a_video_blind_judge_does_not_detect_mismatch(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        _, report = _sensitivity(tmp_path, server, "blind", "--perturbation", "mismatch", "--perturbation", "shuffle")
        assert len(server.log) == 3 * len(world.ids)  # (1 + 2 perturbations) x items
    rows = _rows(report)
    assert {p["name"] for p in report["perturbations"]} == {"mismatch", "shuffle"}
    for dimension in (*DIMENSIONS, "mean"):
        # Another clip's fluent caption reads as well as the clip's own: no effect, so mismatch fails.
        assert rows["mismatch", dimension]["verdict"] == "no effect" and not rows["mismatch", dimension]["passed"]
        assert rows["shuffle", dimension]["passed"]  # what it does read (fluency), it notices
    assert report["fooled_by"]["judge"] == {"mismatch": [*DIMENSIONS, "mean"]}


def test_the_dry_run_states_the_judgments_and_prices_them_without_a_request(tmp_path, world):
    with judge_server(responder=world.respond) as server:
        done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", str(CAPTIONS), "--dry-run",
                                 "--perturbation", "padding", "--perturbation", "shuffle",
                                 "--price-input", "2.50", "--price-output", "10"],
                                env=_env(tmp_path, server, "fair"), cwd=REPO_ROOT)
        assert server.log == [] and server.preflights == []
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sensitivity: 10 items x (1 original + 2 perturbations) = 30 judgments; 30 to ask" in done.stdout
    assert f"task {TASK} (sensitivity): 30 judgments, 30 requests expected" in done.stdout and "cost: $" in done.stdout


def test_a_panel_is_reported_as_the_panel_and_each_member(tmp_path, world):
    """With CAPJUDGE_PANEL the same judging path judges with every member: the panel (the judge's own
    combination: G-VEval's mean of each score) and each member get their rows."""
    with judge_server(responder=world.respond) as server:
        panel = tmp_path / "panel.json"
        panel.write_text(json.dumps({"members": [{"name": name, "model": name, "base_url": server.base_url}
                                                 for name in ("fair", "blind")]}))
        _, report = _sensitivity(tmp_path, server, "panel", "--perturbation", "mismatch",
                                 env={"CAPJUDGE_PANEL": str(panel)})
        assert len(server.log) == 2 * (1 + 1) * len(world.ids)  # members x (1 + perturbations) x items
    assert report["scorers"] == ["panel", "fair", "blind"]
    assert report["fooled_by"] == {"panel": {}, "fair": {}, "blind": {"mismatch": [*DIMENSIONS, "mean"]}}
    for item in report["items"]:
        for caption in (item["original"], *item["variants"]):
            judgments = caption["judgments"]
            for dimension in DIMENSIONS:
                assert judgments["panel"]["scores"][dimension] == pytest.approx(
                    (judgments["fair"]["scores"][dimension] + judgments["blind"]["scores"][dimension]) / 2)

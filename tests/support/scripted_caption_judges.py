"""Scripted caption judges of known behaviour for `capjudge sensitivity` tests (test_sensitivity_cli.py,
test_sensitivity_page.py), answering G-VEval requests on the demo task through the test server, chosen by the
request's model:

- `fair`: looks at the video. It knows a clip only by the frame strip in the request (its bytes, matched to the
  demo clip they were rendered from) and reads the clip's content off that clip's references; it scores what
  the caption says about the clip (precision, recall, true words per word), times the caption's fluency;
- `long`: the fair judge's scores, shrunk, plus points per word (it loves length);
- `blind`: never looks at the frames: every score is the caption's fluency alone.

Fluency is the share of the caption's word pairs that occur in well-formed demo captions and references.
The judges run with CAPJUDGE_GVEVAL_MODE=frames, so the request holds the frames and the caption and nothing
else about the clip.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import numpy as np
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY
from tests.support.openai_server import prompt_text, rubric_responder, with_logprobs

from capjudge.judges.gveval.judge import DESCRIPTOR

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


def judge_env(tmp_path, server, judge: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": judge,
            "CAPJUDGE_CACHE": str(tmp_path / f"{judge}.sqlite"), "CAPJUDGE_GVEVAL_MODE": "frames",
            "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf"),
            "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

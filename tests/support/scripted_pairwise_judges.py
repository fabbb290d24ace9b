"""Scripted PAIRWISE judges of known behaviour for `capjudge arena` tests (test_arena_judging*.py), answering
the pairwise G-VEval and AnyCap prompts through the test server, chosen by the request's model:

- `first`: always prefers the caption shown first ("A" on every dimension): every verdict flips with the order;
- `fair`: prefers the better caption by a known rule and is consistent: G-VEval, the higher mean of the fair
  scripted pointwise judge's scores (tests/scripted_caption_judges.py: it knows the clip only by the frame
  strip in the request); AnyCap, more of the reference's words; a tie when equal;
- `long`: prefers the caption with more words (a tie when equally long);
- `human` (VATEX-EVAL candidates, text-only prompt: `PairwiseWorld(vatex=candidates)`): prefers the candidate
  the three raters rated higher on average (a tie when their means tie), except on a pair whose means differ by
  at most 1/3 (one rating point in all), where it prefers the caption shown first: a scripted position effect,
  every such verdict flips with the order.

Every dimension gets the same verdict. `expected_verdict` is the rule as the tests apply it directly, apart
from the server: what a judge says about (caption_a, caption_b) in model terms.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

from tests.support.openai_server import Reply, prompt_text, rubric_responder
from tests.support.scripted_caption_judges import DemoWorld

GVEVAL_DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance", "overall")
ANYCAP_DIMENSIONS = ("quality", "hallucination", "overall")
JUDGES = ("first", "fair", "long", "human")
# The `human` judge's position effect: on pairs the raters' means separate by at most this, it prefers the first.
HUMAN_CLOSE_CALL = 1 / 3 + 1e-9


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _clip_of(world: DemoWorld, body) -> str | None:
    for message in body["messages"]:
        for part in message["content"] if isinstance(message["content"], list) else ():
            if part.get("type") == "image_url":
                data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                return world.clip_of_strip.get(hashlib.sha256(data).hexdigest())
    return None


def _one_line(reference: str) -> str:
    """A reference as the G-VEval prompts list it (capjudge.judges.gveval.judge.format_references)."""
    return re.sub(r"\s*\n\s*", " ", reference.strip())


def preference(judge: str, first: str, second: str, merit) -> str:
    """Positional: "A" (the first shown), "B" or "tie"."""
    if judge == "first":
        return "A"
    if judge == "long":
        a, b = len(first.split()), len(second.split())
    else:
        a, b = merit(first), merit(second)
    return "A" if a > b else "B" if b > a else "tie"


class PairwiseWorld:
    """The scripted pairwise judges and their rules."""

    def __init__(self, vatex=()) -> None:
        self.demo = DemoWorld()
        # (the clip's first reference as the prompt lists it, caption) -> the raters' mean rating
        self.human_means = {(_one_line(c.references[0]), c.caption): sum(c.ratings) / len(c.ratings) for c in vatex}

    def human_verdict(self, first: str, second: str, reference: str) -> str:
        """The `human` judge's positional verdict (see the module docstring)."""
        a, b = self.human_means[(reference, first)], self.human_means[(reference, second)]
        if a == b:
            return "tie"
        if abs(a - b) <= HUMAN_CLOSE_CALL:
            return "A"
        return "A" if a > b else "B"

    def gveval_merit(self, clip: str | None):
        return lambda caption: sum(self.demo.scores("fair", caption, clip)) / 4

    @staticmethod
    def anycap_merit(reference: str):
        truth = set(_words(reference))
        return lambda output: len({w for w in _words(output) if w in truth})

    def expected_verdict(self, judge: str, caption_a: str, caption_b: str, a_first: bool, merit) -> str:
        """The verdict about models A and B the judge gives when `a_first` says which caption it saw first."""
        first, second = (caption_a, caption_b) if a_first else (caption_b, caption_a)
        positional = preference(judge, first, second, merit)
        return positional if a_first or positional == "tie" else {"A": "B", "B": "A"}[positional]

    def respond(self, body):
        judge = str(body.get("model"))
        text = prompt_text(body)
        if judge not in JUDGES:
            return rubric_responder(body)
        if "\nCaption A:\n" in text:
            first = text.split("\nCaption A:\n", 1)[1].split("\n\nCaption B:\n", 1)[0]
            second = text.split("\n\nCaption B:\n", 1)[1].split("\n\nYou should first give", 1)[0]
            if judge == "human":
                reference = text.split("Reference Captions:\n- ", 1)[1].split("\n", 1)[0]
                verdict = self.human_verdict(first, second, reference)
            else:
                verdict = preference(judge, first, second, self.gveval_merit(_clip_of(self.demo, body)))
            lines = "\n".join(f"{name.capitalize()}: [[{verdict}]]" for name in GVEVAL_DIMENSIONS)
            return Reply(f"Scripted pairwise judge {judge}.\n{lines}")
        if "Model Output A:" in text:
            first = text.split("Model Output A: ", 1)[1].split("\nModel Output B: ", 1)[0]
            second = text.split("\nModel Output B: ", 1)[1].split("\nReference: ", 1)[0]
            reference = text.split("\nReference: ", 1)[1].split("\n### **Output:**", 1)[0]
            verdict = preference(judge, first, second, self.anycap_merit(reference))
            return Reply(json.dumps({**{name: verdict for name in ANYCAP_DIMENSIONS}, "reason": f"{judge} judge"}))
        return rubric_responder(body)

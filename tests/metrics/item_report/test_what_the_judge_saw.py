"""The pages say what the judge really saw, from what the runs logged (issue #63 item 3): the item report said
"The judge saw: 8 frames" for capjudge's embedded text-only judge, whose server drops every image part, and
the demo's leaderboard carried no word that its judge proves the pipeline only.

Real `capjudge judge` runs of the demo tasks against the OpenAI-compatible test server: one served under the
embedded judge's model name (the runs log `judge.model` gemma-3-270m-q4_k_m, as the demo's do), one under a
vision judge's name, and one G-VEval run in its text-only mode "references". `capjudge report` and
`capjudge leaderboard` over them, read in headless Chromium (and the Markdown file): the frames sent, or
"text only" and why; the embedded judge's caveat wherever its scores are, and nowhere else.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge, run_capjudge_cli
from tests.support.paths import REPO_ROOT

from capjudge.judges.text import EMBEDDED_JUDGE_CAVEAT, EMBEDDED_JUDGE_MODEL

pytestmark = pytest.mark.slow

DEMO = REPO_ROOT / "tasks" / "demo"
GVEVAL, ANYCAP = "gveval_demo", "anycap_style_demo"
TEXT_MODE_JUDGE = "text-mode-judge"  # the judge model of the run in mode "references", told apart in the server's log


def _judge(server, root: Path, task: str, model: str, name: str, env: dict[str, str] | None = None) -> Path:
    """`capjudge judge` of the good demo captions on `task`, the judge served as `model`; the run's folder."""
    environment = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": model,
                   "CAPJUDGE_CACHE": str(root / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                   "HF_DATASETS_CACHE": str(root / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(root), **(env or {})}
    out = root / name
    done = run_capjudge_cli(["judge", "--captions", str(DEMO / "captions_good.jsonl"), "--model-name", name,
                             "--task", task, "--out", str(out)], env=environment, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("what_the_judge_saw")
    with judge_server() as server:
        made = SimpleNamespace(
            embedded={task: _judge(server, root, task, EMBEDDED_JUDGE_MODEL, f"embedded_{task}") for task in (GVEVAL, ANYCAP)},
            vision={task: _judge(server, root, task, TEST_JUDGE_MODEL, f"vision_{task}") for task in (GVEVAL, ANYCAP)},
            references=_judge(server, root, GVEVAL, TEXT_MODE_JUDGE, "references", {"CAPJUDGE_GVEVAL_MODE": "references"}),
        )
        made.requests = [entry.body for entry in server.completions]
    made.root = root
    return made


def _report(tmp_path: Path, *folders: Path) -> Path:
    done = run_capjudge("report", *(str(folder) for folder in folders), "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    return tmp_path / "report" / "report.html"


def _saw(visit, task: str, item: str) -> str:
    return visit.page.locator(f"#item-{task}-{item} .visual .description").inner_text()


def _images_sent(requests: list[dict], model: str) -> int:
    """Image parts of the requests the test server got for judge model `model`: what each run really sent."""
    return sum(1 for body in requests if body["model"] == model for message in body["messages"]
               if isinstance(message["content"], list) for part in message["content"] if part["type"] == "image_url")


def test_a_text_only_judge_model_is_said_to_have_read_the_text_alone(runs, open_page, tmp_path):
    # The embedded judge's requests carried the frames (its server drops them): the page says both.
    assert _images_sent(runs.requests, EMBEDDED_JUDGE_MODEL) == 10 * 1 + 10 * 8
    visit = open_page(_report(tmp_path, *runs.embedded.values()))
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.broken_images() == []
    for task, sent in ((GVEVAL, "one PNG strip of 3 labelled frames"), (ANYCAP, "8 frames")):
        saw = _saw(visit, task, "g01" if task == GVEVAL else "a01")
        assert saw.startswith(f"The judge saw: text only: the request carried {sent}"), saw
        assert f"the judge model '{EMBEDDED_JUDGE_MODEL}' is capjudge's embedded local judge, which reads text " \
               "only: its server dropped the images, so it judged the text alone" in saw
    # The caveat is on the page, once, naming both tasks.
    warnings = visit.page.locator("#warnings li").all_inner_texts()
    caveats = [text for text in warnings if EMBEDDED_JUDGE_CAVEAT in text]
    assert len(caveats) == 1 and caveats[0].startswith(f"{GVEVAL}, {ANYCAP}: judged by {EMBEDDED_JUDGE_MODEL}, ")


def test_a_vision_judge_saw_the_frames_and_a_text_only_mode_says_why(runs, open_page, tmp_path):
    visit = open_page(_report(tmp_path, *runs.vision.values()))
    assert visit.script_errors == [] and visit.broken_images() == []
    saw = _saw(visit, GVEVAL, "g01")
    assert saw.startswith("The judge saw: one PNG strip of 3 labelled frames (") and \
        saw.endswith("), mode 'frames+references'"), saw
    assert _saw(visit, ANYCAP, "a01").startswith("The judge saw: 8 frames (")
    assert visit.page.locator("#warnings li").all_inner_texts() == []  # no caveat for a judge that is not the embedded one

    assert _images_sent(runs.requests, TEST_JUDGE_MODEL) == 10 * 1 + 10 * 8

    # Mode "references": no frame was sent, and the page says it is the mode.
    assert _images_sent(runs.requests, TEXT_MODE_JUDGE) == 0
    assert sum(body["model"] == TEXT_MODE_JUDGE for body in runs.requests) == 10
    visit = open_page(_report(tmp_path / "references", runs.references))
    assert _saw(visit, GVEVAL, "g01") == ("The judge saw: text only: judge 'gveval' in mode 'references' sends no "
                                          "frames (the references instead)")
    assert visit.image_count() == 0


def test_beside_a_vision_judge_the_frames_it_saw_are_shown(runs, open_page, tmp_path):
    # One item, two runs: the page shows the input of the judge that saw the frames, whichever run is first.
    visit = open_page(_report(tmp_path, runs.embedded[GVEVAL], runs.vision[GVEVAL]))
    assert _saw(visit, GVEVAL, "g01").startswith("The judge saw: one PNG strip of 3 labelled frames")
    warnings = visit.page.locator("#warnings li").all_inner_texts()
    assert [text for text in warnings if EMBEDDED_JUDGE_CAVEAT in text] != []  # one of its runs is the embedded judge's


def test_the_leaderboard_of_embedded_judge_runs_carries_its_caveat_in_every_page(runs, open_page, tmp_path):
    out = tmp_path / "board"
    done = run_capjudge("leaderboard", *(f"embedded={folder}" for folder in runs.embedded.values()),
                        *(f"vision={folder}" for folder in runs.vision.values()), "--out", str(out))
    assert done.returncode == 0, done.stderr
    markdown = re.sub(r"\s+", " ", (out / "leaderboard.md").read_text(encoding="utf-8"))
    assert f"judged by {EMBEDDED_JUDGE_MODEL}, {EMBEDDED_JUDGE_CAVEAT}" in markdown.replace("\\", "")
    visit = open_page(out / "leaderboard.html")
    warnings = visit.page.locator(".warnings li").all_inner_texts()
    assert any(f"{GVEVAL}, {ANYCAP}: judged by {EMBEDDED_JUDGE_MODEL}, {EMBEDDED_JUDGE_CAVEAT}" in text
               for text in warnings), warnings

    # Runs of another judge only: no such caveat (it is keyed on the judge model the runs logged).
    alone = tmp_path / "alone"
    done = run_capjudge("leaderboard", *(f"vision={folder}" for folder in runs.vision.values()), "--out", str(alone))
    assert done.returncode == 0, done.stderr
    assert EMBEDDED_JUDGE_MODEL not in (alone / "leaderboard.md").read_text(encoding="utf-8")
    assert "270M" not in (alone / "leaderboard.html").read_text(encoding="utf-8")

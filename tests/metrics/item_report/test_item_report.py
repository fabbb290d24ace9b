"""`capjudge report`: the per-item HTML report, built from real judged runs and read in a real browser.

The runs are real `capjudge judge` outputs (lmms-eval-shaped folders) of two caption sets ("good", "poor")
on the G-VEval and AnyCap demo items, judged by the OpenAI-compatible test server. Its stand-in judge gives
G-VEval's accuracy number a second, lower alternative in the logprobs (so the expected value differs from the
written one), never gives a parsable reply for one caption (a failed item, after every try), and answers
"poor"'s G-VEval replies differently each time, with two replies per item (a spread of k replies). AnyCap's
videos are a copy; one is deleted after judging, as when runs outlive their clips.

The page is then opened in headless Chromium (tests/support/browser.py): the tests read its DOM for loaded images,
the filters, the sorting, the leaderboard link, and the requests it made, against what the runs' files say.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli, run_lmms_eval
from tests.support.openai_server import Reply, prompt_text, rubric_responder, with_logprobs

pytestmark = pytest.mark.slow

DEMO = REPO_ROOT / "tasks" / "demo"
GVEVAL, ANYCAP = "gveval_demo", "anycap_style"
FAILING_ITEM = "g03"  # its "poor" caption never gets a parsable G-VEval reply
DELETED_VIDEO_ITEM = "a04"  # its clip is deleted after judging
ACCURACY_ALTERNATIVE = (10, math.log(0.25))  # 10 points lower, probability 0.25 (the written number: 0.75)
GVEVAL_TRIES = 3  # gveval_demo's max_tries


def _captions(name: str) -> dict[str, str]:
    lines = (DEMO / f"captions_{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return {row["id"]: row["caption"] for row in map(json.loads, lines)}


class StandInJudge:
    """The test server's rubric judge, with the twists the report has to show (see the module docstring)."""

    def __init__(self) -> None:
        self.failing_caption = _captions("poor")[FAILING_ITEM]
        self.calls: Counter[str] = Counter()

    def __call__(self, body: dict) -> Reply:
        text = prompt_text(body)
        if "Generated Caption:" not in text:
            return rubric_responder(body)
        caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
        if caption == self.failing_caption:
            return Reply("The frames are hard to make out; I cannot score this caption.")
        self.calls[caption] += 1
        content = rubric_responder(body).content
        if caption in _captions("poor").values():  # each reply to a poor caption a little different
            shift = (self.calls[caption] % 2) * (2 + len(caption) % 9)  # replies differ by an item's own amount
            content = re.sub(r"α(\d+)α", lambda match: f"α{max(0, int(match.group(1)) - shift)}α", content)
        tokens = with_logprobs(content).logprobs
        at = next(i for i, (token, _) in enumerate(tokens) if token == "α") + 1
        written = tokens[at][0]
        lower = str(max(0, int(written) - ACCURACY_ALTERNATIVE[0]))
        alternatives = {at: [(written, math.log(0.75)), (lower, ACCURACY_ALTERNATIVE[1])]}
        return with_logprobs(content, alternatives)


def _judge(judge, tmp: Path, captions: str, task: str, out: Path, env: dict[str, str] | None = None) -> Path:
    environment = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL,
                   "CAPJUDGE_CACHE": str(tmp / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                   "HF_DATASETS_CACHE": str(tmp / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp),
                   "CAPJUDGE_MAX_FAILURE_RATE": "1", **(env or {})}
    done = run_capjudge_cli(
        ["judge", "--captions", str(DEMO / f"captions_{captions}.jsonl"),
         "--model-name", captions, "--task", task, "--out", str(out)],
        env=environment, cwd=REPO_ROOT, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = (out / captions).glob("*_results.json")
    return results.parent


def _anycap_data(root: Path) -> tuple[Path, Path]:
    """The AnyCap demo items in the published AnyCapEval shape, with copies of their clips."""
    videos = root / "videos"
    videos.mkdir()
    rows = [json.loads(line) for line in (DEMO / "anycap_demo.jsonl").read_text(encoding="utf-8").splitlines()]
    for row in rows:
        shutil.copy(DEMO / row["video"], videos / row["video"])
    data = root / "anycap.jsonl"
    data.write_text("".join(json.dumps({
        "id": row["id"], "video": row["video"],
        "conversations": [{"from": "human", "value": row["instruction"]}, {"from": "gpt", "value": row["reference"]}],
        "restriction": [row["caption_type"], ""],
    }) + "\n" for row in rows), encoding="utf-8")
    return data, videos


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("item_report_runs")
    data, videos = _anycap_data(root)
    anycap_env = {"CAPJUDGE_ANYCAP_JSONL": str(data), "CAPJUDGE_ANYCAP_VIDEOS": str(videos)}
    with judge_server(responder=StandInJudge()) as judge:
        folders = {
            ("good", GVEVAL): _judge(judge, root, "good", GVEVAL, root / "gveval"),
            ("poor", GVEVAL): _judge(judge, root, "poor", GVEVAL, root / "gveval", {"CAPJUDGE_JUDGE_SAMPLES": "2"}),
            ("good", ANYCAP): _judge(judge, root, "good", ANYCAP, root / "anycap", anycap_env),
            ("poor", ANYCAP): _judge(judge, root, "poor", ANYCAP, root / "anycap", anycap_env),
        }
        requests = [logged.body for logged in judge.completions]
    samples = {key: _samples(folder) for key, folder in folders.items()}
    deleted = Path(samples[("good", ANYCAP)][DELETED_VIDEO_ITEM]["judged"]["judgment"]["video"])
    moved = root / "moved"
    moved.mkdir()
    shutil.move(deleted, moved / deleted.name)
    page_dir = root / "report"
    made = run_capjudge("report", *(str(folder) for folder in folders.values()), "--out", str(page_dir))
    assert made.returncode == 0, made.stderr
    return SimpleNamespace(root=root, folders=folders, samples=samples, requests=requests, deleted_video=deleted,
                           moved=moved, page=page_dir / "report.html", stdout=made.stdout)


def _samples(folder: Path) -> dict[str, dict]:
    (path,) = folder.glob("*_samples_*.jsonl")
    lines = map(json.loads, path.read_text(encoding="utf-8").splitlines())
    return {line["judged"]["item_id"]: line for line in lines}



def _visible_items(visit) -> list[tuple[str, str]]:
    """(task, item id) of every item the reader can see, top to bottom."""
    return [tuple(pair) for pair in visit.page.evaluate(
        """() => Array.from(document.querySelectorAll('article.item'))
               .filter(a => a.checkVisibility()).map(a => [a.dataset.task, a.dataset.item])""")]


def _visible_cards(visit) -> list[str]:
    return visit.page.evaluate(
        "() => Array.from(document.querySelectorAll('.judgment')).filter(c => c.checkVisibility()).map(c => c.dataset.model)")


def _score(line: dict, task: str) -> float | None:
    return line["gveval_mean"] if task == GVEVAL else line["anycap_score"]


def _image_bytes_sent(requests: list[dict], caption: str) -> list[bytes]:
    """The images of the judge request that carried `caption`, as the test server received them."""
    import base64

    for body in requests:
        parts = body["messages"][0]["content"]
        if any(caption in part.get("text", "") for part in parts):
            urls = [part["image_url"]["url"] for part in parts if part["type"] == "image_url"]
            return [base64.b64decode(url.split(",", 1)[1]) for url in urls]
    raise AssertionError(f"no judge request carried {caption!r}")


def test_the_page_shows_every_item_with_the_judges_input_and_what_it_said(runs, open_page):
    visit = open_page(runs.page)
    assert visit.script_errors == []
    assert visit.offsite_requests() == []
    assert any(url.endswith(".png") for url in visit.requests)  # the frames were asked for, as local files
    # Every image decoded: ten G-VEval strips, and eight AnyCap frames for each item whose clip is still there.
    assert visit.broken_images() == []
    assert visit.image_count() == 10 + 9 * 8
    assert "frames not shown for 1 item (see the page)" in runs.stdout

    # The frames are the bytes the judge was sent: G-VEval's strip, AnyCap's eight JPEGs.
    good = _captions("good")
    for task, item in ((GVEVAL, "g01"), (ANYCAP, "a02")):
        sources = visit.page.evaluate(
            f"() => Array.from(document.querySelectorAll('#item-{task}-{item} img')).map(i => i.getAttribute('src'))")
        shown = [(runs.page.parent / source).read_bytes() for source in sources]
        assert shown == _image_bytes_sent(runs.requests, good[item]), (task, item)
    strip_size = visit.page.evaluate(
        f"() => {{ const i = document.querySelector('#item-{GVEVAL}-g01 img'); return [i.naturalWidth, i.naturalHeight]; }}")
    assert strip_size == [1536, 512]

    # The item whose clip is gone says so, naming the file; the page around it is whole.
    gone = visit.page.locator(f"#item-{ANYCAP}-{DELETED_VIDEO_ITEM}")
    assert gone.locator("img").count() == 0
    problem = gone.locator(".frames-problem").inner_text()
    assert "no longer there" in problem and str(runs.deleted_video) in problem and "--videos" in problem

    # Instruction, references and both models' captions side by side, as logged.
    for (model, task), samples in runs.samples.items():
        for item, line in samples.items():
            article = visit.page.locator(f"#item-{task}-{item}")
            assert line["input"] in article.locator(".instruction").inner_text()
            card = article.locator(f".judgment[data-model='{model}']")
            assert card.locator(".caption").inner_text() == line["filtered_resps"]
    references = visit.page.locator(f"#item-{GVEVAL}-g01 .references li").all_inner_texts()
    assert references == runs.samples[("good", GVEVAL)]["g01"]["target"]

    # G-VEval: the written number and the expected value, per dimension (the stand-in gave the accuracy
    # number a 0.25-probability alternative 10 points lower, so expected = written - 2.5).
    card = visit.page.locator(f"#item-{GVEVAL}-g01 .judgment[data-model='good']")
    written, expected = (float(card.locator("tr[data-score='accuracy'] td").nth(n).inner_text()) for n in (2, 3))
    assert expected == pytest.approx(written - 2.5)
    assert float(card.locator("tr[data-score='accuracy'] td").nth(1).inner_text()) == pytest.approx(
        runs.samples[("good", GVEVAL)]["g01"]["gveval_accuracy"], abs=0.005)

    # A failed item: its kind, its detail and the requests it took (3 tries for each of the 2 replies).
    failed = visit.page.locator(f"#item-{GVEVAL}-{FAILING_ITEM} .judgment[data-model='poor']")
    assert "failed: missing" in failed.locator(".failure").inner_text()
    assert "6 HTTP requests" in failed.inner_text()
    assert failed.locator("details.reply").count() == 2  # each of the k replies, with its raw text
    failed.locator("details.reply").first.click()
    assert "cannot score this caption" in failed.locator("details.reply pre.raw").first.inner_text()

    # AnyCap: the length-rule decision as judged.
    line = runs.samples[("poor", ANYCAP)][DELETED_VIDEO_ITEM]["judged"]["judgment"]
    assert line["capped_by"] == "length_tolerance"  # the poor caption of a04 is far too short
    capped = visit.page.locator(f"#item-{ANYCAP}-{DELETED_VIDEO_ITEM} .judgment[data-model='poor']").inner_text()
    assert f"{line['output_words']} words against the reference's {line['reference_words']}" in capped
    assert f"tolerance {line['tolerance_percent']}%" in capped
    assert f"capped by length_tolerance: {line['judge_score']} → {line['final_score']}" in capped

    # The judge's identity once per task, each distinct one (the poor G-VEval run asked for 2 replies).
    gveval_judges = visit.page.locator(f"#task-{GVEVAL} .judges li").all_inner_texts()
    assert len(gveval_judges) == 2 and all(TEST_JUDGE_MODEL in text for text in gveval_judges)


def test_filters_change_the_visible_items_and_sorting_orders_them(runs, open_page):
    visit = open_page(runs.page)
    page = visit.page
    everything = _visible_items(visit)
    assert len(everything) == 20

    def items_where(predicate) -> set[tuple[str, str]]:
        return {(task, item) for (model, task), samples in runs.samples.items()
                for item, line in samples.items() if predicate(model, line["judged"]["judgment"])}

    page.check("#filter-failed")
    assert set(_visible_items(visit)) == items_where(lambda m, j: j["failure"] is not None) == {(GVEVAL, FAILING_ITEM)}
    page.select_option("#filter-model", "good")  # good has no failed item
    assert _visible_items(visit) == []
    page.select_option("#filter-model", "")
    page.uncheck("#filter-failed")

    page.check("#filter-capped")
    capped = items_where(lambda m, j: j.get("capped_by") is not None)
    assert capped and set(_visible_items(visit)) == capped
    page.uncheck("#filter-capped")

    page.select_option("#filter-type", "detail")
    details = items_where(lambda m, j: j.get("caption_type") == "detail")
    assert details and set(_visible_items(visit)) == details
    page.select_option("#filter-type", "")

    page.select_option("#filter-task", ANYCAP)
    assert {task for task, _ in _visible_items(visit)} == {ANYCAP} and len(_visible_items(visit)) == 10
    page.select_option("#filter-model", "poor")
    assert set(_visible_cards(visit)) == {"poor"}

    # Sorting, within the task: poor's score, high to low (unjudged items last).
    page.select_option("#filter-task", GVEVAL)
    page.select_option("#sort", "score-desc")
    poor = runs.samples[("poor", GVEVAL)]
    by_score = sorted(poor, key=lambda item: (poor[item]["gveval_mean"] is None, -(poor[item]["gveval_mean"] or 0)))
    assert [item for _, item in _visible_items(visit)] == by_score
    shown = [float(s) for s in page.evaluate(
        "() => Array.from(document.querySelectorAll('.judgment')).filter(c => c.checkVisibility()).map(c => c.dataset.score)")
        if s != ""]
    assert shown == sorted(shown, reverse=True) and len(set(shown)) > 1

    # By disagreement between the two models (good - poor), then by the spread of poor's 2 replies.
    page.select_option("#filter-model", "")
    page.select_option("#sort", "disagreement")
    good = runs.samples[("good", GVEVAL)]
    gap = {item: abs(good[item]["gveval_mean"] - poor[item]["gveval_mean"]) for item in poor if poor[item]["gveval_mean"] is not None}
    expected_order = sorted(gap, key=lambda item: -gap[item]) + [item for item in poor if item not in gap]
    assert [item for _, item in _visible_items(visit)] == expected_order
    page.select_option("#sort", "spread")
    spread = {item: line["judged"]["judgment"]["spread"]["mean"] for item, line in poor.items()
              if line["judged"]["judgment"]["spread"]["mean"] is not None}
    assert len(set(spread.values())) > 1  # the stand-in judge's replies differ by an item's own amount
    expected_order = sorted(spread, key=lambda item: -spread[item]) + [item for item in poor if item not in spread]
    assert [item for _, item in _visible_items(visit)] == expected_order


def test_a_leaderboard_row_links_to_its_items(runs, open_page):
    from capjudge.metrics.item_report.report import items_link

    link = items_link(ANYCAP, "poor")
    page_name, fragment = link.split("#", 1)
    assert page_name == runs.page.name
    visit = open_page(runs.page, fragment)
    assert visit.page.input_value("#filter-task") == ANYCAP
    assert visit.page.input_value("#filter-model") == "poor"
    assert {task for task, _ in _visible_items(visit)} == {ANYCAP} and len(_visible_items(visit)) == 10
    assert set(_visible_cards(visit)) == {"poor"}


def test_runs_of_different_tasks_stay_apart_and_moved_clips_are_found(runs, open_page, tmp_path):
    out = tmp_path / "report"
    made = run_capjudge("report", f"captioner={runs.folders[('good', GVEVAL)]}", f"styler={runs.folders[('poor', ANYCAP)]}",
                        "--out", str(out), "--videos", str(runs.moved))
    assert made.returncode == 0, made.stderr
    visit = open_page(out / "report.html")
    assert visit.script_errors == [] and visit.offsite_requests() == []
    sections = visit.page.locator("section.task")
    assert sections.count() == 2
    assert "Not in this task (they ran other tasks): styler" in visit.page.locator(f"#task-{GVEVAL}").inner_text()
    assert "Not in this task (they ran other tasks): captioner" in visit.page.locator(f"#task-{ANYCAP}").inner_text()
    # The deleted clip was found under --videos by its file name: all of its frames are back.
    assert visit.page.locator(f"#item-{ANYCAP}-{DELETED_VIDEO_ITEM} img").count() == 8
    assert visit.broken_images() == [] and visit.image_count() == 10 + 10 * 8


def _lmms_eval(tmp_path: Path, name: str, log_samples: bool, cache: Path, model_name: str | None = None):
    """A real lmms-eval run of one caption set on the first three G-VEval demo items, judged by the stand-in;
    returns the run and how many judge requests it made."""
    with judge_server(responder=StandInJudge()) as judge:
        run = run_lmms_eval(
            model="captions_file", model_args=f"path={DEMO / f'captions_{name}.jsonl'},model_name={model_name or name}",
            tasks=GVEVAL, output_path=tmp_path / name, judge_base_url=judge.base_url, cache_path=cache,
            limit=3, log_samples=log_samples,
        )
        return run, len(judge.completions)


def test_an_lmms_eval_run_sits_beside_a_capjudge_judge_run(runs, open_page, tmp_path):
    # The good captions again, judged inside lmms-eval with the fixture's cache: every reply is a cache hit.
    harness, requests = _lmms_eval(tmp_path, "good", log_samples=True, cache=runs.root / "cache.sqlite", model_name="again")
    assert requests == 0
    out = tmp_path / "report"
    made = run_capjudge("report", str(runs.folders[("good", GVEVAL)]), str(harness.output_path), "--out", str(out))
    assert made.returncode == 0, made.stderr
    visit = open_page(out / "report.html")
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.broken_images() == []
    # lmms-eval logs G-VEval's references as str() of the list; the page lists them one by one all the same.
    logged = {line["judged"]["item_id"]: line for line in harness.samples(GVEVAL)}
    assert isinstance(logged["g01"]["target"], str)
    references = visit.page.locator(f"#item-{GVEVAL}-g01 .references li").all_inner_texts()
    assert references == runs.samples[("good", GVEVAL)]["g01"]["target"]
    # The lmms-eval run judged three items: those show both columns, the rest only the first run's.
    for item in ("g01", "g02", "g03", "g04"):
        cards = visit.page.locator(f"#item-{GVEVAL}-{item} .judgment")
        models = [cards.nth(n).get_attribute("data-model") for n in range(cards.count())]
        assert models == (["good", "again"] if item in logged else ["good"])
        if item in logged:
            first, again = cards.nth(0).inner_text(), cards.nth(1).inner_text()
            assert "from the cache\nno" in first and "from the cache\nyes" in again
            assert "0 HTTP requests" in again


def test_a_run_without_log_samples_is_refused_naming_it(runs, tmp_path):
    unlogged, _ = _lmms_eval(tmp_path, "fair", log_samples=False, cache=tmp_path / "cache.sqlite")
    assert not list(unlogged.output_path.rglob("*_samples_*.jsonl"))
    made = run_capjudge("report", str(runs.folders[("good", GVEVAL)]), f"nosamples={unlogged.results_file}",
                        "--out", str(tmp_path / "out"))
    assert made.returncode == 1
    assert "run nosamples" in made.stderr and str(unlogged.results_file) in made.stderr
    assert "--log_samples" in made.stderr
    assert not (tmp_path / "out" / "report.html").exists()


def test_a_clip_that_cannot_be_decoded_is_a_message_not_a_crash(tmp_path):
    from capjudge.metrics.item_report.frames import FrameRenderer, FrameRequest

    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all" * 100)
    visual = FrameRenderer(tmp_path / "out").render(GVEVAL, "g01", FrameRequest("gveval", "frames", str(broken), None))
    assert visual.images == () and visual.problem is not None and str(broken) in visual.problem
    unjudged = FrameRenderer(tmp_path / "out").render(GVEVAL, "g02", FrameRequest("gveval", "frames", str(broken), "video_missing"))
    assert "failed at judge time (video_missing)" in unjudged.problem


def test_the_browser_check_sees_a_request_that_would_leave_the_machine(open_page, tmp_path):
    """The checks above can fail: a page that reaches for the network is caught (and nothing leaves)."""
    page = tmp_path / "leaky.html"
    page.write_text('<img src="http://192.0.2.1/frame.png"><script>fetch("https://example.com/x").catch(() => {})</script>')
    visit = open_page(page)
    visit.page.wait_for_function("() => document.images[0].complete")
    assert "http://192.0.2.1/frame.png" in visit.offsite_requests()
    assert visit.broken_images() == ["http://192.0.2.1/frame.png"]

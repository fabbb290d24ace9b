"""The per-item sensitivity page (issue #39 item 7): a real `capjudge sensitivity` run against scripted judges
through the test server (tests/support/scripted_caption_judges.py), then its page opened in headless Chromium and read
back against the JSON the same run wrote: every item, every caption's text, every score, every reply, the
wrong-way marks exactly where the JSON's per-item shift has the wrong sign, a failed parse shown as failed
(never 0), hostile text in captions and replies shown as text, and nothing asked of the network.

Few items keep it quick (--limit 6: with g03 unjudged once, 5 clips, the small-sample rule's floor for a
verdict): 6 x (1 + 5) judgments for one judge, 2 x 6 x (1 + 1) for the panel.
"""

from __future__ import annotations

import json

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.openai_server import prompt_text, with_logprobs
from tests.support.scripted_caption_judges import TASK, DemoWorld, judge_env

from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, perturb_all

pytestmark = pytest.mark.slow

ITEMS = 6
# A caption that would run script, load an image and end the data block, were it ever put in as HTML.
HOSTILE = ('<img src=x onerror="document.title=\'pwned\'"> A person </script><script>document.title="pwned"'
           '</script> walks & <b>talks</b> <!-- on stage')
FAILING = ("g03", "shuffle")  # the scripted judge answers this caption with no score at all
_SIGN = {"down": -1, "not_up": -1, "up": 1, "not_down": 1}


@pytest.fixture(scope="module")
def world():
    return DemoWorld()


def _captions_file(tmp_path, world) -> tuple[str, list[tuple[str, str]]]:
    """The demo's good captions with item g02's replaced by HOSTILE; the first ITEMS (id, caption) pairs."""
    captions = [(item_id, HOSTILE if item_id == "g02" else caption) for item_id, caption in world.captions]
    path = tmp_path / "captions.jsonl"
    path.write_text("".join(json.dumps({"id": i, "caption": c}) + "\n" for i, c in captions), encoding="utf-8")
    return str(path), captions[:ITEMS]


def _responder(world, failing_text: str):
    """The scripted judges, each reply echoing the caption it judged (so the replies carry HOSTILE too), and no
    score for `failing_text`."""

    def respond(body):
        text = prompt_text(body)
        if "Generated Caption:" in text:
            caption = text.split("Generated Caption:", 1)[1].split("You should first give", 1)[0].strip()
            if caption == failing_text:
                return with_logprobs("I would rather not put a number on this caption.")
            reply = world.respond(body)
            return with_logprobs(f"Judging the caption: {caption}\n{reply.content}")
        return world.respond(body)

    return respond


def _run(tmp_path, server, judge, captions, *extra, env=None):
    out = tmp_path / judge
    done = run_capjudge_cli(["sensitivity", "--task", TASK, "--captions", captions, "--out", str(out), "--limit",
                             str(ITEMS), "--resamples", "200", *extra],
                            env={**judge_env(tmp_path, server, judge), **(env or {})}, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, out / f"sensitivity_{TASK}.json", json.loads((out / f"sensitivity_{TASK}.json").read_text("utf-8"))


def _expected(report, perturbation: str, dimension: str):
    named = dict(next(p for p in report["perturbations"] if p["name"] == perturbation)["expectations"])
    return named.get(dimension, named.get("*"))


def _wrong_way_from_json(report) -> set[tuple[str, str, str, str]]:
    """(item, perturbation, scorer, score) whose perturbed - original score is strictly on the wrong side."""
    wrong = set()
    for item in report["items"]:
        for variant in item["variants"]:
            for scorer, judged in variant["judgments"].items():
                for dimension, after in judged["scores"].items():
                    before = item["original"]["judgments"][scorer]["scores"].get(dimension)
                    expected = _expected(report, variant["perturbation"], dimension)
                    if None not in (before, after, expected) and _SIGN[expected] * (after - before) < 0:
                        wrong.add((item["item_id"], variant["perturbation"], scorer, dimension))
    return wrong


_READ_PAGE = """() => Array.from(document.querySelectorAll('article.item')).map(article => ({
  item: article.dataset.item,
  captions: Array.from(article.querySelectorAll('tbody')).map(body => ({
    perturbation: body.dataset.perturbation,
    text: body.querySelector('.caption-text').textContent,
    markup: body.querySelector('.caption-text').children.length,
    rows: Array.from(body.querySelectorAll('tr')).map(row => ({
      scorer: row.dataset.scorer,
      outcome: row.querySelector('td.outcome').textContent,
      reply: row.querySelector('td.reply pre') ? row.querySelector('td.reply pre').textContent : null,
      replyNote: row.querySelector('td.reply').textContent,
      cells: Array.from(row.querySelectorAll('td.score')).map(cell => ({
        dimension: cell.dataset.dimension, value: cell.dataset.value,
        shown: cell.querySelector('.value').textContent, wrong: cell.dataset.wrongWay,
        marked: Boolean(cell.querySelector('.mark')),
        shift: cell.querySelector('.shift') ? cell.querySelector('.shift').dataset.shift : null})),
    })),
  })),
}))"""


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _check_page_against_json(visit, report) -> set[tuple[str, str, str, str]]:
    """Every item, caption, score, outcome and reply of the page equal to the JSON's; returns the marked cells."""
    page = visit.page.evaluate(_READ_PAGE)
    assert [article["item"] for article in page] == [item["item_id"] for item in report["items"]]
    marked = set()
    for article, item in zip(page, report["items"]):
        captions = [item["original"], *item["variants"]]
        assert [c["perturbation"] for c in article["captions"]] == [c["perturbation"] or "" for c in captions]
        for shown, caption in zip(article["captions"], captions):
            assert shown["text"] == caption["text"] and shown["markup"] == 0  # text, never markup
            assert [row["scorer"] for row in shown["rows"]] == report["scorers"]
            for row in shown["rows"]:
                judged = caption["judgments"][row["scorer"]]
                scores = judged["scores"]
                assert {cell["dimension"] for cell in row["cells"]} >= set(scores)
                for cell in row["cells"]:
                    value = scores.get(cell["dimension"])
                    if value is None:  # unjudged: said so, never a 0
                        assert cell["value"] == "" and cell["shown"] == ("not judged" if judged["failure"] else "—")
                    else:
                        assert float(cell["value"]) == pytest.approx(value) and cell["shown"] == _shown(value)
                    before = item["original"]["judgments"][row["scorer"]]["scores"].get(cell["dimension"])
                    if shown["perturbation"] and None in (value, before):
                        assert cell["shift"] == ""  # not measured: one side has no score
                    elif shown["perturbation"]:
                        assert float(cell["shift"]) == pytest.approx(value - before)
                    assert cell["marked"] == (cell["wrong"] == "true")
                    if cell["marked"]:
                        marked.add((article["item"], shown["perturbation"], row["scorer"], cell["dimension"]))
                if judged["failure"]:
                    assert row["outcome"].startswith(f"failed: {judged['failure']}")
                else:
                    assert row["outcome"].startswith("judged")
                assert row["reply"] == judged.get("reply")  # the whole reply, as text
    return marked


def test_the_page_shows_each_perturbed_caption_beside_its_original_with_both_judgments(tmp_path, world, open_page):
    captions, first = _captions_file(tmp_path, world)
    failing = next(v.text for v in perturb_all(first, 0) if (v.item_id, v.perturbation) == FAILING)
    with judge_server(responder=_responder(world, failing)) as server:
        done, path, report = _run(tmp_path, server, "long", captions)
    page_file = path.with_suffix(".html")
    assert f"Per item, each perturbed caption beside its original: {page_file}" in done.stdout
    assert report["format_version"] == 2 and len(report["items"]) == ITEMS
    assert [p["name"] for p in report["perturbations"]] == [p.name for p in PERTURBATIONS]
    # The JSON carries each reply (new in format 2) and the failed parse as a failure with no score.
    failed = next(v for item in report["items"] if item["item_id"] == FAILING[0] for v in item["variants"]
                  if v["perturbation"] == FAILING[1])["judgments"]["judge"]
    assert failed["failure"] and set(failed["scores"].values()) == {None}
    assert failed["reply"] == "I would rather not put a number on this caption."
    hostile = report["items"][1]["original"]
    assert hostile["text"] == HOSTILE and HOSTILE in hostile["judgments"]["judge"]["reply"]
    assert "<img" not in page_file.read_text(encoding="utf-8")  # the data block holds it escaped

    visit = open_page(page_file)
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.image_count() == 0
    assert visit.page.title() != "pwned"
    marked = _check_page_against_json(visit, report)
    expected_wrong = _wrong_way_from_json(report)
    assert marked == expected_wrong
    # The length-loving judge raises padded captions: the marks are there, on padding's scores among others.
    assert {(p, d) for _, p, _, d in expected_wrong} >= {("padding", "conciseness")}
    failed_cells = visit.page.evaluate(f"""() => Array.from(document.querySelectorAll(
        'article[data-item="{FAILING[0]}"] tbody[data-perturbation="{FAILING[1]}"] td.score'))
        .map(cell => cell.querySelector('.value').textContent + '|' + cell.querySelector('.shift').textContent)""")
    assert failed_cells and all(text == "not judged|shift not measured" for text in failed_cells)
    # The shift table at the top is the file's.
    rows = visit.page.evaluate("""() => Array.from(document.querySelectorAll('table.shifts tbody tr'))
        .map(row => [row.dataset.perturbation, row.dataset.dimension, row.classList.contains('failed')])""")
    assert rows == [[s["perturbation"], s["dimension"], s["passed"] is False] for s in report["shifts"]]
    # "moved the wrong way only" keeps exactly the items with a mark.
    visit.page.check("#filter-wrong")
    shown = visit.page.evaluate("() => Array.from(document.querySelectorAll('article.item')).map(a => a.dataset.item)")
    assert shown == [item["item_id"] for item in report["items"] if any(w[0] == item["item_id"] for w in expected_wrong)]
    visit.page.uncheck("#filter-wrong")
    shot = visit.screenshot(tmp_path / "sensitivity-page.png")
    assert shot.stat().st_size > 20_000

    # The same page from the file alone, as `capjudge report --sensitivity` renders it.
    again = run_capjudge_cli(["report", "--sensitivity", str(path), "--out", str(tmp_path / "again")],
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd=REPO_ROOT)
    assert again.returncode == 0, again.stderr
    wrong_items = len({w[0] for w in expected_wrong})
    assert f"{ITEMS} items x (1 original + 5 perturbations), 1 scorers; {wrong_items} items moved" in again.stdout
    assert (tmp_path / "again" / page_file.name).read_bytes() == page_file.read_bytes()


def test_a_panel_page_shows_the_combined_judgment_and_each_member(tmp_path, world, open_page):
    captions, _ = _captions_file(tmp_path, world)
    with judge_server(responder=_responder(world, "")) as server:
        panel = tmp_path / "panel.json"
        panel.write_text(json.dumps({"members": [{"name": name, "model": name, "base_url": server.base_url}
                                                 for name in ("fair", "blind")]}))
        _, path, report = _run(tmp_path, server, "panel", captions, "--perturbation", "mismatch",
                               env={"CAPJUDGE_PANEL": str(panel)})
    assert report["scorers"] == ["panel", "fair", "blind"]
    visit = open_page(path.with_suffix(".html"))
    assert visit.script_errors == [] and visit.offsite_requests() == []
    marked = _check_page_against_json(visit, report)
    assert marked == _wrong_way_from_json(report)
    # The panel's row says whom it pooled and has no reply of its own; each member's row has its reply.
    panel_rows = visit.page.evaluate("""() => Array.from(document.querySelectorAll('tr[data-scorer="panel"]'))
        .map(row => [row.querySelector('td.outcome').textContent, row.querySelector('td.reply').textContent])""")
    assert len(panel_rows) == ITEMS * 2
    assert all("pooled: fair, blind" in outcome and "none of its own" in reply for outcome, reply in panel_rows)
    # Scorer filter: one member's rows only.
    visit.page.select_option("#filter-scorer", "blind")
    scorers = visit.page.evaluate("() => [...new Set(Array.from(document.querySelectorAll('tr[data-scorer]')).map(r => r.dataset.scorer))]")
    assert scorers == ["blind"]
    assert visit.screenshot(tmp_path / "sensitivity-panel.png").stat().st_size > 20_000

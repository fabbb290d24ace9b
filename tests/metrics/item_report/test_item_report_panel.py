"""`capjudge report` of a run judged by a panel (#28): each member's judgment beside the panel's, what the panel
pooled and left out, and the members' agreement, read in a real browser against the run's own files.

One real lmms-eval run of the first four G-VEval demo items, judged by the three scripted members of the test
server (tests/support/openai_server.py `panel_responder`: harsh, lenient, long), named in the panel file apart from
their models (strict, kind, verbose) so that the page's name and model can be told apart. Two members give an
unparsable reply to some captions: "long" to g02 and g03, "lenient" to g03, so g02 is pooled from two members
with one left out, and g03 from one member, below the quorum of two (the panel does not score it).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import judge_server, launch_lmms_eval
from tests.support.openai_server import PANEL_MODELS, Reply, panel_responder, prompt_text

pytestmark = pytest.mark.slow

TASK = "gveval_demo"
CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
CAPTION_OF = {row["id"]: row["caption"] for row in map(json.loads, CAPTIONS.read_text().splitlines())}
NAME_OF = {"harsh": "strict", "lenient": "kind", "long": "verbose"}  # model -> its name in the panel file
FAILS = {"long": ("g02", "g03"), "lenient": ("g03",)}  # model -> items it cannot score
DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance", "mean")


def _responder(body: dict) -> Reply:
    text = prompt_text(body)
    if any(CAPTION_OF[item] in text for item in FAILS.get(str(body.get("model")), ())):
        return Reply("The frames are hard to make out; I cannot score this caption.")
    return panel_responder(body)


@pytest.fixture(scope="module")
def panel_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel_report")
    with judge_server(responder=_responder) as judge:
        panel_file = root / "panel.yaml"
        panel_file.write_text(json.dumps({"members": [
            {"name": NAME_OF[model], "model": model, "base_url": judge.base_url} for model in PANEL_MODELS]}))
        outcome = launch_lmms_eval(
            model="captions_file", model_args=f"path={CAPTIONS},model_name=good", tasks=TASK,
            output_path=root / "run", judge_base_url=judge.base_url, cache_path=root / "cache.sqlite", limit=4,
            env={"CAPJUDGE_PANEL": str(panel_file), "CAPJUDGE_MAX_FAILURE_RATE": "1"})
        run = outcome.require_run()
    made = run_capjudge("report", str(run.output_path), "--out", str(root / "report"))
    assert made.returncode == 0, made.stderr
    samples = {line["judged"]["item_id"]: line for line in run.samples(TASK)}
    return SimpleNamespace(run=run, root=root, samples=samples, results=run.results()["results"][TASK],
                           page=root / "report" / "report.html", base_url=judge.base_url)


def _number(text: str) -> float | None:
    return None if text.strip() == "—" else float(text)


def _close(shown: float | None, logged: float | None, digits: int) -> bool:
    """The page's rounded number against the logged one (None: the page shows "—")."""
    if logged is None or (isinstance(logged, float) and math.isnan(logged)):
        return shown is None
    return shown is not None and abs(shown - logged) <= 0.5 * 10 ** -digits + 1e-9


# Everything the page shows of each panel judgment, read in one pass: {item: {...}}.
READ_PANEL_CARDS = """() => Object.fromEntries(Array.from(document.querySelectorAll('article.item')).map((article) => {
  const card = article.querySelector(".judgment[data-model='good']");
  const rows = (root) => Object.fromEntries(Array.from(root.querySelectorAll(':scope tr[data-score]'))
    .map((tr) => [tr.dataset.score, tr.children[1].innerText]));
  return [article.dataset.item, {
    cards: article.querySelectorAll('.judgment').length,
    score: card.querySelector('h3 .score').innerText,
    pooled: rows(card.querySelector(':scope > .scores')),
    failure: card.querySelector(':scope > .failure')?.innerText ?? null,
    own_replies: card.querySelectorAll(':scope > details.reply').length,
    facts: card.querySelector('.panel-judgment > dl.facts').innerText,
    left_out_tag: article.querySelector('.tag.left-out')?.innerText ?? null,
    members: Array.from(card.querySelectorAll('.member')).map((member) => ({
      member: member.dataset.member,
      name: member.querySelector('.member-name').innerText,
      model: member.querySelector('.member-model').innerText,
      score: member.querySelector('h4 .score').innerText,
      rows: rows(member),
      pooling: member.querySelector('.pooling').innerText,
      failure: member.querySelector('.failure')?.innerText ?? null,
      raw: member.querySelector('details.reply pre.raw')?.textContent ?? null,
      text: member.innerText,
    })),
  }];
}))"""


def test_each_item_shows_every_member_beside_the_pooled_panel(panel_report, open_page):
    visit = open_page(panel_report.page)
    assert visit.script_errors == [] and visit.offsite_requests() == [] and visit.broken_images() == []
    shown = visit.page.evaluate(READ_PANEL_CARDS)
    judges = visit.page.locator(f"#task-{TASK} .judges li").all_inner_texts()
    assert set(shown) == set(panel_report.samples) == {"g01", "g02", "g03", "g04"}
    for item, line in panel_report.samples.items():
        card = shown[item]
        assert card["cards"] == 1  # the members are inside the panel's judgment, not models of their own

        # The panel's pooled values: the item's main score and each dimension, as the run logged them.
        assert card["score"].startswith("gveval_mean ")
        assert _close(_number(card["score"].split()[-1]), line["gveval_mean"], 2), item
        assert list(card["pooled"]) == list(DIMENSIONS)
        for dimension in DIMENSIONS:
            assert _close(_number(card["pooled"][dimension]), line[f"gveval_{dimension}"], 2), (item, dimension)
        assert card["own_replies"] == 0  # the panel has no reply of its own: its members' are below

        # Each member, in the panel file's order: its name, its model, its reply and its scores.
        pooling = line["judged"]["judgment"]["panel"]
        assert [member["member"] for member in card["members"]] == list(NAME_OF.values())
        for member, (model, name) in zip(card["members"], NAME_OF.items()):
            record = line[f"judged@{name}"]
            assert (member["name"], member["model"]) == (name, model) and record["judge"]["model"] == model
            assert member["score"].startswith(f"gveval_mean@{name} ")
            assert _close(_number(member["score"].split()[-1]), line[f"gveval_mean@{name}"], 2), (item, name)
            assert list(member["rows"]) == list(DIMENSIONS)
            for dimension in DIMENSIONS:
                assert _close(_number(member["rows"][dimension]), line[f"gveval_{dimension}@{name}"], 2)
            assert member["raw"] == record["judgment"]["raw_reply"] and member["raw"]
            # Its judge, in the task's list of judges: its own model at the server.
            judge_line = judges[int(member["text"].split("judge\n#", 1)[1].split()[0]) - 1]
            assert f"model {model} " in judge_line and panel_report.base_url in judge_line

            # Pooled or left out, as the panel's record says, with the reason.
            failed = item in FAILS.get(model, ())
            assert (name in pooling["judged_by"]) == (not failed)
            if failed:
                assert pooling["not_judged"][name] == record["judgment"]["failure"] == "missing"
                assert member["pooling"] == "left out by the panel: missing"
                assert member["failure"].startswith("failed: missing")
                assert "cannot score this caption" in member["raw"]
                assert "3 HTTP requests" in member["text"]  # gveval_demo's max_tries
            else:
                assert member["pooling"] == "pooled by the panel" and member["failure"] is None
        assert f"quorum\n{pooling['quorum']} of 3 members" in card["facts"]
        assert f"pooled\n{', '.join(pooling['judged_by']) or 'none'}" in card["facts"]
        left_out = ", ".join(f"{name} ({kind})" for name, kind in pooling["not_judged"].items())
        assert f"left out\n{left_out or 'none'}" in card["facts"]

    # g03: one member judged it, fewer than the quorum of two; the panel says so and scores nothing.
    assert panel_report.samples["g03"]["gveval_mean"] is None
    assert shown["g03"]["failure"].startswith("failed: panel_below_quorum")
    assert shown["g03"]["score"] == "gveval_mean —"
    assert shown["g02"]["left_out_tag"] == "left out of the panel: good@verbose"
    assert shown["g01"]["left_out_tag"] is None and shown["g01"]["failure"] is None
    # A reply opens for the reader.
    reply = visit.page.locator(f"#item-{TASK}-g02 .member[data-member='verbose'] details.reply")
    reply.locator("summary").click()
    assert "cannot score this caption" in reply.locator("pre.raw").inner_text()


def test_the_members_agreement_is_the_runs_figures_and_failed_only_finds_member_failures(panel_report, open_page):
    visit = open_page(panel_report.page)
    block = visit.page.locator(f"#task-{TASK} .panel-agreement[data-model='good']")
    assert block.count() == 1
    note = block.locator(".note").inner_text()
    for model, name in NAME_OF.items():
        assert f"{name} ({model}, {panel_report.base_url})" in note
    assert "Quorum 2" in note
    names = list(NAME_OF.values())
    figures = {"alpha": "panel_alpha"}
    figures.update({f"kendall_b:{a}~{b}": f"panel_kendall_b@{a}~{b}" for i, a in enumerate(names) for b in names[i + 1:]})
    figures.update({f"offset:{name}": f"panel_offset@{name}" for name in names})
    table = visit.page.evaluate("""(block) => Array.from(block.querySelectorAll('tr[data-figure]'))
        .map((tr) => [tr.dataset.figure, Array.from(tr.children).map((td) => td.innerText)])""", block.element_handle())
    assert [figure for figure, _ in table] == list(figures)
    finite = 0
    for figure, (label, *cells) in table:
        metric, _, member = figures[figure].partition("@")
        for shown, end in zip(cells, ("", "_ci_low", "_ci_high")):
            logged = panel_report.results[f"{metric}{end}{'@' + member if member else ''},none"]
            assert _close(_number(shown), logged, 3), (figure, end, shown, logged)
            finite += math.isfinite(logged)
    # Alpha, strict ~ kind and every offset are defined over these items (the pairs with verbose share two items
    # only, and the run has no tau-b for them: the page shows none, never a number). From 2-3 items none has an
    # interval (the small-sample rule, issue #60: it showed brackets from 3 items): each value alone, as logged.
    assert finite == 1 + 1 + 3
    assert table[0][1][0] == "Krippendorff's alpha, all members (interval)"

    # "failed only" finds the items a member failed, not only those the panel could not score.
    visit.page.check("#filter-failed")
    shown = visit.page.evaluate(
        "() => Array.from(document.querySelectorAll('article.item')).filter(a => a.checkVisibility()).map(a => a.dataset.item)")
    assert shown == ["g02", "g03"]


def test_a_model_filter_shows_that_runs_agreement_only(panel_report, open_page):
    out = panel_report.root / "twice"
    made = run_capjudge("report", f"first={panel_report.run.output_path}", f"second={panel_report.run.output_path}",
                        "--out", str(out))
    assert made.returncode == 0, made.stderr
    visit = open_page(out / "report.html")
    blocks = visit.page.locator(f"#task-{TASK} .panel-agreement")
    assert [blocks.nth(n).get_attribute("data-model") for n in range(blocks.count())] == ["first", "second"]
    visit.page.select_option("#filter-model", "second")
    assert not blocks.nth(0).is_visible() and blocks.nth(1).is_visible()
    assert visit.page.locator(f"#item-{TASK}-g01 .judgment[data-model='second'] .member").count() == 3


def test_a_panel_line_that_does_not_say_what_a_panel_record_says_is_one_line_naming_it(panel_report, tmp_path):
    import shutil

    def report_of(change) -> str:
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        shutil.copytree(panel_report.run.run_dir, run)
        (samples,) = run.glob(f"*_samples_{TASK}.jsonl")
        lines = [json.loads(text) for text in samples.read_text(encoding="utf-8").splitlines()]
        change(lines[1])
        samples.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        made = run_capjudge("report", str(run), "--out", str(tmp_path / "out"))
        assert made.returncode == 1 and not (tmp_path / "out" / "report.html").exists()
        (message,) = made.stderr.strip().splitlines()
        assert f"{samples}, line 2" in message
        return message

    assert "no record of panel member 'kind' (`judged@kind`)" in report_of(lambda line: line.pop("judged@kind"))
    assert "judgment.panel`.not_judged is not an object" in report_of(
        lambda line: line["judged"]["judgment"]["panel"].update(not_judged=["verbose"]))
    assert "`gveval_mean@strict`: 'high' is text, not a number" in report_of(lambda line: line.update({"gveval_mean@strict": "high"}))

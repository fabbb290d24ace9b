"""The per-battle arena page (`capjudge report --arena FILE`, capjudge.metrics.item_report.arena_page) in real
headless Chromium: a verdict file judged through the real CLI and the test server by the always-first scripted
judge, with the orders that show poor's first caption first left unanswered (failed): every battle shows both
captions and both orders' verdicts and replies, every verdict that changed with the order is marked, a failed
order is shown failed and makes no battle (never a tie), the filters pick the marked battles, and nothing
leaves the machine."""

from __future__ import annotations

import json

import pytest

from tests.support.arena_runs import DEMO, arena, caption_flags
from tests.support.harness_runs import judge_server, run_capjudge_cli
from tests.support.openai_server import Reply, prompt_text
from tests.support.paths import REPO_ROOT
from tests.support.scripted_pairwise_judges import PairwiseWorld

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


def _caption(name: str, item: str) -> str:
    rows = map(json.loads, (DEMO / f"captions_{name}.jsonl").read_text(encoding="utf-8").splitlines())
    return next(row["caption"] for row in rows if row["id"] == item)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("arena_page")
    world, unanswered = PairwiseWorld(), _caption("poor", "g01")

    def respond(body):
        if f"\nCaption A:\n{unanswered}\n" in prompt_text(body):
            return Reply("I would rather not say.")  # no verdict: re-asked, then a failed order
        return world.respond(body)

    with judge_server(responder=respond) as server:
        done = arena(root, server, "first", "--task", TASK, *caption_flags(), "--limit", "2", "--out", str(root / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| judge | 6 | 4 | 4 | 2 |" in done.stdout  # 2 of 12 orders failed (within the default failure rate)
    report = run_capjudge_cli(["report", "--arena", str(root / "run" / f"arena_{TASK}.jsonl"), "--out", str(root / "page")],
                              env={"PATH": "/usr/bin:/bin", "HOME": str(root)}, cwd=REPO_ROOT)
    assert report.returncode == 0, report.stderr[-3000:]
    return root / "page" / f"arena_{TASK}.html"


def test_each_battle_shows_both_orders_with_inconsistent_verdicts_marked_and_failed_orders_failed(page, open_page, tmp_path):
    visit = open_page(page)
    assert visit.offsite_requests() == []
    assert visit.page.inner_text("#shown") == "6 of 6 battles shown"
    battles = visit.page.query_selector_all("article.battle")
    assert len(battles) == 6
    # Both captions of each battle, as the judge saw them.
    first = visit.page.query_selector('article.battle[data-item="g01"][data-model-a="captions_good"][data-model-b="captions_fair"]')
    assert [node.inner_text() for node in first.query_selector_all(".side .caption")] == [
        _caption("good", "g01"), _caption("fair", "g01")]
    # Always-first: in every battle with both orders, every dimension changed with the order, and says so.
    marked = visit.page.query_selector_all("td.verdict.inconsistent")
    assert len(marked) == 4 * 2 * 5
    assert all(cell.query_selector(".mark").inner_text() == "✗ changed with the order" for cell in marked)
    assert first.query_selector('tr[data-order="a_first"] td.verdict[data-dimension="overall"] .winner').inner_text() \
        == "captions_good"
    assert first.query_selector('tr[data-order="b_first"] td.verdict[data-dimension="overall"] .winner').inner_text() \
        == "captions_fair"
    assert first.query_selector("tr.for-ranking").inner_text().endswith("tie: position-inconsistent")
    assert "Scripted pairwise judge first." in first.query_selector('tr[data-order="a_first"] td.reply pre').text_content()
    # poor's g01 caption shown first never got a verdict: that order failed, shown failed, and is no battle.
    failed = visit.page.query_selector_all('article.battle[data-failed="true"]')
    assert sorted(b.get_attribute("data-model-a") + "/" + b.get_attribute("data-model-b") for b in failed) == [
        "captions_fair/captions_poor", "captions_good/captions_poor"]
    for battle in failed:
        assert battle.get_attribute("data-item") == "g01"
        assert battle.query_selector('tr[data-order="b_first"] td.failed').inner_text().startswith("failed: missing")
        assert battle.query_selector('tr[data-order="b_first"] td.verdict') is None  # never shown as a tie
        assert battle.query_selector("tr.for-ranking").inner_text().endswith("no battle: an order failed")
    # The judge's position bias above the battles, failed pairs left out: 4 valid pairs, all primacy.
    # From 2 items, and every resample alike: the values alone, no bracket (the small-sample rule, issue #60).
    assert visit.page.inner_text("table.bias td.consistency") == "0.00"
    assert visit.page.inner_text("table.bias td.fairness") == "-1.00"
    # The filters.
    visit.page.check("#filter-inconsistent")
    assert visit.page.inner_text("#shown") == "4 of 6 battles shown"
    visit.page.uncheck("#filter-inconsistent")
    visit.page.check("#filter-failed")
    assert visit.page.inner_text("#shown") == "2 of 6 battles shown"
    visit.page.uncheck("#filter-failed")
    visit.page.select_option("#filter-model", "captions_poor")
    assert visit.page.inner_text("#shown") == "4 of 6 battles shown"
    shot = visit.screenshot(tmp_path / "arena_page.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

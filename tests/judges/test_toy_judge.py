"""A third judge, written in its own files only (tests/support/toy_judge/: utils.py and toy.yaml), runs end to end:
through lmms-eval and `capjudge judge`, then the leaderboard (with its judge-noise share), the item report
(its frames re-rendered from the geometry its records log) and `capjudge reliability`. capjudge knows nothing
of it but what its records carry: its descriptor's facts.
"""

from __future__ import annotations

import ast
import csv
import json
import random
import threading
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO_ROOT, SUPPORT_DIR
from tests.support.harness_runs import run_capjudge
from tests.support.harness_runs import harness_env, judge_server, launch_lmms_eval
from tests.support.openai_server import Reply, prompt_text

pytestmark = pytest.mark.slow

TOY_FOLDER = SUPPORT_DIR / "toy_judge"
TASK = "toy_judge"
K = 3
DEMO = REPO_ROOT / "tasks" / "demo"


def toy_responder(images_seen: list[int]):
    """`overall=N fluency=M`: N from the caption, plus a reply-to-reply wobble so k replies differ."""
    wobble = random.Random(7)
    lock = threading.Lock()

    def respond(body):
        parts = body["messages"][0]["content"]
        with lock:
            images_seen.append(sum(1 for part in parts if part.get("type") == "image_url"))
            noise = wobble.choice((-1, 0, 1))
        caption = prompt_text(body).split("Caption:", 1)[1].split("\n", 1)[0]
        overall = 3 + len(caption) % 5
        return Reply(f"overall={overall + noise} fluency={max(1, overall - 1)}")

    return respond


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    images_seen: list[int] = []
    with judge_server(responder=toy_responder(images_seen)) as server:
        samples = {"CAPJUDGE_JUDGE_SAMPLES": str(K)}
        harness = launch_lmms_eval(
            model="captions_file", model_args=f"path={DEMO / 'captions_good.jsonl'},model_name=good", tasks=TASK,
            output_path=root / "lmms", judge_base_url=server.base_url, cache_path=root / "cache.sqlite",
            include_path=TOY_FOLDER, env=samples,
        ).require_run()
        env = harness_env(server.base_url, cache_path=root / "cache.sqlite", datasets_cache=root / "hf", extra=samples)
        judged = run_capjudge("judge", "--captions", str(DEMO / "captions_poor.jsonl"), "--model-name", "poor",
                              "--task", TASK, "--include-path", str(TOY_FOLDER), "--out", str(root / "judged"),
                              env=env, timeout=300)
        assert judged.returncode == 0, judged.stderr[-3000:]
    return {"root": root, "harness": harness, "judged": root / "judged", "images_seen": images_seen}


def _lines(folder: Path) -> list[dict]:
    (samples,) = list(folder.rglob(f"*_samples_{TASK}.jsonl"))
    return [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_toy_judge_runs_in_lmms_eval_and_in_capjudge_judge_and_its_records_carry_its_descriptor(toy_runs):
    results = toy_runs["harness"].results()["results"][TASK]
    assert 3 <= results["toy_overall,none"] <= 8 and results["toy_failed,none"] == 0
    assert toy_runs["images_seen"] and set(toy_runs["images_seen"]) == {2}  # its geometry: 2 frames a request
    # The items are the toy's own (its file beside its YAML, read by its own format): each line's target is
    # that file's `reference` (a field no shipped dataset's rows have), its video the clip the file names.
    items = {row["id"]: row for row in map(json.loads, (TOY_FOLDER / "toy_items.jsonl").read_text().splitlines())}
    for folder in (toy_runs["harness"].output_path, toy_runs["judged"]):
        lines = _lines(folder)
        assert len(lines) == 10
        assert sorted(line["judged"]["item_id"] for line in lines) == sorted(items)
        for line in lines:
            record = line["judged"]
            item = items[record["item_id"]]
            assert line["target"] == item["reference"]
            assert Path(record["judgment"]["video"]) == DEMO / f"{item['clip']}.mp4"
            assert record["record_version"] == 2 and record["judge"]["name"] == "toy"
            assert record["judge"]["descriptor"]["reply_fields"]["main"] == "overall"
            assert len(record["judgment"]["samples"]) == K


def test_the_leaderboard_ranks_both_models_and_traces_the_toy_scores_to_their_replies(toy_runs, tmp_path):
    out = tmp_path / "board"
    made = run_capjudge("leaderboard", str(toy_runs["harness"].output_path), str(toy_runs["judged"]),
                        "--out", str(out), "--resamples", "300")
    assert made.returncode == 0, made.stderr
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        rows = {row["model"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"good", "poor"}
    for row in rows.values():
        assert row[f"{TASK}/toy_overall_replies"] == str(K)
        assert 0 < float(row[f"{TASK}/toy_overall_judge_noise_share"]) <= 1  # the wobble is judge noise
        assert float(row[f"{TASK}/toy_fluency_judge_noise_share"]) == 0.0  # fluency never wobbles


def test_the_item_report_shows_the_toy_frames_and_scores(toy_runs, tmp_path, open_page):
    out = tmp_path / "report"
    made = run_capjudge("report", str(toy_runs["harness"].output_path), str(toy_runs["judged"]), "--out", str(out))
    assert made.returncode == 0, made.stderr
    visit = open_page(out / "report.html")
    item = visit.page.locator(f"#item-{TASK}-g01")
    assert item.locator("img").count() == 2  # re-rendered from the logged geometry, as the judge saw them
    assert "2 frames" in item.inner_text() and "JPEG (quality 60)" in item.inner_text()
    card = item.locator(".judgment[data-model='poor']").inner_text()
    assert "overall" in card and "fluency" in card


def test_reliability_measures_the_toy_scores(toy_runs):
    result = run_capjudge("reliability", str(toy_runs["judged"]), "--task", TASK, "--resamples", "300")
    assert result.returncode == 0, result.stderr
    measured = [line.split("|")[1].strip() for line in result.stdout.splitlines()
                if line.startswith("| ") and not line.startswith("| score |")]
    assert measured[:2] == ["overall", "fluency"]


def test_the_toy_judge_brings_its_own_items_and_imports_no_judges_module():
    """Its items are its own file, read by its own format (the YAML names it; its task class brings it), and
    nothing of it imports a shipped judge's module (G-VEval's or AnyCap's, or their task modules)."""
    from capjudge.judges.datasets.known_datasets import SHIPPED_DATASETS

    metadata = yaml.load((TOY_FOLDER / "toy.yaml").read_text(encoding="utf-8"), Loader=_TagTolerantLoader)["metadata"]
    assert metadata["dataset"] == "toy_items" and metadata["dataset"] not in SHIPPED_DATASETS
    assert (TOY_FOLDER / metadata["default_data"]).is_file()
    tree = ast.parse((TOY_FOLDER / "utils.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    judges_modules = [name for name in imported if name.startswith(("capjudge.judges.gveval", "capjudge.judges.anycap",
                                                                    "capjudge.tasks.harness.gveval_task",
                                                                    "capjudge.tasks.harness.anycap_task"))]
    assert judges_modules == [] and "capjudge.judges.datasets.items" in imported


class _TagTolerantLoader(yaml.SafeLoader):
    """Reads a task YAML's `!function` tags as their text."""


_TagTolerantLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def test_capjudge_itself_knows_nothing_of_the_toy_judge():
    from capjudge.judges.known_judges import SHIPPED_JUDGES

    assert "toy" not in SHIPPED_JUDGES
    for folder in ("judges", "metrics", "tasks"):
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml", ".txt", ".html", ".js"):
                assert "toy_judge" not in path.read_text(encoding="utf-8"), path

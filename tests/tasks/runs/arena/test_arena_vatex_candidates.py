"""`capjudge arena --candidates` on VATEX-EVAL's rated candidates (issue #49 item 4, the pairwise judge's part),
through the real CLI and the test server, on a seeded subset of the real VATEX-EVAL file (../shared), text
only (G-VEval's mode "references": no clip on this machine): same-clip pairs only, K per clip drawn as
`capjudge vatex` draws them, both orders asked (counted at the server), the text-only pairwise template sent
(references, no image), the records checked against the file, a rerun free, the dry run's count what the run
sends; and the bad inputs (--pairs-per-clip 0/16/not a number, a clip id not in the file, flags that do not go
together): one line, exit 2, no request.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from tests.support.arena_runs import VATEX_TASK, one_line_refusal, vatex_arena, vatex_subset
from tests.support.harness_runs import judge_server
from tests.support.openai_server import prompt_text
from tests.support.paths import shared_path
from tests.support.scripted_pairwise_judges import GVEVAL_DIMENSIONS, PairwiseWorld

from capjudge.judges.datasets.vatex_eval import load_vatex_eval
from capjudge.judges.pairwise.record import read_arena_file
from capjudge.metrics.arena.human_preferences import human_pairs, sample_pairs

pytestmark = pytest.mark.slow
CLIPS, SUBSET_SEED, K, SEED = 4, 49, 2, 5


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    path = vatex_subset(tmp_path_factory.mktemp("vatex") / "vatex_subset.json", CLIPS, SUBSET_SEED)
    return path, load_vatex_eval(path)


def _preferences_by_clip(candidates) -> dict[str, set[tuple[int, int]]]:
    """Each clip's pairs whose raters' means differ, counted here from the ratings."""
    found: dict[str, set[tuple[int, int]]] = {}
    for a, b in itertools.combinations(candidates, 2):
        if a.clip_id == b.clip_id and sum(a.ratings) != sum(b.ratings):
            found.setdefault(a.clip_id, set()).add((a.candidate_index, b.candidate_index))
    return found


def _shown(entry) -> tuple[str, str]:
    text = prompt_text(entry.body)
    return (text.split("\nCaption A:\n", 1)[1].split("\n\nCaption B:\n", 1)[0],
            text.split("\n\nCaption B:\n", 1)[1].split("\n\nYou should first give", 1)[0])


def test_k_human_preferences_per_clip_in_both_orders_text_only_and_a_free_rerun(tmp_path, subset):
    data, candidates = subset
    by_key = {(c.clip_id, c.candidate_index): c for c in candidates}
    preferences = _preferences_by_clip(candidates)
    # The pairs `capjudge vatex --pairs-per-clip K --seed SEED` compares on this file.
    sampled = [pair.key for pair in sample_pairs(human_pairs(candidates), K, SEED).pairs]
    assert len(sampled) == sum(min(K, len(pairs)) for pairs in preferences.values())
    assert all((index_a, index_b) in preferences[clip] for clip, index_a, index_b in sampled)
    out = tmp_path / "out"
    args = ["--pairs-per-clip", str(K), "--seed", str(SEED)]
    world = PairwiseWorld()
    with judge_server(responder=world.respond) as server:
        dry = vatex_arena(tmp_path, server, "long", data, *args, "--dry-run")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert server.log == []
        models = len({index for _, a, b in sampled for index in (a, b)})  # a candidate index is a model in its clip
        assert (f"arena: {models} models, {CLIPS} items, {len(sampled)} pairs x 2 orders = {2 * len(sampled)} requests per "
                f"judge, 0 of them already in the reply cache: {2 * len(sampled)} left to send") in dry.stdout

        done = vatex_arena(tmp_path, server, "long", data, *args, "--out", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 2 * len(sampled)  # 2 requests per pair, one per order
        for entry in server.log:  # the text-only template: the clip's references, no image
            text = prompt_text(entry.body)
            assert text.startswith("You will be given two captions, Caption A and Caption B, each generated from the "
                                   "same complete video. You will not see the video itself.")
            assert "\nReference Captions:\n- " in text and "[[verdict]]" in text
            assert all(part["type"] == "text" for part in entry.body["messages"][0]["content"])
        expected_shown = [(by_key[(clip, a)].caption, by_key[(clip, b)].caption) for clip, a, b in sampled]
        assert sorted(_shown(entry) for entry in server.log) == sorted(expected_shown + [(b, a) for a, b in expected_shown])

        header, records = read_arena_file(out / f"arena_{VATEX_TASK}.jsonl")
        assert header.task == VATEX_TASK and "--candidates --pairs-per-clip 2" in header.command
        assert [(r.item_id, r.model_a, r.model_b) for r in records] == [
            (clip, f"candidate {a}", f"candidate {b}") for clip, a, b in sampled]
        for record, (clip, a, b) in zip(records, sampled):
            assert record.cluster == clip and record.judge_version == "gveval-pairwise-references/1"
            assert (record.caption_a, record.caption_b) == (by_key[(clip, a)].caption, by_key[(clip, b)].caption)
            assert record.dimensions == GVEVAL_DIMENSIONS
            for order, a_first in ((record.a_first, True), (record.b_first, False)):
                rule = world.expected_verdict("long", record.caption_a, record.caption_b, a_first, None)
                assert order.verdicts == dict.fromkeys(GVEVAL_DIMENSIONS, rule)
        assert f"| judge | {len(sampled)} | {len(sampled)} | 0 | 0 | {2 * len(sampled)} | 0 |" in done.stdout

        server.log.clear()  # a rerun: every order from the cache, the same file
        again = vatex_arena(tmp_path, server, "long", data, *args, "--out", str(out))
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.log == []
        cached = [replace(r, a_first=replace(r.a_first, cache_hit=True, requests=0),
                          b_first=replace(r.b_first, cache_hit=True, requests=0)) for r in records]
        assert list(read_arena_file(out / f"arena_{VATEX_TASK}.jsonl")[1]) == cached


def test_every_same_clip_pair_without_k_and_clips_bounded_by_id_or_limit(tmp_path, subset):
    data, candidates = subset
    clips = list(dict.fromkeys(c.clip_id for c in candidates))
    with judge_server(responder=PairwiseWorld().respond) as server:
        every = vatex_arena(tmp_path, server, "long", data, "--dry-run")
        assert every.returncode == 0, every.stderr[-3000:]
        assert f"arena: 6 models, {CLIPS} items, {15 * CLIPS} pairs x 2 orders = {30 * CLIPS} requests" in every.stdout
        one = vatex_arena(tmp_path, server, "long", data, "--clip", clips[2], "--out", str(tmp_path / "one"))
        assert one.returncode == 0, one.stderr[-3000:]
        assert len(server.log) == 30
        _, records = read_arena_file(tmp_path / "one" / f"arena_{VATEX_TASK}.jsonl")
        assert {r.item_id for r in records} == {clips[2]}
        assert [(r.model_a, r.model_b) for r in records] == [
            (f"candidate {a}", f"candidate {b}") for a, b in itertools.combinations(range(6), 2)]
        limited = vatex_arena(tmp_path, server, "long", data, "--limit", "2", "--pairs-per-clip", "1", "--dry-run")
        assert limited.returncode == 0, limited.stderr[-3000:]
        assert "2 items, 2 pairs x 2 orders = 4 requests" in limited.stdout


@pytest.mark.parametrize("args, problem", [
    (["--pairs-per-clip", "0"], "--pairs-per-clip must be 1 or more, got 0"),
    (["--pairs-per-clip", "16"], "--pairs-per-clip 16: more than 15, the most capjudge allows"),
    (["--clip", "not_a_clip_000001_000011"], "--clip 'not_a_clip_000001_000011': no clip of task "
                                              "'gveval_vatex_references' has this id"),
    (["--captions", "tasks/demo/captions_good.jsonl"], "--candidates pairs the task's own candidates of each clip: "
                                                       "not with --captions"),
])
def test_bad_candidate_flags_are_one_line_and_exit_2_before_any_request(tmp_path, subset, args, problem):
    data, _ = subset
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = vatex_arena(tmp_path, server, "long", data, *args, "--out", str(tmp_path / "out"))
        assert problem in one_line_refusal(done)
        assert server.log == []
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_pairs_per_clip_that_is_not_a_number_is_refused_naming_the_flag(tmp_path, subset):
    data, _ = subset
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = vatex_arena(tmp_path, server, "long", data, "--pairs-per-clip", "two", "--dry-run")
    assert done.returncode == 2 and done.stdout == "" and server.log == []
    assert done.stderr.strip().splitlines()[-1] == ("capjudge arena: error: argument --pairs-per-clip: invalid int "
                                                    "value: 'two'")


def test_candidate_flags_without_candidates_are_refused(tmp_path):
    from tests.support.arena_runs import arena, caption_flags

    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "long", "--task", "gveval_demo", *caption_flags(), "--pairs-per-clip", "2",
                     "--dry-run")
        assert "--pairs-per-clip goes with --candidates" in one_line_refusal(done)
        demo = arena(tmp_path, server, "long", "--task", "gveval_demo", "--candidates", "--dry-run")
        assert "the items of task 'gveval_demo' carry no rated candidates of a clip" in one_line_refusal(demo)
        assert server.log == []


def test_a_pair_of_two_candidates_with_the_same_caption_is_left_out_and_counted(tmp_path):
    # A real VATEX-EVAL clip two of whose six candidates are the same words (318 of its 3,000 clips have such
    # a pair): a verdict between them tests only position, and the same request would be paid twice.
    whole = json.loads(shared_path("data", "vatex_eval", "vid_cans_score_dict.json").read_text(encoding="utf-8"))
    clip, row = next((clip, row) for clip, row in whole.items() if len(set(row["cands"])) == 5)
    data = tmp_path / "one_clip.json"
    data.write_text(json.dumps({clip: row}), encoding="utf-8")
    with judge_server(responder=PairwiseWorld().respond) as server:
        dry = vatex_arena(tmp_path, server, "long", data, "--dry-run")
        assert dry.returncode == 0, dry.stderr[-3000:]
        # Each of the 4 other candidates is paired with both twins: 4 pairs show the same captions as 4 others,
        # in both orders: 28 - 8 = 20 distinct requests, each asked once.
        assert ("1 items, 14 pairs x 2 orders = 20 requests per judge (8 orders show the same two captions as "
                "another and are asked once)") in dry.stdout
        assert "--candidates: 1 pair(s) of two candidates with the same caption left out" in dry.stderr
        done = vatex_arena(tmp_path, server, "long", data, "--out", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 20  # as the dry run said, whatever the timing: no request twice
        assert [line for line in done.stdout.splitlines() if line.startswith("| judge | ")][-1] == \
            "| judge | 14 | 14 | 0 | 0 | 20 | 0 |"  # the requests column counts each request once
    _, records = read_arena_file(tmp_path / "out" / f"arena_{VATEX_TASK}.jsonl")
    assert len(records) == 14 and all(r.caption_a != r.caption_b for r in records)
    by_captions = {}
    for r in records:  # a pair showing the same captions as another has its verdicts, not a request of its own
        by_captions.setdefault((r.caption_a, r.caption_b), []).append(r)
    twins = [group for group in by_captions.values() if len(group) == 2]
    assert len(twins) == 4
    assert all(a.a_first.verdicts == b.a_first.verdicts and b.a_first.requests == 0 for a, b in twins)

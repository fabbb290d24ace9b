"""`capjudge vatex --arena-verdicts FILE` (issue #49 item 4): the pairwise judge's row of the human-preference
table, through the real CLI, from verdict files `capjudge arena --candidates` made against the test server on a
seeded subset of the real VATEX-EVAL file (../shared). Scripted judges of known behaviour: one that prefers the
candidate the raters rated higher (with a scripted position effect on close calls: those verdicts flip, so they
are ties) reaches 1.0 without ties and exactly 1 - close calls / pairs with them; one that prefers the longer
caption equals caption length's concordance on the same pairs, both counted directly here. A file covering part
of the compared pairs says how many, and the rows are computed again on those. Hostile: a file edited by hand,
a verdict file of the demo task, a file covering none of the compared pairs: one line, exit 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.support.arena_runs import VATEX_TASK, arena, caption_flags, vatex_arena, vatex_subset
from tests.support.harness_runs import judge_server, run_capjudge
from tests.support.hostile import refusal_line
from tests.support.scripted_pairwise_judges import HUMAN_CLOSE_CALL, PairwiseWorld

from capjudge.judges.datasets.vatex_eval import load_vatex_eval
from capjudge.judges.pairwise.record import read_arena_file
from capjudge.metrics.arena.human_preferences import human_pairs, sample_pairs

pytestmark = pytest.mark.slow
CLIPS, SUBSET_SEED, K, SEED = 5, 7, 3, 2
LENGTH = "caption length (words)"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The subset, and the verdict files of the `human` and `long` judges on its K-per-clip sample."""
    root = tmp_path_factory.mktemp("arena_vatex")
    data = vatex_subset(root / "vatex_subset.json", CLIPS, SUBSET_SEED)
    candidates = load_vatex_eval(data)
    files = {}
    with judge_server(responder=PairwiseWorld(vatex=candidates).respond) as server:
        for judge in ("human", "long"):
            out = root / judge
            done = vatex_arena(root, server, judge, data, "--pairs-per-clip", str(K), "--seed", str(SEED),
                               "--out", str(out))
            assert done.returncode == 0, done.stderr[-3000:]
            files[judge] = out / f"arena_{VATEX_TASK}.jsonl"
        pairs = sum(1 for _ in read_arena_file(files["human"])[1])
        assert len(server.log) == 2 * 2 * pairs  # two judges, 2 requests per pair
    return root, data, candidates, files


def _vatex(data, *args: str):
    return run_capjudge("vatex", str(data), *args, timeout=600)


def _table(data, verdicts, *args: str) -> dict:
    done = _vatex(data, "--arena-verdicts", str(verdicts), "--format", "json", "--resamples", "50", "--seed", str(SEED),
                  "--pairs-per-clip", str(K), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["preferences"]


def _rows(rows) -> dict:
    return {row["scorer"]: row for row in rows}


def _pairwise(rows) -> dict:
    (row,) = [row for row in rows if row["scorer"].startswith("pairwise judge (")]
    return row


def _compared(candidates) -> list[tuple[object, object]]:
    """(first, second) candidates of every pair the table compares, counted from the ratings here."""
    by_key = {(c.clip_id, c.candidate_index): c for c in candidates}
    keys = [pair.key for pair in sample_pairs(human_pairs(candidates), K, SEED).pairs]
    return [(by_key[(clip, a)], by_key[(clip, b)]) for clip, a, b in keys]


def _direct(pairs, value) -> tuple[int, int, int]:
    """(agree, scored, decided) of a scorer `value(candidate)` against the raters' mean, pair by pair."""
    agree = decided = 0
    for first, second in pairs:
        human = np.sign(np.mean(first.ratings) - np.mean(second.ratings))
        mine = np.sign(value(first) - value(second))
        decided += mine != 0
        agree += mine == human
    return agree, len(pairs), decided


def test_the_judge_that_prefers_what_the_raters_prefer_agrees_but_for_its_position_effect(made):
    _, data, candidates, files = made
    table = _table(data, files["human"])
    compared = _compared(candidates)
    close = sum(abs(np.mean(a.ratings) - np.mean(b.ratings)) <= HUMAN_CLOSE_CALL for a, b in compared)
    assert 0 < close < len(compared)  # the scripted position effect is exercised, and not on every pair
    row = _pairwise(table["rows"])
    assert table["n_compared"] == len(compared) == row["n_pairs"] == row["n_scored"]
    assert (row["n_ties"], row["n_missing"]) == (close, 0)  # a verdict that flips with the order is a tie
    assert row["without_ties"]["value"] == 1.0
    assert row["with_ties"]["value"] == pytest.approx(1 - close / len(compared))
    assert row["with_ties"]["ci_low"] <= row["with_ties"]["value"] <= row["with_ties"]["ci_high"]
    assert [r["scorer"] for r in table["rows"]][-2:] == [row["scorer"], "raters (each vs the mean of the others)"]
    assert "gveval judge, model human" in row["scorer"]
    arena_part = table["arena"]
    assert (arena_part["n_covered"], arena_part["n_failed"], arena_part["rows"]) == (len(compared), 0, [])
    assert arena_part["source"] == str(files["human"])


def test_the_judge_that_prefers_the_longer_caption_equals_caption_length_on_the_same_pairs(made):
    _, data, candidates, files = made
    table = _table(data, files["long"])
    rows = _rows(table["rows"])
    agree, scored, decided = _direct(_compared(candidates), lambda c: len(c.caption.split()))
    for row in (_pairwise(table["rows"]), rows[LENGTH]):
        assert (row["n_scored"], row["n_ties"], row["n_missing"]) == (scored, scored - decided, 0)
        assert row["with_ties"]["value"] == pytest.approx(agree / scored)
        assert row["without_ties"]["value"] == pytest.approx(agree / decided)
    assert _pairwise(table["rows"])["with_ties"] == rows[LENGTH]["with_ties"]  # same pairs, same clip resamples


def test_a_file_covering_part_of_the_compared_pairs_says_so_and_compares_on_its_own_pairs(made):
    root, data, candidates, files = made
    whole = json.loads(data.read_text(encoding="utf-8"))
    more = json.loads(vatex_subset(root / "others.json", 3, SUBSET_SEED + 1).read_text(encoding="utf-8"))
    assert not set(more) & set(whole)
    bigger = root / "bigger.json"
    bigger.write_text(json.dumps({**whole, **more}), encoding="utf-8")
    table = _table(bigger, files["human"])
    compared = _compared(candidates)
    row = _pairwise(table["rows"])
    assert table["n_compared"] > len(compared) == table["arena"]["n_covered"]
    assert row["n_missing"] == table["n_compared"] - len(compared)  # not in the file: missing, not disagreeing
    on_covered = _rows(table["arena"]["rows"])
    assert _pairwise(table["arena"]["rows"])["without_ties"]["value"] == 1.0
    agree, scored, decided = _direct(compared, lambda c: len(c.caption.split()))
    assert on_covered[LENGTH]["n_pairs"] == scored and on_covered[LENGTH]["with_ties"]["value"] == pytest.approx(agree / scored)
    text = _vatex(bigger, "--arena-verdicts", str(files["human"]), "--resamples", "0", "--seed", str(SEED),
                  "--pairs-per-clip", str(K))
    assert text.returncode == 0, text.stderr[-3000:]
    assert (f"- The pairwise judge: {files['human']} (gveval judge, model human) covers {len(compared):,} of the "
            f"{table['n_compared']:,} pairs compared (0 of them with an order that failed)") in text.stdout
    assert f"On the {len(compared):,} pairs the verdict file covers:" in text.stdout
    assert "Only part covered" not in text.stdout  # the same K and seed: the clips it lacks are why


@pytest.mark.parametrize("ours", [["--pairs-per-clip", str(K), "--seed", str(SEED + 1)], ["--seed", str(SEED)]])
def test_a_verdict_file_drawn_with_another_k_or_seed_says_so(made, ours):
    # The file was drawn with --pairs-per-clip K --seed SEED; this table with another seed, or every pair.
    root, data, candidates, files = made
    done = _vatex(data, "--arena-verdicts", str(files["human"]), "--resamples", "0", *ours)
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads(_vatex(data, "--arena-verdicts", str(files["human"]), "--resamples", "0", "--format", "json",
                              *ours).stdout)["preferences"]
    assert table["arena"]["n_covered"] < table["n_compared"]  # the premise: it covers only part
    theirs = f"--pairs-per-clip {K} --seed {SEED}"
    mine = "every same-clip pair" if "--pairs-per-clip" not in ours else f"--pairs-per-clip {K} --seed {SEED + 1}"
    assert (f"- Only part covered: the verdict file drew {theirs}, this table {mine}: give both commands the same to "
            "compare on the same pairs.") in done.stdout
    assert table["arena"]["other_sampling"].startswith(f"the verdict file drew {theirs}")


def test_bad_verdict_files_are_one_line_and_exit_2(made, tmp_path):
    root, data, candidates, files = made
    edited = tmp_path / "edited.jsonl"
    lines = files["human"].read_text(encoding="utf-8").splitlines(keepends=True)
    edited.write_text("".join([lines[0], lines[1].replace('"overall": "A"', '"overall": "B"', 1), *lines[2:]]),
                      encoding="utf-8")
    assert edited.read_text(encoding="utf-8") != files["human"].read_text(encoding="utf-8")
    with judge_server(responder=PairwiseWorld(vatex=candidates).respond) as server:
        demo = arena(tmp_path, server, "fair", "--task", "gveval_demo", *caption_flags("good", "poor"), "--limit", "1",
                     "--out", str(tmp_path / "demo"))
        assert demo.returncode == 0, demo.stderr[-3000:]
        # One clip, one pair, drawn by a seed whose K=1 sample of that clip is another pair than `capjudge vatex
        # --pairs-per-clip 1 --seed SEED` compares: a file covering none of the compared pairs.
        clip = candidates[0].clip_id
        ours = human_pairs([c for c in candidates if c.clip_id == clip])
        theirs = sample_pairs(ours, 1, SEED).pairs[0].key
        other = next(s for s in range(100) if sample_pairs(ours, 1, s).pairs[0].key != theirs)
        elsewhere = vatex_arena(tmp_path, server, "human", data, "--clip", clip, "--pairs-per-clip", "1", "--seed",
                                str(other), "--out", str(tmp_path / "elsewhere"))
        assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    cases = {
        edited: "edited after capjudge wrote it",
        tmp_path / "demo" / "arena_gveval_demo.jsonl": "item 'g01' is not a clip of",
        tmp_path / "elsewhere" / f"arena_{VATEX_TASK}.jsonl": "its verdicts cover none of the",
        tmp_path / "absent.jsonl": "cannot be read",
    }
    for path, problem in cases.items():
        done = _vatex(data, "--arena-verdicts", str(path), "--resamples", "0", "--seed", str(SEED),
                      "--pairs-per-clip", "1")
        line = refusal_line(done, problem)
        assert line.startswith("capjudge vatex: ") and str(path) in line and done.stdout == ""

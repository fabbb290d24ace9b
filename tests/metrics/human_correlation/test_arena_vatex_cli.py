"""`capjudge vatex`'s agreement with humans' preferences (issue #49 item 4), through the real command line on the
real VATEX-EVAL file (../shared): every same-clip pair the raters' mean does not tie, the pointwise scorer's and
caption length's concordance and the raters' leave-one-out ceiling, each against a direct count made here; a
scorer that leaves candidates out (their pairs counted missing); --pairs-per-clip K (seeded, bounded) and its
hostile values (one line naming the flag, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from capjudge.judges.datasets.vatex_eval import load_vatex_eval
from tests.support.harness_runs import run_capjudge
from tests.support.paths import shared_path

VATEX = ("data", "vatex_eval", "vid_cans_score_dict.json")


@pytest.fixture(scope="module")
def vatex():
    path = shared_path(*VATEX)
    return path, load_vatex_eval(path)


def _scores(candidates) -> np.ndarray:
    """Mean rating plus noise, rounded to whole points (so the scorer ties some pairs); every 7th candidate
    unscored."""
    ratings = np.array([c.ratings for c in candidates], dtype=float)
    scores = np.round(ratings.mean(axis=1) * 2 + np.random.default_rng(11).normal(0, 1.5, len(candidates)))
    scores[::7] = np.nan
    return scores


def _write_scorer(path, candidates, scores):
    path.write_text("".join(json.dumps({"clip_id": c.clip_id, "candidate_index": c.candidate_index, "score": float(s)}) + "\n"
                            for c, s in zip(candidates, scores) if np.isfinite(s)))
    return path


def _vatex(*arguments: str):
    return run_capjudge("vatex", *arguments, timeout=600)


def _direct(candidates, values, keep=None):
    """(agree, scored, decided, missing) for `values` over the same-clip preferences, counted pair by pair."""
    by_clip: dict[str, list[int]] = {}
    for k, c in enumerate(candidates):
        by_clip.setdefault(c.clip_id, []).append(k)
    agree = scored = decided = missing = 0
    for clip, members in by_clip.items():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                i, j = members[x], members[y]
                if keep is not None and (clip, *sorted((candidates[i].candidate_index, candidates[j].candidate_index))) not in keep:
                    continue
                human = np.sign(np.mean(candidates[i].ratings) - np.mean(candidates[j].ratings))
                if human == 0:
                    continue
                if not (np.isfinite(values[i]) and np.isfinite(values[j])):
                    missing += 1
                    continue
                mine = np.sign(values[i] - values[j])
                scored += 1
                decided += mine != 0
                agree += mine == human
    return agree, scored, decided, missing


def _direct_ceiling(candidates):
    by_clip: dict[str, list[int]] = {}
    for k, c in enumerate(candidates):
        by_clip.setdefault(c.clip_id, []).append(k)
    agree = counted = decided = 0
    for members in by_clip.values():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                a, b = np.array(candidates[members[x]].ratings, float), np.array(candidates[members[y]].ratings, float)
                if a.mean() == b.mean():
                    continue
                for rater in range(3):
                    others = [r for r in range(3) if r != rater]
                    reference = np.sign(a[others].mean() - b[others].mean())
                    if reference == 0:
                        continue
                    own = np.sign(a[rater] - b[rater])
                    counted += 1
                    decided += own != 0
                    agree += own == reference
    return agree, counted, decided


@pytest.fixture(scope="module")
def report(vatex, tmp_path_factory):
    path, candidates = vatex
    scores = _scores(candidates)
    scorer = _write_scorer(tmp_path_factory.mktemp("arena_vatex") / "judge.jsonl", candidates, scores)
    result = _vatex(str(path), str(scorer), "--format", "json", "--resamples", "20", "--seed", "3")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["preferences"], scores, scorer


def test_every_row_is_the_direct_count_on_the_same_pairs(vatex, report):
    _, candidates = vatex
    table, scores, _ = report
    rows = {row["scorer"]: row for row in table["rows"]}
    assert list(rows)[-1] == "raters (each vs the mean of the others)" and "caption length (words)" in rows
    words = np.array([len(c.caption.split()) for c in candidates], dtype=float)
    judge = next(name for name in rows if name.startswith("judge"))
    for name, values in ((judge, scores), ("caption length (words)", words)):
        agree, scored, decided, missing = _direct(candidates, values)
        row = rows[name]
        assert (row["n_scored"], row["n_ties"], row["n_missing"]) == (scored, scored - decided, missing), name
        assert row["n_pairs"] == table["n_preferences"] == scored + missing
        assert row["with_ties"]["value"] == pytest.approx(agree / scored)
        assert row["without_ties"]["value"] == pytest.approx(agree / decided)
        for figure in (row["with_ties"], row["without_ties"]):
            assert figure["ci_low"] <= figure["value"] <= figure["ci_high"]
    assert rows[judge]["n_missing"] > 0  # every 7th candidate unscored: its pairs are missing, not disagreements
    agree, counted, decided = _direct_ceiling(candidates)
    ceiling = rows["raters (each vs the mean of the others)"]
    assert ceiling["with_ties"]["value"] == pytest.approx(agree / counted)
    assert ceiling["without_ties"]["value"] == pytest.approx(agree / decided)
    # The raters agree with each other more than a noisy scorer does with them.
    assert ceiling["without_ties"]["value"] > rows[judge]["without_ties"]["value"] > 0.5
    assert table["n_same_clip_pairs"] == 15 * len({c.clip_id for c in candidates})
    assert table["n_same_clip_pairs"] == table["n_preferences"] + table["n_tied"] and table["pairs_per_clip"] is None
    assert "clip-clustered bootstrap (20 resamples of the clips, seed 3)" in table["method"]


def test_pairs_per_clip_bounds_and_seeds_the_pairs(vatex, report, tmp_path):
    path, candidates = vatex
    scorer = report[2]
    runs = [_vatex(str(path), str(scorer), "--format", "json", "--resamples", "0", "--pairs-per-clip", "2",
                   "--seed", seed) for seed in ("5", "5", "6")]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    tables = [json.loads(run.stdout)["preferences"] for run in runs]
    assert tables[0] == tables[1] and tables[0]["rows"] != tables[2]["rows"]
    table = tables[0]
    clips = len({c.clip_id for c in candidates})
    assert table["pairs_per_clip"] == 2 and clips < table["n_compared"] <= 2 * clips
    for row in table["rows"][:-1]:
        assert row["n_pairs"] == table["n_compared"] == row["n_scored"] + row["n_missing"]
    text = _vatex(str(path), str(scorer), "--resamples", "0", "--pairs-per-clip", "2", "--seed", "5")
    assert text.returncode == 0, text.stderr
    assert (f"Agreement with humans' preferences: {table['n_preferences']:,} same-clip pairs" in text.stdout
            and f"at most 2 per clip (seeded): {table['n_compared']:,} compared" in text.stdout)
    assert "raters (each vs the mean of the others)" in text.stdout


@pytest.mark.parametrize("value, problem", [
    ("0", "--pairs-per-clip must be 1 or more, got 0"),
    ("-4", "--pairs-per-clip must be 1 or more, got -4"),
    ("16", "--pairs-per-clip 16: more than 15, the most capjudge allows"),
    ("9" * 30, "--pairs-per-clip 999999999999999999999999999999: more than 15"),
])
def test_hostile_pairs_per_clip_is_one_line_and_exit_2(vatex, value, problem):
    path, _ = vatex
    result = _vatex(str(path), "--pairs-per-clip", value)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and problem in result.stderr, result.stderr


def test_a_pairs_per_clip_that_is_not_a_number_is_refused_naming_the_flag(vatex):
    # argparse's own refusal, as for every count flag of capjudge: its usage, then the line naming the flag.
    path, _ = vatex
    result = _vatex(str(path), "--pairs-per-clip", "two")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == "capjudge vatex: error: argument --pairs-per-clip: invalid int value: 'two'"

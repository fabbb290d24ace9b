"""What `capjudge.api`'s statistics take, through the public API (issue #60 items 4 and 5): `correlate` checks a
numpy array as it checks a list (the check `capjudge correlate` puts its input through), and `BootstrapSettings`
/ `LeaderboardSettings` refuse, naming the field and its bound, what the `capjudge correlate` / `leaderboard`
flags refuse. Before, an array was cast unchecked (1e300 gave a Pearson of -1e-18, inf was silently missing,
strings were scored, a 2x2 array was four items) and the settings ended in numpy's errors, silently in no
interval, or out of memory.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import capjudge.api as api
from capjudge.tasks.cli.bounds import MAX_PERMUTATIONS, MAX_RESAMPLES, MAX_SEED

JUDGE = [71.0, 40.5, 63.0, 88.0, 12.0, 55.0, 30.0]
HUMAN = [4.0, 2.5, 3.0, 3.0, 1.0, 4.5, 2.0]
NO_BOOTSTRAP = api.BootstrapSettings(n_resamples=0)


def _refusal(judge, human=HUMAN) -> str:
    with pytest.raises(ValueError) as raised:
        api.correlate(judge, human, settings=NO_BOOTSTRAP)
    assert "\n" not in str(raised.value)
    return str(raised.value)


# ---------------------------------------------------------------------------------------------------------
# correlate: an array is checked as a list is


@pytest.mark.parametrize("bad", [1e300, -1e300, math.inf, -math.inf, 2.0**60])
def test_an_implausible_judge_score_is_refused_from_an_array_as_from_a_list(bad):
    scores = [*JUDGE[:1], bad, *JUDGE[2:]]
    from_list = _refusal(scores)
    assert from_list.startswith("item '1' judge score: ") and "not a plausible score" in from_list
    assert _refusal(np.array(scores)) == from_list
    assert _refusal(np.array(scores, dtype=object)) == from_list


def test_an_integer_array_beyond_a_floats_whole_numbers_is_refused():
    scores = np.array([1, 2**60, 3, 4, 5, 6, 7], dtype=np.int64)
    assert _refusal(scores) == _refusal(scores.tolist())


@pytest.mark.parametrize("scores, problem", [
    (np.array(["1", "2", "3", "4", "5", "6", "7"]), "judge scores: an array of <U1 values; expected numbers"),
    (np.array([True, False] * 3 + [True]), "judge scores: an array of bool values; expected numbers"),
    (np.array([1 + 2j] * 7), "judge scores: an array of complex128 values"),
    (np.array(["1", 2, 3, 4, 5, 6, 7], dtype=object), "item '0' judge score: expected a number or null, got '1'"),
])
def test_an_array_of_what_is_no_number_is_refused_not_scored(scores, problem):
    assert problem in _refusal(scores)


def test_a_two_dimensional_judge_array_is_refused_not_flattened_into_more_items():
    message = _refusal(np.array([[1.0, 2.0], [3.0, 4.0]]), [1.0, 2.0, 3.0, 4.0])
    assert message == "judge scores: an array of shape (2, 2); expected one score per item (1-D)"
    assert "expected one score per item" in _refusal(np.array(5.0), [1.0])


def test_nan_in_an_array_is_missing_as_none_in_a_list_and_the_figures_are_the_same():
    with_none = [71.0, None, 63.0, 88.0, 12.0, 55.0, 30.0]
    from_list = api.correlate(with_none, HUMAN, settings=api.BootstrapSettings(n_resamples=200, seed=4))
    for scores in (np.array([71.0, np.nan, 63.0, 88.0, 12.0, 55.0, 30.0]), np.array(with_none, dtype=object)):
        from_array = api.correlate(scores, np.array(HUMAN), settings=api.BootstrapSettings(n_resamples=200, seed=4))
        assert from_array.missing == from_list.missing and from_array.missing.judge_missing == 1
        for name in ("pearson", "spearman", "kendall_b", "kendall_c"):
            assert from_array[name].value_ci == from_list[name].value_ci, name


def test_human_arrays_are_checked_as_lists_naming_the_item_and_the_annotator():
    human = [[4.0, 3.5], [2.5, math.nan], [3.0, 3.0], [3.0, 2.0], [1.0, 1.5], [4.5, 4.0], [2.0, 2.5]]
    from_list = api.correlate(JUDGE, [[v for v in row if not math.isnan(v)] for row in human], settings=NO_BOOTSTRAP)
    from_array = api.correlate(np.array(JUDGE), np.array(human), settings=NO_BOOTSTRAP)
    assert from_array["kendall_b"].value == from_list["kendall_b"].value
    assert from_array.n_pairs == from_list.n_pairs == 13

    human[3][1] = math.inf
    message = _refusal(JUDGE, np.array(human))
    assert message.startswith("item '3' human score, annotator 1: ") and "not a plausible score" in message
    assert "expected numbers" in _refusal(JUDGE, np.array([str(v) for v in HUMAN]))
    out_of_range = "item '0' human score, annotator 0: index 2 is out of range for [1.0, 1.0]"  # as from lists
    with pytest.raises(ValueError, match=re.escape(out_of_range)):
        api.correlate(JUDGE, np.ones((7, 3, 2)), human_index=2, settings=NO_BOOTSTRAP)
    three_d = np.stack([np.array(HUMAN)[:, None] * np.ones((1, 2)), np.ones((7, 2))], axis=2)
    assert api.correlate(JUDGE, three_d, human_index=0, settings=NO_BOOTSTRAP).n_pairs == 14


# ---------------------------------------------------------------------------------------------------------
# BootstrapSettings and LeaderboardSettings: the command's bounds, named


@pytest.mark.parametrize("field, value, bound", [
    ("n_resamples", 2.5, "a whole number from 0 to 10,000"),
    ("n_resamples", -5, "a whole number from 0 to 10,000"),
    ("n_resamples", True, "a whole number from 0 to 10,000"),
    ("n_resamples", 10**8, "a whole number from 0 to 10,000"),
    ("n_resamples", 10**12, "a whole number from 0 to 10,000"),
    ("n_resamples", "1000", "a whole number from 0 to 10,000"),
    ("seed", -1, "a whole number from 0 to 4,294,967,295"),
    ("seed", 2**32, "a whole number from 0 to 4,294,967,295"),
    ("seed", False, "a whole number from 0 to 4,294,967,295"),
    ("seed", 1.0, "a whole number from 0 to 4,294,967,295"),
    ("confidence", 1.5, "a number between 0 and 1 (exclusive)"),
    ("confidence", math.nan, "a number between 0 and 1 (exclusive)"),
    ("confidence", 0, "a number between 0 and 1 (exclusive)"),
    ("confidence", 1, "a number between 0 and 1 (exclusive)"),
    ("confidence", "0.95", "a number between 0 and 1 (exclusive)"),
    ("ci_method", "bogus", "one of bca, percentile"),
    ("ci_method", None, "one of bca, percentile"),
])
def test_bootstrap_settings_refuse_what_capjudge_correlate_refuses(field, value, bound):
    with pytest.raises(ValueError) as raised:
        api.BootstrapSettings(**{field: value})
    assert str(raised.value).startswith(f"{field} must be {bound}, got "), str(raised.value)


@pytest.mark.parametrize("field, value, bound", [
    ("n_resamples", 2.5, "a whole number from 0 to 10,000"),
    ("n_resamples", 10**8, "a whole number from 0 to 10,000"),
    ("n_resamples", True, "a whole number from 0 to 10,000"),
    ("n_permutations", 0, "a whole number from 1 to 10,000"),
    ("n_permutations", 10**12, "a whole number from 1 to 10,000"),
    ("n_permutations", 99.0, "a whole number from 1 to 10,000"),
    ("seed", -1, "a whole number from 0 to 4,294,967,295"),
    ("confidence", math.nan, "a number between 0 and 1 (exclusive)"),
    ("confidence", "0.95", "a number between 0 and 1 (exclusive)"),
    ("alpha", 1.5, "a number between 0 and 1 (exclusive)"),
    ("failure_warn_rate", -0.1, "a number from 0 to 1"),
    ("failure_warn_rate", math.nan, "a number from 0 to 1"),
    ("length_control", "no", "True or False"),
    ("arena", 0, "True or False"),
])
def test_leaderboard_settings_refuse_what_capjudge_leaderboard_refuses(field, value, bound):
    with pytest.raises(ValueError) as raised:
        api.LeaderboardSettings(**{field: value})
    assert str(raised.value).startswith(f"{field} must be {bound}, got "), str(raised.value)


def test_the_bounds_are_the_command_lines_own_and_every_value_inside_them_is_taken():
    """The command's flags and the settings refuse from the same number on (tasks/cli/bounds.py)."""
    api.BootstrapSettings(n_resamples=MAX_RESAMPLES, seed=MAX_SEED, confidence=0.5, ci_method="percentile")
    api.LeaderboardSettings(n_resamples=MAX_RESAMPLES, n_permutations=MAX_PERMUTATIONS, seed=MAX_SEED,
                            failure_warn_rate=1)
    for settings in (api.BootstrapSettings, api.LeaderboardSettings):
        for field, value in (("n_resamples", MAX_RESAMPLES + 1), ("seed", MAX_SEED + 1)):
            with pytest.raises(ValueError, match=f"^{field} must be a whole number from 0 to {value - 1:,}, got "):
                settings(**{field: value})
    with pytest.raises(ValueError, match=f"^n_permutations must be a whole number from 1 to {MAX_PERMUTATIONS:,}"):
        api.LeaderboardSettings(n_permutations=MAX_PERMUTATIONS + 1)
    # numpy's own whole numbers are whole numbers, as in a notebook's arithmetic
    settings = api.BootstrapSettings(n_resamples=np.int64(50), seed=np.uint32(3), confidence=np.float32(0.9))
    assert api.correlate(JUDGE, HUMAN, settings=settings)["pearson"].n_resamples == 50

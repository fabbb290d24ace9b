"""The one small-sample rule (capjudge.metrics.statistics.small_samples) at its edges, and the places that print
an interval's ends so that the rule's readers can trust them (issue #60 item 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from capjudge.metrics.sensitivity.report import _number
from capjudge.metrics.statistics.panel_agreement import panel_agreement
from capjudge.metrics.statistics.small_samples import (MIN_UNITS, ZERO_WIDTH_REASON, is_zero_width, under_rule,
                                                        withheld_reason)
from capjudge.metrics.statistics.value_ci import ValueCI
from capjudge.metrics.statistics.correlation import BootstrapSettings


def test_the_floor_is_five_units_and_names_them():
    figure = ValueCI(0.5774, 0.2, 0.9)
    assert under_rule(figure, MIN_UNITS) == (figure, "")
    shown, why = under_rule(figure, MIN_UNITS - 1, "clip")
    assert shown == ValueCI(0.5774) and why == "from 4 clips: capjudge shows an interval from 5 clips or more"
    assert withheld_reason(figure, 1) == "from 1 item: capjudge shows an interval from 5 items or more"


@pytest.mark.parametrize("low, high, zero", [(1.0, 1.0, True), (-1.0, -1.0, True), (100.0, 100.0 + 1e-12, True),
                                             (0.0, 1e-6, False), (59.0, 80.4, False)])
def test_a_zero_width_interval_is_the_value_alone(low, high, zero):
    assert is_zero_width(low, high) is zero
    shown, why = under_rule(ValueCI(low, low, high), 50)
    assert (shown.ci_low is None and why == ZERO_WIDTH_REASON) if zero else (shown.ci_low == low and why == "")


def test_a_figure_without_an_interval_stays_as_it_is():
    assert under_rule(ValueCI(0.3), 2) == (ValueCI(0.3), "")
    assert under_rule(ValueCI(None), 2) == (ValueCI(None), "")
    assert not is_zero_width(math.nan, math.nan)


def test_a_panel_offset_every_item_shares_has_no_interval():
    """Every item the same offset gave 'x [x, x]'; now the offset alone."""
    scores = np.array([[50.0, 60.0]] * 12) + np.arange(12)[:, None]
    result = panel_agreement(scores, scores.mean(axis=1), ("a", "b"), "interval", BootstrapSettings(n_resamples=200, seed=0))
    assert [offset.offset for offset in result.offsets] == [ValueCI(-5.0), ValueCI(5.0)]


@pytest.mark.parametrize("value, text", [(0.004, "+0.004"), (-0.004, "-0.004"), (0.0, "+0.00"), (82.0, "+82.00"),
                                         (-0.01, "-0.01"), (None, "n/a")])
def test_a_shift_end_that_is_not_zero_never_prints_as_zero(value, text):
    """'[+0.00, +82]' read as 'wrong direction' beside '[-0.01, +82]', 'no effect': the sign decides the verdict."""
    assert _number(value) == text

"""Who judged a run, as the readers see it (capjudge.metrics.files.judged_by, #38 item 2): one judge is a run
with one member and no values of its own apart; a panel's members, file and quorum come from its record, or
from its results' `<metric>@<member>` names. A panel record that does not say what one says is a RunFileError
naming the file and line, whichever reader asked (the item report, `correlate --run`).

The lines and results here are those the real runs write (tests/judges/client/test_judge_panel.py, tests/metrics/item_report/test_item_report_panel.py
and tests/metrics/leaderboard/test_leaderboard_panel.py read them from lmms-eval runs end to end); these pin the reading rules and
the refusals on their own, without a harness run.
"""

from __future__ import annotations

import copy

import pytest

from capjudge.judges.client.panel import ONE_JUDGE
from capjudge.metrics.files.judged_by import JudgedBy, RunMember, judged_by_record, judged_by_results
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.task_run import TaskRun

WHERE = "runs/x_samples_gveval_demo.jsonl, line 3"
PANEL_LINE = {
    "doc_id": 0,
    "judged": {"record_version": 2, "item_id": "g01",
               "judge": {"name": "gveval", "model": "panel(harsh,lenient)", "endpoint": None,
                         "panel": {"file": "panel.yaml", "quorum": 2,
                                   "members": [{"name": "harsh", "model": "m-harsh", "endpoint": "http://a/v1"},
                                               {"name": "lenient", "model": "m-lenient", "endpoint": None}]}}},
}


def _changed(change) -> dict:
    line = copy.deepcopy(PANEL_LINE)
    change(line["judged"]["judge"])
    return line


def test_a_panel_record_names_its_members_file_and_quorum():
    found = judged_by_record(PANEL_LINE, WHERE)
    assert found == JudgedBy((RunMember("harsh", "m-harsh", "http://a/v1"), RunMember("lenient", "m-lenient", None)),
                             pooled=True, file="panel.yaml", quorum=2)
    assert found.names == found.logged_apart == ("harsh", "lenient")


def test_one_judge_is_one_member_with_nothing_logged_apart():
    one = judged_by_record(_changed(lambda judge: judge.pop("panel")), WHERE)
    assert one.members == (RunMember(ONE_JUDGE, "panel(harsh,lenient)", None),)
    assert (one.pooled, one.logged_apart, one.file, one.quorum) == (False, (), None, None)
    # A null panel field, an old log naming the judge model alone, a line with no record: one judge too.
    assert not judged_by_record(_changed(lambda judge: judge.update(panel=None)), WHERE).pooled
    assert judged_by_record({"judged": {"judge": "gpt-4o"}}, WHERE).members == (RunMember(ONE_JUDGE, "gpt-4o"),)
    assert judged_by_record({"doc_id": 1}, WHERE).members == (RunMember(ONE_JUDGE),)


@pytest.mark.parametrize("change, problem", [
    (lambda judge: judge.update(panel=["harsh"]), "`judged.judge.panel` is not an object"),
    (lambda judge: judge["panel"].update(members=[]), "`judged.judge.panel.members` is not a list of named members"),
    (lambda judge: judge["panel"]["members"][1].update(name="no spaces allowed"),
     "`judged.judge.panel.members` is not a list of named members"),
    (lambda judge: judge["panel"]["members"].append("lenient"),
     "`judged.judge.panel.members` is not a list of named members"),
    (lambda judge: judge["panel"].update(quorum=0), "`judged.judge.panel.quorum` is 0, not a number of members"),
    (lambda judge: judge["panel"].update(quorum=True), "`judged.judge.panel.quorum` is True, not a number of members"),
    (lambda judge: judge["panel"].update(quorum="2"), "`judged.judge.panel.quorum` is '2', not a number of members"),
])
def test_a_panel_record_that_does_not_say_what_one_says_is_one_error_naming_file_and_line(change, problem):
    with pytest.raises(RunFileError) as raised:
        judged_by_record(_changed(change), WHERE)
    assert str(raised.value) == f"{WHERE}: {problem}"


def _task_run(harness_values: dict[str, float]) -> TaskRun:
    return TaskRun(task="gveval_demo", metric_names=("gveval_mean", "gveval_accuracy"), higher_is_better={},
                   harness_values=harness_values, item_keys=None, values={}, bool_valued={}, judges={},
                   judge_source="unknown", samples_path=None)


def test_the_results_name_a_panels_members_in_the_order_the_run_wrote_them():
    found = judged_by_results(_task_run({"gveval_mean": 60.0, "gveval_mean@lenient": 70.0, "gveval_mean@harsh": 50.0,
                                         "gveval_accuracy@harsh": 2.0, "panel_alpha": 0.5,
                                         "panel_kendall_b@harsh~lenient": 0.4, "panel_offset@harsh": -10.0}))
    # Only the task's own metrics name members: the agreement figures' `@` names pairs and members too.
    assert found == JudgedBy((RunMember("lenient"), RunMember("harsh")), pooled=True)
    one = judged_by_results(_task_run({"gveval_mean": 60.0, "gveval_accuracy": 3.0, "other@x": 1.0}))
    assert one == JudgedBy((RunMember(ONE_JUDGE),)) and one.logged_apart == ()

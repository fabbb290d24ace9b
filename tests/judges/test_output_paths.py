"""The one output-path guard (issue #60 item 7, HOSTILE.md class 5), `capjudge.judges.output_paths`: a symbolic
link (to a file, or dangling), a folder, or a stamped writer's file of another run under an output's name is
refused with one line naming the path, the problem and the flag, in the caller's error class; a free name, a
plain file of an unstamped writer and a stamped writer's own file are not. The commands that use it are tested
through their real command lines (tests/metrics/leaderboard/test_leaderboard_outputs.py, the sensitivity and
arena output tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from capjudge.judges.output_paths import Found, check_output_paths, output_problem
from capjudge.metrics.files.outputs import OutputError


class _Refused(ValueError):
    """A caller's own error class: the guard raises whatever the caller's command catches."""


def _stamped(stamp: str | None):
    def read(path: Path) -> Found:
        return Found(stamp, "a file of run " + str(stamp))

    return read


def test_free_names_and_an_unstamped_writers_own_plain_files_may_be_written(tmp_path):
    (tmp_path / "old.md").write_text("an earlier board", encoding="utf-8")
    assert output_problem(tmp_path / "new.md") is None
    assert output_problem(tmp_path / "old.md") is None  # a rerun replaces its own file
    check_output_paths([(tmp_path / "new.md", None), (tmp_path / "old.md", None)], error=_Refused)


def test_links_and_folders_are_refused_whoever_writes(tmp_path):
    target = tmp_path / "target.csv"
    target.write_text("the user's file", encoding="utf-8")
    (tmp_path / "linked.csv").symlink_to(target)
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "nowhere.csv")
    (tmp_path / "folder.md").mkdir()
    for name in ("linked.csv", "dangling.csv"):
        assert output_problem(tmp_path / name) == "is a symbolic link, where capjudge would write a file of its own"
        assert output_problem(tmp_path / name, _stamped("a"), "a") is not None  # even a link to the run's own file
    assert output_problem(tmp_path / "folder.md") == (
        "is a folder (or another non-file), where capjudge would write a file of its own")


def test_a_stamped_writer_replaces_its_own_run_only(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("{}", encoding="utf-8")
    assert output_problem(path, _stamped("mine"), "mine") is None
    assert output_problem(path, _stamped("theirs"), "mine") == "already holds a file of run theirs, which this run would replace"
    assert output_problem(path, _stamped(None), "mine") is not None  # no stamp: not this writer's file at all


def test_the_first_refused_name_is_one_line_in_the_callers_error_class(tmp_path):
    (tmp_path / "b.png").mkdir()
    (tmp_path / "c.html").symlink_to(tmp_path / "elsewhere.html")
    outputs = [(tmp_path / "a.md", None), (tmp_path / "b.png", None), (tmp_path / "c.html", None)]
    with pytest.raises(_Refused) as refused:
        check_output_paths(outputs, error=_Refused, flag="--out")
    assert str(refused.value) == (f"{tmp_path / 'b.png'}: is a folder (or another non-file), where capjudge would "
                                  "write a file of its own; give another --out (or move it away) so that nothing is "
                                  "replaced")
    with pytest.raises(OutputError, match="c.html: is a symbolic link.*give another out_dir"):
        check_output_paths(outputs[2:], error=OutputError, flag="out_dir")
    # Without `error`, the guard raises OutputError itself (defined beside it); the commands' import finds it.
    with pytest.raises(OutputError, match="c.html: is a symbolic link.*give another out_dir") as refused:
        check_output_paths(outputs[2:], flag="out_dir")
    from capjudge.judges import output_paths

    assert type(refused.value) is output_paths.OutputError is OutputError  # one class, whichever module names it
    assert not (tmp_path / "a.md").exists()  # the guard only looks


def test_the_item_report_command_checks_its_page_name_before_reading_a_run(tmp_path, capsys):
    """`capjudge report RUN --out DIR` with DIR/report.html a folder: one line and exit 2 before any run is read
    or frame drawn (it was a traceback after the frames were written)."""
    from capjudge.tasks.cli.main import main as capjudge_main

    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)
    code = capjudge_main(["report", str(tmp_path / "no-such-run"), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"capjudge report: {out / 'report.html'}: is a folder (or another non-file), where "
                                 "capjudge would write a file of its own; give another --out (or move it away) so that "
                                 "nothing is replaced"]
    assert [path.name for path in out.iterdir()] == ["report.html"]

"""The leaderboard's output paths (issue #60 items 7 and 8, HOSTILE.md class 5), through the public API
(`capjudge.api.write_leaderboard`) on boards built from runs made here, and `capjudge leaderboard`'s main():

- every name is checked before anything is written, by the one guard every writer uses
  (`capjudge.judges.output_paths`): leaderboard.md a folder was a traceback after the three PNGs were written;
  leaderboard.csv a symbolic link was replaced by a plain file in silence; an arena plot's name taken by a
  folder is refused too; `write_leaderboard(board, "")` wrote into the current folder; a file given as the folder
  was a raw FileExistsError. Each is now one ValueError (OutputError) naming the path and the problem, with
  nothing written, and from the command exit 2 with that one line;
- the page is self-contained again: the arena's figure was a link to leaderboard_arena_<task>.png beside the
  page (moved or mailed, a broken image); now every <img src> is a data: URI and the page links no file.

The same through real lmms-eval runs and headless Chromium (the page copied alone to another folder) is in
test_arena_leaderboard_cli.py.
"""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from capjudge.api import LeaderboardSettings, build_leaderboard, write_leaderboard
from capjudge.judges.record import LoggedJudge
from capjudge.metrics.files.outputs import OutputError
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun
from capjudge.tasks.cli.main import main as capjudge_main

TASK = "gveval_demo"
SETTINGS = LeaderboardSettings(n_resamples=50, n_permutations=50, length_control=False)
FILES = ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png")
ARENA_PLOT = f"leaderboard_arena_{TASK}.png"
SCORES = {"strong": [90.0, 80.0, 85.0, 70.0, 95.0, 60.0], "middle": [70.0, 75.0, 60.0, 65.0, 80.0, 55.0],
          "weak": [40.0, 50.0, 45.0, 30.0, 60.0, 20.0]}


def _run(name: str, scores: list[float]) -> Run:
    n = len(scores)
    task_run = TaskRun(
        task=TASK, metric_names=("gveval_mean",), higher_is_better={"gveval_mean": True},
        harness_values={"gveval_mean": float(np.mean(scores))}, item_keys=tuple(f"item{i}" for i in range(n)),
        values={"gveval_mean": np.array(scores, dtype=float)}, bool_valued={"gveval_mean": False},
        judges={LoggedJudge(name=None, model="test-judge", judge_version=None, settings=None): n},
        judge_source="samples", samples_path=None,
    )
    return Run(name=name, results_paths=(Path(f"/runs/{name}/results.json"),), model="captions_file",
               model_args=f"model_name={name}", date="2026-11-24", tasks={TASK: task_run})


@pytest.fixture(scope="module")
def board():
    made = build_leaderboard([_run(name, scores) for name, scores in SCORES.items()], SETTINGS)
    assert TASK in made.arenas  # the board draws an arena plot, whose name is checked too
    return made


def _listing(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (hidden temporary files included) -> what it is, and a file's content."""
    return {str(path.relative_to(folder)): ("link" if path.is_symlink() else "folder" if path.is_dir()
                                            else path.read_bytes().hex()[:64])
            for path in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("taken", ["leaderboard.md", "leaderboard.png", ARENA_PLOT])
def test_a_folder_under_a_files_name_is_one_error_and_nothing_is_written(board, tmp_path, taken):
    out = tmp_path / "board"
    (out / taken).mkdir(parents=True)
    before = _listing(out)
    with pytest.raises(OutputError) as refused:
        write_leaderboard(board, out)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value).startswith(f"{out / taken}: is a folder") and "\n" not in str(refused.value)
    assert _listing(out) == before  # no PNG, no temporary file: nothing was written


def test_a_link_under_a_files_name_is_refused_and_kept(board, tmp_path):
    out, mine = tmp_path / "board", tmp_path / "mine.csv"
    out.mkdir()
    mine.write_text("the user's own table\n", encoding="utf-8")
    (out / "leaderboard.csv").symlink_to(mine)
    before = _listing(out)
    with pytest.raises(OutputError, match=r"leaderboard\.csv: is a symbolic link"):
        write_leaderboard(board, out)
    assert _listing(out) == before and (out / "leaderboard.csv").is_symlink()
    assert mine.read_text(encoding="utf-8") == "the user's own table\n"


def test_an_empty_folder_name_is_refused_not_the_current_folder(board, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputError, match=r"^out_dir '': empty: name a folder"):
        write_leaderboard(board, "")
    assert list(tmp_path.iterdir()) == []


def test_a_file_given_as_the_folder_is_one_error(board, tmp_path):
    (tmp_path / "board").write_text("not a folder", encoding="utf-8")
    with pytest.raises(OutputError, match=r"^out_dir .*board: is a file, not a folder$"):
        write_leaderboard(board, tmp_path / "board")
    assert (tmp_path / "board").read_text(encoding="utf-8") == "not a folder"


def test_a_rerun_replaces_its_own_files_and_leaves_a_folder_under_a_stale_plots_name(board, tmp_path):
    out = tmp_path / "board"
    first = write_leaderboard(board, out)
    (out / "leaderboard_length_gone.png").mkdir()  # not this board's plot, and no plot at all: left as it is
    (out / "leaderboard_arena_gone.png").write_bytes(b"an earlier board's plot")
    second = write_leaderboard(board, out)
    assert first == second and all((out / name).is_file() for name in FILES)
    assert (out / "leaderboard_length_gone.png").is_dir() and not (out / "leaderboard_arena_gone.png").exists()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []  # every other src or href

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if tag == "img" and name == "src":
                self.images.append(value or "")
            elif name in ("src", "href"):
                self.links.append(value or "")


def test_the_page_links_no_file_every_image_is_inline(board, tmp_path):
    files = write_leaderboard(board, tmp_path / "board")
    audit = _Links()
    audit.feed(files.html.read_text(encoding="utf-8"))
    assert audit.links == []  # no report URL given: nothing to link to
    assert all(src.startswith("data:image/png;base64,") for src in audit.images), [s[:60] for s in audit.images]
    inlined = {base64.b64decode(src.split(",", 1)[1]) for src in audit.images}
    assert inlined == {files.png.read_bytes(), (tmp_path / "board" / ARENA_PLOT).read_bytes()}
    assert files.arena_plots == (tmp_path / "board" / ARENA_PLOT,)


def test_the_command_checks_the_four_names_before_it_reads_a_run(tmp_path, capsys):
    out = tmp_path / "board"
    (out / "leaderboard.md").mkdir(parents=True)
    code = capjudge_main(["leaderboard", str(tmp_path / "no-such-run"), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"capjudge leaderboard: {out / 'leaderboard.md'}: is a folder (or another non-file), "
                                 "where capjudge would write a file of its own; give another --out (or move it away) "
                                 "so that nothing is replaced"]
    assert _listing(out) == {"leaderboard.md": "folder"}

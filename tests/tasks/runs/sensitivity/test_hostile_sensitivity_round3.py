"""Issue 46's findings on `capjudge sensitivity` and `capjudge report --sensitivity`, each through the real CLI and
the test server (tests/support/openai_server.py, its rubric responder as the judge):

- a perturbed caption that changed nothing (a one-word caption cut in half or shuffled) is no test of the judge:
  left out of the pairs, counted and said (JSON, table, page); a perturbation with no changed variant has no
  verdict, and asks the judge nothing extra (the variant is the original, judged once);
- every output name (the JSON, the plot, the page) taken by a folder, a link or another run's file is refused
  in one line naming the file and --out before a single judgment is asked, and nothing is left behind; a rerun
  of the same command replaces its own files; `report --sensitivity` never replaces a page it did not make;
- a sensitivity file with a key twice is refused (a JSON reader keeps the last copy: a second "items": [] would
  show an empty page);
- an empty --out is refused (Path("") is the current folder);
- a runaway caption (20,000 words; 10,000 copies of one word) is perturbed and described in linear time: the
  word diff runs on at most MAX_DIFF_CELLS, by construction;
- a name from the file that is an Object method's ("constructor") is shown as the text it is.
"""

from __future__ import annotations

import difflib
import json
import shutil

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import TEST_API_KEY, TEST_JUDGE_MODEL, judge_server, run_capjudge_cli
from tests.support.hostile import refusal_line

from capjudge.metrics.sensitivity import perturbations as perturbations_module
from capjudge.metrics.sensitivity.perturbations import MAX_DIFF_CELLS, PERTURBATIONS, perturb_all

TASK = "gveval_demo"
REPORT = f"sensitivity_{TASK}.json"
CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
QUICK = ("--perturbation", "padding", "--perturbation", "mismatch", "--resamples", "200")


def _env(tmp_path, server, **extra) -> dict[str, str]:
    return {"OPENAI_API_KEY": TEST_API_KEY, "MODEL_VERSION": TEST_JUDGE_MODEL, "OPENAI_BASE_URL": server.base_url,
            "CAPJUDGE_CACHE": str(tmp_path / "cache.sqlite"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **extra}


def _sensitivity(tmp_path, server, *arguments, cwd=REPO_ROOT, **env):
    return run_capjudge_cli(["sensitivity", "--task", TASK, *map(str, arguments)], env=_env(tmp_path, server, **env),
                            cwd=cwd)


def _report(tmp_path, *arguments, cwd=REPO_ROOT):
    return run_capjudge_cli(["report", *map(str, arguments)], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                            cwd=cwd)


def _demo_captions() -> list[dict[str, str]]:
    return [json.loads(line) for line in CAPTIONS.read_text(encoding="utf-8").splitlines() if line.startswith('{"id": "g')]


def _captions(tmp_path, change, name="captions.jsonl") -> str:
    """The demo's gveval captions, each row passed through `change(row) -> caption`."""
    path = tmp_path / name
    path.write_text("".join(json.dumps({"id": row["id"], "caption": change(row)}) + "\n" for row in _demo_captions()),
                    encoding="utf-8")
    return str(path)


def _partials(folder) -> list[str]:
    return sorted(path.name for path in folder.rglob("*.partial"))


# ---------------------------------------------------------------------------------------------------------
# A variant that changed nothing
# ---------------------------------------------------------------------------------------------------------

ONE_WORD = ["Dog.", "Cat.", "Horse.", "Bird.", "Fish.", "Car.", "Tree.", "Rain.", "Ship.", "Lamp."]


def test_variants_that_changed_nothing_are_counted_and_give_no_verdict(tmp_path):
    """Every caption one word: truncation and shuffle give the caption back. Their pairs are no test of the judge:
    left out and counted, no verdict (never "Fooled by: truncation"), and not one extra request."""
    words = iter(ONE_WORD)
    captions = _captions(tmp_path, lambda row: next(words))
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", captions, "--out", out, "--resamples", "200")
        asked = len(server.log)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    # The unchanged variants are the originals themselves: judged once, as the originals.
    changing = [p.name for p in PERTURBATIONS if p.name not in ("truncation", "shuffle")]
    assert asked == 10 * (1 + len(changing)) == report["counts"]["judgments"] == report["counts"]["requests"]
    assert report["unchanged"] == {p.name: 10 if p.name in ("truncation", "shuffle") else 0 for p in PERTURBATIONS}
    for item in report["items"]:
        for variant in item["variants"]:
            if variant["perturbation"] in ("truncation", "shuffle"):
                assert variant["text"] == item["original"]["text"] and variant["change"] == "unchanged"
    rows = [row for row in report["shifts"] if row["perturbation"] in ("truncation", "shuffle")]
    assert rows and all(not row["measured"] and row["not_measured"] == "no variant changed its caption"
                        and row["n_unchanged"] == 10 and row["n_left_out"] == 0 and "verdict" not in row
                        for row in rows)
    assert not {"truncation", "shuffle"} & set(report["fooled_by"]["judge"])
    assert report["no_verdict"] == {"judge": {"truncation": "no variant changed its caption",
                                              "shuffle": "no variant changed its caption"}}
    assert ("10 items x (1 original + 5 perturbations) = 60 captions (20 repeat another caption of their item: "
            "judged once), 40 judgments; 40 requests sent") in done.stdout
    assert ("Not tests of the judge: 20 perturbed captions changed nothing (truncation 10, shuffle 10; "
            in done.stdout)
    assert ("No verdict (nothing measured): truncation (no variant changed its caption); "
            "shuffle (no variant changed its caption).") in done.stdout
    passes, fooled = done.stdout.split("Passes: ", 1)[1].split("\n", 1)[0].split(" Fooled by: ")
    assert "truncation" not in passes + fooled and "shuffle" not in passes + fooled
    assert "| truncation | completeness | | not measured: no variant changed its caption |" in done.stdout
    # The page says the same, cell by cell: no shift, no mark, for a caption that is the original again.
    data = _page_data(out / f"sensitivity_{TASK}.html")
    assert data["unchanged"] == report["unchanged"]
    for item in data["items"]:
        for caption in item["captions"][1:]:
            unchanged = caption["perturbation"] in ("truncation", "shuffle")
            assert caption["unchanged"] is unchanged
            if unchanged:
                cells = [cell for judged in caption["judgments"] for cell in judged["cells"]]
                assert all(cell["shift"] is None and not cell["wrong_way"] and not cell["sound"] for cell in cells)


def test_a_perturbation_that_changed_some_captions_is_measured_on_the_others(tmp_path):
    """Half the captions one word: truncation is measured on the five it changed, the other five counted."""
    captions = _captions(tmp_path, lambda row: ONE_WORD[int(row["id"][1:]) - 1] if row["id"] <= "g05" else row["caption"])
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", captions, "--out", out, "--perturbation", "truncation",
                            "--resamples", "200")
        asked = len(server.log)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    assert asked == 10 + 5 and report["unchanged"] == {"truncation": 5}
    (row,) = report["shifts"]
    assert row["measured"] and row["n_candidates"] == 5 and row["n_unchanged"] == 5 and row["n_left_out"] == 0
    assert f"| {row['verdict']} | " in done.stdout and "| 5 (0; 5 unchanged) |" in done.stdout
    assert report["no_verdict"] == {"judge": {}}


def test_a_perturbation_that_changed_one_clip_only_has_no_verdict(tmp_path):
    """Nine captions one word, one long: truncation changes one clip. A clip-clustered interval from one clip has
    width 0 (every resample draws that clip), so any shift would read as a verdict: the row says why it has none,
    and the judgments are still made and kept."""
    captions = _captions(tmp_path, lambda row: row["caption"] if row["id"] == "g01" else ONE_WORD[int(row["id"][1:]) - 1])
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", captions, "--out", out, "--perturbation", "truncation",
                            "--resamples", "200")
        asked = len(server.log)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    assert asked == 10 + 1 and report["unchanged"] == {"truncation": 9}
    why = "only 1 clip with a changed pair judged on both sides: a verdict needs at least 5"  # the small-sample rule
    rows = report["shifts"]
    assert rows and all(not row["measured"] and row["not_measured"] == why and "verdict" not in row
                        and row["n_unchanged"] == 9 for row in rows)
    assert report["no_verdict"] == {"judge": {"truncation": why}}
    assert not report["fooled_by"]["judge"]
    assert f"No verdict (nothing measured): truncation ({why})." in done.stdout
    changed = next(item for item in report["items"] if item["item_id"] == "g01")["variants"][0]
    assert changed["text"] != changed["change"] and changed["judgments"]["judge"]["scores"]  # judged and kept


# ---------------------------------------------------------------------------------------------------------
# Output paths: checked before any judging; nothing another command or run wrote is replaced in silence
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".png", ".html"])
def test_an_output_name_taken_by_a_folder_is_refused_before_any_judging(tmp_path, suffix):
    out = tmp_path / "out"
    taken = out / f"sensitivity_{TASK}{suffix}"
    taken.mkdir(parents=True)
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, *QUICK)
        assert server.log == []  # not one judgment asked
    refusal_line(done, str(taken), "is a folder", "give another --out")
    assert sorted(path.name for path in out.iterdir()) == [taken.name] and _partials(out) == []


def _foreign_png(path):
    from PIL import Image

    Image.new("RGB", (4, 4), "white").save(path, format="PNG")


@pytest.mark.parametrize(("suffix", "write", "said"), [
    (".png", _foreign_png, "an image that is not a capjudge sensitivity plot"),
    (".html", lambda path: path.write_text("<p>my notes</p>", encoding="utf-8"), "not a sensitivity page"),
    (".json", lambda path: path.write_text('{"scores": [1, 2]}', encoding="utf-8"), "not a sensitivity report"),
], ids=["png", "html", "json"])
def test_an_output_name_holding_another_commands_file_is_refused_and_the_file_kept(tmp_path, suffix, write, said):
    out = tmp_path / "out"
    out.mkdir()
    taken = out / f"sensitivity_{TASK}{suffix}"
    write(taken)
    before = taken.read_bytes()
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, *QUICK)
        assert server.log == []
    refusal_line(done, str(taken), said, "give another --out")
    assert taken.read_bytes() == before and sorted(path.name for path in out.iterdir()) == [taken.name]


def test_an_output_name_that_is_a_symbolic_link_is_refused_and_its_target_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text("someone's file", encoding="utf-8")
    (out / REPORT).symlink_to(target)
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, *QUICK)
        assert server.log == []
    refusal_line(done, str(out / REPORT), "is a symbolic link", "give another --out")
    assert target.read_text(encoding="utf-8") == "someone's file" and (out / REPORT).is_symlink()


def test_another_run_into_the_same_out_is_refused_and_a_rerun_replaces_its_own_files(tmp_path):
    out = tmp_path / "out"
    with judge_server() as server:
        first = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "3", *QUICK)
        assert first.returncode == 0, first.stderr[-3000:]
        written = {path.name: path.read_bytes() for path in out.iterdir()}
        assert set(written) == {REPORT, f"sensitivity_{TASK}.png", f"sensitivity_{TASK}.html"}
        server.log.clear()
        # Other captions (same flags otherwise): another run, whose report would replace the first one's.
        other = _captions(tmp_path, lambda row: f"{row['caption']} Seen from afar.", name="other.jsonl")
        second = _sensitivity(tmp_path, server, "--captions", other, "--out", out, "--limit", "3", *QUICK)
        assert server.log == []
        refusal_line(second, str(out / REPORT), "another run", "give another --out")
        assert {path.name: path.read_bytes() for path in out.iterdir()} == written and _partials(out) == []
        # The same captions through another flag: another run too.
        third = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "2", *QUICK)
        refusal_line(third, str(out / REPORT), "another run", "--limit 3", "give another --out")
        # The same command again (e.g. to judge what failed the first time): its own files, replaced.
        again = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "3", *QUICK)
        assert again.returncode == 0, again.stderr[-3000:]
        assert server.log == []  # every judgment from the cache
    assert json.loads((out / REPORT).read_text(encoding="utf-8"))["counts"]["cache_hits"] == 9


def test_report_sensitivity_never_replaces_a_page_it_did_not_make(tmp_path):
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "3", *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    report = out / REPORT
    # The page `sensitivity` wrote is this file's own: made again in place.
    remade = _report(tmp_path, "--sensitivity", report, "--out", out)
    assert remade.returncode == 0, remade.stderr
    # A folder where the page goes: one line, before anything is written.
    blocked = tmp_path / "blocked"
    (blocked / f"sensitivity_{TASK}.html").mkdir(parents=True)
    refusal_line(_report(tmp_path, "--sensitivity", report, "--out", blocked),
                 str(blocked / f"sensitivity_{TASK}.html"), "is a folder", "give another --out")
    assert _partials(blocked) == []
    # Someone else's page of the same name: kept.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / f"sensitivity_{TASK}.html").write_text("<p>my notes</p>", encoding="utf-8")
    refusal_line(_report(tmp_path, "--sensitivity", report, "--out", foreign),
                 str(foreign / f"sensitivity_{TASK}.html"), "not a sensitivity page", "give another --out")
    assert (foreign / f"sensitivity_{TASK}.html").read_text(encoding="utf-8") == "<p>my notes</p>"
    # Another run's page of the same name (its file edited to other captions): kept.
    edited = json.loads(report.read_text(encoding="utf-8"))
    edited["items"][0]["original"]["text"] = "Another caption entirely."
    other = tmp_path / "other" / REPORT
    other.parent.mkdir()
    other.write_text(json.dumps(edited), encoding="utf-8")
    before = (out / f"sensitivity_{TASK}.html").read_bytes()
    refusal_line(_report(tmp_path, "--sensitivity", other, "--out", out),
                 str(out / f"sensitivity_{TASK}.html"), "another run", "give another --out")
    assert (out / f"sensitivity_{TASK}.html").read_bytes() == before


def test_a_sensitivity_file_named_after_a_leaderboard_never_takes_its_page(tmp_path):
    """`report --sensitivity leaderboard.json --out <a leaderboard folder>` would have replaced leaderboard.html."""
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "3", *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    renamed = tmp_path / "leaderboard.json"
    shutil.copy(out / REPORT, renamed)
    board = tmp_path / "board"
    board.mkdir()
    (board / "leaderboard.html").write_text("<p>the leaderboard</p>", encoding="utf-8")
    refusal_line(_report(tmp_path, "--sensitivity", renamed, "--out", board), str(renamed), "leaderboard.html",
                 "a leaderboard's page")
    assert (board / "leaderboard.html").read_text(encoding="utf-8") == "<p>the leaderboard</p>"


def test_a_key_twice_in_a_sensitivity_file_is_refused_not_last_wins(tmp_path):
    out = tmp_path / "out"
    with judge_server() as server:
        done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", out, "--limit", "3", *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (out / REPORT).read_text(encoding="utf-8").rstrip()
    assert text.endswith("}")
    twice = tmp_path / REPORT
    twice.write_text(text[:-1] + ', "items": []}\n', encoding="utf-8")
    refusal_line(_report(tmp_path, "--sensitivity", twice, "--out", tmp_path / "page"), str(twice),
                 "key 'items' appears more than once")
    assert not (tmp_path / "page").exists()


@pytest.mark.parametrize("command", ["sensitivity", "report"])
def test_an_empty_out_is_refused_not_the_current_folder(tmp_path, command):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    if command == "sensitivity":
        with judge_server() as server:
            done = _sensitivity(tmp_path, server, "--captions", CAPTIONS, "--out", "", *QUICK, cwd=cwd)
            assert server.log == []
    else:
        done = _report(tmp_path, "--sensitivity", tmp_path / "absent.json", "--out", "", cwd=cwd)
    refusal_line(done, "argument --out: empty")
    assert list(cwd.iterdir()) == []


# Every other command with an output folder: the same refusal, before anything is read or written.
OTHER_OUT_COMMANDS = [
    ("judge", "--task", TASK, "--captions", "absent.jsonl"),
    ("demo",),
    ("leaderboard", "absent-run"),
    ("render", "gveval", "--caption", "A dog runs."),
    ("render", "anycap", "--caption-type", "brief", "--output", "A dog runs.", "--reference", "A dog."),
]


@pytest.mark.parametrize("command", OTHER_OUT_COMMANDS, ids=[" ".join(c[:2]) for c in OTHER_OUT_COMMANDS])
def test_every_command_refuses_an_empty_out(tmp_path, command):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = run_capjudge_cli([*command, "--out", ""], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd=cwd)
    refusal_line(done, "argument --out: empty")
    assert list(cwd.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# Runaway captions: linear time
# ---------------------------------------------------------------------------------------------------------


def test_describing_a_runaway_change_diffs_a_bounded_part_by_construction(monkeypatch):
    """Every word diff of a 20,000-word caption's perturbations (and of 10,000 copies of one word) is at most
    MAX_DIFF_CELLS (its time grows with |before| x |after|); each change description stays a line."""
    sizes = []

    class Recording(difflib.SequenceMatcher):
        def __init__(self, isjunk=None, a="", b="", autojunk=True):
            sizes.append(len(a) * len(b))
            super().__init__(isjunk, a, b, autojunk)

    monkeypatch.setattr(perturbations_module.difflib, "SequenceMatcher", Recording)
    runaway = " ".join(f"word{i % 7919}" for i in range(20_000))
    repeated = " ".join(["again"] * 10_000)
    variants = perturb_all([("g01", runaway), ("g02", repeated), ("g03", "A dog runs in the park.")], 0)
    assert all(size <= MAX_DIFF_CELLS for size in sizes)
    assert max(len(variant.change) for variant in variants) < 2_000
    by_name = {(v.item_id, v.perturbation): v for v in variants}
    assert by_name["g01", "truncation"].change.startswith("20000 -> 10000 words: deleted 'word2081 word2082")  # word 10,000 is word{10000 % 7919}
    assert by_name["g02", "shuffle"].change == "unchanged"  # the same word 10,000 times, in any order
    assert by_name["g03", "padding"].change.endswith("at word 6")  # an ordinary caption: described as before


def test_a_runaway_caption_is_planned_and_judged_without_a_quadratic_step(tmp_path):
    """A 20,000-word caption and 10,000 copies of one word: --dry-run plans every judgment, and a run judges the
    others (those are too long to send: never a request) with a change description of a line."""
    runaway = {"g01": " ".join(f"word{i % 7919}" for i in range(20_000)), "g02": " ".join(["again"] * 10_000)}
    captions = _captions(tmp_path, lambda row: runaway.get(row["id"], row["caption"]))
    with judge_server() as server:
        planned = _sensitivity(tmp_path, server, "--captions", captions, "--dry-run")
        assert planned.returncode == 0, planned.stderr[-3000:]
        assert "sensitivity: 10 items x (1 original + 5 perturbations) = 60 judgments" in planned.stdout
        out = tmp_path / "out"
        done = _sensitivity(tmp_path, server, "--captions", captions, "--out", out, "--limit", "3",
                            "--perturbation", "padding", "--perturbation", "truncation", "--resamples", "200",
                            CAPJUDGE_MAX_FAILURE_RATE="1")
        sent = [request for request in server.log if "word7000" in json.dumps(request.body)]
    assert done.returncode == 0, done.stderr[-3000:]
    assert sent == []
    report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    runaway_item = next(item for item in report["items"] if item["item_id"] == "g01")
    assert all(len(variant["change"]) < 2_000 for variant in runaway_item["variants"])
    assert runaway_item["original"]["judgments"]["judge"]["failure"] == "caption_too_long"


# ---------------------------------------------------------------------------------------------------------
# The page, in the browser
# ---------------------------------------------------------------------------------------------------------


def _page_data(page):
    import re

    text = page.read_text(encoding="utf-8")
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S).group(1))


def test_names_that_are_object_methods_are_shown_as_text_and_unchanged_variants_as_no_test(tmp_path, open_page):
    """An `expected` of "constructor", a perturbation named "constructor" and a score named "__proto__" are
    the texts they are (a plain-object look-up showed "function Object() { [native code] }"); a caption that is
    its original again says it is no test."""
    words = iter(ONE_WORD)
    captions = _captions(tmp_path, lambda row: next(words))
    out = tmp_path / "out"
    with judge_server() as server:
        # 5 items: padding is measured, so its row shows the expectation (the small-sample rule's floor, issue #60).
        done = _sensitivity(tmp_path, server, "--captions", captions, "--out", out, "--limit", "5",
                            "--perturbation", "padding", "--perturbation", "truncation", "--resamples", "200")
    assert done.returncode == 0, done.stderr[-3000:]
    visit = open_page(out / f"sensitivity_{TASK}.html")
    assert visit.script_errors == [] and visit.offsite_requests() == []
    shifts = visit.page.evaluate("() => Array.from(document.querySelectorAll('table.shifts tr[data-perturbation]'))"
                                 ".map(row => [row.dataset.perturbation, row.cells[2].textContent, row.cells[8].textContent])")
    truncation = [row for row in shifts if row[0] == "truncation"]
    assert truncation == [["truncation", "not measured: no variant changed its caption", "— (0 left out, 5 unchanged)"]]
    marks = visit.page.evaluate("() => Array.from(document.querySelectorAll('tbody[data-unchanged=\"true\"] .shift'))"
                                ".map(span => span.textContent)")
    assert marks and set(marks) == {"unchanged: no test"}
    assert "5 perturbed captions changed nothing (padding 0" not in visit.page.inner_text("body")
    assert "5 perturbed captions changed nothing (truncation 5)" in visit.page.inner_text("body")

    document = json.loads((out / REPORT).read_text(encoding="utf-8"))
    document["shifts"][0]["expected"] = "constructor"
    document["perturbations"][0]["name"] = "constructor"
    for shift in document["shifts"]:
        if shift["perturbation"] == "padding":
            shift["perturbation"] = "constructor"
    for item in document["items"]:
        item["variants"][0]["perturbation"] = "constructor"
        for caption in (item["original"], *item["variants"]):
            for judged in caption["judgments"].values():
                judged["scores"] = {("__proto__" if name == "accuracy" else name): value
                                    for name, value in judged["scores"].items()}
    edited = tmp_path / "edited" / REPORT
    edited.parent.mkdir()
    edited.write_text(json.dumps(document), encoding="utf-8")
    page_folder = tmp_path / "page"
    remade = _report(tmp_path, "--sensitivity", edited, "--out", page_folder)
    assert remade.returncode == 0, remade.stderr
    visit = open_page(page_folder / f"sensitivity_{TASK}.html")
    assert visit.script_errors == []
    body = visit.page.inner_text("body")
    assert "native code" not in body and "[object Object]" not in body
    first = visit.page.evaluate("() => Array.from(document.querySelector('table.shifts tbody tr').cells)"
                                ".map(cell => cell.textContent)")
    assert first[0] == "constructor" and first[2] == "constructor"
    # The padding variant (now "constructor") keeps its expectation text, and "__proto__" is a score column.
    expected = visit.page.evaluate("() => document.querySelector('tbody[data-perturbation=\"constructor\"] "
                                   ".expected-line').textContent")
    assert expected.startswith("a sound judge: conciseness should drop")
    headers = visit.page.evaluate("() => Array.from(document.querySelectorAll('table.pairs thead th'))"
                                  ".map(cell => cell.textContent)")
    assert "__proto__" in headers

"""Hostile input to the per-item sensitivity page: `capjudge report --sensitivity FILE` reads a file someone may
have edited, cut short or made up. Every broken file is one line naming the file (and the item, caption and
scorer where there is one) and the problem, exit 2, no traceback, no output folder made; hostile text inside a
well-formed file (markup, a closing </script>) reaches the page only as data its script puts in as text (the
browser test, tests/metrics/sensitivity/test_sensitivity_page.py, opens such a page).
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge_cli
from tests.support.hostile import refusal_line

from capjudge.metrics.sensitivity.items_file import MAX_FILE_BYTES


def _judgment(accuracy, *, failure=None, reply="The Accuracy score is 80."):
    return {"scores": {"accuracy": accuracy, "mean": accuracy}, "failure": failure, "cache_hit": False,
            "failure_detail": None, "reply": reply}


def _caption(perturbation, text, accuracy):
    return {"perturbation": perturbation, "text": text, "change": "" if perturbation is None else "something",
            "judgments": {"judge": _judgment(accuracy)}}


def _document():
    """A well-formed format 2 report: one judge, one perturbation, two items."""
    return {
        "format_version": 2, "task": "gveval_demo", "judge": "gveval judge, model m", "scorers": ["judge"],
        "command": "capjudge sensitivity ...", "seed": 0, "n_resamples": 200, "confidence": 0.95,
        "counts": {}, "perturbations": [{"name": "padding", "describe": "pads",
                                         "expectations": [["accuracy", "not_up"], ["*", "not_up"]]}],
        "shifts": [{"scorer": "judge", "perturbation": "padding", "dimension": "accuracy", "measured": True,
                    "expected": "not_up", "mean_shift": 5.0, "ci": [1.0, 9.0], "share_sound": 0.5,
                    "share_wrong_way": 0.5, "verdict": "wrong direction", "passed": False, "n_candidates": 2,
                    "n_clusters": 2, "n_left_out": 0}],
        "fooled_by": {},
        "items": [{"item_id": item, "cluster": item, "original": _caption(None, f"caption {item}", 60),
                   "variants": [_caption("padding", f"caption {item}. In other words, caption {item}.", 70)]}
                  for item in ("g01", "g02")],
    }


def _edit(change):
    def edited():
        document = _document()
        change(document)
        return document
    return edited


def _set(path, value):
    def change(document):
        *parents, last = path
        target = document
        for key in parents:
            target = target[key]
        target[last] = value
    return change


def _delete(path):
    def change(document):
        *parents, last = path
        target = document
        for key in parents:
            target = target[key]
        del target[last]
    return change


ORIGINAL = ("items", 1, "original", "judgments", "judge")
BROKEN = [
    ("not JSON", b"{not json", ("not JSON", "line 1")),
    ("not UTF-8", b'{"format_version": 2, "task": "\xff\xfe"}', ("not UTF-8 text",)),
    ("nested too deeply", b"[" * 200_000, ("not JSON that can be read", "nested too deeply")),
    ("an integer of 5000 digits", b'{"format_version": ' + b"1" * 5000 + b"}", ("not JSON that can be read",)),
    ("a list, not an object", [1, 2], ("the file is a list, not an object",)),
    ("wrong version", _edit(_set(("format_version",), 99)), ("format_version 99", "reads 1 and 2")),
    ("no version", _edit(_delete(("format_version",))), ("format_version None",)),
    ("items not a list", _edit(_set(("items",), {"g01": {}})), ("items is an object, not a list",)),
    ("an item without its original", _edit(_delete(("items", 0, "original"))), ("item 'g01'", "no field 'original'")),
    ("a judgment without scores", _edit(_delete((*ORIGINAL, "scores"))),
     ("item 'g02', original, scorer 'judge'", "no field 'scores'")),
    ("a score that is text", _edit(_set((*ORIGINAL, "scores", "accuracy"), "80")),
     ("item 'g02', original, scorer 'judge'", "score 'accuracy'", "'80' is text, not a number")),
    ("a score that is true", _edit(_set((*ORIGINAL, "scores", "accuracy"), True)),
     ("score 'accuracy' is true/false, not a number",)),
    ("a score that is a list", _edit(_set((*ORIGINAL, "scores", "mean"), [80])), ("score 'mean'", "a list, not a number")),
    ("a score that is NaN", "NaN", ("score 'accuracy'", "NaN is not a number")),
    ("a score that is infinite", "1e999", ("score 'accuracy'", "inf is not a finite number")),
    ("a score beyond 2**53", _edit(_set((*ORIGINAL, "scores", "accuracy"), 10**400)), ("an integer of 1329 bits",)),
    ("an item twice", _edit(lambda d: d["items"].append(copy.deepcopy(d["items"][0]))),
     ("item 'g01' is in the file twice", "items[2]")),
    ("a perturbed caption missing", _edit(_set(("items", 0, "variants"), [])),
     ("item 'g01'", "0 perturbed captions, but the file names 1 perturbations")),
    ("a caption in the wrong place", _edit(_set(("items", 0, "variants", 0, "perturbation"), "shuffle")),
     ("item 'g01', padding", "names perturbation 'shuffle', expected 'padding'")),
    ("a judgment by a scorer the file does not name", _edit(lambda d: d["items"][0]["original"]["judgments"].update(
        ghost=_judgment(1))), ("item 'g01', original", "a judgment by 'ghost'")),
    ("a scorer without judgments", _edit(_set(("scorers",), ["judge", "other"])), ("no judgment by scorer 'other'",)),
    ("a scorer named twice", _edit(_set(("scorers",), ["judge", "judge"])), ("scorers: a scorer named twice",)),
    ("a caption that is a number", _edit(_set(("items", 1, "variants", 0, "text"), 42)),
     ("item 'g02', padding", "text is a number, not a text")),
    ("a reply that is an object", _edit(_set((*ORIGINAL, "reply"), {"text": "x"})), ("reply is an object, not a text",)),
    ("an unknown direction", _edit(_set(("perturbations", 0, "expectations"), [["accuracy", "sideways"]])),
     ("perturbations[0]", "expectation ['accuracy', 'sideways']")),
    ("a shift of an unknown scorer", _edit(_set(("shifts", 0, "scorer"), "ghost")), ("shifts[0]", "scorer 'ghost'")),
    ("a failed judgment with scores", _edit(_set((*ORIGINAL, "failure"), "no_score")),
     ("item 'g02', original, scorer 'judge'", "a judgment that failed carries scores")),
]


def _write(tmp_path, content) -> str:
    path = tmp_path / "sensitivity_gveval_demo.json"
    if callable(content):
        content = content()
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):  # a number token JSON does not allow, put where a score goes
        text = json.dumps(_document())
        path.write_text(text.replace('"accuracy": 60', f'"accuracy": {content}', 1), encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return str(path)


def _report(tmp_path, *arguments):
    return run_capjudge_cli(["report", *map(str, arguments)], env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                            cwd=REPO_ROOT)


@pytest.mark.parametrize(("what", "content", "wanted"), BROKEN, ids=[case[0] for case in BROKEN])
def test_a_broken_sensitivity_file_is_one_line_naming_the_file(tmp_path, what, content, wanted):
    path = _write(tmp_path, content)
    refusal_line(_report(tmp_path, "--sensitivity", path, "--out", tmp_path / "page"), path, *wanted)
    assert not (tmp_path / "page").exists()


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "sensitivity_gveval_demo.json"
    with path.open("wb") as sparse:  # no disk blocks: the size alone is what is refused
        sparse.truncate(MAX_FILE_BYTES + 1)
    refusal_line(_report(tmp_path, "--sensitivity", path, "--out", tmp_path / "page"), str(path),
                 f"{MAX_FILE_BYTES + 1:,} bytes, over the {MAX_FILE_BYTES:,}")
    assert not (tmp_path / "page").exists()


@pytest.mark.parametrize(("arguments", "wanted"), [
    (("--out", "OUT"), ("give RUN [RUN ...], --sensitivity FILE or --arena FILE",)),
    (("RUN", "--sensitivity", "FILE", "--out", "OUT"), ("give RUN [RUN ...] or --sensitivity FILE, not both",)),
    (("--sensitivity", "FILE", "--videos", "OUT", "--out", "OUT"), ("--videos goes with RUNs",)),
    (("--sensitivity", "/nonexistent/sensitivity.json", "--out", "OUT"),
     ("/nonexistent/sensitivity.json: cannot be read", "No such file")),
    (("--sensitivity", "DIR", "--out", "OUT"), ("DIR", "not a file")),
    (("--sensitivity", "FILE", "--out", "FILE"), ("--out", "is a file, not a folder")),
], ids=["neither", "both", "videos", "absent", "a-folder", "out-is-a-file"])
def test_report_sensitivity_arguments_are_checked(tmp_path, arguments, wanted):
    file = _write(tmp_path, _document())
    names = {"OUT": str(tmp_path / "out"), "FILE": file, "RUN": str(tmp_path), "DIR": str(tmp_path)}
    refusal_line(_report(tmp_path, *(names.get(a, a) for a in arguments)), *(names.get(w, w) for w in wanted))


def test_a_page_never_takes_an_item_reports_name(tmp_path):
    """A sensitivity file named report.json would make report.html, the name of the item report's page in the same
    folder (the demo's results/demo/report/): refused, the item report left as it was."""
    document = tmp_path / "report.json"
    document.write_text(json.dumps(_document()), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("the item report", encoding="utf-8")
    refusal_line(_report(tmp_path, "--sensitivity", document, "--out", out), str(document), "report.html",
                 "the name of an item report's page")
    assert (out / "report.html").read_text(encoding="utf-8") == "the item report"


def _page_data(page: str):
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1))


def test_hostile_text_in_a_well_formed_file_is_data_never_markup(tmp_path):
    document = _document()
    hostile = '</script><script>alert(1)</script><!-- <img src=x onerror=alert(2)>'
    document["task"] = "<b>task</b>"
    document["items"][0]["original"]["text"] = hostile
    document["items"][0]["variants"][0]["judgments"]["judge"]["reply"] = hostile
    path = _write(tmp_path, document)
    done = _report(tmp_path, "--sensitivity", path, "--out", tmp_path / "page")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page" / "sensitivity_gveval_demo.html").read_text(encoding="utf-8")
    assert "alert" not in page.split('id="report-data">', 1)[0]  # nothing of it before the data block
    assert page.count("</script>") == 2 and "<img" not in page and "<!--" not in page.split("<body>", 1)[1]
    assert "<title>What fools the judge, item by item: gveval judge, model m on &lt;b&gt;task&lt;/b&gt;</title>" in page
    data = _page_data(page)  # and the text itself comes back whole
    assert data["items"][0]["captions"][0]["text"] == hostile
    assert data["items"][0]["captions"][1]["judgments"][0]["reply"] == hostile


def test_a_format_1_file_is_shown_saying_it_logged_no_replies(tmp_path):
    document = _document()
    document["format_version"] = 1
    for item in document["items"]:
        for caption in (item["original"], *item["variants"]):
            for judged in caption["judgments"].values():
                del judged["reply"], judged["failure_detail"]
    path = _write(tmp_path, document)
    done = _report(tmp_path, "--sensitivity", path, "--out", tmp_path / "page")
    assert done.returncode == 0, done.stderr
    assert "2 items x (1 original + 1 perturbations), 1 scorers; 2 items moved the wrong way" in done.stdout
    data = _page_data((tmp_path / "page" / "sensitivity_gveval_demo.html").read_text(encoding="utf-8"))
    judged = data["items"][0]["captions"][1]["judgments"][0]
    assert judged["reply_logged"] is False and judged["reply"] is None
    assert [(c["dimension"], c["shift"], c["wrong_way"]) for c in judged["cells"]] == [
        ("accuracy", 10, True), ("mean", 10, True)]


def test_a_lone_surrogate_is_text_on_the_page_not_a_crash(tmp_path):
    """JSON may hold a lone surrogate ("\\ud800"), which no UTF-8 file can: the page's data is ASCII-escaped, so
    the page is written and its script reads the text back as the file had it."""
    document = _document()
    document["items"][0]["original"]["text"] = "a caption \ud800 cut in half"
    path = _write(tmp_path, document)
    done = _report(tmp_path, "--sensitivity", path, "--out", tmp_path / "page")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    page = (tmp_path / "page" / "sensitivity_gveval_demo.html").read_text(encoding="utf-8")
    assert _page_data(page)["items"][0]["captions"][0]["text"] == "a caption \ud800 cut in half"

"""`capjudge arena` on bad input (issue #49): one line naming the problem, exit 2, no traceback, no request;
and the verdict file's own checks (a file edited by hand is refused by the rerun and by its reader)."""

from __future__ import annotations

import json

import pytest
from tests.support.arena_runs import DEMO, arena, caption_flags, one_line_refusal
from tests.support.harness_runs import judge_server
from tests.support.paths import SUPPORT_DIR
from tests.support.scripted_pairwise_judges import PairwiseWorld

from capjudge.judges.pairwise.record import ArenaFileError, read_arena_file

pytestmark = pytest.mark.slow
TASK = "gveval_demo"


def _captions_file(path, ids):
    path.write_text("".join(json.dumps({"id": item, "caption": f"caption of {item}"}) + "\n" for item in ids))
    return path


def test_bad_inputs_are_one_line_and_exit_2_before_any_request(tmp_path):
    first_half = _captions_file(tmp_path / "first_half.jsonl", [f"g0{i}" for i in range(1, 6)])
    second_half = _captions_file(tmp_path / "second_half.jsonl", ["g06", "g07", "g08", "g09", "g10"])
    other_task = _captions_file(tmp_path / "other_task.jsonl", ["zz1", "zz2"])
    twin = tmp_path / "twin"
    twin.mkdir()
    _captions_file(twin / "first_half.jsonl", ["g01"])
    out = ["--out", str(tmp_path / "out")]
    cases = {
        "one model": ([*caption_flags("good")], "at least two caption sources"),
        "no shared item": (["--captions", str(first_half), "--captions", str(second_half)], "has captions from two sources"),
        "a source without captions": ([*caption_flags("good"), "--captions", str(other_task)],
                                      "none of its 2 ids is an item of task"),
        "two sources, one name": (["--captions", str(first_half), "--captions", str(twin / "first_half.jsonl")],
                                  "are both named 'first_half'"),
        "too many anchors": ([*caption_flags(), "--anchors", "3"], "--anchors 3: give from 1 to 2"),
        "an unknown anchor": ([*caption_flags(), "--anchor", "nobody"], "--anchor 'nobody': no caption source"),
    }
    with judge_server(responder=PairwiseWorld().respond) as server:
        for name, (args, expected) in cases.items():
            done = arena(tmp_path, server, "fair", "--task", TASK, *args, *out)
            assert expected in one_line_refusal(done), name
        # A judge with no pairwise prompt (the tests' toy third judge): refused, not judged item by item as bad input.
        # (G-VEval's text-only mode was this case until it got its own template, gveval_pairwise_references_v1.)
        no_prompt = arena(tmp_path, server, "fair", "--task", "toy_judge", "--include-path", str(SUPPORT_DIR / "toy_judge"),
                          *caption_flags(), *out)
        assert "has no pairwise prompt" in one_line_refusal(no_prompt)
        assert server.log == []
    assert not (tmp_path / "out" / f"arena_{TASK}.jsonl").exists()


def test_ids_that_are_not_the_tasks_are_said_not_dropped_in_silence(tmp_path):
    # "G01" beside "g01": the task has no item G01; the source is still a model, the extra id is said, as
    # `capjudge judge` and `capjudge sensitivity` say it.
    mixed = _captions_file(tmp_path / "mixed.jsonl", ["g01", "G01"])
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", "--task", TASK, "--captions", str(mixed), *caption_flags("good"),
                     "--out", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 2  # g01 alone: one pair, both orders
    assert f"capjudge arena: captions file {mixed}: ignoring 1 ids that are not items of 'gveval_demo' (e.g. G01)" \
        in done.stderr


def test_the_text_only_mode_sends_its_own_template_with_the_references_and_no_image(tmp_path):
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "long", "--task", TASK, *caption_flags("good", "poor"), "--limit", "1",
                     "--out", str(tmp_path / "out"), env={"CAPJUDGE_GVEVAL_MODE": "references"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(server.log) == 2
        for entry in server.log:
            assert [part["type"] for part in entry.body["messages"][0]["content"]] == ["text"]
            text = entry.body["messages"][0]["content"][0]["text"]
            assert "You will not see the video itself." in text and "\nReference Captions:\n- " in text
    _, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
    assert [r.judge_version for r in records] == ["gveval-pairwise-references/1"]


def test_a_verdict_file_edited_by_hand_is_refused_by_the_rerun_and_by_its_reader(tmp_path):
    world = PairwiseWorld()
    args = ["--task", TASK, *caption_flags(), "--limit", "1", "--out", str(tmp_path / "out")]
    path = tmp_path / "out" / f"arena_{TASK}.jsonl"
    with judge_server(responder=world.respond) as server:
        assert arena(tmp_path, server, "fair", *args).returncode == 0
        header, records = read_arena_file(path)
        assert header.records == 3
        # One verdict changed by hand: the file no longer matches its own hashes.
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        lines[1] = lines[1].replace('"overall": "A"', '"overall": "B"', 1)
        path.write_text("".join(lines), encoding="utf-8")
        with pytest.raises(ArenaFileError, match="edited after capjudge wrote it"):
            read_arena_file(path)
        server.log.clear()
        refused = one_line_refusal(arena(tmp_path, server, "fair", *args))
        assert str(path) in refused and "not an arena verdict file as capjudge wrote it" in refused
        assert server.log == []
        # Another run's (untouched) file under the name is not replaced either.
        path.unlink()
        assert arena(tmp_path, server, "fair", *args).returncode == 0
        other = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags("good", "poor"), "--limit", "1",
                      "--out", str(tmp_path / "out"))
        assert "the verdicts of another arena run" in one_line_refusal(other)


def test_a_dry_run_prints_json_when_asked_and_sends_nothing(tmp_path):
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags(), "--limit", "2", "--dry-run",
                     "--format", "json", "--price-input", "2.5", "--price-output", "10")
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.log == []
    printed = json.loads(done.stdout)
    assert (printed["models"], printed["items"], printed["pairs"], printed["orders_per_judge"]) == (3, 2, 6, 12)
    assert printed["estimate"]["requests"] == 12 and printed["estimate"]["cost"] > 0


def test_captions_holding_unicode_line_separators_are_judged_written_and_read_back(tmp_path):
    """U+2028, U+2029 and U+0085 are text inside a JSON string, raw or escaped; str.splitlines splits at them.
    The captions file (raw, as a writer with ensure_ascii=False leaves them) was read as broken lines, and the
    verdict file `capjudge arena` wrote could not be read back: a traceback after every request was paid for,
    then every rerun refused (found by an independent probe)."""
    good = [json.loads(line) for line in (DEMO / "captions_good.jsonl").read_text(encoding="utf-8").splitlines()]
    odd = "A red ball\u2028rolls\u2029from the left\u0085to the right."
    good[0]["caption"] = odd
    mine = tmp_path / "separators.jsonl"
    mine.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in good), encoding="utf-8")
    args = ["--task", TASK, "--captions", str(mine), *caption_flags("fair", "poor"), "--limit", "2",
            "--out", str(tmp_path / "out")]
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", *args)
        assert done.returncode == 0, done.stderr[-3000:]
        header, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
        assert header.records == len(records) == 6
        assert odd in {record.caption_a for record in records if record.model_a == "separators"}
        asked = len(server.log)
        again = arena(tmp_path, server, "fair", *args)
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(server.log) == asked  # the rerun reads its file and the cache: nothing asked twice


def test_a_refusal_quoting_another_runs_command_stays_one_line(tmp_path):
    """The other run's command quotes its captions file, whose name may hold a line break: the refusal quotes it
    escaped, one line (it was two, found by an independent probe)."""
    odd = tmp_path / "odd\nname.jsonl"
    odd.write_text((DEMO / "captions_fair.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    out = ["--out", str(tmp_path / "out")]
    with judge_server(responder=PairwiseWorld().respond) as server:
        first = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags("good"), "--captions", str(odd),
                      "--limit", "1", *out)
        assert first.returncode == 0, first.stderr[-3000:]
        other = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags("good", "poor"), "--limit", "1", *out)
    refused = one_line_refusal(other)
    assert "the verdicts of another arena run" in refused and "odd\\nname.jsonl" in refused


def test_two_models_with_one_caption_of_an_item_are_not_asked_and_it_is_said(tmp_path):
    """Both orders of two identical captions are one request, whose reply was read as both orders: a 'flip' and a
    ranking from the judge's position bias alone (found by an independent probe). Left out and said, as
    --candidates does; with no pair left, one line, exit 2."""
    good = [json.loads(line) for line in (DEMO / "captions_good.jsonl").read_text(encoding="utf-8").splitlines()]
    twin = tmp_path / "twin.jsonl"
    twin.write_text("".join(json.dumps({**line, "caption": line["caption"] + (" Twice." if line["id"] == "g01" else "")})
                            + "\n" for line in good), encoding="utf-8")
    args = ["--task", TASK, *caption_flags("good"), "--captions", str(twin), *caption_flags("poor"), "--limit", "2"]
    with judge_server(responder=PairwiseWorld().respond) as server:
        done = arena(tmp_path, server, "fair", *args, "--out", str(tmp_path / "out"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert "capjudge arena: 1 pair(s) of two models with the same caption of an item left out" in done.stderr
        header, records = read_arena_file(tmp_path / "out" / f"arena_{TASK}.jsonl")
        assert header.records == len(records) == 5
        assert all(record.caption_a != record.caption_b for record in records)
        exact = tmp_path / "exact"
        exact.mkdir()
        (exact / "copy.jsonl").write_text("".join(json.dumps(line) + "\n" for line in good if line["id"].startswith("g")))
        asked = len(server.log)
        refused = arena(tmp_path, server, "fair", "--task", TASK, *caption_flags("good"), "--captions",
                        str(exact / "copy.jsonl"), "--limit", "2", "--out", str(tmp_path / "o2"))
        assert len(server.log) == asked
    assert "no pair to judge" in one_line_refusal(refused)

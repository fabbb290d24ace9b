"""A verdict file whose header line cannot be read says why (issue #60 item 12): `capjudge report --arena` on a
header with a key twice, or a file an editor saved with a UTF-8 byte order mark, said only "line 1 is not a
capjudge arena header". It now names the key, or the BOM; a record line with a key twice names it too. The
BOM message is judges/jsonl.py's own, so every reader of JSON through it says the same: here the sensitivity
report's reader and the captions files, each through the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from capjudge.judges.pairwise.record import OrderVerdict, PairRecord, arena_file_text, read_arena_file
from tests.support.harness_runs import run_capjudge_cli
from tests.support.paths import REPO_ROOT

DIMENSIONS = ("accuracy", "completeness", "conciseness", "relevance", "overall")
BOM = b"\xef\xbb\xbf"
BOM_WORDS = "starts with a UTF-8 byte order mark (BOM)"


def _order(verdict: str) -> OrderVerdict:
    return OrderVerdict(dict.fromkeys(DIMENSIONS, verdict), None, None, "reply", False, 1)


def _verdict_file(path: Path) -> Path:
    """A verdict file as capjudge writes it: two models, two items, both orders judged."""
    records = [PairRecord(item, item, "model_a", "model_b", f"a caption of {item}", f"another caption of {item}",
                          "gveval", "judge", "test-judge", "gveval-pairwise/1", DIMENSIONS, _order("A"), _order("A"),
                          {"words_a": 4, "words_b": 5})
               for item in ("g1", "g2")]
    path.write_text(arena_file_text("gveval_demo", "gveval judge, model test-judge", "capjudge arena", records),
                    encoding="utf-8")
    return path


def _cli(root: Path, *args: object):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(root / "hf")}
    return run_capjudge_cli([str(arg) for arg in args], env=env, cwd=REPO_ROOT)


def _one_line(done, prefix: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    return lines[0]


def test_a_header_with_a_key_twice_names_the_key(tmp_path):
    good = _verdict_file(tmp_path / "good.jsonl")
    read_arena_file(good)  # the file as written reads back: what is refused below is the edit alone
    first, _, body = good.read_text(encoding="utf-8").partition("\n")
    twice = tmp_path / "twice.jsonl"
    twice.write_text(first.replace('"judge": ', '"judge": "anycap judge", "judge": ', 1) + "\n" + body, encoding="utf-8")
    line = _one_line(_cli(tmp_path, "report", "--arena", twice, "--out", tmp_path / "out"), "capjudge report: ")
    assert f"arena file {twice}: line 1 is not a capjudge arena header (capjudge-arena-verdicts/1): key 'judge' " \
           "appears more than once in the header" in line
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_header_after_a_byte_order_mark_names_the_mark(tmp_path):
    good = _verdict_file(tmp_path / "good.jsonl")
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(BOM + good.read_bytes())
    line = _one_line(_cli(tmp_path, "report", "--arena", marked, "--out", tmp_path / "out"), "capjudge report: ")
    assert f"arena file {marked}: line 1 is not a capjudge arena header (capjudge-arena-verdicts/1): it {BOM_WORDS}, " \
           "which JSON may not begin with: save the file as UTF-8 without a BOM" in line


def test_a_record_with_a_key_twice_names_the_key_and_what_is_wrong(tmp_path):
    """The record's key alone ("not an arena record (judge)") said nothing of what was wrong with it. The file's
    hashes are made again after the edit, so the line itself is what is refused."""
    import hashlib

    good = _verdict_file(tmp_path / "good.jsonl")
    first, _, body = good.read_text(encoding="utf-8").partition("\n")
    body = body.replace('"member": "judge"', '"member": "judge", "member": "other"', 1)
    header = json.loads(first)
    header["records_sha256"] = hashlib.sha256(body.encode("utf-8")).hexdigest()
    twice = tmp_path / "record_twice.jsonl"
    twice.write_text(json.dumps(header) + "\n" + body, encoding="utf-8")
    line = _one_line(_cli(tmp_path, "report", "--arena", twice, "--out", tmp_path / "out"), "capjudge report: ")
    assert f"arena file {twice}, line 2: not an arena record (key 'member' appears more than once in the record" in line


def test_other_json_readers_say_the_same_of_a_byte_order_mark(tmp_path):
    # capjudge report --sensitivity: the report file's reader (capjudge.metrics.sensitivity.items_file)
    report = tmp_path / "sensitivity_gveval_demo.json"
    report.write_bytes(BOM + b'{"format": "capjudge-sensitivity/1"}\n')
    line = _one_line(_cli(tmp_path, "report", "--sensitivity", report, "--out", tmp_path / "page"), "capjudge report: ")
    assert f"{report}: not JSON (it {BOM_WORDS}" in line
    # A captions file (JSON Lines), read before anything is judged: a dry run needs no judge.
    captions = tmp_path / "captions.jsonl"
    captions.write_bytes(BOM + b'{"id": "g1", "caption": "a caption"}\n')
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "g1", "caption": "another caption"}\n', encoding="utf-8")
    line = _one_line(_cli(tmp_path, "arena", "--task", "gveval_demo", "--captions", captions, "--captions", other,
                          "--dry-run"), "capjudge arena: ")
    assert f"{captions}, line 1: not JSON (it {BOM_WORDS}" in line
    # A captions file (one JSON object keyed by item id)
    keyed = tmp_path / "captions.json"
    keyed.write_bytes(BOM + b'{"g1": "a caption"}')
    line = _one_line(_cli(tmp_path, "arena", "--task", "gveval_demo", "--captions", keyed, "--captions", other,
                          "--dry-run"), "capjudge arena: ")
    assert str(keyed) in line and BOM_WORDS in line

"""`capjudge estimate`: requests, tokens and cost before a run, from the requests the run would send."""

from __future__ import annotations

import re

from capjudge.judges.client.rate_limits import image_tokens
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import run_capjudge

ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def _numbers(text: str, label: str) -> list[float]:
    line = next(line for line in text.splitlines() if label in line)
    return [float(n.replace(",", "")) for n in re.findall(r"[\d,]+(?:\.\d+)?", line.split(label, 1)[1])]


def test_anycap_estimate_counts_eight_frames_per_item_and_prices_them(tmp_path):
    env = {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    result = run_capjudge("estimate", "--task", "anycap_style_demo", "--price-input", "2.5", "--price-output", "10",
                          "--reask-rate", "0.1", "--output-tokens", "100", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task anycap_style_demo: 10 items, 11 requests expected" in result.stdout
    total, text, images = _numbers(result.stdout, "input tokens:")
    # 8 frames of the 320x240 demo clips per request: one 512-px tile each (85 + 170), 11 requests.
    assert images == 10 * 1.1 * 8 * image_tokens(320, 240) == 22_440
    assert total == text + images and text > 0
    (output,) = _numbers(result.stdout, "output tokens:")
    assert output == 11 * 100
    (cost,) = _numbers(result.stdout, "cost: $")
    assert cost == round((total * 2.5 + output * 10) / 1e6, 2)
    assert "not_sent" not in result.stderr  # items are counted, not reported as failures


def test_gveval_estimate_counts_one_strip_per_item_and_a_limit_scales_up(tmp_path):
    env = {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    full = run_capjudge("estimate", "--task", "gveval_demo", env=env)
    sampled = run_capjudge("estimate", "--task", "gveval_demo", "--limit", "5", env=env)
    assert full.returncode == 0 and sampled.returncode == 0, full.stderr[-2000:] + sampled.stderr[-2000:]
    assert "(give --price-input and --price-output)" in full.stdout
    _, _, images = _numbers(full.stdout, "input tokens:")
    assert images == 10 * image_tokens(1536, 512, "high")  # the 3-frame strip, detail high
    assert _numbers(sampled.stdout, "input tokens:")[2] == images  # 5 built, scaled to the 10 items


def test_captions_of_a_file_are_what_is_counted(tmp_path):
    env = {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    captions = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
    result = run_capjudge("estimate", "--captions", str(captions), "--task", "gveval_demo", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "10 items, 10 requests expected" in result.stdout


def test_bad_prices_and_options_are_one_clear_error(tmp_path):
    env = {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "c.sqlite")}
    bad = run_capjudge("estimate", "--task", "gveval_demo", "--price-input", "cheap", "--price-output", "1", env=env)
    assert bad.returncode == 2 and "--price-input must be a number" in bad.stderr and "'cheap'" in bad.stderr
    one = run_capjudge("estimate", "--task", "gveval_demo", "--price-input", "1", env=env)
    assert one.returncode == 2 and "both --price-input and --price-output" in one.stderr
    negative = run_capjudge("estimate", "--task", "gveval_demo", "--reask-rate", "-1", env=env)
    assert negative.returncode == 2 and "--reask-rate" in negative.stderr
    # Not a number, infinite, or beyond any real value: one line before anything is read (NaN and inf were a
    # traceback from the token tally; 1e300 priced a run at $inf with a 300-digit request count).
    from tests.support.hostile import refusal_line

    for flags, wanted in ((("--reask-rate", "nan"), "--reask-rate must be a number from 0 to 10, got nan"),
                          (("--output-tokens", "inf"), "--output-tokens must be a number >= 0, got inf"),
                          (("--output-tokens", "1e300"), "--output-tokens 1e+300: at most 1,000,000 tokens per reply"),
                          (("--price-input", "1e300", "--price-output", "1"),
                           "--price-input 1e300: at most 100,000 USD per 1M tokens")):
        done = run_capjudge("estimate", "--task", "gveval_demo", *flags, env=env)
        assert refusal_line(done, wanted) == f"capjudge estimate: {wanted}"


def test_the_charge_learned_by_earlier_runs_is_printed_and_an_unreadable_budget_file_refused(tmp_path):
    """Issue 40: the budget folder a run would use (beside CAPJUDGE_CACHE, per endpoint and model) holds the API's
    charge per estimated token as learned from its headers; `capjudge estimate` prints it when there is one."""
    import time

    from capjudge.judges.client.budget import Limits, MachineBudget, judge_budget_folder
    from capjudge.judges.client.charge import SAMPLES
    from capjudge.judges.client.config import JudgeConfig

    env = {**ENV, "CAPJUDGE_CACHE": str(tmp_path / "cache" / "c.sqlite"), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    before = run_capjudge("estimate", "--task", "gveval_demo", "--limit", "2", env=env)
    assert before.returncode == 0, before.stderr[-2000:]
    assert "learned charge" not in before.stdout  # nothing learned yet: no line
    assert not (tmp_path / "cache").exists()  # and no folder made to look

    # What a run leaves there: 5 requests of 100 estimated tokens that the API's window counted as 650.
    folder = judge_budget_folder(JudgeConfig.from_env(env))
    budget = MachineBudget(folder, Limits(4, tpm=100_000))
    for _ in range(5):
        budget.admit(lambda: 100)
    seen = time.time()
    for _ in range(SAMPLES):
        budget.reconcile(seen, None, 650)
    budget.close()
    after = run_capjudge("estimate", "--task", "gveval_demo", "--limit", "2", env=env)
    assert after.returncode == 0, after.stderr[-2000:]
    (line,) = [line for line in after.stdout.splitlines() if line.startswith("learned charge")]
    assert "counted 1.30x capjudge's token estimate per request" in line and f"{SAMPLES} replies kept" in line
    assert str(folder) in line

    (folder / "window.sqlite").write_bytes(b"not a database, whatever it once was" * 100)
    for name in ("window.sqlite-wal", "window.sqlite-shm"):
        (folder / name).unlink(missing_ok=True)
    broken = run_capjudge("estimate", "--task", "gveval_demo", "--limit", "2", env=env)
    assert broken.returncode == 2
    (message,) = broken.stderr.strip().splitlines()
    assert message.startswith("capjudge estimate: budget file ") and str(folder / "window.sqlite") in message
    assert "not a database" in message

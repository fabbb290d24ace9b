"""`capjudge estimate` with a panel of judges prints each member's learned charge (issue 40 item 4).

A real `capjudge judge` run of a panel against three test servers, each serving one member and charging its
own way: two members of the same model on two servers (so their cache keys carry their endpoints), whose
servers send token rate-limit headers and charge differently against capjudge's estimate (so each learns its
own ratio), and one member whose server sends no rate-limit headers (nothing to learn). Then `capjudge
estimate` in a subprocess with the same environment, less one member's key variable: each member's line must
show what the folder the run wrote for that member holds, and nothing may reach any server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from capjudge.judges.client.charge import read_learned_charge
from tests.support.paths import REPO_ROOT
from tests.support.harness_runs import harness_env, run_capjudge_cli
from tests.support.openai_server import OpenAITestServer, panel_responder

CAPTIONS = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
N_ITEMS = 10
# The two limiters' charges against capjudge's estimate: far enough apart that a member shown another's
# folder would show the other's ratio.
LOW_SCALE, HIGH_SCALE = 0.8, 1.6
LINE = re.compile(r"^learned charge of panel member (\S+) \((\S+), (\S+)\): (.*)$")
CHARGE = re.compile(r"counted (\d+\.\d\d)x capjudge's token estimate per request \((\d+) replies kept, the latest at "
                    r"[^;]+; (\S+)\)$")


def _panel_file(folder: Path, low: str, high: str, silent: str) -> Path:
    members = [{"name": "low", "model": "harsh", "base_url": low, "api_key_env": "LOW_MEMBER_KEY"},
               {"name": "high", "model": "harsh", "base_url": high},
               {"name": "silent", "model": "lenient", "base_url": silent}]
    path = folder / "panel.yaml"
    path.write_text(json.dumps({"members": members}))
    return path


def _member_lines(stdout: str) -> dict[str, tuple[str, str, str]]:
    """member -> (endpoint, model, the rest of its learned-charge line)."""
    found = {}
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2, 3, 4)
    return found


def test_estimate_prints_each_members_learned_charge_from_the_folder_its_run_wrote(tmp_path):
    with OpenAITestServer(responder=panel_responder) as low, OpenAITestServer(responder=panel_responder) as high, \
            OpenAITestServer(responder=panel_responder) as silent:
        for server, scale in ((low, LOW_SCALE), (high, HIGH_SCALE)):
            # A limit far above the run: headers on every reply, never a 429; charged by OpenAI's documented rule.
            server.token_charge, server.charge_scale, server.tpm_limit = "openai", scale, 10_000_000
        cache = tmp_path / "cache"
        env = harness_env(silent.base_url, cache_path=cache / "judge_cache.sqlite", datasets_cache=tmp_path / "hf",
                          extra={"CAPJUDGE_PANEL": str(_panel_file(tmp_path, low.base_url, high.base_url, silent.base_url)),
                                 "LOW_MEMBER_KEY": "sk-low-member"})
        run = run_capjudge_cli(["judge", "--captions", CAPTIONS, "--task", "gveval_demo", "--out", tmp_path / "out"],
                               env=env, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert [len(server.log) for server in (low, high, silent)] == [N_ITEMS] * 3

        # What the run left: one budget folder per member; the two behind headers learned, the third did not.
        written = {folder: read_learned_charge(folder) for folder in cache.glob("budget-*")}
        assert len(written) == 3, sorted(written)
        assert sum(learned is not None for learned in written.values()) == 2

        sent = [(len(s.log), len(s.preflights)) for s in (low, high, silent)]
        keyless = {k: v for k, v in env.items() if k != "LOW_MEMBER_KEY"}  # estimate must not need it
        estimate = run_capjudge_cli(["estimate", "--task", "gveval_demo", "--limit", "2"], env=keyless, timeout=300)
        assert estimate.returncode == 0, estimate.stderr[-3000:]
        assert [(len(s.log), len(s.preflights)) for s in (low, high, silent)] == sent  # nothing sent

        lines = _member_lines(estimate.stdout)
        assert set(lines) == {"low", "high", "silent"}, estimate.stdout
        ratios = {}
        for name, server in (("low", low), ("high", high)):
            endpoint, model, rest = lines[name]
            assert (endpoint, model) == (server.base_url, "harsh")
            charge = CHARGE.search(rest)
            assert charge, rest
            folder = Path(charge.group(3))
            learned = written[folder]  # a folder the run wrote, and what it holds
            assert learned is not None
            assert charge.group(1) == f"{learned.ratio:.2f}" and int(charge.group(2)) == learned.samples
            ratios[name] = learned.ratio
        # Each member's line reads its own server's charge: the dearer server's member learned the higher ratio.
        assert ratios["high"] > ratios["low"] * (HIGH_SCALE / LOW_SCALE) * 0.8, ratios
        endpoint, model, rest = lines["silent"]
        assert (endpoint, model) == (silent.base_url, "lenient")
        nothing = re.fullmatch(r"none learned yet \((\S+) holds none\)", rest)
        assert nothing and written[Path(nothing.group(1))] is None, rest

        # `capjudge sensitivity --dry-run` (its own estimate) prints the same lines, and sends nothing either.
        dry = run_capjudge_cli(["sensitivity", "--task", "gveval_demo", "--captions", CAPTIONS, "--limit", "2",
                                "--dry-run"], env=keyless, timeout=300)
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert [(len(s.log), len(s.preflights)) for s in (low, high, silent)] == sent
        assert _member_lines(dry.stdout) == lines, dry.stdout

        # Hostile: a member's window file that is no database is one line naming the member and the file, status 2.
        broken = Path(CHARGE.search(lines["high"][2]).group(3)) / "window.sqlite"
        broken.write_bytes(b"not a database, whatever it once was" * 100)
        for name in ("window.sqlite-wal", "window.sqlite-shm"):
            (broken.parent / name).unlink(missing_ok=True)
        refused = run_capjudge_cli(["estimate", "--task", "gveval_demo", "--limit", "2"], env=keyless, timeout=300)
        assert refused.returncode == 2
        (message,) = refused.stderr.strip().splitlines()
        assert message.startswith("capjudge estimate: panel member high: budget file ") and str(broken) in message
        refused = run_capjudge_cli(["sensitivity", "--task", "gveval_demo", "--captions", CAPTIONS, "--limit", "2",
                                    "--dry-run"], env=keyless, timeout=300)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        # (the line before it warns that the demo's captions file also holds the other demo task's ids)
        message = refused.stderr.strip().splitlines()[-1]
        assert message.startswith("capjudge sensitivity: panel member high: budget file ") and str(broken) in message

"""The embedded judge's llama.cpp build: portable (what `make setup` installs) against a native build.

Two questions, answered side by side in one run:
1. Speed on this machine: prompt and generation tokens/s of the packaged Gemma 3 270M, each build loaded in
   its own process, alternated, best of `--repeats`.
2. Portability: the same 8-token completion under `qemu-x86_64 -cpu Haswell` (an emulated x86-64 CPU with
   AVX2/FMA/F16C and no AVX-512 or AMX: the baseline the portable flags promise). A build that uses
   instructions the CPU lacks dies there with SIGILL, as a native build from a newer host would on an older one.

The native build is a wheel you make first (it is never committed or installed into .venv/):
    .venv/bin/python -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \\
        -w /tmp/native_wheel llama-cpp-python==0.3.36
    .venv/bin/python -m tests.benchmarks.llama_build --native-wheel /tmp/native_wheel/llama_cpp_python-*.whl

Writes results/llama_build.md (nothing here asserts on time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs inside each build's process: load the model, one completion, report tokens/s as JSON.
PROBE = r"""
import json, sys, time
import llama_cpp
from capjudge.judges.local.options import default_model_path
threads, n_tokens = int(sys.argv[1]), int(sys.argv[2])
llm = llama_cpp.Llama(model_path=str(default_model_path()), n_ctx=1024, n_threads=threads, verbose=False, seed=1)
prompt = "Rate this caption of a video on a scale from 0 to 100. Caption: a red ball rolls across the floor. " * 4
llm.reset()
started = time.perf_counter()
out = llm(prompt, max_tokens=1, temperature=0)
prompt_seconds = time.perf_counter() - started
llm.reset()
started = time.perf_counter()
out = llm(prompt, max_tokens=n_tokens, temperature=0)
total_seconds = time.perf_counter() - started
usage = out["usage"]
print(json.dumps({
    "system_info": llama_cpp.llama_print_system_info().decode().strip(),
    "prompt_tokens": usage["prompt_tokens"], "prompt_tok_s": usage["prompt_tokens"] / prompt_seconds,
    "completion_tokens": usage["completion_tokens"],
    "gen_tok_s": max(usage["completion_tokens"] - 1, 1) / max(total_seconds - prompt_seconds, 1e-9),
    "text": out["choices"][0]["text"],
}))
"""


def run_probe(env: dict[str, str], threads: int, n_tokens: int, qemu_cpu: str | None = None, timeout: float = 1800):
    command = [sys.executable, "-c", PROBE, str(threads), str(n_tokens)]
    if qemu_cpu is not None:
        command = ["qemu-x86_64", "-cpu", qemu_cpu, *command]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if completed.returncode != 0:
        code = completed.returncode
        name = signal.Signals(-code).name if code < 0 else f"exit {code}"
        # qemu-user reports the guest's signal as its own death by that signal
        return {"failed": name, "stderr": completed.stderr.strip().splitlines()[-3:]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native-wheel", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--qemu-cpu", default="Haswell")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "llama_build.md")
    args = parser.parse_args()

    native_site = Path(tempfile.mkdtemp(prefix="llama-native-"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(native_site),
                    str(args.native_wheel)], check=True)
    builds = {
        "portable (make setup)": dict(os.environ),
        "native (-march=native)": {**os.environ, "PYTHONPATH": f"{native_site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    }
    speed: dict[str, list[dict]] = {name: [] for name in builds}
    for _ in range(args.repeats):  # alternate, so both see the same machine state
        for name, env in builds.items():
            speed[name].append(run_probe(env, args.threads, args.tokens))
    emulated = {}
    if shutil.which("qemu-x86_64"):
        for name, env in builds.items():
            emulated[name] = run_probe(env, 1, 8, qemu_cpu=args.qemu_cpu)
    shutil.rmtree(native_site, ignore_errors=True)

    flags = sorted({flag for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
                    for flag in line.split(":", 1)[1].split()
                    if flag.startswith(("avx", "amx", "fma", "f16c", "bmi2", "sse4"))})
    lines = [
        "# llama.cpp build: portable vs native",
        "",
        f"Command: `.venv/bin/python -m tests.benchmarks.llama_build --native-wheel {args.native_wheel.name}` "
        f"({args.repeats} alternated runs each, best shown; {args.threads} threads; Gemma 3 270M Q4_K_M; "
        f"{args.tokens} generated tokens).",
        "",
        f"Host: {platform.processor() or platform.machine()}, CPU flags: {' '.join(flags)}",
        "",
        "| build | llama.cpp CPU features | prompt tok/s | generation tok/s | on emulated " + args.qemu_cpu + " |",
        "|---|---|---|---|---|",
    ]
    best = {}
    for name, runs in speed.items():
        ok = [r for r in runs if "failed" not in r]
        if not ok:
            lines.append(f"| {name} | — | failed: {runs[0]['failed']} | | |")
            continue
        best[name] = (max(r["prompt_tok_s"] for r in ok), max(r["gen_tok_s"] for r in ok))
        features = ok[0]["system_info"].split("|")
        features = " ".join(f.strip().replace(" = 1", "").replace("CPU : ", "") for f in features if "= 1" in f)
        emu = emulated.get(name)
        emu_text = "not run (no qemu-x86_64)" if emu is None else (
            f"**dies: {emu['failed']}**" if "failed" in emu else f"completes ({emu['completion_tokens']} tokens)")
        lines.append(f"| {name} | {features} | {best[name][0]:.0f} | {best[name][1]:.1f} | {emu_text} |")
    if len(best) == 2:
        (p_prompt, p_gen), (n_prompt, n_gen) = best.values()
        lines += ["", f"Portable / native: prompt {p_prompt / n_prompt:.2f}x, generation {p_gen / n_gen:.2f}x."]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

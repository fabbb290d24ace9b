# capjudge: `make demo` runs the main job offline; `make test` runs the whole test suite.
# Both start with `make setup`, which is idempotent (it reinstalls only when pyproject.toml changes).

PYTHON ?= python3
# Python's default: bytecode caches are written (__pycache__, beside the sources). A shell that sets
# PYTHONDONTWRITEBYTECODE (this project's build machine does) would make each of the suite's processes compile
# every capjudge module and pytest's rewritten test modules again: ~5 CPU-s per pytest worker's collection alone.
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
LMMS_EVAL_VERSION := 0.7.3
# A machine with an NVIDIA driver installs the ordinary way (CUDA torch, torchvision);
# any other gets the CPU torch wheel and no torchvision (see tasks/cpu_requirements.py, the route the README
# gives installed users too).
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)

# The embedded judge's llama.cpp, built from source at an exact version with flags that do not depend on the
# build host's CPU: llama.cpp's default (-march=native) picks AVX-512/AMX kernels on hosts that have them,
# and such a build crashed in llama_decode on one of this project's machines. x86-64-v3 (AVX2, FMA, F16C,
# BMI2) runs on every x86-64 CPU since 2013-2015; other architectures get their generic baseline.
# pip's wheel cache is bypassed for this one package: a wheel it cached from a native build would otherwise be
# reused silently, whatever CMAKE_ARGS say. Override LLAMA_CMAKE_ARGS for e.g. a CUDA build of your own.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_STAMP := $(VENV)/.llama-cpp-python-$(LLAMA_CPP_VERSION)-wheel
# The portable build is kept as a wheel: tests/installed/test_installed_package.py installs it into a fresh venv the way a user
# installs `capjudge[local]`, without building llama.cpp a second time.
LLAMA_WHEELS := $(VENV)/wheels

# `make test-min`: the unit tests that exercise numpy, scipy, pillow, openai, av, krippendorff and matplotlib,
# run against the LOWEST versions pyproject.toml declares (.setup/lowest_requirements.py), in a venv of their own.
MIN_VENV := .venv-min
MIN_PY   := $(MIN_VENV)/bin/python
MIN_TESTS := metrics/statistics/test_agreement_compare judges/anycap/test_anycap_parser \
	judges/anycap/test_anycap_prompt judges/client/test_client metrics/statistics/test_correlation \
	judges/gveval/test_gveval_parser judges/gveval/test_gveval_prompt \
	metrics/leaderboard/test_leaderboard_missing_values judges/anycap/test_length_rule \
	judges/test_reliability_cheating judges/test_video_frames judges/anycap/test_wordcount \
	judges/client/test_budget

# The page tests (tests/support/browser.py) drive Debian's chromium headless; Playwright never downloads a browser here.
CHROMIUM ?= $(or $(CAPJUDGE_CHROMIUM),/usr/bin/chromium)

.PHONY: setup chromium test test-min demo demo-data bench msvd-local-judge clean

setup: $(VENV)/.installed chromium

# Installs chromium when it is missing and this is a Debian-like machine where we are root; otherwise says what
# to install (the browser tests then fail, naming it, rather than skip).
chromium:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium >/dev/null; }; \
	else \
		echo "NOTE: no Chromium at $(CHROMIUM); the browser tests will fail until you install one" \
			"(Debian/Ubuntu: sudo apt-get install chromium) or set CAPJUDGE_CHROMIUM to its path"; \
	fi

$(LLAMA_STAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel packaging
	rm -rf $(LLAMA_WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) wheel -q --no-cache-dir --no-binary llama-cpp-python --no-deps \
		-w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_CPP_VERSION)'
	$(PIP) install -q --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	@echo '$(LLAMA_CMAKE_ARGS)' > $@

$(VENV)/.installed: pyproject.toml tasks/cpu_requirements.py $(LLAMA_STAMP)
ifeq ($(HAS_GPU),1)
	$(PIP) install -q -e '.[dev,local]'
else
	$(PIP) install -q 'torch==2.13.0'
	$(PIP) install -q --no-deps 'lmms-eval==$(LMMS_EVAL_VERSION)'
	$(PIP) install -q --no-deps -e '.[dev]'
	$(PY) -m capjudge.tasks.cpu_requirements 'lmms-eval' 'capjudge[dev,local]' > $(VENV)/cpu-requirements.txt
	$(PIP) install -q -r $(VENV)/cpu-requirements.txt
endif
	$(PY) -c "import capjudge.judges, capjudge.metrics, lmms_eval, av, scipy, openai"
	@touch $@

# The suite in TEST_WORKERS processes (pytest-xdist, work stealing: the long lmms-eval cases do not queue behind
# one another), then the 15 slowest tests. Four on this 2-core machine: much of the suite waits (test servers'
# latency, pacing windows, processes starting), and the extra workers fill the cores meanwhile. Three run the
# CPU-bound tests; the fourth starts with the files that wait on the clock (tests/conftest.py,
# WAITING_ON_THE_CLOCK). In one clone, back to back: 1587 tests in 809.6 s on 4 workers against 866.4 s on 3
# (1,602 and 1,594 CPU-s busy); earlier, 1277 tests in 602 s on 3 workers against 666 s on 2.
# `make test-min` runs beside the suite, on one worker, its output kept in $(MIN_LOG) and shown after the suite's:
# half of it waits on its test servers, and run after the suite it added its whole wall time (38 s) to this one.
# The status is the suite's and test-min's together: either failing fails `make test`.
TEST_WORKERS ?= 4
MIN_LOG := $(MIN_VENV)/test-min.log
test: setup $(MIN_VENV)/.installed
	@$(MAKE) --no-print-directory test-min TEST_MIN_WORKERS=1 > $(MIN_LOG) 2>&1 & lowest=$$!; \
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist worksteal --durations=15; suite=$$?; \
	wait $$lowest; lowest=$$?; \
	echo "==== make test-min (run beside the suite; its log: $(MIN_LOG)) ===="; cat $(MIN_LOG); \
	test $$suite -eq 0 && test $$lowest -eq 0

# On TEST_MIN_WORKERS processes (TEST_WORKERS alone, one beside the suite): about half of it waits on test servers
# and pacing windows. The three budget tests that fill whole pacing windows (about 20 s each, the longest here) run
# in the suite above only: they test capjudge's own window arithmetic, and the SDK's side of pacing at the lowest
# versions (429s, rate-limit headers, several processes on one budget) is in the budget and client tests kept here.
MIN_DESELECT := not header_learned_token_pacing and not authority_over_usage
TEST_MIN_WORKERS ?= $(TEST_WORKERS)
test-min: $(MIN_VENV)/.installed
	$(MIN_PY) -m pytest -q -p no:cacheprovider -n $(TEST_MIN_WORKERS) -k "$(MIN_DESELECT)" $(MIN_TESTS:%=tests/%.py)

$(MIN_VENV)/.installed: pyproject.toml .setup/lowest_requirements.py Makefile
	@test -x $(MIN_PY) || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_PY) -m pip --disable-pip-version-check install -q --upgrade pip packaging
	$(MIN_PY) .setup/lowest_requirements.py pyproject.toml > $(MIN_VENV)/lowest.txt
	$(MIN_PY) -m pip --disable-pip-version-check install -q -r $(MIN_VENV)/lowest.txt 'pytest>=8' 'pytest-timeout>=2.3' 'pytest-xdist>=3.5'
	$(MIN_PY) -m pip --disable-pip-version-check install -q --no-deps -e .
	$(MIN_PY) -c "import capjudge.judges, capjudge.metrics; print(open('$(MIN_VENV)/lowest.txt').read())"
	@touch $@

demo: setup
	$(PY) -m capjudge.tasks.cli demo

# Rewrites the committed demo split (clips, items, captions) in tasks/demo; tests check it is unchanged.
demo-data: setup
	$(PY) -m tests.support.demo_data --out tasks/demo

bench: setup
	$(PY) -m tests.benchmarks.run

# The embedded local judge against MSVD-Eval's human ratings (all 197 items; k = 3 on 40): not part of `make test`.
# Writes results/msvd_local_judge.md. MSVD_EVAL_JSON: G-VEval's MSVD-Eval.json.
MSVD_EVAL_JSON ?= ../shared/data/msvd_eval/MSVD-Eval.json
msvd-local-judge: setup
	$(PY) -m tests.benchmarks.msvd_local_judge --msvd-eval $(MSVD_EVAL_JSON)

# The embedded local judge on a fixed stratified subset of VATEX-EVAL (10 clips = 60 rated candidates, 2 per
# clip-mean-rating quintile, seed 0; about 15 minutes here): not part of `make test`. Writes
# results/vatex_local_judge.md. VATEX_EVAL_JSON: VATEX-EVAL's vid_cans_score_dict.json.
.PHONY: vatex-local-judge
VATEX_EVAL_JSON ?= ../shared/data/vatex_eval/vid_cans_score_dict.json
vatex-local-judge: setup
	$(PY) -m tests.benchmarks.vatex_local_judge --vatex-eval $(VATEX_EVAL_JSON)

# What fools the embedded local judge (issue #39): `capjudge sensitivity` on the demo items and the first
# MSVD_ITEMS rated candidates of MSVD-Eval (a few minutes here): not part of `make test`. Writes
# results/sensitivity_local_judge.md.
.PHONY: sensitivity-local-judge
MSVD_ITEMS ?= 8
sensitivity-local-judge: setup
	$(PY) -m tests.benchmarks.sensitivity_local_judge --msvd-eval $(MSVD_EVAL_JSON) --msvd-items $(MSVD_ITEMS)

# The embedded local judge in the arena (issue #49 item 7): `capjudge arena` (every pair in both orders) on the
# demo's three caption sets (gveval_demo, anycap_style_demo) and on the 10 VATEX-EVAL clips of vatex-local-judge,
# 3 human preferences each, then `capjudge vatex --arena-verdicts` (about 19 minutes here): not part of
# `make test`. Writes results/arena_local_judge.md.
.PHONY: arena-local-judge
arena-local-judge: setup
	$(PY) -m tests.benchmarks.arena_local_judge --vatex-eval $(VATEX_EVAL_JSON)

clean:
	rm -rf $(VENV) $(MIN_VENV)

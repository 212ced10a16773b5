# Two entry points for a fresh clone (see README): `make demo` and `make test`.
# Each creates its own virtual environment in .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat setup.py | cksum | cut -d' ' -f1)
OUT ?= demo_out

.PHONY: venv demo test bench clean

venv: $(STAMP)

# torch==2.13.0 first: on a CPU-only machine an unpinned torch pulls GBs of CUDA packages.
# [ros]: rclpy, the message packages and the ROS build tooling from the package index (Python
# 3.11 wheels; elsewhere nothing of ROS is installed and the rclpy tests skip, saying why).
$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,ros]'
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	$(BIN)/diffsim-ros demo --out $(OUT) --force

# One pytest worker per core (-n auto); a test file stays on one worker (module fixtures are built once).
# The numba kernels first, once, in parallel processes: otherwise each worker compiles the same ones.
test: $(STAMP)
	$(BIN)/python -m diffsim_ros.pipelines.kernels
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile --durations=25 test

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) $(OUT) build *.egg-info

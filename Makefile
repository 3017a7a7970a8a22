# The two commands a new user needs (see README.md):
#   make train   create .venv, install mxlite (with the plot, MPI for `mxlite launch`, the compiled CPU update,
#                CUDA where found), run the main job
#   make test    create .venv, install what the tests need, run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
comma := ,
CUDA_EXTRA := $(shell $(PYTHON) tools/cuda_extra.py 2>/dev/null)
# train: the plot; mpi: what `mxlite launch` needs (mpi4py and an MPI); cpu: the headers of the compiled
# CPU optimizer update; the CUDA extra where a GPU is found
TRAIN_EXTRAS := train$(comma)mpi$(comma)cpu$(if $(CUDA_EXTRA),$(comma)$(CUDA_EXTRA))
ARGS ?=

.PHONY: train test test-gpu bench gpu-proof lint info clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

train: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[$(TRAIN_EXTRAS)]'
	$(BIN)/mxlite train $(ARGS)

test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,mpi]'
	$(BIN)/python -m pytest -q

# GPU-marked tests, run from the checkout with the machine's own Python, CuPy and NCCL
# (for lent GPU machines that cannot install anything).
test-gpu:
	PYTHONPATH=. $(PYTHON) -m pytest -q -m gpu

# Every benchmark with --json into out/bench (GPU when there is one), from the checkout with the
# machine's own Python, like test-gpu. BENCH_ARGS="--quick" for a smoke run.
BENCH_ARGS ?=
bench:
	PYTHONPATH=. $(PYTHON) benchmarks/run_all.py $(BENCH_ARGS)

# One proof run on a lent GPU machine (one GPU, CuPy and PyTorch installed, no network, root is fine),
# in at most 5 minutes: the GPU tests (stopped after PROOF_TEST_S seconds), then the benchmarks of
# `run_all.py --proof` within PROOF_BENCH_S seconds (bench_train per measured step against PyTorch, the
# fused optimizer, profile_step, bench_allreduce), all into $(OUT); it ends with one summary: mxlite
# against torch per model (ms/step and ratio), the fused-optimizer table, and measured against modelled.
OUT ?= out/gpu-proof
PROOF_TEST_S ?= 150
PROOF_BENCH_S ?= 130
gpu-proof:
	mkdir -p $(OUT)
	PYTHONPATH=. timeout -s INT -k 10 $(PROOF_TEST_S) $(PYTHON) -m pytest -q -m gpu -p no:cacheprovider \
		--junitxml=$(OUT)/gpu-tests.xml 2>&1 | tee $(OUT)/gpu-tests.txt
	PYTHONPATH=. $(PYTHON) benchmarks/run_all.py --proof --out $(OUT)/bench --budget $(PROOF_BENCH_S) \
		--tests-log $(OUT)/gpu-tests.txt $(BENCH_ARGS)

lint: $(BIN)/python
	$(BIN)/python -m ruff check mxlite tests benchmarks tools

info: $(BIN)/python
	$(BIN)/mxlite info

clean:
	rm -rf $(VENV) build dist *.egg-info out

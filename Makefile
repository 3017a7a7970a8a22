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

.PHONY: train test test-real-libs test-gpu bench gpu-proof lint info clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

train: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[$(TRAIN_EXTRAS)]'
	$(BIN)/mxlite train $(ARGS)

# The suite runs over the cores (pytest-xdist, each file's tests on one worker); the kernels' host libraries are
# built once, side by side, before the workers start (tests/conftest.py).
test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,mpi]'
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# Every check against the real GPU libraries that run without a GPU (tests marked real_libs: NVRTC, the cuDNN
# frontend with libcudnn, nvmath-python, CuPy, NCCL), none skipped: installs the real-libs extra (the cuDNN
# frontend and libcudnn, about 2.1 GB) into the same environment first. `make test` runs all of them but the cuDNN
# checks (the test extra installs CuPy, NCCL, NVRTC and nvmath-python); docs/gpu-emulation.md lists them.
test-real-libs: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,mpi,real-libs]'
	MXLITE_REAL_LIBS=required $(BIN)/python -m pytest -q -m real_libs

# GPU-marked tests, run from the checkout with the machine's own Python, CuPy and NCCL
# (for GPU machines that cannot install anything).
test-gpu:
	PYTHONPATH=. $(PYTHON) -m pytest -q -m gpu

# Every benchmark with --json into out/bench (GPU when there is one), from the checkout with the
# machine's own Python, like test-gpu. BENCH_ARGS="--quick" for a smoke run.
BENCH_ARGS ?=
bench:
	PYTHONPATH=. $(PYTHON) benchmarks/run_all.py $(BENCH_ARGS)

# One proof run on a GPU machine (one GPU, CuPy and PyTorch installed, no network, root is fine),
# in at most 5 minutes, from a cold kernel cache: first `mxlite compile-kernels` (stopped after PROOF_COMPILE_S
# seconds) compiles every kernel variant mxlite may launch (165 NVRTC modules, one per variant) into CuPy's
# kernel cache over all the machine's cores, so that no test or timing below waits for NVRTC. Its cost, an
# estimate from the sweep of tests/test_real_nvrtc.py: the modules take 86-98 CPU-seconds of NVRTC 13.5 on a
# 2-core AMD EPYC (none over 5 s), so about 6 s over the GPU machine's 16 cores, plus 2-3 s for the workers to
# start (Python, CuPy, a CUDA context each): about 10 s, a third of its timeout. Then the GPU tests (stopped after
# PROOF_TEST_S seconds), then the benchmarks of `run_all.py --proof --no-warmup` (the warm-up done) within
# PROOF_BENCH_S seconds, most important first, each stopped after PROOF_RUN_S:
# bench_train --graphs on the small MLP and the CNN (mxlite hybridized as CUDA graphs against PyTorch eager
# and PyTorch's CUDA graph), the eager CNN, CNN-BN, MLP float32 and float16 steps of measured_h200.json,
# the fused Adam and SGD at 100M parameters, then the Adam MLPs, profile_step and bench_allreduce (skipped
# when the budget is spent), all into $(OUT). It ends with one table (model / mxlite ms / torch eager ms /
# torch graph ms / ratio / target / met?, with the roofline's modelled step) and the fused-optimizer table
# (measured % of the copy bandwidth beside the modelled %). At worst 30 s of compiling + 5 s for it to stop
# (timeout -k 5) + 105 s of tests + 10 s for pytest to stop (timeout -k 10) + 135 s of benchmarks = 285 s,
# leaving 15 s of the 5 minutes for start-up and the summary (the tests and benchmarks no longer compile).
# A warm-up that fails or runs out stops nothing: what it did not compile compiles at its first launch.
#
# What the GPU machine may lack, carried from here (it has no network): NVIDIA's cuDNN frontend and
# libcudnn (tests/test_cudnn.py's real-GPU comparison skips without them) and nvmath-python (cuBLAS that
# a CUDA graph can capture: without it hybridized blocks run eagerly and bench_train --graphs says
# "nvmath-python missing"). Download the wheels into .whl/ (ignored by git) on a machine with a network:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       -d .whl nvidia-cudnn-frontend nvidia-cudnn-cu13 nvmath-python
# (nvmath-python imports cuda-bindings and cuda-pathfinder, and loads libcublas: add cuda-bindings,
# cuda-pathfinder and nvidia-cublas to that list when the GPU machine's Python lacks them), carry .whl/
# with the checkout, and there:
#   pip install --no-deps --no-index --target /tmp/site .whl/*.whl && make gpu-proof CARRIED=/tmp/site
# CARRIED (default /tmp/site) is put on PYTHONPATH after the checkout when that folder exists.
OUT ?= out/gpu-proof
PROOF_COMPILE_S ?= 30
PROOF_TEST_S ?= 105
PROOF_BENCH_S ?= 135
PROOF_RUN_S ?= 60
CARRIED ?= /tmp/site
PROOF_PATH := .$(if $(wildcard $(CARRIED)),:$(abspath $(CARRIED)))$(if $(PYTHONPATH),:$(PYTHONPATH))
gpu-proof:
	mkdir -p $(OUT)
	PYTHONPATH=$(PROOF_PATH) timeout -s INT -k 5 $(PROOF_COMPILE_S) $(PYTHON) -m mxlite compile-kernels \
		--json $(OUT)/compile-kernels.json 2>&1 | tee $(OUT)/compile-kernels.txt
	PYTHONPATH=$(PROOF_PATH) timeout -s INT -k 10 $(PROOF_TEST_S) $(PYTHON) -m pytest -q -m gpu -p no:cacheprovider \
		--junitxml=$(OUT)/gpu-tests.xml 2>&1 | tee $(OUT)/gpu-tests.txt
	PYTHONPATH=$(PROOF_PATH) $(PYTHON) benchmarks/run_all.py --proof --no-warmup --out $(OUT)/bench \
		--budget $(PROOF_BENCH_S) --run-limit $(PROOF_RUN_S) --tests-log $(OUT)/gpu-tests.txt $(BENCH_ARGS)

lint: $(BIN)/python
	$(BIN)/python -m ruff check mxlite tests benchmarks tools

info: $(BIN)/python
	$(BIN)/mxlite info

clean:
	rm -rf $(VENV) build dist *.egg-info out

"""The real GPU libraries that run without a GPU, for the tests marked ``real_libs``.

Those tests hold mxlite's GPU half, and the emulated CuPy/NCCL/cuDNN/nvmath it is tested against, to what
NVIDIA's and CuPy's own packages accept: NVRTC compiles every kernel variant, the cuDNN frontend with libcudnn
builds and validates every graph, and the doubles' names and parameters match the real modules'. Each test
asks for the packages it needs with :func:`require`; where one is missing the test is skipped, naming the
package and how to install it, except under ``MXLITE_REAL_LIBS=required`` (``make test-real-libs``, which
installs them all first), where a missing package fails the test: there, no real-library check is skipped.
docs/gpu-emulation.md lists which checks run where.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REQUIRED_ENV = "MXLITE_REAL_LIBS"

# What installs each check's packages: the test extra (CI) or the real-libs extra (make test-real-libs).
INSTALL = {
    "nvrtc": "pip install -e '.[test]' (cupy-cuda13x, nvidia-cuda-nvrtc)",
    "cupy": "pip install -e '.[test]' (cupy-cuda13x, nvidia-nccl-cu13)",
    "nvmath": "pip install -e '.[test]' (nvmath-python)",
    "cudnn": "make test-real-libs (pip install -e '.[real-libs]': nvidia-cudnn-frontend, nvidia-cudnn-cu13)",
}


def required() -> bool:
    """Whether a missing real library fails its test (``MXLITE_REAL_LIBS=required``) instead of skipping it."""
    return os.environ.get(REQUIRED_ENV, "") == "required"


def missing(what: str, why: str) -> None:
    """Skip the calling test because the real ``what`` is not usable here (``why``), or fail it where every
    real library is required."""
    message = f"the real {what} is not usable here ({why}); {INSTALL.get(what, 'install it')}"
    if required():
        pytest.fail(f"{REQUIRED_ENV}=required: {message}")
    pytest.skip(message)


def probe(what: str, code: str, timeout: float = 180, env: dict[str, str] | None = None) -> None:
    """Run ``code`` in a fresh interpreter (where the emulation is not installed, so ``import cupy`` and ``import
    cudnn`` are the real packages; ``env``: its environment, default this one's without ``MXLITE_EMULATE_GPUS``);
    skip or fail via :func:`missing` when it fails."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "MXLITE_EMULATE_GPUS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        missing(what, (proc.stderr.strip().splitlines() or ["failed"])[-1][-300:])

"""mxlite's "same bits for any thread count" under every OpenBLAS kernel this CPU runs.

OpenBLAS picks its kernels by CPU (``DYNAMIC_ARCH``): SkylakeX on AVX-512 Intel machines, Haswell on AVX2 ones
and on AMD's Zen, Sandybridge, Nehalem or Prescott on older ones; ``OPENBLAS_CORETYPE`` forces one. The kernels
differ in how they round: with the Haswell kernels a product cut into pieces (at any multiple of 16 rows or
columns) rounds differently from the whole, which the SkylakeX kernels do not. mxlite's products are cut by the
process's cores, never by its thread count (``blas._host_matmul``), so the bits must not depend on the thread
count whichever kernels run. The rest of the suite runs under the kernel OpenBLAS picks; this file runs the
thread-count reproducibility tests again, in child processes, under each kernel family the CPU can run: the
generic SSE3 kernels (Prescott, every x86-64 CPU), Haswell (AVX2 and FMA) and SkylakeX (AVX-512).
"""

from __future__ import annotations

import os
import sys

import pytest

from tests import deadlines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each thread-count reproducibility test: products, convolutions, recurrent layers and stacks, kernels.
REPRODUCIBILITY = ["tests/test_host_parallel.py", "tests/test_rnn_stack.py", "tests/test_conv_native.py",
                   "tests/test_rnn_native.py", "tests/test_cpu_threads.py"]
# OpenBLAS core type -> the CPU flags its kernels need (/proc/cpuinfo), and the architecture threadpoolctl then
# reports (OpenBLAS 0.3.31 names the generic SSE3 family after its first member, Katmai).
CORE_TYPES = {"Prescott": ((), "Katmai"), "Haswell": (("avx2", "fma"), "Haswell"),
              "SkylakeX": (("avx512f", "avx512bw", "avx512dq", "avx512vl"), "SkylakeX")}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def _numpy_blas() -> str | None:
    """The internal API of NumPy's BLAS ('openblas', 'mkl', ...), or None when it cannot be told."""
    import numpy as np  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))
    for info in threadpool_info():
        if info.get("user_api") == "blas" and info.get("filepath", "").startswith(numpy_dir):
            return info.get("internal_api")
    return None


def _runnable(core: str) -> bool:
    flags = _cpu_flags()
    return all(f in flags for f in CORE_TYPES[core][0])


@pytest.mark.parametrize("core", list(CORE_TYPES))
def test_the_bits_do_not_depend_on_the_thread_count_under_openblas_kernel(core):
    if _numpy_blas() != "openblas":
        pytest.skip(f"NumPy's BLAS is {_numpy_blas()}, not OpenBLAS")
    if not _runnable(core):
        pytest.skip(f"this CPU lacks {CORE_TYPES[core][0]}: OpenBLAS's {core} kernels cannot run here")
    env = dict(os.environ, OPENBLAS_CORETYPE=core)
    probe = deadlines.run([sys.executable, "-c", "import numpy as np; from threadpoolctl import threadpool_info; "
                            "np.ones((64, 64), np.float32) @ np.ones((64, 64), np.float32); "
                            "print([i['architecture'] for i in threadpool_info() if i['user_api'] == 'blas'])"],
                           env=env, timeout=120)
    assert f"'{CORE_TYPES[core][1]}'" in probe.stdout, f"OPENBLAS_CORETYPE={core} was not taken: {probe.stdout}"
    proc = deadlines.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "bits",
                          *REPRODUCIBILITY], env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout.splitlines()[-1] and "failed" not in proc.stdout.splitlines()[-1]

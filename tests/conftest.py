"""Test-session set-up: on a machine without an NVIDIA driver, GPUs are emulated.

The GPU-marked tests are meant to run everywhere. Where no NVIDIA driver is loaded (CI, laptops),
``MXLITE_EMULATE_GPUS`` is set before mxlite first looks for GPUs, so ``mx.gpu(i)`` and every
``import cupy`` reach mxlite's strict CuPy/NCCL double (docs/gpu-emulation.md). On a machine with
a driver nothing is set and the same tests run on the real GPUs. An explicit
``MXLITE_EMULATE_GPUS`` (``0`` turns the emulation off) always wins.

A test that needs several GPUs says so with ``@pytest.mark.requires_gpus(n)``: with fewer GPUs
visible (a one-GPU machine, ``MXLITE_EMULATE_GPUS=1``) it is skipped, naming how many it needs
and how many there are.
"""

from __future__ import annotations

import os
import sys

import pytest

# Two emulated GPUs: the most any GPU test asks for (peer copies, NCCL between two devices).
EMULATED_GPUS = 2
_NVIDIA_DRIVER = "/proc/driver/nvidia/version"  # present whenever the kernel driver is loaded

if "MXLITE_EMULATE_GPUS" not in os.environ and not os.path.exists(_NVIDIA_DRIVER):
    os.environ["MXLITE_EMULATE_GPUS"] = str(EMULATED_GPUS)

# No test downloads from MXNet's repository: a test that wants a download points this at a local mirror.
os.environ.setdefault("MXNET_GLUON_REPO", "file:///nonexistent/mxlite-tests/no-network/")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_gpus(n): needs n GPUs (real, or emulated); skipped with fewer")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build every kernel file's host libraries once, side by side, before the first test: the serial build CPU
    devices run and, on emulated GPUs, the one they run. A cold build cache (CI) otherwise builds them one by one
    inside the first tests that launch each, while the other cores wait (about four minutes of g++ in all)."""
    if os.environ.get("MXLITE_PREBUILD_KERNELS", "1") == "0":
        return
    import concurrent.futures  # noqa: PLC0415

    import mxlite  # noqa: PLC0415
    from mxlite.cli.compile_kernels import registered_kernels  # noqa: PLC0415
    from mxlite.device import _hostcuda, kernels, threads  # noqa: PLC0415

    try:
        _hostcuda.compiler()
        _hostcuda.cuda_include_dirs()
    except _hostcuda.HostCudaError:
        return  # no g++ or headers: the tests that need them say so
    names = registered_kernels()
    builds = [(f, lambda f=f: kernels.build_cpu_kernels([f], 1)) for f in names]
    from mxlite._emulation import install as emu  # noqa: PLC0415

    mxlite.num_gpus()  # installs the emulation when MXLITE_EMULATE_GPUS asks for it
    if emu.emulated_gpu_count():
        from mxlite._emulation.fakecupy import _rawmodule  # noqa: PLC0415

        builds += [(f, lambda f=f: _rawmodule._host_module(kernels.kernel_source(f), kernels.NVRTC_OPTIONS,
                                                           names[f][:1]).compile()) for f in names]
    # the largest first (optimizers.cu: about a minute each), so the others fill the cores around them
    builds.sort(key=lambda item: -len(names[item[0]]))
    with concurrent.futures.ThreadPoolExecutor(threads.cores()) as pool:
        for future in [pool.submit(build) for _, build in builds]:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - a build error shows in the tests of that kernel file
                pass


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked ``requires_gpus(n)`` when fewer than n GPUs are visible."""
    marker = item.get_closest_marker("requires_gpus")
    if marker is None:
        return
    import mxlite as mx  # noqa: PLC0415 - after MXLITE_EMULATE_GPUS is settled above

    needed, have = int(marker.args[0]), mx.num_gpus()
    if have < needed:
        pytest.skip(f"needs {needed} GPUs, {have} visible (real ones, or MXLITE_EMULATE_GPUS={needed})")


@pytest.fixture
def cp():
    """The CuPy double with 4 emulated GPUs, installed as ``cupy`` for one test of the double itself.

    The double's own state (devices, pools, streams) starts afresh; afterwards the emulation the
    session had (``MXLITE_EMULATE_GPUS``) is installed again, fresh, or the modules seen before are
    put back.
    """
    from mxlite._emulation import install as emu  # noqa: PLC0415 - only tests of the double need it

    saved = {name: sys.modules.get(name) for name in emu._MODULES}
    session_gpus = emu.emulated_gpu_count()
    emu.install(4)
    emu.reset_counters()
    yield sys.modules["cupy"]
    emu.uninstall()
    if session_gpus:
        emu.install(session_gpus)
    else:
        for name, module in saved.items():
            if module is not None:
                sys.modules[name] = module


@pytest.fixture
def thread_count():
    """``set(n)``: mxlite's thread count (``mx.set_num_threads``) for the test; the policy as it was afterwards."""
    import mxlite as mx  # noqa: PLC0415 - as the fixtures above, imported when used
    from mxlite.device import threads  # noqa: PLC0415
    from mxlite.device._hostcuda import launch  # noqa: PLC0415

    saved = (threads._num_threads, threads._explicit, launch.get_threads())
    counts = [c.get_num_threads() for c in threads._blas_controllers()]
    yield mx.set_num_threads
    threads._num_threads, threads._explicit = saved[:2]
    launch.set_threads(saved[2])
    for c, n in zip(threads._blas_controllers(), counts):
        c.set_num_threads(n)

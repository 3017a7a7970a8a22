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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires_gpus(n): needs n GPUs (real, or emulated); skipped with fewer")


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

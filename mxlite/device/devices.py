"""Devices: where an array lives and which array library computes on it.

A :class:`Device` is ``cpu(i)`` or ``gpu(i)``. CPU devices are NumPy-backed and any number
of them may exist in one process ("virtual devices"): that is how CI exercises multi-device
code without a GPU. GPU devices are CuPy-backed; creating one on a machine without a usable
CUDA stack raises :class:`DeviceUnavailableError` saying why (CuPy missing, no driver, no such
device).

``MXLITE_EMULATE_GPUS=N`` (an integer from 1 to 16) puts ``gpu(0)`` .. ``gpu(N-1)`` on N emulated
GPUs: a strict CuPy/NCCL double backed by NumPy, installed as ``cupy`` for the whole process, on
which every GPU code path of mxlite runs without a GPU (docs/gpu-emulation.md). Unset or ``0``,
nothing changes: real CuPy and real GPUs are used when present.

``with device:`` makes ``device`` the current one, which is where creation functions put
arrays when no device is given (MXNet's ``with mx.gpu(0):`` idiom).
"""

from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType
from typing import Any

import numpy as np

from . import env
from .topology import launched_by_mpi, local_rank_and_size

__all__ = [
    "Device",
    "DeviceUnavailableError",
    "cpu",
    "gpu",
    "num_gpus",
    "gpu_devices",
    "current_device",
    "device_of",
    "EMULATE_GPUS_ENV",
    "cuda_status",
]

EMULATE_GPUS_ENV = "MXLITE_EMULATE_GPUS"


class DeviceUnavailableError(RuntimeError):
    """A GPU device was asked for on a machine that cannot provide it."""


@functools.lru_cache(maxsize=1)
def _cupy_status() -> tuple[ModuleType | None, int, str]:
    """Return ``(cupy or None, number of visible GPUs, reason when 0)``; probed once."""
    emulated = _emulated_gpus()
    if emulated:
        from .._emulation.install import install  # noqa: PLC0415 - only when asked for

        install(emulated)
        import cupy  # noqa: PLC0415 - the double, just installed as `cupy`

        print(f"mxlite: gpu(0)..gpu({emulated - 1}) are emulated on the CPU ({EMULATE_GPUS_ENV}={emulated}); "
              "nothing runs on a real GPU", file=sys.stderr)
        return cupy, emulated, ""
    try:
        import cupy  # noqa: PLC0415 - optional dependency, probed lazily
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, 0, (
            f"CuPy is not importable ({type(exc).__name__}: {exc}); install mxlite with the "
            "'cuda12' or 'cuda13' extra, e.g. pip install 'mxlite[cuda12]'"
        )
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # cudaErrorNoDevice, cudaErrorInsufficientDriver, ...
        return cupy, 0, f"CuPy is installed but CUDA reports no usable GPU ({exc}); is the NVIDIA driver loaded?"
    if count == 0:
        return cupy, 0, "CuPy is installed but CUDA sees no GPU"
    return cupy, count, ""


def _emulated_gpus() -> int:
    """The number of GPUs ``MXLITE_EMULATE_GPUS`` asks to emulate (0: none, use real CUDA).

    Raises:
        ValueError: the variable is set to something other than an integer from 0 to 16.
    """
    return env.integer(EMULATE_GPUS_ENV, 0, 16, 0, " emulated GPUs (0: off)")


def cuda_status() -> tuple[ModuleType | None, int, str]:
    """``(cupy module or None, number of visible GPUs, why there are none)``, probed once per process.

    The reason is empty when GPUs are visible; ``mxlite info`` prints it.
    """
    return _cupy_status()


def num_gpus() -> int:
    """Number of GPUs CUDA can see (0 without CuPy, driver or device)."""
    return _cupy_status()[1]


class Device:
    """A place where arrays live: ``Device('cpu', 0)`` or ``Device('gpu', 1)``.

    MXNet's host-memory kinds ``'cpu_pinned'`` and ``'cpu_shared'`` give the CPU device of that id (mxlite's
    host arrays are plain NumPy arrays; a DataLoader's worker processes send their batches through a pipe).

    Devices compare and hash by ``(device_type, device_id)``; ``repr`` is ``cpu(0)`` /
    ``gpu(1)`` as in MXNet. Use :func:`cpu` and :func:`gpu` to build them.

    Raises:
        ValueError: unknown ``device_type``, or a ``device_id`` that is not an integer >= 0.
        DeviceUnavailableError: a GPU device without CuPy, driver, or that many GPUs.
    """

    __slots__ = ("device_type", "device_id", "_token")

    def __init__(self, device_type: str | Device, device_id: int = 0) -> None:
        if isinstance(device_type, Device):
            device_type, device_id = device_type.device_type, device_type.device_id
        if device_type in ("cpu_pinned", "cpu_shared"):
            device_type = "cpu"  # MXNet's page-locked and shared host memory: mxlite's host arrays are NumPy's
        if device_type not in ("cpu", "gpu"):
            raise ValueError(f"device_type must be 'cpu' or 'gpu', got {device_type!r}")
        if isinstance(device_id, bool) or not isinstance(device_id, (int, np.integer)):
            raise ValueError(f"device_id of a {device_type} device must be an integer, got "
                             f"{type(device_id).__name__}: {device_id!r}")
        device_id = int(device_id)
        if device_id < 0:
            raise ValueError(f"device_id must be >= 0, got {device_id}")
        if device_type == "gpu":
            _, count, reason = _cupy_status()
            if count == 0:
                raise DeviceUnavailableError(f"cannot use gpu({device_id}): {reason}")
            if device_id >= count:
                raise DeviceUnavailableError(
                    f"cannot use gpu({device_id}): only {count} GPU(s) visible (gpu(0)..gpu({count - 1}))"
                )
        self.device_type = device_type
        self.device_id = device_id
        self._token: list[Any] = []

    # -- identity -------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Device)
            and self.device_type == other.device_type
            and self.device_id == other.device_id
        )

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __str__ = __repr__

    # -- array library --------------------------------------------------------------------
    @property
    def is_gpu(self) -> bool:
        """True for CUDA devices."""
        return self.device_type == "gpu"

    @property
    def xp(self) -> ModuleType:
        """The array module computing on this device: ``numpy`` or ``cupy``."""
        if self.device_type == "cpu":
            return np
        return _cupy_status()[0]

    def use(self) -> Any:
        """A context manager making this device CUDA's current one (a no-op on CPU)."""
        if self.device_type == "cpu":
            return _NULL_CONTEXT
        return self.xp.cuda.Device(self.device_id)

    def is_current(self) -> bool:
        """Whether work issued now already runs here: always for a CPU device; for a GPU, when it is CUDA's
        current device (one runtime query, cheaper than entering :meth:`use`, which ops skip when this holds)."""
        return self.device_type == "cpu" or self.xp.cuda.runtime.getDevice() == self.device_id

    # -- current device -------------------------------------------------------------------
    def __enter__(self) -> Device:
        _STATE.stack.append(self)
        cuda_ctx = self.use()
        cuda_ctx.__enter__()
        self._token.append(cuda_ctx)
        return self

    def __exit__(self, *exc: object) -> None:
        self._token.pop().__exit__(*exc)
        _STATE.stack.pop()


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_CONTEXT = _NullContext()


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[Device] = []


_STATE = _State()


def cpu(device_id: int = 0) -> Device:
    """The ``device_id``-th CPU device (NumPy-backed; any id is valid: a virtual device)."""
    return Device("cpu", device_id)


def gpu(device_id: int = 0) -> Device:
    """The ``device_id``-th GPU. Raises :class:`DeviceUnavailableError` when CUDA cannot provide it."""
    return Device("gpu", device_id)


def gpu_devices() -> list[Device]:
    """The GPUs this process trains on, ``[]`` when CUDA is unavailable.

    One process: every visible GPU. Under an MPI launcher (``mpiexec``, ``mxlite launch``, ``srun``)
    with several processes on this node: ``[gpu(local_rank)]``, one GPU per process, the local rank
    coming from MPI's shared-memory split (:func:`mxlite.device.topology.local_rank_and_size`; a collective
    the first time, so call it on every rank). With one process per node under MPI: every GPU.

    Raises:
        DeviceUnavailableError: more processes on this node than visible GPUs.
    """
    count = num_gpus()
    if count and _several_processes_per_node():
        local_rank, local_size = local_rank_and_size()
        if local_rank >= count:
            raise DeviceUnavailableError(f"{local_size} processes run on this node but it has {count} visible "
                                         f"GPU(s): local rank {local_rank} has no GPU of its own; start at most "
                                         f"{count} processes per node (mxlite launch --ppn)")
        return [Device("gpu", local_rank)]
    return [Device("gpu", i) for i in range(count)]


def _several_processes_per_node() -> bool:
    """Whether an MPI launcher started this process among others on its node (mpi4py importable)."""
    if not launched_by_mpi():
        return False
    try:
        return local_rank_and_size()[1] > 1
    except RuntimeError:  # no mpi4py: no multi-process training either
        return False


_DEFAULT = Device("cpu", 0)


def current_device() -> Device:
    """The device set by the innermost ``with device:`` block, else ``cpu(0)``."""
    return _STATE.stack[-1] if _STATE.stack else _DEFAULT


def device_of(array: Any) -> Device:
    """The device holding a raw NumPy or CuPy array (NumPy arrays report ``cpu(0)``)."""
    if isinstance(array, np.ndarray):
        return _DEFAULT
    dev = getattr(array, "device", None)
    if dev is not None and hasattr(dev, "id"):
        return Device("gpu", dev.id)
    raise TypeError(f"not a NumPy or CuPy array: {type(array).__name__}")


def as_device(device: Device | str | None) -> Device:
    """Normalise ``None`` (current device), a :class:`Device` or a string.

    Strings are ``'cpu'``, ``'gpu'`` (id 0), ``'gpu:1'`` or ``'gpu(1)'``.

    Raises:
        TypeError: ``device`` is neither None, a Device nor a str.
        ValueError: a string of another form (names the string), and :class:`Device`'s errors.
        DeviceUnavailableError: a GPU device CUDA cannot provide.
    """
    if device is None:
        return current_device()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        text = device.strip()
        kind, sep, idx = text.partition(":")
        if not sep and text.endswith(")"):
            kind, sep, idx = text[:-1].partition("(")
        kind, idx = kind.strip(), idx.strip()
        if kind not in ("cpu", "gpu") or (sep and not idx.isdigit()):
            raise ValueError(f"cannot parse device string {device!r}; expected 'cpu', 'gpu', 'gpu:N' or 'gpu(N)' "
                             "with N an integer >= 0")
        return Device(kind, int(idx) if idx else 0)
    raise TypeError(f"expected a Device, got {type(device).__name__}: {device!r}")

"""Process-wide state of the emulated GPUs: how many there are and which one is current (per thread)."""

from __future__ import annotations

import threading

from . import _counters

__all__ = ["num_devices", "set_num_devices", "current_device_id", "set_current_device_id", "check_device_id"]

_num_devices = 0
_tls = threading.local()


def num_devices() -> int:
    """How many GPUs are emulated (0 until :func:`set_num_devices`)."""
    return _num_devices


def set_num_devices(n: int) -> None:
    """Emulate ``n`` GPUs (ids ``0 .. n-1``)."""
    global _num_devices
    _num_devices = n
    _counters.ensure(n)


def current_device_id() -> int:
    """This thread's current device (CUDA's default: 0)."""
    return getattr(_tls, "device", 0)


def set_current_device_id(device_id: int) -> None:
    """Make ``device_id`` this thread's current device (``cudaSetDevice``)."""
    check_device_id(device_id)
    _tls.device = device_id


def check_device_id(device_id: int) -> int:
    """``device_id`` as an int; raises CUDARuntimeError (``cudaErrorInvalidDevice``) when out of range."""
    from .cuda.runtime import CUDARuntimeError  # noqa: PLC0415 - cycle

    if isinstance(device_id, bool) or not 0 <= int(device_id) < _num_devices:
        raise CUDARuntimeError._with(101, f"cudaErrorInvalidDevice: invalid device ordinal {device_id!r} "
                                    f"({_num_devices} emulated GPU(s))")
    return int(device_id)

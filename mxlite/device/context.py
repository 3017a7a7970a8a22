"""MXNet's ``mx.context`` module: ``Context`` and the ``ctx=`` spellings of devices.

A :class:`Context` *is* a :class:`~mxlite.Device` (``mx.Context('gpu', 1) == mx.gpu(1)``), so every
object and function taking a device takes a context. ``with mx.cpu(1):`` makes ``cpu(1)`` the
default device of creation functions, as in MXNet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .devices import Device, cpu, current_device, gpu, num_gpus

__all__ = ["Context", "cpu", "cpu_pinned", "current_context", "gpu", "num_gpus", "pick_device", "pick_devices"]

Context = Device  # MXNet 1.x's name; MXNet 2.x keeps it as an alias of Device too


def current_context() -> Device:
    """The default device: the innermost ``with device:`` block's, else ``cpu(0)`` (MXNet's ``current_context``)."""
    return current_device()


def cpu_pinned(device_id: int = 0) -> Device:
    """MXNet's page-locked host memory: mxlite's host arrays are plain NumPy arrays, so ``cpu(device_id)``."""
    return cpu(device_id)


def pick_device(device: Any = None, ctx: Any = None, context: Any = None, *, where: str = "device") -> Any:
    """The one device given as ``device=``, ``ctx=`` or ``context=`` (MXNet's three spellings), or None.

    Raises:
        ValueError: more than one spelling given with different values (names them).
    """
    given = {k: v for k, v in (("device", device), ("ctx", ctx), ("context", context)) if v is not None}
    values = list(given.values())
    if len(values) > 1 and any(v is not values[0] and v != values[0] for v in values[1:]):
        raise ValueError(f"{where}: give the device once, got " + ", ".join(f"{k}={v!r}" for k, v in given.items()))
    return values[0] if values else None


def pick_devices(device_list: Sequence[Any] | Any = None, ctx_list: Sequence[Any] | Any = None,
                 *, where: str = "device_list") -> Any:
    """The device list given as ``device_list=`` or ``ctx_list=``, or None.

    Raises:
        ValueError: both given with different values.
    """
    if device_list is not None and ctx_list is not None and list(device_list) != list(ctx_list):
        raise ValueError(f"{where}: give the devices once, got device_list={device_list!r} and ctx_list={ctx_list!r}")
    return device_list if device_list is not None else ctx_list

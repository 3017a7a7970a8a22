"""``cupy.cuda.Device``: selecting the current emulated GPU."""

from __future__ import annotations

from typing import Any

from .. import _state, _streams

__all__ = ["Device", "get_device_id"]


class Device:
    """An emulated CUDA device (CuPy's ``cupy.cuda.Device``).

    Args:
        device: device id (default: the current device).

    ``with Device(i):`` makes ``i`` current for the block (restoring the previous one after);
    :meth:`use` makes it current for good.
    """

    def __init__(self, device: Any = None) -> None:
        if device is None:
            device = _state.current_device_id()
        self.id = _state.check_device_id(int(device))
        self._saved: list[int] = []

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"

    def __int__(self) -> int:
        return self.id

    def __index__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("cuda", self.id))

    def __enter__(self) -> Device:
        self._saved.append(_state.current_device_id())
        _state.set_current_device_id(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        _state.set_current_device_id(self._saved.pop())

    def use(self) -> None:
        """Make this device current (not restored)."""
        _state.set_current_device_id(self.id)

    def synchronize(self) -> None:
        """Block the host until all of this device's streams are done."""
        _streams.synchronize_device(self.id)

    @property
    def compute_capability(self) -> str:
        """``'90'``: the emulated GPUs present themselves as compute capability 9.0."""
        return "90"

    @property
    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the emulated device."""
        from . import runtime  # noqa: PLC0415

        return runtime.memGetInfo()


def get_device_id() -> int:
    """The current device id."""
    return _state.current_device_id()

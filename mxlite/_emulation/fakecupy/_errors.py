"""The error the double raises where a real GPU would silently race, corrupt or crash."""

from __future__ import annotations

__all__ = ["EmulatedGPUError"]


class EmulatedGPUError(RuntimeError):
    """A program broke a rule of CUDA that an emulated GPU checks (device, stream ordering, lifetime, host reads).

    The message names the arrays (shape, dtype, allocation id), streams and devices involved.
    """

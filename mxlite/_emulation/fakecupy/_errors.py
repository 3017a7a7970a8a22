"""The errors the double raises where a real GPU would silently race, corrupt or crash, or where CUDA refuses."""

from __future__ import annotations

__all__ = ["EmulatedGPUError", "cuda_error"]


class EmulatedGPUError(RuntimeError):
    """A program broke a rule of CUDA that an emulated GPU checks (device, stream ordering, lifetime, host reads).

    The message names the arrays (shape, dtype, allocation id), streams and devices involved.
    """


def cuda_error(status: int, detail: str) -> RuntimeError:
    """CuPy's ``CUDARuntimeError`` for cudaError_t ``status``: CUDA's name and text, then ``detail``."""
    from .cuda.runtime import CUDARuntimeError  # noqa: PLC0415 - cycle

    err = CUDARuntimeError(status)
    err.args = (f"{err.args[0]} ({detail})",)
    return err

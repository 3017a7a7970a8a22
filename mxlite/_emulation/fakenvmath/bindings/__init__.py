"""``nvmath.bindings`` of the GPU emulation: only ``cublas`` (a subset of nvmath-python 1.0.0's)."""

from __future__ import annotations

from . import cublas

__all__ = ["cublas"]

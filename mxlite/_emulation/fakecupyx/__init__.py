"""The ``cupyx`` namespace of the GPU emulation: ``scatter_add`` (and friends) on emulated GPUs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..fakecupy import _core

__all__ = ["scatter_add", "scatter_max", "scatter_min"]


def scatter_add(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] += value`` with repeated indices accumulated (NumPy's ``add.at``)."""
    _core.apply("scatter_add", np.add.at, (a, slices, value), {}, write_args=(0,))


def scatter_max(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] = max(a[slices], value)`` with repeated indices (NumPy's ``maximum.at``)."""
    _core.apply("scatter_max", np.maximum.at, (a, slices, value), {}, write_args=(0,))


def scatter_min(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] = min(a[slices], value)`` with repeated indices (NumPy's ``minimum.at``)."""
    _core.apply("scatter_min", np.minimum.at, (a, slices, value), {}, write_args=(0,))

"""The ``cupyx`` namespace of the GPU emulation: ``scatter_add`` (and friends) and ``errstate`` on emulated GPUs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..fakecupy import _core
from ..fakecupy import linalg as _linalg

__all__ = ["scatter_add", "scatter_max", "scatter_min", "errstate", "seterr", "geterr"]


def scatter_add(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] += value`` with repeated indices accumulated (NumPy's ``add.at``)."""
    _core.apply("scatter_add", np.add.at, (a, slices, value), {}, write_args=(0,))


def scatter_max(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] = max(a[slices], value)`` with repeated indices (NumPy's ``maximum.at``)."""
    _core.apply("scatter_max", np.maximum.at, (a, slices, value), {}, write_args=(0,))


def scatter_min(a: Any, slices: Any, value: Any) -> None:
    """``a[slices] = min(a[slices], value)`` with repeated indices (NumPy's ``minimum.at``)."""
    _core.apply("scatter_min", np.minimum.at, (a, slices, value), {}, write_args=(0,))


def geterr() -> dict[str, Any]:
    """CuPy's error settings: only ``linalg`` ('ignore', CuPy's default, or 'raise') is ever set."""
    return {"divide": None, "over": None, "under": None, "invalid": None, "linalg": _linalg._config.linalg}


def seterr(*, divide: Any = None, over: Any = None, under: Any = None, invalid: Any = None,
           linalg: Any = None) -> dict[str, Any]:
    """Set ``linalg`` to 'ignore' or 'raise' (what ``cupy.linalg`` does on a failure; see ``fakecupy.linalg``);
    returns the old settings. As in CuPy, the other settings raise NotImplementedError."""
    old = geterr()
    if divide is not None or over is not None or under is not None or invalid is not None:
        raise NotImplementedError()
    if linalg is not None:
        if linalg not in ("ignore", "raise"):
            raise NotImplementedError()
        _linalg._config.linalg = linalg
    return old


@contextlib.contextmanager
def errstate(*, divide: Any = None, over: Any = None, under: Any = None, invalid: Any = None,
             linalg: Any = None) -> Iterator[None]:
    """:func:`seterr` for the duration of a ``with`` block (per thread, as in CuPy)."""
    old = seterr(divide=divide, over=over, under=under, invalid=invalid, linalg=linalg)
    try:
        yield
    finally:
        seterr(linalg=old["linalg"])

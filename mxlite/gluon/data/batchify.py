"""Batchify functions (Gluon's ``gluon.data.batchify``): how a list of samples becomes a batch.

Each is a callable object taking the list of samples a :class:`~mxlite.gluon.data.DataLoader`
read and returning the batch; pass one as ``DataLoader(batchify_fn=...)``::

    from mxlite.gluon.data import batchify
    fn = batchify.Group(batchify.Pad(val=-1), batchify.Stack())   # (sequence, label) samples
    loader = DataLoader(dataset, batch_size=32, batchify_fn=fn)

Arrays come out as CPU :class:`~mxlite.Tensor` s (the loader moves them to its device).
Samples may be NumPy arrays, mxlite Tensors (on any device) or Python numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from ...device import cpu
from ...device.copy import as_host

__all__ = ["Append", "AsList", "Group", "Pad", "Stack", "Tuple"]


def _host(x: Any) -> np.ndarray:
    """``x`` as a NumPy array (Tensors and device arrays copied to the host)."""
    if isinstance(x, Tensor) or hasattr(x, "__cuda_array_interface__"):
        return as_host(x)
    return np.asarray(x)


def _tensor(a: np.ndarray) -> Tensor:
    return Tensor(np.ascontiguousarray(a), cpu(0))


class _Batchify:
    def __mx_handle__(self) -> Any:
        """MXNet 2.x's handle to the C++ twin of a batchify function (for ``try_nopython``); mxlite batchifies
        in Python, so the function is its own handle: this returns ``self``."""
        return self


class Stack(_Batchify):
    """Stack samples along a new first axis: n samples of shape S give a batch of shape ``(n, *S)``.

    The dtype is NumPy's for the stacked arrays (Python ints become int64, floats float64).

    Raises:
        ValueError: the samples have different shapes (the message lists them).
    """

    def __call__(self, data: Sequence[Any]) -> Tensor:
        items = [_host(x) for x in data]
        try:
            return _tensor(np.stack(items))
        except ValueError as exc:
            raise ValueError(f"Stack: cannot stack samples of different shapes "
                             f"{sorted({x.shape for x in items})}; use Pad") from exc


class Pad(_Batchify):
    """Pad samples to the largest size along every axis, then stack them (MXNet 2.x ``Pad``).

    Samples ``(2, 4)``, ``(1, 3)`` and ``(1, 2)`` give a ``(3, 2, 4)`` batch whose padded
    entries hold ``val``.

    Args:
        val: the padding value (default 0).
        dtype: the batch's dtype (default: the first sample's).
        round_to: round every padded size up to a multiple of this (an integer >= 1).
        use_shared_mem: accepted for MXNet compatibility; ignored.

    Raises:
        ValueError: the samples have different numbers of dimensions, or ``round_to`` < 1.
    """

    def __init__(self, val: float | None = None, dtype: Any = None, round_to: int | None = None,
                 use_shared_mem: bool = False) -> None:
        if round_to is not None and (isinstance(round_to, bool) or not isinstance(round_to, int) or round_to < 1):
            raise ValueError(f"round_to must be an integer >= 1 or None, got {round_to!r}")
        self._val = 0 if val is None else val
        self._dtype = dtype
        self._round_to = round_to

    def __call__(self, data: Sequence[Any]) -> Tensor:
        items = [_host(x) for x in data]
        ndims = {x.ndim for x in items}
        if len(ndims) != 1:
            raise ValueError(f"Pad: samples must have the same number of dimensions, got shapes "
                             f"{[x.shape for x in items]}")
        shape = [max(sizes) for sizes in zip(*(x.shape for x in items))] if items[0].ndim else []
        if self._round_to is not None:
            shape = [-(-s // self._round_to) * self._round_to for s in shape]
        dtype = np.dtype(self._dtype) if self._dtype is not None else items[0].dtype
        out = np.full((len(items), *shape), self._val, dtype=dtype)
        for i, x in enumerate(items):
            out[(i, *(slice(0, s) for s in x.shape))] = x
        return _tensor(out)


class Append(_Batchify):
    """Keep the samples as a list instead of stacking them (MXNet's ``Append``).

    Args:
        expand: give each sample a batch axis of size 1 (at ``batch_axis``).
        batch_axis: where the new axis goes.
        use_shared_mem: accepted for MXNet compatibility; ignored.
    """

    def __init__(self, expand: bool = True, batch_axis: int = 0, use_shared_mem: bool = False) -> None:
        self._expand = bool(expand)
        self._batch_axis = int(batch_axis)

    def __call__(self, data: Sequence[Any]) -> list[Tensor]:
        items = [_host(x) for x in data]
        if self._expand:
            items = [np.expand_dims(x, self._batch_axis) for x in items]
        return [_tensor(x) for x in items]


class AsList(_Batchify):
    """Return the samples as a plain Python list, untouched (MXNet's ``AsList``)."""

    def __call__(self, data: Sequence[Any]) -> list[Any]:
        return list(data)


class Group(_Batchify):
    """Apply one batchify function per field of tuple samples (MXNet's ``Group``).

    ``Group(Pad(), Stack())`` batches ``(sequence, label)`` samples into
    ``(padded_sequences, labels)``. A single sequence of functions may be passed instead of
    several arguments.

    Raises:
        ValueError: no functions, or a sample with another number of fields than functions.
        TypeError: a function is not callable.
    """

    def __init__(self, fn: Callable[[Any], Any] | Sequence[Callable[[Any], Any]], *args: Callable[[Any], Any]) -> None:
        fns = list(fn) if isinstance(fn, (list, tuple)) and not args else [fn, *args]
        if not fns:
            raise ValueError("Group needs at least one batchify function")
        for i, f in enumerate(fns):
            if not callable(f):
                raise TypeError(f"Group: function {i} is not callable, got {type(f).__name__}")
        self._fns = fns

    def __call__(self, data: Sequence[Any]) -> tuple[Any, ...]:
        for sample in data:
            if len(sample) != len(self._fns):
                raise ValueError(f"Group has {len(self._fns)} functions, but a sample has {len(sample)} fields")
        return tuple(fn([sample[i] for sample in data]) for i, fn in enumerate(self._fns))


Tuple = Group  # GluonNLP's name for Group

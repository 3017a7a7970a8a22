"""Row-sparse tensors: a few rows of a large matrix (e.g. the touched rows of an embedding).

A :class:`RowSparseTensor` of logical shape ``(N, ...)`` stores ``data`` of shape
``(k, ...)`` and sorted, unique ``indices`` (int64, length ``k``); every other row is zero.
``Embedding(sparse_grad=True)`` produces its weight gradient in this form. The autograd engine
accumulates such gradients through the functions this module registers with it at import
(:func:`~mxlite.autograd.tensor.register_row_sparse`): it stands below the op library and does not import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd.tensor import RowSparseGradients, Tensor, register_row_sparse
from ..device import Device, as_device
from .creation import array

__all__ = ["RowSparseTensor", "row_sparse_array", "zeros", "cast_storage"]


class RowSparseTensor:
    """A row-sparse tensor: ``data`` rows at ``indices`` of a ``shape``-shaped matrix.

    Attributes:
        data: Tensor of shape ``(k,) + shape[1:]``.
        indices: int64 Tensor of ``k`` sorted, unique row ids.
        shape, dtype, device: the logical dense tensor's.
    """

    stype = "row_sparse"

    def __init__(self, data: Tensor, indices: Tensor, shape: tuple[int, ...]) -> None:
        self.data = data
        self.indices = indices
        self.shape = tuple(int(n) for n in shape)

    @property
    def dtype(self) -> np.dtype:
        """Element dtype."""
        return self.data.dtype

    @property
    def device(self) -> Device:
        """Device holding the rows."""
        return self.data.device

    def dense_array(self) -> Any:
        """The dense NumPy/CuPy array of this tensor (zeros outside its rows): a new array."""
        xp = self.device.xp
        with self.device.use():
            out = xp.zeros(self.shape, dtype=self.dtype)
            if self.indices.size:
                out[self.indices._data] = self.data._data
        return out

    def tostype(self, stype: str) -> Any:
        """``'default'``: the dense Tensor; ``'row_sparse'``: self."""
        if stype == "row_sparse":
            return self
        if stype == "default":
            return Tensor(self.dense_array(), self.device)
        raise ValueError(f"stype must be 'default' or 'row_sparse', got {stype!r}")

    def asnumpy(self) -> np.ndarray:
        """The dense value as a NumPy array."""
        return self.tostype("default").asnumpy()

    def copy(self) -> RowSparseTensor:
        """A deep copy."""
        return RowSparseTensor(self.data.copyto(self.device), self.indices.copyto(self.device), self.shape)

    def copyto(self, other: Any) -> Any:
        """Copy into ``other`` and return it (MXNet's ``copyto``): onto a device (a new RowSparseTensor there),
        into a dense Tensor of the same shape (its values become this tensor's, zeros outside the rows), or
        into a RowSparseTensor of the same shape (which takes this one's rows).

        Raises:
            ValueError: a destination of another shape.
        """
        if isinstance(other, (Tensor, RowSparseTensor)) and tuple(other.shape) != self.shape:
            raise ValueError(f"copyto: shape mismatch, source {self.shape} vs destination {tuple(other.shape)}")
        if isinstance(other, RowSparseTensor):
            other.data = self.data.copyto(other.device)
            other.indices = self.indices.copyto(other.device)
            return other
        if isinstance(other, Tensor):
            other[...] = self.tostype("default")
            return other
        dev = as_device(other)
        return RowSparseTensor(self.data.copyto(dev), self.indices.copyto(dev), self.shape)

    # -- arithmetic (MXNet's storage rules) ------------------------------------------------
    # Scaling keeps the stored rows (rsp * scalar, rsp / scalar, -rsp: row-sparse); rsp +/- rsp is
    # row-sparse over the union of rows and rsp * rsp over their intersection; anything that fills
    # the zero rows (rsp + scalar, rsp op dense, scalar / rsp) gives a dense Tensor.
    def _scaled(self, data: Tensor) -> RowSparseTensor:
        return RowSparseTensor(data, self.indices, self.shape)

    def _dense(self) -> Tensor:
        return self.tostype("default")

    def _check_shape(self, other: RowSparseTensor) -> None:
        if other.shape != self.shape:
            raise ValueError(f"row-sparse arithmetic needs equal shapes, got {self.shape} and {other.shape}")

    def _sum(self, other: RowSparseTensor, sign: float) -> RowSparseTensor:
        self._check_shape(other)
        dev = self.device
        other_data = other.data._data if other.device == dev else other.data.copyto(dev)._data
        other_rows = other.indices._data if other.device == dev else other.indices.copyto(dev)._data
        xp = dev.xp
        with dev.use():
            values = xp.concatenate([self.data._data, other_data if sign > 0 else -other_data])
            rows = xp.concatenate([self.indices._data, other_rows])
        return from_rows(values, rows, self.shape, dev)

    def __mul__(self, other: Any) -> Any:
        if _is_scalar(other):
            return self._scaled(self.data * other)
        if isinstance(other, RowSparseTensor):
            self._check_shape(other)
            return cast_storage(self._dense() * other._dense(), "row_sparse")
        return self._dense() * other

    def __rmul__(self, other: Any) -> Any:
        return self.__mul__(other)

    def __truediv__(self, other: Any) -> Any:
        if _is_scalar(other):
            return self._scaled(self.data / other)
        return self._dense() / (other._dense() if isinstance(other, RowSparseTensor) else other)

    def __rtruediv__(self, other: Any) -> Any:
        return other / self._dense()

    def __neg__(self) -> RowSparseTensor:
        return self._scaled(-self.data)

    def __add__(self, other: Any) -> Any:
        if isinstance(other, RowSparseTensor):
            return self._sum(other, 1.0)
        return self._dense() + other

    def __radd__(self, other: Any) -> Any:
        return other + self._dense()

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, RowSparseTensor):
            return self._sum(other, -1.0)
        return self._dense() - other

    def __rsub__(self, other: Any) -> Any:
        return other - self._dense()

    def __repr__(self) -> str:
        return f"RowSparseTensor(shape={self.shape}, rows={self.indices.asnumpy().tolist()}, device={self.device})"


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def row_sparse_array(arg1: Any, shape: Any = None, device: Device | str | None = None,
                     dtype: Any = None) -> RowSparseTensor:
    """Build a row-sparse tensor from ``(values, row_ids)`` and a ``shape``.

    Row ids may be unsorted; duplicates are summed. ``shape`` defaults to
    ``(max(row_ids) + 1,) + values.shape[1:]``.

    Raises:
        ValueError: values and row ids disagree in length, a row id is out of range, or the
            trailing shape of values does not match ``shape``.
    """
    if not (isinstance(arg1, tuple) and len(arg1) == 2):
        raise TypeError("row_sparse_array expects a (values, row_ids) tuple")
    values, row_ids = arg1
    dev = as_device(device) if device is not None else (
        values.device if isinstance(values, Tensor) else as_device(None))
    vals = np.asarray(values.asnumpy() if isinstance(values, Tensor) else values,
                      dtype=dtype if dtype is not None else None)
    if vals.dtype == np.float64 and dtype is None and not isinstance(values, (np.ndarray, Tensor)):
        vals = vals.astype(np.float32)
    ids = np.asarray(row_ids.asnumpy() if isinstance(row_ids, Tensor) else row_ids).astype(np.int64).reshape(-1)
    if vals.shape[0] != ids.shape[0]:
        raise ValueError(f"row_sparse_array: {vals.shape[0]} value rows but {ids.shape[0]} row ids")
    if shape is None:
        shape = (int(ids.max()) + 1 if ids.size else 0,) + vals.shape[1:]
    shape = tuple(int(n) for n in shape)
    if tuple(vals.shape[1:]) != shape[1:]:
        raise ValueError(f"row_sparse_array: value rows have shape {vals.shape[1:]}, shape says {shape[1:]}")
    if ids.size and (ids.min() < 0 or ids.max() >= shape[0]):
        raise ValueError(f"row_sparse_array: row ids must lie in [0, {shape[0]}), got {ids.min()}..{ids.max()}")
    uniq, inverse = np.unique(ids, return_inverse=True)
    merged = np.zeros((uniq.size,) + vals.shape[1:], dtype=vals.dtype)
    np.add.at(merged, inverse, vals)
    return RowSparseTensor(array(merged, dev, merged.dtype), array(uniq, dev, np.int64), shape)


def zeros(shape: Any, dtype: Any = np.float32, device: Device | str | None = None) -> RowSparseTensor:
    """An all-zero row-sparse tensor (no stored rows)."""
    dev = as_device(device)
    shape = tuple(shape)
    xp = dev.xp
    with dev.use():
        data = Tensor(xp.zeros((0,) + shape[1:], dtype=dtype), dev)
        idx = Tensor(xp.zeros((0,), dtype=np.int64), dev)
    return RowSparseTensor(data, idx, shape)


def dense_to_row_sparse(data: Any, device: Device) -> RowSparseTensor:
    """Keep the rows of a raw dense array that hold any non-zero."""
    xp = device.xp
    with device.use():
        nz = xp.nonzero(data.reshape(data.shape[0], -1).any(axis=1))[0].astype(np.int64)
        return RowSparseTensor(Tensor(data[nz], device), Tensor(nz, device), data.shape)


def cast_storage(t: Any, stype: str) -> Any:
    """Convert a Tensor or RowSparseTensor to ``'default'`` or ``'row_sparse'`` storage."""
    if stype not in ("default", "row_sparse"):
        raise ValueError(f"stype must be 'default' or 'row_sparse', got {stype!r}")
    if isinstance(t, RowSparseTensor):
        return t.tostype(stype)
    if stype == "default":
        return t
    if t.ndim < 1:
        raise ValueError("tostype('row_sparse') needs a tensor with at least one dimension")
    return dense_to_row_sparse(t._data, t.device)


def from_rows(values: Any, rows: Any, shape: tuple[int, ...], device: Device) -> RowSparseTensor:
    """Row-sparse tensor from raw ``values`` for (possibly repeated, unsorted) ``rows``; duplicates summed."""
    xp = device.xp
    with device.use():
        uniq, inverse = xp.unique(rows.astype(np.int64).reshape(-1), return_inverse=True)
        merged = xp.zeros((uniq.size,) + tuple(shape[1:]), dtype=values.dtype)
        vals = values.reshape((-1,) + tuple(shape[1:]))
        if xp is np:
            np.add.at(merged, inverse.reshape(-1), vals)
        else:
            import cupyx  # noqa: PLC0415

            cupyx.scatter_add(merged, inverse.reshape(-1), vals)
    return RowSparseTensor(Tensor(merged, device), Tensor(uniq, device), shape)


def add_any(a: Any, b: Any, shape: tuple[int, ...]) -> Any:
    """Sum two gradients, each a raw dense array or a RowSparseTensor.

    Two row-sparse inputs give a row-sparse sum; anything else a raw dense array.
    """
    if isinstance(a, RowSparseTensor) and isinstance(b, RowSparseTensor):
        dev = a.device
        xp = dev.xp
        with dev.use():
            values = xp.concatenate([a.data._data, b.data._data])
            rows = xp.concatenate([a.indices._data, b.indices._data])
        return from_rows(values, rows, shape, dev)
    da = a.dense_array() if isinstance(a, RowSparseTensor) else a
    db = b.dense_array() if isinstance(b, RowSparseTensor) else b
    return da + db


register_row_sparse(RowSparseGradients(zeros=zeros, from_dense=dense_to_row_sparse, add=add_any))

"""Tensor's operators and op methods (``x + y``, ``x.sum()``, ``x.reshape(...)``, ``x.to(device)``, ...).

The engine (:mod:`mxlite.autograd.tensor`) defines :class:`~mxlite.autograd.tensor.Tensor` with what autograd
itself needs: its data, device, gradient buffer and ``backward``. Every method that *is* an op comes from the op
library, which stands above the engine: this module attaches them to the class when ``mxlite.ops`` is imported
(``import mxlite`` does), so the engine never imports an op and no import runs from the engine up to the ops.

The ``mx.nd`` face (:class:`~mxlite.autograd.tensor.NDTensor`) gets MXNet 1.x's variants here too: ``reshape``
with MXNet's codes, comparisons and logic giving 1/0 in the operands' dtype, and results that are never 0-d.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import device as _device
from ..autograd.tensor import NDTensor, Tensor
from . import core, nn_ops, sparse

__all__: list[str] = []

# Tensor method -> op (the method calls the op with the tensor first).
_OP_METHODS: dict[str, Callable[..., Any]] = {
    "__add__": core.add, "__sub__": core.subtract, "__mul__": core.multiply, "__truediv__": core.divide,
    "__pow__": core.power, "__matmul__": core.matmul, "__mod__": core.mod, "__neg__": core.negative,
    "__abs__": core.abs, "__eq__": core.equal, "__ne__": core.not_equal, "__gt__": core.greater,
    "__ge__": core.greater_equal, "__lt__": core.less, "__le__": core.less_equal, "__invert__": core.logical_not,
    "__and__": core.logical_and, "__or__": core.logical_or, "__xor__": core.logical_xor, "__getitem__": core.getitem,
    "reshape": core.reshape, "transpose": core.transpose, "swapaxes": core.swapaxes, "expand_dims": core.expand_dims,
    "squeeze": core.squeeze, "broadcast_to": core.broadcast_to, "flatten": core.flatten, "sum": core.sum,
    "mean": core.mean, "max": core.max, "min": core.min, "exp": core.exp, "log": core.log, "sqrt": core.sqrt,
    "square": core.square, "tanh": core.tanh, "sigmoid": core.sigmoid, "relu": core.relu, "abs": core.abs,
    "clip": core.clip, "argmax": core.argmax, "argmin": core.argmin, "astype": core.astype,
    "one_hot": core.one_hot, "zeros_like": core.zeros_like, "ones_like": core.ones_like,
    **{name: getattr(core, name) for name in (
        "prod", "norm", "var", "std", "tile", "repeat", "flip", "slice_axis", "sign", "round", "floor", "ceil",
        "trunc", "sin", "cos", "sort", "argsort", "cumsum", "log1p", "expm1", "reciprocal", "take_along_axis",
        "moveaxis", "logsumexp")},
}
# Reflected operators: ``other OP tensor`` -> op(other, tensor).
_REFLECTED: dict[str, Callable[..., Any]] = {
    "__radd__": core.add, "__rsub__": core.subtract, "__rmul__": core.multiply, "__rtruediv__": core.divide,
    "__rpow__": core.power, "__rmatmul__": core.matmul, "__rmod__": core.mod,
}
# mx.nd's comparisons and logic: 1/0 in the operands' dtype, as MXNet 1.x's NDArray.
_ND_OPERATORS: dict[str, Callable[..., Any]] = {
    "__eq__": core.nd_equal, "__ne__": core.nd_not_equal, "__gt__": core.nd_greater,
    "__ge__": core.nd_greater_equal, "__lt__": core.nd_less, "__le__": core.nd_less_equal,
    "__and__": core.nd_logical_and, "__or__": core.nd_logical_or, "__xor__": core.nd_logical_xor,
    "__invert__": core.nd_logical_not,
}
# Tensor methods whose result an mx.nd array gets with the nd face and MXNet 1.x's shape (ops that make their
# result without ``op_result``: rounding, ``one_hot``, ``zeros_like``, ...).
_ND_FACE_KEPT = ("argsort", "sign", "round", "floor", "ceil", "trunc", "one_hot", "zeros_like", "ones_like")


def _reflected(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, other: fn(other, self)


def to(self: Tensor, device: _device.Device | str) -> Tensor:
    """This tensor on ``device`` (itself if already there); differentiable. Also ``as_in_context``,
    ``as_in_ctx`` and ``to_device`` (MXNet's names)."""
    return core.to_device(self, _device.as_device(device))


def take(self: Tensor, indices: Any, axis: int | None = None, mode: str = "raise") -> Tensor:
    """Entries at ``indices`` along ``axis`` (of the flattened array when None): MXNet 2.x's
    ``ndarray.take``, the fluent form of ``mx.np.take`` (differentiable in this tensor).

    ``mode`` 'raise' (default, as MXNet 2.x) refuses out-of-range ids with IndexError; 'clip'
    clips them, 'wrap' wraps them around.
    """
    a = self if axis is not None else core.reshape(self, (-1,))
    idx = indices.array if isinstance(indices, Tensor) else indices
    return nn_ops.take(a, idx, axis=0 if axis is None else axis, mode=mode)


def tostype(self: Tensor, stype: str) -> Any:
    """Convert storage: ``'default'`` returns self, ``'row_sparse'`` keeps the rows holding a non-zero.

    Raises:
        ValueError: another ``stype``, or ``'row_sparse'`` of a 0-d tensor.
    """
    return sparse.cast_storage(self, stype)


def nd_reshape(self: Tensor, *shape: Any, reverse: bool = False, **kwargs: Any) -> Tensor:
    """An ``mx.nd`` array's ``reshape``: a view with a new shape, with MXNet 1.x's codes: 0 copies an input
    dim, -1 infers one, -2 copies the rest, -3 merges two input dims, -4 splits one into the next two
    entries; ``reverse=True`` matches the codes from the right. ``x.reshape((2, -1))``, ``x.reshape(2, -1)``
    and ``x.reshape(shape=(2, -1))`` are the same.

    Raises:
        TypeError: an unknown keyword argument, or no shape.
        ValueError: codes that do not fit the array's shape (names both).
    """
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    elif not shape:
        shape = kwargs.pop("shape", None)
        if shape is None:
            raise TypeError("reshape: give the new shape (positionally or as shape=)")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if kwargs:
        raise TypeError(f"reshape: unknown keyword arguments {sorted(kwargs)}; it takes shape= and reverse=")
    return core.reshape(self, core.nd_reshape_shape(self.shape, [int(n) for n in shape], reverse))


def _keep_nd_face(name: str) -> Callable[..., Any]:
    """An NDTensor method that calls Tensor's ``name`` and gives the result the nd face and MXNet 1.x's shape."""
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = getattr(Tensor, name)(self, *args, **kwargs)
        if out.__class__ is Tensor and out is not self:
            out = core.nd_shape(out)
        return out

    method.__name__ = name
    return method


def _into_out(value: Tensor, out: Any) -> Tensor:
    """``value``, or written into ``out`` (MXNet's ``out=``) and ``out`` returned."""
    if out is None:
        return value
    out[...] = value
    return out


def nd_argmax(self: Tensor, axis: int | None = None, keepdims: bool = False, out: Any = None) -> Tensor:
    """An ``mx.nd`` array's ``argmax``: index of the maximum along ``axis`` (int64, as the Tensor method;
    ``mx.nd.argmax`` gives float32). ``out=`` (MXNet's) receives the result; NumPy's ``np.argmax(x, axis=1)``
    calls this method."""
    return _into_out(_keep_nd_face("argmax")(self, axis, keepdims), out)


def nd_argmin(self: Tensor, axis: int | None = None, keepdims: bool = False, out: Any = None) -> Tensor:
    """An ``mx.nd`` array's ``argmin``: index of the minimum along ``axis`` (int64; ``mx.nd.argmin`` gives
    float32); ``out=`` as :func:`nd_argmax`."""
    return _into_out(_keep_nd_face("argmin")(self, axis, keepdims), out)


def _with_nd_face(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An NDTensor method calling ``fn`` whose result has the ``mx.nd`` face."""
    def method(self: Tensor, *args: Any) -> Tensor:
        return core.nd_shape(fn(self, *args))

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


def _install_tensor_methods() -> None:
    for name, fn in _OP_METHODS.items():
        setattr(Tensor, name, fn)
    for name, fn in _REFLECTED.items():
        setattr(Tensor, name, _reflected(fn))
    Tensor.__pos__ = lambda self: self
    Tensor.__hash__ = object.__hash__  # defining __eq__ would otherwise drop it
    Tensor.T = property(lambda self: core.transpose(self))
    Tensor.dot = lambda self, other: core.numpy_dot(self, other)
    Tensor.to = Tensor.as_in_context = Tensor.as_in_ctx = Tensor.to_device = to
    Tensor.take = take
    Tensor.tostype = tostype


def _install_nd_methods() -> None:
    for name in _ND_FACE_KEPT:
        setattr(NDTensor, name, _keep_nd_face(name))
    for name, fn in _ND_OPERATORS.items():
        setattr(NDTensor, name, _with_nd_face(fn))
    NDTensor.reshape = nd_reshape
    NDTensor.argmax = nd_argmax
    NDTensor.argmin = nd_argmin
    NDTensor.__hash__ = object.__hash__


_install_tensor_methods()
_install_nd_methods()

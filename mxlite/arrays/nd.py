"""``mx.nd``: MXNet 1.x's NDArray functions over mxlite's Tensor (``from mxlite import nd``).

Names and argument conventions are MXNet 1.x's: ``shape=``, ``ctx=``, ``dim=`` for ``concat``,
``axis=1`` as ``split``'s default, float32 results for ``argmax``/``argmin``, ``reshape`` with the
special codes 0/-1/-2/-3/-4. Every function returns a :class:`~mxlite.Tensor` and is differentiable
where MXNet's is (rounding, comparisons and index functions are not). NumPy arrays and Python numbers
are accepted wherever a Tensor is and converted onto the device of the other operands.
"""

from __future__ import annotations

import builtins as _b
import os as _os
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..autograd import activations as _act
from ..autograd import linalg as _linalg
from ..autograd import nn_ops as _nn
from ..autograd import ops as _ops
from ..autograd import random as _random
from ..autograd.creation import arange as _arange
from ..autograd.creation import array as _array
from ..autograd.creation import as_dtype
from ..autograd.creation import full as _full
from ..autograd.tensor import Tensor
from ..device import Device as _Device
from ..device import as_device as _as_device
from ..formats.archive import is_mxnet_file as _is_mxnet_file
from ..formats.archive import load_mxnet_arrays as _load_mxnet_arrays
from ..formats.archive import save_mxnet_arrays as _save_mxnet_arrays
from ._common import device_arg, reshape_nd, shape_arg, tensor, tensors, waitall
from ._common import entry_names as _entry_names
from ._common import load as _npz_load
from ._common import save as _npz_save

NDArray = Tensor

__all__ = ["NDArray", "array", "zeros", "ones", "full", "empty", "arange", "linspace", "eye", "zeros_like",
           "ones_like", "full_like", "empty_like", "random", "save", "load", "waitall", "reshape", "concat",
           "stack", "split", "dot", "batch_dot", "topk", "softmax", "log_softmax", "pick", "one_hot"]


# -- creation ----------------------------------------------------------------------------------
def array(source_array: Any, ctx: Any = None, dtype: Any = None, device: Any = None) -> Tensor:
    """A new array holding a copy of ``source_array`` on ``ctx`` (default: the current device).

    Python lists and numbers give float32 (MXNet's default); NumPy arrays keep their dtype.
    """
    return _array(source_array, device_arg(device, ctx, "nd.array"), dtype)


def zeros(shape: Any, ctx: Any = None, dtype: Any = None, device: Any = None, **kwargs: Any) -> Tensor:
    """An array of zeros of ``shape`` (float32 by default) on ``ctx``."""
    return _full(shape_arg(shape), 0, device_arg(device, ctx, "nd.zeros"), dtype)


def ones(shape: Any, ctx: Any = None, dtype: Any = None, device: Any = None, **kwargs: Any) -> Tensor:
    """An array of ones of ``shape`` (float32 by default) on ``ctx``."""
    return _full(shape_arg(shape), 1, device_arg(device, ctx, "nd.ones"), dtype)


def full(shape: Any, val: float, ctx: Any = None, dtype: Any = None, device: Any = None, **kwargs: Any) -> Tensor:
    """An array of ``shape`` filled with ``val`` (float32 by default) on ``ctx``."""
    return _full(shape_arg(shape), val, device_arg(device, ctx, "nd.full"), dtype)


def empty(shape: Any, ctx: Any = None, dtype: Any = None, device: Any = None) -> Tensor:
    """An array of ``shape`` (zero-filled in mxlite; MXNet leaves it uninitialised) on ``ctx``."""
    return zeros(shape, ctx, dtype, device)


def arange(start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1, infer_range: Any = None,
           ctx: Any = None, dtype: Any = None, device: Any = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)``, each repeated ``repeat`` times (float32 by default)."""
    out = _arange(start, stop, step, device_arg(device, ctx, "nd.arange"), dtype)
    return _ops.repeat(out, repeat) if repeat != 1 else out


def linspace(start: float, stop: float, num: int, endpoint: bool = True, ctx: Any = None, dtype: Any = None,
             device: Any = None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` (inclusive when ``endpoint``), float32 by default."""
    dev = device_arg(device, ctx, "linspace")
    return _array(np.linspace(start, stop, int(num), endpoint=endpoint), dev, as_dtype(dtype))


def eye(N: int, M: int = 0, k: int = 0, ctx: Any = None, dtype: Any = None, device: Any = None) -> Tensor:  # noqa: N803
    """A 2-D array with ones on diagonal ``k`` (``M=0``: square), float32 by default."""
    dev = device_arg(device, ctx, "eye")
    return _array(np.eye(int(N), int(M) or None, int(k)), dev, as_dtype(dtype))


def zeros_like(data: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Zeros with ``data``'s shape, dtype and device."""
    return full_like(data, 0, dtype)


def ones_like(data: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Ones with ``data``'s shape, dtype and device."""
    return full_like(data, 1, dtype)


def empty_like(data: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """An array with ``data``'s shape, dtype and device (zero-filled in mxlite)."""
    return full_like(data, 0, dtype)


def full_like(data: Any, fill_value: float, dtype: Any = None, **kwargs: Any) -> Tensor:
    """``fill_value`` with ``data``'s shape, dtype (unless ``dtype``) and device."""
    data = tensor(data)
    return _full(data.shape, fill_value, data.device, dtype if dtype is not None else data.dtype)


def _draw_args(shape: Any, size: Any, ctx: Any, device: Any, where: str) -> tuple[tuple[int, ...], Any]:
    if shape is not None and size is not None:
        raise ValueError(f"{where}: give shape or size, not both (got shape={shape!r}, size={size!r})")
    return shape_arg(shape if shape is not None else size), device_arg(device, ctx, where)


def _uniform(low: float = 0.0, high: float = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
             out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of U[low, high) of ``shape`` (float32 by default) on ``ctx``."""
    shp, dev = _draw_args(shape, size, ctx, device, "random.uniform")
    return _into(out, _random.uniform(low, high, shp, dtype, dev))


def _normal(loc: float = 0.0, scale: float = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
            out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of N(loc, scale²) of ``shape`` (float32 by default) on ``ctx``."""
    shp, dev = _draw_args(shape, size, ctx, device, "random.normal")
    return _into(out, _random.normal(loc, scale, shp, dtype, dev))


def _randint(low: int, high: int, shape: Any = None, dtype: Any = None, ctx: Any = None, out: Tensor | None = None,
             size: Any = None, device: Any = None) -> Tensor:
    """Integers uniform in ``[low, high)`` (int32 by default) on ``ctx``."""
    shp, dev = _draw_args(shape, size, ctx, device, "random.randint")
    return _into(out, _random.randint(low, high, shp, dtype, dev))


def _randn(*shape: int, dtype: Any = None, ctx: Any = None, device: Any = None, **kwargs: Any) -> Tensor:
    """Standard normal samples of ``shape`` given as separate ints."""
    return _random.normal(0.0, 1.0, tuple(shape), dtype, device_arg(device, ctx, "random.randn"))


def _into(out: Tensor | None, value: Tensor) -> Tensor:
    if out is None:
        return value
    out[...] = value
    return out


random = SimpleNamespace(uniform=_uniform, normal=_normal, randint=_randint, randn=_randn, seed=_random.seed,
                         shuffle=_random.shuffle)

# mx.nd.linalg: MXNet 1.x's linear-algebra operators (gemm, potrf, trsm, ...), differentiable
linalg = SimpleNamespace(**{name: getattr(_linalg, name) for name in _linalg.ND_LINALG})


# -- elementwise -------------------------------------------------------------------------------
def _unary(op: Any) -> Any:
    def fn(data: Any, *args: Any, **kwargs: Any) -> Tensor:
        return op(tensor(data), *args, **kwargs)

    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


def _binary(op: Any) -> Any:
    def fn(lhs: Any, rhs: Any) -> Tensor:
        if not isinstance(lhs, Tensor) and not isinstance(rhs, Tensor):
            lhs = tensor(lhs)
        return op(lhs, rhs)

    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


for _name in ("exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu", "abs", "negative", "sin", "cos", "tan",
              "arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "log1p", "expm1",
              "log2", "log10", "reciprocal", "rsqrt", "cbrt", "erf", "sign", "floor", "ceil", "trunc", "fix",
              "rint", "round", "logical_not", "isnan", "isinf", "isfinite"):
    globals()[_name] = _unary(getattr(_ops, _name))
for _name in ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "mod", "equal", "not_equal",
              "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
              "hypot", "arctan2"):
    globals()[_name] = _binary(getattr(_ops, _name))
for _old, _new in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("div", "divide"),
                   ("power", "power"), ("maximum", "maximum"), ("minimum", "minimum"), ("mod", "mod"),
                   ("equal", "equal"), ("not_equal", "not_equal"), ("greater", "greater"),
                   ("greater_equal", "greater_equal"), ("lesser", "less"), ("lesser_equal", "less_equal"),
                   ("logical_and", "logical_and"), ("logical_or", "logical_or"), ("logical_xor", "logical_xor"),
                   ("hypot", "hypot")):
    globals()["broadcast_" + _old] = globals()[_new]
    globals()["elemwise_" + _old] = globals()[_new]
true_divide = divide  # noqa: F821 - defined in the loop above
relu = globals()["relu"]
sigmoid = globals()["sigmoid"]


def clip(data: Any, a_min: float | None, a_max: float | None) -> Tensor:
    """Clamp to ``[a_min, a_max]``; the gradient is zero where clamped."""
    return _ops.clip(tensor(data), a_min, a_max)


def where(condition: Any, x: Any, y: Any) -> Tensor:
    """Elementwise ``x if condition else y`` (no gradient to ``condition``)."""
    condition, x, y = tensors(condition, x, y)
    return _ops.where(condition, x, y)


def cast(data: Any, dtype: Any) -> Tensor:
    """``data`` converted to ``dtype`` (the gradient is cast back)."""
    return _ops.astype(tensor(data), dtype)


def identity(data: Any) -> Tensor:
    """``data`` itself (differentiable copy)."""
    return _ops.multiply(tensor(data), 1)


copy = identity


def stop_gradient(data: Any) -> Tensor:
    """``data`` cut from the graph: no gradient flows through (MXNet's ``BlockGrad``/``stop_gradient``)."""
    return tensor(data).detach()


BlockGrad = stop_gradient


# -- reductions --------------------------------------------------------------------------------
def _axes(axis: Any, ndim: int, exclude: bool) -> Any:
    if axis is None or axis == ():
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if exclude:
        chosen = {a % ndim for a in axes}
        return tuple(i for i in range(ndim) if i not in chosen)
    return axes


def _reduction(op: Any) -> Any:
    def fn(data: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False, **kwargs: Any) -> Tensor:
        data = tensor(data)
        return op(data, axis=_axes(axis, data.ndim, exclude), keepdims=keepdims)

    fn.__name__ = op.__name__
    fn.__doc__ = (op.__doc__ or "") + " ``exclude=True`` reduces every axis except those in ``axis``."
    return fn


sum = _reduction(_ops.sum)  # noqa: A001 - MXNet's name
mean = _reduction(_ops.mean)
max = _reduction(_ops.max)  # noqa: A001
min = _reduction(_ops.min)  # noqa: A001
prod = _reduction(_ops.prod)
nansum = sum
sum_axis = sum


def norm(data: Any, ord: int = 2, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Tensor:  # noqa: A002
    """L2 (``ord=2``) or L1 (``ord=1``) norm over ``axis`` (all axes when None)."""
    return _ops.norm(tensor(data), ord=ord, axis=axis, keepdims=keepdims)


def argmax(data: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the maximum along ``axis``, as float32 (MXNet 1.x's dtype)."""
    return _ops.argmax(tensor(data), axis, keepdims).astype(np.float32)


def argmin(data: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the minimum along ``axis``, as float32 (MXNet 1.x's dtype)."""
    return _ops.argmin(tensor(data), axis, keepdims).astype(np.float32)


def argsort(data: Any, axis: int = -1, is_ascend: bool = True, dtype: Any = np.float32) -> Tensor:
    """Indices that sort ``data`` along ``axis`` (float32 by default, as MXNet)."""
    return _ops.argsort(tensor(data), axis, is_ascend).astype(dtype)


def sort(data: Any, axis: int = -1, is_ascend: bool = True) -> Tensor:
    """``data`` sorted along ``axis`` (differentiable)."""
    return _ops.sort(tensor(data), axis, is_ascend)


def topk(data: Any, axis: int = -1, k: int = 1, ret_typ: str = "indices", is_ascend: bool = False,
         dtype: Any = np.float32) -> Any:
    """The ``k`` largest (smallest when ``is_ascend``) entries along ``axis``.

    ``ret_typ``: ``'indices'`` (as ``dtype``, float32 by default), ``'value'`` (differentiable),
    ``'both'`` (``[values, indices]``) or ``'mask'`` (1 where selected, in ``data``'s dtype).

    Raises:
        ValueError: unknown ``ret_typ`` or ``k`` out of range.
    """
    data = tensor(data)
    n = data.shape[axis]
    if not 1 <= k <= n:
        raise ValueError(f"topk: k must lie in [1, {n}] for axis {axis} of shape {data.shape}, got {k}")
    idx = _ops.slice_axis(_ops.argsort(data, axis, is_ascend), axis, 0, k)
    if ret_typ == "indices":
        return idx.astype(dtype)
    if ret_typ == "value":
        return _ops.take_along_axis(data, idx, axis)
    if ret_typ == "both":
        return [_ops.take_along_axis(data, idx, axis), idx.astype(dtype)]
    if ret_typ == "mask":
        xp = data.device.xp
        with data.device.use():
            mask = xp.zeros(data.shape, dtype=data.dtype)
            xp.put_along_axis(mask, idx.array, 1, axis=axis)
        return Tensor(mask, data.device)
    raise ValueError(f"topk: ret_typ must be 'indices', 'value', 'both' or 'mask', got {ret_typ!r}")


# -- shape -------------------------------------------------------------------------------------
def reshape(data: Any, shape: Any = None, reverse: bool = False, **kwargs: Any) -> Tensor:
    """Reshape with MXNet 1.x's codes: 0 copies an input dim, -1 infers one, -2 copies the rest,
    -3 merges two input dims, -4 splits one into the next two entries; ``reverse`` matches from the right.

    Raises:
        ValueError: codes that do not fit the input's shape.
    """
    data = tensor(data)
    return _ops.reshape(data, reshape_nd(data.shape, shape_arg(shape), reverse))


def reshape_like(lhs: Any, rhs: Any) -> Tensor:
    """``lhs`` reshaped to ``rhs``'s shape."""
    return _ops.reshape(tensor(lhs), tensor(rhs).shape)


def flatten(data: Any) -> Tensor:
    """Collapse every axis but the first: ``(N, ...) -> (N, prod(...))``."""
    return _ops.flatten(tensor(data))


Flatten = flatten


def transpose(data: Any, axes: Any = ()) -> Tensor:
    """Permute axes (reverse them when ``axes`` is empty)."""
    return _ops.transpose(tensor(data), *((tuple(axes),) if axes else ()))


def swapaxes(data: Any, dim1: int = 0, dim2: int = 0) -> Tensor:
    """Exchange axes ``dim1`` and ``dim2``."""
    return _ops.swapaxes(tensor(data), dim1, dim2)


SwapAxis = swapaxes


def expand_dims(data: Any, axis: int) -> Tensor:
    """Insert an axis of length 1 at ``axis``."""
    return _ops.expand_dims(tensor(data), axis)


def squeeze(data: Any, axis: Any = None) -> Tensor:
    """Remove axes of length 1 (those in ``axis``, else all)."""
    return _ops.squeeze(tensor(data), axis)


def broadcast_to(data: Any, shape: Any) -> Tensor:
    """Broadcast to ``shape``; a 0 entry keeps the input's dim (MXNet's rule)."""
    data = tensor(data)
    shape = shape_arg(shape)
    lead = len(shape) - data.ndim
    full_shape = tuple(data.shape[i - lead] if n == 0 and i >= lead else n for i, n in enumerate(shape))
    return _ops.broadcast_to(data, full_shape)


def broadcast_like(lhs: Any, rhs: Any) -> Tensor:
    """``lhs`` broadcast to ``rhs``'s shape."""
    return _ops.broadcast_to(tensor(lhs), tensor(rhs).shape)


def broadcast_axis(data: Any, axis: Any = (), size: Any = ()) -> Tensor:
    """Broadcast the length-1 axes ``axis`` to ``size``."""
    data = tensor(data)
    shape = list(data.shape)
    for a, n in zip(shape_arg(axis), shape_arg(size)):
        shape[a] = n
    return _ops.broadcast_to(data, tuple(shape))


broadcast_axes = broadcast_axis


def tile(data: Any, reps: Any) -> Tensor:
    """Repeat the whole array ``reps`` times along each axis."""
    return _ops.tile(tensor(data), reps)


def repeat(data: Any, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened array when None)."""
    return _ops.repeat(tensor(data), repeats, axis)


def flip(data: Any, axis: Any) -> Tensor:
    """Reverse ``data`` along ``axis``."""
    return _ops.flip(tensor(data), axis)


reverse = flip


def concat(*data: Any, dim: int = 1, **kwargs: Any) -> Tensor:
    """Join arrays along axis ``dim`` (1 by default, MXNet 1.x's). A single list argument is accepted too."""
    items = list(data[0]) if len(data) == 1 and isinstance(data[0], (list, tuple)) else list(data)
    return _ops.concat(tensors(*items), axis=kwargs.pop("axis", dim))


Concat = concat


def stack(*data: Any, axis: int = 0, **kwargs: Any) -> Tensor:
    """Join same-shaped arrays along a new axis ``axis``. A single list argument is accepted too."""
    items = list(data[0]) if len(data) == 1 and isinstance(data[0], (list, tuple)) else list(data)
    return _ops.stack(tensors(*items), axis=axis)


def split(data: Any, num_outputs: int, axis: int = 1, squeeze_axis: bool = False) -> Any:
    """Split into ``num_outputs`` equal parts along ``axis`` (1 by default); one part is returned bare.

    Raises:
        ValueError: the axis length is not divisible by ``num_outputs``.
    """
    parts = _ops.split(tensor(data), num_outputs, axis)
    if squeeze_axis:
        parts = [_ops.squeeze(p, axis) for p in parts]
    return parts[0] if len(parts) == 1 else parts


SliceChannel = split


def slice_axis(data: Any, axis: int, begin: int, end: int | None) -> Tensor:
    """``data[..., begin:end, ...]`` on ``axis``."""
    return _ops.slice_axis(tensor(data), axis, begin, end)


def slice(data: Any, begin: Sequence[int | None], end: Sequence[int | None],  # noqa: A001 - MXNet's name
          step: Sequence[int | None] | None = None) -> Tensor:
    """``data[b0:e0:s0, ...]`` with ``None`` for defaults."""
    return _ops.slice(tensor(data), begin, end, step)


crop = slice


def slice_like(data: Any, shape_like: Any, axes: Any = ()) -> Tensor:
    """``data`` cut to ``shape_like``'s shape on ``axes`` (all when empty), from the start."""
    data, like = tensor(data), tensor(shape_like)
    axes = shape_arg(axes) or tuple(range(data.ndim))
    key = tuple(_b.slice(0, like.shape[i]) if i in {a % data.ndim for a in axes} else _b.slice(None)
                for i in range(data.ndim))
    return _ops.getitem(data, key)


def take(a: Any, indices: Any, axis: int = 0, mode: str = "clip") -> Tensor:
    """Entries of ``a`` at ``indices`` (float ids accepted) along ``axis``; out-of-range ids are clipped."""
    a = tensor(a)
    idx = indices.array if isinstance(indices, Tensor) else indices
    return _nn.take(a, idx, axis=axis, mode=mode)


def pick(data: Any, index: Any, axis: int = -1, keepdims: bool = False, mode: str = "clip") -> Tensor:
    """One entry per position along ``axis``: ``out[i] = data[i, index[i]]`` for ``axis=1``."""
    data = tensor(data)
    idx = index.array if isinstance(index, Tensor) else index
    return _nn.pick(data, idx, axis=axis, keepdims=keepdims)


def one_hot(indices: Any, depth: int, on_value: float = 1.0, off_value: float = 0.0, dtype: Any = np.float32) -> Tensor:
    """``(..., depth)`` array with ``on_value`` at each index (no gradient)."""
    return _ops.one_hot(tensor(indices), depth, on_value, off_value, np.dtype(dtype))


# -- files -------------------------------------------------------------------------------------
def save(fname: str | _os.PathLike, data: Tensor | Sequence[Tensor] | _Mapping[str, Tensor], *,
         format: str = "npz") -> None:
    """Save a Tensor, a list of Tensors or a dict name -> Tensor to ``fname``; atomic, no pickle.

    ``format="npz"`` (default) writes mxlite's ``.npz`` archive; ``format="mxnet"`` writes MXNet's
    binary NDArray format as MXNet 1.x's ``nd.save`` does (V2 arrays, on cpu(0)), which MXNet itself
    loads (``mx.nd.load``, ``load_parameters`` of a dict). The file name is used as given. Load
    either with :func:`load`.

    Raises:
        TypeError: ``data`` is not a Tensor, a list of them or a dict of them (names the entry), or
            (``"mxnet"``) a dtype MXNet has no type flag for.
        ValueError: an unknown ``format``, two dict keys that give one name (``1`` and ``'1'``), or
            (``"mxnet"``) a 0-d array, which MXNet 1.x's layout cannot hold (``mx.npx.save`` can).
    """
    _save(fname, data, format, np_shape=False, where="save")


def _save(fname: str | _os.PathLike, data: Any, format: str, np_shape: bool, where: str) -> None:
    """``nd.save``/``npx.save``: ``np_shape`` picks MXNet's NumPy-shape (V3) arrays for ``format='mxnet'``."""
    if format == "npz":
        _npz_save(fname, data)
        return
    if format != "mxnet":
        raise ValueError(f"{where}: format must be 'npz' or 'mxnet', got {format!r}")
    if isinstance(data, Tensor):
        data = [data]
    if isinstance(data, _Mapping):
        names: list[str] | None = _entry_names(data, where)
        values = list(data.values())
    elif isinstance(data, (list, tuple)):
        names, values = None, list(data)
    else:
        raise TypeError(f"{where}: data must be a Tensor, a list of Tensors or a dict of them, "
                        f"got {type(data).__name__}")
    arrays = []
    for i, v in enumerate(values):
        if isinstance(v, Tensor):
            arrays.append(v.asnumpy())
        elif isinstance(v, np.ndarray):
            arrays.append(v)
        else:
            label = repr(names[i]) if names is not None else str(i)
            raise TypeError(f"{where}: entry {label} is a {type(v).__name__}, not a Tensor")
    _save_mxnet_arrays(fname, arrays, names, np_shape=np_shape)


def load(fname: str | _os.PathLike, device: Any = None) -> list[Tensor] | dict[str, Tensor]:
    """Load what :func:`save` (either format) or MXNet's ``nd.save``/``npx.save`` wrote: a list or a dict of
    Tensors, on ``device`` (default ``cpu(0)``).

    The format is told by the file's first bytes. An ``.npz`` written by other means loads as a dict
    keyed by its array names. An MXNet file gives a dict when it holds names, else a list; its dense
    arrays keep their dtype (bfloat16 becomes float32, exactly); the device it was saved from is ignored.

    Raises:
        FileNotFoundError: no such file.
        ValueError: neither an mxlite/NumPy ``.npz`` nor a readable MXNet file (truncated, corrupt,
            sparse storage, unknown dtype, ...): the message names the file and what was found.
    """
    if not _is_mxnet_file(fname):
        return _npz_load(fname, device)
    names, arrays = _load_mxnet_arrays(fname)
    dev = _as_device(device) if device is not None else _Device("cpu", 0)
    values = [_array(a, dev) for a in arrays]
    return values if names is None else dict(zip(names, values))


# -- linear algebra ----------------------------------------------------------------------------
def dot(lhs: Any, rhs: Any, transpose_a: bool = False, transpose_b: bool = False, **kwargs: Any) -> Tensor:
    """MXNet 1.x's ``dot``: contract ``lhs``'s last axis with ``rhs``'s first (after optional transposes)."""
    lhs, rhs = tensors(lhs, rhs)
    return _ops.tensordot_last_first(lhs, rhs, transpose_a, transpose_b)


def batch_dot(lhs: Any, rhs: Any, transpose_a: bool = False, transpose_b: bool = False, **kwargs: Any) -> Tensor:
    """Batched matrix product of 3-D arrays ``(B, n, k) x (B, k, m) -> (B, n, m)``, optionally transposed."""
    lhs, rhs = tensors(lhs, rhs)
    return _ops.batch_dot(lhs, rhs, transpose_a, transpose_b)


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product of the last two axes, batch axes broadcast."""
    a, b = tensors(a, b)
    return _ops.matmul(a, b)


# -- neural-network functions ------------------------------------------------------------------
def softmax(data: Any, axis: int = -1, temperature: float | None = None, length: Any = None, **kwargs: Any) -> Tensor:
    """Softmax along ``axis``, of ``data / temperature`` when a temperature is given."""
    data = tensor(data)
    if temperature is not None and temperature != 1:
        data = _ops.divide(data, temperature)
    return _nn.softmax(data, axis=axis)


def log_softmax(data: Any, axis: int = -1, temperature: float | None = None, **kwargs: Any) -> Tensor:
    """Log of the softmax along ``axis`` (computed stably)."""
    data = tensor(data)
    if temperature is not None and temperature != 1:
        data = _ops.divide(data, temperature)
    return _nn.log_softmax(data, axis=axis)


_ACT = {"relu": _ops.relu, "sigmoid": _ops.sigmoid, "tanh": _ops.tanh,
        "softrelu": lambda x: _ops.add(_ops.log1p(_ops.exp(_ops.negative(_ops.abs(x)))), _ops.relu(x)),
        "softsign": lambda x: _ops.divide(x, _ops.add(_ops.abs(x), 1.0)),
        "log_sigmoid": lambda x: _ops.negative(_ops.add(_ops.log1p(_ops.exp(_ops.negative(_ops.abs(x)))),
                                                        _ops.relu(_ops.negative(x)))),
        "mish": lambda x: _ops.multiply(x, _ops.tanh(_ACT["softrelu"](x)))}


def Activation(data: Any, act_type: str = "relu", **kwargs: Any) -> Tensor:  # noqa: N802 - MXNet's name
    """An activation by name: 'relu', 'sigmoid', 'tanh', 'softrelu', 'softsign', 'log_sigmoid', 'mish'.

    Raises:
        ValueError: unknown ``act_type``.
    """
    if act_type not in _ACT:
        raise ValueError(f"Activation: act_type must be one of {sorted(_ACT)}, got {act_type!r}")
    return _ACT[act_type](tensor(data))


def LeakyReLU(data: Any, gamma: Any = None, act_type: str = "leaky", slope: float = 0.25,  # noqa: N802
              lower_bound: float = 0.125, upper_bound: float = 0.334, **kwargs: Any) -> Tensor:
    """MXNet's ``LeakyReLU`` family: 'leaky' (``slope``), 'prelu' (``gamma``), 'elu' (``slope``), 'selu', 'gelu'.

    Raises:
        ValueError: unknown ``act_type``.
    """
    x = tensor(data)
    if act_type == "leaky":
        return _act.leaky_relu(x, slope)
    if act_type == "prelu":
        return _act.prelu(x, tensor(gamma, x))
    if act_type == "elu":
        return _act.elu(x, slope)
    if act_type == "selu":
        return _act.selu(x)
    if act_type == "gelu":
        return _act.gelu(x)
    raise ValueError(f"LeakyReLU: act_type must be 'leaky', 'prelu', 'elu', 'selu' or 'gelu', got {act_type!r}")


def FullyConnected(data: Any, weight: Any, bias: Any = None, num_hidden: int = 0, no_bias: bool = False,  # noqa: N802
                   flatten: bool = True, **kwargs: Any) -> Tensor:
    """``data · weightᵀ + bias`` (MXNet's ``FullyConnected``)."""
    data, weight = tensors(data, weight)
    b = None if no_bias or bias is None else tensor(bias, data)
    return _nn.fully_connected(data, weight, b, flatten=flatten)


def Dropout(data: Any, p: float = 0.5, axes: Any = (), mode: str = "training", **kwargs: Any) -> Tensor:  # noqa: N802
    """Inverted dropout with probability ``p`` while training (``mode='always'``: also at prediction)."""
    from .. import autograd  # noqa: PLC0415

    training = True if mode == "always" else autograd.is_training()
    if p >= 1:
        return _ops.multiply(tensor(data), 0.0) if training else tensor(data)
    return _nn.dropout(tensor(data), p, tuple(axes), training=training)


def relu6(data: Any) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return _ops.clip(tensor(data), 0, 6)


def smooth_l1(data: Any, scalar: float = 1.0) -> Tensor:
    """MXNet's ``smooth_l1``: ``0.5 (sigma x)^2`` where ``|x| < 1/sigma^2``, else ``|x| - 0.5/sigma^2``."""
    x = tensor(data)
    s2 = scalar * scalar
    small = Tensor(x.device.xp.abs(x.array) < 1.0 / s2, x.device)
    return _ops.where(small, _ops.multiply(_ops.square(x), 0.5 * s2), _ops.subtract(_ops.abs(x), 0.5 / s2))


def reset_arrays(*data: Any, num_arrays: int | None = None) -> None:
    """Set every array of ``data`` to zero in place (MXNet's ``reset_arrays``; it backs ``zero_grad``).

    ``num_arrays`` is MXNet's count of the arrays given; when passed it must equal ``len(data)``.
    The writes are not recorded by autograd.

    Raises:
        TypeError: an argument that is not a Tensor (a row-sparse array, a NumPy array).
        ValueError: ``num_arrays`` differs from the number of arrays.
    """
    if num_arrays is not None and num_arrays != len(data):
        raise ValueError(f"reset_arrays: num_arrays={num_arrays} but {len(data)} arrays were given")
    for i, a in enumerate(data):
        if not isinstance(a, Tensor):
            raise TypeError(f"reset_arrays: argument {i} is a {type(a).__name__}, expected a Tensor (NDArray)")
    for a in data:
        a[...] = 0


__all__ += [n for n in list(globals()) if not n.startswith("_") and n not in __all__ and n not in (
    "annotations", "Any", "Sequence", "SimpleNamespace", "np", "Tensor", "device_arg", "reshape_nd", "shape_arg",
    "tensor", "tensors")]

"""``mx.np``: MXNet 2.x's NumPy-compatible array functions over mxlite's Tensor.

NumPy's names and arguments (``axis=``, ``size=``, ``device=``; ``ctx=`` accepted too), float32 as the
default float dtype (MXNet's), every function differentiable where NumPy's math is. ``mx.np.ndarray`` is
:class:`~mxlite.Tensor`. NumPy arrays and Python numbers are accepted wherever a Tensor is.
"""

from __future__ import annotations

import builtins as _b
import contextlib
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as _onp

from .. import ops as _ops
from ..autograd.tensor import Tensor
from ..ops import linalg as _linalg
from ..ops import random as _random
from ..ops.creation import arange as _arange
from ..ops.creation import array as _array
from ..ops.creation import full as _full
from . import _nd_ops
from ._common import device_arg, shape_arg, tensor, tensors

ndarray = Tensor
float16, float32, float64 = _onp.float16, _onp.float32, _onp.float64
int8, int32, int64, uint8, bool_ = _onp.int8, _onp.int32, _onp.int64, _onp.uint8, _onp.bool_
pi, e, inf, nan, newaxis = _onp.pi, _onp.e, _onp.inf, _onp.nan, None
dtype = _onp.dtype


def array(object: Any, dtype: Any = None, device: Any = None, ctx: Any = None, **kwargs: Any) -> Tensor:  # noqa: A002
    """A new array holding a copy of ``object``.

    The dtype is ``dtype`` if given; else an mxlite array's or a NumPy scalar's own; else float32: NumPy
    arrays of any dtype, lists and numbers give float32, as MXNet 2.x's ``np.array`` does (unless
    ``npx.set_np(dtype=True)``, which mxlite does not model).
    """
    if dtype is None:
        keeps = hasattr(object, "dtype") and not isinstance(object, _onp.ndarray)
        dtype = object.dtype if keeps else _onp.float32
    return _array(object, device_arg(device, ctx, "np.array"), dtype)


asarray = array


def zeros(shape: Any, dtype: Any = None, order: str = "C", device: Any = None, ctx: Any = None) -> Tensor:
    """Zeros of ``shape`` (float32 by default)."""
    return _full(shape_arg(shape), 0, device_arg(device, ctx, "np.zeros"), dtype)


def ones(shape: Any, dtype: Any = None, order: str = "C", device: Any = None, ctx: Any = None) -> Tensor:
    """Ones of ``shape`` (float32 by default)."""
    return _full(shape_arg(shape), 1, device_arg(device, ctx, "np.ones"), dtype)


def full(shape: Any, fill_value: float, dtype: Any = None, order: str = "C", device: Any = None,
         ctx: Any = None) -> Tensor:
    """``fill_value`` of ``shape`` (float32 by default)."""
    return _full(shape_arg(shape), fill_value, device_arg(device, ctx, "np.full"), dtype)


def empty(shape: Any, dtype: Any = None, order: str = "C", device: Any = None, ctx: Any = None) -> Tensor:
    """An array of ``shape`` (zero-filled in mxlite)."""
    return zeros(shape, dtype, order, device, ctx)


def arange(start: float, stop: float | None = None, step: float = 1, dtype: Any = None, device: Any = None,
           ctx: Any = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)`` (float32 by default, as MXNet)."""
    return _arange(start, stop, step, device_arg(device, ctx, "np.arange"), dtype)


def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0, device: Any = None, ctx: Any = None) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (float32 by default)."""
    out = _nd_ops.linspace(start, stop, num, endpoint, dtype=dtype, device=device_arg(device, ctx, "np.linspace"))
    if retstep:
        return out, (stop - start) / max(num - 1 if endpoint else num, 1)
    return out


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None, device: Any = None,  # noqa: N803
        ctx: Any = None) -> Tensor:
    """A 2-D array with ones on diagonal ``k``."""
    return _nd_ops.eye(N, M or 0, k, dtype=dtype, device=device_arg(device, ctx, "np.eye"))


def identity(n: int, dtype: Any = None, device: Any = None, ctx: Any = None) -> Tensor:
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype, device=device, ctx=ctx)


def zeros_like(a: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Zeros with ``a``'s shape, dtype and device."""
    return _nd_ops.full_like(a, 0, dtype)


def ones_like(a: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Ones with ``a``'s shape, dtype and device."""
    return _nd_ops.full_like(a, 1, dtype)


def full_like(a: Any, fill_value: float, dtype: Any = None, **kwargs: Any) -> Tensor:
    """``fill_value`` with ``a``'s shape, dtype and device."""
    return _nd_ops.full_like(a, fill_value, dtype)


empty_like = zeros_like


def _size(size: Any) -> tuple[int, ...]:
    return shape_arg(size)


def _uniform(low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = None, device: Any = None,
             ctx: Any = None, out: Tensor | None = None) -> Tensor:
    """Samples of U[low, high) of ``size`` (float32 by default)."""
    return _nd_ops.into(out, _random.uniform(low, high, _size(size), dtype, device_arg(device, ctx, "np.random")))


def _normal(loc: float = 0.0, scale: float = 1.0, size: Any = None, dtype: Any = None, device: Any = None,
            ctx: Any = None, out: Tensor | None = None) -> Tensor:
    """Samples of N(loc, scale²) of ``size`` (float32 by default)."""
    return _nd_ops.into(out, _random.normal(loc, scale, _size(size), dtype, device_arg(device, ctx, "np.random")))


def _randint(low: int, high: int | None = None, size: Any = None, dtype: Any = None, device: Any = None,
             ctx: Any = None, out: Tensor | None = None) -> Tensor:
    """Integers uniform in ``[low, high)`` (``[0, low)`` when ``high`` is None), int64 by default."""
    if high is None:
        low, high = 0, low
    return _nd_ops.into(out, _random.randint(low, high, _size(size), dtype or _onp.int64,
                                          device_arg(device, ctx, "np.random")))


def _rand(*size: int, **kwargs: Any) -> Tensor:
    """U[0, 1) samples of the shape given as separate ints."""
    return _uniform(0.0, 1.0, size, **kwargs)


def _randn(*size: int, **kwargs: Any) -> Tensor:
    """N(0, 1) samples of the shape given as separate ints."""
    return _normal(0.0, 1.0, size, **kwargs)


def _draw(dist: str, params: tuple[Any, ...], size: Any, dtype: Any, device: Any, ctx: Any) -> Tensor:
    """Draws of ``dist`` with NumPy's rule for array parameters: they broadcast together and with ``size``
    (the result's shape: ``size`` when given, else the parameters' broadcast shape)."""
    if not _b.any(isinstance(p, (Tensor, _onp.ndarray, list)) for p in params):
        return _random.sample(dist, params, _size(size), dtype, device_arg(device, ctx, f"np.random.{dist}"))
    arrays = tensors(*params)
    shape = _size(size) if size is not None else _onp.broadcast_shapes(*(a.shape for a in arrays))
    arrays = [a if a.shape == shape else _ops.broadcast_to(a, shape) for a in arrays]
    return _random.sample(dist, arrays, (), dtype)


def _gamma(shape: Any, scale: Any = 1.0, size: Any = None, dtype: Any = None, device: Any = None, ctx: Any = None,
           out: Tensor | None = None) -> Tensor:
    """Samples of the gamma distribution of shape ``shape`` and scale ``scale`` (mean ``shape * scale``),
    float32 by default; array parameters broadcast as NumPy's."""
    return _nd_ops.into(out, _draw("gamma", (shape, scale), size, dtype, device, ctx))


def _exponential(scale: Any = 1.0, size: Any = None, dtype: Any = None, device: Any = None, ctx: Any = None,
                 out: Tensor | None = None) -> Tensor:
    """Samples of the exponential distribution of mean ``scale``, float32 by default (NumPy's parameter)."""
    rate = (_ops.reciprocal(tensor(scale).astype(_onp.float64)) if isinstance(scale, (Tensor, _onp.ndarray, list))
            else 1.0 / scale)
    return _nd_ops.into(out, _draw("exponential", (rate,), size, dtype, device, ctx))


def _choice(a: Any, size: Any = None, replace: bool = True, p: Any = None, device: Any = None, ctx: Any = None,
            out: Tensor | None = None) -> Tensor:
    """``size`` draws from ``range(a)`` (an int: int64 indices) or from the entries of a 1-D array ``a``, with
    or without replacement, uniform or with probabilities ``p`` (NumPy's ``random.choice``; one draw, as a
    0-d array, when ``size`` is None).

    Raises:
        ValueError: as NumPy's: ``a`` not positive or not 1-D, ``p`` of another length or not summing to 1,
            more draws than entries without replacement.
    """
    if not isinstance(a, (int, _onp.integer)):
        a = tensor(a)
    return _nd_ops.into(out, _random.choice(a, size, replace, p, device_arg(device, ctx, "np.random.choice")))


def _multinomial(n: int, pvals: Any, size: Any = None, **kwargs: Any) -> Tensor:
    """Counts of ``n`` trials over the outcomes of probabilities ``pvals``, of shape ``size + (len(pvals),)``
    (int64; NumPy's ``random.multinomial``).

    Raises:
        ValueError: a negative ``n`` or ``pvals`` that is not a distribution.
    """
    return _random.multinomial_counts(n, pvals, size, device_arg(kwargs.get("device"), kwargs.get("ctx"),
                                                                 "np.random.multinomial"))


random = SimpleNamespace(uniform=_uniform, normal=_normal, randint=_randint, rand=_rand, randn=_randn,
                         seed=_random.seed, shuffle=_random.shuffle, choice=_choice, multinomial=_multinomial,
                         gamma=_gamma, exponential=_exponential)

# -- elementwise -------------------------------------------------------------------------------
# mx.nd's elementwise operators; comparisons and logic give bool, as NumPy (mx.nd's give 1 and 0)
exp = _nd_ops.exp
log = _nd_ops.log
sqrt = _nd_ops.sqrt
square = _nd_ops.square
tanh = _nd_ops.tanh
abs = _nd_ops.abs
negative = _nd_ops.negative
sin = _nd_ops.sin
cos = _nd_ops.cos
tan = _nd_ops.tan
arcsin = _nd_ops.arcsin
arccos = _nd_ops.arccos
arctan = _nd_ops.arctan
sinh = _nd_ops.sinh
cosh = _nd_ops.cosh
arcsinh = _nd_ops.arcsinh
arccosh = _nd_ops.arccosh
arctanh = _nd_ops.arctanh
log1p = _nd_ops.log1p
expm1 = _nd_ops.expm1
log2 = _nd_ops.log2
log10 = _nd_ops.log10
reciprocal = _nd_ops.reciprocal
cbrt = _nd_ops.cbrt
sign = _nd_ops.sign
floor = _nd_ops.floor
ceil = _nd_ops.ceil
trunc = _nd_ops.trunc
fix = _nd_ops.fix
rint = _nd_ops.rint
logical_not = _nd_ops.elementwise_unary(_ops.logical_not)
isnan = _nd_ops.isnan
isinf = _nd_ops.isinf
isfinite = _nd_ops.isfinite
add = _nd_ops.add
subtract = _nd_ops.subtract
multiply = _nd_ops.multiply
divide = _nd_ops.divide
power = _nd_ops.power
maximum = _nd_ops.maximum
minimum = _nd_ops.minimum
mod = _nd_ops.mod
equal = _nd_ops.elementwise_binary(_ops.equal)
not_equal = _nd_ops.elementwise_binary(_ops.not_equal)
greater = _nd_ops.elementwise_binary(_ops.greater)
greater_equal = _nd_ops.elementwise_binary(_ops.greater_equal)
less = _nd_ops.elementwise_binary(_ops.less)
less_equal = _nd_ops.elementwise_binary(_ops.less_equal)
logical_and = _nd_ops.elementwise_binary(_ops.logical_and)
logical_or = _nd_ops.elementwise_binary(_ops.logical_or)
logical_xor = _nd_ops.elementwise_binary(_ops.logical_xor)
hypot = _nd_ops.hypot
arctan2 = _nd_ops.arctan2
true_divide = _nd_ops.true_divide
clip = _nd_ops.clip


def where(condition: Any, x: Any, y: Any) -> Tensor:
    """Elementwise ``x if condition else y``, the three broadcast as NumPy does (no gradient to ``condition``)."""
    condition, x, y = tensors(condition, x, y)
    return _ops.where(condition, x, y)


absolute = abs  # noqa: F821 - bound in the loop above
remainder = mod  # noqa: F821
fmod = mod  # noqa: F821


def round(x: Any, decimals: int = 0) -> Tensor:  # noqa: A001 - NumPy's name
    """Round half to even to ``decimals`` places (no gradient)."""
    return _ops.round(tensor(x), decimals)


around = round


# -- reductions --------------------------------------------------------------------------------
def _reduction(op: Any) -> Any:
    def fn(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
           **kwargs: Any) -> Tensor:
        res = op(tensor(a), axis=axis, keepdims=keepdims)
        return res.astype(dtype) if dtype is not None else res

    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


sum = _reduction(_ops.sum)  # noqa: A001
mean = _reduction(_ops.mean)
max = amax = _reduction(_ops.max)  # noqa: A001
min = amin = _reduction(_ops.min)  # noqa: A001
prod = _reduction(_ops.prod)


def std(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """Standard deviation over ``axis`` (dividing by ``n - ddof``)."""
    return _ops.std(tensor(a), axis, keepdims, ddof)


def var(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """Variance over ``axis`` (dividing by ``n - ddof``)."""
    return _ops.var(tensor(a), axis, keepdims, ddof)


def argmax(a: Any, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Tensor:
    """Index of the maximum along ``axis`` (int64)."""
    return _ops.argmax(tensor(a), axis, keepdims)


def argmin(a: Any, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Tensor:
    """Index of the minimum along ``axis`` (int64)."""
    return _ops.argmin(tensor(a), axis, keepdims)


def cumsum(a: Any, axis: int | None = None, dtype: Any = None, out: Any = None) -> Tensor:
    """Cumulative sum along ``axis`` (flattened when None)."""
    return _ops.cumsum(tensor(a), axis)


def all(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether every entry along ``axis`` is non-zero (bool, no gradient)."""
    return tensor(a).all(axis, keepdims)


def any(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether some entry along ``axis`` is non-zero (bool, no gradient)."""
    return tensor(a).any(axis, keepdims)


def sort(a: Any, axis: int = -1, **kwargs: Any) -> Tensor:
    """``a`` sorted ascending along ``axis`` (differentiable)."""
    return _ops.sort(tensor(a), axis)


def argsort(a: Any, axis: int = -1, **kwargs: Any) -> Tensor:
    """Indices that sort ``a`` ascending along ``axis`` (int64, stable)."""
    return _ops.argsort(tensor(a), axis)


# -- shape -------------------------------------------------------------------------------------
def reshape(a: Any, newshape: Any, order: str = "C") -> Tensor:
    """``a`` with shape ``newshape`` (one entry may be -1)."""
    return _ops.reshape(tensor(a), shape_arg(newshape))


def ravel(a: Any, order: str = "C") -> Tensor:
    """``a`` flattened to 1-D."""
    return _ops.reshape(tensor(a), (-1,))


def transpose(a: Any, axes: Any = None) -> Tensor:
    """Permute axes (reverse them when None)."""
    return _ops.transpose(tensor(a), *((tuple(axes),) if axes is not None else ()))


def swapaxes(a: Any, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes."""
    return _ops.swapaxes(tensor(a), axis1, axis2)


def moveaxis(a: Any, source: int, destination: int) -> Tensor:
    """Move axis ``source`` to ``destination``."""
    return _ops.moveaxis(tensor(a), source, destination)


def expand_dims(a: Any, axis: int) -> Tensor:
    """Insert an axis of length 1 at ``axis``."""
    return _ops.expand_dims(tensor(a), axis)


def squeeze(a: Any, axis: Any = None) -> Tensor:
    """Remove axes of length 1."""
    return _ops.squeeze(tensor(a), axis)


def broadcast_to(array: Any, shape: Any) -> Tensor:
    """Broadcast to ``shape``."""
    return _ops.broadcast_to(tensor(array), shape_arg(shape))


def tile(A: Any, reps: Any) -> Tensor:  # noqa: N803
    """Repeat the whole array ``reps`` times along each axis."""
    return _ops.tile(tensor(A), reps)


def repeat(a: Any, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis``."""
    return _ops.repeat(tensor(a), repeats, axis)


def flip(m: Any, axis: Any = None) -> Tensor:
    """Reverse along ``axis`` (all axes when None)."""
    return _ops.flip(tensor(m), axis)


def concatenate(seq: Sequence[Any], axis: int = 0, out: Any = None) -> Tensor:
    """Join arrays along an existing ``axis`` (0 by default)."""
    return _ops.concat(tensors(*seq), axis=axis)


concat = concatenate


def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None) -> Tensor:
    """Join same-shaped arrays along a new ``axis``."""
    return _ops.stack(tensors(*arrays), axis=axis)


def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """Split into equal sections (an int) or at the given indices (a sequence) along ``axis``.

    Raises:
        ValueError: an int that does not divide the axis length.
    """
    a = tensor(ary)
    if isinstance(indices_or_sections, (int, _onp.integer)):
        return _ops.split(a, int(indices_or_sections), axis)
    bounds = [0, *[int(i) for i in indices_or_sections], a.shape[axis]]
    return [_ops.slice_axis(a, axis, b, e) for b, e in zip(bounds[:-1], bounds[1:])]


def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """As :func:`split`, but an int need not divide the axis: the first ``length % n`` sections get one more."""
    a = tensor(ary)
    if not isinstance(indices_or_sections, (int, _onp.integer)):
        return split(a, indices_or_sections, axis)
    n = int(indices_or_sections)
    if n <= 0:
        raise ValueError(f"array_split: the number of sections must be > 0, got {n}")
    size, extra = divmod(a.shape[axis], n)
    bounds = _onp.cumsum([0] + [size + 1] * extra + [size] * (n - extra))
    return [_ops.slice_axis(a, axis, int(b), int(e)) for b, e in zip(bounds[:-1], bounds[1:])]


def _split_along(name: str, axis: int, min_ndim: int) -> Any:
    def fn(ary: Any, indices_or_sections: Any) -> list[Tensor]:
        a = tensor(ary)
        if a.ndim < min_ndim:
            raise ValueError(f"{name} needs an array of at least {min_ndim} dimensions, got shape {a.shape}")
        return split(a, indices_or_sections, axis if a.ndim > 1 else 0)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"NumPy's ``{name}``: :func:`split` along axis {axis}" + (" (axis 0 of a 1-D array)." if
                                                                            min_ndim == 1 else ".")
    return fn


hsplit = _split_along("hsplit", 1, 1)
vsplit = _split_along("vsplit", 0, 2)
dsplit = _split_along("dsplit", 2, 3)


def _at_least(ndim: int) -> Any:
    def padded(shape: tuple[int, ...]) -> tuple[int, ...]:
        # NumPy's placement of a short array's axes: () -> (1, ...); (N,) -> (1, N) or (1, N, 1); (M, N) -> (M, N, 1)
        if ndim == 3 and len(shape) in (1, 2):
            return (1, *shape, 1) if len(shape) == 1 else (*shape, 1)
        return (1,) * (ndim - len(shape)) + shape

    def fn(*arys: Any) -> Any:
        out = [_ops.reshape(a, padded(a.shape)) if a.ndim < ndim else a for a in tensors(*arys)]
        return out[0] if len(out) == 1 else out

    fn.__name__ = fn.__qualname__ = f"atleast_{ndim}d"
    fn.__doc__ = f"NumPy's ``atleast_{ndim}d``: each array viewed with at least {ndim} dimensions."
    return fn


atleast_1d, atleast_2d, atleast_3d = _at_least(1), _at_least(2), _at_least(3)


def hstack(tup: Sequence[Any]) -> Tensor:
    """Join along axis 1 (axis 0 for 1-D arrays)."""
    arrays = [atleast_1d(a) for a in tup]
    return _ops.concat(arrays, axis=0 if arrays and arrays[0].ndim == 1 else 1)


def vstack(tup: Sequence[Any]) -> Tensor:
    """Join along axis 0, 1-D arrays taken as rows."""
    return _ops.concat([atleast_2d(a) for a in tup], axis=0)


row_stack = vstack


def dstack(tup: Sequence[Any]) -> Tensor:
    """Join along axis 2, arrays viewed as at least 3-D."""
    return _ops.concat([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup: Sequence[Any]) -> Tensor:
    """Join along axis 1, 1-D arrays taken as columns."""
    arrays = [tensor(a) for a in tup]
    return _ops.concat([_ops.reshape(a, (-1, 1)) if a.ndim < 2 else a for a in arrays], axis=1)


def take(a: Any, indices: Any, axis: int | None = None, mode: str = "clip", out: Any = None) -> Tensor:
    """Entries of ``a`` at ``indices`` along ``axis`` (of the flattened array when None)."""
    a = tensor(a)
    if axis is None:
        a, axis = _ops.reshape(a, (-1,)), 0
    return _nd_ops.take(a, indices, axis, mode)


def take_along_axis(arr: Any, indices: Any, axis: int) -> Tensor:
    """NumPy's ``take_along_axis`` (differentiable in ``arr``)."""
    return _ops.take_along_axis(tensor(arr), indices, axis)


# -- linear algebra ----------------------------------------------------------------------------
def dot(a: Any, b: Any, out: Any = None) -> Tensor:
    """NumPy's ``dot`` (inner product of vectors, matrix product, N-D contraction)."""
    a, b = tensors(a, b)
    return _ops.numpy_dot(a, b)


def matmul(a: Any, b: Any, out: Any = None) -> Tensor:
    """Matrix product of the last two axes, batch axes broadcast."""
    return _nd_ops.matmul(a, b)


def outer(a: Any, b: Any) -> Tensor:
    """Outer product of two vectors (flattened)."""
    a, b = tensors(a, b)
    return _ops.multiply(_ops.reshape(a, (-1, 1)), _ops.reshape(b, (1, -1)))


# mx.np.linalg: NumPy's linear algebra, differentiable where MXNet's is (mxlite.ops.linalg)
linalg = SimpleNamespace(**{name: getattr(_linalg, name) for name in _linalg.NP_LINALG})


def may_share_memory(a: Any, b: Any) -> bool:
    """Whether two arrays may share memory (NumPy's conservative test)."""
    return bool(_onp.may_share_memory(tensor(a).array, tensor(b).array)) if not tensor(a).device.is_gpu else False


class _NumpyShapeScope(contextlib.ContextDecorator):
    """What :func:`np_shape` returns: a context manager (and decorator) that changes nothing."""

    def __init__(self, active: bool) -> None:
        self._active = bool(active)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def np_shape(active: bool = True) -> _NumpyShapeScope:
    """MXNet's ``mx.np_shape(active)`` scope for NumPy shape semantics (``with mx.np_shape(True): ...``).

    mxlite always has NumPy's shape semantics (``()`` is a scalar's shape, zero-size shapes are valid,
    ``-1`` marks an unknown size), as MXNet 2.x does by default, so the scope changes nothing; ``False``
    does not switch them off (as ``npx.reset_np()``, it is accepted and does nothing). It also works as
    a decorator (MXNet's ``use_np_shape``).
    """
    return _NumpyShapeScope(active)

"""The MXNet 1.x operator family behind ``mx.nd``: plain functions over mxlite's Tensor.

Names and argument conventions are MXNet 1.x's: ``shape=``, ``ctx=``, ``dim=`` for ``concat``,
``axis=1`` as ``split``'s default, float32 results for ``argmax``/``argmin``, ``reshape`` with the
special codes 0/-1/-2/-3/-4, and comparisons and logic giving 1 and 0 in the operands' dtype (not bool).
Every function returns a :class:`~mxlite.Tensor` and is differentiable where MXNet's is (rounding,
comparisons, index functions and random draws are not; ``multinomial``'s log-probability is). NumPy
arrays and Python numbers are accepted wherever a Tensor is and converted onto the device of the other
operands.

The functions here return plain Tensors (``mx.np``'s face): :mod:`mxlite.arrays.nd` gives them the ``mx.nd``
face (no 0-d results, ``name=``/``attr=`` accepted and ignored) and builds the ``mx.nd`` namespace and its
``random``/``linalg``/``contrib`` sub-namespaces from them; :mod:`mxlite.arrays.np` and
:mod:`mxlite.arrays.npx` share them as they are.
"""

from __future__ import annotations

import builtins as _b
import os as _os
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import autograd
from .. import ops as _ops
from ..autograd.tensor import Tensor
from ..device import Device as _Device
from ..device import as_device as _as_device
from ..formats.archive import is_mxnet_file as _is_mxnet_file
from ..formats.archive import load_mxnet_arrays as _load_mxnet_arrays
from ..formats.archive import save_mxnet_arrays as _save_mxnet_arrays
from ..ops import activations as _act
from ..ops import attention as _attention
from ..ops import nn_ops as _nn
from ..ops import random as _random
from ..ops.creation import arange as _arange
from ..ops.creation import array as _array
from ..ops.creation import as_dtype
from ..ops.creation import full as _full
from ._common import device_arg, reshape_nd, shape_arg, tensor, tensors
from ._common import entry_names as _entry_names
from ._common import load as _npz_load
from ._common import save as _npz_save


# -- creation ----------------------------------------------------------------------------------
def array(source_array: Any, ctx: Any = None, dtype: Any = None, device: Any = None) -> Tensor:
    """A new array holding a copy of ``source_array`` on ``ctx`` (default: the current device).

    The dtype is ``dtype`` if given, else the source's when it is an mxlite array, else float32: NumPy
    arrays of any dtype (float64 included), lists and numbers give float32, as MXNet 1.x's ``nd.array``.
    """
    if dtype is None and not isinstance(source_array, Tensor):
        dtype = np.float32
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


def _arrays_among(*params: Any) -> bool:
    return _b.any(isinstance(p, (Tensor, np.ndarray, list)) for p in params)


def _sample(dist: str, params: tuple[Any, ...], shape: Any, size: Any, dtype: Any, ctx: Any, device: Any) -> Tensor:
    """Draws of ``dist`` (``mxlite.ops.random.sample``): numbers give ``shape`` draws on ``ctx``; arrays
    (NumPy arrays and lists become arrays) of one shape give ``shape`` draws per entry, on their device."""
    shp, dev = _draw_args(shape, size, ctx, device, f"random.{dist}")
    params = tuple(tensor(p) if isinstance(p, (np.ndarray, list)) else p for p in params)
    return _random.sample(dist, params, shp, dtype, dev)


def uniform(low: Any = 0.0, high: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
             out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of U[low, high) (float32 by default): ``shape`` of them on ``ctx`` for numbers, ``shape`` per entry
    for arrays ``low``, ``high`` of one shape (result ``low.shape + shape``, on their device), as MXNet 1.x."""
    if _arrays_among(low, high):
        return into(out, _sample("uniform", (low, high), shape, size, dtype, ctx, device))
    shp, dev = _draw_args(shape, size, ctx, device, "random.uniform")
    return into(out, _random.uniform(low, high, shp, dtype, dev))


def normal(loc: Any = 0.0, scale: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
            out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of N(loc, scale²) (float32 by default); numbers or arrays of one shape as :func:`uniform`."""
    if _arrays_among(loc, scale):
        return into(out, _sample("normal", (loc, scale), shape, size, dtype, ctx, device))
    shp, dev = _draw_args(shape, size, ctx, device, "random.normal")
    return into(out, _random.normal(loc, scale, shp, dtype, dev))


def randint(low: int, high: int, shape: Any = None, dtype: Any = None, ctx: Any = None, out: Tensor | None = None,
             size: Any = None, device: Any = None) -> Tensor:
    """Integers uniform in ``[low, high)`` (int32 by default) on ``ctx``."""
    shp, dev = _draw_args(shape, size, ctx, device, "random.randint")
    return into(out, _random.randint(low, high, shp, dtype, dev))


def randn(*shape: int, loc: Any = 0.0, scale: Any = 1.0, dtype: Any = None, ctx: Any = None, device: Any = None,
           out: Tensor | None = None) -> Tensor:
    """Samples of N(loc, scale²) of ``shape`` given as separate ints (standard normal by default); array
    ``loc``/``scale`` give ``shape`` samples per entry, as :func:`normal`."""
    return normal(loc, scale, shape, dtype, ctx, out, device=device)


def gamma(alpha: Any = 1.0, beta: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
           out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of Gamma(alpha, beta), shape ``alpha`` and scale ``beta`` (mean ``alpha * beta``), float32 by
    default; numbers or arrays of one shape as :func:`uniform`."""
    return into(out, _sample("gamma", (alpha, beta), shape, size, dtype, ctx, device))


def exponential(scale: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None, out: Tensor | None = None,
                 size: Any = None, device: Any = None) -> Tensor:
    """Samples of the exponential distribution of mean ``scale`` (rate ``1 / scale``), float32 by default;
    a number or an array as :func:`uniform`."""
    rate = _ops.reciprocal(tensor(scale).astype(np.float64)) if _arrays_among(scale) else 1.0 / scale
    return into(out, _sample("exponential", (rate,), shape, size, dtype, ctx, device))


def exponential_rate(lam: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None,
                      out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of the exponential distribution of rate ``lam`` (mean ``1 / lam``): MXNet 1.x's operator
    ``random_exponential`` and the ``_like`` form take the rate where ``random.exponential`` takes the scale."""
    return into(out, _sample("exponential", (lam,), shape, size, dtype, ctx, device))


def poisson(lam: Any = 1.0, shape: Any = None, dtype: Any = None, ctx: Any = None, out: Tensor | None = None,
             size: Any = None, device: Any = None) -> Tensor:
    """Samples of Poisson(lam), as whole numbers in a float dtype (float32 by default); a number or an array
    as :func:`uniform`."""
    return into(out, _sample("poisson", (lam,), shape, size, dtype, ctx, device))


def negative_binomial(k: Any = 1, p: Any = 1, shape: Any = None, dtype: Any = None, ctx: Any = None,
                       out: Tensor | None = None, size: Any = None, device: Any = None) -> Tensor:
    """Samples of the negative binomial distribution: failures before the ``k``-th success, each trial a success
    with probability ``p`` (mean ``k (1 - p) / p``), whole numbers in a float dtype; as :func:`uniform`."""
    return into(out, _sample("negative_binomial", (k, p), shape, size, dtype, ctx, device))


def generalized_negative_binomial(mu: Any = 1, alpha: Any = 1, shape: Any = None, dtype: Any = None,
                                   ctx: Any = None, out: Tensor | None = None, size: Any = None,
                                   device: Any = None) -> Tensor:
    """Samples of the generalized negative binomial distribution of mean ``mu`` and dispersion ``alpha``
    (variance ``mu + alpha * mu²``; Poisson where alpha is 0), whole numbers in a float dtype; as
    :func:`uniform`."""
    return into(out, _sample("generalized_negative_binomial", (mu, alpha), shape, size, dtype, ctx, device))


def multinomial(data: Any, shape: Any = None, get_prob: bool = False, out: Any = None, dtype: Any = "int32") -> Any:
    """Samples of the categorical distributions along ``data``'s last axis (probabilities summing to 1):
    ``shape`` draws from each, as ``dtype`` (int32 by default), shaped ``data.shape[:-1] + shape`` (``(1,)``
    for one draw from a 1-D ``data``). ``get_prob=True`` returns ``[samples, log_prob]``, the gradient of
    ``log_prob`` reaching ``data`` (REINFORCE), as MXNet 1.x. ``out``: the samples' array, or a list of two.

    Raises:
        ValueError: probabilities that are negative or do not sum to 1, or too many categories for ``dtype``.
    """
    value = _random.multinomial(tensor(data), shape_arg(shape), get_prob, dtype)
    if out is None:
        return value
    if get_prob:
        return [into(o, v) for o, v in zip(out, value)]
    return into(out, value)


def _like(dist: str, data: Any, params: tuple[Any, ...]) -> Tensor:
    """Draws of ``dist`` with ``data``'s shape, dtype and device (MXNet's ``*_like`` samplers)."""
    data = tensor(data)
    return _random.sample(dist, params, data.shape, data.dtype, data.device)


def uniform_like(data: Any, low: float = 0.0, high: float = 1.0) -> Tensor:
    """U[low, high) samples shaped like ``data`` (its dtype and device)."""
    return _like("uniform", data, (low, high))


def normal_like(data: Any, loc: float = 0.0, scale: float = 1.0) -> Tensor:
    """N(loc, scale²) samples shaped like ``data`` (its dtype and device)."""
    return _like("normal", data, (loc, scale))


def gamma_like(data: Any, alpha: float = 1.0, beta: float = 1.0) -> Tensor:
    """Gamma(alpha, beta) samples (shape, scale) shaped like ``data`` (its dtype and device)."""
    return _like("gamma", data, (alpha, beta))


def exponential_like(data: Any, lam: float = 1.0) -> Tensor:
    """Samples of the exponential distribution of rate ``lam`` shaped like ``data`` (its dtype and device)."""
    return _like("exponential", data, (lam,))


def poisson_like(data: Any, lam: float = 1.0) -> Tensor:
    """Poisson(lam) samples shaped like ``data`` (its dtype and device)."""
    return _like("poisson", data, (lam,))


def negative_binomial_like(data: Any, k: float = 1, p: float = 1) -> Tensor:
    """Negative binomial (k, p) samples shaped like ``data`` (its dtype and device)."""
    return _like("negative_binomial", data, (k, p))


def generalized_negative_binomial_like(data: Any, mu: float = 1, alpha: float = 1) -> Tensor:
    """Generalized negative binomial (mu, alpha) samples shaped like ``data`` (its dtype and device)."""
    return _like("generalized_negative_binomial", data, (mu, alpha))


def into(out: Tensor | None, value: Tensor) -> Tensor:
    """``value`` written into ``out`` and ``out`` returned (an operator's ``out=``), or ``value`` if ``out`` is None."""
    if out is None:
        return value
    out[...] = value
    return out




def _param_arrays(*params: Any) -> tuple[Tensor, ...]:
    return tuple(tensors(*params))


# MXNet 1.x's sample_* operators: one distribution per entry of the parameter arrays (all of one shape),
# ``shape`` draws from each (result: the arrays' shape + ``shape``), float32 unless ``dtype`` is given.
def sample_uniform(low: Any, high: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """U[low, high) draws per entry of the arrays ``low``, ``high`` (MXNet's ``sample_uniform``)."""
    return _random.sample("uniform", _param_arrays(low, high), shape_arg(shape), dtype)


def sample_normal(mu: Any, sigma: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """N(mu, sigma²) draws per entry of the arrays ``mu``, ``sigma`` (MXNet's ``sample_normal``)."""
    return _random.sample("normal", _param_arrays(mu, sigma), shape_arg(shape), dtype)


def sample_gamma(alpha: Any, beta: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """Gamma draws (shape ``alpha``, scale ``beta``) per entry of the arrays (MXNet's ``sample_gamma``)."""
    return _random.sample("gamma", _param_arrays(alpha, beta), shape_arg(shape), dtype)


def sample_exponential(lam: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """Exponential draws of rate ``lam`` per entry of the array (MXNet's ``sample_exponential``)."""
    return _random.sample("exponential", _param_arrays(lam), shape_arg(shape), dtype)


def sample_poisson(lam: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """Poisson draws of rate ``lam`` per entry of the array, whole numbers in a float dtype (MXNet's
    ``sample_poisson``)."""
    return _random.sample("poisson", _param_arrays(lam), shape_arg(shape), dtype)


def sample_negative_binomial(k: Any, p: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """Negative binomial draws (``k`` successes of probability ``p``) per entry of the arrays (MXNet's
    ``sample_negative_binomial``)."""
    return _random.sample("negative_binomial", _param_arrays(k, p), shape_arg(shape), dtype)


def sample_generalized_negative_binomial(mu: Any, alpha: Any, shape: Any = (), dtype: Any = None) -> Tensor:
    """Generalized negative binomial draws (mean ``mu``, dispersion ``alpha``) per entry of the arrays (MXNet's
    ``sample_generalized_negative_binomial``)."""
    return _random.sample("generalized_negative_binomial", _param_arrays(mu, alpha), shape_arg(shape), dtype)


def sample_multinomial(data: Any, shape: Any = (), get_prob: bool = False, dtype: Any = "int32",
                       out: Any = None) -> Any:
    """MXNet's ``sample_multinomial``: :func:`mx.nd.random.multinomial <multinomial>`."""
    return multinomial(data, shape, get_prob, out, dtype)




# -- elementwise -------------------------------------------------------------------------------
def elementwise_unary(op: Any) -> Any:
    """``op`` (a unary op of :mod:`mxlite.ops`) taking a NumPy array, list or number as well as a Tensor."""

    def fn(data: Any, *args: Any, **kwargs: Any) -> Tensor:
        return op(tensor(data), *args, **kwargs)

    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


def elementwise_binary(op: Any) -> Any:
    """``op`` (a binary op of :mod:`mxlite.ops`) taking two NumPy arrays, lists or numbers as well as Tensors
    (one Tensor operand sets the device; with none, the first operand is made a Tensor on the current device)."""

    def fn(lhs: Any, rhs: Any) -> Tensor:
        if not isinstance(lhs, Tensor) and not isinstance(rhs, Tensor):
            lhs = tensor(lhs)
        return op(lhs, rhs)

    fn.__name__ = op.__name__
    fn.__doc__ = op.__doc__
    return fn


# MXNet 1.x's unary and binary elementwise operators (``_ops`` has the maths; these accept NumPy arrays and
# numbers for the data)
exp = elementwise_unary(_ops.exp)
log = elementwise_unary(_ops.log)
sqrt = elementwise_unary(_ops.sqrt)
square = elementwise_unary(_ops.square)
tanh = elementwise_unary(_ops.tanh)
sigmoid = elementwise_unary(_ops.sigmoid)
relu = elementwise_unary(_ops.relu)
abs = elementwise_unary(_ops.abs)
negative = elementwise_unary(_ops.negative)
sin = elementwise_unary(_ops.sin)
cos = elementwise_unary(_ops.cos)
tan = elementwise_unary(_ops.tan)
arcsin = elementwise_unary(_ops.arcsin)
arccos = elementwise_unary(_ops.arccos)
arctan = elementwise_unary(_ops.arctan)
sinh = elementwise_unary(_ops.sinh)
cosh = elementwise_unary(_ops.cosh)
arcsinh = elementwise_unary(_ops.arcsinh)
arccosh = elementwise_unary(_ops.arccosh)
arctanh = elementwise_unary(_ops.arctanh)
log1p = elementwise_unary(_ops.log1p)
expm1 = elementwise_unary(_ops.expm1)
log2 = elementwise_unary(_ops.log2)
log10 = elementwise_unary(_ops.log10)
reciprocal = elementwise_unary(_ops.reciprocal)
rsqrt = elementwise_unary(_ops.rsqrt)
cbrt = elementwise_unary(_ops.cbrt)
erf = elementwise_unary(_ops.erf)
sign = elementwise_unary(_ops.sign)
floor = elementwise_unary(_ops.floor)
ceil = elementwise_unary(_ops.ceil)
trunc = elementwise_unary(_ops.trunc)
fix = elementwise_unary(_ops.fix)
rint = elementwise_unary(_ops.rint)
round = elementwise_unary(_ops.round)
isnan = elementwise_unary(_ops.isnan)
isinf = elementwise_unary(_ops.isinf)
isfinite = elementwise_unary(_ops.isfinite)
add = elementwise_binary(_ops.add)
subtract = elementwise_binary(_ops.subtract)
multiply = elementwise_binary(_ops.multiply)
divide = elementwise_binary(_ops.divide)
power = elementwise_binary(_ops.power)
maximum = elementwise_binary(_ops.maximum)
minimum = elementwise_binary(_ops.minimum)
mod = elementwise_binary(_ops.mod)
hypot = elementwise_binary(_ops.hypot)
arctan2 = elementwise_binary(_ops.arctan2)
true_divide = divide
# comparisons and logic: 1 and 0 in the operands' dtype, as MXNet 1.x (``mx.np``'s give bool)
equal = elementwise_binary(_ops.nd_equal)
not_equal = elementwise_binary(_ops.nd_not_equal)
greater = elementwise_binary(_ops.nd_greater)
greater_equal = elementwise_binary(_ops.nd_greater_equal)
less = elementwise_binary(_ops.nd_less)
less_equal = elementwise_binary(_ops.nd_less_equal)
logical_and = elementwise_binary(_ops.nd_logical_and)
logical_or = elementwise_binary(_ops.nd_logical_or)
logical_xor = elementwise_binary(_ops.nd_logical_xor)
logical_not = elementwise_unary(_ops.nd_logical_not)
lesser, lesser_equal = less, less_equal  # MXNet 1.x's names


def clip(data: Any, a_min: float | None, a_max: float | None) -> Tensor:
    """Clamp to ``[a_min, a_max]``; the gradient is zero where clamped."""
    return _ops.clip(tensor(data), a_min, a_max)


def where(condition: Any, x: Any, y: Any) -> Tensor:
    """Elementwise ``x if condition else y`` (no gradient to ``condition``), as MXNet 1.x's ``where``: a 1-D
    ``condition`` as long as the first axis of ``x`` and ``y`` (of two or more axes) picks whole rows; otherwise
    the three broadcast (``mx.np.where`` always broadcasts, as NumPy)."""
    condition, x, y = tensors(condition, x, y)
    if condition.ndim == 1 and x.ndim > 1 and x.shape == y.shape and condition.shape[0] == x.shape[0]:
        condition = _ops.reshape(condition, condition.shape + (1,) * (x.ndim - 1))
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


def concatenate(arrays: Sequence[Any], axis: int = 0, always_copy: bool = True) -> Tensor:
    """MXNet 1.x's (deprecated) ``concatenate``: join the list ``arrays`` along ``axis`` (0 by default; use
    :func:`concat`). The arrays must share one dtype and their shapes off ``axis``; with ``always_copy=False``
    a single array is returned as it is. Differentiable.

    Raises:
        TypeError: ``arrays`` is not a list or tuple. ValueError: it is empty, or its arrays' dtypes or
            shapes off ``axis`` differ (names each array's).
    """
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"concatenate: arrays must be a list of arrays, got {type(arrays).__name__}")
    items = tensors(*arrays)
    if not items:
        raise ValueError("concatenate: arrays is empty; give at least one array")
    if not always_copy and len(items) == 1:
        return items[0]
    if len({t.dtype for t in items}) > 1:
        raise ValueError("concatenate: the arrays must have one dtype, got "
                         + ", ".join(f"array {i}: {t.dtype}" for i, t in enumerate(items)))
    return _ops.concat(items, axis=axis)


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
    save_arrays(fname, data, format, np_shape=False, where="save")


def save_arrays(fname: str | _os.PathLike, data: Any, format: str, np_shape: bool, where: str) -> None:
    """Save ``data`` as ``nd.save``/``npx.save`` do (``where``: the caller's name for error messages);
    ``np_shape`` picks MXNet's NumPy-shape (V3) arrays for ``format='mxnet'``."""
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
    small = _ops.less(_ops.abs(x), 1.0 / s2)
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


# -- more of MXNet 1.x's operators (what 1.x hybrid_forward code calls as F.*) ----------------
# Each is composed from the differentiable primitives (ops, nn_ops), so its gradient is theirs; the
# tests gradient-check every one in float64 (tests/test_nd_operators.py).
def _host_ints(x: Any, where: str) -> np.ndarray:
    """Lengths or ids given as a Tensor, NumPy array or sequence, as host int64 (a device read for a GPU Tensor)."""
    if x is None:
        raise ValueError(f"{where}: sequence_length is required when use_sequence_length=True")
    return np.asarray(x.asnumpy() if isinstance(x, Tensor) else x).astype(np.int64).reshape(-1)


def _along(values: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A 1-D host array shaped to broadcast along ``axis`` of an ``ndim``-D array."""
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _time_batch(data: Tensor, axis: int, where: str) -> tuple[int, int]:
    """(time length, batch size) of a sequence array whose time axis is ``axis`` (0 or 1) and batch the other."""
    if axis not in (0, 1) or data.ndim < 2:
        raise ValueError(f"{where}: axis must be 0 (time-major) or 1 (batch-major) of an array with >= 2 axes, "
                         f"got axis={axis} for shape {data.shape}")
    return data.shape[axis], data.shape[1 - axis]


def _lengths(sequence_length: Any, batch: int, steps: int, where: str) -> np.ndarray:
    lengths = _host_ints(sequence_length, where)
    if lengths.shape != (batch,) or (lengths < 0).any() or (lengths > steps).any():
        raise ValueError(f"{where}: sequence_length must hold {batch} lengths in [0, {steps}], got {lengths.tolist()}")
    return lengths


def SequenceMask(data: Any, sequence_length: Any = None, use_sequence_length: bool = False,  # noqa: N802
                 value: float = 0.0, axis: int = 0) -> Tensor:
    """Set the steps past each sequence's length to ``value`` (MXNet's ``SequenceMask``).

    ``data`` is ``(T, N, ...)`` (``axis=0``) or ``(N, T, ...)`` (``axis=1``); ``sequence_length`` holds N
    lengths. Without ``use_sequence_length`` the input is returned unchanged (a copy). Masked steps get no
    gradient.

    Raises:
        ValueError: a bad axis, or lengths of the wrong count or outside ``[0, T]``.
    """
    data = tensor(data)
    if not use_sequence_length:
        return identity(data)
    steps, batch = _time_batch(data, axis, "SequenceMask")
    lengths = _lengths(sequence_length, batch, steps, "SequenceMask")
    keep = np.arange(steps)[:, None] < lengths[None, :]  # (T, N)
    keep = keep if axis == 0 else keep.T
    cond = _ops.as_tensor(keep.reshape(keep.shape + (1,) * (data.ndim - 2)), data)
    return _ops.where(cond, data, _ops.as_tensor(np.asarray(value, dtype=data.dtype), data))


def SequenceLast(data: Any, sequence_length: Any = None, use_sequence_length: bool = False,  # noqa: N802
                 axis: int = 0) -> Tensor:
    """Each sequence's last valid step (MXNet's ``SequenceLast``): ``(N, ...)`` from ``(T, N, ...)`` (``axis=0``)
    or ``(N, T, ...)`` (``axis=1``); without ``use_sequence_length``, the last step. Differentiable in ``data``.

    Raises:
        ValueError: a bad axis, or lengths of the wrong count or outside ``[1, T]``.
    """
    data = tensor(data)
    steps, batch = _time_batch(data, axis, "SequenceLast")
    if not use_sequence_length:
        return _ops.squeeze(_ops.slice_axis(data, axis, steps - 1, steps), axis)
    lengths = _lengths(sequence_length, batch, steps, "SequenceLast")
    if (lengths < 1).any():
        raise ValueError(f"SequenceLast: every sequence_length must be >= 1, got {lengths.tolist()}")
    picked = np.broadcast_to(_along(lengths - 1, data.ndim - 1, 0), tuple(s for i, s in enumerate(data.shape)
                                                                          if i != axis))
    idx = np.expand_dims(picked, axis)
    return _ops.squeeze(_ops.take_along_axis(data, idx, axis), axis)


def SequenceReverse(data: Any, sequence_length: Any = None, use_sequence_length: bool = False,  # noqa: N802
                    axis: int = 0) -> Tensor:
    """Reverse each sequence's first ``sequence_length`` steps along the time axis (MXNet's ``SequenceReverse``,
    time-major ``(T, N, ...)``); later steps stay in place. Without ``use_sequence_length`` the whole time
    axis is reversed. Differentiable in ``data``.

    Raises:
        ValueError: ``axis`` other than 0 (as MXNet), or bad lengths.
    """
    data = tensor(data)
    if axis != 0:
        raise ValueError(f"SequenceReverse: only axis=0 (time-major data) is supported, as in MXNet; got {axis}")
    steps, batch = _time_batch(data, axis, "SequenceReverse")
    lengths = (_lengths(sequence_length, batch, steps, "SequenceReverse") if use_sequence_length
               else np.full(batch, steps))
    t = np.arange(steps)[:, None]
    src = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # (T, N)
    idx = np.broadcast_to(src.reshape(src.shape + (1,) * (data.ndim - 2)), data.shape)
    return _ops.take_along_axis(data, np.ascontiguousarray(idx), 0)


def _length_mask(data: Tensor, length: Any, axis: int, where: str) -> Tensor:
    """Boolean mask of ``data``'s shape: True where the position along ``axis`` is below ``length``, which has
    ``data``'s shape without ``axis``."""
    axis = axis % data.ndim
    lengths = np.asarray(length.asnumpy() if isinstance(length, Tensor) else length).astype(np.int64)
    want = tuple(n for i, n in enumerate(data.shape) if i != axis)
    if lengths.shape != want:
        raise ValueError(f"{where}: length must have the data's shape without axis {axis}, {want}, "
                         f"got {lengths.shape}")
    keep = _along(np.arange(data.shape[axis]), data.ndim, axis) < np.expand_dims(lengths, axis)
    return _ops.as_tensor(keep, data)


def _masked(fn: Any, data: Tensor, length: Any, axis: int, where: str) -> Tensor:
    """``fn(data)`` over the first ``length`` positions along ``axis``; 0 elsewhere (MXNet's ``use_length``)."""
    mask = _length_mask(data, length, axis, where)
    low = _ops.as_tensor(np.asarray(np.finfo(data.dtype).min, dtype=data.dtype), data)
    out = fn(_ops.where(mask, data, low))
    return _ops.where(mask, out, _ops.as_tensor(np.asarray(0, dtype=out.dtype), out))


def _softmax_like(fn: Any, name: str, data: Any, axis: int, temperature: float | None, length: Any,
                  use_length: bool, dtype: Any) -> Tensor:
    """``fn`` (softmax or log-softmax) along ``axis`` of ``data / temperature``, masked by ``length``."""
    data = tensor(data)
    if temperature is not None and temperature != 1:
        data = _ops.divide(data, temperature)
    if use_length:
        out = _masked(lambda d: fn(d, axis=axis), data, length, axis, name)
    else:
        out = fn(data, axis=axis)
    return out.astype(dtype) if dtype is not None else out


def softmax(data: Any, axis: int = -1, temperature: float | None = None, length: Any = None,
            use_length: bool = False, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Softmax along ``axis``, of ``data / temperature`` when a temperature is given.

    With ``use_length=True`` only the first ``length`` entries along ``axis`` take part (``length`` has
    ``data``'s shape without ``axis``); the others are 0, as MXNet's masked softmax. ``dtype`` casts the result.
    """
    return _softmax_like(_nn.softmax, "softmax", data, axis, temperature, length, use_length, dtype)


def log_softmax(data: Any, axis: int = -1, temperature: float | None = None, length: Any = None,
                use_length: bool = False, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Log of the softmax along ``axis`` (computed stably); ``use_length``/``length`` as :func:`softmax`
    (masked entries are 0)."""
    return _softmax_like(_nn.log_softmax, "log_softmax", data, axis, temperature, length, use_length, dtype)


def softmin(data: Any, axis: int = -1, temperature: float | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    """Softmax of ``-data`` along ``axis``."""
    return softmax(_ops.negative(tensor(data)), axis, temperature, dtype=dtype)


def SoftmaxActivation(data: Any, mode: str = "instance") -> Tensor:  # noqa: N802
    """MXNet's ``SoftmaxActivation``: 'instance' normalises each sample over all its other axes,
    'channel' over axis 1 at each position.

    Raises:
        ValueError: an unknown ``mode``.
    """
    data = tensor(data)
    if mode == "channel":
        return _nn.softmax(data, axis=1)
    if mode != "instance":
        raise ValueError(f"SoftmaxActivation: mode must be 'instance' or 'channel', got {mode!r}")
    return _ops.reshape(_nn.softmax(_ops.reshape(data, (data.shape[0], -1)), axis=-1), data.shape)


def softmax_cross_entropy(data: Any, label: Any) -> Tensor:
    """MXNet's ``softmax_cross_entropy``: the summed cross-entropy of ``softmax(data)`` (``(N, K)``) against
    integer class ``label`` (``(N,)``), a 1-element array."""
    data = tensor(data)
    picked = _nn.pick(_nn.log_softmax(data, axis=-1), label.array if isinstance(label, Tensor) else label, axis=-1)
    return _ops.reshape(_ops.negative(_ops.sum(picked)), (1,))


def L2Normalization(data: Any, eps: float = 1e-10, mode: str = "instance") -> Tensor:  # noqa: N802
    """MXNet's ``L2Normalization``: ``data / sqrt(sum(data²) + eps)``, the sum taken per sample over every
    other axis ('instance'), over axis 1 at each position ('channel'), or over the axes after 1 for each
    sample and channel ('spatial'; 'channel' and 'spatial' need >= 3 axes).

    Raises:
        ValueError: an unknown ``mode``, or too few axes.
    """
    x = tensor(data)
    if mode == "instance":
        axes: tuple[int, ...] = tuple(range(1, x.ndim))
    elif mode in ("channel", "spatial"):
        if x.ndim < 3:
            raise ValueError(f"L2Normalization: mode {mode!r} needs an input with >= 3 axes, got shape {x.shape}")
        axes = (1,) if mode == "channel" else tuple(range(2, x.ndim))
    else:
        raise ValueError(f"L2Normalization: mode must be 'instance', 'channel' or 'spatial', got {mode!r}")
    norm = _ops.sqrt(_ops.add(_ops.sum(_ops.square(x), axis=axes, keepdims=True), eps))
    return _ops.divide(x, norm)


def moments(data: Any, axes: Any = None, keepdims: bool = False) -> list[Tensor]:
    """``[mean, variance]`` (biased) of ``data`` over ``axes`` (all when None)."""
    x = tensor(data)
    axes = None if axes is None else shape_arg(axes)
    mu = _ops.mean(x, axis=axes, keepdims=True)
    var = _ops.mean(_ops.square(_ops.subtract(x, mu)), axis=axes, keepdims=keepdims)
    return [mu if keepdims else _ops.mean(x, axis=axes), var]


def _normalize_over(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    """``(x - mean) / sqrt(var + eps)``, mean and biased variance over ``axes``, in at least float32."""
    wide = x.dtype == np.float16
    data = _ops.astype(x, np.float32) if wide else x
    mu = _ops.mean(data, axis=axes, keepdims=True)
    centred = _ops.subtract(data, mu)
    var = _ops.mean(_ops.square(centred), axis=axes, keepdims=True)
    out = _ops.divide(centred, _ops.sqrt(_ops.add(var, eps)))
    return _ops.astype(out, np.float16) if wide else out


def _per_channel(v: Tensor, ndim: int) -> Tensor:
    return _ops.reshape(v, (1, -1) + (1,) * (ndim - 2))


def InstanceNorm(data: Any, gamma: Any, beta: Any, eps: float = 1e-3) -> Tensor:  # noqa: N802
    """MXNet's ``InstanceNorm``: each (sample, channel) of ``(N, C, ...)`` normalised over its other axes, then
    ``* gamma + beta`` per channel (``(C,)``). ``eps`` defaults to 1e-3, as MXNet's operator.

    Raises:
        ValueError: fewer than 3 axes, or gamma/beta not of shape ``(C,)``.
    """
    x, g, b = tensors(data, gamma, beta)
    if x.ndim < 3 or g.shape != (x.shape[1],) or b.shape != (x.shape[1],):
        raise ValueError(f"InstanceNorm: data (N, C, ...) with >= 3 axes and gamma, beta of shape (C,), got "
                         f"{x.shape}, {g.shape}, {b.shape}")
    out = _normalize_over(x, tuple(range(2, x.ndim)), eps)
    return _ops.add(_ops.multiply(out, _per_channel(g, x.ndim)), _per_channel(b, x.ndim))


def GroupNorm(data: Any, gamma: Any, beta: Any, num_groups: int = 1, eps: float = 1e-5,  # noqa: N802
              output_mean_var: bool = False) -> Tensor:
    """MXNet 1.x's ``GroupNorm``: ``(N, C, ...)`` split into ``num_groups`` channel groups, each normalised per
    sample, then scaled and shifted by ``gamma``/``beta`` of shape ``(num_groups,)`` (1.x's operator: one
    per group) or ``(C,)`` (2.x's ``npx.group_norm``: one per channel).

    Raises:
        ValueError: channels not divisible by ``num_groups``, or gamma/beta of another shape.
        NotImplementedError: ``output_mean_var=True``.
    """
    if output_mean_var:
        raise NotImplementedError("GroupNorm: output_mean_var=True is not supported")
    x, g, b = tensors(data, gamma, beta)
    n, c = x.shape[0], x.shape[1]
    if c % num_groups or g.shape != b.shape or g.shape not in ((num_groups,), (c,)):
        raise ValueError(f"GroupNorm: {c} channels must split into num_groups={num_groups}, and gamma/beta must "
                         f"have shape ({num_groups},) or ({c},), got {g.shape} and {b.shape}")
    grouped = _ops.reshape(x, (n, num_groups, -1))
    out = _normalize_over(grouped, (2,), eps)
    if g.shape == (num_groups,):
        out = _ops.add(_ops.multiply(out, _ops.reshape(g, (1, -1, 1))), _ops.reshape(b, (1, -1, 1)))
        return _ops.reshape(out, x.shape)
    out = _ops.reshape(out, x.shape)
    return _ops.add(_ops.multiply(out, _per_channel(g, x.ndim)), _per_channel(b, x.ndim))


def LayerNorm(data: Any, gamma: Any, beta: Any, axis: int = -1, eps: float = 1e-5,  # noqa: N802
              output_mean_var: bool = False) -> Tensor:
    """MXNet's ``LayerNorm``: normalise over ``axis``, then ``* gamma + beta`` (shape ``(data.shape[axis],)``).

    Raises:
        NotImplementedError: ``output_mean_var=True``.
    """
    if output_mean_var:
        raise NotImplementedError("LayerNorm: output_mean_var=True is not supported")
    x, g, b = tensors(data, gamma, beta)
    return _nn.layer_norm(x, g, b, axis=axis, eps=eps)


def BatchNorm(data: Any, gamma: Any, beta: Any, moving_mean: Any, moving_var: Any, eps: float = 1e-3,  # noqa: N802
              momentum: float = 0.9, fix_gamma: bool = True, use_global_stats: bool = False,
              output_mean_var: bool = False, axis: int = 1, **kwargs: Any) -> Tensor:
    """MXNet's ``BatchNorm`` operator (its defaults: ``eps=1e-3``, ``fix_gamma=True``): batch statistics while
    training (``autograd.is_training()``), updating ``moving_mean``/``moving_var`` in place; the moving
    statistics otherwise.

    Raises:
        NotImplementedError: ``output_mean_var=True``.
    """
    if output_mean_var:
        raise NotImplementedError("BatchNorm: output_mean_var=True is not supported")
    x, g, b, mm, mv = tensors(data, gamma, beta, moving_mean, moving_var)
    return _nn.batch_norm(x, g, b, mm, mv, axis=axis, eps=eps, momentum=momentum, training=None,
                          use_global_stats=use_global_stats, fix_gamma=fix_gamma)


def Embedding(data: Any, weight: Any, input_dim: int | None = None, output_dim: int | None = None,  # noqa: N802
              dtype: Any = None, sparse_grad: bool = False, **kwargs: Any) -> Tensor:
    """MXNet's ``Embedding``: rows of ``weight`` (``(input_dim, output_dim)``) at the ids in ``data``.

    Raises:
        ValueError: ``weight``'s shape contradicts ``input_dim``/``output_dim``.
    """
    weight = tensor(weight)
    for what, want, got in (("input_dim", input_dim, weight.shape[0]), ("output_dim", output_dim, weight.shape[-1])):
        if want is not None and int(want) != got:
            raise ValueError(f"Embedding: {what}={want} but weight has shape {weight.shape}")
    ids = data.array if isinstance(data, Tensor) else data
    return _nn.embedding(ids, weight, sparse_grad=sparse_grad)


def _spatial(value: Any, nd: int, default: int, where: str, what: str) -> tuple[int, ...]:
    """A per-spatial-axis argument (``()`` means ``default`` for each axis)."""
    got = shape_arg(value) if value is not None else ()
    if not got:
        return (default,) * nd
    if len(got) != nd:
        raise ValueError(f"{where}: {what} must have {nd} entries for {nd} spatial axes, got {got}")
    return got


def _channel_first(layout: str | None, nd: int, where: str) -> None:
    if layout is not None and layout not in ("NCW", "NCHW", "NCDHW")[nd - 1:nd]:
        raise ValueError(f"{where}: only the channel-first layout {('NCW', 'NCHW', 'NCDHW')[nd - 1]} is supported "
                         f"for {nd} spatial axes, got {layout!r}")


def Convolution(data: Any, weight: Any, bias: Any = None, kernel: Any = (), stride: Any = (),  # noqa: N802
                dilate: Any = (), pad: Any = (), num_filter: int | None = None, num_group: int = 1,
                no_bias: bool = False, layout: str | None = None, **kwargs: Any) -> Tensor:
    """MXNet's ``Convolution`` (1, 2 or 3 spatial axes, channel-first): ``weight`` ``(num_filter, C/num_group,
    *kernel)``; ``stride``/``dilate`` default to 1 and ``pad`` to 0 per axis.

    Raises:
        ValueError: arguments that contradict ``weight``'s shape, or a channel-last layout.
    """
    x, w = tensors(data, weight)
    nd_ = x.ndim - 2
    _channel_first(layout, nd_, "Convolution")
    if kernel and tuple(shape_arg(kernel)) != w.shape[2:] or num_filter is not None and int(num_filter) != w.shape[0]:
        raise ValueError(f"Convolution: kernel={kernel}, num_filter={num_filter} contradict weight shape {w.shape}")
    b = None if no_bias or bias is None else tensor(bias, x)
    return _nn.conv(x, w, b, stride=_spatial(stride, nd_, 1, "Convolution", "stride"),
                    padding=_spatial(pad, nd_, 0, "Convolution", "pad"),
                    dilation=_spatial(dilate, nd_, 1, "Convolution", "dilate"), groups=int(num_group))


def Deconvolution(data: Any, weight: Any, bias: Any = None, kernel: Any = (), stride: Any = (),  # noqa: N802
                  dilate: Any = (), pad: Any = (), adj: Any = (), target_shape: Any = (), num_filter: int | None = None,
                  num_group: int = 1, no_bias: bool = True, layout: str | None = None, **kwargs: Any) -> Tensor:
    """MXNet's ``Deconvolution`` (transposed convolution, channel-first): ``weight`` ``(C, num_filter/num_group,
    *kernel)``, ``adj`` the extra output size per axis. ``no_bias`` defaults to True, as MXNet's operator.

    Raises:
        ValueError: arguments that contradict ``weight``'s shape, or a channel-last layout.
        NotImplementedError: ``target_shape`` (give ``pad``/``adj`` instead).
    """
    if target_shape:
        raise NotImplementedError("Deconvolution: target_shape is not supported; give pad= and adj= instead")
    x, w = tensors(data, weight)
    nd_ = x.ndim - 2
    _channel_first(layout, nd_, "Deconvolution")
    if kernel and tuple(shape_arg(kernel)) != w.shape[2:]:
        raise ValueError(f"Deconvolution: kernel={kernel} contradicts weight shape {w.shape}")
    b = None if no_bias or bias is None else tensor(bias, x)
    return _nn.conv_transpose(x, w, b, stride=_spatial(stride, nd_, 1, "Deconvolution", "stride"),
                              padding=_spatial(pad, nd_, 0, "Deconvolution", "pad"),
                              output_padding=_spatial(adj, nd_, 0, "Deconvolution", "adj"),
                              dilation=_spatial(dilate, nd_, 1, "Deconvolution", "dilate"), groups=int(num_group))


def Pooling(data: Any, kernel: Any = (), pool_type: str = "max", global_pool: bool = False,  # noqa: N802
            stride: Any = (), pad: Any = (), pooling_convention: str = "valid", count_include_pad: bool = True,
            layout: str | None = None, **kwargs: Any) -> Tensor:
    """MXNet's ``Pooling`` (1, 2 or 3 spatial axes, channel-first): ``pool_type`` 'max', 'avg' or 'sum';
    ``global_pool`` pools each whole plane (output spatial size 1); ``stride`` defaults to 1 and ``pad`` to 0
    per axis (MXNet's operator defaults); ``pooling_convention`` 'valid' (floor) or 'full' (ceil).

    Raises:
        ValueError: an unknown ``pool_type``/``pooling_convention``, or a channel-last layout.
        NotImplementedError: 'lp' pooling, or 'sum' with the 'full' convention.
    """
    x = tensor(data)
    nd_ = x.ndim - 2
    _channel_first(layout, nd_, "Pooling")
    if pool_type not in ("max", "avg", "sum"):
        if pool_type == "lp":
            raise NotImplementedError("Pooling: pool_type='lp' is not supported")
        raise ValueError(f"Pooling: pool_type must be 'max', 'avg' or 'sum', got {pool_type!r}")
    if pooling_convention not in ("valid", "full"):
        raise ValueError(f"Pooling: pooling_convention must be 'valid' or 'full', got {pooling_convention!r}")
    if global_pool:
        axes = tuple(range(2, x.ndim))
        if pool_type == "max":
            return _ops.max(x, axis=axes, keepdims=True)
        return (_ops.mean if pool_type == "avg" else _ops.sum)(x, axis=axes, keepdims=True)
    window = _spatial(kernel, nd_, 1, "Pooling", "kernel")
    strides = _spatial(stride, nd_, 1, "Pooling", "stride")
    padding = _spatial(pad, nd_, 0, "Pooling", "pad")
    ceil = pooling_convention == "full"
    if pool_type == "max":
        return _nn.max_pool(x, window, strides, padding, ceil_mode=ceil)
    if pool_type == "sum" and ceil:
        raise NotImplementedError("Pooling: pool_type='sum' with pooling_convention='full' is not supported")
    out = _nn.avg_pool(x, window, strides, padding, ceil_mode=ceil,
                       count_include_pad=count_include_pad or pool_type == "sum")
    return _ops.multiply(out, float(np.prod(window))) if pool_type == "sum" else out


def UpSampling(*data: Any, scale: int = 2, sample_type: str = "nearest", num_args: int = 1,  # noqa: N802
               multi_input_mode: str = "concat", **kwargs: Any) -> Tensor:
    """MXNet's ``UpSampling`` with ``sample_type='nearest'``: each NCHW input repeated ``scale`` times along H
    and W; several inputs are brought to the first one's output size and concatenated on the channel axis
    (``multi_input_mode='concat'``) or summed ('sum').

    Raises:
        NotImplementedError: ``sample_type='bilinear'`` (use ``Conv2DTranspose`` with ``init.Bilinear()``).
        ValueError: an unknown ``multi_input_mode``.
    """
    if sample_type != "nearest":
        raise NotImplementedError("UpSampling: only sample_type='nearest' is supported; for bilinear use "
                                  "Conv2DTranspose with mx.init.Bilinear()")
    if multi_input_mode not in ("concat", "sum"):
        raise ValueError(f"UpSampling: multi_input_mode must be 'concat' or 'sum', got {multi_input_mode!r}")
    xs = tensors(*data)
    height, width = xs[0].shape[2] * int(scale), xs[0].shape[3] * int(scale)
    ups = []
    for x in xs:
        if height % x.shape[2] or width % x.shape[3]:
            raise ValueError(f"UpSampling: an input of shape {x.shape} cannot be repeated to {height} x {width}")
        fh, fw = height // x.shape[2], width // x.shape[3]
        ups.append(_ops.repeat(_ops.repeat(x, fh, axis=2), fw, axis=3) if (fh, fw) != (1, 1) else x)
    if len(ups) == 1:
        return ups[0]
    if multi_input_mode == "sum":
        out = ups[0]
        for u in ups[1:]:
            out = _ops.add(out, u)
        return out
    return _ops.concat(ups, axis=1)


def depth_to_space(data: Any, block_size: int) -> Tensor:
    """Move blocks of channels to space: ``(N, C, H, W) -> (N, C/b², H*b, W*b)`` (MXNet's DCR order)."""
    x = tensor(data)
    n, c, h, w = x.shape
    b = int(block_size)
    y = _ops.reshape(x, (n, b, b, c // (b * b), h, w))
    return _ops.reshape(_ops.transpose(y, (0, 3, 4, 1, 5, 2)), (n, c // (b * b), h * b, w * b))


def space_to_depth(data: Any, block_size: int) -> Tensor:
    """Move ``b x b`` spatial blocks to channels: ``(N, C, H, W) -> (N, C*b², H/b, W/b)`` (inverse of
    :func:`depth_to_space`)."""
    x = tensor(data)
    n, c, h, w = x.shape
    b = int(block_size)
    y = _ops.reshape(x, (n, c, h // b, b, w // b, b))
    return _ops.reshape(_ops.transpose(y, (0, 3, 5, 1, 2, 4)), (n, c * b * b, h // b, w // b))


def pad(data: Any, mode: str = "constant", pad_width: Any = (), constant_value: float = 0.0) -> Tensor:
    """MXNet's ``pad``: ``pad_width`` gives (before, after) for every axis, flattened (the first two axes' must
    be 0); ``mode`` 'constant' (``constant_value``), 'edge' or 'reflect'. Differentiable.

    Raises:
        ValueError: a ``pad_width`` of the wrong length, or an unknown ``mode``.
    """
    x = tensor(data)
    widths = shape_arg(pad_width)
    if len(widths) != 2 * x.ndim:
        raise ValueError(f"pad: pad_width needs 2 entries per axis ({2 * x.ndim}), got {widths}")
    if mode not in ("constant", "edge", "reflect"):
        raise ValueError(f"pad: mode must be 'constant', 'edge' or 'reflect', got {mode!r}")
    out = x
    for axis in range(x.ndim):
        before, after = widths[2 * axis], widths[2 * axis + 1]
        if not before and not after:
            continue
        n = out.shape[axis]
        if mode == "constant":
            parts = []
            for width in (before, after):
                shape = list(out.shape)
                shape[axis] = width
                parts.append(_full(tuple(shape), constant_value, out.device, out.dtype))
            out = _ops.concat([parts[0], out, parts[1]], axis=axis)
            continue
        pos = np.arange(-before, n + after)
        if mode == "edge":
            src = np.clip(pos, 0, n - 1)
        else:  # reflect about the edge elements, which are not repeated
            period = 2 * (n - 1) if n > 1 else 1
            src = (pos % period) if n > 1 else np.zeros_like(pos)
            src = np.where(src >= n, period - src, src)
        out = _nn.take(out, src, axis=axis)
    return out


def gather_nd(data: Any, indices: Any) -> Tensor:
    """MXNet's ``gather_nd``: ``indices`` ``(M, ...)`` indexes the first M axes of ``data``;
    ``out[y...] = data[indices[0, y...], ..., indices[M-1, y...]]``. Differentiable in ``data``."""
    x = tensor(data)
    idx = np.asarray(indices.asnumpy() if isinstance(indices, Tensor) else indices).astype(np.int64)
    return _ops.getitem(x, tuple(idx))


def batch_take(a: Any, indices: Any) -> Tensor:
    """``out[i] = a[i, indices[i]]`` for a 2-D ``a`` (MXNet's ``batch_take``)."""
    return pick(a, indices, axis=1)


def arange_like(data: Any, start: float = 0.0, step: float = 1.0, repeat: int = 1, axis: int | None = None,
                **kwargs: Any) -> Tensor:
    """``start, start + step, ...`` shaped like ``data`` (or of length ``data.shape[axis]``), each value repeated
    ``repeat`` times, in ``data``'s dtype; no gradient (MXNet's ``arange_like``)."""
    x = tensor(data)
    count = x.size if axis is None else x.shape[axis]
    values = (start + step * np.arange(-(-count // int(repeat)))).repeat(int(repeat))[:count]
    shape = x.shape if axis is None else (count,)
    return _array(values.reshape(shape), x.device, x.dtype)


def shape_array(data: Any) -> Tensor:
    """The shape of ``data`` as a 1-D int64 array."""
    x = tensor(data)
    return _array(np.asarray(x.shape, dtype=np.int64), x.device, np.int64)


def size_array(data: Any) -> Tensor:
    """The number of elements of ``data`` as a 1-element int64 array."""
    x = tensor(data)
    return _array(np.asarray([x.size], dtype=np.int64), x.device, np.int64)


def argmax_channel(data: Any) -> Tensor:
    """Index of the maximum along axis 1, as float32 (MXNet's ``argmax_channel``)."""
    return argmax(data, axis=1)


def diag(data: Any, k: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The ``k``-th diagonal of a matrix (of axes ``axis1``, ``axis2``), or a square matrix with a 1-D input on
    its ``k``-th diagonal. Differentiable."""
    x = tensor(data)
    if x.ndim == 1:  # a square matrix with x on diagonal k: a differentiable gather from [0, x...]
        n = x.shape[0] + _b.abs(k)
        rows = np.arange(x.shape[0]) + _b.max(-k, 0)
        cols = np.arange(x.shape[0]) + _b.max(k, 0)
        src = np.zeros(n * n, dtype=np.int64)
        src[rows * n + cols] = np.arange(1, x.shape[0] + 1)
        padded = _ops.concat([_full((1,), 0, x.device, x.dtype), x], axis=0)
        return _ops.reshape(_nn.take(padded, src, axis=0), (n, n))
    a1, a2 = axis1 % x.ndim, axis2 % x.ndim
    perm = tuple(i for i in range(x.ndim) if i not in (a1, a2)) + (a1, a2)
    moved = _ops.transpose(x, perm) if perm != tuple(range(x.ndim)) else x
    rows, cols = moved.shape[-2], moved.shape[-1]
    i = np.arange(_b.max(0, -k), _b.min(rows, cols - k))
    return _ops.getitem(moved, (Ellipsis, i, i + k))


def add_n(*args: Any, **kwargs: Any) -> Tensor:
    """The elementwise sum of every argument (MXNet's ``add_n``/``ElementWiseSum``)."""
    items = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    xs = tensors(*items)
    out = xs[0]
    for x in xs[1:]:
        out = _ops.add(out, x)
    return out if len(xs) > 1 else identity(out)


ElementWiseSum = add_n


def split_v2(ary: Any, indices_or_sections: Any, axis: int = 0, squeeze_axis: bool = False) -> Any:
    """Split along ``axis`` into equal sections (an int) or at the given indices (a tuple), as MXNet's
    ``split_v2``; one part is returned bare."""
    x = tensor(ary)
    n = x.shape[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if n % sections:
            raise ValueError(f"split_v2: axis {axis} of length {n} does not split into {sections} equal sections")
        bounds = [i * (n // sections) for i in range(sections + 1)]
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    parts = [_ops.slice_axis(x, axis, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    if squeeze_axis:
        parts = [_ops.squeeze(p, axis) for p in parts]
    return parts[0] if len(parts) == 1 else parts


def log_sigmoid(data: Any) -> Tensor:
    """``log(sigmoid(x))``, computed stably."""
    return _ACT["log_sigmoid"](tensor(data))


def mish(data: Any) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _ACT["mish"](tensor(data))


def softsign(data: Any) -> Tensor:
    """``x / (1 + |x|)``."""
    return _ACT["softsign"](tensor(data))


def hard_sigmoid(data: Any, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """``clip(alpha * x + beta, 0, 1)`` (MXNet's ``hard_sigmoid``)."""
    return _ops.clip(_ops.add(_ops.multiply(tensor(data), alpha), beta), 0.0, 1.0)


def rcbrt(data: Any) -> Tensor:
    """``1 / cbrt(x)``."""
    return _ops.reciprocal(_ops.cbrt(tensor(data)))


def degrees(data: Any) -> Tensor:
    """Radians to degrees."""
    return _ops.multiply(tensor(data), 180.0 / np.pi)


def radians(data: Any) -> Tensor:
    """Degrees to radians."""
    return _ops.multiply(tensor(data), np.pi / 180.0)


def _axis_reduction(fn: Any) -> Any:
    def reduce(data: Any, axis: Any = None, keepdims: bool = False, **kwargs: Any) -> Tensor:
        return fn(data, axis=axis, keepdims=keepdims)

    reduce.__doc__ = fn.__doc__
    return reduce


max_axis = _axis_reduction(max)
min_axis = _axis_reduction(min)
nanprod = prod
Cast = cast


def Reshape(data: Any, shape: Any = None, reverse: bool = False, **kwargs: Any) -> Tensor:  # noqa: N802
    """MXNet's ``Reshape`` (the operator's old name): :func:`reshape`."""
    return reshape(data, shape, reverse)


def div_sqrt_dim(data: Any) -> Tensor:
    """``data / sqrt(data.shape[-1])`` (MXNet's ``contrib.div_sqrt_dim``, used to scale attention scores)."""
    x = tensor(data)
    return _ops.divide(x, float(np.sqrt(x.shape[-1])))


def _resize_matrix(n_in: int, n_out: int, align_corners: bool) -> np.ndarray:
    """The ``(n_out, n_in)`` matrix of 1-D linear interpolation, with MXNet's source-index rule
    (``bilinear_resize-inl.h``: corners aligned, or pixel centres with negative sources clamped to 0)."""
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = scale * np.arange(n_out)
    else:
        src = np.maximum((n_in / n_out) * (np.arange(n_out) + 0.5) - 0.5, 0.0)
    low = np.floor(src).astype(np.int64)
    frac = src - low
    high = np.where(low < n_in - 1, low + 1, low)
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), low), 1 - frac)
    np.add.at(m, (np.arange(n_out), high), frac)
    return m


def BilinearResize2D(data: Any, like: Any = None, height: int = 1, width: int = 1,  # noqa: N802
                     scale_height: float | None = None, scale_width: float | None = None, mode: str = "size",
                     align_corners: bool = True, **kwargs: Any) -> Tensor:
    """MXNet's ``contrib.BilinearResize2D`` of an NCHW batch: to ``(height, width)``, to ``scale_height`` /
    ``scale_width`` times the input size, or (``mode='like'``) to ``like``'s spatial size. Two products with
    interpolation matrices, so it is differentiable in ``data``.

    Raises:
        NotImplementedError: a ``mode`` other than 'size' and 'like'.
    """
    x = tensor(data)
    in_h, in_w = x.shape[2], x.shape[3]
    if mode == "like":
        out_h, out_w = tensor(like).shape[2:4]
    elif mode == "size":
        out_h = int(in_h * scale_height) if scale_height is not None else int(height)
        out_w = int(in_w * scale_width) if scale_width is not None else int(width)
    else:
        raise NotImplementedError(f"BilinearResize2D: mode {mode!r} is not supported ('size' and 'like' are)")
    rows = _array(_resize_matrix(in_h, out_h, align_corners), x.device, x.dtype)
    cols = _array(_resize_matrix(in_w, out_w, align_corners).T, x.device, x.dtype)
    return _ops.matmul(_ops.matmul(rows, x), cols)


def interleaved_matmul_selfatt_qk(queries_keys_values: Any, heads: int, **kwargs: Any) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_selfatt_qk``: see :mod:`mxlite.ops.attention`."""
    return _attention.interleaved_matmul_selfatt_qk(tensor(queries_keys_values), heads)


def interleaved_matmul_selfatt_valatt(queries_keys_values: Any, attention: Any, heads: int, **kwargs: Any) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_selfatt_valatt``: see :mod:`mxlite.ops.attention`."""
    return _attention.interleaved_matmul_selfatt_valatt(*tensors(queries_keys_values, attention), heads)


def interleaved_matmul_encdec_qk(queries: Any, keys_values: Any, heads: int, **kwargs: Any) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_encdec_qk``: see :mod:`mxlite.ops.attention`."""
    return _attention.interleaved_matmul_encdec_qk(*tensors(queries, keys_values), heads)


def interleaved_matmul_encdec_valatt(keys_values: Any, attention: Any, heads: int, **kwargs: Any) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_encdec_valatt``: see :mod:`mxlite.ops.attention`."""
    return _attention.interleaved_matmul_encdec_valatt(*tensors(keys_values, attention), heads)



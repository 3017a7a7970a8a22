"""Primitive tensor operations, each with its backward beside its forward.

Every public function here takes and returns :class:`Tensor` objects, works on NumPy or
CuPy data alike (through the device's ``xp``), broadcasts like NumPy, and, inside
``autograd.record()``, records a closure computing its inputs' gradients. Layer-level ops
(convolution, pooling, normalisation, softmax, dropout, embedding) live in ``nn_ops.py``.

An error raised inside an op names the op and its inputs' dtypes, shapes and devices. These ops are also
``mx.ops``'s own names (``mx.ops.add``, ``mx.ops.reshape``): the package re-exports them.
"""

from __future__ import annotations

import builtins as _b
import functools
import numbers
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import device as _device
from ..autograd.tensor import NDTensor, Tensor, describe, index_key, op_result, unbroadcast
from ..device import blas
from ..device.copy import copy_between
from ..profiler import hooks as _profiling
from .special import erf_array

__all__ = [
    "add", "subtract", "multiply", "divide", "power", "negative", "matmul", "dot",
    "reshape", "transpose", "swapaxes", "expand_dims", "squeeze", "broadcast_to", "flatten",
    "concat", "concatenate", "stack", "split", "getitem",
    "sum", "mean", "max", "min",
    "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu", "abs", "clip",
    "maximum", "minimum", "where",
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "argmax", "argmin", "one_hot", "to_device", "astype", "zeros_like", "ones_like",
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh", "arctanh",
    "log1p", "expm1", "log2", "log10", "reciprocal", "rsqrt", "cbrt", "erf", "sign", "floor", "ceil", "trunc",
    "fix", "rint", "round", "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or",
    "logical_xor", "mod", "arctan2", "hypot", "prod", "norm", "var", "std", "logsumexp", "cumsum", "tile",
    "repeat", "flip", "slice_axis", "slice", "take_along_axis", "argsort", "sort", "batch_dot",
    "tensordot_last_first", "numpy_dot", "moveaxis", "as_tensor",
    # the mx.nd face: MXNet 1.x's reshape codes, results never 0-d, comparisons and logic giving 1/0
    "nd_reshape_shape", "nd_shape", "nd_equal", "nd_not_equal", "nd_greater", "nd_greater_equal", "nd_less",
    "nd_less_equal", "nd_logical_and", "nd_logical_or", "nd_logical_xor", "nd_logical_not",
]


def _check_float(name: str, x: Tensor) -> None:
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} needs a floating-point input, got {x.dtype}; cast it with .astype('float32')")


def _run(name: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Run primitive ``fn`` on the device of its tensors, naming ``name`` in any error."""
    tensors = _tensors_in(args)
    if not tensors:
        raise TypeError(f"{name}: expected at least one Tensor argument, got {[describe(a) for a in args]}")
    dev = tensors[0]._device
    for t in tensors[1:]:
        if t._device is not dev and t._device != dev:
            raise ValueError(
                f"{name}: inputs live on different devices ({', '.join(describe(x) for x in tensors)}); "
                "move them with .to(device) first"
            )
    try:
        if dev.is_current():  # nothing to make current: skip the context (a third of an op's cost on a CPU)
            return fn(*args, **kwargs)
        with dev.use():
            return fn(*args, **kwargs)
    except (ValueError, TypeError, IndexError) as exc:
        raise _named_error(name, exc, tensors) from exc


def _named_error(name: str, exc: Exception, tensors: list[Tensor]) -> Exception:
    """``exc`` again, its message naming the op and its inputs (once: an error named inside is passed on)."""
    if getattr(exc, "_mx_named", False):
        return exc
    msg = f"{name}: {exc} (inputs: {', '.join(describe(t) for t in tensors)})"
    try:
        new = type(exc)(msg)
    except Exception:  # an exception type whose constructor takes other arguments
        new = ValueError(msg)
    new._mx_named = True  # type: ignore[attr-defined]
    return new


def _op(name: str) -> Callable:
    """Decorate a primitive: check its tensors share a device, run there, name it in errors.

    The node a recorded call makes keeps the call (``fn``, ``args``, ``kwargs``): the op's
    differentiable backward (:mod:`.higher_order`) reads the op's arguments from it.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            x = args[0] if len(args) == 1 and not kwargs else None
            if _profiling.recording:  # mx.profiler runs: time the call (when off, this test is all it costs)
                out = _profiling.record_op(name, _run, fn, args, kwargs)
            elif x is not None and isinstance(x, Tensor) and x._device.device_type == "cpu":
                try:  # the common case, inlined: one tensor on a CPU device (nothing to check or enter)
                    out = fn(x)
                except (ValueError, TypeError, IndexError) as exc:
                    raise _named_error(name, exc, [x]) from exc
            else:
                out = _run(name, fn, args, kwargs)
            node = getattr(out, "_node", None)  # None unless recorded (or a tuple of results)
            if node is not None and node.call is None and node.op == name:
                node.call = (fn, args, kwargs)
            if out.__class__ is NDTensor and out._data.ndim == 0 and not any(out is a for a in args):
                return nd_shape(out)  # mx.nd has no 0-d arrays (MXNet 1.x): x[0] of a 1-D array is (1,)
            return out

        return wrapper

    return decorate


def _tensors_in(args: Sequence[Any]) -> list[Tensor]:
    found: list[Tensor] = []
    for a in args:
        if isinstance(a, Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, Tensor))
    return found


def as_tensor(x: Any, like: Tensor) -> Tensor:
    """Coerce a scalar or array operand to a constant tensor on ``like``'s device.

    A number (Python's, a NumPy scalar such as ``np.float64(2)`` or ``np.sqrt(4)``, or a 0-d NumPy array)
    is weakly typed, as MXNet's scalar operands are: it takes ``like``'s dtype unless its kind is wider
    (:func:`_scalar_dtype`), so ``float32_array / np.sqrt(4)`` stays float32. A NumPy array of one or more
    dimensions keeps its dtype.
    """
    if isinstance(x, Tensor):
        return x
    xp = like._device.xp
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]  # a 0-d NumPy array is a number
    if isinstance(x, (numbers.Number, np.generic)):
        with like._device.use():
            return Tensor(xp.asarray(x, dtype=_scalar_dtype(like.dtype, x)), like._device)
    if isinstance(x, np.ndarray):
        return Tensor(copy_between(x, _device.cpu(0), like._device, copy=False), like._device)
    raise TypeError(f"unsupported operand type {type(x).__name__}")


def _scalar_dtype(dtype: np.dtype, x: Any) -> np.dtype:
    """The dtype a scalar operand ``x`` (Python's or NumPy's) takes beside an array of ``dtype``.

    The array's own dtype (MXNet's scalar operands and NumPy 2's rule for Python scalars: float32 stays
    float32, int32 stays int32), except where the scalar's kind is wider: a float beside an integer or
    bool array is float32 (MXNet's default float), an integer beside a bool array is int64 (NumPy's:
    ``bool_array * 3`` is 3 where true). A bool scalar stays bool.
    """
    if isinstance(x, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating):
        return dtype
    if isinstance(x, (float, np.floating)):
        return np.dtype(np.float32)
    if dtype == np.bool_:
        return np.dtype(np.int64)
    return dtype


def _binary_operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    if isinstance(a, Tensor):
        return a, as_tensor(b, a)
    return as_tensor(a, b), b


# -- arithmetic ------------------------------------------------------------------------------
def _binary(name: str, a: Any, b: Any, fwd: Callable, bwd: Callable) -> Tensor:
    """Run a broadcasting binary op; ``bwd(g, x, y, out)`` gives both input gradients."""
    if not isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            raise TypeError(f"{name}: expected at least one Tensor argument, got {type(a).__name__}, "
                            f"{type(b).__name__}")
        a = as_tensor(a, b)
    elif not isinstance(b, Tensor):
        b = as_tensor(b, a)
    dev = a._device
    if _profiling.recording:  # mx.profiler runs: time the call (when off, this test is all it costs)
        return _profiling.record_op(name, _run, _binary_core, (name, a, b, fwd, bwd), {})
    if b._device is not dev and b._device != dev or dev.device_type != "cpu":
        return _run(name, _binary_core, (name, a, b, fwd, bwd), {})  # checks devices, enters the GPU's
    try:  # the common case, inlined: two tensors on one CPU device
        return _binary_core(name, a, b, fwd, bwd)
    except (ValueError, TypeError, IndexError) as exc:
        raise _named_error(name, exc, [a, b]) from exc


def _binary_core(name: str, a: Tensor, b: Tensor, fwd: Callable, bwd: Callable) -> Tensor:
    x, y = a._data, b._data
    out = fwd(x, y)

    def backward(g: Any) -> tuple[Any, Any]:
        ga, gb = bwd(g, x, y, out)
        return (
            None if ga is None else unbroadcast(ga, x.shape),
            None if gb is None else unbroadcast(gb, y.shape),
        )

    return op_result(name, out, a._device, (a, b), backward)


def add(a: Any, b: Any) -> Tensor:
    """Elementwise ``a + b`` with broadcasting."""
    return _binary("add", a, b, lambda x, y: x + y, lambda g, x, y, o: (g, g))


def subtract(a: Any, b: Any) -> Tensor:
    """Elementwise ``a - b`` with broadcasting."""
    return _binary("subtract", a, b, lambda x, y: x - y, lambda g, x, y, o: (g, -g))


def multiply(a: Any, b: Any) -> Tensor:
    """Elementwise ``a * b`` with broadcasting."""
    return _binary("multiply", a, b, lambda x, y: x * y, lambda g, x, y, o: (g * y, g * x))


def divide(a: Any, b: Any) -> Tensor:
    """Elementwise ``a / b`` with broadcasting."""
    return _binary("divide", a, b, lambda x, y: x / y, lambda g, x, y, o: (g / y, -g * o / y))


def power(a: Any, b: Any) -> Tensor:
    """Elementwise ``a ** b``; the gradient w.r.t. ``b`` uses ``log(a)`` (needs a > 0)."""

    def bwd(g: Any, x: Any, y: Any, o: Any) -> tuple[Any, Any]:
        ga = g * y * x ** (y - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            gb = g * o * _xp(x).log(_xp(x).where(x > 0, x, 1))
        return ga, gb

    return _binary("power", a, b, lambda x, y: x**y, bwd)


def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise maximum; ties send the gradient to ``a``."""
    return _binary("maximum", a, b, lambda x, y: _xp(x).maximum(x, y),
                   lambda g, x, y, o: (g * (x >= y), g * (x < y)))


def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise minimum; ties send the gradient to ``a``."""
    return _binary("minimum", a, b, lambda x, y: _xp(x).minimum(x, y),
                   lambda g, x, y, o: (g * (x <= y), g * (x > y)))


def _xp(arr: Any) -> Any:
    return np if isinstance(arr, np.ndarray | np.generic) else _device.device_of(arr).xp


def _unary(name: str, x: Tensor, fwd: Callable, bwd: Callable) -> Tensor:
    """``bwd(g, x_data, out_data)`` gives the input gradient."""
    data = x._data
    out = fwd(data)
    return op_result(name, out, x._device, (x,), lambda g: (bwd(g, data, out),))


@_op("negative")
def negative(x: Tensor) -> Tensor:
    """Elementwise ``-x``."""
    return _unary("negative", x, lambda d: -d, lambda g, d, o: -g)


@_op("exp")
def exp(x: Tensor) -> Tensor:
    """Elementwise ``e ** x``."""
    return _unary("exp", x, x._device.xp.exp, lambda g, d, o: g * o)


@_op("log")
def log(x: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return _unary("log", x, x._device.xp.log, lambda g, d, o: g / d)


@_op("sqrt")
def sqrt(x: Tensor) -> Tensor:
    """Elementwise square root."""
    return _unary("sqrt", x, x._device.xp.sqrt, lambda g, d, o: g / (2 * o))


@_op("square")
def square(x: Tensor) -> Tensor:
    """Elementwise ``x * x``."""
    return _unary("square", x, lambda d: d * d, lambda g, d, o: 2 * g * d)


@_op("tanh")
def tanh(x: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return _unary("tanh", x, x._device.xp.tanh, lambda g, d, o: g * (1 - o * o))


def _sigmoid_data(xp: Any, d: Any) -> Any:
    # Two-branch form: never evaluates exp of a large positive number.
    e = xp.exp(-xp.abs(d))
    return xp.where(d >= 0, 1 / (1 + e), e / (1 + e)).astype(d.dtype, copy=False)


@_op("sigmoid")
def sigmoid(x: Tensor) -> Tensor:
    """Elementwise logistic function ``1 / (1 + e^-x)``, computed without overflow."""
    xp = x._device.xp
    return _unary("sigmoid", x, lambda d: _sigmoid_data(xp, d), lambda g, d, o: g * o * (1 - o))


@_op("relu")
def relu(x: Tensor) -> Tensor:
    """Elementwise ``max(x, 0)``; the gradient at 0 is 0."""
    xp = x._device.xp
    return _unary("relu", x, lambda d: xp.maximum(d, 0), lambda g, d, o: g * (d > 0))


@_op("abs")
def abs(x: Tensor) -> Tensor:  # noqa: A001 - NumPy's name
    """Elementwise absolute value; the gradient at 0 is 0."""
    xp = x._device.xp
    return _unary("abs", x, xp.abs, lambda g, d, o: g * xp.sign(d))


@_op("clip")
def clip(x: Tensor, a_min: float | None, a_max: float | None) -> Tensor:
    """Clamp to ``[a_min, a_max]``; the gradient is zero where the value was clamped."""
    xp = x._device.xp

    def bwd(g: Any, d: Any, o: Any) -> Any:
        mask = xp.ones(d.shape, dtype=bool)
        if a_min is not None:
            mask &= d >= a_min
        if a_max is not None:
            mask &= d <= a_max
        return g * mask

    return _unary("clip", x, lambda d: xp.clip(d, a_min, a_max), bwd)


@_op("where")
def where(cond: Tensor, x: Any, y: Any) -> Tensor:
    """Elementwise ``x if cond else y`` with broadcasting (no gradient to ``cond``)."""
    x, y = _binary_operands(x, y)
    xp = cond._device.xp
    c = cond._data.astype(bool)
    out = xp.where(c, x._data, y._data)
    xs, ys = x.shape, y.shape

    def backward(g: Any) -> tuple[Any, Any, Any]:
        zero = xp.zeros((), dtype=g.dtype)
        return None, unbroadcast(xp.where(c, g, zero), xs), unbroadcast(xp.where(c, zero, g), ys)

    return op_result("where", out, cond._device, (cond, x, y), backward)


# -- linear algebra --------------------------------------------------------------------------
def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product with NumPy's ``matmul`` rules: the last two axes are matrices, batch axes broadcast; a 1-D
    ``a`` is a row vector and a 1-D ``b`` a column vector, whose added axis is dropped from the result (two
    vectors give their inner product, a 0-D tensor). One operand may be a NumPy array (moved to the other's device).

    Raises:
        ValueError: a 0-D operand (use ``multiply``), inner dimensions that differ, or batch axes that do not
            broadcast; the message names the operand and gives both shapes.
        TypeError: neither operand is a Tensor.
    """
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"matmul: expected at least one Tensor operand, got {type(a).__name__} and {type(b).__name__}")
    a, b = _binary_operands(a, b)
    for name, t in (("a", a), ("b", b)):
        if t.ndim == 0:
            raise ValueError(f"matmul: operand {name} is 0-D (a scalar, shapes {a.shape} and {b.shape}); matmul "
                             "needs operands with at least 1 dimension: use multiply for a scalar")
    if a.ndim >= 2 and b.ndim >= 2:
        return _matmul(a, b)
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != inner_b:
        raise ValueError(f"matmul: inner dimensions differ: a has shape {a.shape} ({a.shape[-1]} columns), "
                         f"b has shape {b.shape} ({inner_b} rows)")
    out = _matmul(reshape(a, (1, a.shape[0])) if a.ndim == 1 else a,
                  reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b)
    shape = out.shape[:-2] + (() if a.ndim == 1 else out.shape[-2:-1]) + (() if b.ndim == 1 else out.shape[-1:])
    return reshape(out, shape)


@_op("matmul")
def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """:func:`matmul` of two operands of at least 2 dimensions."""
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"inner dimensions differ: a has shape {a.shape} ({a.shape[-1]} columns), "
                         f"b has shape {b.shape} ({b.shape[-2]} rows)")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"batch axes {a.shape[:-2]} of a and {b.shape[:-2]} of b do not broadcast "
                         f"(shapes {a.shape} and {b.shape})") from None
    xp = a._device.xp
    x, y = a._data, b._data
    out = blas.matmul(x, y)

    def backward(g: Any) -> tuple[Any, Any]:
        ga = blas.matmul(g, xp.swapaxes(y, -1, -2))
        gb = blas.matmul(xp.swapaxes(x, -1, -2), g)
        return unbroadcast(ga, x.shape), unbroadcast(gb, y.shape)

    return op_result("matmul", out, a._device, (a, b), backward)


dot = matmul


# -- shape -----------------------------------------------------------------------------------
@_op("reshape")
def reshape(x: Tensor, *shape: Any) -> Tensor:
    """View with a new shape (one entry may be -1)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    in_shape = x.shape
    out = x._data.reshape(shape)
    return op_result("reshape", out, x._device, (x,), lambda g: (g.reshape(in_shape),))


def nd_reshape_shape(in_shape: tuple[int, ...], spec: Sequence[int], reverse: bool = False) -> tuple[int, ...]:
    """The target shape of MXNet 1.x's ``reshape`` codes: 0 copy this dim, -1 infer, -2 copy all remaining,
    -3 merge the next two input dims, -4 split one input dim into the next two entries (one may be -1).

    Raises:
        ValueError: a spec that does not fit ``in_shape`` (names both).
    """
    spec = list(spec)
    if reverse:
        if -4 in spec:
            raise ValueError(f"reshape: reverse=True with the split code -4 is not supported, got {tuple(spec)}")
        return tuple(reversed(nd_reshape_shape(tuple(reversed(in_shape)), list(reversed(spec)))))
    out: list[int] = []
    i = 0
    k = 0
    infer = -1
    try:
        while k < len(spec):
            code = spec[k]
            if code > 0:
                out.append(code)
                i += 1
            elif code == 0:
                out.append(in_shape[i])
                i += 1
            elif code == -1:
                infer = len(out)
                out.append(-1)
                i += 1
            elif code == -2:
                out.extend(in_shape[i:])
                i = len(in_shape)
            elif code == -3:
                out.append(in_shape[i] * in_shape[i + 1])
                i += 2
            elif code == -4:
                a, b = spec[k + 1], spec[k + 2]
                n = in_shape[i]
                a = n // b if a == -1 else a
                b = n // a if b == -1 else b
                if a * b != n:
                    raise ValueError(f"-4 splits {n} into {spec[k + 1]} x {spec[k + 2]}")
                out.extend([a, b])
                i += 1
                k += 2
            else:
                raise ValueError(f"unknown code {code}")
            k += 1
    except IndexError:
        raise ValueError(f"reshape: shape codes {tuple(spec)} need more axes than the input's {in_shape}") from None
    total = int(np.prod(in_shape))
    if infer >= 0:
        known = int(np.prod([n for j, n in enumerate(out) if j != infer]))
        out[infer] = total // known if known else 0
    if int(np.prod(out)) != total:
        raise ValueError(f"reshape: cannot reshape {in_shape} ({total} elements) with codes {tuple(spec)} "
                         f"(gives {tuple(out)})")
    return tuple(out)


def flatten(x: Tensor) -> Tensor:
    """Collapse every axis but the first: ``(N, ...) -> (N, prod(...))``."""
    return reshape(x, (x.shape[0], -1) if x.ndim else (1, 1))


@_op("transpose")
def transpose(x: Tensor, *axes: Any) -> Tensor:
    """Permute axes (reverse them when none are given)."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    # Negative axes made positive, else argsort would give a wrong inverse; bad ones still raise below.
    perm = tuple(int(a) + x.ndim if int(a) < 0 else int(a) for a in axes) if axes else tuple(reversed(range(x.ndim)))
    inverse = tuple(np.argsort(perm))
    out = x._data.transpose(perm)
    return op_result("transpose", out, x._device, (x,), lambda g: (g.transpose(inverse),))


def swapaxes(x: Tensor, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes."""
    perm = list(range(x.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(x, tuple(perm))


def expand_dims(x: Tensor, axis: int) -> Tensor:
    """Insert an axis of length 1 at ``axis``."""
    shape = list(x.shape)
    axis = axis if axis >= 0 else x.ndim + 1 + axis
    shape.insert(axis, 1)
    return reshape(x, tuple(shape))


def squeeze(x: Tensor, axis: int | tuple[int, ...] | None = None) -> Tensor:
    """Remove axes of length 1 (all of them, or those in ``axis``)."""
    return reshape(x, np.squeeze(np.empty(x.shape, dtype=np.bool_), axis=axis).shape)


@_op("broadcast_to")
def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Broadcast to ``shape`` (a copy)."""
    xp = x._device.xp
    in_shape = x.shape
    out = xp.array(xp.broadcast_to(x._data, tuple(shape)))
    return op_result("broadcast_to", out, x._device, (x,), lambda g: (unbroadcast(g, in_shape),))


@_op("getitem")
def getitem(x: Tensor, key: Any) -> Tensor:
    """NumPy indexing (basic and advanced); repeated indices accumulate in the gradient."""
    xp = x._device.xp
    key = index_key(key, x._device)
    data = x._data
    out = data[key]
    if not isinstance(out, type(data)):  # NumPy returns scalars for full integer indexing
        out = xp.asarray(out)

    def backward(g: Any) -> tuple[Any]:
        gx = xp.zeros(data.shape, dtype=g.dtype)
        _scatter_add(xp, gx, key, g)
        return (gx,)

    return op_result("getitem", out, x._device, (x,), backward)


def _scatter_add(xp: Any, target: Any, key: Any, values: Any) -> None:
    if xp is np:
        np.add.at(target, key, values)
    else:
        import cupyx  # noqa: PLC0415 - only on GPU

        cupyx.scatter_add(target, key, values)


def _tensor_list(name: str, tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` as a non-empty list of Tensors; the error names the offending position."""
    if isinstance(tensors, Tensor) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"{name} expects a list or tuple of Tensors, got {type(tensors).__name__}")
    items = list(tensors)
    if not items:
        raise ValueError(f"{name} needs at least one tensor, got none")
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: entry {i} is a {type(t).__name__}, not a Tensor; "
                            "convert it with mx.array(...) first")
    return items


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis (MXNet's ``concat(*arrays, dim=)``, NumPy's axis).

    Raises:
        TypeError: ``tensors`` is not a list/tuple of Tensors (names the entry).
        ValueError: an empty list, or shapes that differ off ``axis`` (lists every input).
    """
    return _concat(_tensor_list("concat", tensors), axis)


concatenate = concat


@_op("concat")
def _concat(tensors: list[Tensor], axis: int) -> Tensor:
    xp = tensors[0]._device.xp
    out = xp.concatenate([t._data for t in tensors], axis=axis)
    bounds = [int(b) for b in np.cumsum([t.shape[axis] for t in tensors])[:-1]]  # host ints, for any xp

    def backward(g: Any) -> list[Any]:
        return xp.split(g, bounds, axis=axis)

    return op_result("concat", out, tensors[0]._device, tuple(tensors), backward)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join same-shaped tensors along a new axis.

    Raises:
        TypeError: ``tensors`` is not a list/tuple of Tensors (names the entry).
        ValueError: an empty list, or tensors of different shapes (lists every input).
    """
    return _stack(_tensor_list("stack", tensors), axis)


@_op("stack")
def _stack(tensors: list[Tensor], axis: int) -> Tensor:
    xp = tensors[0]._device.xp
    out = xp.stack([t._data for t in tensors], axis=axis)
    n = len(tensors)

    def backward(g: Any) -> list[Any]:
        return [xp.take(g, i, axis=axis) for i in range(n)]

    return op_result("stack", out, tensors[0]._device, tuple(tensors), backward)


def split(x: Tensor, num_outputs: int, axis: int = 0) -> list[Tensor]:
    """Split into ``num_outputs`` equal parts along ``axis`` (each a differentiable slice)."""
    n = x.shape[axis]
    if n % num_outputs:
        raise ValueError(f"split: axis {axis} of length {n} is not divisible into {num_outputs} parts")
    step = n // num_outputs
    index: list[Any] = [_b.slice(None)] * x.ndim
    parts = []
    for i in range(num_outputs):
        index[axis] = _b.slice(i * step, (i + 1) * step)
        parts.append(getitem(x, tuple(index)))
    return parts


# -- reductions ------------------------------------------------------------------------------
def _norm_axis(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(a % ndim if ndim else a for a in axis)


def _expand_to(g: Any, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> Any:
    if not keepdims:
        kept = [1 if i in axes else n for i, n in enumerate(shape)]
        g = g.reshape(kept)
    return g


@_op("sum")
def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (all axes when None)."""
    xp = x._device.xp
    axes = _norm_axis(axis, x.ndim)
    shape = x.shape
    out = xp.asarray(x._data.sum(axis=axes, keepdims=keepdims))
    return op_result("sum", out, x._device, (x,),
                     lambda g: (xp.broadcast_to(_expand_to(g, shape, axes, keepdims), shape).copy(),))


@_op("mean")
def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (all axes when None)."""
    xp = x._device.xp
    axes = _norm_axis(axis, x.ndim)
    shape = x.shape
    count = int(np.prod([shape[a] for a in axes])) if axes else 1
    out = xp.asarray(x._data.mean(axis=axes, keepdims=keepdims))

    def backward(g: Any) -> tuple[Any]:
        return (xp.broadcast_to(_expand_to(g, shape, axes, keepdims) / count, shape).astype(g.dtype),)

    return op_result("mean", out, x._device, (x,), backward)


def _extreme(name: str, reduce: str, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    xp = x._device.xp
    axes = _norm_axis(axis, x.ndim)
    data = x._data
    out = xp.asarray(getattr(data, reduce)(axis=axes, keepdims=keepdims))
    shape = x.shape

    def backward(g: Any) -> tuple[Any]:
        kept = _expand_to(out, shape, axes, keepdims)
        mask = data == kept
        # Ties share the gradient equally, so the sum of the gradient is preserved.
        count = mask.sum(axis=axes, keepdims=True)
        return ((_expand_to(g, shape, axes, keepdims) * mask / count).astype(g.dtype),)

    return op_result(name, out, x._device, (x,), backward)


@_op("max")
def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; tied maxima share the gradient equally."""
    return _extreme("max", "max", x, axis, keepdims)


@_op("min")
def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis``; tied minima share the gradient equally."""
    return _extreme("min", "min", x, axis, keepdims)


# -- non-differentiable ----------------------------------------------------------------------
def _constant(name: str, fn: Callable) -> Callable:
    @_op(name)
    def op(a: Any, b: Any) -> Tensor:
        a, b = _binary_operands(a, b)
        return Tensor(fn(a._data, b._data), a._device)

    op.__name__ = name
    op.__doc__ = f"Elementwise ``{name}`` comparison as a bool tensor (no gradient)."
    return op


equal = _constant("equal", lambda x, y: x == y)
not_equal = _constant("not_equal", lambda x, y: x != y)
greater = _constant("greater", lambda x, y: x > y)
greater_equal = _constant("greater_equal", lambda x, y: x >= y)
less = _constant("less", lambda x, y: x < y)
less_equal = _constant("less_equal", lambda x, y: x <= y)


@_op("argmax")
def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the maximum along ``axis`` (int64, no gradient)."""
    out = x._device.xp.argmax(x._data, axis=axis)
    if keepdims and axis is not None:
        out = x._device.xp.expand_dims(out, axis)
    return Tensor(x._device.xp.asarray(out), x._device)


@_op("argmin")
def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the minimum along ``axis`` (int64, no gradient)."""
    out = x._device.xp.argmin(x._data, axis=axis)
    if keepdims and axis is not None:
        out = x._device.xp.expand_dims(out, axis)
    return Tensor(x._device.xp.asarray(out), x._device)


@_op("one_hot")
def one_hot(indices: Tensor, depth: int, on_value: float = 1.0, off_value: float = 0.0,
            dtype: Any = np.float32) -> Tensor:
    """``(..., depth)`` tensor with ``on_value`` at each index (no gradient)."""
    xp = indices._device.xp
    idx = indices._data.astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= depth):
        raise ValueError(f"indices must lie in [0, {depth}), got range [{int(idx.min())}, {int(idx.max())}]")
    out = xp.full(idx.shape + (depth,), off_value, dtype=dtype)
    xp.put_along_axis(out, idx[..., None], on_value, axis=-1)
    return Tensor(out, indices._device)


def zeros_like(x: Tensor) -> Tensor:
    """Zeros with ``x``'s shape, dtype and device."""
    with x._device.use():
        return Tensor(x._device.xp.zeros_like(x._data), x._device)


def ones_like(x: Tensor) -> Tensor:
    """Ones with ``x``'s shape, dtype and device."""
    with x._device.use():
        return Tensor(x._device.xp.ones_like(x._data), x._device)


# -- copies ----------------------------------------------------------------------------------
def to_device(x: Tensor, device: _device.Device) -> Tensor:
    """Copy to ``device`` (``x`` itself when already there); the gradient flows back."""
    if device == x._device:
        return x
    src = x._device
    out = copy_between(x._data, src, device, copy=True)
    return op_result("to_device", out, device, (x,), lambda g: (copy_between(g, device, src, copy=True),))


@_op("astype")
def astype(x: Tensor, dtype: Any, copy: bool = True) -> Tensor:
    """Cast to ``dtype``; the gradient is cast back to ``x``'s dtype."""
    dtype = np.dtype(dtype)
    if dtype == x.dtype and not copy:
        return x
    in_dtype = x.dtype
    out = x._data.astype(dtype)
    return op_result("astype", out, x._device, (x,), lambda g: (g.astype(in_dtype),))


# -- more elementwise math (NumPy's names) -----------------------------------------------------
def _make_unary(name: str, fwd: Callable[[Any, Any], Any], bwd: Callable[[Any, Any, Any, Any], Any],
                doc: str) -> Callable[[Tensor], Tensor]:
    """A differentiable elementwise op: ``fwd(xp, d)`` computes, ``bwd(xp, g, d, out)`` differentiates."""

    @_op(name)
    def op(x: Tensor) -> Tensor:
        xp = x._device.xp
        return _unary(name, x, lambda d: fwd(xp, d), lambda g, d, o: bwd(xp, g, d, o))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


sin = _make_unary("sin", lambda xp, d: xp.sin(d), lambda xp, g, d, o: g * xp.cos(d), "Elementwise sine (radians).")
cos = _make_unary("cos", lambda xp, d: xp.cos(d), lambda xp, g, d, o: -g * xp.sin(d), "Elementwise cosine (radians).")
tan = _make_unary("tan", lambda xp, d: xp.tan(d), lambda xp, g, d, o: g * (1 + o * o), "Elementwise tangent.")
arcsin = _make_unary("arcsin", lambda xp, d: xp.arcsin(d), lambda xp, g, d, o: g / xp.sqrt(1 - d * d),
                     "Elementwise inverse sine.")
arccos = _make_unary("arccos", lambda xp, d: xp.arccos(d), lambda xp, g, d, o: -g / xp.sqrt(1 - d * d),
                     "Elementwise inverse cosine.")
arctan = _make_unary("arctan", lambda xp, d: xp.arctan(d), lambda xp, g, d, o: g / (1 + d * d),
                     "Elementwise inverse tangent.")
sinh = _make_unary("sinh", lambda xp, d: xp.sinh(d), lambda xp, g, d, o: g * xp.cosh(d), "Elementwise sinh.")
cosh = _make_unary("cosh", lambda xp, d: xp.cosh(d), lambda xp, g, d, o: g * xp.sinh(d), "Elementwise cosh.")
arcsinh = _make_unary("arcsinh", lambda xp, d: xp.arcsinh(d), lambda xp, g, d, o: g / xp.sqrt(d * d + 1),
                      "Elementwise inverse sinh.")
arccosh = _make_unary("arccosh", lambda xp, d: xp.arccosh(d), lambda xp, g, d, o: g / xp.sqrt(d * d - 1),
                      "Elementwise inverse cosh (x >= 1).")
arctanh = _make_unary("arctanh", lambda xp, d: xp.arctanh(d), lambda xp, g, d, o: g / (1 - d * d),
                      "Elementwise inverse tanh (|x| < 1).")
log1p = _make_unary("log1p", lambda xp, d: xp.log1p(d), lambda xp, g, d, o: g / (1 + d), "Elementwise log(1 + x).")
expm1 = _make_unary("expm1", lambda xp, d: xp.expm1(d), lambda xp, g, d, o: g * (o + 1), "Elementwise e**x - 1.")
log2 = _make_unary("log2", lambda xp, d: xp.log2(d), lambda xp, g, d, o: g / (d * np.log(2.0)),
                   "Elementwise base-2 logarithm.")
log10 = _make_unary("log10", lambda xp, d: xp.log10(d), lambda xp, g, d, o: g / (d * np.log(10.0)),
                    "Elementwise base-10 logarithm.")
reciprocal = _make_unary("reciprocal", lambda xp, d: 1 / d, lambda xp, g, d, o: -g * o * o, "Elementwise 1 / x.")
rsqrt = _make_unary("rsqrt", lambda xp, d: 1 / xp.sqrt(d), lambda xp, g, d, o: -0.5 * g * o * o * o,
                    "Elementwise 1 / sqrt(x).")
cbrt = _make_unary("cbrt", lambda xp, d: xp.cbrt(d), lambda xp, g, d, o: g / (3 * o * o), "Elementwise cube root.")


erf = _make_unary("erf", erf_array, lambda xp, g, d, o: g * (2 / np.sqrt(np.pi)) * xp.exp(-d * d),
                  "Elementwise Gauss error function.")


def _make_constant_unary(name: str, fn: Callable[[Any, Any], Any], doc: str) -> Callable[[Tensor], Tensor]:
    """An elementwise op whose gradient is zero almost everywhere (rounding, sign, tests): not recorded."""

    @_op(name)
    def op(x: Tensor) -> Tensor:
        return Tensor(x._device.xp.asarray(fn(x._device.xp, x._data)), x._device)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc + " Its gradient is zero: the result is not recorded."
    return op


sign = _make_constant_unary("sign", lambda xp, d: xp.sign(d), "Elementwise sign (-1, 0 or 1).")
floor = _make_constant_unary("floor", lambda xp, d: xp.floor(d), "Elementwise floor.")
ceil = _make_constant_unary("ceil", lambda xp, d: xp.ceil(d), "Elementwise ceiling.")
trunc = _make_constant_unary("trunc", lambda xp, d: xp.trunc(d), "Elementwise truncation toward zero.")
fix = trunc
rint = _make_constant_unary("rint", lambda xp, d: xp.rint(d), "Elementwise rounding to the nearest integer.")
isnan = _make_constant_unary("isnan", lambda xp, d: xp.isnan(d), "Elementwise NaN test (bool).")
isinf = _make_constant_unary("isinf", lambda xp, d: xp.isinf(d), "Elementwise infinity test (bool).")
isfinite = _make_constant_unary("isfinite", lambda xp, d: xp.isfinite(d), "Elementwise finiteness test (bool).")
logical_not = _make_constant_unary("logical_not", lambda xp, d: xp.logical_not(d), "Elementwise logical not (bool).")


@_op("round")
def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - NumPy's name
    """Round half to even to ``decimals`` places (NumPy's rule). Its gradient is zero: not recorded."""
    return Tensor(x._device.xp.round(x._data, decimals), x._device)


logical_and = _constant("logical_and", lambda x, y: x.astype(bool) & y.astype(bool))
logical_or = _constant("logical_or", lambda x, y: x.astype(bool) | y.astype(bool))
logical_xor = _constant("logical_xor", lambda x, y: x.astype(bool) ^ y.astype(bool))


# -- MXNet 1.x's mx.nd conventions ------------------------------------------------------------
def nd_shape(t: Tensor) -> Tensor:
    """``t`` with the ``mx.nd`` face and MXNet 1.x's shape: a 0-d array becomes shape ``(1,)``.

    MXNet 1.x's NDArray has no 0-d arrays: ``x[0]`` of a 1-D array and a reduction to one value
    (``nd.sum(x)``) have shape ``(1,)``. The reshape is recorded like any other, so gradients flow
    through it. ``t`` must be a new result (its class is changed in place), not a caller's array.
    """
    if t._data.ndim == 0:
        t.__class__ = Tensor  # the 0-d result stays in the graph as the reshape's input
        t = reshape(t, (1,))
    t.__class__ = NDTensor
    return t


def _nd_logic(name: str, fn: Callable) -> Callable:
    """The ``mx.nd`` form of a comparison or logical op: MXNet 1.x gives 1 and 0 in the dtype of the array
    operands (float32 ``[1., 0.]`` from ``nd.array([1, -1]) > 0``), where NumPy and ``mx.np`` give bool."""

    @_op(name)
    def op(a: Any, b: Any) -> Tensor:
        dtype = np.result_type(*(x.dtype for x in (a, b) if isinstance(x, Tensor)))
        a, b = _binary_operands(a, b)
        return Tensor(fn(a._data, b._data).astype(dtype, copy=False), a._device)

    op.__name__ = op.__qualname__ = "nd_" + name
    op.__doc__ = (f"Elementwise ``{name}`` in MXNet 1.x's ``mx.nd`` convention: 1 where true, 0 elsewhere, in the "
                  "dtype of the array operands (no gradient).")
    return op


nd_equal = _nd_logic("equal", lambda x, y: x == y)
nd_not_equal = _nd_logic("not_equal", lambda x, y: x != y)
nd_greater = _nd_logic("greater", lambda x, y: x > y)
nd_greater_equal = _nd_logic("greater_equal", lambda x, y: x >= y)
nd_less = _nd_logic("less", lambda x, y: x < y)
nd_less_equal = _nd_logic("less_equal", lambda x, y: x <= y)
nd_logical_and = _nd_logic("logical_and", lambda x, y: x.astype(bool) & y.astype(bool))
nd_logical_or = _nd_logic("logical_or", lambda x, y: x.astype(bool) | y.astype(bool))
nd_logical_xor = _nd_logic("logical_xor", lambda x, y: x.astype(bool) ^ y.astype(bool))


@_op("logical_not")
def nd_logical_not(x: Tensor) -> Tensor:
    """Elementwise logical not as MXNet 1.x's ``mx.nd.logical_not``: 1 where ``x`` is 0, else 0, in ``x``'s
    dtype (no gradient)."""
    return Tensor(x._device.xp.logical_not(x._data).astype(x.dtype, copy=False), x._device)


def mod(a: Any, b: Any) -> Tensor:
    """Elementwise remainder with the divisor's sign (NumPy's ``mod``); gradient 1 to ``a``, -floor(a/b) to ``b``."""
    return _binary("mod", a, b, lambda x, y: _xp(x).mod(x, y),
                   lambda g, x, y, o: (g, -g * _xp(x).floor(x / y)))


def arctan2(a: Any, b: Any) -> Tensor:
    """Elementwise angle of the point ``(b, a)`` (``atan2(a, b)``), differentiable in both."""
    return _binary("arctan2", a, b, lambda x, y: _xp(x).arctan2(x, y),
                   lambda g, x, y, o: (g * y / (x * x + y * y), -g * x / (x * x + y * y)))


def hypot(a: Any, b: Any) -> Tensor:
    """Elementwise ``sqrt(a**2 + b**2)``, differentiable in both."""
    return _binary("hypot", a, b, lambda x, y: _xp(x).hypot(x, y), lambda g, x, y, o: (g * x / o, g * y / o))


# -- more reductions ---------------------------------------------------------------------------
@_op("prod")
def prod(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Product over ``axis`` (all axes when None). The gradient of an entry is the product of the others."""
    xp = x._device.xp
    axes = _norm_axis(axis, x.ndim)
    shape, data = x.shape, x._data
    out = xp.asarray(data.prod(axis=axes, keepdims=keepdims))

    def backward(g: Any) -> tuple[Any]:
        ge = _expand_to(g, shape, axes, keepdims)
        # Product of the other entries, without dividing by a possibly zero entry: move the reduced axes
        # last, flatten them, and multiply exclusive prefix and suffix products.
        keep = [i for i in range(len(shape)) if i not in axes]
        moved = xp.transpose(data, keep + list(axes))
        flat = moved.reshape(moved.shape[:len(keep)] + (-1,))
        ones = xp.ones(flat.shape[:-1] + (1,), dtype=flat.dtype)
        before = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
        after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(flat, -1)[..., :-1]], axis=-1), axis=-1), -1)
        others = (before * after).reshape(moved.shape)
        inverse = np.argsort(keep + list(axes))
        return (xp.transpose(others, tuple(inverse)) * ge,)

    return op_result("prod", out, x._device, (x,), backward)


def norm(x: Tensor, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A002
    """Vector norm over ``axis`` (all axes when None): ``ord`` None/2/'fro' (L2) or 1 (L1).

    Raises:
        ValueError: another ``ord``.
    """
    if ord in (None, 2, "fro"):
        return sqrt(sum(square(x), axis=axis, keepdims=keepdims))
    if ord == 1:
        return sum(abs(x), axis=axis, keepdims=keepdims)
    raise ValueError(f"norm: ord must be None, 2, 'fro' or 1, got {ord!r}")


def var(x: Tensor, axis: Any = None, keepdims: bool = False, ddof: int | float = 0) -> Tensor:
    """Variance over ``axis`` (all axes when None), differentiable: the sum of squared deviations over ``n - ddof``.

    As NumPy, it divides by ``max(n - ddof, 0)``: with ``ddof >= n`` the result is inf (NaN
    where the deviations are all zero, or for an empty slice) and a RuntimeWarning says so;
    the gradient there is inf/NaN as well.
    """
    axes = _norm_axis(axis, x.ndim)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    centred = subtract(x, mean(x, axis=axes, keepdims=True))
    squares = sum(square(centred), axis=axes, keepdims=keepdims)
    count = _b.max(n - ddof, 0)
    if count > 0:
        return divide(squares, float(count))
    warnings.warn(f"Degrees of freedom <= 0 for slice (n={n}, ddof={ddof}): the variance is inf, or NaN for a "
                  "zero sum, as NumPy's", RuntimeWarning, stacklevel=2)
    with np.errstate(divide="ignore", invalid="ignore"):  # the warning above says it once, on CPU and GPU alike
        return divide(squares, 0.0)


def std(x: Tensor, axis: Any = None, keepdims: bool = False, ddof: int | float = 0) -> Tensor:
    """Standard deviation over ``axis`` (``sqrt(var)``), differentiable; ``ddof >= n`` gives inf/NaN as :func:`var`."""
    return sqrt(var(x, axis=axis, keepdims=keepdims, ddof=ddof))


def logsumexp(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, shifted by the maximum so it never overflows."""
    axes = _norm_axis(axis, x.ndim)
    m = _finite_peak(x, axes)
    out = add(log(sum(exp(subtract(x, m)), axis=axes, keepdims=True)), m)
    return out if keepdims else reshape(out, tuple(n for i, n in enumerate(out.shape) if i not in axes))


@_op("finite_peak")
def _finite_peak(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    """The maximum over ``axes`` (kept as length 1), 0 where it is infinite; a constant (no gradient)."""
    xp = x._device.xp
    peak = xp.max(x._data, axis=axes, keepdims=True)
    # An infinite maximum (a slice of -inf, or one +inf) would make x - m NaN: shift by 0 there instead,
    # so an all -inf slice gives -inf and a +inf gives +inf, as NumPy's log(sum(exp(x))) does.
    return Tensor(xp.where(xp.isfinite(peak), peak, xp.zeros_like(peak)), x._device)


@_op("cumsum")
def cumsum(x: Tensor, axis: int | None = None) -> Tensor:
    """Cumulative sum along ``axis`` (over the flattened array when None)."""
    xp = x._device.xp
    shape = x.shape
    data = x._data.reshape(-1) if axis is None else x._data
    ax = 0 if axis is None else axis
    out = xp.cumsum(data, axis=ax)

    def backward(g: Any) -> tuple[Any]:
        return (xp.flip(xp.cumsum(xp.flip(g, ax), axis=ax), ax).reshape(shape),)

    return op_result("cumsum", out, x._device, (x,), backward)


# -- more shape ops ----------------------------------------------------------------------------
@_op("tile")
def tile(x: Tensor, reps: Any) -> Tensor:
    """Repeat the whole tensor ``reps`` times along each axis (NumPy's ``tile``)."""
    xp = x._device.xp
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    nd = _b.max(len(reps), x.ndim)
    reps_full = (1,) * (nd - len(reps)) + reps
    in_shape = (1,) * (nd - x.ndim) + x.shape
    out = xp.tile(x._data, reps)

    def backward(g: Any) -> tuple[Any]:
        split_shape = []
        for r, n in zip(reps_full, in_shape):
            split_shape += [r, n]
        gs = g.reshape(split_shape).sum(axis=tuple(range(0, 2 * nd, 2)))
        return (gs.reshape(x.shape),)

    return op_result("tile", out, x._device, (x,), backward)


@_op("repeat")
def repeat(x: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (of the flattened tensor when None)."""
    xp = x._device.xp
    repeats = int(repeats)
    shape = x.shape
    data = x._data.reshape(-1) if axis is None else x._data
    ax = 0 if axis is None else axis % x.ndim
    out = xp.repeat(data, repeats, axis=ax)

    def backward(g: Any) -> tuple[Any]:
        split = g.shape[:ax] + (data.shape[ax], repeats) + g.shape[ax + 1:]
        return (g.reshape(split).sum(axis=ax + 1).reshape(shape),)

    return op_result("repeat", out, x._device, (x,), backward)


def flip(x: Tensor, axis: Any = None) -> Tensor:
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    axes = _norm_axis(axis, x.ndim)
    return getitem(x, tuple(_b.slice(None, None, -1) if i in axes else _b.slice(None) for i in range(x.ndim)))


def slice_axis(x: Tensor, axis: int, begin: int, end: int | None) -> Tensor:
    """``x[..., begin:end, ...]`` on ``axis`` (MXNet's ``slice_axis``; ``end=None`` runs to the end)."""
    axis = axis % x.ndim
    return getitem(x, (_b.slice(None),) * axis + (_b.slice(begin, end),))


def slice(x: Tensor, begin: Sequence[int | None], end: Sequence[int | None],  # noqa: A001 - MXNet's name
          step: Sequence[int | None] | None = None) -> Tensor:
    """``x[b0:e0:s0, b1:e1:s1, ...]`` (MXNet's ``slice``); ``None`` entries take the defaults."""
    step = step or [None] * len(begin)
    return getitem(x, tuple(_b.slice(b, e, s) for b, e, s in zip(begin, end, step)))


@_op("take_along_axis")
def take_along_axis(x: Tensor, indices: Any, axis: int) -> Tensor:
    """NumPy's ``take_along_axis``, differentiable in ``x`` (repeated ids accumulate)."""
    xp = x._device.xp
    idx = indices._data if isinstance(indices, Tensor) else xp.asarray(indices)
    idx = idx.astype(np.int64)
    out = xp.take_along_axis(x._data, idx, axis=axis)
    shape = x.shape

    def backward(g: Any) -> tuple[Any]:
        gx = xp.zeros(shape, dtype=g.dtype)
        grids = _open_grid(xp, g.shape)  # the output's shape: idx may broadcast against x
        grids[axis % len(shape)] = xp.broadcast_to(idx, g.shape)
        _scatter_add(xp, gx, tuple(grids), g)
        return (gx,)

    return op_result("take_along_axis", out, x._device, (x,), backward)


def _open_grid(xp: Any, shape: tuple[int, ...]) -> list[Any]:
    """NumPy's ``indices(shape, sparse=True)`` (which CuPy lacks): per axis, its positions shaped to broadcast."""
    ndim = len(shape)
    return [xp.arange(n).reshape((1,) * i + (n,) + (1,) * (ndim - i - 1)) for i, n in enumerate(shape)]


@_op("argsort")
def argsort(x: Tensor, axis: int = -1, is_ascend: bool = True) -> Tensor:
    """Indices that sort ``x`` along ``axis`` (stable; int64, no gradient)."""
    xp = x._device.xp
    idx = xp.argsort(x._data if is_ascend else -x._data, axis=axis, kind="stable")
    return Tensor(idx, x._device)


def sort(x: Tensor, axis: int = -1, is_ascend: bool = True) -> Tensor:
    """``x`` sorted along ``axis``; the gradient flows to the original positions."""
    return take_along_axis(x, argsort(x, axis, is_ascend), axis)


def batch_dot(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """Batched matrix product ``a[i] @ b[i]`` of 3-D tensors (MXNet's ``batch_dot``), optionally transposed.

    Raises:
        ValueError: inputs that are not 3-D, or inner dimensions that differ.
    """
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"batch_dot needs 3-D inputs (batch, rows, columns), got shapes {a.shape} and {b.shape}")
    return matmul(swapaxes(a, 1, 2) if transpose_a else a, swapaxes(b, 1, 2) if transpose_b else b)


def tensordot_last_first(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """MXNet 1.x's ``dot``: contract the last axis of ``a`` with the first axis of ``b`` (any ranks).

    With ``transpose_a``/``transpose_b`` the operand's axes are reversed first (as MXNet).
    Raises:
        ValueError: the contracted axes differ in length.
    """
    if transpose_a:
        a = transpose(a)
    if transpose_b:
        b = transpose(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    k = a.shape[-1]
    if b.shape[0] != k:
        raise ValueError(f"dot: the last axis of a (shape {a.shape}) and the first axis of b (shape {b.shape}) differ")
    rows, cols = int(np.prod(a.shape[:-1])), int(np.prod(b.shape[1:]))  # explicit: -1 is ambiguous when k == 0
    out = matmul(reshape(a, (rows, k)), reshape(b, (k, cols)))
    return reshape(out, a.shape[:-1] + b.shape[1:])


def numpy_dot(a: Tensor, b: Tensor) -> Tensor:
    """NumPy's ``dot``: vectors give an inner product, matrices a product, N-D contracts a's last axis
    with b's second-to-last (b's only axis when b is 1-D)."""
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return tensordot_last_first(a, b if b.ndim <= 2 else moveaxis(b, -2, 0))


def moveaxis(x: Tensor, source: int, destination: int) -> Tensor:
    """Move axis ``source`` to position ``destination`` (NumPy's ``moveaxis``)."""
    order = [i for i in range(x.ndim) if i != source % x.ndim]
    order.insert(destination % x.ndim, source % x.ndim)
    return transpose(x, tuple(order))

"""Finite-difference gradient checks (float64) and NumPy forward references for every primitive.

Covers each op of ``mxlite.ops.core`` and ``mxlite.ops.nn_ops``. Tolerances: central
differences with step 1e-6 in float64 give about 1e-9 absolute error on these O(1) values,
so ``rtol=1e-5, atol=1e-6`` (``check_grad``'s defaults) leave a wide margin.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.ops import nn_ops as F
from mxlite.ops import sparse
from tests.gradcheck import check_grad

RNG = np.random.default_rng(1234)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def distinct(*shape: int) -> np.ndarray:
    """Values far apart from each other (max/min/pool ties and kinks stay out of reach of eps)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.1 - n * 0.05).reshape(shape)


# -- core.py: arithmetic ----------------------------------------------------------------------------
BINARY = [
    ("add", ops.add, np.add),
    ("subtract", ops.subtract, np.subtract),
    ("multiply", ops.multiply, np.multiply),
    ("divide", ops.divide, np.divide),
]
SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((2, 1, 4), (3, 1))]


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_broadcasting(name, op, ref, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1], low=0.5, high=1.5)
    check_grad(op, [a, b], reference=ref)


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_scalar_operands(name, op, ref):
    a = rand(3, 4, low=0.5, high=1.5)
    check_grad(lambda x: op(x, 2.5), [a], reference=lambda x: ref(x, 2.5))
    check_grad(lambda x: op(2.5, x), [a], reference=lambda x: ref(2.5, x))


def test_operators_dispatch():
    a, b = rand(2, 3), rand(2, 3, low=0.5, high=1.5)
    check_grad(lambda x, y: (x + y) * (x - y) / y + (-x) + 1.0 - 2.0 * x / 3.0 + 1.0 / y, [a, b],
               reference=lambda x, y: (x + y) * (x - y) / y + (-x) + 1.0 - 2.0 * x / 3.0 + 1.0 / y)


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3), (3,)), ((3, 1), (1, 2))], ids=str)
def test_power(shapes):
    a, b = rand(*shapes[0], low=0.5, high=2.0), rand(*shapes[1], low=-1.5, high=1.5)
    check_grad(ops.power, [a, b], reference=np.power)


def test_power_scalar_operands():
    a = rand(3, 4, low=0.5, high=2.0)
    check_grad(lambda x: x ** 3, [a], reference=lambda x: x ** 3)
    check_grad(lambda x: 2.0 ** x, [a], reference=lambda x: 2.0 ** x)


@pytest.mark.parametrize("op,ref", [(ops.maximum, np.maximum), (ops.minimum, np.minimum)], ids=["max", "min"])
def test_maximum_minimum(op, ref):
    a = distinct(3, 4)
    b = distinct(4) + 0.05  # never equal to an entry of a
    check_grad(op, [a, b], reference=ref)
    check_grad(lambda x: op(x, 0.01), [a], reference=lambda x: ref(x, 0.01))


def test_maximum_tie_goes_to_first():
    x, y = mx.array([1.0, 2.0], dtype=np.float64), mx.array([1.0, 1.0], dtype=np.float64)
    x.attach_grad()
    y.attach_grad()
    with mx.autograd.record():
        z = ops.maximum(x, y)
    z.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [1.0, 1.0])
    np.testing.assert_array_equal(y.grad.asnumpy(), [0.0, 0.0])


# -- core.py: linear algebra ------------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                    ((3, 4), (2, 4, 3))], ids=str)
def test_matmul(shapes):
    check_grad(ops.matmul, [rand(*shapes[0]), rand(*shapes[1])], reference=np.matmul)


def test_matmul_operator_and_errors():
    a, b = rand(2, 3), rand(3, 2)
    check_grad(lambda x, y: x @ y, [a, b], reference=lambda x, y: x @ y)
    with pytest.raises(ValueError, match="matmul"):
        ops.matmul(mx.array(rand(4)), mx.array(rand(3, 2)))


# -- core.py: shape ---------------------------------------------------------------------------------
def test_reshape():
    check_grad(lambda x: ops.reshape(x, (4, -1)), [rand(2, 3, 2)], reference=lambda x: x.reshape(4, -1))
    check_grad(lambda x: x.reshape(3, 4), [rand(2, 6)], reference=lambda x: x.reshape(3, 4))
    check_grad(ops.flatten, [rand(2, 3, 2)], reference=lambda x: x.reshape(2, -1))


@pytest.mark.parametrize("axes", [(), ((2, 0, 1),), (1, 2, 0), ((0, -1, 1),), (-1, -3, -2)], ids=str)
def test_transpose(axes):
    def ref(x):
        perm = axes[0] if len(axes) == 1 else (axes or None)
        return np.transpose(x, perm)
    check_grad(lambda x: ops.transpose(x, *axes), [rand(2, 3, 4)], reference=ref)


def test_T_property():
    check_grad(lambda x: x.T, [rand(2, 3)], reference=lambda x: x.T)


def test_swapaxes():
    check_grad(lambda x: ops.swapaxes(x, 0, 2), [rand(2, 3, 4)], reference=lambda x: np.swapaxes(x, 0, 2))
    check_grad(lambda x: ops.swapaxes(x, -1, 1), [rand(2, 3, 4)], reference=lambda x: np.swapaxes(x, -1, 1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_expand_dims(axis):
    check_grad(lambda x: ops.expand_dims(x, axis), [rand(2, 3)], reference=lambda x: np.expand_dims(x, axis))


@pytest.mark.parametrize("axis", [None, 1, (1, 3)], ids=str)
def test_squeeze(axis):
    check_grad(lambda x: ops.squeeze(x, axis), [rand(2, 1, 3, 1)], reference=lambda x: np.squeeze(x, axis))


@pytest.mark.parametrize("shapes", [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 3, 1), (2, 3, 4))], ids=str)
def test_broadcast_to(shapes):
    src, dst = shapes
    check_grad(lambda x: ops.broadcast_to(x, dst), [rand(*src)], reference=lambda x: np.broadcast_to(x, dst))


GETITEM_KEYS = [
    ("int", 1),
    ("slice", slice(1, 3)),
    ("step", (slice(None, None, 2), slice(1, None))),
    ("negative", (-1, slice(None, None, -1))),
    ("ellipsis_newaxis", (Ellipsis, None, 1)),
    ("full_int", (1, 2)),
    ("advanced_repeated", np.array([0, 2, 0, 0])),
    ("advanced_2d", (np.array([[0, 1], [1, 0]]), np.array([[2, 2], [3, 3]]))),
    ("mixed", (slice(None), np.array([3, 1, 3]))),
    ("bool_mask", np.array([True, False, True])),
]


@pytest.mark.parametrize("key", [k for _, k in GETITEM_KEYS], ids=[n for n, _ in GETITEM_KEYS])
def test_getitem(key):
    check_grad(lambda x: x[key], [rand(3, 4)], reference=lambda x: np.asarray(x[key]))


def test_getitem_repeated_indices_accumulate():
    x = mx.array([1.0, 2.0, 3.0], dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = x[mx.array([0, 0, 2, 0], dtype=np.int64)]
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [3.0, 0.0, 1.0])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = [(2, 3), (2, 3), (2, 3)]
    if axis == 0:
        shapes = [(1, 3), (2, 3), (3, 3)]
    check_grad(lambda *xs: ops.concat(xs, axis=axis), [rand(*s) for s in shapes],
               reference=lambda *xs: np.concatenate(xs, axis=axis))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis):
    check_grad(lambda *xs: ops.stack(xs, axis=axis), [rand(2, 3) for _ in range(3)],
               reference=lambda *xs: np.stack(xs, axis=axis))


@pytest.mark.parametrize("axis", [0, 1])
def test_split(axis):
    def fn(x):
        parts = ops.split(x, 2, axis=axis)
        return ops.concat([parts[1] * 2.0, parts[0] * 3.0], axis=axis)

    def ref(x):
        a, b = np.split(x, 2, axis=axis)
        return np.concatenate([b * 2.0, a * 3.0], axis=axis)

    check_grad(fn, [rand(4, 6)], reference=ref)
    with pytest.raises(ValueError, match="split"):
        ops.split(mx.array(rand(3, 4)), 2, axis=0)


# -- core.py: reductions ----------------------------------------------------------------------------
AXES = [None, 0, 1, (0, 2), -1]


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reductions(name, axis, keepdims):
    op = getattr(ops, name)
    check_grad(lambda x: op(x, axis=axis, keepdims=keepdims), [distinct(2, 3, 4)],
               reference=lambda x: np.asarray(getattr(np, name)(x, axis=axis, keepdims=keepdims)))


def test_max_ties_share_gradient():
    x = mx.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = ops.max(x, axis=1)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [[0, 0.5, 0.5], [1, 0, 0]])


# -- core.py: elementwise ---------------------------------------------------------------------------
UNARY = [
    ("negative", ops.negative, np.negative, (-1, 1)),
    ("exp", ops.exp, np.exp, (-1, 1)),
    ("log", ops.log, np.log, (0.5, 2)),
    ("sqrt", ops.sqrt, np.sqrt, (0.5, 2)),
    ("square", ops.square, np.square, (-1, 1)),
    ("tanh", ops.tanh, np.tanh, (-2, 2)),
    ("sigmoid", ops.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-3, 3)),
    ("relu", ops.relu, lambda x: np.maximum(x, 0), (-1, 1)),
    ("abs", ops.abs, np.abs, (-1, 1)),
]


@pytest.mark.parametrize("name,op,ref,bounds", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, op, ref, bounds):
    x = rand(3, 4, low=bounds[0], high=bounds[1])
    x[np.abs(x) < 1e-3] = 0.1  # stay off the kinks of relu/abs
    check_grad(op, [x], reference=ref)


def test_sigmoid_extreme_values_do_not_overflow():
    x = mx.array([-1000.0, 0.0, 1000.0], dtype=np.float64)
    with np.errstate(over="raise"):
        np.testing.assert_allclose(ops.sigmoid(x).asnumpy(), [0.0, 0.5, 1.0])


@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (None, 0.3), (-0.3, None)], ids=str)
def test_clip(bounds):
    x = rand(4, 5)
    for b in bounds:  # no element within eps of a bound
        if b is not None:
            x[np.abs(x - b) < 1e-3] += 0.01
    check_grad(lambda t: ops.clip(t, *bounds), [x], reference=lambda a: np.clip(a, *bounds))


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), (3, 1)), ((1, 4), (3, 4), (3, 4))],
                         ids=str)
def test_where(shapes):
    cond = RNG.random(shapes[0]) > 0.5
    check_grad(lambda c, x, y: ops.where(c, x, y), [cond, rand(*shapes[1]), rand(*shapes[2])],
               reference=lambda c, x, y: np.where(c, x, y))


def test_where_scalar_branch():
    cond = np.array([True, False, True])
    check_grad(lambda c, x: ops.where(c, x, 0.0), [cond, rand(3)], reference=lambda c, x: np.where(c, x, 0.0))


# -- core.py: copies and casts ----------------------------------------------------------------------
def test_to_device_between_virtual_cpus():
    def fn(x):
        y = ops.to_device(x * 2.0, mx.cpu(1))
        assert y.device == mx.cpu(1)
        return ops.to_device(y * y, mx.cpu(0))

    grads = check_grad(fn, [rand(2, 3)], reference=lambda x: 4 * x * x)
    assert grads[0] is not None


def test_to_device_grad_lands_on_source_device():
    x = mx.array(rand(2, 3), device=mx.cpu(0), dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = x.to(mx.cpu(1))
        loss = (y * 3.0).sum()
    assert loss.device == mx.cpu(1)
    loss.backward()
    assert x.grad.device == mx.cpu(0)
    np.testing.assert_allclose(x.grad.asnumpy(), np.full((2, 3), 3.0))


def test_astype():
    check_grad(lambda x: ops.astype(x, np.float32).astype(np.float64) * 2.0, [rand(2, 3)],
               reference=lambda x: x.astype(np.float32).astype(np.float64) * 2.0,
               eps=1e-3, rtol=1e-4, atol=1e-5)  # float32 rounding (~6e-8) needs a larger step
    x = mx.array(rand(3), dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = ops.astype(x, np.float32)
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad.asnumpy(), np.ones(3))


# -- nn_ops.py: softmax ----------------------------------------------------------------------------
def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis):
    check_grad(lambda x: F.softmax(x, axis), [rand(3, 4, 2)], reference=lambda x: np_softmax(x, axis))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_log_softmax(axis):
    check_grad(lambda x: F.log_softmax(x, axis), [rand(3, 4, 2)], reference=lambda x: np.log(np_softmax(x, axis)))


def test_softmax_is_stable_for_large_logits():
    x = mx.array([[1000.0, 1000.0, -1000.0]], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise"):
        np.testing.assert_allclose(F.softmax(x).asnumpy(), [[0.5, 0.5, 0.0]], atol=1e-7)
        np.testing.assert_allclose(F.log_softmax(x).asnumpy(), [[-np.log(2), -np.log(2), -2000 - np.log(2)]],
                                   rtol=1e-6)


def test_softmax_rejects_integers():
    with pytest.raises(TypeError, match="softmax"):
        F.softmax(mx.array([1, 2], dtype=np.int32))


# -- nn_ops.py: conv2d -----------------------------------------------------------------------------
def naive_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, ho, wo))
    per_group = co // groups
    for b_ in range(n):
        for o in range(co):
            g = o // per_group
            for i in range(ho):
                for j in range(wo):
                    acc = 0.0
                    for ci in range(cg):
                        for u in range(kh):
                            for v in range(kw):
                                acc += w[o, ci, u, v] * xp[b_, g * cg + ci, i * sh + u * dh, j * sw + v * dw]
                    out[b_, o, i, j] = acc + (0.0 if b is None else b[o])
    return out


CONV_CASES = [
    # (x shape, w shape, stride, padding, dilation, groups, bias)
    ((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1, True),
    ((1, 2, 6, 5), (3, 2, 3, 2), (2, 1), (1, 2), (1, 1), 1, True),
    ((1, 2, 7, 7), (2, 2, 3, 3), (1, 2), (2, 1), (2, 2), 1, False),
    ((2, 4, 5, 4), (6, 2, 2, 3), (1, 1), (1, 1), (1, 1), 2, True),
    ((1, 4, 5, 5), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), 4, False),  # depthwise
    ((1, 2, 3, 3), (3, 2, 1, 1), (1, 1), (0, 0), (1, 1), 1, True),  # 1x1
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"x{c[0]}w{c[1]}s{c[2]}p{c[3]}d{c[4]}g{c[5]}")
def test_conv2d(case):
    xs, ws, stride, padding, dilation, groups, has_bias = case
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if has_bias else [])

    def fn(x, w, *b):
        return F.conv2d(x, w, b[0] if b else None, stride=stride, padding=padding, dilation=dilation, groups=groups)

    def ref(x, w, *b):
        return naive_conv2d(x, w, b[0] if b else None, stride, padding, dilation, groups)

    check_grad(fn, inputs, reference=ref)


def test_conv2d_int_arguments_and_float32():
    x, w = rand(1, 2, 5, 5).astype(np.float32), rand(3, 2, 3, 3).astype(np.float32)
    out = F.conv2d(mx.array(x), mx.array(w), stride=2, padding=1)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.asnumpy(), naive_conv2d(x, w, None, (2, 2), (1, 1)), rtol=1e-5, atol=1e-5)


def test_conv2d_no_grad_for_input_only_weight():
    x = mx.array(rand(1, 2, 4, 4), dtype=np.float64)
    w = mx.array(rand(3, 2, 3, 3), dtype=np.float64)
    w.attach_grad()
    with mx.autograd.record():
        y = F.conv2d(x, w)
    y.backward()
    assert w.grad.asnumpy().any()
    assert x.grad is None


@pytest.mark.parametrize("xs,ws,groups,match", [
    ((1, 3, 5, 5), (4, 2, 3, 3), 1, "expects 2 input channels.*but x has 3"),
    ((1, 4, 5, 5), (3, 2, 3, 3), 2, "groups=2 must be >= 1 and divide"),
    ((1, 3, 2, 2), (4, 3, 3, 3), 1, "larger than the padded input"),
    ((3, 5, 5), (4, 3, 3, 3), 1, "3-D x"),
])
def test_conv2d_shape_errors(xs, ws, groups, match):
    with pytest.raises(ValueError, match=match) as info:
        F.conv2d(mx.array(rand(*xs)), mx.array(rand(*ws)), groups=groups)
    assert "conv2d" in str(info.value)


def test_conv2d_bias_shape_error():
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        F.conv2d(mx.array(rand(1, 3, 5, 5)), mx.array(rand(4, 3, 3, 3)), mx.array(rand(3)))


# -- nn_ops.py: pooling ----------------------------------------------------------------------------
def naive_pool(x, kernel, stride, pad, ceil_mode, kind, count_include_pad=True):
    n, c, h, w = x.shape
    outs = []
    for size, k, s, p in zip((h, w), kernel, stride, pad):
        span = size + 2 * p - k
        outs.append(1 + (-(-span // s) if ceil_mode else span // s))
    out = np.zeros((n, c, *outs))
    for i in range(outs[0]):
        for j in range(outs[1]):
            hs, ws_ = i * stride[0] - pad[0], j * stride[1] - pad[1]
            he, we = min(hs + kernel[0], h + pad[0]), min(ws_ + kernel[1], w + pad[1])
            area = (he - hs) * (we - ws_)
            hs0, ws0, he0, we0 = max(hs, 0), max(ws_, 0), min(he, h), min(we, w)
            window = x[:, :, hs0:he0, ws0:we0]
            if kind == "max":
                out[:, :, i, j] = window.max(axis=(2, 3))
            else:
                if not count_include_pad:
                    area = (he0 - hs0) * (we0 - ws0)
                out[:, :, i, j] = window.sum(axis=(2, 3)) / area
    return out


POOL_CASES = [
    # (x shape, kernel, stride, padding, ceil_mode)
    ((2, 2, 4, 4), (2, 2), (2, 2), (0, 0), False),
    ((1, 2, 5, 5), (3, 3), (1, 1), (0, 0), False),  # overlapping windows
    ((1, 2, 5, 6), (3, 2), (2, 2), (1, 1), False),
    ((1, 1, 5, 5), (2, 2), (2, 2), (0, 0), True),  # ceil: last window hangs over
    ((1, 2, 6, 7), (3, 3), (2, 2), (1, 1), True),  # ceil + padding + overlap
    ((1, 1, 4, 5), (3, 2), (2, 3), (1, 0), True),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"x{c[0]}k{c[1]}s{c[2]}p{c[3]}ceil{c[4]}")
def test_max_pool2d(case):
    xs, k, s, p, ceil = case
    check_grad(lambda x: F.max_pool2d(x, k, s, p, ceil_mode=ceil), [distinct(*xs)],
               reference=lambda x: naive_pool(x, k, s, p, ceil, "max"))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"x{c[0]}k{c[1]}s{c[2]}p{c[3]}ceil{c[4]}")
def test_avg_pool2d(case, count_include_pad):
    xs, k, s, p, ceil = case
    check_grad(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=count_include_pad),
               [rand(*xs)], reference=lambda x: naive_pool(x, k, s, p, ceil, "avg", count_include_pad))


def test_max_pool2d_overlap_accumulates_and_ties_go_first():
    x = mx.array(np.array([[[[1.0, 5.0, 2.0], [0.0, 3.0, 4.0], [1.0, 1.0, 1.0]]]]), dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = F.max_pool2d(x, (2, 2), (1, 1))  # 5 is the max of both top windows
    np.testing.assert_array_equal(y.asnumpy(), [[[[5, 5], [3, 4]]]])
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy()[0, 0], [[0, 2, 0], [0, 1, 1], [0, 0, 0]])
    t = mx.array(np.ones((1, 1, 2, 2)), dtype=np.float64)
    t.attach_grad()
    with mx.autograd.record():
        z = F.max_pool2d(t, 2)
    z.backward()
    np.testing.assert_array_equal(t.grad.asnumpy()[0, 0], [[1, 0], [0, 0]])


def test_max_pool2d_padding_never_wins():
    x = mx.array(-np.ones((1, 1, 2, 2)) * 7, dtype=np.float32)
    np.testing.assert_array_equal(F.max_pool2d(x, 2, 1, 1).asnumpy(), np.full((1, 1, 3, 3), -7.0))


def test_pool_errors():
    with pytest.raises(ValueError, match="max_pool2d.*N, C, H, W"):
        F.max_pool2d(mx.array(rand(2, 4, 4)))
    with pytest.raises(ValueError, match="larger than the padded input"):
        F.avg_pool2d(mx.array(rand(1, 1, 2, 2)), 3)


def test_global_pools():
    check_grad(F.global_avg_pool2d, [rand(2, 3, 4, 5)], reference=lambda x: x.mean(axis=(2, 3), keepdims=True))
    check_grad(F.global_max_pool2d, [distinct(2, 3, 4, 5)], reference=lambda x: x.max(axis=(2, 3), keepdims=True))
    assert F.global_avg_pool2d(mx.array(rand(2, 3, 4, 5))).shape == (2, 3, 1, 1)


# -- nn_ops.py: dropout ----------------------------------------------------------------------------
def _dropout_mask(rate, shape, axes=(), seed=7):
    mx.random.seed(seed)
    ones = mx.array(np.ones(shape), dtype=np.float64)
    return F.dropout(ones, rate, axes=axes, training=True).asnumpy()


def test_dropout_mask_scaling_and_gradient():
    rate = 0.3
    mask = _dropout_mask(rate, (40, 50))
    kept = mask != 0
    np.testing.assert_allclose(mask[kept], 1 / (1 - rate))
    assert abs(kept.mean() - (1 - rate)) < 0.05
    x_np = rand(40, 50)
    mx.random.seed(7)
    x = mx.array(x_np, dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = F.dropout(x, rate)  # training follows record()
    np.testing.assert_allclose(y.asnumpy(), x_np * mask)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), mask)


def test_dropout_finite_differences():
    def fn(x):
        mx.random.seed(11)  # the same mask on every evaluation
        return F.dropout(x, 0.5, training=True)

    check_grad(fn, [rand(4, 5)])


def test_dropout_reproducible_and_axes_share_mask():
    np.testing.assert_array_equal(_dropout_mask(0.5, (6, 7)), _dropout_mask(0.5, (6, 7)))
    mask = _dropout_mask(0.5, (4, 3, 5), axes=(1,))
    np.testing.assert_array_equal(mask, np.broadcast_to(mask[:, :1], mask.shape))
    assert len(np.unique(mask[:, 0])) == 2  # both kept and dropped entries occur
    mask = _dropout_mask(0.5, (4, 3, 5), axes=(0, -1))
    np.testing.assert_array_equal(mask, np.broadcast_to(mask[:1, :, :1], mask.shape))


def test_dropout_identity_cases():
    x = mx.array(rand(3, 4))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0, training=True) is x
    assert F.dropout(x, 0.5) is x  # not training outside record()
    with mx.autograd.record(train_mode=False):
        assert F.dropout(x, 0.5) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0, training=True).asnumpy(), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="rate"):
        F.dropout(x, 1.5, training=True)


# -- nn_ops.py: embedding, take, pick --------------------------------------------------------------
def test_embedding_dense():
    idx = np.array([[0, 2, 2], [4, 0, 1]])
    check_grad(lambda i, w: F.embedding(i, w), [idx, rand(5, 3)], reference=lambda i, w: w[i])


def test_embedding_float_ids_and_clipping():
    w = mx.array(rand(4, 2))
    out = F.embedding(mx.array([0.0, 3.0, 7.0, -2.0]), w).asnumpy()
    np.testing.assert_allclose(out, w.asnumpy()[[0, 3, 3, 0]])


def test_embedding_sparse_grad_equals_dense():
    idx = mx.array(np.array([[3, 1, 3], [0, 3, 1]]), dtype=np.int64)
    w_np = rand(6, 4)
    head = mx.array(rand(2, 3, 4), dtype=np.float64)
    grads = {}
    for sparse_grad in (False, True):
        w = mx.array(w_np, dtype=np.float64)
        w.attach_grad(stype="row_sparse" if sparse_grad else None)
        with mx.autograd.record():
            out = F.embedding(idx, w, sparse_grad=sparse_grad)
        out.backward(head)
        grads[sparse_grad] = w.grad
    assert isinstance(grads[True], sparse.RowSparseTensor)
    assert grads[True].indices.asnumpy().tolist() == [0, 1, 3]
    np.testing.assert_allclose(grads[True].asnumpy(), grads[False].asnumpy())


def test_embedding_sparse_grad_into_dense_buffer():
    idx = mx.array(np.array([2, 2, 0]), dtype=np.int64)
    w = mx.array(rand(4, 3), dtype=np.float64)
    w.attach_grad()
    with mx.autograd.record():
        out = F.embedding(idx, w, sparse_grad=True)
    out.backward()
    expected = np.zeros((4, 3))
    expected[2] = 2
    expected[0] = 1
    np.testing.assert_allclose(w.grad.asnumpy(), expected)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take(axis):
    idx = np.array([[1, 0], [1, 1]])
    check_grad(lambda a, i: F.take(a, i, axis=axis), [rand(3, 2, 4), idx],
               reference=lambda a, i: np.take(a, i, axis=axis))


def test_index_arguments_may_be_lists_or_numpy():
    a = mx.array(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(F.take(a, [2, 0]).asnumpy(), a.asnumpy()[[2, 0]])
    np.testing.assert_array_equal(F.pick(a, np.array([1, 0, 3])).asnumpy(), [1, 4, 11])
    np.testing.assert_array_equal(F.embedding(np.array([[1]]), a).asnumpy(), a.asnumpy()[[[1]]])


def test_index_tensor_on_another_device_raises():
    with pytest.raises(ValueError, match=r"take: inputs live on different devices.*cpu\(0\).*cpu\(1\)"):
        F.take(mx.array(np.arange(3.0)), mx.array([0], device=mx.cpu(1)))


def test_take_modes():
    a = mx.array(np.arange(5.0))
    np.testing.assert_array_equal(F.take(a, mx.array([-1, 7])).asnumpy(), [0, 4])
    np.testing.assert_array_equal(F.take(a, mx.array([-1, 7]), mode="wrap").asnumpy(), [4, 2])
    np.testing.assert_array_equal(F.take(a, mx.array([-1, 2]), mode="raise").asnumpy(), [4, 2])
    with pytest.raises(IndexError, match="take"):
        F.take(a, mx.array([5]), mode="raise")
    with pytest.raises(ValueError, match="mode"):
        F.take(a, mx.array([0]), mode="bogus")


@pytest.mark.parametrize("axis,keepdims", [(-1, False), (-1, True), (0, False), (1, True)])
def test_pick(axis, keepdims):
    data = rand(3, 4)
    n = data.shape[axis]
    idx = RNG.integers(0, n, size=data.shape[1 - (axis % 2)])

    def ref(d, i):
        picked = np.take_along_axis(d, np.expand_dims(i, axis), axis=axis)
        return picked if keepdims else picked.squeeze(axis)

    check_grad(lambda d, i: F.pick(d, i, axis=axis, keepdims=keepdims), [data, idx], reference=ref)


def test_pick_index_shape_error():
    with pytest.raises(ValueError, match=r"pick: index must have shape \(3,\)"):
        F.pick(mx.array(rand(3, 4)), mx.array([0, 1]))


# -- nn_ops.py: normalisation ----------------------------------------------------------------------
def np_batch_norm(x, gamma, beta, mean, var, axis, eps):
    shape = [1] * x.ndim
    shape[axis] = -1
    r = lambda v: v.reshape(shape)  # noqa: E731
    return r(gamma) * (x - r(mean)) / np.sqrt(r(var) + eps) + r(beta)


@pytest.mark.parametrize("xs,axis", [((4, 3), 1), ((2, 3, 2, 2), 1), ((2, 3, 4), -1)], ids=str)
def test_batch_norm_train(xs, axis):
    c = xs[axis]
    x, gamma, beta = rand(*xs), rand(c, low=0.5, high=1.5), rand(c)
    red = tuple(i for i in range(len(xs)) if i != axis % len(xs))

    def fn(x, g, b):
        rm, rv = mx.zeros((c,), dtype=np.float64), mx.ones((c,), dtype=np.float64)
        return F.batch_norm(x, g, b, rm, rv, axis=axis, eps=1e-5, training=True)

    def ref(x, g, b):
        return np_batch_norm(x, g, b, x.mean(axis=red), x.var(axis=red), axis, 1e-5)

    check_grad(fn, [x, gamma, beta], reference=ref, rtol=1e-4, atol=1e-6)


def test_batch_norm_updates_running_stats_in_place():
    x_np = rand(8, 3, 2, 2) * 3 + 1
    rm0, rv0 = rand(3), rand(3, low=0.5, high=1.5)
    rm, rv = mx.array(rm0, dtype=np.float64), mx.array(rv0, dtype=np.float64)
    rm_buf = rm._data
    gamma, beta = mx.ones((3,), dtype=np.float64), mx.zeros((3,), dtype=np.float64)
    gamma.attach_grad()
    with mx.autograd.record():
        F.batch_norm(mx.array(x_np, dtype=np.float64), gamma, beta, rm, rv, momentum=0.9)
    mean, var = x_np.mean(axis=(0, 2, 3)), x_np.var(axis=(0, 2, 3))  # biased variance, as MXNet
    np.testing.assert_allclose(rm.asnumpy(), 0.9 * rm0 + 0.1 * mean)
    np.testing.assert_allclose(rv.asnumpy(), 0.9 * rv0 + 0.1 * var)
    assert rm._data is rm_buf and rm._node is None and rm.grad is None


@pytest.mark.parametrize("mode", ["inference", "global_stats"])
def test_batch_norm_running_stats_mode(mode):
    c = 3
    x, gamma, beta = rand(4, c, 2), rand(c, low=0.5, high=1.5), rand(c)
    rm0, rv0 = rand(c), rand(c, low=0.5, high=1.5)

    def fn(x, g, b):
        rm, rv = mx.array(rm0, dtype=np.float64), mx.array(rv0, dtype=np.float64)
        global_stats = mode == "global_stats"
        out = F.batch_norm(x, g, b, rm, rv, training=global_stats, use_global_stats=global_stats)
        np.testing.assert_array_equal(rm.asnumpy(), rm0)  # untouched
        return out

    check_grad(fn, [x, gamma, beta], reference=lambda x, g, b: np_batch_norm(x, g, b, rm0, rv0, 1, 1e-5))


def test_batch_norm_follows_autograd_training_flag():
    x = mx.array(rand(4, 2) * 5 + 3, dtype=np.float64)
    args = (mx.ones((2,), dtype=np.float64), mx.zeros((2,), dtype=np.float64))
    rm, rv = mx.zeros((2,), dtype=np.float64), mx.ones((2,), dtype=np.float64)
    out = F.batch_norm(x, *args, rm, rv, training=None)  # not training: running stats (0, 1)
    np.testing.assert_allclose(out.asnumpy(), x.asnumpy() / np.sqrt(1 + 1e-5))
    with mx.autograd.train_mode():
        out = F.batch_norm(x, *args, rm, rv, training=None)
    np.testing.assert_allclose(out.asnumpy().mean(axis=0), 0, atol=1e-9)


def test_batch_norm_fix_gamma():
    x, gamma, beta = rand(4, 3), rand(3, low=2, high=3), rand(3)

    def fn(x, g, b):
        return F.batch_norm(x, g, b, mx.zeros((3,), dtype=np.float64), mx.ones((3,), dtype=np.float64), fix_gamma=True)

    grads = check_grad(fn, [x, gamma, beta],
                       reference=lambda x, g, b: np_batch_norm(x, np.ones(3), b, x.mean(0), x.var(0), 1, 1e-5),
                       rtol=1e-4)
    np.testing.assert_array_equal(grads[1], np.zeros(3))


def test_batch_norm_float16_output_dtype():
    x = mx.array(rand(4, 3), dtype=np.float16)
    p = [mx.ones((3,)), mx.zeros((3,)), mx.zeros((3,)), mx.ones((3,))]
    out = F.batch_norm(x, *p)
    assert out.dtype == np.float16
    assert p[2].dtype == np.float32


def test_batch_norm_shape_error():
    with pytest.raises(ValueError, match=r"batch_norm: gamma must have shape \(3,\).*got \(4,\)"):
        F.batch_norm(mx.array(rand(2, 3)), mx.ones((4,)), mx.zeros((3,)), mx.zeros((3,)), mx.ones((3,)))


@pytest.mark.parametrize("xs,axis", [((3, 4), -1), ((2, 3, 4), -1), ((2, 3, 4), 1)], ids=str)
def test_layer_norm(xs, axis):
    c = xs[axis]
    x, gamma, beta = rand(*xs), rand(c, low=0.5, high=1.5), rand(c)

    def ref(x, g, b):
        shape = [1] * x.ndim
        shape[axis] = -1
        mu, var = x.mean(axis=axis, keepdims=True), x.var(axis=axis, keepdims=True)
        return g.reshape(shape) * (x - mu) / np.sqrt(var + 1e-5) + b.reshape(shape)

    check_grad(lambda x, g, b: F.layer_norm(x, g, b, axis=axis), [x, gamma, beta], reference=ref, rtol=1e-4)


def test_layer_norm_shape_error():
    with pytest.raises(ValueError, match="layer_norm: beta must have shape"):
        F.layer_norm(mx.array(rand(2, 3)), mx.ones((3,)), mx.zeros((2,)))


# -- nn_ops.py: fully connected --------------------------------------------------------------------
@pytest.mark.parametrize("xs,flatten,bias", [((4, 3), True, True), ((2, 3, 2), True, False),
                                             ((2, 3, 4), False, True), ((5, 4), False, False)], ids=str)
def test_fully_connected(xs, flatten, bias):
    in_units = int(np.prod(xs[1:])) if flatten else xs[-1]
    inputs = [rand(*xs), rand(5, in_units)] + ([rand(5)] if bias else [])

    def ref(x, w, *b):
        x2 = x.reshape(x.shape[0], -1) if flatten else x
        return x2 @ w.T + (b[0] if b else 0)

    check_grad(lambda x, w, *b: F.fully_connected(x, w, b[0] if b else None, flatten=flatten), inputs, reference=ref)


def test_fully_connected_errors():
    with pytest.raises(ValueError, match="fully_connected: weight expects 4 input features.*flattened to"):
        F.fully_connected(mx.array(rand(2, 3, 2)), mx.array(rand(5, 4)))
    with pytest.raises(ValueError, match=r"bias must have shape \(5,\)"):
        F.fully_connected(mx.array(rand(2, 4)), mx.array(rand(5, 4)), mx.array(rand(4)))


# -- errors name the op and its inputs -------------------------------------------------------------
def test_error_names_op_and_input_shapes():
    with pytest.raises(ValueError) as info:
        ops.add(mx.array(rand(2, 3)), mx.array(rand(4, 5)))
    msg = str(info.value)
    assert "add" in msg and "[2, 3]" in msg and "[4, 5]" in msg


def test_check_grad_catches_a_wrong_backward_and_forward():
    from mxlite.autograd.tensor import op_result

    def bad_square(x):  # forward right, backward off by a factor 2
        return op_result("bad_square", x._data ** 2, x.device, (x,), lambda g: (g * x._data,))

    with pytest.raises(AssertionError, match="gradient of input 0"):
        check_grad(bad_square, [rand(3)])
    with pytest.raises(AssertionError, match="forward disagrees"):
        check_grad(ops.square, [rand(3)], reference=lambda x: x ** 3)


def test_take_along_axis_grad_with_broadcast_indices():
    # Indices of size 1 on a non-gathered axis broadcast against x (NumPy's rule); each row then
    # picks the same columns, and the gradient lands on every row.
    from mxlite import autograd, ops

    x = mx.nd.array(np.arange(12.0).reshape(3, 4))
    x.attach_grad()
    with autograd.record():
        y = ops.take_along_axis(x, np.array([[1, 1, 3]]), 1)
    np.testing.assert_array_equal(y.asnumpy(), np.take_along_axis(np.arange(12.0).reshape(3, 4),
                                                                   np.array([[1, 1, 3]]), 1))
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [[0, 2, 0, 1]] * 3)

"""``autograd.grad``: first-order results, and second derivatives through ``create_graph=True``.

Every op with a differentiable backward is checked in float64: the Hessian-vector product obtained by
back-propagating through the recorded gradient equals the central difference of first-order gradients
(``check_hvp``; step 1e-5, so truncation ~1e-10 and rounding ~1e-11 stay far below ``rtol=1e-5, atol=1e-6``).
Each op is checked alone and squared (``op(x)**2``), so both halves of its rule are exercised: the part
depending on the input (second derivative of the op itself) and the part linear in the output gradient.
Then gradient penalties (WGAN-GP) on a Gluon MLP and CNN against finite differences of the penalty.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, ops
from mxlite.ops import activations as A
from mxlite.ops import nn_ops as F
from tests.gradcheck import check_hvp

RNG = np.random.default_rng(4321)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def distinct(*shape: int, scale: float = 0.1) -> np.ndarray:
    n = int(np.prod(shape))
    return ((RNG.permutation(n) - n / 2 + 0.5) * scale).reshape(shape)


def check(fn, inputs, **kwargs):
    """``fn`` alone and squared: the rule's dependence on its input and on the output gradient."""
    check_hvp(fn, inputs, **kwargs)
    check_hvp(lambda *xs: ops.square(fn(*xs)), inputs, **kwargs)


# -- elementwise ---------------------------------------------------------------------------------
UNARY = [
    ("negative", ops.negative, (-1, 1)), ("exp", ops.exp, (-1, 1)), ("log", ops.log, (0.5, 2)),
    ("sqrt", ops.sqrt, (0.5, 2)), ("square", ops.square, (-1, 1)), ("tanh", ops.tanh, (-1, 1)),
    ("sigmoid", ops.sigmoid, (-2, 2)), ("sin", ops.sin, (-2, 2)), ("cos", ops.cos, (-2, 2)),
    ("tan", ops.tan, (-1, 1)), ("arcsin", ops.arcsin, (-0.8, 0.8)), ("arccos", ops.arccos, (-0.8, 0.8)),
    ("arctan", ops.arctan, (-2, 2)), ("sinh", ops.sinh, (-1, 1)), ("cosh", ops.cosh, (-1, 1)),
    ("arcsinh", ops.arcsinh, (-2, 2)), ("arccosh", ops.arccosh, (1.5, 3)), ("arctanh", ops.arctanh, (-0.8, 0.8)),
    ("log1p", ops.log1p, (-0.5, 1)), ("expm1", ops.expm1, (-1, 1)), ("log2", ops.log2, (0.5, 2)),
    ("log10", ops.log10, (0.5, 2)), ("reciprocal", ops.reciprocal, (0.5, 2)), ("rsqrt", ops.rsqrt, (0.5, 2)),
    ("cbrt", ops.cbrt, (0.5, 2)), ("erf", ops.erf, (-2, 2)),
]


@pytest.mark.parametrize("name,op,domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, op, domain):
    check(op, [rand(3, 4, low=domain[0], high=domain[1])])


@pytest.mark.parametrize("name,op", [("relu", ops.relu), ("abs", ops.abs), ("clip", lambda x: ops.clip(x, -0.5, 0.55))],
                         ids=["relu", "abs", "clip"])
def test_piecewise_linear_unary(name, op):
    check(op, [distinct(3, 4, scale=0.13)])  # no entry within eps of a kink


BINARY = [
    ("add", ops.add), ("subtract", ops.subtract), ("multiply", ops.multiply), ("divide", ops.divide),
    ("power", ops.power), ("arctan2", ops.arctan2), ("hypot", ops.hypot),
]


@pytest.mark.parametrize("name,op", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4))], ids=str)
def test_binary(name, op, shapes):
    check(op, [rand(*shapes[0], low=0.5, high=2.0), rand(*shapes[1], low=0.5, high=1.5)])


def test_binary_scalar_operands_and_operators():
    x = rand(3, 4, low=0.5, high=2.0)
    for fn in (lambda a: a ** 3, lambda a: 2.0 ** a, lambda a: a / 3.0, lambda a: 3.0 / a, lambda a: 1.0 - a,
               lambda a: -a * 2.0 + a ** 0.5):
        check(fn, [x])


@pytest.mark.parametrize("op", [ops.maximum, ops.minimum], ids=["maximum", "minimum"])
def test_maximum_minimum(op):
    check(op, [distinct(3, 4), distinct(4) + 0.05])


def test_mod():
    check(ops.mod, [rand(3, 4, low=0.1, high=0.9), rand(3, 4, low=1.5, high=2.0)])


def test_where():
    cond = RNG.uniform(size=(3, 4)) > 0.5
    check(lambda c, x, y: ops.where(c, x * y, y * y), [cond, rand(3, 4), rand(4)], wrt=[1, 2])


@pytest.mark.parametrize("name", ["leaky_relu", "prelu", "elu", "selu", "gelu_erf", "gelu_tanh", "swish"])
def test_activations(name):
    fns = {"leaky_relu": lambda x: A.leaky_relu(x, 0.1), "prelu": lambda x, a: A.prelu(x, a), "elu": A.elu,
           "selu": A.selu, "gelu_erf": A.gelu, "gelu_tanh": lambda x: A.gelu(x, "tanh"), "swish": A.swish}
    x = distinct(2, 3, 4, scale=0.07)
    check(fns[name], [x, rand(3)] if name == "prelu" else [x])


# -- reductions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [ops.sum, ops.mean], ids=["sum", "mean"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), ((0, 2), True), (-1, True)], ids=str)
def test_sum_mean(op, axis, keepdims):
    check(lambda x: op(x, axis=axis, keepdims=keepdims), [rand(2, 3, 4)])


@pytest.mark.parametrize("op", [ops.max, ops.min], ids=["max", "min"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ((0, 2), False)], ids=str)
def test_max_min(op, axis, keepdims):
    check(lambda x: op(x, axis=axis, keepdims=keepdims), [distinct(2, 3, 4)])


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_cumsum(axis):
    check(lambda x: ops.cumsum(x, axis=axis), [rand(3, 4)])


@pytest.mark.parametrize("name", ["norm", "var", "std", "logsumexp"])
def test_composed_reductions(name):
    fn = {"norm": lambda x: ops.norm(x, axis=1), "var": lambda x: ops.var(x, axis=0, ddof=1),
          "std": lambda x: ops.std(x, axis=1), "logsumexp": lambda x: ops.logsumexp(x, axis=1)}[name]
    check(fn, [rand(3, 4)])


# -- shape ---------------------------------------------------------------------------------------
GETITEM_KEYS = [1, slice(1, 3), (slice(None, None, 2), slice(1, None)), (-1, slice(None, None, -1)),
                (Ellipsis, None, 1), (1, 2), np.array([0, 2, 0, 0]), (slice(None), np.array([3, 1, 3])),
                np.array([True, False, True])]


@pytest.mark.parametrize("key", GETITEM_KEYS, ids=[str(i) for i in range(len(GETITEM_KEYS))])
def test_getitem(key):
    check(lambda x: x[key], [rand(3, 4)])


SHAPE_OPS = {
    "reshape": (lambda x: ops.reshape(x, (4, -1)), (2, 3, 2)),
    "flatten": (ops.flatten, (2, 3, 2)),
    "transpose": (lambda x: ops.transpose(x, (2, 0, 1)), (2, 3, 4)),
    "transpose_negative": (lambda x: ops.transpose(x, -1, -3, -2), (2, 3, 4)),
    "T": (lambda x: x.T, (2, 3)),
    "swapaxes": (lambda x: ops.swapaxes(x, 0, -1), (2, 3, 4)),
    "moveaxis": (lambda x: ops.moveaxis(x, 0, -1), (2, 3, 4)),
    "expand_dims": (lambda x: ops.expand_dims(x, 1), (2, 3)),
    "squeeze": (lambda x: ops.squeeze(x, (1, 3)), (2, 1, 3, 1)),
    "broadcast_to": (lambda x: ops.broadcast_to(x, (2, 3, 4)), (1, 3, 1)),
    "tile": (lambda x: ops.tile(x, (2, 1, 3)), (2, 3)),
    "repeat": (lambda x: ops.repeat(x, 2, axis=1), (2, 3)),
    "repeat_flat": (lambda x: ops.repeat(x, 3), (2, 3)),
    "flip": (lambda x: ops.flip(x, 1), (2, 3)),
    "sort": (lambda x: ops.sort(x, axis=1), (3, 4)),
    "take_along_axis": (lambda x: ops.take_along_axis(x, np.array([[0, 2, 2], [1, 0, 3]]), axis=1), (2, 4)),
    "slice_axis": (lambda x: ops.slice_axis(x, 1, 1, 3), (2, 4)),
    "split": (lambda x: ops.concat([p * float(i + 1) for i, p in enumerate(ops.split(x, 2, axis=1))], 0), (2, 4)),
}


@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_shape_ops(name):
    fn, shape = SHAPE_OPS[name]
    check(fn, [distinct(*shape) if name == "sort" else rand(*shape)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_stack(axis):
    check(lambda *xs: ops.concat(xs, axis=axis), [rand(2, 3), rand(2, 3)])
    check(lambda *xs: ops.stack(xs, axis=axis), [rand(2, 3), rand(2, 3), rand(2, 3)])


def test_concat_with_a_constant_part():
    const = mx.array(rand(2, 3))
    check(lambda x: ops.concat([const, x * x], axis=0), [rand(2, 3)])


def test_astype_and_to_device():
    check(lambda x: ops.astype(x, np.float64, copy=True), [rand(2, 3)])
    check(lambda x: ops.to_device(ops.to_device(x, mx.cpu(1)) * 2.0, mx.cpu(0)), [rand(2, 3)])


# -- linear algebra and layers -------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2))], ids=str)
def test_matmul(shapes):
    check(ops.matmul, [rand(*shapes[0]), rand(*shapes[1])])


def test_dots():
    check(lambda a, b: mx.nd.dot(a, b, transpose_b=True), [rand(3, 4), rand(2, 4)])
    check(lambda a, b: ops.batch_dot(a, b, transpose_a=True), [rand(2, 4, 3), rand(2, 4, 2)])


@pytest.mark.parametrize("flatten,bias", [(True, True), (False, True), (True, False)], ids=str)
def test_fully_connected(flatten, bias):
    x = rand(2, 3, 4)
    w = rand(5, 12 if flatten else 4)
    inputs = [x, w] + ([rand(5)] if bias else [])
    check(lambda x, w, *b: F.fully_connected(x, w, b[0] if b else None, flatten=flatten), inputs)


@pytest.mark.parametrize("op", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(op, axis):
    check(lambda x: op(x, axis=axis), [rand(3, 4, low=-2, high=2)])


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm(axis):
    check(lambda x, g, b: F.layer_norm(x, g, b, axis=axis, eps=1e-3), [rand(2, 3, 4), rand(3 if axis == 1 else 4),
                                                                       rand(3 if axis == 1 else 4)],
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("training,use_global_stats,fix_gamma", [(True, False, False), (True, False, True),
                                                                (False, False, False), (True, True, False)], ids=str)
def test_batch_norm(training, use_global_stats, fix_gamma):
    def fn(x, gamma, beta):
        stats = (mx.array(np.array([0.1, -0.2, 0.3]), dtype=np.float64),
                 mx.array(np.array([0.5, 1.5, 0.8]), dtype=np.float64))  # fresh: the op updates them
        return F.batch_norm(x, gamma, beta, *stats, axis=1, eps=1e-3, training=training,
                            use_global_stats=use_global_stats, fix_gamma=fix_gamma)

    check(fn, [rand(4, 3, 2), rand(3), rand(3)], rtol=1e-4, atol=1e-5)


def test_batch_norm_without_training_flag_says_so():
    x = leaf(rand(2, 3))
    c = mx.array(np.ones(3), dtype=np.float64)
    with autograd.record():
        y = F.batch_norm(x, c, c, mx.array(np.zeros(3), dtype=np.float64), c, training=None).sum()
    with pytest.raises(NotImplementedError, match="training=None"):
        autograd.grad(y, [x], create_graph=True)


POOL_CASES = {
    "avg2d": lambda x: F.avg_pool2d(x, 2),
    "avg2d_pad_stride": lambda x: F.avg_pool2d(x, 3, strides=2, padding=1),
    "avg2d_ceil_no_pad_count": lambda x: F.avg_pool2d(x, 2, strides=2, padding=1, ceil_mode=True,
                                                      count_include_pad=False),
    "avg1d": lambda x: F.avg_pool(x[:, :, 0], 3, strides=1, padding=1),
    "global_avg": F.global_avg_pool2d,
    "global_max": F.global_max_pool2d,
}


@pytest.mark.parametrize("name", sorted(POOL_CASES))
def test_pooling(name):
    check(POOL_CASES[name], [distinct(2, 2, 5, 5, scale=0.03)])


def test_dropout_mask_is_a_constant():
    def fn(x):
        mx.random.seed(11)  # the same mask on every evaluation
        return F.dropout(x, 0.5, training=True)

    check(fn, [rand(4, 5)])


def test_embedding_take_pick():
    idx = np.array([[0, 3], [3, 1]])
    check(lambda i, w: F.embedding(i, w), [idx, rand(5, 3)], wrt=[1])
    check(lambda a: F.take(a, idx, axis=1), [rand(2, 4)])
    check(lambda a: a.take(np.array([2, 0, 2])), [rand(2, 2)])
    check(lambda d: F.pick(d, np.array([1, 0, 3]), axis=1), [rand(3, 4)])


CONV_CASES = {
    "2d_plain": ((2, 3, 5, 5), (4, 3, 3, 3), {}),
    "2d_stride_pad_bias": ((2, 2, 6, 5), (3, 2, 3, 2), {"stride": 2, "padding": 1, "bias": True}),
    "2d_dilation_groups": ((1, 4, 7, 6), (4, 2, 2, 3), {"dilation": (2, 1), "groups": 2, "bias": True}),
    "2d_uneven_stride": ((1, 2, 7, 6), (2, 2, 3, 3), {"stride": (3, 2)}),
    "1d": ((2, 2, 9), (3, 2, 3), {"stride": 2, "padding": 2}),
    "3d": ((1, 2, 4, 4, 3), (2, 2, 2, 2, 2), {"padding": 1, "bias": True}),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv(name):
    xs, ws, kw = CONV_CASES[name]
    kw = dict(kw)
    bias = kw.pop("bias", False)
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    check(lambda x, w, *b: F.conv(x, w, b[0] if b else None, **kw), inputs)
    if len(xs) == 4:
        check(lambda x, w, *b: F.conv2d(x, w, b[0] if b else None, **kw), inputs)


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1, "output_padding": 1}, {"groups": 2, "dilation": 2}],
                         ids=str)
def test_conv_transpose(kw):
    x, w = rand(2, 4, 3, 4), rand(4, 3 if kw.get("groups") else 3, 2, 3)
    check(lambda x, w, b: F.conv_transpose(x, w, b, **kw), [x, w, rand(3 * kw.get("groups", 1))])


def test_third_derivative():
    x = mx.array(np.array([0.3, -0.7]), dtype=np.float64)
    x.attach_grad()
    with autograd.record():
        y = (ops.tanh(x) * x ** 3).sum()
    with autograd.record():
        d1, = autograd.grad(y, [x], create_graph=True)
        d2, = autograd.grad(d1.sum(), [x], create_graph=True)
        d3 = d2.sum()
    d3.backward()
    t = np.tanh(x.asnumpy())
    s = 1 - t * t  # tanh' ; tanh'' = -2 t s ; tanh''' = s (6 t^2 - 2)
    v = x.asnumpy()
    f3 = s * (6 * t * t - 2) * v ** 3 + 3 * (-2 * t * s) * 3 * v ** 2 + 3 * s * 6 * v + t * 6
    np.testing.assert_allclose(x.grad.asnumpy(), f3, rtol=1e-10)


def _gradient_of(f):
    """x -> d/dx sum(w * f(x)**3), recorded: its Hessian-vector product is a third derivative of f, which
    differentiates the rules of the ops the first rules made (scatter, linear_transpose, conv_transpose)."""
    def fn(*xs):
        out = f(*xs)
        w = mx.array(np.random.default_rng(9).standard_normal(out.shape), dtype=np.float64)
        return autograd.grad((out * out * out * w).sum(), [xs[0]], create_graph=True)[0]

    return fn


THIRD_ORDER = {
    "getitem": (lambda x: x[np.array([0, 2, 0])], [(3, 4)]),
    "take": (lambda x: F.take(x, np.array([1, 1, 3]), axis=1), [(2, 4)]),
    "avg_pool": (lambda x: F.avg_pool2d(x, 3, strides=2, padding=1), [(1, 2, 5, 5)]),
    "conv": (lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "conv_transpose": (lambda x, w: F.conv_transpose(x, w, stride=2), [(1, 2, 3, 3), (2, 3, 2, 2)]),
    "fully_connected": (lambda x, w: F.fully_connected(x, w), [(2, 3), (4, 3)]),
    "softmax": (lambda x: F.softmax(x), [(2, 3)]),
    "layer_norm": (lambda x: F.layer_norm(x, mx.array(np.array([0.5, 2.0, 1.0])), mx.array(np.zeros(3)), eps=0.1),
                   [(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(THIRD_ORDER))
def test_third_order(name):
    f, shapes = THIRD_ORDER[name]
    check_hvp(_gradient_of(f), [rand(*shape) for shape in shapes], rtol=1e-4, atol=1e-5)


# -- gradient penalties --------------------------------------------------------------------------
def _penalty(net, x, create_graph):
    """WGAN-GP's term: mean over samples of (||d critic / d x||_2 - 1)^2."""
    xi = x.copy()
    xi.attach_grad()
    with autograd.record():
        score = net(xi)
        g, = autograd.grad(score, [xi], head_grads=[mx.nd.ones_like(score)], create_graph=create_graph)
        norm = ops.sqrt((g * g).reshape(g.shape[0], -1).sum(axis=1))
        return ((norm - 1.0) ** 2).mean()


def _check_penalty(net, x, n_checked=6, eps=1e-6):
    params = list(net.collect_params().values())
    loss = _penalty(net, x, create_graph=True)
    loss.backward()
    rng = np.random.default_rng(0)
    for p in params:
        data, grad = p.data().asnumpy(), p.grad().asnumpy()
        assert np.isfinite(grad).all()
        for k in rng.choice(data.size, size=min(n_checked, data.size), replace=False):
            values = []
            for sign in (1.0, -1.0):
                moved = data.copy()
                moved.reshape(-1)[k] += sign * eps
                p.set_data(mx.array(moved, dtype=np.float64))
                values.append(float(_penalty(net, x, create_graph=False).asnumpy()))
            p.set_data(mx.array(data, dtype=np.float64))
            numeric = (values[0] - values[1]) / (2 * eps)
            np.testing.assert_allclose(grad.reshape(-1)[k], numeric, rtol=1e-5, atol=1e-7,
                                       err_msg=f"penalty gradient of {p.name}[{k}]")
    return params


def test_gradient_penalty_mlp():
    mx.random.seed(3)
    net = mx.gluon.nn.Sequential()
    net.add(mx.gluon.nn.Dense(8, activation="tanh", dtype=np.float64),
            mx.gluon.nn.Dense(6, dtype=np.float64), mx.gluon.nn.LeakyReLU(0.2),
            mx.gluon.nn.Dense(1, dtype=np.float64))
    net.initialize(mx.init.Xavier())
    x = mx.array(rand(5, 4), dtype=np.float64)
    params = _check_penalty(net, x)
    assert len(params) == 6


def test_gradient_penalty_cnn():
    mx.random.seed(4)
    net = mx.gluon.nn.Sequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, strides=2, padding=1, activation="tanh"), mx.gluon.nn.AvgPool2D(2, strides=1),
            mx.gluon.nn.Conv2D(3, 2), mx.gluon.nn.LeakyReLU(0.2), mx.gluon.nn.Flatten(), mx.gluon.nn.Dense(1))
    net.cast(np.float64)
    net.initialize(mx.init.Xavier())
    x = mx.array(rand(3, 2, 7, 7), dtype=np.float64)
    params = _check_penalty(net, x)
    assert len(params) == 6


def test_gradient_penalty_leaves_first_order_path_intact():
    """The critic's plain loss and the penalty back-propagate together into the same parameters."""
    mx.random.seed(5)
    net = mx.gluon.nn.Dense(1, in_units=3, dtype=np.float64)
    net.initialize(mx.init.Xavier())
    x = mx.array(rand(4, 3), dtype=np.float64)
    xi = x.copy()
    xi.attach_grad()
    with autograd.record():
        score = net(xi)
        g, = autograd.grad(score, [xi], head_grads=[mx.nd.ones_like(score)], create_graph=True)
        loss = score.mean() + ((g * g).sum(axis=1)).mean()
    loss.backward()
    w = net.weight.data().asnumpy()
    # d/dw [mean(x) w^T ... ] : mean of x rows + d/dw ||w||^2 = 2 w
    np.testing.assert_allclose(net.weight.grad().asnumpy(), x.asnumpy().mean(axis=0, keepdims=True) + 2 * w,
                               rtol=1e-12)
    np.testing.assert_allclose(net.bias.grad().asnumpy(), [1.0], rtol=1e-12)


# -- grad() itself -------------------------------------------------------------------------------
def leaf(values, grad_req="write"):
    t = mx.array(np.asarray(values, dtype=np.float64))
    t.attach_grad(grad_req)
    return t


def test_grad_returns_gradients_without_touching_buffers():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    x.grad[:] = 7.0
    hooks = []
    w.add_ready_hook(lambda t: hooks.append(t))
    with autograd.record():
        y = (x * w).sum()
    gx, gw = autograd.grad(y, [x, w])
    np.testing.assert_array_equal(gx.asnumpy(), [3.0, 4.0])
    np.testing.assert_array_equal(gw.asnumpy(), [1.0, 2.0])
    np.testing.assert_array_equal(x.grad.asnumpy(), [7.0, 7.0])
    np.testing.assert_array_equal(w.grad.asnumpy(), [0.0, 0.0])
    assert hooks == [] and not x.fresh_grad
    with pytest.raises(ValueError, match="not part of a recorded graph"):  # freed: retain_graph defaults to False
        autograd.grad(y, [x])


def test_grad_results_never_share_memory():
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    with autograd.record():
        z = (x + y) * 2.0  # add's backward hands one array to both inputs
    head = mx.array([1.0, 1.0], dtype=np.float64)
    gx, gy = autograd.grad(z, [x, y], head_grads=[head])
    gx[:] = 0.0
    np.testing.assert_array_equal(gy.asnumpy(), [2.0, 2.0])
    with autograd.record():
        w = x.reshape(2)
    gw, = autograd.grad(w, [x], head_grads=[head])  # a view of the head gradient
    gw[:] = 5.0
    np.testing.assert_array_equal(head.asnumpy(), [1.0, 1.0])


def test_grad_single_variable_head_grads_and_retain():
    x = leaf([1.0, 2.0, 3.0])
    with autograd.record():
        y = x * x
    grads = autograd.grad(y, x, head_grads=mx.array([1.0, 0.0, 2.0], dtype=np.float64), retain_graph=True)
    assert isinstance(grads, list) and len(grads) == 1  # a list even for one variable, as MXNet
    g = grads[0]
    np.testing.assert_array_equal(g.asnumpy(), [2.0, 0.0, 12.0])
    g2, = autograd.grad([y], [x])  # the graph was kept
    np.testing.assert_array_equal(g2.asnumpy(), [2.0, 4.0, 6.0])


def test_grad_unused_variable_gets_zeros_and_intermediates_are_allowed():
    x, unused = leaf([2.0]), leaf([5.0, 6.0])
    with autograd.record():
        u = x * 3.0
        y = u * u
    gu, gx, gz = autograd.grad(y, [u, x, unused])
    np.testing.assert_array_equal(gu.asnumpy(), [12.0])
    np.testing.assert_array_equal(gx.asnumpy(), [36.0])
    np.testing.assert_array_equal(gz.asnumpy(), [0.0, 0.0])


def test_grad_walks_only_towards_the_variables():
    calls = []
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    with autograd.record():
        h = ops.tanh(w) * 2.0  # only w depends on this branch
        y = (x * h).sum()
    node = h._node.parents[0]._node  # tanh's node: its backward must not run for grad w.r.t. x
    raw = node.backward
    node.backward = lambda g: calls.append(1) or raw(g)
    gx, = autograd.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(gx.asnumpy(), 2 * np.tanh([3.0, 4.0]))
    assert calls == []


def test_grad_multiple_heads_and_devices():
    a, b = leaf([1.0]), mx.array([2.0], device=mx.cpu(1), dtype=np.float64)
    b.attach_grad()
    with autograd.record():
        ya = a * a
        yb = b * b * b
    with autograd.record():
        ga, gb = autograd.grad([ya, yb], [a, b], create_graph=True)
        total = ga + gb.to(mx.cpu(0))
    assert gb.device == mx.cpu(1)
    np.testing.assert_array_equal([ga.item(), gb.item()], [2.0, 12.0])
    total.backward()
    np.testing.assert_array_equal([a.grad.item(), b.grad.item()], [2.0, 12.0])


def test_grad_errors():
    x = leaf([1.0])
    with autograd.record():
        y = x * 2.0
    with pytest.raises(ValueError, match="cannot be empty"):
        autograd.grad(y, [])
    with pytest.raises(ValueError, match="variable 0 .* does not require a gradient"):
        autograd.grad(y, [mx.array([1.0])])
    with pytest.raises(TypeError, match="variable 0 is a list"):
        autograd.grad(y, [[x]])
    with pytest.raises(ValueError, match="head_grad shape"):
        autograd.grad(y, [x], head_grads=[mx.array([1.0, 2.0])])


@pytest.mark.parametrize("op", ["max_pool2d", "prod"])
def test_create_graph_through_an_op_without_second_derivative_names_it(op):
    x = leaf(rand(1, 2, 4, 4))
    with autograd.record():
        y = F.max_pool2d(x) if op == "max_pool2d" else ops.prod(x, axis=1)
        y = (y * 1.0).sum()
    with pytest.raises(NotImplementedError, match=f"'{op}'.*no differentiable backward"):
        autograd.grad(y, [x], create_graph=True)
    g, = autograd.grad(y, [x])  # the first-order gradient still works
    assert g.shape == x.shape


def test_create_graph_records_outside_record_and_backward_stays_plain():
    x = leaf([0.5])
    with autograd.record():
        y = ops.exp(x) * x
    d, = autograd.grad(y, [x], create_graph=True)  # outside record(): recorded anyway, as MXNet
    assert d._node is not None
    d.backward()
    e = np.exp(0.5)
    np.testing.assert_allclose(x.grad.asnumpy(), [e * 0.5 + 2 * e])
    assert not autograd.is_recording()


# -- GPU (emulated in CI) ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(mx.num_gpus() == 0, reason="needs a GPU (real or emulated)")
def test_gradient_penalty_on_gpu_matches_cpu():
    """A CNN critic with an embedding-free conv/dense path and indexing: penalty gradients on gpu(0) = on cpu(0)."""
    results = []
    for device in (mx.cpu(0), mx.gpu(0)):
        mx.random.seed(6)
        net = mx.gluon.nn.Sequential()
        net.add(mx.gluon.nn.Conv2D(3, 3, strides=2, padding=1, activation="tanh"), mx.gluon.nn.LeakyReLU(0.1),
                mx.gluon.nn.Flatten(), mx.gluon.nn.Dense(1))
        net.cast(np.float64)
        net.initialize(mx.init.Xavier(), device=device)
        x = mx.array(np.random.default_rng(2).uniform(-1, 1, (2, 2, 6, 6)), dtype=np.float64, device=device)
        xi = x.copy()
        xi.attach_grad()
        with autograd.record():
            score = net(xi[:, :, 1:, :])  # indexing: its rule scatters on the device
            g, = autograd.grad(score, [xi], head_grads=[mx.nd.ones_like(score)], create_graph=True)
            loss = ((ops.sqrt((g * g).reshape(2, -1).sum(axis=1)) - 1.0) ** 2).mean()
        loss.backward()
        assert g.device == device
        results.append([p.grad(device).asnumpy() for p in net.collect_params().values()])
    for cpu_grad, gpu_grad in zip(*results):
        np.testing.assert_allclose(gpu_grad, cpu_grad, rtol=1e-10, atol=1e-12)

"""Layers: forward against NumPy references, gradients against central finite differences (float64).

Each layer is built, initialised on cpu(0), run once to finish deferred initialisation, cast to
float64 and given random parameter values; then the gradient of ``sum(h * layer(x))`` (``h`` a
fixed random head) with respect to the input and every learnable parameter is compared with
central differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx

EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-7


# -- helpers --------------------------------------------------------------------------------------
def _build(layer, x_shape, x_dtype=np.float32, seed=0, randomize=True):
    """Initialise ``layer``, finish deferred init with one forward, cast to float64, randomise."""
    layer.initialize(device=mx.cpu(0))
    dummy = np.zeros(x_shape, dtype=x_dtype)
    layer(mx.array(dummy))
    layer.cast("float64")
    if randomize:
        rng = np.random.default_rng(seed)
        for name, p in layer.collect_params().items():
            if name.endswith("running_var"):
                p.set_data(rng.uniform(0.5, 2.0, p.shape))
            else:
                p.set_data(rng.standard_normal(p.shape))
    return layer


def _pvals(layer):
    return {name: p.data().asnumpy() for name, p in layer.collect_params().items()}


def _grad_check(layer, x, train=True, check_x=True, seed=1, rtol=RTOL, atol=ATOL):
    """Compare analytic gradients of ``sum(h * layer(x))`` with central differences.

    Returns the recorded output (NumPy) and the analytic gradients by name ('x' for the input).
    """
    x = np.array(x)
    x_is_float = np.issubdtype(x.dtype, np.floating)
    if x_is_float:
        x = x.astype(np.float64)
    params = {n: p for n, p in layer.collect_params().items() if p.grad_req != "null"}
    xt = mx.array(x)
    if check_x:
        xt.attach_grad()
    with mx.autograd.record(train_mode=train):
        out = layer(xt)
    out_np = out.asnumpy()
    head = np.random.default_rng(seed).standard_normal(out_np.shape)
    out.backward(mx.array(head))
    analytic = {n: p.grad().asnumpy() for n, p in params.items()}
    if check_x:
        analytic["x"] = xt.grad.asnumpy()

    def objective(xv):
        scope = mx.autograd.train_mode() if train else mx.autograd.predict_mode()
        with scope:
            return float(np.sum(head * layer(mx.array(xv)).asnumpy()))

    def numeric_of(arr, evaluate):
        num = np.zeros(arr.shape)
        for idx in np.ndindex(*arr.shape):
            old = arr[idx]
            arr[idx] = old + EPS
            plus = evaluate()
            arr[idx] = old - EPS
            minus = evaluate()
            arr[idx] = old
            num[idx] = (plus - minus) / (2 * EPS)
        return num

    if check_x:
        assert x_is_float
        num = numeric_of(x, lambda: objective(x))
        np.testing.assert_allclose(analytic["x"], num, rtol=rtol, atol=atol, err_msg="input gradient")
    for name, p in params.items():
        buf = p.data()._data  # float64 view into the arena; perturbed in place
        num = numeric_of(buf, lambda: objective(x))
        np.testing.assert_allclose(analytic[name], num, rtol=rtol, atol=atol, err_msg=f"gradient of {name}")
    return out_np, analytic


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# -- NumPy references -----------------------------------------------------------------------------
def _conv_ref(x, w, b, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, co, ho, wo))
    per_group = co // groups
    for o in range(co):
        g = o // per_group
        for i in range(ho):
            for j in range(wo):
                r0, c0 = i * stride[0], j * stride[1]
                patch = xp[:, g * cg:(g + 1) * cg, r0: r0 + dil[0] * (kh - 1) + 1: dil[0],
                           c0: c0 + dil[1] * (kw - 1) + 1: dil[1]]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _pool_ref(x, k, s, p, mode, count_include_pad=True):
    n, c, h, w = x.shape
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)
    ho = (h + 2 * p[0] - k[0]) // s[0] + 1
    wo = (w + 2 * p[1] - k[1]) // s[1] + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            win = xp[:, :, i * s[0]: i * s[0] + k[0], j * s[1]: j * s[1] + k[1]]
            if mode == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                r0, c0 = i * s[0] - p[0], j * s[1] - p[1]
                inside = (min(r0 + k[0], h) - max(r0, 0)) * (min(c0 + k[1], w) - max(c0, 0))
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (k[0] * k[1] if count_include_pad else inside)
    return out


# -- Dense ----------------------------------------------------------------------------------------
def test_dense_flatten_with_bias():
    layer = _build(mx.nn.Dense(5), (2, 3, 4))
    x = _rand((2, 3, 4))
    p = _pvals(layer)
    assert p["weight"].shape == (5, 12)
    out, _ = _grad_check(layer, x)
    np.testing.assert_allclose(out, x.reshape(2, 12) @ p["weight"].T + p["bias"], rtol=1e-12)


def test_dense_no_flatten():
    layer = _build(mx.nn.Dense(3, flatten=False), (2, 3, 4))
    x = _rand((2, 3, 4), 1)
    p = _pvals(layer)
    assert p["weight"].shape == (3, 4)
    out, _ = _grad_check(layer, x)
    assert out.shape == (2, 3, 3)
    np.testing.assert_allclose(out, x @ p["weight"].T + p["bias"], rtol=1e-12)


def test_dense_no_bias_with_activation():
    layer = _build(mx.nn.Dense(4, use_bias=False, activation="tanh", in_units=3), (2, 3))
    assert list(layer.collect_params()) == ["weight"]
    x = _rand((5, 3), 2)
    out, _ = _grad_check(layer, x)
    np.testing.assert_allclose(out, np.tanh(x @ _pvals(layer)["weight"].T), rtol=1e-12)


def test_dense_float64_constructor():
    layer = mx.nn.Dense(2, in_units=3, dtype="float64")
    layer.initialize(device=mx.cpu(0))
    assert layer.weight.data().dtype == np.float64
    y = layer(mx.array(np.ones((1, 3))))
    assert y.dtype == np.float64


def test_dense_in_units_mismatch():
    layer = mx.nn.Dense(2, in_units=3)
    layer.initialize(device=mx.cpu(0))
    with pytest.raises(ValueError):
        layer(mx.ones((1, 4)))


# -- Conv2D ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, x_shape", [
    (dict(channels=3, kernel_size=3), (2, 2, 5, 5)),
    (dict(channels=4, kernel_size=3, strides=2, padding=1), (2, 2, 6, 6)),
    (dict(channels=4, kernel_size=(2, 3), strides=(1, 2), padding=(1, 0), groups=2), (2, 4, 5, 6)),
    (dict(channels=2, kernel_size=2, dilation=2, use_bias=False), (1, 2, 5, 5)),
])
def test_conv2d(kwargs, x_shape):
    layer = _build(mx.nn.Conv2D(**kwargs), x_shape)
    p = _pvals(layer)
    groups = kwargs.get("groups", 1)
    assert p["weight"].shape[1] == x_shape[1] // groups
    x = _rand(x_shape, 3)
    out, _ = _grad_check(layer, x)

    def pair(v, default):
        v = kwargs.get(v, default)
        return (v, v) if isinstance(v, int) else v

    ref = _conv_ref(x, p["weight"], p.get("bias"), pair("strides", 1), pair("padding", 0), pair("dilation", 1),
                    groups)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_conv2d_activation_and_errors():
    layer = _build(mx.nn.Conv2D(2, 3, padding=1, activation="relu"), (1, 1, 4, 4))
    x = _rand((1, 1, 4, 4), 4)
    out = layer(mx.array(x)).asnumpy()
    p = _pvals(layer)
    np.testing.assert_allclose(out, np.maximum(_conv_ref(x, p["weight"], p["bias"], (1, 1), (1, 1), (1, 1), 1), 0),
                               rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError):
        mx.nn.Conv2D(3, 3, groups=2)
    with pytest.raises(ValueError, match="NCHW"):
        mx.nn.Conv2D(2, 3, layout="NCWH")
    bad = mx.nn.Conv2D(2, 3, groups=2)
    bad.initialize(device=mx.cpu(0))
    with pytest.raises(ValueError):
        bad(mx.ones((1, 3, 4, 4)))


# -- pooling --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, x_shape", [
    (dict(), (2, 2, 4, 4)),
    (dict(pool_size=3, strides=2, padding=1), (1, 2, 5, 5)),
    (dict(pool_size=(2, 3), strides=(1, 2)), (1, 1, 4, 7)),
])
def test_max_pool2d(kwargs, x_shape):
    layer = mx.nn.MaxPool2D(**kwargs)
    x = _rand(x_shape, 5)
    out, grads = _grad_check(layer, x)

    def pair(v, default):
        v = kwargs.get(v, default)
        return (v, v) if isinstance(v, int) else v

    k = pair("pool_size", 2)
    s = pair("strides", k) if "strides" in kwargs else k
    np.testing.assert_array_equal(out, _pool_ref(x, k, s, pair("padding", 0), "max"))
    # the gradient only reaches window maxima
    assert np.count_nonzero(grads["x"]) <= out.size


@pytest.mark.parametrize("kwargs, x_shape", [
    (dict(), (2, 2, 4, 4)),
    (dict(pool_size=3, strides=2, padding=1), (1, 2, 5, 5)),
    (dict(pool_size=3, strides=2, padding=1, count_include_pad=False), (1, 2, 5, 5)),
])
def test_avg_pool2d(kwargs, x_shape):
    layer = mx.nn.AvgPool2D(**kwargs)
    x = _rand(x_shape, 6)
    out, _ = _grad_check(layer, x)

    def pair(v, default):
        v = kwargs.get(v, default)
        return (v, v) if isinstance(v, int) else v

    k = pair("pool_size", 2)
    s = pair("strides", k) if "strides" in kwargs else k
    ref = _pool_ref(x, k, s, pair("padding", 0), "avg", kwargs.get("count_include_pad", True))
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


def test_global_avg_pool2d():
    x = _rand((2, 3, 4, 5), 7)
    out, grads = _grad_check(mx.nn.GlobalAvgPool2D(), x)
    assert out.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(out, x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)


def test_global_max_pool2d():
    x = _rand((2, 3, 3, 3), 8)
    out, _ = _grad_check(mx.nn.GlobalMaxPool2D(), x)
    np.testing.assert_array_equal(out, x.max(axis=(2, 3), keepdims=True))


def test_flatten():
    x = _rand((2, 3, 2, 2), 9)
    out, grads = _grad_check(mx.nn.Flatten(), x)
    np.testing.assert_array_equal(out, x.reshape(2, 12))
    head = np.random.default_rng(1).standard_normal((2, 12))
    np.testing.assert_array_equal(grads["x"], head.reshape(x.shape))


# -- Dropout --------------------------------------------------------------------------------------
def test_dropout_train_vs_predict():
    mx.random.seed(0)
    layer = mx.nn.Dropout(0.5)
    x = mx.array(np.random.default_rng(0).uniform(1.0, 2.0, (40, 50)))
    x.attach_grad()
    with mx.autograd.record():  # train mode
        y = layer(x)
    head = np.random.default_rng(1).standard_normal((40, 50))
    y.backward(mx.array(head))
    out, xv = y.asnumpy(), x.asnumpy()
    kept = out != 0
    assert 0.4 < 1 - kept.mean() < 0.6
    np.testing.assert_allclose(out[kept], 2.0 * xv[kept], rtol=1e-12)  # inverted scaling 1/(1-p)
    np.testing.assert_allclose(x.grad.asnumpy(), head * kept * 2.0, rtol=1e-12)
    # predict mode (default outside record, and record(train_mode=False)) is the identity
    np.testing.assert_array_equal(layer(x).asnumpy(), xv)
    with mx.autograd.record(train_mode=False):
        z = layer(x)
    np.testing.assert_array_equal(z.asnumpy(), xv)
    with mx.autograd.predict_mode():
        np.testing.assert_array_equal(layer(x).asnumpy(), xv)


def test_dropout_shared_axes_and_rate_zero():
    mx.random.seed(1)
    x = mx.ones((30, 8))
    with mx.autograd.train_mode():
        out = mx.nn.Dropout(0.5, axes=(1,))(x).asnumpy()
        same = mx.nn.Dropout(0.0)(x).asnumpy()
    rows_kept = out[:, 0] != 0
    np.testing.assert_array_equal(out, np.where(rows_kept[:, None], 2.0, 0.0) * np.ones((30, 8)))
    assert 0 < rows_kept.sum() < 30
    np.testing.assert_array_equal(same, np.ones((30, 8)))
    with pytest.raises(ValueError):
        mx.nn.Dropout(1.5)  # rate 1.0 is valid (MXNet: drops everything while training)


# -- BatchNorm ------------------------------------------------------------------------------------
def _bn_ref(x, gamma, beta, mean, var, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return gamma.reshape(shape) * (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) + beta.reshape(shape)


def test_batchnorm_train_uses_batch_stats_and_updates_running():
    layer = _build(mx.nn.BatchNorm(momentum=0.8), (4, 3, 2, 2))
    p = _pvals(layer)
    x = _rand((4, 3, 2, 2), 10) * 2.0 + 1.0
    with mx.autograd.record():
        out = layer(mx.array(x)).asnumpy()
    mu, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(out, _bn_ref(x, p["gamma"], p["beta"], mu, var), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(layer.running_mean.data().asnumpy(), 0.8 * p["running_mean"] + 0.2 * mu,
                               rtol=1e-12)
    np.testing.assert_allclose(layer.running_var.data().asnumpy(), 0.8 * p["running_var"] + 0.2 * var, rtol=1e-12)


def test_batchnorm_predict_uses_running_stats():
    layer = _build(mx.nn.BatchNorm(), (4, 3, 2, 2))
    p = _pvals(layer)
    x = _rand((4, 3, 2, 2), 11)
    out = layer(mx.array(x)).asnumpy()  # outside record: inference
    np.testing.assert_allclose(out, _bn_ref(x, p["gamma"], p["beta"], p["running_mean"], p["running_var"]),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(layer.running_mean.data().asnumpy(), p["running_mean"])
    np.testing.assert_array_equal(layer.running_var.data().asnumpy(), p["running_var"])


def test_batchnorm_params():
    layer = mx.nn.BatchNorm(in_channels=3)
    assert list(layer.collect_params()) == ["gamma", "beta", "running_mean", "running_var"]
    assert layer.running_mean.grad_req == "null" and layer.running_var.grad_req == "null"
    assert layer.gamma.grad_req == "write"
    assert mx.nn.BatchNorm(scale=False).gamma.grad_req == "null"


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_gradients(train):
    layer = _build(mx.nn.BatchNorm(), (3, 2, 2, 2))
    x = _rand((3, 2, 2, 2), 12)
    _, grads = _grad_check(layer, x, train=train)
    assert set(grads) == {"gamma", "beta", "x"}


def test_batchnorm_2d_input_and_no_scale():
    layer = _build(mx.nn.BatchNorm(scale=False), (5, 3))
    p = _pvals(layer)
    x = _rand((5, 3), 13)
    out, grads = _grad_check(layer, x, train=True)
    np.testing.assert_allclose(out, _bn_ref(x, np.ones(3), p["beta"], x.mean(0), x.var(0)), rtol=1e-10, atol=1e-12)
    assert "gamma" not in grads


# -- LayerNorm ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis, x_shape", [(-1, (3, 2, 5)), (1, (3, 4, 2))])
def test_layernorm(axis, x_shape):
    layer = _build(mx.nn.LayerNorm(axis=axis), x_shape)
    p = _pvals(layer)
    x = _rand(x_shape, 14)
    out, _ = _grad_check(layer, x)
    shape = [1] * len(x_shape)
    shape[axis] = -1
    mu, var = x.mean(axis=axis, keepdims=True), x.var(axis=axis, keepdims=True)
    ref = p["gamma"].reshape(shape) * (x - mu) / np.sqrt(var + 1e-5) + p["beta"].reshape(shape)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


# -- Embedding ------------------------------------------------------------------------------------
IDS = np.array([[1, 4, 1], [0, 4, 4]], dtype=np.int64)


def test_embedding_dense():
    layer = _build(mx.nn.Embedding(6, 3), IDS.shape, x_dtype=np.int64)
    w = _pvals(layer)["weight"]
    out, grads = _grad_check(layer, IDS, check_x=False)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out, w[IDS])
    head = np.random.default_rng(1).standard_normal(out.shape)
    expected = np.zeros((6, 3))
    np.add.at(expected, IDS.reshape(-1), head.reshape(-1, 3))
    np.testing.assert_allclose(grads["weight"], expected, rtol=1e-12)
    assert isinstance(layer.weight.grad(), mx.Tensor)
    # float ids work too (MXNet stores token ids as float32)
    np.testing.assert_array_equal(layer(mx.array(IDS.astype(np.float32))).asnumpy(), w[IDS])


def test_embedding_sparse_grad():
    layer = _build(mx.nn.Embedding(6, 3, sparse_grad=True), IDS.shape, x_dtype=np.int64)
    assert layer.weight.grad_stype == "row_sparse"
    w = _pvals(layer)["weight"]
    out, grads = _grad_check(layer, IDS, check_x=False)
    np.testing.assert_array_equal(out, w[IDS])
    g = layer.weight.grad()
    assert isinstance(g, mx.sparse.RowSparseTensor)
    assert g.shape == (6, 3) and g.dtype == np.float64
    np.testing.assert_array_equal(g.indices.asnumpy(), [0, 1, 4])  # only the looked-up rows
    head = np.random.default_rng(1).standard_normal(out.shape)
    expected = np.zeros((6, 3))
    np.add.at(expected, IDS.reshape(-1), head.reshape(-1, 3))
    np.testing.assert_allclose(g.data.asnumpy(), expected[[0, 1, 4]], rtol=1e-12)
    np.testing.assert_allclose(grads["weight"], expected, rtol=1e-12)
    layer.weight.zero_grad()
    g0 = layer.weight.grad()
    assert isinstance(g0, mx.sparse.RowSparseTensor) and g0.indices.size == 0


# -- Activation -----------------------------------------------------------------------------------
_ACT_REFS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "softrelu": lambda x: np.log1p(np.exp(x)),
    "softsign": lambda x: x / (1.0 + np.abs(x)),
}


@pytest.mark.parametrize("name", sorted(_ACT_REFS))
def test_activation(name):
    x = _rand((3, 4), 15) * 3.0
    x[np.abs(x) < 1e-2] = 0.5  # keep finite differences away from relu's kink
    layer = mx.nn.Activation(name)
    out, _ = _grad_check(layer, x)
    np.testing.assert_allclose(out, _ACT_REFS[name](x), rtol=1e-12, atol=1e-14)
    dense = _build(mx.nn.Dense(2, activation=name, in_units=4), (1, 4))
    p = _pvals(dense)
    np.testing.assert_allclose(dense(mx.array(x)).asnumpy(), _ACT_REFS[name](x @ p["weight"].T + p["bias"]),
                               rtol=1e-12, atol=1e-14)


def test_softrelu_is_stable():
    x = mx.array(np.array([-800.0, 0.0, 800.0]))
    np.testing.assert_allclose(mx.nn.Activation("softrelu")(x).asnumpy(), [0.0, np.log(2.0), 800.0])


def test_unknown_activation():
    with pytest.raises(ValueError, match="relu"):
        mx.nn.Activation("gelu_fancy")
    with pytest.raises(ValueError):
        mx.nn.Dense(2, activation="swishy")


# -- small compositions ---------------------------------------------------------------------------
def test_lambda_and_small_cnn_gradients():
    net = mx.nn.Sequential(
        mx.nn.Conv2D(2, 3, padding=1), mx.nn.BatchNorm(), mx.nn.Activation("tanh"), mx.nn.MaxPool2D(),
        mx.nn.Flatten(), mx.nn.Lambda(lambda t: t * 2.0), mx.nn.Dense(3))
    _build(net, (2, 1, 4, 4))
    _grad_check(net, _rand((2, 1, 4, 4), 16), train=True)

"""The MXNet 1.x operators that hybrid_forward code calls as ``F.*`` (``F`` = ``mx.nd``), added in
mxlite/arrays/nd.py: each forward against a NumPy reference of MXNet's documented semantics and
each gradient against finite differences in float64 (tests/gradcheck.py).
"""

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon import nn
from tests.gradcheck import check_grad

F = mx.nd
RNG = np.random.default_rng(7)


def _x(*shape):
    return RNG.standard_normal(shape)


# -- normalisation -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,axes", [("instance", (1, 2, 3)), ("channel", (1,)), ("spatial", (2, 3))])
def test_l2_normalization_modes(mode, axes):
    x = _x(2, 3, 2, 2)

    def ref(a):
        return a / np.sqrt(np.sum(a * a, axis=axes, keepdims=True) + 1e-10)

    check_grad(lambda t: F.L2Normalization(t, mode=mode), [x], reference=ref)
    check_grad(lambda t: F.L2Normalization(t, eps=0.5, mode=mode), [x],
               reference=lambda a: a / np.sqrt(np.sum(a * a, axis=axes, keepdims=True) + 0.5))


def test_l2_normalization_refuses_bad_mode_and_rank():
    with pytest.raises(ValueError, match="mode"):
        F.L2Normalization(F.ones((2, 3)), mode="row")
    with pytest.raises(ValueError, match=">= 3 axes"):
        F.L2Normalization(F.ones((2, 3)), mode="channel")


def test_instance_norm_and_group_norm():
    x, g, b = _x(2, 4, 3), _x(4), _x(4)

    def inst(a, gg, bb):
        mu = a.mean(axis=2, keepdims=True)
        var = a.var(axis=2, keepdims=True)
        return (a - mu) / np.sqrt(var + 1e-3) * gg[None, :, None] + bb[None, :, None]

    check_grad(F.InstanceNorm, [x, g, b], reference=inst, rtol=1e-4, atol=1e-6)
    gg, bb = _x(2), _x(2)

    def group(a, g2, b2):
        r = a.reshape(2, 2, -1)
        out = (r - r.mean(axis=2, keepdims=True)) / np.sqrt(r.var(axis=2, keepdims=True) + 1e-5)
        return (out * g2[None, :, None] + b2[None, :, None]).reshape(a.shape)

    check_grad(lambda a, g2, b2: F.GroupNorm(a, g2, b2, num_groups=2), [x, gg, bb], reference=group, rtol=1e-4)
    # the 2.x spelling: one gamma/beta per channel
    check_grad(lambda a, g4, b4: F.GroupNorm(a, g4, b4, num_groups=2), [x, g, b], rtol=1e-4)


def test_layer_norm_and_batch_norm_operators():
    x, g, b = _x(3, 4), _x(4), _x(4)
    check_grad(F.LayerNorm, [x, g, b], rtol=1e-4,
               reference=lambda a, gg, bb: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
               * gg + bb)
    xb = _x(4, 3, 2)
    mm, mv = np.zeros(3), np.ones(3)

    def bn(a, gg, bb):  # MXNet's operator defaults: eps=1e-3, fix_gamma=True (gamma is taken as 1)
        mu = a.mean(axis=(0, 2), keepdims=True)
        var = a.var(axis=(0, 2), keepdims=True)
        return (a - mu) / np.sqrt(var + 1e-3) + bb[None, :, None]

    check_grad(lambda a, gg, bb: F.BatchNorm(a, gg, bb, F.array(mm, dtype="float64"), F.array(mv, dtype="float64")),
               [xb, _x(3), _x(3)], reference=bn, rtol=1e-4, wrt=[0, 2])
    moving_mean, moving_var = F.zeros((3,)), F.ones((3,))
    data = F.array(xb)
    with mx.autograd.record():
        F.BatchNorm(data, F.ones((3,)), F.zeros((3,)), moving_mean, moving_var)
    np.testing.assert_allclose(moving_mean.asnumpy(), 0.1 * xb.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)


# -- sequences -----------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1])
def test_sequence_mask(axis):
    x = _x(4, 3, 2) if axis == 0 else _x(3, 4, 2)
    lengths = np.array([1, 4, 2])

    def ref(a):
        t = np.arange(4)
        keep = (t[:, None] < lengths[None, :]) if axis == 0 else (t[None, :] < lengths[:, None])
        return np.where(keep[..., None], a, -1.0)

    check_grad(lambda t: F.SequenceMask(t, F.array(lengths), use_sequence_length=True, value=-1.0, axis=axis),
               [x], reference=ref)
    np.testing.assert_array_equal(F.SequenceMask(F.array(x)).asnumpy(), x.astype(np.float32))


def test_sequence_last_and_reverse():
    x = _x(4, 3, 2)
    lengths = np.array([1, 4, 2])
    check_grad(lambda t: F.SequenceLast(t, F.array(lengths), use_sequence_length=True), [x],
               reference=lambda a: a[lengths - 1, np.arange(3)])
    xb = x.transpose(1, 0, 2).copy()  # (N, T, C)
    check_grad(lambda t: F.SequenceLast(t, F.array(lengths), use_sequence_length=True, axis=1), [xb],
               reference=lambda a: a[np.arange(3), lengths - 1])
    check_grad(lambda t: F.SequenceLast(t), [x], reference=lambda a: a[-1])

    def rev(a):
        out = a.copy()
        for n, n_len in enumerate(lengths):
            out[:n_len, n] = a[:n_len, n][::-1]
        return out

    check_grad(lambda t: F.SequenceReverse(t, F.array(lengths), use_sequence_length=True), [x], reference=rev)
    check_grad(lambda t: F.SequenceReverse(t), [x], reference=lambda a: a[::-1])
    with pytest.raises(ValueError, match="lengths"):
        F.SequenceMask(F.array(x), F.array([5, 1, 1]), use_sequence_length=True)


def test_softmax_and_log_softmax_with_length():
    x = _x(2, 3, 5)
    length = np.array([[1, 5, 3], [2, 4, 5]])
    mask = np.arange(5)[None, None, :] < length[..., None]

    def ref_softmax(a):
        e = np.where(mask, np.exp(a - np.where(mask, a, -np.inf).max(-1, keepdims=True)), 0.0)
        return e / e.sum(-1, keepdims=True)

    check_grad(lambda t: F.softmax(t, length=F.array(length), use_length=True), [x], reference=ref_softmax)
    check_grad(lambda t: F.log_softmax(t, length=F.array(length), use_length=True), [x],
               reference=lambda a: np.where(mask, np.log(np.where(mask, ref_softmax(a), 1.0)), 0.0))
    # length along axis 1: length has the shape without that axis
    check_grad(lambda t: F.softmax(t, axis=1, length=F.array([[1, 2, 3, 1, 2], [3, 3, 3, 3, 3]]), use_length=True),
               [x])
    # use_length=False ignores length, as MXNet
    np.testing.assert_allclose(F.softmax(F.array(x), length=F.array(length)).asnumpy(),
                               F.softmax(F.array(x)).asnumpy())


def test_softmax_family():
    x = _x(3, 4)
    check_grad(F.softmin, [x], reference=lambda a: np.exp(-a) / np.exp(-a).sum(-1, keepdims=True))
    xi = _x(2, 3, 2)
    check_grad(lambda t: F.SoftmaxActivation(t), [xi],
               reference=lambda a: (np.exp(a) / np.exp(a).sum(axis=(1, 2), keepdims=True)))
    check_grad(lambda t: F.SoftmaxActivation(t, mode="channel"), [xi],
               reference=lambda a: np.exp(a) / np.exp(a).sum(axis=1, keepdims=True))
    label = np.array([1, 0, 3])
    check_grad(lambda t: F.softmax_cross_entropy(t, F.array(label)), [x],
               reference=lambda a: np.array([-np.sum((a - np.log(np.exp(a).sum(-1, keepdims=True)))[np.arange(3),
                                                                                                      label])]))


# -- layers as operators -------------------------------------------------------------------------
def test_convolution_and_deconvolution_match_the_layers():
    x, w, b = _x(2, 3, 5, 5), _x(4, 3, 3, 3), _x(4)
    check_grad(lambda a, ww, bb: F.Convolution(a, ww, bb, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=4),
               [x, w, b], rtol=1e-4)
    layer = nn.Conv2D(4, 3, strides=2, padding=1, in_channels=3)
    layer.initialize()
    layer.cast("float64")
    layer.weight.set_data(w)
    layer.bias.set_data(b)
    np.testing.assert_allclose(F.Convolution(F.array(x, dtype="float64"), F.array(w, dtype="float64"),
                                             F.array(b, dtype="float64"), kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                             num_filter=4).asnumpy(),
                               layer(mx.nd.array(x, dtype="float64")).asnumpy(), rtol=1e-10)
    x1, w1 = _x(2, 3, 6), _x(4, 3, 3)
    check_grad(lambda a, ww: F.Convolution(a, ww, kernel=(3,), num_filter=4, no_bias=True), [x1, w1], rtol=1e-4)
    xd, wd = _x(1, 3, 3, 3), _x(3, 2, 3, 3)
    check_grad(lambda a, ww: F.Deconvolution(a, ww, kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                                             num_filter=2), [xd, wd], rtol=1e-4)
    assert F.Deconvolution(F.array(xd), F.array(wd), kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                           num_filter=2).shape == (1, 2, 6, 6)
    with pytest.raises(ValueError, match="kernel"):
        F.Convolution(F.array(x), F.array(w), kernel=(2, 2), num_filter=4)
    with pytest.raises(ValueError, match="layout"):
        F.Convolution(F.array(x), F.array(w), kernel=(3, 3), num_filter=4, layout="NHWC")


@pytest.mark.parametrize("pool_type", ["max", "avg", "sum"])
def test_pooling(pool_type):
    x = _x(2, 2, 4, 5)
    kw = dict(kernel=(2, 2), stride=(2, 1), pad=(1, 0), pool_type=pool_type)

    def ref(a):
        padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (0, 0)), constant_values=-np.inf if pool_type == "max" else 0)
        rows = [padded[:, :, i:i + 2] for i in range(0, padded.shape[2] - 1, 2)]
        out = np.stack([np.stack([r[:, :, :, j:j + 2] for j in range(4)], axis=-1) for r in rows], axis=2)
        # out: (N, C, Ho, 2, 2, Wo)
        red = {"max": np.max, "avg": np.mean, "sum": np.sum}[pool_type]
        return red(out, axis=(3, 4))

    check_grad(lambda t: F.Pooling(t, **kw), [x], reference=ref)
    check_grad(lambda t: F.Pooling(t, global_pool=True, pool_type=pool_type), [x],
               reference=lambda a: {"max": np.max, "avg": np.mean, "sum": np.sum}[pool_type](a, axis=(2, 3),
                                                                                              keepdims=True))


def test_pooling_defaults_and_refusals():
    # MXNet's operator: stride 1 and pad 0 by default (the layers default the stride to the kernel)
    assert F.Pooling(F.ones((1, 1, 4, 4)), kernel=(2, 2)).shape == (1, 1, 3, 3)
    full = F.Pooling(F.ones((1, 1, 5, 5)), kernel=(2, 2), stride=(2, 2), pooling_convention="full")
    assert full.shape == (1, 1, 3, 3)
    with pytest.raises(NotImplementedError):
        F.Pooling(F.ones((1, 1, 4, 4)), kernel=(2, 2), pool_type="lp")
    with pytest.raises(ValueError, match="pool_type"):
        F.Pooling(F.ones((1, 1, 4, 4)), kernel=(2, 2), pool_type="median")


def test_embedding_operator():
    w = _x(5, 3)
    ids = np.array([[0, 4], [2, 2]])
    check_grad(lambda ww: F.Embedding(F.array(ids), ww, input_dim=5, output_dim=3), [w], reference=lambda ww: ww[ids])
    with pytest.raises(ValueError, match="input_dim"):
        F.Embedding(F.array(ids), F.array(w), input_dim=6, output_dim=3)


# -- shapes, gathers, padding --------------------------------------------------------------------
def test_depth_to_space_and_space_to_depth():
    x = _x(1, 8, 2, 3)

    def d2s(a):  # MXNet's documented DCR order
        n, c, h, w = a.shape
        return a.reshape(n, 2, 2, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * 2, w * 2)

    check_grad(lambda t: F.depth_to_space(t, 2), [x], reference=d2s)
    y = _x(1, 2, 4, 6)
    check_grad(lambda t: F.space_to_depth(t, 2), [y])
    np.testing.assert_allclose(F.depth_to_space(F.space_to_depth(F.array(y), 2), 2).asnumpy(), y.astype(np.float32))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad(mode):
    x = _x(1, 2, 3, 4)
    width = (0, 0, 0, 0, 2, 1, 1, 3)
    kw = {"constant_values": 0.5} if mode == "constant" else {}
    check_grad(lambda t: F.pad(t, mode=mode, pad_width=width, constant_value=0.5), [x],
               reference=lambda a: np.pad(a, ((0, 0), (0, 0), (2, 1), (1, 3)), mode=mode, **kw))


def test_gathers_and_diag():
    x = _x(3, 4)
    idx = np.array([[2, 0, 2], [1, 3, 1]])
    check_grad(lambda t: F.gather_nd(t, F.array(idx)), [x], reference=lambda a: a[idx[0], idx[1]])
    check_grad(lambda t: F.batch_take(t, F.array([3, 0, 1])), [x], reference=lambda a: a[np.arange(3), [3, 0, 1]])
    for k in (-1, 0, 2):
        check_grad(lambda t, k=k: F.diag(t, k=k), [x], reference=lambda a, k=k: np.diag(a, k))
        check_grad(lambda t, k=k: F.diag(t, k=k), [_x(3)], reference=lambda a, k=k: np.diag(a, k))
    x3 = _x(2, 3, 3)
    check_grad(lambda t: F.diag(t, axis1=1, axis2=2), [x3], reference=lambda a: np.diagonal(a, axis1=1, axis2=2))


def test_small_elementwise_operators():
    x = _x(3, 4)
    check_grad(F.log_sigmoid, [x], reference=lambda a: -np.log1p(np.exp(-a)))
    check_grad(F.mish, [x], reference=lambda a: a * np.tanh(np.log1p(np.exp(a))))
    check_grad(F.softsign, [x], reference=lambda a: a / (1 + np.abs(a)))
    xs = x * 3  # some values in each clipped region
    check_grad(F.hard_sigmoid, [xs], reference=lambda a: np.clip(0.2 * a + 0.5, 0, 1))
    pos = np.abs(x) + 0.5
    check_grad(F.rcbrt, [pos], reference=lambda a: 1 / np.cbrt(a))
    check_grad(F.degrees, [x], reference=np.degrees)
    check_grad(F.radians, [x], reference=np.radians)
    check_grad(F.contrib.div_sqrt_dim, [x], reference=lambda a: a / 2.0)
    check_grad(lambda a, b, c: F.add_n(a, b, c), [x, _x(3, 4), _x(3, 4)], reference=lambda a, b, c: a + b + c)
    check_grad(lambda a, b: F.ElementWiseSum([a, b]), [x, x + 1], reference=lambda a, b: a + b)


def test_moments_split_v2_and_reductions():
    x = _x(3, 4)
    check_grad(lambda t: F.moments(t, axes=(1,))[1], [x], reference=lambda a: a.var(axis=1))
    check_grad(lambda t: F.moments(t, axes=(0,), keepdims=True)[0], [x], reference=lambda a: a.mean(0, keepdims=True))
    parts = F.split_v2(F.array(x), (1, 3), axis=1)
    assert [p.shape for p in parts] == [(3, 1), (3, 2), (3, 1)]
    check_grad(lambda t: F.split_v2(t, 2, axis=1)[1], [x], reference=lambda a: a[:, 2:])
    np.testing.assert_allclose(F.max_axis(F.array(x), axis=1).asnumpy(), x.max(1).astype(np.float32))
    np.testing.assert_allclose(F.broadcast_minus(F.array(x), F.ones((1, 4))).asnumpy(),
                               (x - 1).astype(np.float32), rtol=1e-6)


def test_upsampling_nearest():
    x = _x(1, 2, 2, 3)
    check_grad(lambda t: F.UpSampling(t, scale=2, sample_type="nearest"), [x],
               reference=lambda a: a.repeat(2, axis=2).repeat(2, axis=3))
    small = _x(1, 1, 1, 3)
    out = F.UpSampling(F.array(x), F.array(small), scale=2, sample_type="nearest", num_args=2)
    assert out.shape == (1, 3, 4, 6)
    np.testing.assert_allclose(out.asnumpy()[0, 2], small[0, 0].repeat(4, axis=0).repeat(2, axis=1), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="bilinear"):
        F.UpSampling(F.array(x), scale=2, sample_type="bilinear")


def test_index_helpers_have_no_gradient_and_mxnet_values():
    data = F.ones((2, 3))
    np.testing.assert_array_equal(F.arange_like(data).asnumpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(F.arange_like(data, start=1, step=2, axis=1).asnumpy(), [1.0, 3.0, 5.0])
    np.testing.assert_array_equal(F.arange_like(data, repeat=2).asnumpy(), [[0, 0, 1], [1, 2, 2]])
    np.testing.assert_array_equal(F.shape_array(data).asnumpy(), [2, 3])
    np.testing.assert_array_equal(F.size_array(data).asnumpy(), [6])
    np.testing.assert_array_equal(F.argmax_channel(F.array([[0, 1, 2], [3, 4, 5]])).asnumpy(), [2.0, 2.0])


def test_every_new_operator_returns_the_nd_face():
    x = F.ones((2, 3, 4))
    for out in (F.L2Normalization(x), F.SequenceMask(x), F.SequenceLast(x), F.softmax(x), F.pad(
            F.ones((1, 1, 2, 2)), pad_width=(0, 0, 0, 0, 1, 1, 1, 1)), F.contrib.div_sqrt_dim(x),
                F.linalg_gemm2(F.ones((2, 2)), F.ones((2, 2)))):
        assert type(out) is mx.autograd.tensor.NDTensor
        assert out.reshape((-1, 0)).ndim == 2


@pytest.mark.parametrize("align_corners", [True, False])
def test_bilinear_resize_2d(align_corners):
    x = _x(1, 2, 3, 4)

    def ref(a, out_h, out_w):  # MXNet's source-index rule, pixel by pixel
        def src(n_in, n_out, i):
            if align_corners:
                return i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            return max((i + 0.5) * n_in / n_out - 0.5, 0.0)

        out = np.zeros(a.shape[:2] + (out_h, out_w))
        for i in range(out_h):
            for j in range(out_w):
                y, xx = src(a.shape[2], out_h, i), src(a.shape[3], out_w, j)
                y0, x0 = int(np.floor(y)), int(np.floor(xx))
                y1, x1 = min(y0 + 1, a.shape[2] - 1), min(x0 + 1, a.shape[3] - 1)
                dy, dx = y - y0, xx - x0
                out[..., i, j] = ((1 - dy) * (1 - dx) * a[..., y0, x0] + (1 - dy) * dx * a[..., y0, x1]
                                  + dy * (1 - dx) * a[..., y1, x0] + dy * dx * a[..., y1, x1])
        return out

    check_grad(lambda t: F.contrib.BilinearResize2D(t, height=5, width=7, align_corners=align_corners), [x],
               reference=lambda a: ref(a, 5, 7))
    check_grad(lambda t: F.contrib.BilinearResize2D(t, scale_height=0.5, scale_width=0.5,
                                                    align_corners=align_corners), [x],
               reference=lambda a: ref(a, 1, 2))
    like = F.ones((1, 1, 6, 2))
    assert F.contrib.BilinearResize2D(F.array(x), like, mode="like").shape == (1, 2, 6, 2)

"""Every loss against a NumPy reference (per-sample values) and finite-difference gradients."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon import loss as L
from tests.gradcheck import check_grad

RNG = np.random.default_rng(99)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def batch_mean(loss, batch_axis=0):
    axes = tuple(i for i in range(loss.ndim) if i != batch_axis % loss.ndim)
    return loss.mean(axis=axes) if axes else loss


# -- L2 / L1 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pred_shape,label_shape",
                         [((4, 3), (4, 3)), ((4,), (4,)), ((4, 1), (4,)), ((2, 3, 2), (2, 6))], ids=str)
def test_l2_loss(pred_shape, label_shape):
    fn = L.L2Loss()
    check_grad(lambda p, y: fn(p, y), [rand(*pred_shape), rand(*label_shape)],
               reference=lambda p, y: batch_mean(0.5 * (p - y.reshape(p.shape)) ** 2))


def test_l2_loss_weight_and_sample_weight():
    fn = L.L2Loss(weight=3.0)
    p, y, sw = rand(4, 3), rand(4, 3), rand(4, 1, low=0, high=2)
    check_grad(lambda p, y, s: fn(p, y, s), [p, y, sw],
               reference=lambda p, y, s: batch_mean(1.5 * (p - y) ** 2 * s))


@pytest.mark.parametrize("weight", [None, 2.0])
def test_l1_loss(weight):
    fn = L.L1Loss(weight=weight)
    p = rand(4, 3)
    y = p + np.where(RNG.random((4, 3)) > 0.5, 1, -1) * rand(4, 3, low=0.1, high=1.0)  # stay off |0|
    check_grad(lambda p, y: fn(p, y), [p, y],
               reference=lambda p, y: batch_mean(np.abs(p - y) * (1 if weight is None else weight)))


def test_batch_axis():
    fn = L.L2Loss(batch_axis=1)
    check_grad(lambda p, y: fn(p, y), [rand(3, 5, 2), rand(3, 5, 2)],
               reference=lambda p, y: batch_mean(0.5 * (p - y) ** 2, batch_axis=1))
    assert fn(mx.array(rand(3, 5, 2)), mx.array(rand(3, 5, 2))).shape == (5,)


# -- sigmoid binary cross-entropy ------------------------------------------------------------------
def np_bce_logits(x, z, pos_weight=None):
    p = 1 / (1 + np.exp(-x))
    pw = 1.0 if pos_weight is None else pos_weight
    return -(pw * z * np.log(p) + (1 - z) * np.log(1 - p))


def _logits(*shape):
    x = rand(*shape, low=-3, high=3)
    x[np.abs(x) < 1e-2] = 0.5  # |x| and relu(x) have kinks at 0
    return x


@pytest.mark.parametrize("label_shape", [(4, 3), (12,)], ids=str)
def test_sigmoid_bce_from_logits(label_shape):
    fn = L.SigmoidBinaryCrossEntropyLoss()
    x, z = _logits(4, 3), RNG.random(label_shape)
    check_grad(lambda x, z: fn(x, z), [x, z], reference=lambda x, z: batch_mean(np_bce_logits(x, z.reshape(x.shape))))


def test_sigmoid_bce_pos_weight():
    fn = L.SigmoidBCELoss()
    x, z, pw = _logits(4, 3), (RNG.random((4, 3)) > 0.5).astype(float), rand(3, low=0.5, high=3)
    check_grad(lambda x, z, w: fn(x, z, None, w), [x, z, pw], wrt=[0],
               reference=lambda x, z, w: batch_mean(np_bce_logits(x, z, w)))


def test_sigmoid_bce_from_sigmoid():
    fn = L.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True, weight=0.5)
    p, z = rand(4, 3, low=0.05, high=0.95), RNG.random((4, 3))
    eps = 1e-12
    check_grad(lambda p, z: fn(p, z), [p, z],
               reference=lambda p, z: batch_mean(-0.5 * (z * np.log(p + eps) + (1 - z) * np.log(1 - p + eps))))
    pw = rand(4, 3, low=0.5, high=2)
    check_grad(lambda p, z, w: fn(p, z, None, w), [p, z, pw], wrt=[0],
               reference=lambda p, z, w: batch_mean(-0.5 * (w * z * np.log(p + eps) + (1 - z) * np.log(1 - p + eps))))


def test_sigmoid_bce_extreme_logits_are_finite():
    fn = L.SigmoidBinaryCrossEntropyLoss()
    x = mx.array([[-500.0, 500.0]], dtype=np.float32)
    with np.errstate(over="raise"):
        out = fn(x, mx.array([[1.0, 0.0]])).asnumpy()
    np.testing.assert_allclose(out, [500.0], rtol=1e-6)


# -- softmax cross-entropy -------------------------------------------------------------------------
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32, np.float32])
@pytest.mark.parametrize("label_shape", [(5,), (5, 1)], ids=str)
def test_softmax_ce_sparse(label_dtype, label_shape):
    fn = L.SoftmaxCrossEntropyLoss()
    pred, label = rand(5, 4), RNG.integers(0, 4, size=label_shape).astype(label_dtype)

    def ref(p, y):
        return -np.take_along_axis(np_log_softmax(p), y.reshape(-1, 1).astype(int), axis=-1)[:, 0]

    check_grad(lambda p, y: fn(p, y), [pred, label], reference=ref)


def test_softmax_ce_dense_label():
    fn = L.SoftmaxCrossEntropyLoss(sparse_label=False)
    pred, label = rand(5, 4), RNG.dirichlet(np.ones(4), size=5)
    check_grad(lambda p, y: fn(p, y), [pred, label], reference=lambda p, y: -(np_log_softmax(p) * y).sum(-1))


def test_softmax_ce_from_logits_axis_and_weights():
    fn = L.SoftmaxCELoss(axis=1, from_logits=True, weight=2.0)
    logp = np_log_softmax(rand(3, 4, 2), axis=1)
    label = RNG.integers(0, 4, size=(3, 2))
    sw = rand(3, 1, 1, low=0, high=1)

    def ref(p, y, s):
        picked = np.take_along_axis(p, y[:, None, :], axis=1)
        return batch_mean(-2.0 * picked * s)

    check_grad(lambda p, y, s: fn(p, y, s), [logp, label, sw], reference=ref)


def test_softmax_ce_matches_one_hot_dense():
    pred = mx.array(rand(6, 5), dtype=np.float32)
    label = RNG.integers(0, 5, size=6)
    sparse_loss = L.SoftmaxCrossEntropyLoss()(pred, mx.array(label, dtype=np.int64))
    dense_loss = L.SoftmaxCrossEntropyLoss(sparse_label=False)(pred, mx.array(np.eye(5)[label]))
    np.testing.assert_allclose(sparse_loss.asnumpy(), dense_loss.asnumpy(), rtol=1e-5)
    assert sparse_loss.dtype == np.float32 and sparse_loss.shape == (6,)


def test_numpy_labels_accepted():
    pred = mx.array(rand(3, 2), dtype=np.float32)
    out = L.L2Loss()(pred, rand(3, 2))  # a float64 NumPy label does not upcast the loss
    assert out.dtype == np.float32
    out = L.SoftmaxCELoss()(pred, np.array([0, 1, 1]))
    assert out.shape == (3,)


# -- errors ----------------------------------------------------------------------------------------
def test_loss_errors():
    with pytest.raises(ValueError, match=r"label of shape \(5,\).*prediction's shape \(4, 3\)"):
        L.L2Loss()(mx.array(rand(4, 3)), mx.array(rand(5)))
    with pytest.raises(ValueError, match=r"sample_weight of shape \(4,\).*\(4, 1\)"):
        L.SoftmaxCELoss()(mx.array(rand(4, 3)), mx.array([0, 1, 2, 0]), mx.array(rand(4)))
    with pytest.raises(TypeError, match="weight must be a number"):
        L.L1Loss(weight="heavy")
    with pytest.raises(ValueError, match="label must have shape"):
        L.SoftmaxCELoss()(mx.array(rand(4, 3)), mx.array([0, 1]))


def test_loss_inside_record_backprops_to_parameters():
    w = mx.array(rand(3, 2), dtype=np.float64)
    w.attach_grad()
    x = mx.array(rand(4, 3), dtype=np.float64)
    y = mx.array([0, 1, 1, 0], dtype=np.int64)
    with mx.autograd.record():
        loss = L.SoftmaxCELoss()(x @ w, y)
    loss.backward()
    p = np.exp(np_log_softmax(x.asnumpy() @ w.asnumpy()))
    expected = x.asnumpy().T @ (p - np.eye(2)[y.asnumpy()])
    np.testing.assert_allclose(w.grad.asnumpy(), expected, rtol=1e-10)


def test_repr_and_forward_is_the_hook():
    fn = L.L2Loss()
    assert "L2Loss" in repr(fn)
    assert L.Loss.forward is not L.L2Loss.forward
    with pytest.raises(NotImplementedError):
        L.Loss()(mx.array(rand(2)), mx.array(rand(2)))


# -- MXNet 2.x's other losses: float64 references, finite-difference gradients, and mirrors of MXNet's
# tests/python/unittest/test_loss.py (same calls, same values; mx.array stands for mx.nd/np.array).
def _away_from(x, points, gap=1e-3):
    """``x`` nudged off the kinks at ``points`` (finite differences straddling a kink disagree)."""
    x = x.copy()
    for p in points:
        close = np.abs(x - p) < gap
        x[close] = p + 10 * gap
    return x


def test_loss_ndarray():  # MXNet: test_loss_ndarray
    output, label = mx.array([1.0, 2, 3, 4]), mx.array([1.0, 3, 5, 7])
    weighting = mx.array([0.5, 1, 0.5, 1])
    assert L.L1Loss()(output, label).sum().item() == 6.0
    assert L.L1Loss(weight=0.5)(output, label).sum().item() == 3.0
    assert L.L1Loss()(output, label, weighting).sum().item() == 5.0
    assert L.L2Loss()(output, label).sum().item() == 7.0
    assert L.L2Loss(weight=0.25)(output, label).sum().item() == 1.75
    assert L.L2Loss()(output, label, weighting).sum().item() == 6
    output, label, weighting = mx.array([[0.0, 2], [1, 4]]), mx.array([0, 1]), mx.array([[0.5], [1.0]])
    np.testing.assert_allclose(L.SoftmaxCrossEntropyLoss()(output, label).asnumpy(), [2.12692809, 0.04858733],
                               rtol=1e-6)
    np.testing.assert_allclose(L.SoftmaxCrossEntropyLoss()(output, label, weighting).asnumpy(),
                               [1.06346405, 0.04858733], rtol=1e-6)


def test_ctc_loss():  # MXNet: test_ctc_loss
    want = [18.82820702, 16.50581741]
    labels = np.array([[1, 0, -1, -1], [2, 1, 1, -1]])
    np.testing.assert_allclose(L.CTCLoss()(mx.ones((2, 20, 4)), mx.array(labels)).asnumpy(), want, rtol=1e-5)
    np.testing.assert_allclose(L.CTCLoss(layout="TNC")(mx.ones((20, 2, 4)), mx.array(labels)).asnumpy(), want,
                               rtol=1e-5)
    np.testing.assert_allclose(
        L.CTCLoss(layout="TNC", label_layout="TN")(mx.ones((20, 2, 4)), mx.array(labels.T)).asnumpy(), want, rtol=1e-5)
    np.testing.assert_allclose(
        L.CTCLoss()(mx.ones((2, 20, 4)), mx.array(np.array([[2, 1, 2, 2], [3, 2, 2, 2]])), None,
                    mx.array(np.array([2, 3]))).asnumpy(), want, rtol=1e-5)
    np.testing.assert_allclose(
        L.CTCLoss()(mx.ones((2, 25, 4)), mx.array(np.array([[2, 1, -1, -1], [3, 2, 2, -1]])),
                    mx.array(np.array([20, 20]))).asnumpy(), want, rtol=1e-5)
    np.testing.assert_allclose(
        L.CTCLoss()(mx.ones((2, 25, 4)), mx.array(np.array([[2, 1, 3, 3], [3, 2, 2, 3]])),
                    mx.array(np.array([20, 20])), mx.array(np.array([2, 3]))).asnumpy(), want, rtol=1e-5)


def np_ctc(pred_ntc, labels, pred_lengths=None, label_lengths=None):
    """Reference CTC (blank = last class) by the alpha recursion in probability space, per sample."""
    out = []
    for n in range(pred_ntc.shape[0]):
        steps = pred_ntc.shape[1] if pred_lengths is None else int(pred_lengths[n])
        x = pred_ntc[n, :steps]
        prob = np.exp(x - x.max(axis=1, keepdims=True))
        prob /= prob.sum(axis=1, keepdims=True)
        blank = x.shape[1] - 1
        seq = [int(v) for v in labels[n]]
        seq = seq[:int(label_lengths[n])] if label_lengths is not None else seq[:seq.index(-1) if -1 in seq else None]
        ext = [blank]
        for v in seq:
            ext += [v, blank]
        alpha = np.zeros(len(ext))
        alpha[0] = prob[0, blank]
        if len(ext) > 1:
            alpha[1] = prob[0, ext[1]]
        for t in range(1, steps):
            new = np.zeros_like(alpha)
            for s in range(len(ext)):
                a = alpha[s] + (alpha[s - 1] if s >= 1 else 0)
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    a += alpha[s - 2]
                new[s] = a * prob[t, ext[s]]
            alpha = new
        out.append(-np.log(alpha[-1] + (alpha[-2] if len(ext) > 1 else 0)))
    return np.array(out)


@pytest.mark.parametrize("layout", ["NTC", "TNC"])
def test_ctc_loss_value_and_gradient(layout):
    labels = np.array([[0, 1, 1, -1], [2, -1, -1, -1], [1, 0, 2, 1]])
    pred = rand(3, 7, 4, low=-2, high=2)
    fn = L.CTCLoss(layout=layout)
    given = pred if layout == "NTC" else np.ascontiguousarray(pred.transpose(1, 0, 2))
    check_grad(lambda p, y: fn(p, y), [given, labels], reference=lambda p, y: np_ctc(pred, labels))


def test_ctc_loss_lengths_and_weights_gradient():
    labels = np.array([[0, 1, 2], [2, 2, 0]])
    pred_lengths, label_lengths = np.array([5, 6]), np.array([2, 1])
    pred = rand(2, 6, 4)
    fn = L.CTCLoss(weight=0.5)
    check_grad(lambda p, y, pl, ll, w: fn(p, y, pl, ll, w), [pred, labels, pred_lengths, label_lengths,
                                                           np.array([2.0, 1.0])],
               reference=lambda p, y, pl, ll, w: 0.5 * w * np_ctc(pred, labels, pred_lengths, label_lengths), wrt=[0])


def test_ctc_loss_errors():
    with pytest.raises(ValueError, match="layout"):
        L.CTCLoss(layout="NCT")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        L.CTCLoss()(mx.ones((1, 5, 4)), mx.array(np.array([[4, 1]])))
    with pytest.raises(ValueError, match="2 label sequences for a batch of 1"):
        L.CTCLoss()(mx.ones((1, 5, 4)), mx.array(np.array([[0], [1]])))


@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_huber_loss(rho):
    fn = L.HuberLoss(rho=rho)
    p, y = rand(4, 3, low=-2, high=2), rand(4, 3, low=-2, high=2)
    p = y + _away_from(p - y, [-rho, rho])

    def ref(p, y):
        d = np.abs(y - p)
        return batch_mean(np.where(d > rho, d - 0.5 * rho, 0.5 / rho * d ** 2))

    check_grad(lambda p, y: fn(p, y), [p, y], reference=ref)
    sw = rand(4, 1, low=0, high=2)
    check_grad(lambda p, y, s: L.HuberLoss(rho=rho, weight=2.0)(p, y, s), [p, y, sw],
               reference=lambda p, y, s: 2.0 * batch_mean(np.where(np.abs(y - p) > rho, np.abs(y - p) - 0.5 * rho,
                                                                    0.5 / rho * (y - p) ** 2) * s))


@pytest.mark.parametrize("klass,square", [(L.HingeLoss, False), (L.SquaredHingeLoss, True)])
def test_hinge_losses(klass, square):
    label = np.sign(rand(5, 2)) + (rand(5, 2) == 0)
    pred = _away_from(rand(5, 2, low=-2, high=2) * label, [1.0]) * label  # margin - pred*label off 0
    fn = klass(margin=1.0)

    def ref(p, y):
        h = np.maximum(0, 1.0 - p * y)
        return batch_mean(h ** 2 if square else h)

    check_grad(lambda p, y: fn(p, y), [pred, label], reference=ref, wrt=[0])
    flat = klass(margin=0.5, weight=3.0, batch_axis=1)  # (N,) labels for (N, 1) predictions also reshape
    out = flat(mx.array(np.array([[0.2], [-0.4]])), mx.array(np.array([1.0, 1.0])))
    np.testing.assert_allclose(out.asnumpy(), [3.0 * np.mean(np.array([0.3, 0.9]) ** (2 if square else 1))])


@pytest.mark.parametrize("label_format", ["signed", "binary"])
def test_logistic_loss(label_format):
    x = _logits(4, 3)
    z = (RNG.random((4, 3)) > 0.5).astype(np.float64)
    label = 2 * z - 1 if label_format == "signed" else z
    fn = L.LogisticLoss(label_format=label_format)
    check_grad(lambda x, y: fn(x, y), [x, label], reference=lambda x, y: batch_mean(np.log1p(np.exp(-x * (2 * z - 1)))),
               wrt=[0])


def test_logistic_loss_equal_bce():  # MXNet: test_logistic_loss_equal_bce
    data = mx.random.uniform(-10, 10, shape=(100, 1))
    label = mx.array(np.round(RNG.random((100, 1))))
    bce = L.SigmoidBCELoss(from_sigmoid=False)(data, label).asnumpy()
    np.testing.assert_allclose(L.LogisticLoss(label_format="binary")(data, label).asnumpy(), bce, atol=1e-6)
    np.testing.assert_allclose(L.LogisticLoss(label_format="signed")(data, 2 * label.asnumpy() - 1).asnumpy(), bce,
                               atol=1e-6)
    with pytest.raises(ValueError, match="label_format"):
        L.LogisticLoss(label_format="01")


def test_bce_equal_ce2():  # MXNet: test_bce_equal_ce2
    out1 = mx.random.uniform(0.1, 0.9, shape=(100, 1), dtype="float64")
    out2 = np.log(np.concatenate([1 - out1.asnumpy(), out1.asnumpy()], axis=1) + 1e-8)
    label = np.round(RNG.random((100, 1)))
    np.testing.assert_allclose(L.SigmoidBCELoss(from_sigmoid=True)(out1, label).asnumpy(),
                               L.SoftmaxCELoss(from_logits=True)(mx.array(out2), label).asnumpy(), rtol=1e-6)


@pytest.mark.parametrize("from_logits", [True, False])
def test_kl_div_loss(from_logits):
    label = np.exp(np_log_softmax(rand(4, 5)))
    pred = rand(4, 5)
    fn = L.KLDivLoss(from_logits=from_logits)

    def ref(p, y):
        logp = p if from_logits else np_log_softmax(p)
        return batch_mean(y * (np.log(y + 1e-12) - logp))

    check_grad(lambda p, y: fn(p, y), [pred, label], reference=ref)
    sw = rand(4, 1, low=0, high=1)
    check_grad(lambda p, y, s: L.KLDivLoss(from_logits, weight=0.5)(p, y, s), [pred, label, sw],
               reference=lambda p, y, s: 0.5 * ref(p, y) * s[:, 0], wrt=[0])


def test_triplet_loss():
    pred, pos, neg = rand(4, 3), rand(4, 3), rand(4, 3)
    fn = L.TripletLoss(margin=0.5)

    def ref(p, a, b):
        return np.maximum(((a - p) ** 2).sum(axis=1) - ((b - p) ** 2).sum(axis=1) + 0.5, 0)

    assert np.all(np.abs(((pos - pred) ** 2).sum(1) - ((neg - pred) ** 2).sum(1) + 0.5) > 1e-3)
    check_grad(lambda p, a, b: fn(p, a, b), [pred, pos, neg], reference=ref)
    sw = np.array([1.0, 0.0, 2.0, 0.5])
    check_grad(lambda p, a, b, s: L.TripletLoss(margin=0.5, weight=2.0)(p, a, b, s), [pred, pos, neg, sw],
               reference=lambda p, a, b, s: 2.0 * ref(p, a, b) * s, wrt=[0])
    axis1 = L.TripletLoss(batch_axis=1)(mx.array(pred.T), mx.array(pos.T), mx.array(neg.T))
    raw = ((pos - pred) ** 2).sum(axis=1) - ((neg - pred) ** 2).sum(axis=1)
    np.testing.assert_allclose(axis1.asnumpy(), np.maximum(raw + 1, 0), rtol=1e-6)  # margin 1 (the default)


def test_poisson_nll_loss():  # MXNet: test_poisson_nll_loss (the same three checks), with gradients
    pred = rand(3, 4, low=0.1, high=2.0)
    target = rand(3, 4, low=0.0, high=3.0)
    check_grad(lambda p, t: L.PoissonNLLLoss(from_logits=True)(p, t), [pred, target],
               reference=lambda p, t: np.mean(np.exp(p) - t * p, axis=1))
    check_grad(lambda p, t: L.PoissonNLLLoss(from_logits=False)(p, t), [pred, target],
               reference=lambda p, t: np.mean(p - t * np.log(p + 1e-08), axis=1))
    np_pred, np_target = rand(2, 3, low=1, high=5), rand(2, 3, low=1, high=5)
    full = np.mean((np_pred - np_target * np.log(np_pred + 1e-08))
                   + (np_target * np.log(np_target) - np_target + 0.5 * np.log(2 * np_target * np.pi))
                   * (np_target > 1), axis=1)
    check_grad(lambda p, t: L.PoissonNLLLoss(from_logits=False, compute_full=True)(p, t), [np_pred, np_target],
               reference=lambda p, t: full)
    zero_target = L.PoissonNLLLoss(compute_full=True)(mx.array([[0.5, 0.2]]), mx.array([[0.0, 1.0]]))
    np.testing.assert_allclose(zero_target.asnumpy(), [np.mean(np.exp([0.5, 0.2]) - np.array([0.0, 0.2]))])


def test_cosine_loss():  # MXNet: test_cosine_loss, plus the margin and gradients
    input1, input2 = rand(3, 2), rand(3, 2)
    label = np.array([1.0, -1.0, -1.0])

    def ref(a, b, y, margin=0.0):
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        return np.where(y == 1, 1 - cos, np.clip(cos - margin, 0, 1 - margin))

    loss = L.CosineEmbeddingLoss()(mx.array(input1), mx.array(input2), mx.array(label))
    x = (input1 * input2).sum(1) / (np.sqrt((input1 ** 2).sum(1)) * np.sqrt((input2 ** 2).sum(1)))
    np.testing.assert_allclose(loss.asnumpy(), np.where(label == 1, 1 - x, np.maximum(x, 0)), rtol=1e-6, atol=1e-7)
    a = np.array([[1.0, 0.5], [0.3, 1.0], [1.0, 0.2], [-0.5, 1.0]])
    b = np.array([[0.8, 0.9], [0.2, 1.0], [0.1, 1.0], [1.0, 0.3]])
    y = np.array([1.0, -1.0, -1.0, 1.0])
    check_grad(lambda a, b, y: L.CosineEmbeddingLoss(margin=0.1)(a, b, y), [a, b, y],
               reference=lambda a, b, y: ref(a, b, y, 0.1), wrt=[0, 1])
    check_grad(lambda a, b, y, s: L.CosineEmbeddingLoss(weight=2.0)(a, b, y, s), [a, b, y, rand(4, 1, low=0, high=1)],
               reference=lambda a, b, y, s: 2.0 * ref(a, b, y) * s[:, 0], wrt=[0, 1])


def np_sdml(x1, x2, smoothing=0.3):
    n = x1.shape[0]
    d = ((x1[:, None, :] - x2[None, :, :]) ** 2).sum(axis=2)
    logp = np_log_softmax(-d, axis=1)
    gold = np.eye(n)
    labels = gold * (1 - smoothing) + (1 - gold) * smoothing / (n - 1)
    return (labels * (np.log(labels + 1e-12) - logp)).mean(axis=1)


def test_sdml_loss_value_and_gradient():
    x1, x2 = rand(4, 3), rand(4, 3)
    check_grad(lambda a, b: L.SDMLLoss()(a, b), [x1, x2], reference=np_sdml)
    check_grad(lambda a, b: L.SDMLLoss(smoothing_parameter=0.1, weight=2.0)(a, b), [x1, x2],
               reference=lambda a, b: 2.0 * np_sdml(a, b, 0.1))
    with pytest.raises(ValueError, match="smoothing_parameter"):
        L.SDMLLoss(smoothing_parameter=1.0)
    with pytest.raises(ValueError, match="at least 2 samples"):
        L.SDMLLoss()(mx.array(rand(1, 3)), mx.array(rand(1, 3)))


def test_sdml_loss_trains_aligned_pairs():  # MXNet: test_sdml_loss (aligned pairs become each other's nearest)
    mx.random.seed(1234)
    n, dim = 10, 8
    data = RNG.normal(size=(n, dim))
    x2 = mx.array(data + 0.1 * RNG.normal(size=(n, dim)), dtype="float32")  # float32 layers refuse float64
    net = mx.nn.Dense(dim, in_units=dim)
    net.initialize(mx.init.Xavier())
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    fn = L.SDMLLoss()
    x1 = mx.array(data, dtype="float32")
    first = None
    for _ in range(150):
        with mx.autograd.record():
            loss = fn(net(x1), x2)
        loss.backward()
        trainer.step(n)
        first = loss.mean().item() if first is None else first
    assert loss.mean().item() < first
    d = ((net(x1).asnumpy()[:, None, :] - x2.asnumpy()[None, :, :]) ** 2).sum(axis=2)
    assert (d.argmin(axis=1) == np.arange(n)).mean() >= 0.9

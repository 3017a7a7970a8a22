"""kernels/softmax_ce.cu against its NumPy twin (mxlite.ops._loss_kernels), bit for bit, and the fused
softmax cross-entropy in gluon.loss.SoftmaxCrossEntropyLoss against the composed ops it replaces.

On CPU devices the serial host build (one thread per block) must give the twin's bits; the GPU-marked
tests run real block sizes (emulated GPUs where there is none). The twin is held to float64 references
(log_ge1 by a sweep, the loss by the composed log-softmax), the op's gradients to finite differences in
float64, and the loss, with every option, to the composed path it replaced, second derivatives included.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.ops import _loss_kernels as lk
from mxlite.ops import nn_ops

DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["f32", "f64"]
SHAPES = [(5, 1), (4, 7), (3, 8), (6, 9), (33, 37), (3, 2000)]  # (rows, classes): tails of every length


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same_bits(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


def _problem(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x[0, 0] = 60  # a row whose other entries' exp(x - m) reaches the clamp of exp
    label = rng.integers(0, shape[1], shape[0]).astype(np.int64)
    dense = rng.random(shape).astype(dtype)
    g = rng.standard_normal(shape[0]).astype(dtype)
    return x, label, dense, g


def _host_available():
    return lk.KERNELS.cpu_enabled()


def _run_kernels(device, x, label, dense, g, threads):
    xp = device.xp
    with device.use():
        xd, gd = xp.asarray(x), xp.asarray(g)
        ld = None if label is None else xp.asarray(label)
        dd = None if dense is None else xp.asarray(dense)
    loss, saved = lk.forward(xp, xd, ld, dd, threads=threads)
    gx = lk.backward(xp, gd, xd, ld, dd, saved, threads=threads)

    def host(a):
        if isinstance(a, np.ndarray):
            return a
        with device.use():
            return a.get()

    return tuple(host(a) for a in (loss, saved, gx))


def _twin(x, label, dense, g, threads=1):
    loss, saved = lk.forward_twin(x, label, dense, threads)
    return loss, saved, lk.backward_twin(g, x, label, dense, saved)


def _compare(got, want, what):
    for name, a, b in zip(("loss", "saved", "gx"), got, want):
        _same_bits(a, b, f"{what}: {name}")


# -- the serial host build (CPU devices) against the twin ---------------------------------------------------
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_host_build_gives_the_twins_bits(shape, dtype, sparse):
    if not _host_available():
        pytest.skip("the host build of kernels/softmax_ce.cu is not available (MXLITE_CPU_KERNELS or no g++/headers)")
    x, label, dense, g = _problem(shape, dtype)
    label, dense = (label, None) if sparse else (None, dense)
    _compare(_run_kernels(mx.cpu(0), x, label, dense, g, threads=1), _twin(x, label, dense, g), f"cpu {shape}")


def test_host_build_keeps_nan_and_inf_as_the_twin():
    if not _host_available():
        pytest.skip("the host build of kernels/softmax_ce.cu is not available")
    x, label, dense, g = _problem((4, 11), np.float32)
    x[1, 3], x[2, 10], x[3, 0] = np.nan, np.inf, -np.inf
    got = _run_kernels(mx.cpu(0), x, label, None, g, threads=1)
    want = _twin(x, label, None, g)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)  # NaNs compare as NaNs
    assert np.isnan(got[0][1:3]).all() and np.isfinite(got[0][[0, 3]]).all()


def test_lane_reduce_orders_the_additions_as_the_kernels():
    a = np.zeros((1, 16), np.float32)
    a[0, 0], a[0, 8], a[0, 1], a[0, 9] = 1e8, -1e8, 1.0, 1.0
    # lane 0 adds entries 0 and 8 (1e8 - 1e8 = 0), lane 1 entries 1 and 9 (2): 2 in all
    assert lk.lane_reduce(a, np.add, 0.0)[0] == np.float32(2.0)
    b = np.zeros((1, 16), np.float32)
    b[0, 0], b[0, 1], b[0, 8] = 1e8, 1.0, -1e8
    # lanes 0 (1e8 - 1e8) and 1 (1): 1; the pairwise lane halving adds lane 1 to lane 0 after lane 0 cancelled
    assert lk.lane_reduce(b, np.add, 0.0)[0] == np.float32(1.0)
    # two threads: entry j goes to thread j % 2, so 0 and 8 meet in thread 0, lane 0 and 4
    assert lk.lane_reduce(b, np.add, 0.0, threads=2)[0] == np.float32(1.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_log_ge1_is_within_two_ulp(dtype):
    rng = np.random.default_rng(1)
    s = np.concatenate([np.linspace(1, 4, 20001), np.exp(rng.uniform(0, 80, 20000)), [1.0, 2.0, np.sqrt(2)]])
    s = s.astype(dtype)
    got = lk.log_ge1(s)
    exact = np.log(s.astype(np.float64)) if dtype == np.float32 else np.log(s.astype(np.longdouble))
    ulp = np.spacing(np.abs(got).astype(dtype)).astype(exact.dtype)
    err = np.abs(got.astype(exact.dtype) - exact)
    assert got[-3] == 0 and (err <= 2 * ulp).all(), (err / np.maximum(ulp, 1e-300)).max()
    special = lk.log_ge1(np.array([np.inf, np.nan], dtype))
    assert special[0] == np.inf and np.isnan(special[1])


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_twin_matches_a_float64_reference(sparse):
    x, label, dense, _ = _problem((50, 40), np.float32, seed=2)
    loss, saved = lk.forward_twin(x, label if sparse else None, None if sparse else dense)
    x64 = x.astype(np.float64)
    logp = x64 - x64.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    want = -logp[np.arange(50), label] if sparse else -(dense * logp).sum(1)
    np.testing.assert_allclose(loss, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(saved[:, 0], x.max(1))


def test_the_twin_serves_cpu_devices_without_the_host_build(monkeypatch):
    x, label, _, g = _problem((6, 13), np.float32, seed=3)
    monkeypatch.setattr(lk.KERNELS, "cpu_enabled", lambda: False)
    loss, saved = lk.forward(np, x, label, None)
    _compare((loss, saved, lk.backward(np, g, x, label, None, saved)), _twin(x, label, None, g), "twin path")


# -- the op and the loss --------------------------------------------------------------------------------------
def _composed(pred, label, sparse):
    logp = nn_ops.log_softmax(pred, -1)
    if sparse:
        return ops.negative(nn_ops.pick(logp, label, axis=-1, keepdims=True))
    return ops.negative(ops.sum(ops.multiply(logp, label), axis=-1, keepdims=True))


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_op_gradient_matches_finite_differences_in_float64(sparse):
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((3, 2, 5))
    label = rng.integers(0, 5, (3, 2)) if sparse else rng.random((3, 2, 5))
    w = rng.standard_normal((3, 2, 1))

    def f(xv):
        return float((nn_ops.softmax_cross_entropy(mx.array(xv), mx.array(label), sparse).asnumpy() * w).sum())

    x = mx.array(x0)
    x.attach_grad()
    with mx.autograd.record():
        y = nn_ops.softmax_cross_entropy(x, mx.array(label), sparse)
    y.backward(mx.array(w))
    eps = 1e-6
    numeric = np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        up, down = x0.copy(), x0.copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (f(up) - f(down)) / (2 * eps)
    np.testing.assert_allclose(x.grad.asnumpy(), numeric, rtol=1e-6, atol=1e-8)


def test_dense_label_gets_its_gradient():
    rng = np.random.default_rng(5)
    x, lab = mx.array(rng.standard_normal((4, 6))), mx.array(rng.random((4, 6)))
    lab.attach_grad()
    with mx.autograd.record():
        nn_ops.softmax_cross_entropy(x, lab, sparse_label=False).backward()
    want = -nn_ops.log_softmax(x, -1).asnumpy()
    np.testing.assert_allclose(lab.grad.asnumpy(), want, rtol=1e-12)


def test_op_rejects_what_it_cannot_take():
    with pytest.raises(TypeError, match="float32 or float64"):
        nn_ops.softmax_cross_entropy(mx.array(np.zeros((2, 3), np.float16)), [0, 1])
    with pytest.raises(ValueError, match="one class id per row"):
        nn_ops.softmax_cross_entropy(mx.array(np.zeros((2, 3), np.float32)), [0, 1, 2])
    with pytest.raises(ValueError, match="dense label"):
        nn_ops.softmax_cross_entropy(mx.array(np.zeros((2, 3), np.float32)), np.zeros((2, 3)), sparse_label=False)
    with pytest.raises(ValueError, match="at least one class"):
        nn_ops.softmax_cross_entropy(mx.array(np.zeros((2, 0), np.float32)), np.zeros(2))


LOSS_CASES = [
    ({}, False),
    ({"sparse_label": False}, False),
    ({"weight": 0.5}, True),
    ({"sparse_label": False, "weight": 2.0}, True),
    ({"batch_axis": 1}, False),
]


@pytest.mark.parametrize("kwargs, sample_weight", LOSS_CASES, ids=["sparse", "dense", "weight+sw", "dense+w+sw",
                                                                   "batch_axis1"])
def test_loss_matches_the_composed_path(kwargs, sample_weight):
    """Same losses and gradients as -pick(log_softmax) / -sum(label * log_softmax) to float32 rounding."""
    rng = np.random.default_rng(6)
    pred_np = (rng.standard_normal((7, 3, 11)) * 3).astype(np.float32)
    sparse = kwargs.get("sparse_label", True)
    label_np = rng.integers(0, 11, (7, 3)).astype(np.float32) if sparse else rng.random((7, 3, 11)).astype(np.float32)
    sw = rng.random((7, 3, 1)).astype(np.float32) if sample_weight else None
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss(**kwargs)
    outs = []
    for fused in (True, False):
        pred = mx.array(pred_np)
        pred.attach_grad()
        with mx.autograd.record():
            if fused:
                loss = loss_fn(pred, mx.array(label_np), sw)
            else:
                raw = _composed(pred, mx.array(label_np), sparse)
                loss = loss_fn._batch_mean(loss_fn._weighted(raw, sw, loss_fn._weight))
        loss.backward()
        outs.append((loss.asnumpy(), pred.grad.asnumpy()))
    (fl, fg), (cl, cg) = outs
    assert fl.shape == cl.shape
    np.testing.assert_allclose(fl, cl, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(fg, cg, rtol=2e-5, atol=2e-7)


def test_loss_uses_one_fused_node_where_it_applies_and_composes_elsewhere():
    rng = np.random.default_rng(7)
    pred = mx.array(rng.standard_normal((4, 5)).astype(np.float32))
    pred.attach_grad()

    def first_op(loss_fn, p, label):
        with mx.autograd.record():
            out = loss_fn(p, label)
        node, names = out._node, []
        while node is not None:  # walk back along first parents to the op next to pred
            names.append(node.op)
            parents = [q for q in node.parents if q is not None and q._node is not None]
            node = parents[0]._node if parents else None
        return names[-1]

    label = mx.array(np.array([0, 1, 2, 3]))
    assert first_op(mx.loss.SoftmaxCrossEntropyLoss(), pred, label) == "softmax_cross_entropy"
    assert first_op(mx.loss.SoftmaxCrossEntropyLoss(from_logits=True), pred, label) == "pick"
    assert first_op(mx.loss.SoftmaxCrossEntropyLoss(axis=0), pred, mx.array(np.arange(5) % 4)) == "log_softmax"
    p16 = mx.array(rng.standard_normal((4, 5)).astype(np.float16))
    p16.attach_grad()
    assert first_op(mx.loss.SoftmaxCrossEntropyLoss(), p16, label) == "log_softmax"


def test_second_derivatives_match_the_composed_path():
    rng = np.random.default_rng(8)
    x_np = rng.standard_normal((3, 6))
    label = mx.array(np.array([1, 5, 0]))
    v = mx.array(rng.standard_normal((3, 6)))
    results = []
    for fused in (True, False):
        x = mx.array(x_np)
        x.attach_grad()
        with mx.autograd.record():
            loss = nn_ops.softmax_cross_entropy(x, label) if fused else _composed(x, label, True)
            (gx,) = mx.autograd.grad(loss.sum(), [x], create_graph=True)
            hv = (gx * v).sum()
        hv.backward()
        results.append((gx.asnumpy(), x.grad.asnumpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-10, atol=1e-12)


# -- GPUs (emulated where there is none): real block sizes against the twin -----------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", [None, 32, 64], ids=str)
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(4, 7), (33, 37), (3, 300)], ids=str)
def test_gpu_kernels_give_the_twins_bits(shape, dtype, sparse, threads):
    x, label, dense, g = _problem(shape, dtype, seed=9)
    label, dense = (label, None) if sparse else (None, dense)
    used = threads or lk.threads_for(shape[1])
    got = _run_kernels(mx.gpu(0), x, label, dense, g, threads=threads)
    _compare(got, _twin(x, label, dense, g, threads=used), f"gpu {shape} threads {used}")


@gpu
@needs_gpu
def test_loss_on_a_gpu_matches_the_cpu():
    rng = np.random.default_rng(10)
    pred_np = rng.standard_normal((16, 40)).astype(np.float32)
    label_np = rng.integers(0, 40, 16)
    results = []
    for device in (mx.cpu(0), mx.gpu(0)):
        pred = mx.array(pred_np, device=device)
        pred.attach_grad()
        with mx.autograd.record():
            loss = mx.loss.SoftmaxCrossEntropyLoss()(pred, mx.array(label_np, device=device))
        loss.backward()
        results.append((loss.asnumpy(), pred.grad.asnumpy()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6, atol=1e-8)

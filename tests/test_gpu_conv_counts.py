"""What a CNN step costs a GPU, counted on the emulated GPUs: launches, CuPy calls, GEMMs, copies, syncs.

On a GPU the host's dispatch bounds a small network's step (benchmarks/roofline.py), so these counts
are its speed. They must not grow with the batch: convolutions run one GEMM per direction over the
whole batch with one im2col / col2im launch per layer (mxlite/ops/conv.py, _GPU_COLS_BYTES),
pooling one kernel per direction, batch normalisation one (kernels/norm.cu), and no kernel's geometry
travels by a host-to-device copy. So for benchmarks/bench_train.py's ``cnn`` and ``cnn_bn`` models a
training step at batch 16 and at batch 256 makes the same calls and launches, no host
synchronisation, and one host-to-device copy: the fused optimizer update's table of four floats per
parameter. The per-layer tests pin each layer's own counts; a layer whose columns exceed the bound is
cut into as few pieces as fit, one GEMM per piece and direction.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import conv as F
from mxlite.ops import nn_ops

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
GEMMS = ("matmul", "__matmul__", "dot", "tensordot", "einsum", "inner", "vdot")

pytestmark = pytest.mark.gpu


@pytest.fixture
def emulation():
    """The emulation's counters module (counts exist only on emulated GPUs)."""
    if mx.num_gpus() == 0 or mx.device.devices._emulated_gpus() < 1:
        pytest.skip("counts come from the GPU emulation (MXLITE_EMULATE_GPUS >= 1)")
    from mxlite._emulation import install  # noqa: PLC0415

    return install


def _costs(snapshot):
    """The costs of one counted stretch on gpu(0)."""
    c = snapshot[0]
    # GEMMs: cuBLAS calls through nvmath (mxlite.device.blas), or cupy.matmul where nvmath is missing
    cublas = {k: n for k, n in c["kernel_launches"].items() if k.startswith("cublas.")}
    return {"cupy_calls": sum(c["ops"].values()),
            "launches": sum(c["op_launches"].values()) + sum(c["kernel_launches"].values()),
            "kernels": Counter({k: n for k, n in c["kernel_launches"].items() if k not in cublas}),
            "gemm_calls": sum(n for name, n in c["ops"].items() if name in GEMMS) + sum(cublas.values()),
            "h2d_copies": c["h2d_copies"], "h2d_bytes": c["h2d_bytes"], "host_syncs": c["host_syncs"],
            "d2h_copies": c["d2h_copies"]}


def _bench_train():
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import bench_train  # noqa: PLC0415 - benchmarks/ is not a package

    return bench_train


def _step_costs(emulation, model, batch, image=16):
    """Per phase (forward, backward, step), the costs of bench_train's ``model`` training step on gpu(0) at
    ``batch`` (the second step, after one that builds everything); and the number of trained parameters."""
    bt = _bench_train()
    args = argparse.Namespace(image=image, cnn_batch=batch, dtype="float32")
    mx.random.seed(0)
    net = bt.mxlite_model(model, args)
    device = mx.gpu(0)
    net.initialize(mx.init.Xavier(), device=device)
    x, y = bt.make_batch(model, args)
    xs, ys = mx.array(x, device=device), mx.array(y, device=device)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01}, kvstore=None)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    phases = {}
    for _ in range(2):
        emulation.reset_counters()
        with mx.autograd.record():
            loss = loss_fn(net(xs), ys)
        phases["forward"] = _costs(emulation.counters())
        emulation.reset_counters()
        loss.backward()
        phases["backward"] = _costs(emulation.counters())
        emulation.reset_counters()
        trainer.step(batch)
        phases["step"] = _costs(emulation.counters())
    trained = sum(1 for p in net.collect_params().values() if p.grad_req != "null")
    return phases, trained


@pytest.mark.parametrize("model", ["cnn", "cnn_bn"])
def test_a_cnn_step_costs_the_same_at_batch_16_and_256(emulation, model):
    small, trained = _step_costs(emulation, model, 16)
    large, _ = _step_costs(emulation, model, 256)
    for phase in ("forward", "backward", "step"):
        assert large[phase] == small[phase], (model, phase, small[phase], large[phase])
    total = {k: sum(p[k] for p in small.values()) for k in ("host_syncs", "h2d_copies", "h2d_bytes", "d2h_copies")}
    # no synchronisation and nothing read back; one copy up: the fused update's per-parameter table (4 floats each)
    assert total == {"host_syncs": 0, "h2d_copies": 1, "h2d_bytes": 16 * trained, "d2h_copies": 0}, total
    assert small["step"]["h2d_copies"] == 1
    # two convolutions: forward GEMM each, weight gradient each, input gradient for the second only
    kernels = small["forward"]["kernels"] + small["backward"]["kernels"]
    assert kernels["im2col<float>"] == 4 and kernels["col2im<float>"] == 1  # 2 convolutions + 2 poolings; conv 2
    assert kernels["max_pool_backward<float>"] == 2
    if model == "cnn_bn":
        assert kernels["batch_norm_forward<float, float>"] == 2 and kernels["batch_norm_backward<float, float>"] == 2
    conv_and_dense_gemms = 5 + 6  # conv: 2 forward, 2 weight, 1 input; dense: 2 x (forward, weight, input)
    assert small["forward"]["gemm_calls"] + small["backward"]["gemm_calls"] == conv_and_dense_gemms


def _layer_costs(emulation, fn, x_shape, params=(), seed=0):
    """(forward, backward) costs of ``fn(x, *params)`` on gpu(0), the second time it runs (x needs a gradient)."""
    rng = np.random.default_rng(seed)
    device = mx.gpu(0)
    x = mx.array(rng.standard_normal(x_shape).astype(np.float32), device=device)
    x.attach_grad()
    tensors = [mx.array(p, device=device) for p in params]
    for t in tensors:
        t.attach_grad()
    out = None
    for _ in range(2):
        with mx.autograd.record():
            y = fn(x, *tensors)
        head = mx.array(np.ones(y.shape, np.float32), device=device)
        emulation.reset_counters()
        with mx.autograd.record():
            y = fn(x, *tensors)
        forward = _costs(emulation.counters())
        emulation.reset_counters()
        y.backward(head)
        out = (forward, _costs(emulation.counters()))
    return out


LAYERS = {
    # name: (fn, x shape less the batch, parameter shapes, (forward, backward) GEMMs, forward and backward kernels)
    "conv2d 3x3 p1 + bias": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (8, 16, 16), [(16, 8, 3, 3), (16,)],
                             (1, 2), {"im2col<float>": 1}, {"col2im<float>": 1}),
    "conv2d s2 groups=2": (lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), (4, 9, 9), [(6, 2, 3, 3)],
                           (1, 2), {"im2col<float>": 1}, {"col2im<float>": 1}),
    "conv1d k5": (lambda x, w: F.conv(x, w, padding=2), (4, 70), [(6, 4, 5)], (1, 2), {"im2col<float>": 1},
                  {"col2im<float>": 1}),
    "conv3d": (lambda x, w: F.conv(x, w, padding=1), (2, 6, 6, 6), [(3, 2, 3, 3, 3)], (1, 2), {"im2col<float>": 1},
               {"col2im<float>": 1}),
    "conv2d 1x1": (lambda x, w: F.conv2d(x, w), (8, 7, 7), [(5, 8, 1, 1)], (1, 2), {}, {}),
    "conv_transpose2d s2": (lambda x, w: F.conv_transpose(x, w, stride=2, padding=1), (4, 6, 6), [(4, 3, 4, 4)],
                            (1, 2), {"col2im<float>": 1}, {"im2col<float>": 1}),
    "max_pool2d 2x2": (lambda x: F.max_pool2d(x, 2), (3, 8, 8), [], (0, 0), {"im2col<float>": 1},
                       {"max_pool_backward<float>": 1}),
    "max_pool3d 3 s2 p1": (lambda x: F.max_pool(x, 3, 2, 1), (2, 6, 6, 6), [], (0, 0), {"im2col<float>": 1},
                           {"max_pool_backward<float>": 1}),
    "avg_pool2d 2x2": (lambda x: F.avg_pool2d(x, 2), (3, 8, 8), [], (0, 0), {}, {}),
    "batch_norm": (nn_ops.batch_norm, (3, 8, 8), [(3,)] * 4, (0, 0),  # gamma, beta, running mean and variance
                   {"batch_norm_forward<float, float>": 1}, {"batch_norm_backward<float, float>": 1}),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_each_layer_costs_the_same_at_any_batch(emulation, name):
    fn, shape, param_shapes, gemms, fwd_kernels, bwd_kernels = LAYERS[name]
    rng = np.random.default_rng(1)
    params = [np.abs(rng.standard_normal(s)).astype(np.float32) for s in param_shapes]  # a variance must be > 0
    small = _layer_costs(emulation, fn, (16,) + shape, params)
    large = _layer_costs(emulation, fn, (256,) + shape, params)
    assert small == large, (name, small, large)
    forward, backward = small
    assert (forward["gemm_calls"], backward["gemm_calls"]) == gemms
    assert forward["kernels"] == Counter(fwd_kernels) and backward["kernels"] == Counter(bwd_kernels)
    for phase in small:
        assert (phase["h2d_copies"], phase["host_syncs"], phase["d2h_copies"]) == (0, 0, 0), (name, phase)


def test_batch_norm_is_a_handful_of_calls(emulation):
    """A training batch norm: 3 CuPy calls and 1 launch forward, at most 5 calls and 1 launch backward (were 58)."""
    rng = np.random.default_rng(2)
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(3)] + [np.ones(3, np.float32)]
    forward, backward = _layer_costs(emulation, nn_ops.batch_norm, (16, 3, 8, 8), params)
    assert (forward["cupy_calls"], forward["launches"]) == (2, 1)  # two allocations (out, saved) and the kernel
    assert backward["launches"] == 2 and backward["cupy_calls"] <= 5  # the kernel (+ x's gradient written in)


def test_a_layer_past_the_column_bound_is_cut_into_pieces(emulation, monkeypatch):
    """Columns of 24 samples, a bound holding 10 of them: 3 pieces, one GEMM per piece and direction; results
    equal the whole batch's to rounding."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=1)  # noqa: E731
    geo_bytes = 4 * 9 * 36 * 4  # one sample's columns: C * K * L * itemsize
    whole = _results(fn, x, w, b)
    monkeypatch.setattr(F, "_GPU_COLS_BYTES", 10 * geo_bytes)
    forward, backward = _layer_costs(emulation, fn, x.shape, [w, b])
    assert forward["gemm_calls"] == 3 and forward["kernels"] == Counter({"im2col<float>": 3})
    # backward: the columns are made again per piece (the forward kept none), weight and input GEMM per piece
    assert backward["gemm_calls"] == 6 and backward["kernels"] == Counter({"im2col<float>": 3, "col2im<float>": 3})
    pieces = _results(fn, x, w, b)
    for a, e in zip(pieces, whole):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    assert F._ConvGeom(24, 4, (6, 6), 5, (3, 3), (1, 1), (1, 1), (1, 1), 1, (6, 6)).pieces(4) == [(0, 8), (8, 16),
                                                                                                  (16, 24)]


def _results(fn, *arrays):
    device = mx.gpu(0)
    tensors = [mx.array(a, device=device) for a in arrays]
    for t in tensors:
        t.attach_grad()
    with mx.autograd.record():
        y = fn(*tensors)
    y.backward(mx.array(np.linspace(-1, 1, y.size, dtype=np.float32).reshape(y.shape), device=device))
    return [y.asnumpy()] + [t.grad.asnumpy() for t in tensors]

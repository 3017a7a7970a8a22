"""kernels/norm.cu against its NumPy twin in mxlite.ops._norm_kernels, bit for bit, and batch_norm on GPUs.

The twin is ``_norm_kernels.forward``/``backward`` with ``blocked_sums(threads)``: the same arithmetic
nn_ops.batch_norm composes on CPU devices, with the per-channel sums in the kernels' order. On CPU
devices the serial host build (one thread per block) must give the twin's bits; the GPU-marked tests
run the kernels with real block sizes (emulated GPUs where there is no GPU), in float32, float64 and
float16 data, with batch statistics and with running ones, with and without ``fix_gamma``, for
channels in the middle, first and last. Then batch_norm itself: on a GPU (one launch per direction)
against the composed CPU path, running statistics included, and through a Gluon BatchNorm layer.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import _norm_kernels as nk
from mxlite.ops import nn_ops

DTYPES = [np.float32, np.float64, np.float16]
DTYPE_IDS = ["f32", "f64", "f16"]
# (outer, channels, inner): channels in the middle (NCHW), first (C, W: outer 1), last (N, C: inner 1);
# rows of a multiple of 8 values take the host build's unit-stride loops
SHAPES = {"nchw": (3, 5, 14), "first": (1, 4, 37), "last": (40, 3, 1), "rows8": (3, 4, 24)}
MODES = [(True, False), (False, False), (True, True)]  # (batch_stats, fix_gamma)
MODE_IDS = ["batch", "running", "batch-fix_gamma"]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same_bits(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


def _problem(shape3, dtype, seed=0):
    rng = np.random.default_rng(seed)
    acc = np.promote_types(dtype, np.float32)
    x = (rng.standard_normal(shape3) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape3).astype(dtype)
    c = shape3[1]
    params = [rng.standard_normal(c).astype(acc), rng.standard_normal(c).astype(acc),
              rng.standard_normal(c).astype(acc), (rng.random(c) + 0.5).astype(acc)]
    return x, g, params


def _twin(x, g, params, batch_stats, fix_gamma, threads, eps=1e-5, momentum=0.9):
    """What the kernels must give: out, gx, ggamma, gbeta and the running statistics after the forward."""
    acc = np.promote_types(x.dtype, np.float32)
    gamma, beta, rm, rv = (p.copy() for p in params)
    sums = nk.blocked_sums(threads)
    out, diff, inv_std, k = nk.forward(np, x.astype(acc), gamma, beta, rm, rv, eps, momentum, batch_stats, fix_gamma,
                                       sums)
    gx, ggamma, gbeta = nk.backward(np, g.astype(acc), diff, inv_std, k, batch_stats, fix_gamma, sums)
    return out.astype(x.dtype), gx.astype(x.dtype), ggamma, gbeta, rm, rv


def _kernels_on(device, x, g, params, batch_stats, fix_gamma, threads, eps=1e-5, momentum=0.9):
    xp = device.xp
    with device.use():
        xd, gd = xp.asarray(x), xp.asarray(g)
        gamma, beta, rm, rv = (xp.asarray(p.copy()) for p in params)
    out, saved = nk.forward_kernel(xp, xd, x.shape, gamma, beta, rm, rv, eps, momentum, batch_stats, fix_gamma,
                                   threads=threads)
    gx, ggamma, gbeta = nk.backward_kernel(xp, gd, xd, x.shape, saved, batch_stats, fix_gamma, threads=threads)

    def host(a):
        if isinstance(a, np.ndarray):
            return a
        with device.use():
            return a.get()

    return tuple(host(a) for a in (out, gx, ggamma, gbeta, rm, rv))


def _compare(got, want, what):
    for name, a, b in zip(("out", "gx", "ggamma", "gbeta", "running_mean", "running_var"), got, want):
        _same_bits(a, b, f"{what}: {name}")


# -- the serial host build (CPU devices) against the twin ----------------------------------------------
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_host_build_gives_the_twins_bits(shape, dtype, mode):
    if not nk.KERNELS.cpu_enabled():
        pytest.skip("the host build of kernels/norm.cu is not available (MXLITE_CPU_KERNELS or no g++/headers)")
    batch_stats, fix_gamma = mode
    x, g, params = _problem(SHAPES[shape], dtype)
    got = _kernels_on(mx.cpu(0), x, g, params, batch_stats, fix_gamma, threads=1)
    _compare(got, _twin(x, g, params, batch_stats, fix_gamma, threads=1), f"cpu {shape} {np.dtype(dtype).name}")


def test_blocked_sums_orders_the_additions_as_the_kernels():
    a = np.zeros((16, 1, 1), np.float32)  # one channel of sixteen values
    a[0], a[8], a[1] = 1e8, 1.0, -1e8
    # one thread, eight lanes: lane 0 adds 1e8 + 1 (rounds to 1e8), lane 1 holds -1e8; the lanes then
    # cancel, where a sequential sum would give (1e8 - 1e8) + 1 = 1
    assert nk.blocked_sums(1)(a)[0] == np.float32(0.0)
    b = np.array([1e8, 1.0, -1e8, 1.0], np.float32).reshape(4, 1, 1)
    # one thread: lanes 0 and 2 cancel (1e8 - 1e8), lanes 1 and 3 make 2; two threads: likewise per thread
    assert nk.blocked_sums(1)(b)[0] == np.float32(2.0)
    assert nk.blocked_sums(2)(b)[0] == np.float32(2.0)
    with pytest.raises(ValueError, match="power of two"):
        nk.blocked_sums(3)


# -- GPUs (emulated where there is none): real block sizes against the twin -----------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", [None, 32, 64], ids=str)
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_gpu_kernels_give_the_twins_bits(shape, dtype, mode, threads):
    batch_stats, fix_gamma = mode
    x, g, params = _problem(SHAPES[shape], dtype, seed=1)
    used = threads or nk.threads_for(SHAPES[shape][0] * SHAPES[shape][2])
    got = _kernels_on(mx.gpu(0), x, g, params, batch_stats, fix_gamma, threads=threads)
    _compare(got, _twin(x, g, params, batch_stats, fix_gamma, threads=used), f"gpu {shape} threads {used}")


def _bn_run(device, x, g, params, **kw):
    tensors = [mx.array(a, device=device) for a in [x] + params]
    for t in tensors[:3]:
        t.attach_grad()
    with mx.autograd.record():
        y = nn_ops.batch_norm(*tensors, **kw)
    y.backward(mx.array(g, device=device))
    return [y.asnumpy()] + [t.grad.asnumpy() for t in tensors[:3]] + [t.asnumpy() for t in tensors[3:]]


@gpu
@needs_gpu
@pytest.mark.parametrize("kw", [{}, {"axis": -1}, {"training": False}, {"fix_gamma": True}, {"axis": 0}],
                         ids=["axis1", "axis-1", "inference", "fix_gamma", "axis0"])
def test_batch_norm_on_a_gpu_matches_the_cpu(kw):
    """One launch per direction on the GPU; the composed path on the CPU: equal to float32 rounding."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 4, 5, 3)).astype(np.float32) * 2 + 0.5
    g = rng.standard_normal(x.shape).astype(np.float32)
    axis = kw.get("axis", 1)
    c = x.shape[axis]
    params = [rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
              rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)]
    want = _bn_run(mx.cpu(0), x, g, params, **kw)
    got = _bn_run(mx.gpu(0), x, g, params, **kw)
    for name, a, b in zip(("out", "gx", "ggamma", "gbeta", "running_mean", "running_var"), got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)


@gpu
@needs_gpu
def test_a_batchnorm_layer_trains_the_same_on_a_gpu():
    """Gluon BatchNorm (gradients written straight into the arena): three SGD steps, GPU against CPU."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 3, 4, 4)).astype(np.float32)
    results = {}
    for device in (mx.cpu(0), mx.gpu(0)):
        mx.random.seed(0)
        net = mx.nn.Sequential(mx.nn.Conv2D(4, 3, padding=1), mx.nn.BatchNorm(), mx.nn.Activation("relu"))
        net.initialize(mx.init.Xavier(), device=device)
        trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        xd = mx.array(x, device=device)
        for _ in range(3):
            with mx.autograd.record():
                loss = (net(xd) ** 2).mean()
            loss.backward()
            trainer.step(1)
        results[str(device)] = {k: p.data(device).asnumpy() for k, p in net.collect_params().items()}
    for name, want in results["cpu(0)"].items():
        np.testing.assert_allclose(results["gpu(0)"][name], want, rtol=1e-4, atol=1e-5, err_msg=name)


@gpu
@needs_gpu
def test_batch_norm_keeps_the_composed_path_for_other_parameter_dtypes():
    """float16 data with float16 parameters (not the kernels' float32 arithmetic) composes array operations."""
    from mxlite._emulation import install  # noqa: PLC0415

    if mx.device.devices._emulated_gpus() < 1:
        pytest.skip("launch counts come from the GPU emulation")
    rng = np.random.default_rng(6)
    x = mx.array(rng.standard_normal((4, 3, 2)).astype(np.float16), device=mx.gpu(0))
    params = [mx.array(v.astype(np.float16), device=mx.gpu(0)) for v in
              (np.ones(3), np.zeros(3), np.zeros(3), np.ones(3))]
    install.reset_counters()
    y = nn_ops.batch_norm(x, *params)
    assert y.dtype == np.float16 and not install.counters()[0]["kernel_launches"]

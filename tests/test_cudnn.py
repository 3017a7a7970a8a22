"""cuDNN through NVIDIA's frontend (mxlite/device/cudnn.py) against mxlite's GEMM and kernel path.

On the emulated GPUs the emulated frontend (mxlite/_emulation/fakecudnn) is installed for these tests only:
each result is computed with ``MXLITE_CUDNN=off`` (the GEMM/kernel path CI otherwise runs) and ``auto`` (the
cuDNN graphs) and the two must agree within float32 (float16) rounding. The last test runs with the frontend
the machine has: the emulated one in CI, NVIDIA's on a real GPU (skipped, saying why, where a real GPU lacks it).
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite._emulation import install as emu
from mxlite.device import cudnn as dc

pytestmark = pytest.mark.gpu


def _emulated() -> bool:
    mx.num_gpus()  # the emulation is installed when mxlite first looks for GPUs
    return emu.emulated_gpu_count() > 0


@pytest.fixture
def fake_cudnn(monkeypatch):
    """The emulated cuDNN frontend as ``cudnn`` (emulated GPUs only); counts and graphs start afresh."""
    if not _emulated():
        pytest.skip("the emulated cuDNN frontend runs on emulated GPUs; these GPUs are real")
    saved = sys.modules.get("cudnn")
    emu.install_cudnn()
    dc.clear()
    monkeypatch.setenv("MXLITE_CUDNN", "auto")
    yield sys.modules["cudnn"]
    emu.uninstall_cudnn()
    if saved is not None:
        sys.modules["cudnn"] = saved
    dc.clear()


def _both(monkeypatch, fn):
    """``fn()`` with MXLITE_CUDNN=off, then auto: (GEMM path's results, cuDNN path's results)."""
    out = []
    for mode in ("off", "auto"):
        monkeypatch.setenv("MXLITE_CUDNN", mode)
        out.append(fn())
    return out


def _close(a, b, dtype):
    tol = 2e-2 if dtype == np.float16 else 1e-4
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=tol, atol=tol)


CONV_CASES = [  # (x shape, weight shape, stride, pad, dilation, groups, bias, dtype)
    ((2, 3, 11), (4, 3, 3), (2,), (1,), (2,), 1, True, np.float32),
    ((2, 4, 7, 7), (6, 2, 3, 3), (2, 2), (1, 1), (1, 1), 2, False, np.float32),
    ((2, 3, 9, 8), (5, 3, 3, 2), (1, 2), (2, 0), (2, 1), 1, True, np.float32),
    ((1, 2, 5, 5, 4), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1, True, np.float32),
    ((2, 4, 6, 6), (4, 4, 1, 1), (1, 1), (0, 0), (1, 1), 1, False, np.float32),
    ((2, 3, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, np.float16),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0]) - 2}d-s{c[2]}-p{c[3]}-d{c[4]}-g{c[5]}-"
                                                      f"{np.dtype(c[7]).name}")
def test_convolution_matches_the_gemm_path(fake_cudnn, monkeypatch, case):
    xs, ws, stride, pad, dil, groups, with_bias, dtype = case
    rng = np.random.default_rng(0)
    xh, wh = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    bh = rng.standard_normal(ws[0]).astype(dtype)
    dev = mx.gpu(0)

    def run():
        x, w, b = (mx.nd.array(a, ctx=dev, dtype=dtype) for a in (xh, wh, bh))
        for t in (x, w, b):
            t.attach_grad()
        with mx.autograd.record():
            y = mx.nd.Convolution(x, w, b if with_bias else None, kernel=ws[2:], stride=stride, pad=pad, dilate=dil,
                                  num_filter=ws[0], num_group=groups, no_bias=not with_bias)
            (y * y).sum().backward()
        return y.asnumpy(), x.grad.asnumpy(), w.grad.asnumpy(), b.grad.asnumpy()

    gemm, cudnn = _both(monkeypatch, run)
    _close(gemm, cudnn, dtype)
    assert dc.stats() == {"builds": 3, "conv_fprop": 1, "conv_dgrad": 1, "conv_wgrad": 1}


@pytest.mark.parametrize("training", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("fix_gamma", [False, True], ids=["gamma", "fix_gamma"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_batch_norm_matches_the_kernel_path(fake_cudnn, monkeypatch, training, fix_gamma, dtype):
    rng = np.random.default_rng(1)
    xh = (rng.standard_normal((4, 3, 5, 6)) * 2 + 1).astype(dtype)
    gh, bh = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    mh, vh = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    dev = mx.gpu(0)

    def run():
        x = mx.nd.array(xh, ctx=dev, dtype=dtype)
        g, b, m, v = (mx.nd.array(a, ctx=dev) for a in (gh, bh, mh, vh))
        for t in (x, g, b):
            t.attach_grad()
        with mx.autograd.record(train_mode=training):
            y = mx.nd.BatchNorm(x, g, b, m, v, eps=1e-3, momentum=0.9, fix_gamma=fix_gamma)
            (y * mx.nd.array(np.arange(y.size).reshape(y.shape) % 7, ctx=dev, dtype=dtype)).sum().backward()
        return y.asnumpy(), x.grad.asnumpy(), g.grad.asnumpy(), b.grad.asnumpy(), m.asnumpy(), v.asnumpy()

    kernel, cudnn = _both(monkeypatch, run)
    _close(kernel, cudnn, dtype)
    ops = {"builds", "batchnorm", "batchnorm_backward"} if training else {"builds", "batchnorm_inference"}
    assert set(dc.stats()) == ops


@pytest.mark.parametrize("stage, error", [
    ("validate", TypeError("batchnorm(): incompatible function arguments")),  # a binding refusing an argument
    ("build_plans", RuntimeError("cudnnCreate failed: libcudnn_engines_runtime_compiled.so.9 not found")),
    ("check_support", None),  # cuDNN's own "no engine": cudnnGraphNotSupportedError
], ids=["TypeError", "RuntimeError", "not-supported"])
def test_any_failure_while_building_a_graph_runs_mxlites_kernels(fake_cudnn, monkeypatch, stage, error):
    """Whatever the frontend raises while a graph is declared, validated, planned or built, that signature runs
    mxlite's own path (the step goes on, with the same numbers) after one warning per signature and cause."""
    rng = np.random.default_rng(3)
    xh = rng.standard_normal((4, 3, 5, 6)).astype(np.float32)
    wh = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    dev = mx.gpu(0)

    def fail(self, *args, **kwargs):
        raise error if error is not None else fake_cudnn.cudnnGraphNotSupportedError("no engine for this graph")

    def run():
        x, w = mx.nd.array(xh, ctx=dev), mx.nd.array(wh, ctx=dev)
        g, b = mx.nd.ones(3, ctx=dev), mx.nd.zeros(3, ctx=dev)
        m, v = mx.nd.zeros(3, ctx=dev), mx.nd.ones(3, ctx=dev)
        for t in (x, w, g):
            t.attach_grad()
        with mx.autograd.record():
            y = mx.nd.BatchNorm(x, g, b, m, v, eps=1e-3, momentum=0.9)
            y = mx.nd.Convolution(y, w, kernel=(3, 3), num_filter=2, no_bias=True)
            (y * y).sum().backward()
        return y.asnumpy(), x.grad.asnumpy(), w.grad.asnumpy(), g.grad.asnumpy(), m.asnumpy(), v.asnumpy()

    kernel = _both(monkeypatch, run)[0]
    dc.clear()
    monkeypatch.setattr(fake_cudnn.pygraph, stage, fail)
    with pytest.warns(RuntimeWarning, match="is not run by cuDNN") as caught:
        declined = run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same signatures again: remembered as declined, no second warning
        again = run()
    _close(kernel, declined, np.float32)
    _close(kernel, again, np.float32)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    # batch norm forward and backward (asked for apart), the convolution (its first graph: the rest is not tried)
    assert len(messages) == len(set(messages)) == dc.stats()["declined"] == 3
    assert all(type(error or fake_cudnn.cudnnGraphNotSupportedError()).__name__ in m for m in messages)
    assert set(dc.stats()) == {"declined"}


def test_training_batch_norm_declares_the_running_statistics_the_frontend_requires(fake_cudnn):
    """The emulated frontend refuses a training batch norm without running statistics and momentum, as NVIDIA's
    1.32 binding does (tests/test_real_cudnn.py), and mxlite's graph passes."""
    import cupy

    fe = fake_cudnn
    with cupy.cuda.Device(0):
        g = fe.pygraph(io_data_type=fe.data_type.FLOAT, compute_data_type=fe.data_type.FLOAT,
                       handle=fe.create_handle())
        stats = [g.tensor(dim=[1, 3, 1, 1]) for _ in range(2)]
        outs = g.batchnorm(input=g.tensor(dim=[4, 3, 5, 1]), scale=stats[0], bias=stats[1], in_running_mean=None,
                           in_running_var=None, epsilon=g.tensor(dim=[1, 1, 1, 1], is_pass_by_value=True),
                           momentum=None)
        assert outs[3:] == [None, None]
        with pytest.raises(TypeError, match=r"batchnorm\(\): incompatible function arguments"):
            g.validate()
    builder = dc._declare(fe, dc._bn_key("batchnorm", (4, 3, 5), "float32", 1e-3))
    dc._build(fe, builder.graph, ("validate", "build_operation_graph"))
    assert {"running_mean", "running_var", "next_mean", "next_var"} <= set(builder.uids)
    assert set(builder.host) == {"eps", "momentum"}


def test_a_cnn_trains_the_same_on_both_paths(fake_cudnn, monkeypatch):
    """Three SGD steps of a Conv-BatchNorm-ReLU-MaxPool-Dense network on one emulated GPU."""
    rng = np.random.default_rng(2)
    data, label = rng.standard_normal((8, 3, 10, 10)).astype(np.float32), rng.integers(0, 4, 8)
    dev = mx.gpu(0)

    def run():
        mx.random.seed(7)
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Conv2D(6, 3, padding=1), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"),
                mx.gluon.nn.MaxPool2D(2), mx.gluon.nn.Conv2D(4, 3, strides=2), mx.gluon.nn.Dense(4))
        net.initialize(mx.init.Xavier(), ctx=dev)
        trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        x, y = mx.nd.array(data, ctx=dev), mx.nd.array(label, ctx=dev)
        for _ in range(3):
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(8)
        return [p.data().asnumpy() for p in net.collect_params().values()]

    gemm, cudnn = _both(monkeypatch, run)
    _close(gemm, cudnn, np.float32)
    stats = dc.stats()
    assert stats["builds"] == 3 + 3 + 2  # two convolutions (fprop, dgrad, wgrad), one training batch norm
    # the first convolution's input (the data) needs no gradient: 3 steps x 2 forward, 2 weight, 1 data gradients
    assert (stats["conv_fprop"], stats["conv_wgrad"], stats["conv_dgrad"]) == (6, 6, 3)
    assert stats["batchnorm"] == stats["batchnorm_backward"] == 3


def test_a_graph_is_built_once_per_signature(fake_cudnn):
    dev = mx.gpu(0)
    w = mx.nd.ones((2, 3, 3, 3), ctx=dev)
    for _ in range(3):
        mx.nd.Convolution(mx.nd.ones((1, 3, 6, 6), ctx=dev), w, kernel=(3, 3), num_filter=2, no_bias=True)
    assert dc.stats() == {"builds": 3, "conv_fprop": 3}
    mx.nd.Convolution(mx.nd.ones((2, 3, 6, 6), ctx=dev), w, kernel=(3, 3), num_filter=2, no_bias=True)
    mx.nd.Convolution(mx.nd.ones((1, 3, 6, 6), ctx=dev), w, kernel=(3, 3), pad=(1, 1), num_filter=2, no_bias=True)
    assert dc.stats() == {"builds": 9, "conv_fprop": 5}


def test_pooling_and_float64_stay_on_mxlites_path(fake_cudnn):
    dev = mx.gpu(0)
    x = mx.nd.ones((1, 2, 4, 4), ctx=dev)
    mx.nd.Pooling(x, kernel=(2, 2), pool_type="max")
    mx.nd.Pooling(x, kernel=(2, 2), pool_type="avg")
    w = mx.nd.ones((2, 2, 3, 3), ctx=dev, dtype=np.float64)
    mx.nd.Convolution(mx.nd.ones((1, 2, 4, 4), ctx=dev, dtype=np.float64), w, kernel=(3, 3), num_filter=2,
                      no_bias=True)
    assert dc.stats() == {}


def test_the_setting_and_the_status(fake_cudnn, monkeypatch):
    assert dc.status(mx.gpu(0)) == "available" and not dc.available(mx.cpu())
    monkeypatch.setenv("MXLITE_CUDNN", "OFF")
    assert dc.status(mx.gpu(0)) == "off (MXLITE_CUDNN=off)"
    monkeypatch.setenv("MXLITE_CUDNN", "always")
    with pytest.raises(ValueError, match="MXLITE_CUDNN must be one of auto, off, got 'always'"):
        dc.available(mx.gpu(0))


def test_without_the_emulated_frontend_emulated_gpus_run_the_gemm_path():
    if not _emulated():
        pytest.skip("about emulated GPUs; these GPUs are real")
    saved = sys.modules.pop("cudnn", None)
    try:
        if saved is not None and saved.__name__.startswith("mxlite._emulation"):
            saved = None
        assert not dc.available(mx.gpu(0))
        assert dc.status(mx.gpu(0)) in ("the GPUs are emulated and the emulated cuDNN frontend is not installed",
                                        "nvidia-cudnn-frontend is not installed (pip install 'mxlite[cudnn12]' or "
                                        "'[cudnn13]')")
    finally:
        if saved is not None:
            sys.modules["cudnn"] = saved


# -- the emulated frontend is as strict as the library -----------------------------------------------------
def _conv_graph(fe, handle, x_dims=(1, 2, 5, 5), w_dims=(3, 2, 3, 3), io=None):
    g = fe.pygraph(io_data_type=io or fe.data_type.FLOAT, intermediate_data_type=fe.data_type.FLOAT,
                   compute_data_type=fe.data_type.FLOAT, handle=handle)
    x = g.tensor(name="x", dim=list(x_dims), stride=None)
    w = g.tensor(name="w", dim=list(w_dims))
    y = g.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y.set_output(True)
    return g, x, w, y


def _build(fe, g):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([fe.heur_mode.A, fe.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()


def test_the_emulated_frontend_refuses_what_cudnn_refuses(fake_cudnn):
    import cupy

    fe = fake_cudnn
    with cupy.cuda.Device(0):
        handle = fe.create_handle()
        g, x, w, y = _conv_graph(fe, handle)
        xs, ws, ys = cupy.ones((1, 2, 5, 5), "f"), cupy.ones((3, 2, 3, 3), "f"), cupy.empty((1, 3, 5, 5), "f")
        pack = {x: xs.data.ptr, w: ws.data.ptr, y: ys.data.ptr}
        with pytest.raises(RuntimeError, match="execute needs a built plan"):
            g.execute(pack, 0, handle=handle)
        with pytest.raises(RuntimeError, match=r"build_operation_graph\(\) must follow validate\(\)"):
            _conv_graph(fe, handle)[0].build_operation_graph()
        _build(fe, g)
        size = g.get_workspace_size()
        small = cupy.empty((size - 1,), cupy.uint8)
        with pytest.raises(mx._emulation.install.EmulatedGPUError, match="get_workspace_size"):
            g.execute(pack, small.data.ptr, handle=handle)
        workspace = cupy.empty((size,), cupy.uint8)  # kept alive: a freed workspace is refused too
        with pytest.raises(ValueError, match="missing a buffer for tensor uid"):
            g.execute({x: xs.data.ptr, w: ws.data.ptr}, workspace.data.ptr, handle=handle)
        g.execute(pack, workspace.data.ptr, handle=handle)
        assert float(ys[0, 0, 2, 2]) == 18.0
        with pytest.raises(ValueError, match="convolutions take 4-D or 5-D tensors"):
            _conv_graph(fe, handle, (1, 2, 5), (3, 2, 3))[0].validate()
        with pytest.raises(ValueError, match="data type data_type.INT32"):
            _conv_graph(fe, handle, io=fe.data_type.INT32)[0].validate()
        g2 = fe.pygraph(io_data_type=fe.data_type.FLOAT, compute_data_type=fe.data_type.FLOAT, handle=handle)
        dx = g2.conv_dgrad(loss=g2.tensor(dim=[1, 3, 5, 5]), filter=g2.tensor(dim=[3, 2, 3, 3]), padding=[1, 1],
                           stride=[1, 1], dilation=[1, 1])
        dx.set_output(True)
        with pytest.raises(ValueError, match="set_dim"):
            g2.validate()
        with pytest.raises(mx._emulation.install.EmulatedGPUError, match="belongs to gpu"):
            with cupy.cuda.Device(1):
                g.execute(pack, workspace.data.ptr, handle=handle)


@pytest.fixture
def installed_frontend(request):
    """The frontend this machine runs: the emulated one on emulated GPUs, NVIDIA's on real GPUs (skipped,
    saying why, only where a real GPU lacks it)."""
    if _emulated():
        yield request.getfixturevalue("fake_cudnn")
        return
    try:
        import cudnn
    except Exception as exc:
        pytest.skip(f"needs NVIDIA's cuDNN frontend: import cudnn failed ({type(exc).__name__}: {exc}); "
                    "pip install 'mxlite[cudnn12]' or '[cudnn13]'")
    dc.clear()
    if not dc.available(mx.gpu(0)):
        pytest.skip(f"cuDNN is not usable on gpu(0): {dc.status(mx.gpu(0))}")
    yield cudnn
    dc.clear()


def test_the_installed_frontend_matches_the_gemm_path(installed_frontend, monkeypatch):
    """Every convolution case through whichever frontend runs here, forward and both gradients: the emulated
    one in CI, NVIDIA's on a real GPU (where TF32 may round float32 products, hence the looser tolerance)."""
    for case in CONV_CASES:
        _real_conv(monkeypatch, case)


def _real_conv(monkeypatch, case):
    xs, ws, stride, pad, dil, groups, with_bias, dtype = case
    rng = np.random.default_rng(0)
    xh, wh = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    dev = mx.gpu(0)

    def run():
        x, w = mx.nd.array(xh, ctx=dev, dtype=dtype), mx.nd.array(wh, ctx=dev, dtype=dtype)
        x.attach_grad()
        w.attach_grad()
        with mx.autograd.record():
            y = mx.nd.Convolution(x, w, kernel=ws[2:], stride=stride, pad=pad, dilate=dil, num_filter=ws[0],
                                  num_group=groups, no_bias=True)
            (y * y).sum().backward()
        return y.asnumpy(), x.grad.asnumpy(), w.grad.asnumpy()

    gemm, cudnn = _both(monkeypatch, run)
    # a real GPU may run float32 convolutions with TF32 tensor cores: looser than the emulation's float64
    tol = 2e-2 if dtype == np.float16 else 5e-3
    for a, b in zip(gemm, cudnn):
        np.testing.assert_allclose(b.astype(np.float64), a.astype(np.float64), rtol=tol, atol=tol * np.abs(a).max())

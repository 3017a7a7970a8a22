"""``hybridize(static_alloc=True, static_shape=True)`` as CUDA graphs, and the GEMMs that make it possible.

On the emulated GPUs (real ones when present): every GEMM of mxlite goes through ``mxlite.device.blas``
(cuBLAS through nvmath's bindings) and gives ``cupy.matmul``'s bits; a hybridized block's forward and
backward are captured and replayed bit for bit as they run eagerly, with one graph launch each and no host
synchronisation; what cannot be captured runs eagerly with one warning naming the cause, and stale graphs
are never replayed (docs/graphs.md).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.device import blas
from mxlite.device import graphs as dgraphs
from mxlite.ops import conv, linalg, nn_ops

pytestmark = pytest.mark.gpu


@pytest.fixture
def emu():
    """The emulation's counters (graph launches and host syncs are counted there); skipped on real GPUs."""
    from mxlite._emulation import install  # noqa: PLC0415

    return install if mx.num_gpus() and install.emulated_gpu_count() else pytest.skip("needs the GPU emulation")


def _bits(t):
    return t.asnumpy().tobytes()


# -- GEMMs ---------------------------------------------------------------------------------------------
def _gemm_cases(cp, rng, dtype):
    def a(*shape):
        return cp.asarray(rng.standard_normal(shape).astype(dtype))

    return [
        (a(5, 7), a(7, 3)), (a(7, 5).T, a(7, 3)), (a(5, 7), a(3, 7).T), (a(7, 5).T, a(3, 7).T),
        (a(4, 5, 7), a(4, 7, 3)), (a(4, 7, 5).transpose(0, 2, 1), a(4, 7, 3)),
        (a(1, 6, 7), a(3, 1, 7, 2)), (a(6, 7), a(3, 4, 7, 2)), (a(3, 2, 6, 7), a(2, 7, 5)), (a(2, 6, 7), a(3, 2, 7, 5)),
        (a(7), a(7, 3)), (a(5, 7), a(7)), (a(7), a(7)), (a(5, 0), a(0, 3)), (a(0, 4), a(4, 3)), (a(1, 7), a(7, 1)),
        (a(5, 14)[:, ::2], a(7, 3)), (a(5, 7)[::-1], a(7, 3)),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_blas_matmul_gives_cupy_matmul_bit_for_bit(emu, dtype):
    import cupy as cp  # noqa: PLC0415 - the double (or real CuPy)

    rng = np.random.default_rng(0)
    with mx.gpu(0).use():
        cases = _gemm_cases(cp, rng, dtype)
        emu.reset_counters()
        for x, y in cases:
            got, ref = blas.matmul(x, y), cp.matmul(x, y)
            assert got.shape == ref.shape and got.dtype == ref.dtype
            assert got.get().tobytes() == ref.get().tobytes(), (x.shape, x.strides, y.shape, y.strides)
        for out in (cp.empty((5, 3), dtype), cp.empty((3, 5), dtype).T):  # out=, written in place or through a copy
            x, y = cp.asarray(rng.standard_normal((5, 7)).astype(dtype)), cp.asarray(rng.standard_normal((7, 3)))
            y = y.astype(dtype)
            assert blas.matmul(x, y, out=out) is out and out.get().tobytes() == cp.matmul(x, y).get().tobytes()
        mixed = blas.matmul(cp.ones((2, 3), np.float16), cp.ones((3, 2), np.float32))
        assert mixed.dtype == np.float32 and mixed.get().tolist() == [[3.0, 3.0]] * 2
        ints = blas.matmul(cp.arange(6).reshape(2, 3), cp.arange(6).reshape(3, 2))  # cupy.matmul: no cuBLAS
        assert ints.get().tolist() == (np.arange(6).reshape(2, 3) @ np.arange(6).reshape(3, 2)).tolist()
    counts = emu.counters()[0]
    assert counts["kernel_launches"]["cublas.gemm_ex"] and counts["kernel_launches"]["cublas.gemm_strided_batched_ex"]
    # cupy.matmul above ran as the reference; only the integer product went there from blas.matmul
    assert counts["ops"]["matmul"] == len(cases) + 2 + 1


def test_blas_on_cpu_devices_is_numpy_matmul():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    assert blas.matmul(x, w.T).tobytes() == (x @ w.T).tobytes()
    out = np.empty((6, 3), np.float32)
    assert blas.matmul(x, w.T, out=out) is out and out.tobytes() == np.matmul(x, w.T).tobytes()


def _capture_and_launch(fn, device, steps=2):
    """``fn()`` captured on ``device`` and launched ``steps`` times: the results after each launch."""
    graph, result = dgraphs.capture(device, fn, "test")
    outs = []
    for _ in range(steps):
        graph.launch()
        outs.append([r.asnumpy() for r in (result if isinstance(result, (list, tuple)) else [result])])
    graph.drop()
    return outs


_SITES = {
    # name: (function of tensors, input shapes): each call site of a GEMM in mxlite, forward and backward
    "matmul": (lambda a, b: ops.matmul(a, b), [(4, 3, 5), (5, 2)]),
    "batch_dot": (lambda a, b: ops.batch_dot(a, b, transpose_b=True), [(2, 3, 4), (2, 5, 4)]),
    "tensordot": (lambda a, b: ops.tensordot_last_first(a, b), [(2, 3, 4), (4, 5)]),
    "fully_connected": (lambda x, w, b: nn_ops.fully_connected(x, w, b), [(6, 5), (3, 5), (3,)]),
    "conv2d": (lambda x, w: conv.conv2d(x, w, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "conv2d 1x1 groups": (lambda x, w: conv.conv2d(x, w, groups=2), [(2, 4, 5, 5), (6, 2, 1, 1)]),
    "conv_transpose": (lambda x, w: conv.conv_transpose(x, w, stride=2, padding=1), [(2, 4, 4, 4), (4, 3, 4, 4)]),
    "linalg.gemm2": (lambda a, b: linalg.gemm2(a, b, transpose_b=True, alpha=0.5), [(2, 3, 4), (2, 5, 4)]),
    "linalg.gemm": (lambda a, b, c: linalg.gemm(a, b, c, alpha=2.0, beta=0.5), [(3, 4), (4, 5), (3, 5)]),
    "linalg.syrk": (lambda a: linalg.syrk(a, alpha=1.5), [(2, 3, 4)]),
    "linalg.trmm": (lambda a, b: linalg.trmm(a, b, transpose=True), [(4, 4), (4, 3)]),
}


@pytest.mark.parametrize("site", sorted(_SITES))
def test_every_gemm_call_site_can_be_captured(emu, site):
    """Forward and backward of each op that multiplies matrices, captured (a GEMM through cupy.matmul would be
    refused) and replayed: the replay gives the eager bits."""
    fn, shapes = _SITES[site]
    rng = np.random.default_rng(2)
    device = mx.gpu(0)
    inputs = [mx.array(rng.standard_normal(s).astype(np.float32), device=device) for s in shapes]
    for t in inputs:
        t.attach_grad()

    def step():
        with mx.autograd.record():
            y = fn(*inputs)
        return [y, *mx.autograd.grad(y, inputs, head_grads=None)]

    eager = [t.asnumpy() for t in step()]
    replays = _capture_and_launch(step, device)
    for replay in replays:
        for got, want in zip(replay, eager):
            assert got.tobytes() == want.tobytes(), site


def test_a_gemm_through_cupy_is_refused_inside_a_capture(emu):
    import cupy as cp  # noqa: PLC0415

    device = mx.gpu(0)
    with device.use():
        x = cp.ones((3, 3), np.float32)
    with pytest.raises(dgraphs.CaptureError, match="cuBLAS call through CuPy"):
        dgraphs.capture(device, lambda: cp.matmul(x, x), "refused")
    graph, y = dgraphs.capture(device, lambda: blas.matmul(x, x), "allowed")
    graph.launch()
    with device.use():
        assert y.get().tolist() == [[3.0] * 3] * 3


# -- training: captured against eager ----------------------------------------------------------------------
def _mlp():
    return mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(5, in_units=16))


def _cnn_bn():
    net = mx.nn.Sequential()
    net.add(mx.nn.Conv2D(6, 3, padding=1, in_channels=3), mx.nn.BatchNorm(in_channels=6), mx.nn.Activation("relu"),
            mx.nn.MaxPool2D(2), mx.nn.Conv2D(4, 3, padding=1, in_channels=6), mx.nn.Flatten(),
            mx.nn.Dropout(0.3), mx.nn.Dense(5, in_units=4 * 3 * 3))
    return net


_MODELS = {"mlp": (_mlp, (12,)), "cnn_bn": (_cnn_bn, (3, 6, 6))}


def _forward_backward(net, x):
    """``net(x)`` recorded, then back-propagated from ones; returns the output."""
    with mx.autograd.record():
        y = net(x)
    y.backward()
    return y


def _hybridized(net, device):
    """``net`` initialised on ``device`` and hybridized as CUDA graphs."""
    net.initialize(mx.init.Xavier(), device=device)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def _pair(make, devices, seed, grad_req=None):
    """Two equal networks made by ``make`` on ``devices``: the first runs eagerly, the second is hybridized."""
    nets = []
    for _ in range(2):
        mx.random.seed(seed)
        net = make()
        net.initialize(mx.init.Xavier(), device=devices)
        if grad_req is not None:
            net.collect_params().setattr("grad_req", grad_req)
        nets.append(net)
    nets[1].hybridize(static_alloc=True, static_shape=True)
    return nets


def _twins(model, devices, kvstore, shard=False):
    nets = _pair(_MODELS[model][0], devices, 3)
    trainers = [mx.Trainer(n.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=kvstore,
                           shard_optimizer_states=shard) for n in nets]
    return nets, trainers


def _train_step(net, trainer, x, y, devices):
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    with mx.autograd.record():
        outs = [net(a) for a in xs]
        losses = [loss_fn(o, b) for o, b in zip(outs, ys)]
    mx.autograd.backward(losses)
    trainer.step(x.shape[0])
    return [o.asnumpy() for o in outs]


@pytest.mark.parametrize("model", sorted(_MODELS))
@pytest.mark.parametrize("gpus,kvstore,shard", [(1, "device", False), (1, "nccl", False), (2, "device", False),
                                               (2, "nccl", False), (2, "device", True), (2, "nccl", True)])
def test_captured_training_is_bit_identical_to_eager(emu, model, gpus, kvstore, shard):
    """shard: with ZeRO-1 sharded optimizer states (each GPU updates its slice, then all-gathers)."""
    if mx.num_gpus() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    devices = [mx.gpu(i) for i in range(gpus)]
    (eager, graphed), (t_eager, t_graphed) = _twins(model, devices, kvstore, shard)
    rng = np.random.default_rng(4)
    shape = _MODELS[model][1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: everything is captured
        warnings.filterwarnings("ignore", "mxlite: Trainer.step runs eagerly.*shard_optimizer_states")  # sharded: eager
        for step in range(20):
            x = rng.standard_normal((4 * gpus, *shape)).astype(np.float32)
            y = rng.integers(0, 5, 4 * gpus).astype(np.float32)
            emu.reset_counters()
            mx.random.seed(100 + step)  # the same dropout masks for both: new each step
            out_g = _train_step(graphed, t_graphed, x, y, devices)
            counts = emu.counters()[0]
            mx.random.seed(100 + step)
            out_e = _train_step(eager, t_eager, x, y, devices)
            assert all(a.tobytes() == b.tobytes() for a, b in zip(out_e, out_g)), step
            for pe, pg in zip(eager.collect_params().values(), graphed.collect_params().values()):
                for d in devices:
                    assert _bits(pe.data(d)) == _bits(pg.data(d)), (step, pe.label)
            # warm-up, then forward + backward on GPU 0; from step 2 the Trainer's step too (unsharded), one graph
            # per GPU (tests/test_graph_step.py)
            assert counts["graph_launches"] == (0 if step == 0 else 2 if step == 1 or shard else 3), step
            if step > 0:  # the network is 2 graphs: no kernel of its own (the Trainer's are the rest)
                assert not any(k.startswith(("dropout", "philox", "batch_norm")) for k in counts["kernel_launches"])
    info = graphed.graph_info()
    assert len(info) == gpus and all(i["backward"] and i["bytes"] > 0 for i in info)
    assert {i["device"] for i in info} == {str(d) for d in devices}


def test_a_replayed_step_is_two_launches_and_no_host_sync(emu):
    device = mx.gpu(0)
    mx.random.seed(5)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.ones((4, 12), np.float32), device=device)
    head = mx.array(np.ones((4, 5), np.float32), device=device)
    for _ in range(3):
        emu.reset_counters()
        with mx.autograd.record():
            y = net(x)
        forward = emu.counters()[0]
        emu.reset_counters()
        y.backward(head)
        backward = emu.counters()[0]
    assert forward["graph_launches"] == 1 and backward["graph_launches"] == 1
    assert forward["host_syncs"] == backward["host_syncs"] == 0
    assert forward["kernel_launches"] == {} and backward["kernel_launches"] == {}  # the GEMMs run in the graphs
    assert forward["graph_nodes"] > 4 and backward["graph_nodes"] > 4
    # the host's side: the input copy, the output copy and the node's empty joint tensor; in backward the
    # output gradient's copy (the parameters' gradients are written by the graph into their buffers)
    assert sum(forward["ops"].values()) <= 4 and sum(backward["ops"].values()) <= 2, (forward["ops"],
                                                                                      backward["ops"])


def test_inference_and_training_graphs_keep_batch_norm_statistics_as_eager(emu):
    device = mx.gpu(0)
    nets = _pair(_cnn_bn, device, 6)
    rng = np.random.default_rng(7)
    for step in range(6):
        x = mx.array(rng.standard_normal((3, 3, 6, 6)).astype(np.float32), device=device)
        x.attach_grad()
        results = []
        for net in nets:
            mx.random.seed(step)  # the same dropout masks for both
            y = _forward_backward(net, x)
            infer = net(x)  # predict mode, not recorded: its own graph, reading the running statistics
            results.append([y.asnumpy(), infer.asnumpy(), x.grad.asnumpy()] +
                           [p.data(device).asnumpy() for p in net.collect_params().values()])
        for i, (a, b) in enumerate(zip(*results)):
            assert a.tobytes() == b.tobytes(), (step, i)
    assert sorted(i["backward"] for i in nets[1].graph_info()) == [False, True]


def test_grad_req_add_and_ready_hooks(emu):
    device = mx.gpu(0)
    nets = _pair(_mlp, device, 8, grad_req="add")
    ready = []
    for p in nets[1].collect_params().values():
        p.data(device).add_ready_hook(lambda t, name=p.label: ready.append(name))
    rng = np.random.default_rng(9)
    for _ in range(4):
        x = mx.array(rng.standard_normal((4, 12)).astype(np.float32), device=device)
        for net in nets:
            _forward_backward(net, x)
    for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        assert _bits(pe.grad(device)) == _bits(pg.grad(device)), pe.label
    assert len(ready) == 4 * 4 and set(ready) == set(nets[1].collect_params())


def test_autograd_grad_through_a_captured_block_leaves_gradient_buffers_alone(emu):
    """autograd.grad (an input's gradient) and a parameter also used outside the block: the replay's backward
    then writes into no gradient buffer (a second graph), and every gradient is the eager one."""
    device = mx.gpu(0)
    nets = _pair(_mlp, device, 18)
    rng = np.random.default_rng(19)
    for step in range(4):
        x = mx.array(rng.standard_normal((4, 12)).astype(np.float32), device=device)
        x.attach_grad()
        results = []
        for net in nets:
            y = _forward_backward(net, x)
            before = [p.grad(device).asnumpy() for p in net.collect_params().values()]
            with mx.autograd.record():
                y = net(x)
            dx, = mx.autograd.grad(y, [x])
            after = [p.grad(device).asnumpy() for p in net.collect_params().values()]
            assert all(a.tobytes() == b.tobytes() for a, b in zip(before, after)), step
            w = net[1].weight.data(device)  # also used outside the block: two consumers of its gradient
            with mx.autograd.record():
                loss = (net(x) * 2).sum() + (w * w).sum()
            loss.backward()
            results.append([dx.asnumpy(), x.grad.asnumpy()] + [p.grad(device).asnumpy()
                                                              for p in net.collect_params().values()])
        for i, (a, b) in enumerate(zip(*results)):
            assert a.tobytes() == b.tobytes(), (step, i, a.ravel()[:3], b.ravel()[:3])
    assert any("into no gradient buffer" in g["label"] for g in dgraphs.info())


# -- fallbacks: one notice per cause, results always right --------------------------------------------------
class _Then(mx.nn.Block):
    """A Dense layer, then ``then(y, x)``: what the block does after it (the thing that cannot be captured)."""

    def __init__(self, then):
        super().__init__()
        self.dense = mx.nn.Dense(4, in_units=5)
        self.then = then

    def forward(self, x):
        return self.then(self.dense(x), x)


def _synchronised(y):
    y.wait_to_read()
    return y


def _cupy_product(y, x):
    import cupy  # noqa: PLC0415

    return y + mx.autograd.Tensor(cupy.matmul(x.array, cupy.ones((5, 4), x.dtype)), x.device)


_FALLBACKS = {
    "host read": (lambda: _Then(lambda y, x: y * 2 if float(y.sum().asnumpy()) > 1e9 else y),
                  "read of GPU data by the host"),
    "random draw": (lambda: _Then(lambda y, x: y + mx.nd.random.uniform(shape=(4,), device=x.device)),
                    "random numbers"),
    "synchronisation": (lambda: _Then(lambda y, x: _synchronised(y)), "synchronisation with the host"),
    "host copy": (lambda: _Then(lambda y, x: y + mx.nd.array(np.ones(4, np.float32), ctx=x.device)),
                  "copy from the host to the GPU"),
    "cupy gemm": (lambda: _Then(_cupy_product), "cuBLAS call through CuPy"),
    "output": (lambda: _Then(lambda y, x: {"y": y}), "output that is not an array"),
}


@pytest.mark.parametrize("case", sorted(_FALLBACKS))
def test_what_cannot_be_captured_runs_eagerly_with_one_notice(emu, case):
    make, cause = _FALLBACKS[case]
    device = mx.gpu(0)
    nets = _pair(make, device, 10)
    rng = np.random.default_rng(11)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            x = mx.array(rng.standard_normal((3, 5)).astype(np.float32), device=device)
            results = []
            for net in nets:
                mx.random.seed(12)  # the same draws for both
                with mx.autograd.record():
                    y = net(x)
                    y = y["y"] if isinstance(y, dict) else y
                y.backward()
                results.append([y.asnumpy()] + [p.grad(device).asnumpy() for p in net.collect_params().values()])
            for a, b in zip(*results):
                assert a.tobytes() == b.tobytes()
    notices = [str(w.message) for w in caught if "hybridize" in str(w.message)]
    assert len(notices) == 1 and cause in notices[0], notices
    assert nets[1].graph_info() == []


def test_forward_hooks_on_children_are_not_captured(emu):
    device = mx.gpu(0)
    net = _mlp()
    net.initialize(mx.init.Xavier(), device=device)
    calls = []
    net[0].register_forward_hook(lambda block, args, out: calls.append(1))
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.array(np.ones((2, 12), np.float32), device=device)
    with pytest.warns(UserWarning, match="forward hooks on the child block '0'"):
        for _ in range(3):
            net(x)
    assert len(calls) == 3 and net.graph_info() == []


def test_summary_of_a_captured_block_sees_every_layer(emu, capsys):
    """Hooks registered after the capture (summary's) make the block run eagerly; detached, replays resume."""
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.ones((2, 12), np.float32), device=device)
    for _ in range(2):
        net(x)
    with pytest.warns(UserWarning, match="forward hooks on the child block"):
        net.summary(x)
    assert "Dense-1" in capsys.readouterr().out
    emu.reset_counters()
    net(x)
    assert emu.counters()[0]["graph_launches"] == 1


def test_a_new_shape_runs_eagerly_once_then_is_captured(emu):
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    for _ in range(2):
        net(mx.array(np.ones((4, 12), np.float32), device=device))
    with pytest.warns(UserWarning, match="a new input signature"):
        for _ in range(3):
            emu.reset_counters()
            net(mx.array(np.ones((2, 12), np.float32), device=device))
    assert emu.counters()[0]["graph_launches"] == 1 and len(net.graph_info()) == 2


def test_called_again_before_backward_runs_eagerly(emu):
    """Two recorded calls before one backward (a shared block): the second runs eagerly, both gradients right."""
    device = mx.gpu(0)
    nets = _pair(_mlp, device, 13)
    rng = np.random.default_rng(14)
    a, b = (mx.array(rng.standard_normal((4, 12)).astype(np.float32), device=device) for _ in range(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for net in nets:
                with mx.autograd.record():
                    loss = (net(a) * net(b)).sum()
                loss.backward()
    for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        assert _bits(pe.grad(device)) == _bits(pg.grad(device))
    assert any("before the backward of its previous recorded call" in str(w.message) for w in caught)


def test_set_data_needs_no_new_capture_new_buffers_do(emu):
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.random.default_rng(15).standard_normal((4, 12)).astype(np.float32), device=device)

    def eager():
        with mx.autograd.pause():
            return net.forward(x).asnumpy()

    for _ in range(3):
        y = net(x)
    assert y.asnumpy().tobytes() == eager().tobytes()
    weight = net[0].weight
    weight.set_data(np.full(weight.shape, 0.25, np.float32))  # new values, same buffer: the graph reads them
    emu.reset_counters()
    y = net(x)
    assert emu.counters()[0]["graph_launches"] == 1 and y.asnumpy().tobytes() == eager().tobytes()
    net.initialize(mx.init.Normal(1.0), device=device, force_reinit=True)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for _ in range(3):
            y = net(x)
            assert y.asnumpy().tobytes() == eager().tobytes()
    net.cast("float64")  # new buffers: the graph is stale, dropped, captured again
    x64 = x.astype("float64")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            emu.reset_counters()
            y = net(x64)
            assert y.dtype == np.float64 and y.asnumpy().tobytes() == net.forward(x64).asnumpy().tobytes()
    assert emu.counters()[0]["graph_launches"] == 1
    assert any("new input signature" in str(w.message) for w in caught)


def test_stale_parameters_are_never_replayed(emu):
    """A parameter moved to new buffers after the capture (cast to float64 and back): the graph is dropped
    with a notice and results follow the new buffers."""
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.ones((2, 12), np.float32), device=device)
    for _ in range(2):
        net(x)
    net.cast("float64")
    net.cast("float32")
    net[0].weight.set_data(np.zeros((16, 12), np.float32))
    with pytest.warns(UserWarning, match="got new buffers"):
        y = net(x)
    with mx.autograd.pause():
        assert y.asnumpy().tobytes() == net.forward(x).asnumpy().tobytes()


def test_without_nvmath_blocks_run_eagerly_with_one_notice(emu, monkeypatch):
    monkeypatch.setattr(blas, "_status", [(None, "nvmath-python is not importable (test)")])
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.ones((2, 12), np.float32), device=device)
    emu.reset_counters()
    with pytest.warns(UserWarning, match="install nvmath-python"):
        for _ in range(3):
            y = net(x)
    counts = emu.counters()[0]
    assert counts["graph_launches"] == 0 and counts["ops"]["matmul"] == 6  # cupy.matmul: eager, every call
    assert blas.backend() == ("cupy", "nvmath-python is not importable (test)")
    with mx.autograd.pause():
        assert y.asnumpy().tobytes() == net.forward(x).asnumpy().tobytes()


# -- memory and the cache ------------------------------------------------------------------------------------
def test_graphs_are_listed_and_dropped(emu):
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    x = mx.array(np.ones((2, 12), np.float32), device=device)
    for _ in range(3):
        _forward_backward(net, x)
    info = net.graph_info()
    assert len(info) == 1 and info[0]["launches"] == 2 and info[0]["bytes"] > 0
    held = [g for g in dgraphs.info() if g["label"].startswith("Sequential((2, 12) float32) training recorded")]
    assert sorted(g["label"].rsplit(" ", 1)[1] for g in held) == ["backward", "forward"]
    assert all(g["bytes"] > 0 for g in held)
    assert dgraphs.clear() >= 2 and dgraphs.info() == []
    with pytest.warns(UserWarning, match="dropped"):
        for _ in range(3):
            _forward_backward(net, x)
    assert len(net.graph_info()) == 1 and net.graph_info()[0]["launches"] == 2  # stale: eager, capture, replay
    net.hybridize(False)
    assert net.graph_info() == [] and dgraphs.info() == []
    emu.reset_counters()
    net(x)
    assert emu.counters()[0]["graph_launches"] == 0


def test_dropping_graphs_between_forward_and_backward_keeps_the_backward(emu):
    device = mx.gpu(0)
    nets = _pair(_mlp, device, 16)
    x = mx.array(np.random.default_rng(17).standard_normal((4, 12)).astype(np.float32), device=device)
    for drop in (False, False, True):
        for net in nets:
            with mx.autograd.record():
                y = net(x)
            if drop and net is nets[1]:
                assert net.graph_info() != []
                net.hybridize(False)  # the pending backward keeps its graph until it has run
            y.backward()
    for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        assert _bits(pe.grad(device)) == _bits(pg.grad(device))
    assert dgraphs.info() == []


def test_the_cache_keeps_the_most_recent_signatures(emu, monkeypatch):
    from mxlite.gluon import _graphs  # noqa: PLC0415

    monkeypatch.setattr(_graphs, "MAX_GRAPHS", 2)
    device = mx.gpu(0)
    net = _hybridized(_mlp(), device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch in (1, 2, 3):
            for _ in range(2):
                net(mx.array(np.ones((batch, 12), np.float32), device=device))
    assert [i["label"].split(")")[0] for i in net.graph_info()] == ["Sequential((2, 12", "Sequential((3, 12"]


def test_cpu_devices_and_plain_hybridize_run_eagerly():
    net = _mlp()
    net.initialize(mx.init.Xavier(), device=mx.cpu(0))
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.array(np.ones((2, 12), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            y = net(x)
    assert net.graph_info() == [] and y.shape == (2, 5)
    net.hybridize()
    assert net.__dict__.get("_graphs") is None

"""GPU (CuPy) devices: creation, ops against the CPU twin, training, checkpoints, DLPack.

Every test needs CuPy and at least one visible GPU; without them the whole module is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx

if mx.num_gpus() == 0:
    pytest.skip("needs CuPy and a CUDA GPU", allow_module_level=True)

import cupy  # noqa: E402 - only importable where a GPU is

from mxlite.device.copy import as_host, copy_between  # noqa: E402
from mxlite.gluon.data.dataloader import default_batchify_fn  # noqa: E402
from mxlite.ops import nn_ops  # noqa: E402

pytestmark = pytest.mark.gpu

RTOL = 1e-4
ATOL = 1e-5


# -- devices --------------------------------------------------------------------------------------
def test_gpu_device_creation():
    g = mx.gpu(0)
    assert g == mx.Device("gpu", 0) and g != mx.cpu(0)
    assert repr(g) == "gpu(0)" and g.is_gpu
    assert g.xp is cupy
    assert mx.gpu_devices()[0] == g
    assert len(mx.gpu_devices()) == mx.num_gpus()
    with pytest.raises(mx.DeviceUnavailableError, match="only"):
        mx.gpu(mx.num_gpus())
    z = mx.zeros((2, 3), device=g)
    assert z.device == g and isinstance(z._data, cupy.ndarray)
    np.testing.assert_array_equal(z.asnumpy(), np.zeros((2, 3)))
    with mx.gpu(0):
        assert mx.current_device() == g
        assert mx.ones((2,)).device == g
    assert mx.current_device() == mx.cpu(0)


def test_gpu_copies():
    host = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    dev = host.to(mx.gpu(0))
    assert dev.device == mx.gpu(0)
    np.testing.assert_array_equal(dev.asnumpy(), host.asnumpy())
    dev[0, 0] = 100.0
    assert host.asnumpy()[0, 0] == 0.0
    back = dev.copyto(mx.cpu(1))
    assert back.device == mx.cpu(1) and back.asnumpy()[0, 0] == 100.0
    dst = mx.zeros((2, 3), device=mx.gpu(0))
    host.copyto(dst)
    np.testing.assert_array_equal(dst.asnumpy(), host.asnumpy())


def test_gpu_random_seeded():
    mx.random.seed(4)
    a = mx.random.uniform(shape=(8,), device=mx.gpu(0)).asnumpy()
    mx.random.seed(4)
    b = mx.random.uniform(shape=(8,), device=mx.gpu(0)).asnumpy()
    np.testing.assert_array_equal(a, b)


# -- ops: GPU against CPU -------------------------------------------------------------------------
def _run_on(device, fn, arrays):
    """Run ``fn`` on tensors made from ``arrays`` on ``device``; return output and input grads."""
    tensors = []
    for a in arrays:
        t = mx.array(a, device=device)
        if np.issubdtype(a.dtype, np.floating):
            t.attach_grad()
        tensors.append(t)
    with mx.autograd.record():
        out = fn(*tensors)
    head = np.random.default_rng(0).standard_normal(out.shape).astype(out.dtype)
    out.backward(mx.array(head, device=device))
    grads = [t.grad.asnumpy() if t.grad is not None else None for t in tensors]
    return out.asnumpy(), grads


_rng = np.random.default_rng(42)


def _f32(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


OPS = {
    "matmul_relu": (lambda a, b: mx.ops.relu(mx.ops.matmul(a, b)), lambda: [_f32(4, 5), _f32(5, 3)]),
    "elementwise": (lambda a, b: mx.ops.exp(a * 0.5) / (1.0 + mx.ops.square(b)) - mx.ops.tanh(a),
                    lambda: [_f32(3, 4), _f32(3, 4)]),
    "reduce": (lambda a: mx.ops.sum(a, axis=1) + mx.ops.max(a, axis=1) + mx.ops.mean(a, axis=1),
               lambda: [_f32(4, 6)]),
    "softmax": (lambda a: nn_ops.softmax(a) * nn_ops.log_softmax(a), lambda: [_f32(3, 7)]),
    "fully_connected": (lambda x, w, b: nn_ops.fully_connected(x, w, b), lambda: [_f32(4, 2, 3), _f32(5, 6), _f32(5)]),
    "conv2d": (lambda x, w, b: nn_ops.conv2d(x, w, b, stride=2, padding=1, groups=2),
               lambda: [_f32(2, 4, 7, 7), _f32(6, 2, 3, 3), _f32(6)]),
    "max_pool2d": (lambda x: nn_ops.max_pool2d(x, 3, 2, 1), lambda: [_f32(2, 3, 6, 6)]),
    "avg_pool2d": (lambda x: nn_ops.avg_pool2d(x, 3, 2, 1, count_include_pad=False), lambda: [_f32(2, 3, 6, 6)]),
    "global_avg_pool2d": (lambda x: nn_ops.global_avg_pool2d(x), lambda: [_f32(2, 3, 4, 5)]),
    "layer_norm": (lambda x, g, b: nn_ops.layer_norm(x, g, b), lambda: [_f32(3, 4, 6), _f32(6), _f32(6)]),
    "batch_norm": (lambda x, g, b: nn_ops.batch_norm(x, g, b, mx.zeros((3,), device=x.device),
                                                     mx.ones((3,), device=x.device), training=True),
                   lambda: [_f32(4, 3, 2, 2), _f32(3), _f32(3)]),
    "embedding": (lambda w, i: nn_ops.embedding(i, w), lambda: [_f32(6, 3), np.array([[1, 4], [1, 0]])]),
    "take_pick": (lambda a, i: nn_ops.pick(a, i, axis=1) + nn_ops.take(a, i, axis=0).sum(axis=1),
                  lambda: [_f32(4, 5), np.array([0, 3, 4, 1])]),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_gpu_matches_cpu(name):
    fn, make = OPS[name]
    arrays = make()
    out_c, grads_c = _run_on(mx.cpu(0), fn, arrays)
    out_g, grads_g = _run_on(mx.gpu(0), fn, arrays)
    np.testing.assert_allclose(out_g, out_c, rtol=RTOL, atol=ATOL, err_msg=f"{name} forward")
    for i, (gc, gg) in enumerate(zip(grads_c, grads_g)):
        if gc is None:
            assert gg is None
            continue
        np.testing.assert_allclose(gg, gc, rtol=RTOL, atol=ATOL, err_msg=f"{name} gradient of input {i}")


def test_sparse_embedding_grad_on_gpu():
    ids = np.array([[3, 1], [3, 0]])
    results = {}
    for dev in (mx.cpu(0), mx.gpu(0)):
        layer = mx.nn.Embedding(5, 2, sparse_grad=True, weight_initializer=mx.init.Constant(np.arange(10.0)
                                                                                            .reshape(5, 2)))
        layer.initialize(device=dev)
        with mx.autograd.record():
            out = layer(mx.array(ids, device=dev))
        out.backward()
        g = layer.weight.grad()
        assert isinstance(g, mx.sparse.RowSparseTensor) and g.device == dev
        results[str(dev)] = (out.asnumpy(), g.indices.asnumpy(), g.asnumpy())
    for a, b in zip(results["cpu(0)"], results["gpu(0)"]):
        np.testing.assert_allclose(b, a, rtol=RTOL)
    np.testing.assert_array_equal(results["gpu(0)"][1], [0, 1, 3])


# -- training -------------------------------------------------------------------------------------
def _train_mlp(devices, steps=20, optimizer="sgd", opt_params=None):
    """Train a small MLP for ``steps`` full-batch steps on ``devices``; return the final weights."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((32, 10)).astype(np.float32)
    y = rng.integers(0, 4, 32).astype(np.float32)
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu"), mx.nn.Dense(4))
    net.initialize(mx.init.Xavier(), device=devices)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    trainer = mx.Trainer(net.collect_params(), optimizer, opt_params or {"learning_rate": 0.1})
    losses = []
    for _ in range(steps):
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            parts = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(parts)
        trainer.step(batch_size=x.shape[0])
        losses.append(sum(float(p.sum().asnumpy()) for p in parts) / x.shape[0])
    weights = {name: p.data(devices[0]).asnumpy() for name, p in net.collect_params().items()}
    for name, p in net.collect_params().items():  # mirrors stay identical
        for dev in devices[1:]:
            np.testing.assert_array_equal(p.data(dev).asnumpy(), weights[name])
    return weights, losses


def _compare_training(gpu_devices, cpu_devices, **kw):
    w_cpu, l_cpu = _train_mlp(cpu_devices, **kw)
    w_gpu, l_gpu = _train_mlp(gpu_devices, **kw)
    assert l_cpu[-1] < l_cpu[0]  # it learned something
    np.testing.assert_allclose(l_gpu, l_cpu, rtol=1e-4, atol=1e-6)
    for name in w_cpu:
        np.testing.assert_allclose(w_gpu[name], w_cpu[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_mlp_training_one_gpu_matches_cpu():
    _compare_training([mx.gpu(0)], [mx.cpu(0)])


def test_mlp_training_adam_one_gpu_matches_cpu():
    _compare_training([mx.gpu(0)], [mx.cpu(0)], optimizer="adam", opt_params={"learning_rate": 0.01})


@pytest.mark.requires_gpus(2)
def test_mlp_training_two_gpus_matches_cpu():
    _compare_training([mx.gpu(0), mx.gpu(1)], [mx.cpu(0), mx.cpu(1)])


def test_gpu_and_cpu_mirrors_of_one_parameter():
    net = mx.nn.Dense(3, in_units=2)
    net.initialize(device=[mx.cpu(0), mx.gpu(0)])
    np.testing.assert_array_equal(net.weight.data(mx.cpu(0)).asnumpy(), net.weight.data(mx.gpu(0)).asnumpy())
    assert isinstance(net.weight.data(mx.gpu(0))._data, cupy.ndarray)
    assert isinstance(net.weight.grad(mx.gpu(0))._data, cupy.ndarray)


# -- checkpoints ----------------------------------------------------------------------------------
def test_save_on_gpu_load_on_cpu(tmp_path):
    mx.random.seed(3)
    src = mx.nn.Sequential(mx.nn.Conv2D(2, 3, in_channels=1), mx.nn.Flatten(), mx.nn.Dense(3))
    src.initialize(mx.init.Xavier(), device=mx.gpu(0))
    x = np.random.default_rng(0).standard_normal((2, 1, 5, 5)).astype(np.float32)
    out_gpu = src(mx.array(x, device=mx.gpu(0))).asnumpy()
    path = tmp_path / "gpu.params"
    src.save_parameters(path)
    dst = mx.nn.Sequential(mx.nn.Conv2D(2, 3), mx.nn.Flatten(), mx.nn.Dense(3))
    dst.load_parameters(path, device=mx.cpu(0))
    for name, p in dst.collect_params().items():
        assert p.list_device() == [mx.cpu(0)]
        np.testing.assert_array_equal(p.data().asnumpy(), src.collect_params()[name].data().asnumpy())
    np.testing.assert_allclose(dst(mx.array(x)).asnumpy(), out_gpu, rtol=RTOL, atol=ATOL)
    back = mx.nn.Sequential(mx.nn.Conv2D(2, 3), mx.nn.Flatten(), mx.nn.Dense(3))
    back.load_parameters(path, device=mx.gpu(0))
    assert back[0].weight.data().device == mx.gpu(0)


# -- DLPack ---------------------------------------------------------------------------------------
def test_dlpack_to_cupy_shares_memory():
    t = mx.array([1.0, 2.0, 3.0], device=mx.gpu(0))
    view = cupy.from_dlpack(t)
    view[1] = 20.0
    np.testing.assert_array_equal(t.asnumpy(), [1.0, 20.0, 3.0])
    assert t.__dlpack_device__()[0] == 2  # kDLCUDA


def test_dlpack_from_cupy():
    src = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    t = mx.from_dlpack(src)
    assert t.device == mx.gpu(0) and t.dtype == np.float32 and t.shape == (2, 3)
    np.testing.assert_array_equal(t.asnumpy(), np.arange(6).reshape(2, 3))
    src[0, 0] = 42.0
    assert t.asnumpy()[0, 0] == 42.0


def test_dlpack_from_a_legacy_cupy_capsule():
    src = cupy.arange(4, dtype=cupy.float32)
    t = mx.from_dlpack(src.toDlpack())  # a raw PyCapsule: its device is read from the capsule
    assert t.device == mx.gpu(0)
    src[1] = 9.0
    np.testing.assert_array_equal(t.asnumpy(), [0, 9, 2, 3])


# -- CuPy arrays where NumPy would raise ------------------------------------------------------------
def test_split_and_load_and_constant_take_cupy_arrays():
    batch = cupy.arange(8, dtype=cupy.float32).reshape(4, 2)
    parts = mx.split_and_load(batch, [mx.gpu(0), mx.cpu(0)])
    assert [p.device for p in parts] == [mx.gpu(0), mx.cpu(0)]
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]), batch.get())
    arr = np.zeros(3, np.float32)
    mx.init.Constant(cupy.full(3, 2.0, cupy.float32)).init_weight("w", arr)
    assert (arr == 2).all()
    out = default_batchify_fn([cupy.ones(3, cupy.float32), cupy.zeros(3, cupy.float32)])
    np.testing.assert_array_equal(out.asnumpy(), [[1, 1, 1], [0, 0, 0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_gpu_random_keeps_the_requested_dtype(dtype):
    mx.random.seed(5)
    for draw in (mx.random.normal, mx.random.uniform):
        out = draw(shape=(1001,), dtype=dtype, device=mx.gpu(0))
        assert out.dtype == np.dtype(dtype) and np.isfinite(out.asnumpy()).all()


@pytest.mark.requires_gpus(2)
def test_peer_copy_of_a_strided_temporary():
    """A non-contiguous temporary copied to another GPU, then freed and its memory reused at once."""
    with mx.gpu(0).use():
        src = cupy.arange(4096, dtype=cupy.float32).reshape(64, 64)
    out = copy_between((src * 2).T, mx.gpu(0), mx.gpu(1), copy=False)  # a strided view of a temporary
    with mx.gpu(0).use():
        cupy.full((64, 64), -1.0, cupy.float32)  # may take the freed temporaries' memory
    np.testing.assert_array_equal(as_host(out), np.arange(4096, dtype=np.float32).reshape(64, 64).T * 2)

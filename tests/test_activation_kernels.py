"""kernels/activation.cu (ReLU) against its NumPy twins in mxlite.ops.activations, bit for bit, and the
kernel-backed relu against ops.relu.

CPU devices run the serial host build (its thread pool takes the chunks); the GPU-marked test runs real
block sizes on the (emulated) GPUs. Sizes straddle the chunk boundaries; NaN, infinities and signed zeros
are included.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.ops import activations

DTYPES = [np.float32, np.float64, np.float16]
SIZES = [0, 1, 7, 1000, (1 << 16) + 3]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _data(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    if n >= 7:
        x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30]
        g[:2] = [np.nan, np.inf]
    return x, g


def _run(device, x, g):
    xt = mx.array(x, device=device)
    xt.attach_grad()
    with mx.autograd.record():
        y = activations.relu(xt)
    y.backward(mx.array(g, device=device))
    return y.asnumpy(), xt.grad.asnumpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", SIZES, ids=str)
def test_host_build_gives_the_twins_bits(n, dtype):
    if not activations.KERNELS.cpu_enabled():
        pytest.skip("the host build of kernels/activation.cu is not available")
    x, g = _data(n, dtype)
    y, gx = _run(mx.cpu(0), x, g)
    np.testing.assert_array_equal(_bits(y), _bits(activations._relu_forward_twin(x)))
    np.testing.assert_array_equal(_bits(gx), _bits(activations._relu_backward_twin(g, x)))


def test_twins_agree_with_the_composed_relu():
    x, g = _data(1000, np.float32)
    t = mx.array(x)
    t.attach_grad()
    with mx.autograd.record():
        y = ops.relu(t)
    y.backward(mx.array(g))
    np.testing.assert_array_equal(activations._relu_forward_twin(x), y.asnumpy())  # NaN as NaN, 0 == -0
    want = g * (x > 0)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(activations._relu_backward_twin(g, x)[finite], want[finite])
    # where x <= 0 the gradient is 0 even for a NaN or infinite g (as PyTorch's), where g * 0 would be NaN
    assert activations._relu_backward_twin(np.array([np.nan], np.float32), np.array([-1.0], np.float32))[0] == 0


def test_the_twins_serve_without_the_host_build(monkeypatch):
    monkeypatch.setattr(activations.KERNELS, "cpu_enabled", lambda: False)
    x, g = _data(1000, np.float32)
    y, gx = _run(mx.cpu(0), x, g)
    np.testing.assert_array_equal(_bits(y), _bits(activations._relu_forward_twin(x)))
    np.testing.assert_array_equal(_bits(gx), _bits(activations._relu_backward_twin(g, x)))


def test_relu_layers_use_the_kernel_and_other_dtypes_compose():
    net = mx.nn.Activation("relu")
    x = mx.array(np.array([[-1.0, 2.0]], np.float32))
    x.attach_grad()
    with mx.autograd.record():
        y = net(x)
    assert y._node.op == "relu" and y.asnumpy().tolist() == [[0.0, 2.0]]
    ints = activations.relu(mx.array(np.array([-3, 4], np.int32)))
    assert ints.asnumpy().tolist() == [0, 4]


def test_second_derivative_through_the_kernel_relu():
    x = mx.array(np.array([-1.0, 0.5, 2.0]))
    x.attach_grad()
    with mx.autograd.record():
        y = activations.relu(x) ** 2
        (gx,) = mx.autograd.grad(y.sum(), [x], create_graph=True)
        gx.sum().backward()
    np.testing.assert_array_equal(gx.asnumpy(), [0.0, 1.0, 4.0])
    np.testing.assert_array_equal(x.grad.asnumpy(), [0.0, 2.0, 2.0])


gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [7, 5000], ids=str)
def test_gpu_kernels_give_the_twins_bits(n, dtype):
    x, g = _data(n, dtype, seed=1)
    y, gx = _run(mx.gpu(0), x, g)
    np.testing.assert_array_equal(_bits(y), _bits(activations._relu_forward_twin(x)))
    np.testing.assert_array_equal(_bits(gx), _bits(activations._relu_backward_twin(g, x)))

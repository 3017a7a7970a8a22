"""The recurrent layers' time loops as native calls on CPU devices (kernels/rnn.cu, host build only).

A layer's forward and backward steps run as one call of ``mxlite_rnn_forward_steps_<T>`` /
``mxlite_rnn_backward_steps_<T>`` per range of steps: per step the product against the packed W_h
(tests/test_rnn_packed.py) and the cell kernel, as the Python loop does them. The results must be the Python
loop's bits, in every mode, dtype and layout the layers take (stacks, pairs of directions, lengths, state
clipping, dropout), on one and two threads.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import blas
from mxlite.ops import rnn_ops


@pytest.fixture
def native_calls(monkeypatch):
    """Counts the native calls; skipped where the host build is missing."""
    if not rnn_ops.KERNELS.cpu_enabled():
        pytest.skip("needs the host build of the kernels")
    calls = []
    original = rnn_ops._NativeSteps.__call__

    def counted(self, s0, s1):
        calls.append((s0, s1))
        return original(self, s0, s1)

    monkeypatch.setattr(rnn_ops._NativeSteps, "__call__", counted)
    return calls


def _train_once(layer, x_np, lengths, seed):
    """Outputs, final states and every gradient of one recorded pass, and an inference output (as arrays)."""
    mx.random.seed(seed)  # the same dropout masks for both loops
    x = mx.array(x_np, dtype=x_np.dtype)
    x.attach_grad()
    args = (x, layer.begin_state(x_np.shape[1], dtype=x_np.dtype)) + (() if lengths is None else (mx.array(lengths),))
    with mx.autograd.record():
        out, finals = layer(*args)
        loss = (out * out).sum() + sum((f * f).sum() for f in finals)
    loss.backward()
    inference = layer(*args)[0].asnumpy()  # not recorded: no gates saved for a backward
    return [out.asnumpy(), *(f.asnumpy() for f in finals), x.grad.asnumpy(), inference] + [
        p.grad().asnumpy() for p in layer.collect_params().values()]


CASES = [  # (layer, kwargs, with lengths)
    ("LSTM", {"num_layers": 2, "dropout": 0.3}, False),
    ("LSTM", {"num_layers": 1, "bidirectional": True, "use_sequence_length": True}, True),
    ("LSTM", {"num_layers": 2, "state_clip_min": -0.2, "state_clip_max": 0.3}, False),
    ("GRU", {"num_layers": 2}, False),
    ("GRU", {"num_layers": 2, "bidirectional": True, "use_sequence_length": True}, True),
    ("RNN", {"num_layers": 2, "activation": "tanh"}, False),
    ("RNN", {"num_layers": 1, "activation": "relu", "bidirectional": True}, False),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind, kwargs, with_lengths", CASES,
                         ids=[f"{k}-{'-'.join(map(str, v.values()))}" for k, v, _ in CASES])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_native_loops_give_the_python_loops_bits(kind, kwargs, with_lengths, dtype, threads, native_calls,
                                                     thread_count, monkeypatch):
    thread_count(threads)
    rng = np.random.default_rng(3)
    layer = getattr(mx.rnn, kind)(12, input_size=7, dtype=dtype, **kwargs)
    layer.initialize(mx.init.Uniform(0.3), device=mx.cpu(0))
    x_np = rng.standard_normal((17, 5, 7)).astype(dtype)
    lengths = rng.integers(0, 18, 5) if with_lengths else None
    native = _train_once(layer, x_np, lengths, seed=11)
    assert native_calls, "the native loops did not run"
    monkeypatch.setattr(rnn_ops, "NATIVE_STEPS", False)
    count = len(native_calls)
    python = _train_once(layer, x_np, lengths, seed=11)
    assert len(native_calls) == count  # the Python loop really ran
    for k, (a, b) in enumerate(zip(native, python)):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes(), f"result {k} differs between the native and the Python loop"


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_an_empty_batch_or_sequence_trains_as_before(kind, native_calls):
    layer = getattr(mx.rnn, kind)(6, num_layers=2, input_size=4)
    layer.initialize(device=mx.cpu(0))
    for shape in ((5, 0, 4), (0, 3, 4)):
        x = mx.array(np.ones(shape, np.float32))
        x.attach_grad()
        with mx.autograd.record():
            out = layer(x)
        out.backward()
        assert out.shape == shape[:2] + (6,) and x.grad.shape == shape


def test_half_precision_runs_the_python_loop(native_calls):
    layer = mx.rnn.GRU(8, input_size=4, dtype="float16")
    layer.initialize(device=mx.cpu(0))
    out = layer(mx.array(np.ones((3, 2, 4), np.float16), dtype="float16"))
    assert out.shape == (3, 2, 8) and native_calls == []  # NumPy's float16 products are not BLAS calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_gemm_is_numpys_own_product(dtype):
    import ctypes

    found = blas.host_gemm(dtype)
    if found is None:
        pytest.skip("NumPy does not use an OpenBLAS found here")
    address, ilp64 = found
    integer = ctypes.c_int64 if ilp64 else ctypes.c_int
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, real,
                            ctypes.c_void_p, integer, ctypes.c_void_p, integer, real, ctypes.c_void_p, integer)(address)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 96)).astype(dtype), rng.standard_normal((96, 80)).astype(dtype)
    c = np.empty((32, 80), dtype)
    gemm(101, 111, 111, 32, 80, 96, 1.0, a.ctypes.data, 96, b.ctypes.data, 80, 0.0, c.ctypes.data, 80)
    assert c.tobytes() == np.matmul(a, b).tobytes()
    assert blas.host_gemm(np.float16) is None

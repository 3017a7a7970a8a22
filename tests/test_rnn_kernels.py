"""kernels/rnn.cu against its NumPy twins, and the fused layer-direction op against mxlite.gluon.rnn._steps.

Three levels:

- each cell kernel (LSTM, GRU, RNN tanh/relu; forward and backward) against its twin in
  ``mxlite/ops/rnn_ops.py``, bit for bit (NaNs compared as NaNs), on CPU devices (the serial host
  build) and on GPUs (emulated where there is none) with several block sizes; float32, float64 and
  float16 storage, with and without sequence lengths, clip, saved gates, and special values (+-0,
  subnormals, +-inf, NaN, values past exp's clamp);
- the twins' sigmoid and tanh against long double: within 3 ulp in float32 and float64;
- :func:`rnn_ops.recurrence` against the step-by-step composition of ``_steps`` (outputs, final states
  and every gradient, float64 at 1e-12), against finite differences, per-sample references for
  ``valid_length``, the compiled kernels against the twins through the whole op (bit for bit), and on a
  GPU (two launches per time step, no host synchronisation, no host-to-device copy).
"""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
from gradcheck import check_grad

import mxlite as mx
from mxlite import ops
from mxlite.device import kernels as _kernels
from mxlite.gluon.rnn import _steps
from mxlite.ops import rnn_ops

DTYPES = [np.float32, np.float64, np.float16]
DTYPE_IDS = ["f32", "f64", "f16"]
MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same_bits(got, want, what, flushed=False):
    """Bit for bit, NaNs compared as NaNs (which NaN comes out where two meet depends on operand order).

    ``flushed``: a real GPU's float32 results, where CuPy's -ftz=true turns subnormals into zeros: where the twin
    is below the smallest normal number in magnitude, any value that is too passes.
    """
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
    same = ~nan
    if flushed and want.dtype == np.float32:
        tiny = np.finfo(np.float32).tiny
        same &= ~((np.abs(want) < tiny) & (np.abs(got) < tiny))
    np.testing.assert_array_equal(_bits(got)[same], _bits(want)[same], err_msg=what)


@pytest.fixture
def mode(monkeypatch):
    """``mode('compiled')`` / ``mode('numpy')``: how CPU devices run the cell kernels from now on."""
    def set_mode(value):
        monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, value)
    return set_mode


# -- the kernels against their twins -------------------------------------------------------------------------
N, H = 5, 13  # odd sizes: vector loops with remainders, GPU blocks with idle threads
# Each kernel's buffers: (role, width in units of H, or 'b' for a (G*H,) bias, 'L' for lengths); roles: 'in'
# inputs, 'out' outputs, 'io' read and written, 'opt' optional outputs (saved gates, y).
KERNELS = {
    "lstm_forward": (4, [("xg", 4), ("hg", 4), ("bias_i", "b"), ("bias_h", "b"), ("h_prev", 1), ("c_prev", 1),
                         ("h_next", 1), ("c_next", 1), ("y", 1), ("gates", 4), ("lengths", "L")]),
    "lstm_backward": (4, [("gates", 4), ("c_prev", 1), ("dy", 1), ("dh_rec", 1), ("carry", 1), ("dc", 1),
                          ("dgates", 4), ("lengths", "L")]),
    "gru_forward": (3, [("xg", 3), ("hg", 3), ("bias_i", "b"), ("bias_h", "b"), ("h_prev", 1), ("h_next", 1),
                        ("y", 1), ("saved", 4), ("lengths", "L")]),
    "gru_backward": (3, [("saved", 4), ("h_prev", 1), ("dy", 1), ("dh_rec", 1), ("carry", 1), ("dx_gates", 3),
                         ("dh_gates", 3), ("lengths", "L")]),
    "rnn_forward": (1, [("xg", 1), ("hg", 1), ("bias_i", "b"), ("bias_h", "b"), ("h_prev", 1), ("h_next", 1),
                        ("y", 1), ("lengths", "L")]),
    "rnn_backward": (1, [("h_next", 1), ("dy", 1), ("dh_rec", 1), ("carry", 1), ("dgates", 1), ("lengths", "L")]),
}
OPTIONAL = {"y", "gates", "saved"}  # the forward kernels' null pointers in some variants
VARIANTS = ["plain", "lengths", "clip-or-relu", "inference"]


def _values(rng, shape, dtype, special, subnormals=True):
    """Wide normal values (pre-activations from -40 to 40, so both clamps and saturation are reached), with
    -0.0, +0.0, a subnormal (0 unless ``subnormals``), +-inf, NaN and values past exp's clamp sprinkled in when
    ``special``."""
    a = (rng.standard_normal(shape) * 8).astype(dtype)
    if special and a.size >= 16:
        flat = a.reshape(-1)
        tiny = np.finfo(dtype).smallest_subnormal if subnormals else 0.0
        big = 60000.0 if dtype == np.float16 else 800.0
        picks = rng.choice(flat.size, 11, replace=False)
        flat[picks] = np.array([-0.0, 0.0, tiny, -tiny, np.inf, -np.inf, np.nan, big, -big, 1e-3, -88.0], dtype)
    return a


def _kernel_case(kernel, dtype, variant, rng, special=True, subnormals=True):
    """(buffers, ints, reals) of one launch: every buffer random (outputs too, so untouched rows compare)."""
    gates, roles = KERNELS[kernel]
    buffers = []
    for name, width in roles:
        if width == "L":
            lengths = rng.integers(0, 4, size=N).astype(np.int32) if variant == "lengths" else None
            buffers.append(lengths)
        elif width == "b":
            buffers.append(_values(rng, (gates * H,), dtype, special, subnormals))
        elif name in OPTIONAL and kernel.endswith("forward") and (
                variant == "inference" or (name == "y" and variant != "lengths")):
            buffers.append(None)
        else:
            buffers.append(_values(rng, (N, width * H), dtype, special, subnormals))
    step = 2
    ints = [step, N, H]
    reals = []
    if kernel.startswith("lstm"):
        ints.append(int(variant == "clip-or-relu"))
        reals = [-1.5, 2.25]
    elif kernel.startswith("rnn"):
        ints.append(int(variant == "clip-or-relu"))
    return buffers, ints, reals


def _run_cells(device, dtype, kernel, buffers, ints, reals, threads=None):
    """Launch ``kernel`` on copies of ``buffers`` on ``device``; returns the host copies afterwards."""
    xp = device.xp
    with device.use():
        on_device = [None if b is None else xp.array(b) for b in buffers]
        rnn_ops._Cells(device, dtype, threads)(kernel, on_device, ints, reals)
        return [None if b is None else (b if isinstance(b, np.ndarray) else b.get()) for b in on_device]


def _compare(got, want, kernel, roles, what, flushed=False):
    for (name, _), g, w in zip(roles, got, want):
        if w is not None:
            _same_bits(g, w, f"{kernel} {name} {what}", flushed)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_cell_kernels_give_the_twins_bits_on_cpu(kernel, variant, dtype, mode):
    rng = np.random.default_rng(sorted(KERNELS).index(kernel) * 10 + VARIANTS.index(variant))
    buffers, ints, reals = _kernel_case(kernel, dtype, variant, rng)
    mode("numpy")
    want = _run_cells(mx.cpu(0), dtype, kernel, buffers, ints, reals)
    mode("compiled")
    got = _run_cells(mx.cpu(0), dtype, kernel, buffers, ints, reals)
    _compare(got, want, kernel, KERNELS[kernel][1], f"{np.dtype(dtype).name} {variant}")
    # the twins leave what they do not write alone, and write what the kernel writes
    inputs = ("xg", "hg", "bias_i", "bias_h", "h_prev", "c_prev", "dy", "dh_rec", "lengths")
    for (name, _), before, after in zip(KERNELS[kernel][1], buffers, want):
        if name in inputs and before is not None:
            _same_bits(after, before, f"{kernel} input {name} unchanged")


def test_rows_past_their_end_are_frozen_and_pass_the_gradient_on(mode):
    """A row with step >= length: the forward copies its states and writes 0 to y; the backward zeroes its gate
    gradients, keeps dc and hands dh_rec + carry on in carry."""
    mode("compiled")
    rng = np.random.default_rng(3)
    buffers, ints, reals = _kernel_case("lstm_forward", np.float32, "lengths", rng, special=False)
    buffers[-1] = np.array([0, 2, 3, 1, 5], np.int32)  # step 2: rows 0, 1 and 3 are past their end
    h_next, c_next, y = _run_cells(mx.cpu(0), np.float32, "lstm_forward", buffers, ints, reals)[6:9]
    frozen = np.array([True, True, False, True, False])
    np.testing.assert_array_equal(h_next[frozen], buffers[4][frozen])
    np.testing.assert_array_equal(c_next[frozen], buffers[5][frozen])
    assert np.all(y[frozen] == 0) and np.all(y[~frozen] == h_next[~frozen])
    buffers, ints, reals = _kernel_case("lstm_backward", np.float32, "lengths", rng, special=False)
    buffers[-1] = np.array([0, 2, 3, 1, 5], np.int32)
    carry, dc, dgates = _run_cells(mx.cpu(0), np.float32, "lstm_backward", buffers, ints, reals)[4:7]
    np.testing.assert_array_equal(carry[frozen], buffers[3][frozen] + buffers[4][frozen])
    np.testing.assert_array_equal(dc[frozen], buffers[5][frozen])
    assert np.all(dgates[frozen] == 0) and np.all(carry[~frozen] == 0)


def _ulps(got, exact, dtype):
    exact = exact.astype(np.longdouble)
    spacing = np.spacing(np.abs(exact.astype(dtype))).astype(np.longdouble)
    return np.max(np.abs(got.astype(np.longdouble) - exact) / spacing)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_sigmoid_and_tanh_are_within_3_ulp(dtype):
    """The twins' (and so the kernels') sigmoid and tanh against long double, over a dense sweep of [-20, 20], tiny
    magnitudes and the saturated ranges; special values as NumPy's functions give them."""
    lowest = float(rnn_ops._EXP[np.dtype(dtype)].lowest)
    x = np.concatenate([np.linspace(-20, 20, 400_001), np.geomspace(1e-30, 20, 20_001),
                        -np.geomspace(1e-30, 20, 20_001), np.linspace(-0.9 * abs(lowest), 0.9 * abs(lowest), 2001)])
    x = x.astype(dtype)
    exact = x.astype(np.longdouble)
    assert _ulps(rnn_ops._tanh(x), np.tanh(exact), dtype) <= 3
    assert _ulps(rnn_ops._sigmoid(x), 1 / (1 + np.exp(-exact)), dtype) <= 3
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype)
    _same_bits(rnn_ops._tanh(special), np.array([np.nan, 1, -1, 0.0, -0.0], dtype), "tanh of special values")
    sig = rnn_ops._sigmoid(special)
    assert np.isnan(sig[0]) and sig[1] == 1 and 0 < sig[2] < 3e-38 and sig[3] == sig[4] == 0.5


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_exp_constants_are_the_kernels(dtype):
    """The twins' exp constants are the values kernels/rnn.cu spells (ln 2's split: k * ln2_hi exact for any k)."""
    c = rnn_ops._EXP[np.dtype(dtype)]
    assert c.poly[0] == 1 and c.poly[3] == dtype(1 / 24)
    assert len(c.poly) == (8 if dtype == np.float32 else 14)
    k = np.arange(-1100, 1100).astype(dtype)
    np.testing.assert_array_equal((k * c.ln2_hi).astype(np.longdouble), k.astype(np.longdouble) * c.ln2_hi)
    assert abs(float(c.ln2_hi) + float(c.ln2_lo) - np.log(2)) < 2e-16 * (2e-9 if dtype == np.float64 else 1e8)
    source = _kernels.kernel_source("rnn.cu")
    for spelled in ("-87.3", "-708.3", "0.693359375", "6.93147180369123816490e-01", "1.90821492927058770002e-10"):
        assert spelled in source


# -- GPUs (emulated where there is none): the kernels with real block sizes against the twins --------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")
GPU_THREADS = [None, 1, 7, 64]  # default (a multiple of 32 sized to H), one thread, odd, several warps


@gpu
@needs_gpu
@pytest.mark.parametrize("threads", GPU_THREADS, ids=str)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_gpu_cell_kernels_give_the_twins_bits(kernel, threads, mode):
    """Emulated GPUs: bit for bit, subnormals included. A real GPU flushes float32 subnormals (CuPy's -ftz=true):
    there the inputs have none, and results the twin has below 2^-126 may be any value that small."""
    from mxlite._emulation import install as emu  # noqa: PLC0415

    real = emu.emulated_gpu_count() == 0
    dtype = {None: np.float32, 1: np.float64, 7: np.float16, 64: np.float32}[threads]
    mode("numpy")
    for variant in VARIANTS:
        rng = np.random.default_rng(VARIANTS.index(variant))
        buffers, ints, reals = _kernel_case(kernel, dtype, variant, rng, subnormals=not real)
        want = _run_cells(mx.cpu(0), dtype, kernel, buffers, ints, reals)
        got = _run_cells(mx.gpu(0), dtype, kernel, buffers, ints, reals, threads)
        _compare(got, want, kernel, KERNELS[kernel][1], f"GPU, {variant}, {threads} threads", flushed=real)


# -- the op against the step-by-step composition -----------------------------------------------------------
def _layer_weights(rng, mode, features, hidden, dirs, layers=1, biases=True, dtype=np.float64):
    """rnn_sequence's per-layer-and-direction (i2h_weight, h2h_weight, i2h_bias, h2h_bias), as arrays."""
    gates = rnn_ops.GATES[mode] * hidden
    out = []
    for layer in range(layers):
        size = features if layer == 0 else dirs * hidden
        for _ in range(dirs):
            w = [rng.standard_normal((gates, size)) * 0.5, rng.standard_normal((gates, hidden)) * 0.5]
            w += [rng.standard_normal(gates) * 0.5 if biases else None, rng.standard_normal(gates) * 0.5 if biases
                  else None]
            out.append([None if a is None else a.astype(dtype) for a in w])
    return out


def _leaves(arrays, device=None):
    tensors = []
    for a in arrays:
        t = None if a is None else mx.array(a, device=device or mx.cpu(0))
        if t is not None:
            t.attach_grad()
        tensors.append(t)
    return tensors


def _fused_sequence(mode, x, states, weights, num_layers, dirs, clip=None):
    """rnn_sequence with each layer and direction run by rnn_ops.recurrence (the wiring _steps will get)."""
    finals = [[] for _ in states]
    layer_in = x
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            begin = [s[layer * dirs + d] for s in states]
            out, last = rnn_ops.recurrence(mode, layer_in, begin, weights[layer * dirs + d], reverse=d == 1, clip=clip)
            outs.append(out)
            for k, s in enumerate(last):
                finals[k].append(s)
        layer_in = outs[0] if dirs == 1 else ops.concat(outs, axis=2)
    return layer_in, [ops.stack(f, axis=0) for f in finals]


def _loss(out, finals, rng_seed=7):
    """A scalar reaching the outputs and every final state with distinct random weights."""
    rng = np.random.default_rng(rng_seed)
    total = (out * mx.array(rng.standard_normal(out.shape), device=out.device, dtype=out.dtype)).sum()
    for f in finals:
        total = total + (f * mx.array(rng.standard_normal(f.shape), device=f.device, dtype=f.dtype)).sum()
    return total


def _run(fused, mode, arrays, num_layers, dirs, clip=None, device=None):
    """Outputs, final states and the gradients of every input of one stacked run (fused or step by step)."""
    x, *rest = _leaves([arrays["x"], *arrays["states"]], device)
    states = rest
    flat = _leaves([w for ws in arrays["weights"] for w in ws], device)
    weights = [tuple(flat[4 * k:4 * k + 4]) for k in range(len(arrays["weights"]))]
    with mx.autograd.record():
        if fused:
            out, finals = _fused_sequence(mode, x, states, weights, num_layers, dirs, clip)
        else:
            out, finals = _steps.rnn_sequence(mode, x, states, weights, num_layers, dirs == 2, clip=clip, fused=False)
        loss = _loss(out, finals)
    loss.backward()
    results = [out.asnumpy()] + [f.asnumpy() for f in finals]
    return results + [t.grad.asnumpy() for t in [x, *states, *flat] if t is not None]


def _problem(rng, mode, length=6, batch=4, features=5, hidden=3, num_layers=1, dirs=1, biases=True,
             dtype=np.float64):
    count = num_layers * dirs
    return {"x": rng.standard_normal((length, batch, features)).astype(dtype),
            "states": [rng.standard_normal((count, batch, hidden)).astype(dtype)
                       for _ in range(rnn_ops.NUM_STATES[mode])],
            "weights": _layer_weights(rng, mode, features, hidden, dirs, num_layers, biases, dtype)}


@pytest.mark.parametrize("biases", [True, False], ids=["biases", "no-biases"])
@pytest.mark.parametrize("mode", MODES)
def test_op_equals_the_step_by_step_composition(mode, biases):
    """Two bidirectional layers (forward and reverse directions, a layer fed by the one below) in float64:
    outputs, final states and every gradient equal rnn_sequence's to 1e-12."""
    rng = np.random.default_rng(MODES.index(mode))
    arrays = _problem(rng, mode, num_layers=2, dirs=2, biases=biases)
    fused = _run(True, mode, arrays, 2, 2)
    steps = _run(False, mode, arrays, 2, 2)
    assert len(fused) == len(steps)
    for k, (a, b) in enumerate(zip(fused, steps)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"result {k}")


def test_clip_equals_the_step_by_step_composition():
    """LSTM with the cell state clipped on both sides, and on one side (values and gradients)."""
    rng = np.random.default_rng(11)
    arrays = _problem(rng, "lstm", length=7, features=4, hidden=4)
    arrays["weights"] = [[w * 4 for w in ws] for ws in arrays["weights"]]  # cell states beyond the bounds
    for clip in [(-0.4, 0.6), (None, 0.5), (-0.3, None)]:
        fused = _run(True, "lstm", arrays, 1, 1, clip)
        steps = _run(False, "lstm", arrays, 1, 1, clip)
        c = fused[2]
        lo, hi = (-np.inf if clip[0] is None else clip[0]), (np.inf if clip[1] is None else clip[1])
        assert np.all((c >= lo) & (c <= hi)) and np.any((c == lo) | (c == hi))  # some state was clipped
        for k, (a, b) in enumerate(zip(fused, steps)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"clip {clip}, result {k}")


def _packed(mode, **kw):
    """A function of tensors (x, weights..., states...) returning outputs and final states as one vector."""
    def fn(x, wi, wh, bi, bh, *states):
        out, finals = rnn_ops.recurrence(mode, x, list(states), (wi, wh, bi, bh), **kw)
        return ops.concat([ops.reshape(out, (-1,))] + [ops.reshape(f, (-1,)) for f in finals], axis=0)
    return fn


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("mode", MODES)
def test_op_gradients_match_finite_differences(mode, reverse):
    rng = np.random.default_rng(20 + MODES.index(mode))
    arrays = _problem(rng, mode, length=4, batch=3, features=3, hidden=2)
    inputs = [arrays["x"], *arrays["weights"][0], *(s[0] for s in arrays["states"])]
    check_grad(_packed(mode, reverse=reverse), inputs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_gradients_with_lengths_and_clip_match_finite_differences(mode):
    rng = np.random.default_rng(30)
    arrays = _problem(rng, mode, length=4, batch=3, features=3, hidden=2)
    inputs = [arrays["x"], *arrays["weights"][0], *(s[0] for s in arrays["states"])]
    lengths = np.array([4, 1, 2])
    clip = (-0.5, 0.5) if mode == "lstm" else None
    for reverse in (False, True):
        check_grad(_packed(mode, reverse=reverse, valid_length=lengths, clip=clip), inputs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("mode", MODES)
def test_valid_length_equals_each_sample_run_alone(mode, reverse):
    """MXNet's use_sequence_length: each sample gives what it gives alone on its first L steps (the reverse
    direction from step L-1 back to 0), zeros after; its final state is the state after its last valid step."""
    rng = np.random.default_rng(40 + MODES.index(mode))
    arrays = _problem(rng, mode, length=6, batch=5, features=3, hidden=3)
    lengths = np.array([6, 1, 3, 0, 4])
    weights_np = arrays["weights"][0]
    x, *states = _leaves([arrays["x"], *(s[0] for s in arrays["states"])])
    weights = tuple(_leaves(weights_np))
    with mx.autograd.record():
        out, finals = rnn_ops.recurrence(mode, x, states, weights, reverse=reverse,
                                         valid_length=mx.array(lengths.astype(np.float32)))
        loss = _loss(out, finals)
    loss.backward()
    got_grads = [t.grad.asnumpy() for t in [x, *states, *weights]]
    # reference: sample by sample, its valid steps only, step by step
    x2, *states2 = _leaves([arrays["x"], *(s[0] for s in arrays["states"])])
    weights2 = tuple(_leaves(weights_np))
    rng_loss = np.random.default_rng(7)
    head_out = rng_loss.standard_normal(out.shape)
    head_finals = [rng_loss.standard_normal(f.shape) for f in finals]
    want_out = np.zeros(out.shape)
    want_finals = [np.zeros(f.shape) for f in finals]
    with mx.autograd.record():
        total = None
        for b, n in enumerate(lengths):
            begin = [ops.getitem(s, slice(b, b + 1)) for s in states2]
            if n == 0:
                seq_out, last = None, begin
            else:
                xb = ops.getitem(x2, (slice(0, n), slice(b, b + 1)))
                steps = [ops.reshape(s, (1, -1)) for s in
                         ops.split(mx.nn_ops.fully_connected(xb, weights2[0], weights2[2], flatten=False),
                                   int(n), axis=0)]
                seq, last = _steps._run_direction(mode, steps, begin, weights2[1], weights2[3], reverse,
                                                  None)
                seq_out = ops.stack(seq, axis=0)
                want_out[:n, b] = seq_out.asnumpy()[:, 0]
                term = (seq_out * mx.array(head_out[:n, b:b + 1])).sum()
                total = term if total is None else total + term
            for k, s in enumerate(last):
                want_finals[k][b] = s.asnumpy()[0]
                term = (s * mx.array(head_finals[k][b:b + 1])).sum()
                total = term if total is None else total + term
    total.backward()
    np.testing.assert_allclose(out.asnumpy(), want_out, rtol=1e-12, atol=1e-12)
    for f, w in zip(finals, want_finals):
        np.testing.assert_allclose(f.asnumpy(), w, rtol=1e-12, atol=1e-12)
    want_grads = [t.grad.asnumpy() for t in [x2, *states2, *weights2]]
    for k, (a, b) in enumerate(zip(got_grads, want_grads)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"gradient {k}")


@pytest.mark.parametrize("mode_name", ["lstm", "gru", "rnn_relu"])
def test_op_gives_the_same_bits_compiled_and_with_the_twins(mode_name, mode):
    """The whole op, forward and backward, in float32 (with lengths and reverse): the host build of the kernels
    and the NumPy twins give the same bits (the GEMMs are the same calls)."""
    rng = np.random.default_rng(50)
    arrays = _problem(rng, mode_name, length=5, batch=4, features=6, hidden=7, dtype=np.float32)
    lengths = np.array([5, 2, 0, 3])
    results = {}
    for m in ("numpy", "compiled"):
        mode(m)
        got = []
        for reverse, valid in ((False, None), (True, None), (True, lengths)):
            x, *states = _leaves([arrays["x"], *(s[0] for s in arrays["states"])])
            weights = tuple(_leaves(arrays["weights"][0]))
            with mx.autograd.record():
                out, finals = rnn_ops.recurrence(mode_name, x, states, weights, reverse=reverse, valid_length=valid)
                loss = _loss(out, finals)
            loss.backward()
            got += [out.asnumpy(), *(f.asnumpy() for f in finals), *(t.grad.asnumpy() for t in [x, *states, *weights])]
        results[m] = got
    for k, (a, b) in enumerate(zip(results["compiled"], results["numpy"])):
        _same_bits(a, b, f"result {k}")


def test_float16_follows_float32():
    """float16 storage, float32 math: within float16 rounding of the float32 op."""
    rng = np.random.default_rng(60)
    arrays = _problem(rng, "lstm", length=5, batch=3, features=4, hidden=6, dtype=np.float32)
    half = {"x": arrays["x"].astype(np.float16), "states": [s.astype(np.float16) for s in arrays["states"]],
            "weights": [[w.astype(np.float16) for w in ws] for ws in arrays["weights"]]}
    want = _run(True, "lstm", {**arrays, "weights": [[w.astype(np.float16).astype(np.float32) for w in ws]
                                                     for ws in arrays["weights"]],
                               "x": half["x"].astype(np.float32),
                               "states": [s.astype(np.float32) for s in half["states"]]}, 1, 1)
    got = _run(True, "lstm", half, 1, 1)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b, rtol=2e-2, atol=3e-2 * max(1.0, np.abs(b).max()),
                                   err_msg=f"result {k}")


def test_gradients_reach_the_inputs_through_any_subset_of_the_outputs():
    """Only the outputs, only the final h, only the final c, or all: each gives the gradient of that part alone;
    retain_graph lets a second backward through another part run."""
    rng = np.random.default_rng(70)
    arrays = _problem(rng, "lstm", length=4, batch=2, features=3, hidden=2)
    x, h0, c0 = _leaves([arrays["x"], arrays["states"][0][0], arrays["states"][1][0]])
    weights = tuple(_leaves(arrays["weights"][0]))
    with mx.autograd.record():
        out, (h, c) = rnn_ops.recurrence("lstm", x, [h0, c0], weights)
        parts = {"out": out.sum(), "h": (h * 2).sum(), "c": (c * 3).sum()}
    grads = {}
    for name, head in parts.items():
        head.backward(retain_graph=True)
        grads[name] = [t.grad.asnumpy().copy() for t in (x, h0, c0, *weights)]
    with mx.autograd.record():
        out, (h, c) = rnn_ops.recurrence("lstm", x, [h0, c0], weights)
        total = out.sum() + (h * 2).sum() + (c * 3).sum()
    total.backward()
    for k, t in enumerate((x, h0, c0, *weights)):
        np.testing.assert_allclose(t.grad.asnumpy(), sum(grads[n][k] for n in parts), rtol=1e-12, atol=1e-12)
    for name in parts:  # each part alone reaches every input
        assert all(np.any(g != 0) for g in grads[name]), name


def test_inference_records_nothing_and_saves_nothing():
    rng = np.random.default_rng(80)
    arrays = _problem(rng, "gru", length=4, batch=2, features=3, hidden=2)
    x = mx.array(arrays["x"])
    weights = tuple(mx.array(w) for w in arrays["weights"][0])
    out, (h,) = rnn_ops.recurrence("gru", x, [mx.array(arrays["states"][0][0])], weights)
    assert out._node is None and h._node is None
    np.testing.assert_array_equal(h.asnumpy(), out.asnumpy()[-1])
    out_r, (h_r,) = rnn_ops.recurrence("gru", x, [mx.array(arrays["states"][0][0])], weights, reverse=True)
    np.testing.assert_array_equal(h_r.asnumpy(), out_r.asnumpy()[0])


def test_errors_name_the_argument():
    rng = np.random.default_rng(90)
    arrays = _problem(rng, "lstm", length=3, batch=2, features=3, hidden=2)
    x = mx.array(arrays["x"])
    states = [mx.array(s[0]) for s in arrays["states"]]
    weights = tuple(mx.array(w) for w in arrays["weights"][0])
    with pytest.raises(ValueError, match="mode must be one of"):
        rnn_ops.recurrence("lstmp", x, states, weights)
    with pytest.raises(ValueError, match="takes 2 begin state"):
        rnn_ops.recurrence("lstm", x, states[:1], weights)
    with pytest.raises(ValueError, match=r"i2h_weight has shape \(8, 3\), expected \(8, 4\)"):
        rnn_ops.recurrence("lstm", mx.array(np.zeros((3, 2, 4))), states, weights)
    with pytest.raises(ValueError, match=r"states\[1\] has shape"):
        rnn_ops.recurrence("lstm", x, [states[0], mx.array(np.zeros((3, 2)))], weights)
    with pytest.raises(ValueError, match="h2h_weight is float32 but x is float64"):
        rnn_ops.recurrence("lstm", x, states, (weights[0], weights[1].astype("float32"), *weights[2:]))
    with pytest.raises(ValueError, match="clip bounds the LSTM cell state"):
        gru = tuple(mx.array(w) for w in _layer_weights(rng, "gru", 3, 2, 1)[0])
        rnn_ops.recurrence("gru", x, states[:1], gru, clip=(-1, 1))
    with pytest.raises(ValueError, match=r"valid_length must hold integers in \[0, 3\]"):
        rnn_ops.recurrence("lstm", x, states, weights, valid_length=[1, 4])
    with pytest.raises(ValueError, match=r"valid_length must be \(2,\)"):
        rnn_ops.recurrence("lstm", x, states, weights, valid_length=[1, 2, 3])
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        ints = [mx.array(np.zeros(s.shape, np.int32)) for s in (arrays["x"], *(w for w in arrays["weights"][0]))]
        rnn_ops.recurrence("lstm", ints[0], [mx.array(np.zeros((2, 2), np.int32))] * 2, tuple(ints[1:]))


def test_an_empty_sequence_returns_the_begin_states():
    rng = np.random.default_rng(95)
    arrays = _problem(rng, "lstm", length=0, batch=2, features=3, hidden=2)
    x, h0, c0 = _leaves([arrays["x"], arrays["states"][0][0], arrays["states"][1][0]])
    with mx.autograd.record():
        out, (h, c) = rnn_ops.recurrence("lstm", x, [h0, c0], tuple(_leaves(arrays["weights"][0])))
        loss = (h * 2).sum() + c.sum()
    loss.backward()
    assert out.shape == (0, 2, 2)
    np.testing.assert_array_equal(h.asnumpy(), arrays["states"][0][0])
    np.testing.assert_array_equal(h0.grad.asnumpy(), np.full((2, 2), 2.0))


@gpu
@needs_gpu
@pytest.mark.parametrize("mode_name", ["lstm", "gru", "rnn_tanh"])
def test_op_on_a_gpu_equals_the_cpu_and_launches_two_kernels_per_step(mode_name):
    """On a GPU: the CPU device's results (float32; to cuBLAS's rounding on a real GPU), and per time step one
    forward and one backward cell launch, with no host synchronisation or host-to-device copy in the loops."""
    from mxlite._emulation import install as emu  # noqa: PLC0415 - counters exist on emulated GPUs only

    rng = np.random.default_rng(100)
    length = 6
    arrays = _problem(rng, mode_name, length=length, batch=4, features=5, hidden=7, dtype=np.float32)
    lengths = np.array([6, 2, 0, 5])
    results = {}
    for device in (mx.cpu(0), mx.gpu(0)):
        got = []
        for reverse, valid in ((False, None), (True, None), (True, lengths)):
            x, *states = _leaves([arrays["x"], *(s[0] for s in arrays["states"])], device)
            weights = tuple(_leaves(arrays["weights"][0], device))
            valid_t = None if valid is None else mx.array(valid, device=device)
            shapes = [(length, 4, 7)] + [(4, 7)] * len(states)
            head_grads = [mx.array(np.ones(shape, np.float32), device=device) for shape in shapes]
            counting = device.is_gpu and valid is None and emu.emulated_gpu_count()
            if counting:
                emu.reset_counters()
            with mx.autograd.record():
                out, finals = rnn_ops.recurrence(mode_name, x, states, weights, reverse=reverse, valid_length=valid_t)
            mx.autograd.backward([out, *finals], head_grads)
            if counting:
                counts = emu.counters()[0]
                kind = mode_name.split("_")[0]
                assert counts["kernel_launches"].get(f"{kind}_forward<float>") == length
                assert counts["kernel_launches"].get(f"{kind}_backward<float>") == length
                assert counts["host_syncs"] == 0 and counts["d2h_copies"] == 0 and counts["h2d_copies"] == 0
            got += [out.asnumpy(), *(f.asnumpy() for f in finals), *(t.grad.asnumpy() for t in [x, *states, *weights])]
        results[device.is_gpu] = got
    for k, (a, b) in enumerate(zip(results[True], results[False])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"result {k}")


def test_bench_rnn_runs_at_toy_sizes_and_writes_its_json(tmp_path, capsys):
    """benchmarks/bench_rnn.py end to end in this process at toy sizes (no timings asserted)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_rnn", os.path.join(root, "benchmarks", "bench_rnn.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rnn.json"
    assert bench.main(["--threads", "0", "--repeat", "1", "--length", "3", "--batch", "2", "--hidden", "4",
                       "--features", "5,6", "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [(r["cell"], r["features"]) for r in records] == [("lstm", 5), ("lstm", 6), ("gru", 5), ("gru", 6)]
    assert all(r["fused_ms"] > 0 and r["twins_ms"] > 0 and r["steps_ms"] > 0 for r in records)
    assert "fused_vs_steps" in capsys.readouterr().out


def test_scratch_buffers_are_reused_only_once_the_graph_lets_go():
    """CPU devices keep the large temporaries (projection, saved gates, cell states, gate gradients) for the next
    call; a graph kept with retain_graph keeps its own: another call in between does not change its gradients."""
    rng = np.random.default_rng(110)
    first = _problem(rng, "lstm", length=5, batch=3, features=4, hidden=6)
    other = _problem(rng, "lstm", length=5, batch=3, features=4, hidden=6)

    def call(arrays):
        x, h0, c0 = _leaves([arrays["x"], arrays["states"][0][0], arrays["states"][1][0]])
        weights = tuple(_leaves(arrays["weights"][0]))
        with mx.autograd.record():
            out, (h, c) = rnn_ops.recurrence("lstm", x, [h0, c0], weights)
            loss = _loss(out, [h, c])
        return loss, (x, h0, c0, *weights)

    loss, leaves = call(first)
    loss.backward(retain_graph=True)
    want = [t.grad.asnumpy().copy() for t in leaves]
    for _ in range(2):  # other calls in between take (and give back) spare buffers of the same shapes
        other_loss, _ = call(other)
        other_loss.backward()
    loss.backward()
    for k, t in enumerate(leaves):
        _same_bits(t.grad.asnumpy(), want[k], f"gradient {k} after other calls")
    shapes = {(a.shape, a.dtype) for a in rnn_ops._SPARES._free}
    assert ((5, 3, 24), np.dtype(np.float64)) in shapes and ((6, 3, 6), np.dtype(np.float64)) in shapes

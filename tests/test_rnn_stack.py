"""A stack of unidirectional recurrent layers as one op (mxlite.ops.rnn_stack), its layers on host threads.

The stack must give the same bits on one thread and on several, and equal :func:`rnn_ops.recurrence` called
layer by layer up to rounding (outputs, final states and every gradient), for every mode, with and without
sequence lengths, clip, biases and dropout between the layers; a bidirectional layer's two directions as one
op must give the bits of two ``recurrence`` calls; ``rnn_sequence`` must use it where it applies (CPU, two or more
unidirectional layers) and only there; bad shapes are named by layer.
"""

from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.gluon.rnn import _steps
from mxlite.ops import nn_ops, rnn_ops, rnn_stack
from tests.test_rnn_kernels import MODES, _layer_weights, _leaves, _loss, _same_bits

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


def _problem(rng, mode, layers, length=9, batch=4, features=5, hidden=6, biases=True, dtype=np.float64):
    return {"x": rng.standard_normal((length, batch, features)).astype(dtype),
            "states": [rng.standard_normal((layers, batch, hidden)).astype(dtype)
                       for _ in range(rnn_ops.NUM_STATES[mode])],
            "weights": _layer_weights(rng, mode, features, hidden, 1, layers, biases, dtype)}


def _run(stacked, mode, arrays, clip=None, lengths=None, device=None, dropout=0.0):
    """Outputs, final states and every leaf's gradient of a stack run as one op or layer by layer (with
    ``dropout`` > 0: between the layers, the random stream seeded alike)."""
    mx.random.seed(11)
    x, *states = _leaves([arrays["x"], *arrays["states"]], device)
    flat = _leaves([w for ws in arrays["weights"] for w in ws], device)
    weights = [tuple(flat[4 * k:4 * k + 4]) for k in range(len(arrays["weights"]))]
    valid = None if lengths is None else mx.array(lengths, device=device or mx.cpu(0))
    with mx.autograd.record():
        if stacked:
            out, finals = rnn_stack.stack_recurrence(mode, x, states, weights, clip=clip, valid_length=valid,
                                                     dropout=dropout)
        else:
            layer_in, per_layer = x, [[] for _ in states]
            for layer, w in enumerate(weights):
                if layer and dropout:
                    layer_in = nn_ops.dropout(layer_in, dropout, training=True)
                layer_in, last = rnn_ops.recurrence(mode, layer_in, [s[layer] for s in states], w, clip=clip,
                                                    valid_length=valid)
                for k, s in enumerate(last):
                    per_layer[k].append(s)
            out, finals = layer_in, [ops.stack(f, axis=0) for f in per_layer]
        loss = _loss(out, finals)
    loss.backward()
    return [out.asnumpy(), *(f.asnumpy() for f in finals)] + [
        t.grad.asnumpy() for t in [x, *states, *flat] if t is not None]


TOLERANCE = {np.float32: {"rtol": 1e-4, "atol": 1e-5}, np.float64: {"rtol": 1e-10, "atol": 1e-12}}


def _close_to_layers(got: np.ndarray, want: np.ndarray, dtype: type, what: str) -> None:
    """Equal up to float rounding, measured against the result's scale: a gradient summed through the steps
    carries its largest terms' rounding, which an element far smaller than them shows as a large relative error
    (a BLAS rounding a chunk's projection differently from the whole sequence's: OpenBLAS's Haswell kernels)."""
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=max(tol["atol"], tol["rtol"] * scale), err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("mode,variant", [(m, v) for m in MODES for v in ("plain", "lengths", "no-biases", "dropout")]
                         + [("lstm", "clip")])
def test_the_stack_gives_the_same_bits_on_1_2_and_3_threads_and_equals_its_layers_one_by_one(mode, variant, dtype,
                                                                                             thread_count):
    """Same bits on any thread count; against the layers run one by one, equal up to rounding (a chunk's
    projection is a GEMM over fewer rows, which the BLAS may round differently in the last bit)."""
    rng = np.random.default_rng(zlib.crc32(f"{mode} {variant}".encode()))
    arrays = _problem(rng, mode, layers=3, features=24, hidden=20, biases=variant != "no-biases", dtype=dtype)
    lengths = np.array([9, 3, 0, 6]) if variant == "lengths" else None
    clip = (-0.4, 0.5) if variant == "clip" else None
    dropout = 0.3 if variant == "dropout" else 0.0
    want = _run(False, mode, arrays, clip, lengths, dropout=dropout)
    results = {}
    for count in (1, 2, 3):
        thread_count(count)
        results[count] = _run(True, mode, arrays, clip, lengths, dropout=dropout)
        assert len(results[count]) == len(want)
        for k, (g, w) in enumerate(zip(results[count], want)):
            _close_to_layers(g, w, dtype, f"result {k} on {count} thread(s)")
    for count in (2, 3):
        for k, (g, w) in enumerate(zip(results[count], results[1])):
            _same_bits(g, w, f"result {k}: {count} threads against 1")


def test_two_layers_run_side_by_side_on_two_threads(thread_count, monkeypatch):
    """Layer 1's first chunk and layer 0's second chunk are ready together: on two threads they run at once
    (each waits for the other at a barrier, which fails after 10 s if they ran one after the other)."""
    thread_count(2)
    rng = np.random.default_rng(12)
    arrays = _problem(rng, "gru", layers=2, length=8, features=5, hidden=6)
    second = rnn_stack._chunks(8)[1][0]
    meet = threading.Barrier(2, timeout=10)
    original = rnn_ops._Layer.run

    def run(layer, s0, s1):
        if (layer.features == 6 and s0 == 0) or (layer.features == 5 and s0 == second):  # layer 1 / layer 0
            meet.wait()
        original(layer, s0, s1)

    monkeypatch.setattr(rnn_ops._Layer, "run", run)
    x, h = (mx.array(a) for a in (arrays["x"], arrays["states"][0]))
    weights = [tuple(mx.array(a) for a in w) for w in arrays["weights"]]
    out, _ = rnn_stack.stack_recurrence("gru", x, [h], weights)
    assert out.shape == (8, 4, 6)


def test_the_stack_equals_the_step_by_step_composition():
    rng = np.random.default_rng(3)
    arrays = _problem(rng, "lstm", layers=2, length=7)
    got = _run(True, "lstm", arrays)
    x, *states = _leaves([arrays["x"], *arrays["states"]])
    flat = _leaves([w for ws in arrays["weights"] for w in ws])
    weights = [tuple(flat[4 * k:4 * k + 4]) for k in range(2)]
    with mx.autograd.record():
        out, finals = _steps.rnn_sequence("lstm", x, states, weights, 2, False, fused=False)
        loss = _loss(out, finals)
    loss.backward()
    want = [out.asnumpy(), *(f.asnumpy() for f in finals)] + [t.grad.asnumpy() for t in [x, *states, *flat]]
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"result {k}")


@pytest.mark.parametrize("length", [0, 1, 2, 8, 9, 17])
def test_chunks_cover_the_sequence_by_its_length_alone(length):
    chunks = rnn_stack._chunks(length)
    assert [t for t0, t1 in chunks for t in range(t0, t1)] == list(range(length))
    assert len(chunks) <= rnn_stack._CHUNKS
    assert len({t1 - t0 for t0, t1 in chunks[:-1]}) <= 1


def test_gradients_reach_the_inputs_through_one_final_state_alone():
    rng = np.random.default_rng(4)
    arrays = _problem(rng, "gru", layers=2)
    x, h = _leaves([arrays["x"], arrays["states"][0]])
    flat = _leaves([w for ws in arrays["weights"] for w in ws])
    weights = [tuple(flat[4 * k:4 * k + 4]) for k in range(2)]
    with mx.autograd.record():
        _, (h_last,) = rnn_stack.stack_recurrence("gru", x, [h], weights)
        loss = (h_last[0] * h_last[0]).sum()  # the first layer's final state only
    loss.backward()
    assert np.abs(x.grad.asnumpy()).sum() > 0 and np.abs(flat[0].grad.asnumpy()).sum() > 0
    np.testing.assert_array_equal(flat[4].grad.asnumpy(), 0)  # the second layer does not reach the loss
    np.testing.assert_array_equal(h.grad.asnumpy()[1], 0)


def test_inference_records_nothing():
    rng = np.random.default_rng(5)
    arrays = _problem(rng, "lstm", layers=2)
    x, *states = _leaves([arrays["x"], *arrays["states"]])  # leaves wanting gradients, but no record()
    weights = [tuple(_leaves(w)) for w in arrays["weights"]]
    out, finals = rnn_stack.stack_recurrence("lstm", x, states, weights)
    assert out.shape == (9, 4, 6) and [f.shape for f in finals] == [(2, 4, 6)] * 2
    assert out._node is None and all(f._node is None for f in finals)
    np.testing.assert_array_equal(out.asnumpy()[-1], finals[0].asnumpy()[1])


def test_errors_name_the_layer_and_the_tensor():
    rng = np.random.default_rng(6)
    arrays = _problem(rng, "lstm", layers=2)
    x, *states = (mx.array(a) for a in [arrays["x"], *arrays["states"]])
    weights = [tuple(None if a is None else mx.array(a) for a in w) for w in arrays["weights"]]
    bad = list(weights)
    bad[1] = (mx.array(np.zeros((24, 5))), *weights[1][1:])  # layer 1 takes H = 6 features, not 5
    with pytest.raises(ValueError, match=r"layer 1: i2h_weight has shape \(24, 5\)"):
        rnn_stack.stack_recurrence("lstm", x, states, bad)
    with pytest.raises(ValueError, match=r"states\[0\] has shape \(3, 4, 6\), expected \(2, N, H\)"):
        rnn_stack.stack_recurrence("lstm", x, [mx.array(np.zeros((3, 4, 6))), states[1]], weights)
    with pytest.raises(ValueError, match="mode must be one of"):
        rnn_stack.stack_recurrence("lstn", x, states, weights)
    with pytest.raises(ValueError, match="clip bounds the LSTM cell state"):
        rnn_stack.stack_recurrence("gru", x, states[:1], [(w[0][:18], w[1][:18], None, None) for w in weights],
                                   clip=(-1, 1))
    with pytest.raises(ValueError, match="at least one layer"):
        rnn_stack.stack_recurrence("lstm", x, states, [])
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\], got 1.5"):
        rnn_stack.stack_recurrence("lstm", x, states, weights, dropout=1.5)


@pytest.mark.parametrize("layers,bidirectional,dropout,expected", [
    (2, False, 0.0, ["_stack"]), (3, False, 0.5, ["_stack"]), (1, False, 0.0, ["_recurrence"]),
    (2, True, 0.0, ["_bidirectional"] * 2), (1, True, 0.0, ["_bidirectional"])])
def test_rnn_sequence_runs_stacks_and_direction_pairs_as_one_node_on_cpu(layers, bidirectional, dropout, expected,
                                                                         monkeypatch):
    calls = []
    for module, name in ((rnn_stack, "_stack"), (rnn_stack, "_bidirectional"), (rnn_ops, "_recurrence")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _name=name, _f=original, **k: calls.append(_name) or _f(*a, **k))
    layer = mx.rnn.LSTM(6, num_layers=layers, bidirectional=bidirectional, dropout=dropout, input_size=5)
    layer.initialize(mx.init.Uniform(0.1), device=mx.cpu(0))
    layer(mx.array(np.ones((4, 3, 5), np.float32)))
    assert calls == expected


@pytest.mark.parametrize("training", [True, False], ids=["training", "predicting"])
def test_a_layer_with_dropout_drops_between_its_layers_only_while_training(training):
    rng = np.random.default_rng(8)
    layer = mx.rnn.GRU(6, num_layers=3, dropout=0.5, input_size=5)
    layer.initialize(mx.init.Uniform(0.5), device=mx.cpu(0))
    x = mx.array(rng.standard_normal((7, 3, 5)).astype(np.float32))
    weights = [tuple(getattr(layer, f"l{i}_{name}").data() for name in ("i2h_weight", "h2h_weight", "i2h_bias",
                                                                        "h2h_bias")) for i in range(3)]
    state = mx.array(np.zeros((3, 3, 6), np.float32))
    results = []
    for stacked in (True, False):
        mx.random.seed(12)
        with mx.autograd.record(train_mode=training):
            if stacked:
                out, _ = layer(x, [state])
            else:
                layer_in = x
                for i, w in enumerate(weights):
                    if i and training:
                        layer_in = nn_ops.dropout(layer_in, 0.5, training=True)
                    layer_in, _ = rnn_ops.recurrence("gru", layer_in, [state[i]], w)
                out = layer_in
        results.append(out.asnumpy())
    _same_bits(results[0], results[1], "outputs")


@gpu
@needs_gpu
def test_the_stack_on_a_gpu_equals_its_layers_one_by_one():
    rng = np.random.default_rng(7)
    arrays = _problem(rng, "lstm", layers=2, dtype=np.float32)
    want = _run(False, "lstm", arrays, device=mx.gpu(0))
    got = _run(True, "lstm", arrays, device=mx.gpu(0))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"result {k}")


# -- bidirectional_recurrence -----------------------------------------------------------------------------
def _run_pair(paired, mode, arrays, clip=None, lengths=None, device=None):
    """One bidirectional layer as one op or as two recurrence calls and a concat: outputs, finals, gradients."""
    x, *states = _leaves([arrays["x"], *arrays["states"]], device)
    flat = _leaves([w for ws in arrays["weights"] for w in ws], device)
    weights = [tuple(flat[4 * k:4 * k + 4]) for k in range(2)]
    valid = None if lengths is None else mx.array(lengths, device=device or mx.cpu(0))
    with mx.autograd.record():
        if paired:
            out, finals = rnn_stack.bidirectional_recurrence(mode, x, states, weights, clip=clip, valid_length=valid)
        else:
            outs, per_state = [], [[] for _ in states]
            for d in (0, 1):
                o, last = rnn_ops.recurrence(mode, x, [s[d] for s in states], weights[d], reverse=d == 1, clip=clip,
                                             valid_length=valid)
                outs.append(o)
                for k, f in enumerate(last):
                    per_state[k].append(f)
            out, finals = ops.concat(outs, axis=2), [ops.stack(f, axis=0) for f in per_state]
        loss = _loss(out, finals)
    loss.backward()
    return [out.asnumpy(), *(f.asnumpy() for f in finals)] + [
        t.grad.asnumpy() for t in [x, *states, *flat] if t is not None]


def _pair_problem(rng, mode, biases=True, dtype=np.float64, length=7, batch=4, features=24, hidden=20):
    return {"x": rng.standard_normal((length, batch, features)).astype(dtype),
            "states": [rng.standard_normal((2, batch, hidden)).astype(dtype) for _ in range(rnn_ops.NUM_STATES[mode])],
            "weights": _layer_weights(rng, mode, features, hidden, 2, 1, biases, dtype)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("mode,variant", [(m, v) for m in MODES for v in ("plain", "lengths", "no-biases")]
                         + [("lstm", "clip")])
def test_a_direction_pair_gives_the_bits_of_two_recurrences_on_1_2_and_3_threads(mode, variant, dtype, thread_count):
    rng = np.random.default_rng(zlib.crc32(f"pair {mode} {variant}".encode()))
    arrays = _pair_problem(rng, mode, biases=variant != "no-biases", dtype=dtype)
    lengths = np.array([7, 2, 0, 5]) if variant == "lengths" else None
    clip = (-0.4, 0.5) if variant == "clip" else None
    want = _run_pair(False, mode, arrays, clip, lengths)
    for count in (1, 2, 3):
        thread_count(count)
        got = _run_pair(True, mode, arrays, clip, lengths)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            _same_bits(g, w, f"result {k} on {count} thread(s)")


def test_a_direction_pair_names_the_direction_in_errors():
    rng = np.random.default_rng(9)
    arrays = _pair_problem(rng, "gru", features=5, hidden=6)
    x, *states = (mx.array(a) for a in [arrays["x"], *arrays["states"]])
    weights = [tuple(None if a is None else mx.array(a) for a in w) for w in arrays["weights"]]
    with pytest.raises(ValueError, match=r"reverse direction: h2h_weight has shape \(18, 5\)"):
        rnn_stack.bidirectional_recurrence("gru", x, states, [weights[0], (weights[1][0], weights[1][1][:, :5], None,
                                                                           None)])
    with pytest.raises(ValueError, match=r"states\[0\] has shape \(3, 4, 6\), expected \(2, N, H\)"):
        rnn_stack.bidirectional_recurrence("gru", x, [mx.array(np.zeros((3, 4, 6)))], weights)
    with pytest.raises(ValueError, match="weights must be \\[forwards, reverse\\]"):
        rnn_stack.bidirectional_recurrence("gru", x, states, weights[:1])


@gpu
@needs_gpu
def test_a_direction_pair_on_a_gpu_equals_two_recurrences():
    rng = np.random.default_rng(10)
    arrays = _pair_problem(rng, "lstm", dtype=np.float32)
    want = _run_pair(False, "lstm", arrays, device=mx.gpu(0))
    got = _run_pair(True, "lstm", arrays, device=mx.gpu(0))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"result {k}")


def test_tasks_refuse_to_wait_for_a_task_that_does_not_exist():
    tasks = rnn_stack._Tasks()
    tasks.add(("run", 0, 0), lambda: None)
    tasks.add(("run", 0, 1), lambda: None, ("run", 0, 0), None)
    assert tasks.after == [[], [0]]
    with pytest.raises(KeyError, match=r"waits for \('run', 1, 0\)"):
        tasks.add(("run", 1, 1), lambda: None, ("run", 1, 0))


@pytest.mark.parametrize("bidirectional", [False, True], ids=["stack", "pair"])
def test_a_layer_at_training_sizes_gives_the_same_bits_on_1_and_2_threads(bidirectional, thread_count):
    """Word-LM-like sizes (the products and cell steps of a real step) through the Gluon layer, with lengths."""
    rng = np.random.default_rng(13)
    layer = mx.rnn.LSTM(128, num_layers=2, bidirectional=bidirectional, input_size=64, use_sequence_length=True)
    layer.initialize(mx.init.Uniform(0.1), device=mx.cpu(0))
    x_np = rng.standard_normal((12, 64, 64)).astype(np.float32)
    lengths = rng.integers(0, 13, 64)
    results = {}
    for count in (1, 2):
        thread_count(count)
        x = mx.array(x_np)
        x.attach_grad()
        with mx.autograd.record():
            out, finals = layer(x, layer.begin_state(64), mx.array(lengths))
            loss = (out * out).sum() + sum((f * f).sum() for f in finals)
        loss.backward()
        results[count] = [out.asnumpy(), *(f.asnumpy() for f in finals), x.grad.asnumpy()] + [
            p.grad().asnumpy() for p in layer.collect_params().values()]
    for k, (a, b) in enumerate(zip(results[2], results[1])):
        _same_bits(a, b, f"result {k}: 2 threads against 1")

"""gluon.rnn layers on the fused recurrence: the composed reference's numbers, sequence lengths, dropout, states.

The layers run each layer and direction as one :func:`mxlite.ops.rnn_ops.recurrence`; the
step-by-step composition (``_steps.rnn_sequence(fused=False)``) is the reference: equal to 1e-12 in
float64, outputs, final states and every gradient. ``use_sequence_length``: each sample gives what it
gives alone on its first L steps (zeros after), final states after its last valid step, in every
layer and both directions.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon import rnn
from mxlite.gluon.rnn import _steps
from mxlite.ops import rnn_ops, rnn_stack

CLASSES = [(rnn.LSTM, "lstm"), (rnn.GRU, "gru"), (rnn.RNN, "rnn_relu")]


def _layer(cls, hidden, layers, bidirectional, **kwargs):
    layer = cls(hidden, num_layers=layers, bidirectional=bidirectional, input_size=5, dtype=np.float64, **kwargs)
    layer.initialize(mx.init.Uniform(0.5), device=mx.cpu(0))
    return layer


def _weights(layer):
    return [tuple(getattr(layer, n).data() for n in names) for names in layer._names]


@pytest.mark.parametrize("cls,mode", CLASSES)
def test_a_layer_gives_the_composed_steps_numbers_and_gradients(cls, mode):
    rng = np.random.default_rng(1)
    layer = _layer(cls, 4, 2, True)
    x_np = rng.standard_normal((5, 3, 5))
    states_np = [rng.standard_normal(s["shape"]) * 0.5 for s in layer.state_info(3)]
    params = list(layer.collect_params().values())

    def run(fused):
        x = mx.array(x_np)
        x.attach_grad()
        states = [mx.array(s) for s in states_np]
        for s in states:
            s.attach_grad()
        for p in params:
            p.zero_grad()
        with mx.autograd.record():
            if fused:
                out, finals = layer(x, states)
            else:
                out, finals = _steps.rnn_sequence(mode, x, states, _weights(layer), 2, True, fused=False)
            loss = (out * out).sum() + sum((f * f * 0.5).sum() for f in finals)
        loss.backward()
        return [out.asnumpy(), *(f.asnumpy() for f in finals), x.grad.asnumpy(), *(s.grad.asnumpy() for s in states),
                *(p.grad().asnumpy() for p in params)]

    for got, want in zip(run(True), run(False), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_bidirectional_layer_runs_one_node_per_layer_on_cpu(monkeypatch):
    """On CPU devices both directions of a layer are one node (rnn_stack.bidirectional_recurrence)."""
    layer = _layer(rnn.LSTM, 4, 2, True)
    seen = []
    for module, name in ((rnn_ops, "_recurrence"), (rnn_stack, "_bidirectional")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _name=name, _f=original, **k: seen.append((_name, a[0])) or
                            _f(*a, **k))
    layer(mx.array(np.zeros((3, 2, 5))))
    assert seen == [("_bidirectional", "lstm")] * 2


@pytest.mark.parametrize("cls,mode", CLASSES)
@pytest.mark.parametrize("layout", ["TNC", "NTC"])
def test_use_sequence_length_runs_each_sample_on_its_own_length(cls, mode, layout):
    rng = np.random.default_rng(2)
    layer = _layer(cls, 3, 2, True, use_sequence_length=True, layout=layout)
    T, N = 6, 4
    lengths = np.array([6, 2, 0, 4])
    x_tnc = rng.standard_normal((T, N, 5))
    states_np = [rng.standard_normal(s["shape"]) * 0.5 for s in layer.state_info(N)]
    x = x_tnc if layout == "TNC" else x_tnc.transpose(1, 0, 2)
    out, finals = layer(mx.array(x), [mx.array(s) for s in states_np], mx.array(lengths.astype(np.int32)))
    out = out.asnumpy() if layout == "TNC" else out.asnumpy().transpose(1, 0, 2)
    for b, n in enumerate(lengths):
        begin = [mx.array(s[:, b:b + 1]) for s in states_np]
        if n:
            alone_out, alone = _steps.rnn_sequence(
                mode, mx.array(x_tnc[:n, b:b + 1]), begin, _weights(layer), 2, True, fused=False)
            np.testing.assert_allclose(out[:n, b], alone_out.asnumpy()[:, 0], rtol=1e-12, atol=1e-12)
        else:
            alone = begin  # no step at all: the final states are the begin states
        np.testing.assert_array_equal(out[n:, b], 0)
        for f, a in zip(finals, alone):
            np.testing.assert_allclose(f.asnumpy()[:, b], a.asnumpy()[:, 0], rtol=1e-12, atol=1e-12)


def test_sequence_length_must_match_the_layer_setting():
    x = mx.array(np.zeros((3, 2, 5)))
    with pytest.raises(ValueError, match="use_sequence_length=True: call it as layer"):
        _layer(rnn.GRU, 3, 1, False, use_sequence_length=True)(x)
    with pytest.raises(ValueError, match="sequence_length given, but the layer was built with use_sequence_length"):
        _layer(rnn.GRU, 3, 1, False)(x, None, mx.array([3, 1]))
    with pytest.raises(ValueError, match=r"valid_length must hold integers in \[0, 3\]"):
        _layer(rnn.GRU, 3, 1, False, use_sequence_length=True)(x, None, mx.array([4, 1]))


def test_dropout_between_layers_applies_in_training_only():
    rng = np.random.default_rng(3)
    layer = _layer(rnn.LSTM, 6, 2, False, dropout=0.5)
    x = mx.array(rng.standard_normal((4, 3, 5)))
    plain = layer(x).asnumpy()
    np.testing.assert_array_equal(layer(x).asnumpy(), plain)  # predicting: no dropout
    mx.random.seed(11)
    with mx.autograd.record():
        dropped = layer(x)
    dropped.backward()
    assert not np.allclose(dropped.asnumpy(), plain)
    assert all(np.isfinite(p.grad().asnumpy()).all() for p in layer.collect_params().values())


def test_detached_states_carry_values_but_not_gradients_across_batches():
    rng = np.random.default_rng(4)
    layer = _layer(rnn.LSTM, 3, 1, False, state_clip_min=-0.2, state_clip_max=0.2)
    states = layer.begin_state(2, dtype=np.float64)
    x = mx.array(rng.standard_normal((4, 2, 5)))
    _, states = layer(x, states)
    assert np.abs(states[1].asnumpy()).max() <= 0.2  # clipped cell state
    carried = [s.detach() for s in states]
    for s in carried:
        s.attach_grad()
    with mx.autograd.record():
        out, _ = layer(x, carried)
    out.backward()
    assert all(np.abs(s.grad.asnumpy()).sum() > 0 for s in carried)

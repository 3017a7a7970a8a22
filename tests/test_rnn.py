"""gluon.rnn: RNN/LSTM/GRU layers and cells against NumPy references of MXNet's formulas; gradient-checked."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd
from mxlite.gluon import rnn
from mxlite.gluon.rnn import _steps
from tests.gradcheck import check_grad

RNG = np.random.default_rng(5)


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _np_step(mode, x, states, wi, wh, bi, bh):
    """MXNet's formulas in NumPy (gate order LSTM i, f, c, o; GRU r, z, n)."""
    h = states[0]
    gi, gh = x @ wi.T + bi, h @ wh.T + bh
    if mode == "lstm":
        i, f, g, o = np.split(gi + gh, 4, axis=-1)
        c = _sig(f) * states[1] + _sig(i) * np.tanh(g)
        h = _sig(o) * np.tanh(c)
        return [h, c]
    if mode == "gru":
        ir, iz, in_ = np.split(gi, 3, axis=-1)
        hr, hz, hn = np.split(gh, 3, axis=-1)
        r, z = _sig(ir + hr), _sig(iz + hz)
        n = np.tanh(in_ + r * hn)
        return [(1 - z) * n + z * h]
    pre = gi + gh
    return [np.maximum(pre, 0) if mode == "rnn_relu" else np.tanh(pre)]


def _np_layer(mode, x, states, weights, num_layers, dirs):
    """Reference of a stacked (bidirectional) layer, time-major; returns output and final states."""
    finals = [[] for _ in states]
    inp = x
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            st = [s[layer * dirs + d] for s in states]
            seq = [None] * len(inp)
            for t in (range(len(inp) - 1, -1, -1) if d else range(len(inp))):
                st = _np_step(mode, inp[t], st, *weights[layer * dirs + d])
                seq[t] = st[0]
            outs.append(np.stack(seq))
            for k, s in enumerate(st):
                finals[k].append(s)
        inp = np.concatenate(outs, axis=-1)
    return inp, [np.stack(f) for f in finals]


def _weights(mode, in_size, hidden, num_layers, dirs):
    g = _steps.GATES[mode] * hidden
    out = []
    for layer in range(num_layers):
        for _ in range(dirs):
            n_in = in_size if layer == 0 else dirs * hidden
            out.append([RNG.standard_normal((g, n_in)) * 0.5, RNG.standard_normal((g, hidden)) * 0.5,
                        RNG.standard_normal(g) * 0.1, RNG.standard_normal(g) * 0.1])
    return out


MODES = ["rnn_tanh", "rnn_relu", "lstm", "gru"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_layers,dirs", [(1, 1), (2, 2)])
def test_sequence_values_and_grads(mode, num_layers, dirs):
    T, N, C, H = 3, 2, 3, 2
    x = RNG.standard_normal((T, N, C))
    states = [RNG.standard_normal((num_layers * dirs, N, H)) * 0.5 for _ in range(_steps.NUM_STATES[mode])]
    weights = _weights(mode, C, H, num_layers, dirs)
    flat = [w for ws in weights for w in ws]
    ns = len(states)

    def fn(x_, *rest):
        st, ws = list(rest[:ns]), rest[ns:]
        grouped = [ws[i:i + 4] for i in range(0, len(ws), 4)]
        out, fin = _steps.rnn_sequence(mode, x_, st, grouped, num_layers, dirs == 2)
        # one output holding the sequence and the final states, so every path is checked
        return mx.ops.concat([mx.ops.reshape(out, (-1,))] + [mx.ops.reshape(f, (-1,)) for f in fin], axis=0)

    def ref(x_, *rest):
        st, ws = list(rest[:ns]), rest[ns:]
        out, fin = _np_layer(mode, x_, st, [ws[i:i + 4] for i in range(0, len(ws), 4)], num_layers, dirs)
        return np.concatenate([out.reshape(-1)] + [f.reshape(-1) for f in fin])

    check_grad(fn, [x, *states, *flat], reference=ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cls,mode", [(rnn.RNN, "rnn_relu"), (rnn.LSTM, "lstm"), (rnn.GRU, "gru")])
@pytest.mark.parametrize("layout", ["TNC", "NTC"])
def test_layer_matches_reference(cls, mode, layout):
    T, N, C, H = 4, 3, 5, 6
    layer = cls(H, num_layers=2, bidirectional=True, layout=layout)
    layer.initialize(mx.init.Uniform(0.3))
    x_tnc = RNG.standard_normal((T, N, C)).astype(np.float32)
    x = x_tnc if layout == "TNC" else x_tnc.transpose(1, 0, 2)
    out = layer(mx.nd.array(x))  # no states given: only the output
    assert isinstance(out, mx.NDArray)
    params = layer.collect_params()
    names = [f"{p}{i}_{k}" for i in range(2) for p in "lr" for k in ("i2h_weight", "h2h_weight", "i2h_bias",
                                                                     "h2h_bias")]
    assert list(params) == names
    assert params["l0_i2h_weight"].shape == (_steps.GATES[mode] * H, C)
    assert params["l1_i2h_weight"].shape == (_steps.GATES[mode] * H, 2 * H)
    weights = [[params[n].data().asnumpy().astype(np.float64) for n in names[i:i + 4]] for i in range(0, 16, 4)]
    begin = layer.begin_state(N)
    assert [s.shape for s in begin] == [(4, N, H)] * _steps.NUM_STATES[mode]
    states = [RNG.standard_normal(s.shape).astype(np.float32) for s in begin]
    out2, new_states = layer(mx.nd.array(x), [mx.nd.array(s) for s in states])
    ref_out, ref_states = _np_layer(mode, x_tnc.astype(np.float64), states, weights, 2, 2)
    ref_zero, _ = _np_layer(mode, x_tnc.astype(np.float64), [np.zeros_like(s) for s in states], weights, 2, 2)
    if layout == "NTC":
        ref_out, ref_zero = ref_out.transpose(1, 0, 2), ref_zero.transpose(1, 0, 2)
    np.testing.assert_allclose(out.asnumpy(), ref_zero, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out2.asnumpy(), ref_out, rtol=1e-4, atol=1e-5)
    for got, want in zip(new_states, ref_states):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls,mode,n_states", [(rnn.RNNCell, "rnn_tanh", 1), (rnn.LSTMCell, "lstm", 2),
                                               (rnn.GRUCell, "gru", 1)])
def test_cells_step_unroll_and_grads(cls, mode, n_states):
    N, C, H, T = 2, 3, 4, 3
    cell = cls(H, input_size=C)
    cell.initialize(mx.init.Uniform(0.5))
    cell.cast(np.float64)
    assert list(cell.collect_params()) == ["i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"]
    assert cell.state_info(N) == [{"shape": (N, H), "__layout__": "NC"}] * n_states
    ws = [p.data().asnumpy() for p in cell.collect_params().values()]
    x = RNG.standard_normal((N, T, C))
    outs, states = cell.unroll(T, mx.nd.array(x, dtype=np.float64), layout="NTC", merge_outputs=True)
    ref_states = [np.zeros((N, H))] * n_states
    ref_outs = []
    for t in range(T):
        ref_states = _np_step(mode, x[:, t], ref_states, *ws)
        ref_outs.append(ref_states[0])
    np.testing.assert_allclose(outs.asnumpy(), np.stack(ref_outs, axis=1), rtol=1e-10)
    for got, want in zip(states, ref_states):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-10)
    listed, _ = cell.unroll(T, [mx.nd.array(x[:, t], dtype=np.float64) for t in range(T)])
    assert isinstance(listed, list) and len(listed) == T  # merge_outputs=None keeps the list form

    def fn(x_, *s):
        out, new = cell(x_, list(s))
        return mx.ops.concat([out] + new, axis=1)

    check_grad(fn, [x[:, 0]] + [RNG.standard_normal((N, H)) for _ in range(n_states)])

    # gradients w.r.t. the weights, through a 3-step recurrence of the same step function
    def fw2(wi, wh, bi, bh):
        steps = [mx.nd.array(x[:, t], dtype=np.float64) for t in range(T)]
        st = [mx.nd.zeros((N, H), dtype=np.float64)] * n_states
        outs_ = []
        for s in steps:
            i2h = mx.nn_ops.fully_connected(s, wi, bi)
            if mode == "lstm":
                st = list(_steps.lstm_step(i2h, st[0], st[1], wh, bh))
            elif mode == "gru":
                st = [_steps.gru_step(i2h, st[0], wh, bh)]
            else:
                st = [_steps.rnn_step(i2h, st[0], wh, bh, mx.ops.tanh)]
            outs_.append(st[0])
        return mx.ops.stack(outs_, axis=1)

    check_grad(fw2, ws)


def test_sequential_cell_and_valid_length():
    N, C, T = 3, 2, 4
    seq = rnn.SequentialRNNCell()
    seq.add(rnn.LSTMCell(4))
    seq.add(rnn.GRUCell(3))
    seq.initialize()
    assert len(seq) == 2 and isinstance(seq[0], rnn.LSTMCell)
    assert [i["shape"] for i in seq.state_info(N)] == [(N, 4), (N, 4), (N, 3)]
    x = mx.nd.array(RNG.standard_normal((T, N, C)))
    out, states = seq.unroll(T, x, layout="TNC", merge_outputs=True)
    assert out.shape == (T, N, 3) and [s.shape for s in states] == [(N, 4), (N, 4), (N, 3)]
    valid = mx.nd.array([4, 2, 1])
    out_v, states_v = seq.unroll(T, x, layout="TNC", merge_outputs=True, valid_length=valid)
    o = out_v.asnumpy()
    assert np.all(o[2:, 1] == 0) and np.all(o[1:, 2] == 0)
    np.testing.assert_allclose(o[:, 0], out.asnumpy()[:, 0], rtol=1e-6)
    short, short_states = seq.unroll(2, x[:2], layout="TNC")  # sample 1's state after its 2 valid steps
    np.testing.assert_allclose(states_v[2].asnumpy()[1], short_states[2].asnumpy()[1], rtol=1e-6)
    with pytest.raises(ValueError, match="takes 3 states"):
        seq(x[0], seq.begin_state(N)[:2])


def test_layer_errors():
    with pytest.raises(ValueError, match="layout"):
        rnn.LSTM(4, layout="CTN")
    layer = rnn.GRU(4)
    layer.initialize()
    with pytest.raises(ValueError, match="state has shape"):
        layer(mx.nd.ones((3, 2, 5)), [mx.nd.zeros((1, 3, 4))])
    with pytest.raises(ValueError, match="3-D"):
        layer(mx.nd.ones((3, 5)))


def test_lstm_trains_data_parallel_on_cpus_and_emulated_gpus():
    devices = [mx.cpu(0), mx.cpu(1)] + ([mx.gpu(0), mx.gpu(1)] if mx.num_gpus() >= 2 else [])
    mx.random.seed(0)
    net = mx.gluon.nn.Sequential()
    net.add(rnn.LSTM(8, num_layers=2, layout="NTC", dropout=0.1, bidirectional=True))
    net.add(mx.gluon.nn.Dense(1, flatten=True))
    net.initialize(mx.init.Xavier(), ctx=devices)
    trainer = mx.gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.02})
    loss_fn = mx.gluon.loss.L2Loss()
    x = RNG.standard_normal((8 * len(devices), 5, 2)).astype(np.float32)
    y = x[:, :, 0].sum(axis=1, keepdims=True)  # learn a running sum
    first = last = None
    for _ in range(30):
        xs = mx.gluon.utils.split_and_load(x, ctx_list=devices)
        ys = mx.gluon.utils.split_and_load(y, ctx_list=devices)
        with autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        for loss in losses:
            loss.backward()
        trainer.step(x.shape[0])
        value = float(sum(loss.mean().asscalar() for loss in losses))
        first = value if first is None else first
        last = value
    assert last < 0.5 * first
    weights = net.collect_params()["0.l0_i2h_weight"].list_data()
    for w in weights[1:]:
        np.testing.assert_array_equal(w.asnumpy(), weights[0].asnumpy())  # mirrors stay identical


def test_concat_backward_on_emulated_gpu():
    # A bidirectional layer's outputs are joined with concat; its backward split must run on any device.
    if mx.num_gpus() < 1:
        pytest.skip("no GPU (real or emulated)")
    a = mx.nd.ones((2, 3), ctx=mx.gpu(0))
    b = mx.nd.ones((2, 2), ctx=mx.gpu(0))
    a.attach_grad()
    b.attach_grad()
    with autograd.record():
        y = (mx.ops.concat([a, b], axis=1) * mx.nd.array(np.arange(5.0), ctx=mx.gpu(0))).sum()
    y.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), np.tile([0.0, 1, 2], (2, 1)))
    np.testing.assert_array_equal(b.grad.asnumpy(), np.tile([3.0, 4], (2, 1)))

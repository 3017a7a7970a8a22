"""gluon.rnn cell wrappers (Dropout, Zoneout, Residual, Bidirectional, VariationalDropout, LSTMP, Sequential).

Values are checked against NumPy references of MXNet's formulas (random masks are re-drawn from the
same seeded stream), gradients by finite differences, and the cases of MXNet's
``tests/python/unittest/test_gluon_rnn.py`` that use these cells are mirrored in this repo's style.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd
from mxlite.gluon import rnn
from mxlite.ops import nn_ops
from tests.gradcheck import check_grad

RNG = np.random.default_rng(11)


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _np_step(mode, x, states, wi, wh, bi, bh, wr=None):
    """One step of MXNet's cell formulas (LSTM gates i, f, c, o; GRU r, z, n); returns (output, states)."""
    h = states[0]
    gi, gh = x @ wi.T + bi, h @ wh.T + bh
    if mode in ("lstm", "lstmp"):
        i, f, g, o = np.split(gi + gh, 4, axis=-1)
        c = _sig(f) * states[1] + _sig(i) * np.tanh(g)
        out = _sig(o) * np.tanh(c)
        if mode == "lstmp":
            out = out @ wr.T
        return out, [out, c]
    if mode == "gru":
        ir, iz, in_ = np.split(gi, 3, axis=-1)
        hr, hz, hn = np.split(gh, 3, axis=-1)
        r, z = _sig(ir + hr), _sig(iz + hz)
        out = (1 - z) * np.tanh(in_ + r * hn) + z * h
        return out, [out]
    out = np.tanh(gi + gh)
    return out, [out]


def _np_unroll(mode, steps, states, weights):
    """Reference unroll over a list of (N, C) steps; returns (list of outputs, final states)."""
    outs = []
    for x in steps:
        out, states = _np_step(mode, x, states, *weights)
        outs.append(out)
    return outs, states


def _weights(cell):
    """A cell's parameters as float64 NumPy arrays, in the order _np_step takes them."""
    p = {k.split(".")[-1]: v.data().asnumpy().astype(np.float64) for k, v in cell.collect_params().items()}
    extra = [p["h2r_weight"]] if "h2r_weight" in p else []
    return [p["i2h_weight"], p["h2h_weight"], p["i2h_bias"], p["h2h_bias"], *extra]


def _cell(cls, *args, input_size=3, dtype=np.float64, **kwargs):
    cell = cls(*args, input_size=input_size, **kwargs)
    cell.initialize(mx.init.Uniform(0.5))
    cell.cast(dtype)
    return cell


def _arr(a):
    return mx.nd.array(a, dtype=a.dtype)


def _keep_masks(seed, shapes, rate, dtype=np.float64):
    """The keep masks (nonzero = keep) the wrappers draw, re-drawn from the same seeded stream in order."""
    mx.random.seed(seed)
    return [nn_ops.dropout(mx.nd.ones(s, dtype=dtype), rate, training=True).asnumpy() != 0 for s in shapes]


# -- exports --------------------------------------------------------------------------------------------
def test_gluon_rnn_exports_mxnet_2x_cell_list():
    names = ["RecurrentCell", "HybridRecurrentCell", "RNNCell", "LSTMCell", "GRUCell", "SequentialRNNCell",
             "HybridSequentialRNNCell", "DropoutCell", "ModifierCell", "ZoneoutCell", "ResidualCell",
             "BidirectionalCell", "VariationalDropoutCell", "LSTMPCell"]
    for name in names:
        assert getattr(mx.gluon.rnn, name) is getattr(rnn.rnn_cell, name)
        assert name in rnn.__all__ and getattr(rnn, name).__doc__
    assert callable(mx.gluon.rnn.rnn_cell.dynamic_unroll)
    for cls in (rnn.DropoutCell, rnn.ZoneoutCell, rnn.ResidualCell, rnn.BidirectionalCell,
                rnn.VariationalDropoutCell, rnn.LSTMPCell):
        assert issubclass(cls, rnn.HybridRecurrentCell)
    for cls in (rnn.ZoneoutCell, rnn.ResidualCell, rnn.VariationalDropoutCell):
        assert issubclass(cls, rnn.ModifierCell)


# -- unroll's merge_outputs / layout contract (MXNet's _format_sequence) -------------------------------------
@pytest.mark.parametrize("layout", ["NTC", "TNC"])
def test_unroll_output_forms_follow_mxnet(layout):
    N, T, C, H = 2, 3, 3, 4
    cell = _cell(rnn.GRUCell, H)
    x = RNG.standard_normal((N, T, C) if layout == "NTC" else (T, N, C))
    axis = layout.index("T")
    steps = [np.take(x, t, axis=axis) for t in range(T)]
    ref_outs, ref_states = _np_unroll("gru", steps, [np.zeros((N, H))], _weights(cell))
    ref = np.stack(ref_outs, axis=axis)

    listed, states = cell.unroll(T, _arr(x), layout=layout)  # merge_outputs=None: a list, as MXNet
    assert isinstance(listed, list) and len(listed) == T
    np.testing.assert_allclose(np.stack([o.asnumpy() for o in listed], axis=axis), ref, rtol=1e-10)
    np.testing.assert_allclose(states[0].asnumpy(), ref_states[0], rtol=1e-10)
    merged, _ = cell.unroll(T, [_arr(s) for s in steps], layout=layout, merge_outputs=True)
    np.testing.assert_allclose(merged.asnumpy(), ref, rtol=1e-10)
    masked, _ = cell.unroll(T, _arr(x), layout=layout, valid_length=mx.nd.array([T, 1]))
    assert isinstance(masked, mx.NDArray) and masked.shape == ref.shape  # valid_length: one array
    as_list, _ = cell.unroll(T, _arr(x), layout=layout, merge_outputs=False, valid_length=mx.nd.array([T, 1]))
    assert isinstance(as_list, list) and len(as_list) == T

    drop = rnn.DropoutCell(0.5)  # DropoutCell keeps the form of its inputs for merge_outputs=None
    assert isinstance(drop.unroll(T, _arr(x), layout=layout)[0], mx.NDArray)
    assert isinstance(drop.unroll(T, [_arr(s) for s in steps], layout=layout)[0], list)
    assert isinstance(drop.unroll(T, [_arr(s) for s in steps], layout=layout, merge_outputs=True)[0], mx.NDArray)


def test_unroll_layout_of_list_inputs():
    """MXNet's test_unroll_layout: a list of steps gives the same per-step outputs in either layout."""
    cell = rnn.HybridSequentialRNNCell()
    for i in range(5):
        cell.add(rnn.ResidualCell(rnn.LSTMCell(6)) if i == 1 else rnn.LSTMCell(6))
    inputs = [mx.nd.array(RNG.uniform(size=(4, 5))) for _ in range(3)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    out_tnc, _ = cell.unroll(3, inputs, layout="TNC")
    out_ntc, _ = cell.unroll(3, inputs, layout="NTC")
    assert [o.shape for o in out_tnc] == [(4, 6)] * 3
    for a, b in zip(out_tnc, out_ntc):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


# -- ResidualCell --------------------------------------------------------------------------------------------
def test_residual_mxnet_names_and_shapes():
    """MXNet's test_residual and test_residual_bidirectional."""
    cell = rnn.ResidualCell(rnn.GRUCell(50))
    inputs = [mx.nd.ones((10, 50)) for _ in range(2)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    outputs, _ = cell.unroll(2, inputs)
    assert sorted(cell.collect_params()) == ["base_cell.h2h_bias", "base_cell.h2h_weight", "base_cell.i2h_bias",
                                             "base_cell.i2h_weight"]
    assert [o.shape for o in outputs] == [(10, 50), (10, 50)]

    cell = rnn.ResidualCell(rnn.BidirectionalCell(rnn.GRUCell(25), rnn.GRUCell(25)))
    cell.infer_shape(0, inputs[0], True)
    cell.initialize()
    outputs, _ = cell.unroll(2, inputs, merge_outputs=False)
    assert sorted(cell.collect_params()) == [f"base_cell.{d}_cell.{p}" for d in "lr" for p in
                                             ("h2h_bias", "h2h_weight", "i2h_bias", "i2h_weight")]
    assert [o.shape for o in outputs] == [(10, 50), (10, 50)]


def test_residual_values_valid_length_and_grads():
    N, T, H = 3, 4, 3
    cell = rnn.ResidualCell(_cell(rnn.GRUCell, H, input_size=H))
    w = _weights(cell.base_cell)
    x = RNG.standard_normal((N, T, H))
    h0 = RNG.standard_normal((N, H))
    ref_outs, ref_states = _np_unroll("gru", [x[:, t] for t in range(T)], [h0], w)
    out, states = cell.unroll(T, _arr(x), begin_state=[_arr(h0)], merge_outputs=True)
    np.testing.assert_allclose(out.asnumpy(), np.stack(ref_outs, axis=1) + x, rtol=1e-10)
    np.testing.assert_allclose(states[0].asnumpy(), ref_states[0], rtol=1e-10)
    step, _ = cell(_arr(x[:, 0]), [_arr(h0)])  # one step
    np.testing.assert_allclose(step.asnumpy(), ref_outs[0] + x[:, 0], rtol=1e-10)

    lengths = np.array([4, 2, 0])
    out_v, states_v = cell.unroll(T, _arr(x), begin_state=[_arr(h0)], valid_length=mx.nd.array(lengths))
    o = out_v.asnumpy()
    np.testing.assert_allclose(o[0], out.asnumpy()[0], rtol=1e-10)
    np.testing.assert_allclose(o[1, :2], out.asnumpy()[1, :2], rtol=1e-10)
    assert np.all(o[1, 2:] == 0) and np.all(o[2] == 0)  # padded outputs stay zero: inputs are masked too
    np.testing.assert_allclose(states_v[0].asnumpy()[1], ref_outs[1][1], rtol=1e-10)  # after 2 valid steps
    np.testing.assert_allclose(states_v[0].asnumpy()[2], h0[2], rtol=1e-10)  # length 0: the begin state

    def fn(x_, h_):
        o_, s_ = cell.unroll(T, x_, begin_state=[h_], merge_outputs=True, valid_length=lengths)
        return mx.ops.concat([mx.ops.reshape(o_, (-1,)), mx.ops.reshape(s_[0], (-1,))], axis=0)

    check_grad(fn, [x, h0])


# -- BidirectionalCell ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NTC", "TNC"])
@pytest.mark.parametrize("merge", [True, False, None])
def test_bidirectional_matches_numpy(layout, merge):
    N, T, C, H = 2, 4, 3, 2
    cell = rnn.BidirectionalCell(_cell(rnn.LSTMCell, H), _cell(rnn.GRUCell, H + 1))
    assert [i["shape"] for i in cell.state_info(N)] == [(N, H), (N, H), (N, H + 1)]
    assert list(cell.collect_params())[:2] == ["l_cell.i2h_weight", "l_cell.h2h_weight"]
    axis = layout.index("T")
    x = RNG.standard_normal((N, T, C) if layout == "NTC" else (T, N, C))
    steps = [np.take(x, t, axis=axis) for t in range(T)]
    begin = [RNG.standard_normal((N, H)), RNG.standard_normal((N, H)), RNG.standard_normal((N, H + 1))]
    l_outs, l_states = _np_unroll("lstm", steps, begin[:2], _weights(cell.l_cell))
    r_outs, r_states = _np_unroll("gru", steps[::-1], begin[2:], _weights(cell.r_cell))
    ref = [np.concatenate([a, b], axis=1) for a, b in zip(l_outs, r_outs[::-1])]

    out, states = cell.unroll(T, _arr(x), begin_state=[_arr(b) for b in begin], layout=layout, merge_outputs=merge)
    if merge:
        np.testing.assert_allclose(out.asnumpy(), np.stack(ref, axis=axis), rtol=1e-10)
    else:
        assert isinstance(out, list) and len(out) == T
        for got, want in zip(out, ref):
            np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-10)
    assert len(states) == 3  # l_cell's states, then r_cell's
    for got, want in zip(states, l_states + r_states):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-10)


def test_bidirectional_mxnet_cases():
    """MXNet's test_bidirectional, test_bidirectional_unroll_valid_length and test_hybridstack's nesting."""
    cell = rnn.BidirectionalCell(rnn.LSTMCell(10), rnn.LSTMCell(10))
    inputs = [mx.nd.ones((4, 5)) for _ in range(3)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    outputs, _ = cell.unroll(3, inputs)
    assert [o.shape for o in outputs] == [(4, 20)] * 3
    for length in (1, 3):
        data = mx.nd.array(RNG.uniform(size=(4, length, 5)))
        out, _ = cell.unroll(length, data, valid_length=mx.nd.array([length] * 4), layout="NTC", merge_outputs=True)
        assert out.shape == (4, length, 20)

    cells = []
    for _ in range(2):
        seq = rnn.HybridSequentialRNNCell()
        seq.add(rnn.LSTMCell(6))
        seq.add(rnn.LSTMCell(6))
        cells.append(seq)
    nested = rnn.BidirectionalCell(*cells)
    x = mx.nd.array(RNG.uniform(size=(4, 3, 6)))
    nested.infer_shape(0, x, True)
    nested.initialize()
    outs, states = nested.unroll(3, x, layout="NTC", merge_outputs=True)
    assert outs.shape == (4, 3, 12) and len(states) == 8
    assert "l_cell.1.i2h_weight" in nested.collect_params()


@pytest.mark.parametrize("layout,merge", [("NTC", True), ("TNC", None)])
def test_unroll_variant_length(layout, merge):
    """MXNet's test_rnn_unroll_variant_length: each sample unrolled alone matches its rows of the batch."""
    H, T = 4, 5
    cells = []
    for cls in (rnn.RNNCell, rnn.LSTMCell, rnn.GRUCell):
        cells += [cls(H), rnn.BidirectionalCell(l_cell=cls(H), r_cell=cls(H)),
                  rnn.VariationalDropoutCell(base_cell=cls(H))]
    stack = rnn.SequentialRNNCell()
    stack.add(rnn.ResidualCell(base_cell=rnn.RNNCell(H)))
    stack.add(rnn.ResidualCell(base_cell=rnn.RNNCell(H)))
    cells.append(stack)
    valid = [2, 5, 3, 4]
    batch = RNG.standard_normal((len(valid), T, H) if layout == "NTC" else (T, len(valid), H)).astype(np.float32)
    axis = layout.index("T")
    for cell in cells:
        cell.infer_shape(0, mx.nd.array(batch), isinstance(cell, rnn.BidirectionalCell))
        cell.initialize()
        outs, states = cell.unroll(T, mx.nd.array(batch), valid_length=mx.nd.array(valid), layout=layout,
                                   merge_outputs=merge)
        o = outs.asnumpy()
        for i, n in enumerate(valid):
            one = batch[i:i + 1, :n] if layout == "NTC" else batch[:n, i:i + 1]
            ele_out, ele_states = cell.unroll(n, mx.nd.array(one), layout=layout, merge_outputs=True)
            mine = o[i:i + 1, :n] if layout == "NTC" else o[:n, i:i + 1]
            np.testing.assert_allclose(mine, ele_out.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=type(cell).__name__)
            padded = o[i, n:] if layout == "NTC" else o[n:, i]
            assert np.all(padded == 0)
            for got, want in zip(states, ele_states):
                np.testing.assert_allclose(got.asnumpy()[i:i + 1], want.asnumpy(), rtol=1e-5, atol=1e-6)
        assert o.shape[axis] == T


def test_bidirectional_valid_length_grads():
    N, T, C, H = 3, 3, 2, 2
    cell = rnn.BidirectionalCell(_cell(rnn.RNNCell, H, input_size=C), _cell(rnn.LSTMCell, H, input_size=C))
    lengths = np.array([3, 1, 2])

    def fn(x_):
        out, states = cell.unroll(T, x_, layout="TNC", merge_outputs=True, valid_length=lengths)
        return mx.ops.concat([mx.ops.reshape(t, (-1,)) for t in [out, *states]], axis=0)

    x = RNG.standard_normal((T, N, C))
    grads = check_grad(fn, [x])
    # The backward cell reads each sample's valid steps only: no gradient reaches the padding.
    assert np.all(grads[0][1:, 1] == 0) and np.all(grads[0][2:, 2] == 0)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_relu"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_fused_layer_matches_stacked_cells(mode, bidirectional):
    """MXNet's test_fused_layer (check_rnn_consistency): a fused layer and a stack of (bidirectional)
    cells with the same weights give the same outputs, input and weight gradients, and final states."""
    fused_cls, cell_cls = {"lstm": (rnn.LSTM, rnn.LSTMCell), "gru": (rnn.GRU, rnn.GRUCell),
                           "rnn_relu": (rnn.RNN, rnn.RNNCell)}[mode]
    kw = {"activation": "relu"} if mode == "rnn_relu" else {}
    L, C, H, N, T = 2, 3, 4, 2, 5
    fused = fused_cls(H, num_layers=L, layout="NTC", bidirectional=bidirectional, input_size=C, **kw)
    fused.initialize(mx.init.Uniform(0.4))
    stack = rnn.HybridSequentialRNNCell()
    for _ in range(L):
        stack.add(rnn.BidirectionalCell(cell_cls(H, **kw), cell_cls(H, **kw)) if bidirectional
                  else cell_cls(H, **kw))
    x = mx.nd.array(RNG.standard_normal((N, T, C)))
    stack.infer_shape(0, x, False)
    stack.initialize()
    fused_params, stack_params = fused.collect_params(), stack.collect_params()

    def stack_name(fused_name):  # 'r1_h2h_bias' -> '1.r_cell.h2h_bias' (or '1.h2h_bias')
        head, rest = fused_name.split("_", 1)
        return f"{head[1:]}.{head[0]}_cell.{rest}" if bidirectional else f"{head[1:]}.{rest}"

    for name, p in fused_params.items():
        stack_params[stack_name(name)].set_data(p.data())
    target = mx.nd.array(RNG.standard_normal((N, T, H * (2 if bidirectional else 1))))
    loss = mx.gluon.loss.L2Loss()
    fx, sx = x.copy(), x.copy()
    fx.attach_grad()
    sx.attach_grad()
    begin = fused.begin_state(N)
    with autograd.record():
        f_out, f_states = fused(fx, begin)
        loss(f_out, target).mean().backward()
    with autograd.record():
        s_out, s_states = stack.unroll(T, sx, begin_state=stack.begin_state(batch_size=N), merge_outputs=True)
        loss(s_out, target).mean().backward()
    np.testing.assert_allclose(f_out.asnumpy(), s_out.asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fx.grad.asnumpy(), sx.grad.asnumpy(), rtol=1e-4, atol=1e-6)
    for name, p in fused_params.items():
        np.testing.assert_allclose(p.grad().asnumpy(), stack_params[stack_name(name)].grad().asnumpy(),
                                   rtol=1e-4, atol=1e-6, err_msg=name)
    n_states = len(f_states)  # stack states: per layer and direction, [h, c] (LSTM) or [h]
    for k, fused_state in enumerate(f_states):
        np.testing.assert_allclose(fused_state.asnumpy(),
                                   np.stack([s.asnumpy() for s in s_states[k::n_states]]), rtol=1e-5, atol=1e-6)


# -- SequentialRNNCell ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [rnn.SequentialRNNCell, rnn.HybridSequentialRNNCell])
def test_stack_mxnet_names(cls):
    """MXNet's test_stack / test_hybridstack: positions name the parameters, a modifier adds 'base_cell.'."""
    cell = cls()
    for i in range(5):
        cell.add(rnn.ResidualCell(rnn.LSTMCell(8)) if i == 1 else rnn.LSTMCell(8))
    inputs = [mx.nd.ones((4, 6)) for _ in range(3)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    outputs, _ = cell.unroll(3, inputs)
    keys = set(cell.collect_params())
    for i in (0, 2, 3, 4):
        assert {f"{i}.h2h_weight", f"{i}.h2h_bias", f"{i}.i2h_weight", f"{i}.i2h_bias"} <= keys
    assert {"1.base_cell.h2h_weight", "1.base_cell.h2h_bias", "1.base_cell.i2h_weight", "1.base_cell.i2h_bias"} <= keys
    assert [o.shape for o in outputs] == [(4, 8)] * 3
    assert cell.collect_params()["0.i2h_weight"].shape == (32, 6)
    assert cell.collect_params()["1.base_cell.i2h_weight"].shape == (32, 8)


@pytest.mark.parametrize("merge_outputs", [True, False, None])
@pytest.mark.parametrize("merged_inputs", [True, False])
def test_rnn_forward_backward_forms_agree(merge_outputs, merged_inputs):
    """MXNet's check_rnn_forward_backward (test_rnn_forward_backward, test_sequential_rnn_cells): the
    outputs and input gradients do not depend on whether inputs/outputs are merged."""
    seq = rnn.SequentialRNNCell()
    seq.add(rnn.LSTMCell(4, input_size=5))
    seq.add(rnn.RNNCell(4, input_size=4))
    seq.add(rnn.GRUCell(4, input_size=4))
    layers = [rnn.BidirectionalCell(rnn.LSTMCell(3, input_size=5), rnn.LSTMCell(3, input_size=5)), seq]
    for layer in layers:
        layer.initialize()
        if merged_inputs:
            inputs = mx.nd.array(RNG.standard_normal((2, 3, 5)))
            inputs.attach_grad()
        else:
            inputs = [mx.nd.array(RNG.standard_normal((2, 5))) for _ in range(3)]
            for s in inputs:
                s.attach_grad()
        results = []
        for merge in (merge_outputs, not merge_outputs):
            with autograd.record():
                out = layer.unroll(3, inputs, merge_outputs=merge)[0]
                autograd.backward(out)
            out_np = out.asnumpy() if isinstance(out, mx.NDArray) else np.stack([o.asnumpy() for o in out], 1)
            dx = inputs.grad.asnumpy() if merged_inputs else np.stack([s.grad.asnumpy() for s in inputs], 1)
            results.append((out_np, dx))
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6)


def test_sequential_with_dropout_cell_runs_in_training():
    """MXNet's test_sequential_rnn_cells with determinism=False: a DropoutCell inside a stack."""
    net = rnn.SequentialRNNCell()
    net.add(rnn.LSTMCell(4, input_size=5))
    net.add(rnn.DropoutCell(0.5))
    net.add(rnn.GRUCell(4, input_size=4))
    net.initialize()
    x = mx.nd.ones((2, 3, 5))
    x.attach_grad()
    for merge in (True, False, None):
        with autograd.record():
            out = net.unroll(3, x, merge_outputs=merge)[0]
            autograd.backward(out)
        assert (out.shape if merge else [o.shape for o in out]) == ((2, 3, 4) if merge else [(2, 4)] * 3)
    predict = [net.unroll(3, x, merge_outputs=True)[0].asnumpy() for _ in range(2)]
    np.testing.assert_array_equal(predict[0], predict[1])  # no dropout outside training


# -- DropoutCell ---------------------------------------------------------------------------------------------
def test_dropout_cell_values_axes_and_grads():
    N, T, C, p = 4, 3, 6, 0.5
    x = RNG.uniform(0.5, 1.5, size=(N, T, C))
    cell = rnn.DropoutCell(p)
    assert cell.state_info(N) == [] and cell.begin_state(N) == []
    out, states = cell.unroll(T, _arr(x), begin_state=[])
    np.testing.assert_array_equal(out.asnumpy(), x)  # predict mode: identity
    with autograd.record():
        out, states = cell.unroll(T, _arr(x), merge_outputs=True)
    ratio = out.asnumpy() / x
    assert states == [] and set(np.round(np.unique(ratio), 12)) == {0.0, 2.0}

    mx.random.seed(3)
    with autograd.record():
        stepped, _ = cell(_arr(x[:, 0]), [])
    (keep,) = _keep_masks(3, [(N, C)], p)
    np.testing.assert_allclose(stepped.asnumpy(), np.where(keep, x[:, 0] / (1 - p), 0), rtol=1e-12)

    shared = rnn.DropoutCell(p, axes=(1,))  # one mask value per row of each step
    with autograd.record():
        outs, _ = shared.unroll(T, [_arr(x[:, t]) for t in range(T)])
    for o, t in zip(outs, range(T)):
        r = o.asnumpy() / x[:, t]
        assert np.all(np.isclose(r, r[:, :1]))

    with autograd.record():
        zeros, _ = rnn.DropoutCell(1.0).unroll(T, _arr(x))
    assert np.all(zeros.asnumpy() == 0)

    def fn(x_):
        mx.random.seed(7)  # the same mask at every evaluation
        return cell.unroll(T, x_, merge_outputs=True)[0]

    grads = check_grad(fn, [x])
    with autograd.record():
        dropped = fn(_arr(x)).asnumpy()
    np.testing.assert_array_equal(grads[0] == 0, dropped == 0)  # no gradient through dropped elements


# -- ZoneoutCell ---------------------------------------------------------------------------------------------
def test_zoneout_mxnet_case_and_predict_identity():
    """MXNet's test_zoneout; outside training zoneout is the base cell."""
    cell = rnn.ZoneoutCell(rnn.RNNCell(16), zoneout_outputs=0.5, zoneout_states=0.5)
    inputs = [mx.nd.ones((4, 5)) for _ in range(3)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    outputs, _ = cell.unroll(3, inputs)
    assert [o.shape for o in outputs] == [(4, 16)] * 3
    assert list(cell.collect_params()) == ["base_cell.i2h_weight", "base_cell.h2h_weight", "base_cell.i2h_bias",
                                           "base_cell.h2h_bias"]
    w = _weights(cell.base_cell)
    ref, _ = _np_unroll("rnn", [np.ones((4, 5))] * 3, [np.zeros((4, 16))], w)
    for got, want in zip(outputs, ref):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p_out,p_states", [(0.5, 0.0), (0.0, 0.5), (0.4, 0.6)])
def test_zoneout_training_matches_reference_and_grads(p_out, p_states):
    N, T, C, H, seed = 3, 4, 3, 5, 21
    cell = rnn.ZoneoutCell(_cell(rnn.LSTMCell, H), zoneout_outputs=p_out, zoneout_states=p_states)
    w = _weights(cell.base_cell)
    x = RNG.standard_normal((N, T, C))
    begin = [RNG.standard_normal((N, H)), RNG.standard_normal((N, H))]

    # the keep masks, re-drawn from the same seeded stream in the cell's order: at each step the
    # output's (if p_out), then each state's (if p_states)
    mx.random.seed(seed)
    rates = ([p_out] if p_out else []) + ([p_states] * 2 if p_states else [])
    masks = iter([nn_ops.dropout(mx.nd.ones((N, H), dtype=np.float64), r, training=True).asnumpy() != 0
                  for _ in range(T) for r in rates])
    states, prev, ref_outs = list(begin), np.zeros((N, H)), []
    for t in range(T):
        out, new = _np_step("lstm", x[:, t], states, *w)
        if p_out:
            out = np.where(next(masks), out, prev)
        if p_states:
            new = [np.where(next(masks), n, o) for n, o in zip(new, states)]
        ref_outs.append(out)
        prev, states = out, new

    mx.random.seed(seed)
    with autograd.record():
        got, got_states = cell.unroll(T, _arr(x), begin_state=[_arr(b) for b in begin], merge_outputs=True)
    np.testing.assert_allclose(got.asnumpy(), np.stack(ref_outs, axis=1), rtol=1e-10)
    for g, want in zip(got_states, states):
        np.testing.assert_allclose(g.asnumpy(), want, rtol=1e-10)

    def fn(x_, h_, c_):
        mx.random.seed(seed)
        out_, st_ = cell.unroll(T, x_, begin_state=[h_, c_], merge_outputs=True)
        return mx.ops.concat([mx.ops.reshape(t, (-1,)) for t in [out_, *st_]], axis=0)

    check_grad(fn, [x, *begin])


def test_zoneout_extremes():
    N, C, H = 2, 3, 4
    x = mx.nd.array(RNG.standard_normal((N, 3, C)))
    frozen = rnn.ZoneoutCell(rnn.GRUCell(H, input_size=C), zoneout_outputs=1.0, zoneout_states=1.0)
    frozen.initialize()
    begin = [mx.nd.array(RNG.standard_normal((N, H)))]
    with autograd.record():
        out, states = frozen.unroll(3, x, begin_state=begin, merge_outputs=True)
    assert np.all(out.asnumpy() == 0)  # every output keeps the previous one: zeros from the start
    np.testing.assert_array_equal(states[0].asnumpy(), begin[0].asnumpy())
    with autograd.record():  # stepping by hand: reset() forgets the previous output
        frozen.reset()
        step, _ = frozen(x[:, 0], begin)
    assert np.all(step.asnumpy() == 0)


# -- VariationalDropoutCell ----------------------------------------------------------------------------------
def test_vardrop_mxnet_case():
    """MXNet's test_vardrop: two unrolls in training draw different masks; list inputs unroll step by step."""
    for rates in ((0.5, 0.5, 0.5), (0.5, 0.0, 0.5)):
        cell = rnn.VariationalDropoutCell(rnn.RNNCell(8), drop_inputs=rates[0], drop_states=rates[1],
                                          drop_outputs=rates[2])
        data = mx.nd.array(RNG.uniform(size=(4, 3, 5)))
        cell.infer_shape(0, data, False)
        cell.initialize(init="xavier")
        with autograd.record():
            out1, _ = cell.unroll(3, data, merge_outputs=True)
            out2, _ = cell.unroll(3, data, merge_outputs=True)
        assert not np.allclose(out1.asnumpy(), out2.asnumpy())
        outputs, _ = cell.unroll(3, [mx.nd.ones((4, 5)) for _ in range(3)], merge_outputs=False)
        assert [o.shape for o in outputs] == [(4, 8)] * 3
        assert list(cell.collect_params())[0] == "base_cell.i2h_weight"


@pytest.mark.parametrize("layout", ["NTC", "TNC"])
def test_vardrop_whole_sequence_masks_are_shared_over_time(layout):
    N, T, C, H, p, seed = 3, 4, 3, 5, 0.5, 5
    cell = rnn.VariationalDropoutCell(_cell(rnn.GRUCell, H), drop_inputs=p, drop_outputs=p)
    w = _weights(cell.base_cell)
    axis = layout.index("T")
    x = RNG.standard_normal((N, T, C) if layout == "NTC" else (T, N, C))
    mx.random.seed(seed)
    m_in = nn_ops.dropout(mx.nd.ones(x.shape, dtype=np.float64), p, axes=(axis,), training=True).asnumpy()
    h_shape = (N, T, H) if layout == "NTC" else (T, N, H)
    m_out = nn_ops.dropout(mx.nd.ones(h_shape, dtype=np.float64), p, axes=(axis,), training=True).asnumpy()
    assert m_in.shape == x.shape and np.all(m_in == np.broadcast_to(np.take(m_in, [0], axis=axis), x.shape))
    xd = x * m_in
    ref, ref_states = _np_unroll("gru", [np.take(xd, t, axis=axis) for t in range(T)], [np.zeros((N, H))], w)
    mx.random.seed(seed)
    with autograd.record():
        out, states = cell.unroll(T, _arr(x), layout=layout)  # merge_outputs=None: one array here (MXNet)
    assert isinstance(out, mx.NDArray)
    np.testing.assert_allclose(out.asnumpy(), np.stack(ref, axis=axis) * m_out, rtol=1e-10)
    np.testing.assert_allclose(states[0].asnumpy(), ref_states[0], rtol=1e-10)
    plain, _ = cell.unroll(T, _arr(x), layout=layout)  # predict mode: the base cell
    ref_plain, _ = _np_unroll("gru", [np.take(x, t, axis=axis) for t in range(T)], [np.zeros((N, H))], w)
    np.testing.assert_allclose(plain.asnumpy(), np.stack(ref_plain, axis=axis), rtol=1e-10)


def test_vardrop_state_dropout_steps_with_fixed_masks_and_grads():
    N, T, C, H, seed = 3, 3, 2, 4, 9
    rates = (0.3, 0.5, 0.4)  # inputs, states, outputs
    cell = rnn.VariationalDropoutCell(_cell(rnn.LSTMCell, H, input_size=C), *rates)
    w = _weights(cell.base_cell)
    x = RNG.standard_normal((N, T, C))
    mx.random.seed(seed)  # drawn at the first step: the state mask, the input mask, then the output mask
    m_s, m_i, m_o = (nn_ops.dropout(mx.nd.ones(s, dtype=np.float64), r, training=True).asnumpy()
                     for s, r in (((N, H), rates[1]), ((N, C), rates[0]), ((N, H), rates[2])))
    states, ref = [np.zeros((N, H))] * 2, []
    for t in range(T):
        out, states = _np_step("lstm", x[:, t] * m_i, [states[0] * m_s, states[1]], *w)
        ref.append(out * m_o)
    mx.random.seed(seed)
    with autograd.record():
        got, got_states = cell.unroll(T, _arr(x))
    assert isinstance(got, list)  # stepped: MXNet's base unroll form
    np.testing.assert_allclose(np.stack([g.asnumpy() for g in got], 1), np.stack(ref, 1), rtol=1e-10)
    for g, want in zip(got_states, states):
        np.testing.assert_allclose(g.asnumpy(), want, rtol=1e-10)

    def fn(x_):
        mx.random.seed(seed)
        out_, st_ = cell.unroll(T, x_, merge_outputs=True)
        return mx.ops.concat([mx.ops.reshape(t, (-1,)) for t in [out_, *st_]], axis=0)

    check_grad(fn, [x])


# -- LSTMPCell -----------------------------------------------------------------------------------------------
def test_lstmp_values_names_and_grads():
    """MXNet's test_lstmp (names, shapes) plus values against NumPy and gradients."""
    cell = rnn.LSTMPCell(10, 6)
    inputs = [mx.nd.ones((4, 5)) for _ in range(3)]
    cell.infer_shape(0, inputs[0], False)
    cell.initialize()
    outputs, _ = cell.unroll(3, inputs)
    assert sorted(cell.collect_params()) == ["h2h_bias", "h2h_weight", "h2r_weight", "i2h_bias", "i2h_weight"]
    assert list(cell.collect_params()) == ["i2h_weight", "h2h_weight", "h2r_weight", "i2h_bias", "h2h_bias"]
    assert [o.shape for o in outputs] == [(4, 6)] * 3
    assert cell.state_info(4) == [{"shape": (4, 6), "__layout__": "NC"}, {"shape": (4, 10), "__layout__": "NC"}]

    N, T, C, H, P = 2, 3, 3, 4, 2
    cell = _cell(rnn.LSTMPCell, H, P, input_size=C)
    w = _weights(cell)
    x = RNG.standard_normal((N, T, C))
    begin = [RNG.standard_normal((N, P)), RNG.standard_normal((N, H))]
    ref, ref_states = _np_unroll("lstmp", [x[:, t] for t in range(T)], begin, w)
    out, states = cell.unroll(T, _arr(x), begin_state=[_arr(b) for b in begin], merge_outputs=True)
    np.testing.assert_allclose(out.asnumpy(), np.stack(ref, 1), rtol=1e-10)
    for g, want in zip(states, ref_states):
        np.testing.assert_allclose(g.asnumpy(), want, rtol=1e-10)

    # gradients of the cell itself w.r.t. inputs and states
    def cell_fn(x_, r_, c_):
        out_, st_ = cell.unroll(T, x_, begin_state=[r_, c_], merge_outputs=True)
        return mx.ops.concat([mx.ops.reshape(t, (-1,)) for t in [out_, *st_]], axis=0)

    def cell_ref(x_, r_, c_):
        outs_, st_ = _np_unroll("lstmp", [x_[:, t] for t in range(T)], [r_, c_], w)
        return np.concatenate([np.stack(outs_, 1).reshape(-1)] + [s.reshape(-1) for s in st_])

    check_grad(cell_fn, [x, *begin], reference=cell_ref)
    # and w.r.t. its weights, through the parameters' gradients
    xs = _arr(x)
    with autograd.record():
        out, states = cell.unroll(T, xs, begin_state=[_arr(b) for b in begin], merge_outputs=True)
        total = mx.ops.sum(mx.ops.multiply(out, out))
    total.backward()
    eps = 1e-6
    for name in ("h2r_weight", "h2h_weight"):
        param = getattr(cell, name)
        value = param.data().asnumpy().copy()
        numeric = np.zeros_like(value)
        for k in range(value.size):
            for sign in (1, -1):
                v = value.copy()
                v.reshape(-1)[k] += sign * eps
                param.set_data(mx.nd.array(v, dtype=np.float64))
                o, _ = cell.unroll(T, xs, begin_state=[_arr(b) for b in begin], merge_outputs=True)
                numeric.reshape(-1)[k] += sign * float((o.asnumpy() ** 2).sum()) / (2 * eps)
        param.set_data(mx.nd.array(value, dtype=np.float64))
        np.testing.assert_allclose(param.grad().asnumpy(), numeric, rtol=1e-5, atol=1e-7, err_msg=name)


# -- dynamic_unroll ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,num_states", [(rnn.RNNCell, 1), (rnn.LSTMCell, 2), (rnn.GRUCell, 1)])
@pytest.mark.parametrize("layout", ["NTC", "TNC"])
def test_dynamic_unroll_matches_unroll(cls, num_states, layout):
    """MXNet's test_unroll: rnn_cell.dynamic_unroll gives unroll's outputs, states and gradients."""
    N, T, C, H = 4, 5, 3, 4
    data = RNG.standard_normal((N, T, C) if layout == "NTC" else (T, N, C)).astype(np.float32)
    valid = mx.nd.array(np.round(RNG.uniform(1, T, size=N)))
    states = [mx.nd.array(RNG.standard_normal((N, H))) for _ in range(num_states)]
    cell = cls(H, input_size=C)
    cell.initialize()
    results = []
    for run in (lambda: cell.unroll(T, mx.nd.array(data), states, layout=layout, merge_outputs=True,
                                    valid_length=valid),
                lambda: rnn.rnn_cell.dynamic_unroll(cell, mx.nd.array(data), states, layout=layout,
                                                    valid_length=valid)):
        with autograd.record():
            out, st = run()
            out.backward()
        results.append((out.asnumpy(), [s.asnumpy() for s in st],
                        [p.grad().asnumpy().copy() for p in cell.collect_params().values()]))
    (o1, s1, g1), (o2, s2, g2) = results
    np.testing.assert_allclose(o1, o2, rtol=1e-6)
    for a, b in zip(s1 + g1, s2 + g2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    plain, _ = rnn.rnn_cell.dynamic_unroll(cell, mx.nd.array(data), states, layout=layout)
    ref, _ = cell.unroll(T, mx.nd.array(data), states, layout=layout, merge_outputs=True)
    np.testing.assert_allclose(plain.asnumpy(), ref.asnumpy(), rtol=1e-6)


# -- infer_shape ---------------------------------------------------------------------------------------------
def test_infer_shape_sets_input_sizes():
    x = mx.nd.ones((2, 7))
    cell = rnn.LSTMCell(5)
    cell.infer_shape(0, x, False)
    assert cell.i2h_weight.shape == (20, 7)
    upper = rnn.GRUCell(5)
    upper.infer_shape(1, x, True)
    assert upper.i2h_weight.shape == (15, 10)  # above a bidirectional layer: twice the hidden size
    proj = rnn.LSTMPCell(5, 3)
    proj.infer_shape(2, x, False)
    assert proj.i2h_weight.shape == (20, 3)
    res = rnn.ResidualCell(rnn.RNNCell(7))
    res.infer_shape(0, x, False)
    assert res.base_cell.i2h_weight.shape == (7, 7)
    rnn.DropoutCell(0.1).infer_shape(0, x, False)  # nothing to infer
    fixed = rnn.RNNCell(4, input_size=3)
    with pytest.raises(ValueError, match="incompatible"):
        fixed.infer_shape(0, x, False)
    with pytest.raises(ValueError, match="i must be >= 0"):
        cell.infer_shape(-1, x, False)


# -- misuse --------------------------------------------------------------------------------------------------
def test_modifier_rules():
    base = rnn.LSTMCell(3, input_size=2)
    zone = rnn.ZoneoutCell(base, zoneout_outputs=0.1)
    with pytest.raises(ValueError, match="already modified"):
        rnn.ResidualCell(base)
    with pytest.raises(RuntimeError, match="modifier cell"):
        base.begin_state(2)
    assert [s.shape for s in zone.begin_state(2)] == [(2, 3), (2, 3)]  # through the modifier
    assert zone.params is not None and "i2h_weight" in zone.params.keys()
    seq = rnn.SequentialRNNCell()
    seq.add(rnn.GRUCell(3))
    rnn.ResidualCell(seq)
    with pytest.raises(RuntimeError, match="modifier cell"):
        seq.begin_state(2)
    with pytest.raises(TypeError, match="base_cell must be a recurrent cell"):
        rnn.ZoneoutCell(mx.gluon.nn.Dense(3))


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="rate must lie in"):
        rnn.DropoutCell(1.5)
    with pytest.raises(TypeError, match="rate must be a real number"):
        rnn.DropoutCell("0.5")
    with pytest.raises(TypeError, match="axes must be a tuple of integers"):
        rnn.DropoutCell(0.5, axes=(1.0,))
    with pytest.raises(ValueError, match="zoneout_states must lie in"):
        rnn.ZoneoutCell(rnn.RNNCell(2), zoneout_states=-0.1)
    with pytest.raises(ValueError, match="drop_outputs must lie in"):
        rnn.VariationalDropoutCell(rnn.RNNCell(2), drop_outputs=2)
    with pytest.raises(TypeError, match="projection_size"):
        rnn.LSTMPCell(4, 2.5)
    with pytest.raises(TypeError, match="r_cell must be a recurrent cell"):
        rnn.BidirectionalCell(rnn.RNNCell(2), mx.gluon.nn.Dense(2))
    bi = rnn.BidirectionalCell(rnn.RNNCell(2), rnn.RNNCell(2))
    with pytest.raises(ValueError, match="BidirectionalCell.*cannot be stepped"):
        rnn.ZoneoutCell(bi)
    stacked = rnn.SequentialRNNCell()
    stacked.add(rnn.BidirectionalCell(rnn.RNNCell(2), rnn.RNNCell(2)))
    with pytest.raises(ValueError, match="BidirectionalCell"):
        rnn.ZoneoutCell(stacked)
    with pytest.raises(ValueError, match="drop_states"):
        rnn.VariationalDropoutCell(rnn.BidirectionalCell(rnn.RNNCell(2), rnn.RNNCell(2)), drop_states=0.5)
    bi.initialize()
    x = mx.nd.ones((3, 4, 2))
    with pytest.raises(NotImplementedError, match="cannot be stepped"):
        bi(x[:, 0], bi.begin_state(3))
    stacked.initialize()
    with pytest.raises(NotImplementedError, match="cannot be stepped"):
        stacked(x[:, 0], stacked.begin_state(3))
    with pytest.raises(ValueError, match="takes 2 begin states"):
        bi.unroll(4, x, begin_state=bi.begin_state(3)[:1])
    with pytest.raises(ValueError, match="valid_length must have shape \\(3,\\)"):
        bi.unroll(4, x, valid_length=mx.nd.array([1, 2]))
    with pytest.raises(ValueError, match="valid_length entries must lie in \\[0, length=4\\]"):
        bi.unroll(4, x, valid_length=mx.nd.array([1, 2, 5]))
    with pytest.raises(ValueError, match="whole numbers"):
        bi.unroll(4, x, valid_length=mx.nd.array([1, 2, 2.5]))
    with pytest.raises(ValueError, match="layout must be 'NTC' or 'TNC'"):
        bi.unroll(4, x, layout="CTN")
    with pytest.raises(ValueError, match="inputs have 4 steps"):
        rnn.DropoutCell(0.1).unroll(3, x)
    with pytest.raises(TypeError, match="inputs must be an array or a list"):
        rnn.RNNCell(2).unroll(3, "abc")
    res = rnn.ResidualCell(rnn.RNNCell(5))
    res.initialize()
    with pytest.raises(ValueError, match="residual connection needs equal shapes"):
        res.unroll(4, x)
    with pytest.raises(TypeError, match="cell must be a recurrent cell"):
        rnn.rnn_cell.dynamic_unroll(mx.gluon.nn.Dense(2), x, None)


def test_bidirectional_valid_length_on_emulated_gpu():
    if mx.num_gpus() < 1:
        pytest.skip("no GPU (real or emulated)")
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    results = []
    for device in (mx.cpu(0), mx.gpu(0)):
        cell = rnn.BidirectionalCell(rnn.GRUCell(3, input_size=2), rnn.GRUCell(3, input_size=2))
        cell.initialize(mx.init.One(), device=device)
        out, states = cell.unroll(4, mx.nd.array(x, ctx=device), merge_outputs=True,
                                  valid_length=mx.nd.array([4, 2, 1], ctx=device))
        assert out.device == device
        results.append([out.asnumpy()] + [s.asnumpy() for s in states])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

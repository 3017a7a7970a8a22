"""Autograd semantics: grad_req, multi-head backward across devices, recording/training scopes, errors."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd


def leaf(values, device=None, grad_req="write"):
    t = mx.array(np.asarray(values, dtype=np.float64), device=device)
    t.attach_grad(grad_req)
    return t


# -- grad_req ----------------------------------------------------------------------------------------
def test_grad_req_write_overwrites():
    x = leaf([1.0, 2.0, 3.0])
    for _ in range(2):
        with autograd.record():
            y = (x * x).sum()
        y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, 4.0, 6.0])


def test_grad_req_add_accumulates_over_backward_calls():
    x = leaf([1.0, 2.0, 3.0], grad_req="add")
    for _ in range(2):
        with autograd.record():
            y = (x * x).sum()
        y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [4.0, 8.0, 12.0])
    x.grad[:] = 0  # the user zeroes an 'add' buffer between accumulation rounds
    with autograd.record():
        y = (x * 3.0).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [3.0, 3.0, 3.0])


def test_grad_buffer_is_updated_in_place():
    x = leaf([1.0, 2.0])
    buf = x.grad._data
    with autograd.record():
        (x * 5.0).sum().backward()
    assert x.grad._data is buf
    np.testing.assert_allclose(buf, [5.0, 5.0])


def test_grad_req_null_and_invalid():
    x = leaf([1.0, 2.0], grad_req="null")
    w = leaf([3.0, 4.0])
    assert x.grad is None and x.grad_req == "null"
    with autograd.record():
        y = (x * w).sum()
    y.backward()
    assert x.grad is None
    np.testing.assert_allclose(w.grad.asnumpy(), [1.0, 2.0])
    with pytest.raises(ValueError, match="grad_req"):
        mx.array([1.0]).attach_grad("sometimes")


def test_shared_subexpression_gradients_sum():
    x = leaf([2.0])
    with autograd.record():
        y = x * x
        z = y * y + y  # x^4 + x^2
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [4 * 8 + 2 * 2])


# -- multiple heads, multiple devices -------------------------------------------------------------------
def test_backward_list_of_heads_on_two_devices():
    w0 = leaf([1.0, 2.0], device=mx.cpu(0))
    w1 = leaf([3.0, 4.0], device=mx.cpu(1))
    with autograd.record():
        loss_a = (w0 * w0).sum()
        loss_b = (w1 * 3.0).sum()
    assert loss_a.device == mx.cpu(0) and loss_b.device == mx.cpu(1)
    autograd.backward([loss_a, loss_b])
    np.testing.assert_allclose(w0.grad.asnumpy(), [2.0, 4.0])
    np.testing.assert_allclose(w1.grad.asnumpy(), [3.0, 3.0])
    assert w0.grad.device == mx.cpu(0) and w1.grad.device == mx.cpu(1)


def test_backward_heads_sharing_a_leaf_sum():
    w = leaf([1.0, 2.0])
    with autograd.record():
        a = (w * 2.0).sum()
        b = (w * w).sum()
    autograd.backward([a, b])
    np.testing.assert_allclose(w.grad.asnumpy(), [2.0 + 2.0, 2.0 + 4.0])


def test_backward_with_head_grads():
    w = leaf([1.0, 2.0])
    with autograd.record():
        y = w * 3.0
    autograd.backward([y], [mx.array([1.0, -2.0], dtype=np.float64)])
    np.testing.assert_allclose(w.grad.asnumpy(), [3.0, -6.0])
    with autograd.record():
        y = w * 3.0
    with pytest.raises(ValueError, match="head_grad shape"):
        autograd.backward([y], [mx.array([1.0, 2.0, 3.0])])
    with pytest.raises(ValueError, match="2 heads but 1 head_grads"):
        autograd.backward([y, y], [None])


def test_graph_is_freed_unless_retained():
    w = leaf([1.0])
    with autograd.record():
        y = w * 2.0
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), [2.0])
    with pytest.raises(ValueError, match="not part of a recorded graph"):
        y.backward()


# -- scopes ---------------------------------------------------------------------------------------------
def test_pause_stops_recording():
    w = leaf([1.0, 2.0])
    with autograd.record():
        assert autograd.is_recording()
        y = w * 2.0
        with autograd.pause():
            assert not autograd.is_recording() and not autograd.is_training()
            z = w * 5.0
        assert autograd.is_recording()
    assert not autograd.is_recording()
    assert y._node is not None and z._node is None
    with pytest.raises(ValueError, match="not part of a recorded graph"):
        z.sum().backward()


def test_is_training_and_predict_mode():
    assert not autograd.is_training() and not autograd.is_recording()
    with autograd.record():
        assert autograd.is_training()
        with autograd.predict_mode():
            assert not autograd.is_training() and autograd.is_recording()
        assert autograd.is_training()
    with autograd.record(train_mode=False):
        assert not autograd.is_training()
    with autograd.train_mode():
        assert autograd.is_training() and not autograd.is_recording()
    assert not autograd.is_training()


def test_set_recording_and_set_training_return_previous():
    assert autograd.set_recording(True) is False
    try:
        assert autograd.is_recording()
    finally:
        assert autograd.set_recording(False) is True
    assert autograd.set_training(True) is False
    assert autograd.set_training(False) is True


def test_predict_mode_affects_dropout_but_still_records():
    from mxlite.ops import nn_ops

    x = leaf(np.ones((4, 4)))
    with autograd.record():
        with autograd.predict_mode():
            y = nn_ops.dropout(x * 1.0, 0.5)
        s = y.sum()
    np.testing.assert_array_equal(y.asnumpy(), np.ones((4, 4)))
    s.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.ones((4, 4)))


def test_backward_runs_in_train_mode_without_recording():
    seen = []
    x = leaf([1.0])
    with autograd.record():
        y = x * 2.0
    x.add_ready_hook(lambda t: seen.append((autograd.is_recording(), autograd.is_training())))
    y.backward()
    assert seen == [(False, True)]


# -- heads and errors -----------------------------------------------------------------------------------
def test_backward_on_non_scalar_uses_ones():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    with autograd.record():
        y = x * x  # shape (2, 2): head gradient defaults to ones
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * x.asnumpy())


def test_backward_on_unrecorded_tensor_raises():
    x = mx.array([1.0, 2.0])
    with pytest.raises(ValueError, match="not part of a recorded graph"):
        x.backward()
    w = leaf([1.0])
    y = w * 2.0  # computed outside record()
    with pytest.raises(ValueError, match="autograd.record"):
        y.backward()


def test_backward_rejects_non_tensor_head():
    with pytest.raises(TypeError, match="not a Tensor"):
        autograd.backward([np.ones(2)])


def test_mixing_devices_in_an_op_raises():
    a, b = mx.array([1.0], device=mx.cpu(0)), mx.array([2.0], device=mx.cpu(1))
    with pytest.raises(ValueError) as info:
        _ = a + b
    msg = str(info.value)
    assert "cpu(0)" in msg and "cpu(1)" in msg and "add" in msg


def test_integer_attach_grad_raises():
    with pytest.raises(TypeError, match="int32"):
        mx.array([1, 2], dtype=np.int32).attach_grad()
    mx.array([1, 2], dtype=np.int32).attach_grad("null")  # no gradient asked: fine


def test_detach_cuts_the_graph():
    x = leaf([3.0])
    with autograd.record():
        y = x * x
        z = y.detach() * x  # d/dx = y = 9 (y treated as a constant)
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [9.0])


def test_ready_hooks_fire_once_per_leaf_after_its_gradient_is_final():
    order = []
    a, b = leaf([1.0]), leaf([2.0])
    a.add_ready_hook(lambda t: order.append(("a", float(t.grad.asnumpy()[0]))))
    b.add_ready_hook(lambda t: order.append(("b", float(t.grad.asnumpy()[0]))))
    with autograd.record():
        y = (a * b) + (a * 3.0)
    y.backward()
    assert sorted(order) == [("a", 5.0), ("b", 1.0)]

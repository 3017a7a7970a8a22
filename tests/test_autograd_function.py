"""``autograd.Function``, ``mark_variables``, and MXNet 2.x's retained gradients (``attach_grad`` on a
recorded result, ``drop_grad``): behaviour beyond MXNet's own tests (tests/test_mxnet_mirror_autograd.py)."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, ops


def leaf(values, grad_req="write"):
    t = mx.array(np.asarray(values, dtype=np.float64))
    t.attach_grad(grad_req)
    return t


class Square(autograd.Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x

    def backward(self, dy):
        x, = self.saved_tensors
        return dy * 2 * x


class Split(autograd.Function):
    """Three outputs of one input; backward counts its calls."""

    calls = 0

    def forward(self, x):
        return [x * 1.0, x * 2.0, x * 3.0]

    def backward(self, da, db, dc):
        Split.calls += 1
        return da + db * 2.0 + dc * 3.0


def test_function_single_output_in_a_larger_graph():
    x = leaf([1.0, -2.0])
    with autograd.record():
        y = (Square()(x * 3.0) + x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 18 * x.asnumpy() + 1)


def test_function_backward_runs_once_with_zeros_for_unused_outputs():
    Split.calls = 0
    x = leaf([1.0, 2.0])
    with autograd.record():
        a, b, c = Split()(x)
        y = (a * 5.0 + c).sum()  # b unused: its gradient is zeros
    assert isinstance(a, mx.autograd.Tensor)
    y.backward()
    assert Split.calls == 1
    np.testing.assert_allclose(x.grad.asnumpy(), [5.0 + 3.0, 5.0 + 3.0])


def test_function_outside_record_and_returning_its_input():
    class Identity(autograd.Function):
        def forward(self, x):
            return x

        def backward(self, dy):
            return dy * 10.0

    x = leaf([1.0])
    y = Identity()(x)
    assert y is x  # not recording: forward's result as it is
    with autograd.record():
        z = Identity()(x)
        w = z * 2.0
    assert z is not x and z._node is not None and x._node is None
    w.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [20.0])


def test_function_errors():
    f = Square()
    x = leaf([1.0])
    with autograd.record():
        f(x)
    with pytest.raises(RuntimeError, match="called only once"):
        f(x)

    class TwoForOne(autograd.Function):
        def forward(self, x):
            return x * 1.0

        def backward(self, dy):
            return dy, dy

    with autograd.record():
        y = TwoForOne()(x)
    with pytest.raises(ValueError, match=r"Function\(TwoForOne\)\.backward returned 2 gradients for 1 inputs"):
        y.backward()

    class WrongShape(autograd.Function):
        def forward(self, x):
            return x * 1.0

        def backward(self, dy):
            return mx.array(np.ones(3))

    with autograd.record():
        y = WrongShape()(x)
    with pytest.raises(ValueError, match="gradient 0 must be a Tensor of its input's shape"):
        y.backward()
    with pytest.raises(TypeError, match="input 0 is a list"):
        Square()([1.0])


def test_function_has_no_second_derivative_and_says_so():
    x = leaf([1.0, 2.0])
    with autograd.record():
        y = Square()(x).sum()
    with pytest.raises(NotImplementedError, match=r"'Function\(Square\)'"):
        autograd.grad(y, [x], create_graph=True)
    g, = autograd.grad(y, [x])
    np.testing.assert_allclose(g.asnumpy(), [2.0, 4.0])


def test_mark_variables_writes_into_the_given_buffers():
    x, y = mx.array([1.0, 2.0]), mx.array([3.0])
    dx, dy = mx.zeros((2,)), mx.ones((1,))
    autograd.mark_variables([x, y], [dx, dy], grad_reqs=["write", "add"])
    assert x.grad is dx and y.grad_req == "add"
    with autograd.record():
        z = (x * y).sum()
    z.backward()
    np.testing.assert_allclose(dx.asnumpy(), [3.0, 3.0])
    np.testing.assert_allclose(dy.asnumpy(), [1.0 + 3.0])
    autograd.mark_variables(x, dx, "null")
    assert x.grad is None and x.grad_req == "null"


def test_mark_variables_errors():
    x = mx.array([1.0, 2.0])
    with pytest.raises(ValueError, match="2 variables, 1 gradients"):
        autograd.mark_variables([x, x], [mx.zeros((2,))])
    with pytest.raises(ValueError, match="gradient 0 has shape"):
        autograd.mark_variables([x], [mx.zeros((3,))])
    with pytest.raises(ValueError, match="grad_req must be one of"):
        autograd.mark_variables([x], [mx.zeros((2,))], "sometimes")
    with pytest.raises(TypeError, match="not floating point"):
        autograd.mark_variables([mx.array([1, 2], dtype=np.int32)], [mx.zeros((2,))])


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64])
def test_mark_variables_refuses_a_buffer_of_another_dtype(dtype):
    x = mx.array([1.5, 2.5])  # float32
    buffer = mx.zeros((2,), dtype=dtype)
    with pytest.raises(TypeError, match=rf"mark_variables: gradient 0 .* has dtype {np.dtype(dtype).name}, its "
                                        r"variable .* float32; a gradient buffer must have its variable's dtype"):
        autograd.mark_variables([x], [buffer])
    assert x.grad is None and x.grad_req == "null"  # nothing attached
    autograd.mark_variables([x], [buffer], "null")  # no buffer is used: any dtype goes


def test_mark_variables_refuses_a_buffer_on_another_device():
    x = mx.array([1.5, 2.5], device=mx.cpu(0))
    with pytest.raises(ValueError, match=r"gradient 0 lives on cpu\(1\), its variable on cpu\(0\)"):
        autograd.mark_variables([x], [mx.zeros((2,), device=mx.cpu(1))])


def test_mark_variables_keeps_a_fractional_gradient_exact():
    x, dx = mx.array([1.0, 2.0]), mx.zeros((2,))
    autograd.mark_variables([x], [dx])
    with autograd.record():
        y = (x * 0.25).sum()
    y.backward()
    np.testing.assert_array_equal(dx.asnumpy(), [0.25, 0.25])


def test_attach_grad_on_a_recorded_result_keeps_the_graph():
    x = leaf([1.0, 2.0])
    with autograd.record():
        u = x * 3.0
        y = (u * u).sum()
    u.attach_grad("add")
    seen = []
    u.add_ready_hook(lambda t: seen.append(t.grad.asnumpy().copy()))
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(u.grad.asnumpy(), 2 * (2 * 3.0 * x.asnumpy()))  # 'add': two passes
    np.testing.assert_allclose(x.grad.asnumpy(), 18 * x.asnumpy())  # still reaches the leaf
    assert len(seen) == 2
    u.drop_grad()
    assert u.grad is None and u.grad_req == "null"
    x.drop_grad()
    x.drop_grad()  # nothing attached: nothing to do
    assert x.grad is None and not x._requires_grad()


def test_detach_still_makes_a_leaf():
    x = leaf([2.0])
    with autograd.record():
        u = (x * x).detach()
        u.attach_grad()
        y = u * x
    y.backward()
    np.testing.assert_allclose(u.grad.asnumpy(), [2.0])
    np.testing.assert_allclose(x.grad.asnumpy(), [4.0])


def test_get_symbol_says_why_it_is_missing():
    with pytest.raises(NotImplementedError, match="not an MXNet Symbol graph"):
        autograd.get_symbol(ops.exp(mx.array([1.0])))


def test_tensor_all_any():
    t = mx.array([[1.0, 0.0], [2.0, 3.0]])
    assert not bool(t.all()) and bool(t.any())
    np.testing.assert_array_equal(t.all(axis=1).asnumpy(), [False, True])
    np.testing.assert_array_equal(t.any(axis=0, keepdims=True).asnumpy(), [[True, True]])

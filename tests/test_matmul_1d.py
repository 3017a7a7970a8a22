"""``matmul`` and ``@`` with 1-D operands follow NumPy's rules, in ``mx.np``, ``mx.nd`` and on Tensors.

A 1-D left operand is a row vector, a 1-D right operand a column vector; the added axis is removed from the
result, so two vectors give their inner product as a 0-D array. Gradients are checked against NumPy's own
products; a 0-D operand raises, naming it, as NumPy's ``matmul`` does.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd

SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((3,), (4, 3, 2)), ((4, 2, 3), (3,)), ((1, 3), (3,))]


def _values(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def _variables(a, b):
    x, y = mx.np.array(a, dtype=np.float64), mx.np.array(b, dtype=np.float64)
    x.attach_grad()
    y.attach_grad()
    return x, y


@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("face", ["np.matmul", "operator", "nd.matmul"])
def test_matmul_with_a_vector_matches_numpy(shapes, face):
    a, b = _values(shapes[0], 0), _values(shapes[1], 1)
    product = {"np.matmul": mx.np.matmul, "operator": lambda x, y: x @ y, "nd.matmul": mx.nd.matmul}[face]
    x, y = _variables(a, b)
    expected = np.matmul(a, b)
    if face == "nd.matmul":
        expected = expected.reshape(expected.shape or (1,))  # mx.nd has no 0-d arrays (MXNet 1.x)
    head = _values(expected.shape, 2)
    with autograd.record():
        out = product(x, y)
    out.backward(mx.np.array(head, dtype=np.float64))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-12)
    # d(a @ b) = head @ b^T for a, a^T @ head for b, with the vectors' axes put back as NumPy promotes them
    a2, b2 = a.reshape(1, -1) if a.ndim == 1 else a, b.reshape(-1, 1) if b.ndim == 1 else b
    h2 = head.reshape(np.matmul(a2, b2).shape)
    grad_a = np.matmul(h2, np.swapaxes(b2, -1, -2))
    grad_b = np.matmul(np.swapaxes(a2, -1, -2), h2)
    grad_a = grad_a.reshape((-1,) + grad_a.shape[-2:]).sum(axis=0) if grad_a.ndim > a2.ndim else grad_a
    grad_b = grad_b.reshape((-1,) + grad_b.shape[-2:]).sum(axis=0) if grad_b.ndim > b2.ndim else grad_b
    np.testing.assert_allclose(x.grad.asnumpy(), grad_a.reshape(a.shape), rtol=1e-12)
    np.testing.assert_allclose(y.grad.asnumpy(), grad_b.reshape(b.shape), rtol=1e-12)


def test_inner_product_of_two_vectors_is_0d():
    out = mx.np.array([1.0, 2.0, 3.0]) @ mx.np.array([4.0, 5.0, 6.0])
    assert out.shape == () and out.item() == 32.0


def test_matmul_with_a_numpy_operand():
    out = mx.np.array([[1.0, 2.0]]) @ np.array([3.0, 4.0], dtype=np.float32)
    np.testing.assert_array_equal(out.asnumpy(), [11.0])


def test_matmul_vector_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: a has shape \(3,\) \(3 columns\), "
                                         r"b has shape \(4, 2\) \(4 rows\)"):
        mx.np.matmul(mx.np.ones(3), mx.np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"inner dimensions differ: a has shape \(2, 3\) \(3 columns\), "
                                         r"b has shape \(2,\) \(2 rows\)"):
        mx.np.ones((2, 3)) @ mx.np.ones(2)
    with pytest.raises(ValueError, match=r"matmul: operand a is 0-D"):
        mx.np.matmul(mx.np.array(2.0), mx.np.ones(3))

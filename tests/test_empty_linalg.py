"""Linear algebra of empty matrices gives NumPy's results, or NumPy's refusal as an error naming the argument.

NumPy handles matrices with a zero-length axis: ``svd`` and ``eigh`` of a 0 x 0 matrix are empty, the norm of an
empty array is 0 (for the orders that take a maximum or a sum), and a product contracting an axis of length 0 is
zeros. Orders that take a minimum (``-2``, ``-1``, ``-inf``) over no values have no result: NumPy raises, and so
does mxlite, naming ``ord`` and the shape. Each case runs on the CPU and, marked ``gpu``, on a GPU.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd

DEVICES = ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.requires_gpus(1)])]
EMPTY = [(0, 0), (0, 3), (3, 0), (2, 0, 0), (2, 3, 0)]


def _device(kind):
    return mx.cpu(0) if kind == "cpu" else mx.gpu(0)


def _zeros(shape, kind):
    return mx.np.zeros(shape, dtype=np.float64, device=_device(kind))


def _same(got, expected):
    got = got if isinstance(got, (tuple, list)) else [got]
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == np.shape(e), f"shape {g.shape}, NumPy's {np.shape(e)}"
        np.testing.assert_array_equal(g.asnumpy(), e)


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("shape", EMPTY, ids=str)
def test_svd_of_an_empty_matrix_is_numpys_reduced_svd(kind, shape):
    _same(mx.np.linalg.svd(_zeros(shape, kind)), np.linalg.svd(np.zeros(shape), full_matrices=False))


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0)], ids=str)
def test_eigh_of_an_empty_matrix_is_empty(kind, shape):
    _same(mx.np.linalg.eigh(_zeros(shape, kind)), np.linalg.eigh(np.zeros(shape)))


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("ord", [None, "fro", "nuc", 1, 2, np.inf, "inf"], ids=str)
@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0)], ids=str)
def test_matrix_norm_of_an_empty_matrix_is_zero(kind, ord, shape):
    x = _zeros(shape, kind)
    x.attach_grad()
    with autograd.record():
        out = mx.np.linalg.norm(x, ord=ord)
    out.backward()
    assert out.shape == () and out.item() == 0.0
    assert x.grad.shape == shape


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("ord", [None, 0, 1, 2, 3, np.inf], ids=str)
def test_vector_norms_of_empty_vectors_are_numpys(kind, ord):
    assert mx.np.linalg.norm(_zeros((0,), kind), ord=ord).item() == 0.0
    _same(mx.np.linalg.norm(_zeros((3, 0), kind), ord=ord, axis=1), np.linalg.norm(np.zeros((3, 0)), ord=ord, axis=1))
    _same(mx.np.linalg.norm(_zeros((2, 0, 3), kind), ord=ord, axis=-1),
          np.linalg.norm(np.zeros((2, 0, 3)), ord=ord, axis=-1))


@pytest.mark.parametrize("ord, shape", [(-2, (0, 0)), (-2, (3, 0)), (-1, (3, 0)), (-np.inf, (0, 3)),
                                        (-np.inf, (0,))], ids=str)
def test_norms_taking_a_minimum_over_nothing_name_ord_and_shape(ord, shape):
    with pytest.raises(ValueError):
        np.linalg.norm(np.zeros(shape), ord=ord)  # NumPy refuses them too
    with pytest.raises(ValueError, match=re.escape(f"norm: ord={ord!r} takes a minimum over an empty axis of x "
                                                   f"(shape {shape})")):
        mx.np.linalg.norm(mx.np.zeros(shape), ord=ord)


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("shapes", [((0, 3), (3, 2)), ((2, 0), (0, 3)), ((0,), (0,)), ((3, 0), (0,)),
                                    ((0,), (0, 2)), ((2, 3, 0), (0, 4)), ((0, 2), (2, 0))], ids=str)
def test_products_over_an_empty_axis_are_zeros(kind, shapes):
    a, b = np.zeros(shapes[0]), np.zeros(shapes[1])
    x, y = _zeros(shapes[0], kind), _zeros(shapes[1], kind)
    _same(mx.np.dot(x, y), np.dot(a, b))
    _same(mx.nd.dot(x, y), np.atleast_1d(np.tensordot(a, b, axes=1)))  # mx.nd has no 0-d arrays (MXNet 1.x)
    _same(mx.np.matmul(x, y), np.matmul(a, b))


def test_gradient_of_a_product_over_an_empty_axis():
    x, y = mx.np.zeros((2, 0)), mx.np.ones((0, 3))
    x.attach_grad()
    y.attach_grad()
    with autograd.record():
        out = mx.np.dot(x, y)
    out.backward()
    assert x.grad.shape == (2, 0) and y.grad.shape == (0, 3)
    np.testing.assert_array_equal(out.asnumpy(), np.zeros((2, 3)))

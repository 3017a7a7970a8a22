"""MXNet 1.x's ``mx.nd`` semantics that change numbers when they differ: each expected value is MXNet 1.9.1's.

* Comparisons and logic in the nd face give 1 and 0 in the operands' dtype (MXNet 1.9.1's ``ndarray.py``
  docstrings: ``(x > y).asnumpy()`` is ``array([[1., 1., 1.], [0., 0., 0.]], dtype=float32)``); ``mx.np`` keeps
  NumPy's bool, and ``bool_array * 3`` is 3 where true (NumPy's rule).
* A NumPy scalar (``np.float64(2)``, ``np.sqrt(4)``, a 0-d NumPy array) is a scalar operand: it takes the array's
  dtype (MXNet's ``_ufunc_helper`` treats ``numeric_types = (float, int, numpy.generic)`` as scalars).
* The nd face has no 0-d arrays: ``x[0]`` of a 1-D array and a reduction to one value have shape ``(1,)``
  (MXNet 1.9.1's ``test_ndarray.py::test_reduce`` accepts ``ndarray_ret.shape == (1,)`` where NumPy gives
  ``()``); ``mx.np`` gives 0-d arrays.
* ``collect_params()`` lists a Parameter reachable under two names once (MXNet 1.x's ``ParameterDict`` holds
  each Parameter once).
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd
from mxlite.gluon import nn

COMPARISONS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]
ND_FUNCTIONS = [("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
                ("greater_equal", np.greater_equal), ("lesser", np.less), ("lesser_equal", np.less_equal),
                ("logical_and", np.logical_and), ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)]


# -- comparisons -------------------------------------------------------------------------------
def test_nd_comparisons_are_float_ones_and_zeros_as_in_mxnet_docs():
    x = mx.nd.ones((2, 3))
    y = mx.nd.arange(2).reshape((2, 1))
    for got, want in (((x > 1), [[0, 0, 0], [0, 0, 0]]), ((x > y), [[1, 1, 1], [0, 0, 0]]),
                      (mx.nd.logical_and(x, 1), [[1, 1, 1], [1, 1, 1]]),
                      (mx.nd.logical_and(x, y), [[0, 0, 0], [1, 1, 1]])):
        assert got.dtype == np.float32 and isinstance(got, mx.nd.NDArray)
        np.testing.assert_array_equal(got.asnumpy(), np.array(want, dtype=np.float32))


def test_summed_masks_count_as_in_mxnet():
    a, b = mx.nd.array([1, -1, 2]), mx.nd.array([-1, -1, 3])
    np.testing.assert_array_equal(((a > 0) + (b > 0)).asnumpy(), np.array([1, 0, 2], dtype=np.float32))
    np.testing.assert_array_equal(((a > 0) * 3).asnumpy(), np.array([3, 0, 3], dtype=np.float32))


@pytest.mark.parametrize("op", COMPARISONS, ids=lambda op: op.__name__)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_nd_comparison_operators_keep_the_dtype(op, dtype):
    a = np.array([[1, -1, 2], [0, 3, 3]], dtype=dtype)
    b = np.array([[1, 0, 2], [1, 3, -2]], dtype=dtype)
    x, y = mx.nd.array(a, dtype=dtype), mx.nd.array(b, dtype=dtype)
    for got, want in ((op(x, y), op(a, b)), (op(x, 1), op(a, 1)), (op(1, x), op(1, a))):
        assert got.dtype == np.dtype(dtype), (op, got.dtype)
        np.testing.assert_array_equal(got.asnumpy(), want.astype(dtype))


@pytest.mark.parametrize("name,reference", ND_FUNCTIONS, ids=[n for n, _ in ND_FUNCTIONS])
def test_nd_comparison_functions_keep_the_dtype(name, reference):
    a = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 3.0]], dtype=np.float32)
    b = np.array([[1.0], [0.0]], dtype=np.float32)
    x, y = mx.nd.array(a), mx.nd.array(b)
    want = reference(a, b).astype(np.float32)
    for fn in (getattr(mx.nd, name), getattr(mx.nd, "broadcast_" + name)):
        got = fn(x, y)
        assert got.dtype == np.float32, (fn.__name__, got.dtype)
        np.testing.assert_array_equal(got.asnumpy(), want)
    same_shape = getattr(mx.nd, "elemwise_" + name)(x, x)
    np.testing.assert_array_equal(same_shape.asnumpy(), reference(a, a).astype(np.float32))


def test_nd_logical_not_and_operators():
    x = mx.nd.array([0.0, 2.0, -1.0])
    assert mx.nd.logical_not(x).dtype == np.float32
    np.testing.assert_array_equal(mx.nd.logical_not(x).asnumpy(), np.array([1, 0, 0], dtype=np.float32))
    mask = x > 0
    assert (~mask).dtype == (mask & mask).dtype == (mask | mask).dtype == (mask ^ mask).dtype == np.float32
    np.testing.assert_array_equal((~mask).asnumpy(), np.array([1, 0, 1], dtype=np.float32))
    np.testing.assert_array_equal((mask & (x < 3)).asnumpy(), np.array([0, 1, 0], dtype=np.float32))
    np.testing.assert_array_equal((mask | (x < 0)).asnumpy(), np.array([0, 1, 1], dtype=np.float32))


def test_np_comparisons_stay_bool_and_bool_times_an_int_counts():
    a, b = mx.np.array([1, -1, 2]), mx.np.array([-1, -1, 3])
    assert (a > 0).dtype == np.bool_ and mx.np.greater(a, 0).dtype == np.bool_
    np.testing.assert_array_equal(((a > 0) + (b > 0)).asnumpy(), [True, False, True])  # NumPy's bool +
    times = (a > 0) * 3
    assert times.dtype == np.int64  # NumPy: bool_array * 3 is int64, 3 where true
    np.testing.assert_array_equal(times.asnumpy(), [3, 0, 3])
    np.testing.assert_array_equal(((a > 0) * 0.5).asnumpy(), np.array([0.5, 0, 0.5], dtype=np.float32))


def test_nd_comparison_of_an_np_array_through_the_nd_function():
    got = mx.nd.greater(mx.np.array([1.0, -1.0]), 0)
    assert isinstance(got, mx.nd.NDArray) and got.dtype == np.float32
    np.testing.assert_array_equal(got.asnumpy(), [1.0, 0.0])


# -- NumPy scalars are scalars -----------------------------------------------------------------
@pytest.mark.parametrize("face", [mx.np, mx.nd])
def test_numpy_scalars_do_not_promote_a_float32_array(face):
    x = face.ones(2, dtype="float32")
    for got in (x / np.sqrt(4), x * np.float64(2), np.float64(2) * x, x + np.array(1.5), x - np.int64(1),
                np.float64(1) / x):
        assert got.dtype == np.float32, got.dtype
    np.testing.assert_array_equal((x / np.sqrt(4)).asnumpy(), [0.5, 0.5])
    np.testing.assert_array_equal((x * np.float64(2)).asnumpy(), [2.0, 2.0])


def test_numpy_scalars_keep_int_and_float16_arrays():
    assert (mx.np.array([1, 2], dtype="int32") * np.int64(3)).dtype == np.int32
    assert (mx.np.array([1, 2], dtype="float16") * np.float64(0.5)).dtype == np.float16
    ints = mx.np.array([1, 2], dtype="int32")
    assert (ints * np.float64(0.5)).dtype == (ints * 0.5).dtype  # as a Python float


def test_a_float32_model_takes_an_input_scaled_by_a_numpy_scalar():
    net = nn.Dense(3, in_units=2)
    net.initialize()
    x = mx.np.ones((4, 2), dtype="float32") / np.sqrt(2.0)  # a float64 input would be refused by the layer
    assert net(x).dtype == np.float32


# -- MXNet 1.x's shapes in the nd face ---------------------------------------------------------
def test_integer_index_of_a_1d_nd_array_has_shape_1():
    x = mx.nd.array([5.0, 6.0, 7.0])
    assert x[0].shape == (1,) and x[0].asnumpy()[0] == 5.0
    assert x[-1].asscalar() == 7.0
    assert mx.nd.arange(6).reshape((2, 3))[1, 2].shape == (1,)
    assert mx.np.array([5.0, 6.0])[0].shape == ()  # NumPy's rule in mx.np


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod", "norm"])
def test_reductions_to_one_value_have_shape_1(reduce):
    data = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    x = mx.nd.array(data)
    whole = getattr(mx.nd, reduce)(x)
    assert whole.shape == (1,)
    want = np.linalg.norm(data) if reduce == "norm" else getattr(np, reduce)(data)
    np.testing.assert_allclose(whole.asscalar(), want, rtol=1e-6)
    assert getattr(mx.np, reduce if reduce != "norm" else "sum")(mx.np.array(data)).shape == ()
    assert getattr(x, reduce)().shape == (1,)
    assert getattr(mx.nd, reduce)(x, axis=1).shape == (2,)


def test_other_scalar_results_have_shape_1():
    v = mx.nd.array([1.0, 2.0, 3.0])
    assert mx.nd.dot(v, v).shape == (1,) and mx.nd.dot(v, v).asscalar() == 14.0
    assert v.argmax().shape == (1,) and mx.nd.argmax(v, axis=0).shape == (1,)
    assert mx.nd.random.uniform().shape == (1,)  # MXNet 1.x draws shape=1 when no shape is given
    assert mx.nd.array(3.0).shape == ()  # creation keeps the shape asked for


def test_gradients_flow_through_the_1x_shapes():
    x = mx.nd.array([1.0, 2.0, 3.0])
    x.attach_grad()
    with autograd.record():
        y = x[1] * 2 + mx.nd.sum(x * x)
    assert y.shape == (1,)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, 6.0, 6.0])


def test_second_derivative_through_a_1x_scalar():
    x = mx.nd.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = mx.nd.sum(x ** 3)
        dx, = autograd.grad(y, [x], create_graph=True)
        z = mx.nd.sum(dx)
    z.backward()
    np.testing.assert_allclose(dx.asnumpy(), [3.0, 12.0])
    np.testing.assert_allclose(x.grad.asnumpy(), [6.0, 12.0])  # d/dx sum(3 x^2) = 6 x


# -- collect_params lists each Parameter once -----------------------------------------------------
class _TwoNames(nn.Block):
    def __init__(self):
        super().__init__()
        self.body = nn.Dense(3, in_units=2)
        self.head = nn.Dense(1, in_units=3)
        self.features = self.body  # the same child under a second name

    def forward(self, x):
        return self.head(self.features(x))


def test_collect_params_lists_a_child_under_two_names_once():
    net = _TwoNames()
    params = net.collect_params()
    assert list(params) == ["body.weight", "body.bias", "head.weight", "head.bias"]
    assert sum(int(np.prod(p.shape)) for p in params.values()) == 6 + 3 + 3 + 1
    assert params["features.weight"] is net.body.weight  # the other name still resolves
    assert list(net.collect_params(".*weight")) == ["body.weight", "head.weight"]


def test_save_and_load_keep_every_name_of_a_shared_child(tmp_path):
    net = _TwoNames()
    net.initialize()
    net.save_parameters(str(tmp_path / "p.npz"))
    saved = mx.nd.load(str(tmp_path / "p.npz"))
    assert sorted(saved) == ["body.bias", "body.weight", "features.bias", "features.weight", "head.bias",
                             "head.weight"]  # as MXNet's save_parameters (deduplicate=False)
    other = _TwoNames()
    other.load_parameters(str(tmp_path / "p.npz"))
    np.testing.assert_array_equal(other.body.weight.data().asnumpy(), net.body.weight.data().asnumpy())
    net.save_parameters(str(tmp_path / "d.npz"), deduplicate=True)
    assert sorted(mx.nd.load(str(tmp_path / "d.npz"))) == ["body.bias", "body.weight", "head.bias", "head.weight"]

"""mx.nd / mx.np / mx.npx: MXNet's names and conventions, and gradient checks of the new ops (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, nd, ops
from tests.gradcheck import check_grad

RNG = np.random.default_rng(7)


def rand(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


UNARY = [("sin", ops.sin, np.sin, rand(3, 4)), ("cos", ops.cos, np.cos, rand(3, 4)),
         ("tan", ops.tan, np.tan, rand(3, 4)), ("arctan", ops.arctan, np.arctan, rand(3, 4)),
         ("arcsin", ops.arcsin, np.arcsin, rand(3, 4, low=-0.8, high=0.8)),
         ("sinh", ops.sinh, np.sinh, rand(3, 4)), ("cosh", ops.cosh, np.cosh, rand(3, 4)),
         ("log1p", ops.log1p, np.log1p, rand(3, 4, low=0.1, high=2)), ("expm1", ops.expm1, np.expm1, rand(3, 4)),
         ("log2", ops.log2, np.log2, rand(3, 4, low=0.5, high=2)),
         ("reciprocal", ops.reciprocal, np.reciprocal, rand(3, 4, low=0.5, high=2)),
         ("erf", ops.erf, None, rand(3, 4))]


@pytest.mark.parametrize("name,op,ref,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_grad(name, op, ref, x):
    if ref is not None:
        np.testing.assert_allclose(op(mx.array(x, dtype=np.float64)).asnumpy(), ref(x), rtol=1e-12)
    check_grad(op, [x])


@pytest.mark.parametrize("fn", [
    lambda x: ops.prod(x, axis=1), lambda x: ops.prod(x), lambda x: ops.norm(x, axis=0),
    lambda x: ops.var(x, axis=1), lambda x: ops.logsumexp(x, axis=1), lambda x: ops.cumsum(x, axis=1),
    lambda x: ops.tile(x, (2, 3)), lambda x: ops.repeat(x, 2, axis=1), lambda x: ops.repeat(x, 3),
    lambda x: ops.flip(x, 1), lambda x: ops.slice_axis(x, 1, 1, 3), lambda x: ops.sort(x, 1),
    lambda x: nd.topk(x, k=2, ret_typ="value"), lambda x: nd.reshape(x, (-1, 0)),
])
def test_shape_reduction_grads(fn):
    check_grad(fn, [rand(3, 4)])


def test_prod_with_zero_gradient():
    x = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0]])
    check_grad(lambda t: ops.prod(t, axis=1), [x])


def test_batch_dot_and_dot_grads():
    check_grad(lambda a, b: nd.batch_dot(a, b, transpose_b=True), [rand(2, 3, 4), rand(2, 5, 4)])
    check_grad(lambda a, b: nd.dot(a, b), [rand(2, 3, 4), rand(4, 5)])
    check_grad(lambda a, b: mx.np.dot(a, b), [rand(4), rand(4)])


def test_nd_creation_conventions():
    a = nd.zeros((2, 3), ctx=mx.cpu(1))
    assert a.context == mx.cpu(1) and a.dtype == np.float32 and a.ctx == mx.cpu(1)
    assert nd.array([1, 2]).dtype == np.float32  # MXNet: lists become float32
    assert nd.full((2,), 7).asnumpy().tolist() == [7, 7]
    np.testing.assert_allclose(nd.arange(0, 3, repeat=2).asnumpy(), [0, 0, 1, 1, 2, 2])
    np.testing.assert_allclose(nd.linspace(0, 1, 5).asnumpy(), np.linspace(0, 1, 5), rtol=1e-6)
    np.testing.assert_allclose(nd.eye(3, k=1).asnumpy(), np.eye(3, k=1))
    assert nd.random.uniform(shape=(2, 3), ctx=mx.cpu()).shape == (2, 3)
    assert nd.random.normal(0, 1, shape=(4,)).dtype == np.float32
    assert nd.ones_like(a).asnumpy().sum() == 6


def test_np_creation_conventions():
    assert mx.np.random.uniform(size=(2, 3)).shape == (2, 3)
    assert mx.np.zeros((2,), device=mx.cpu(1)).device == mx.cpu(1)
    assert mx.np.ones((2,), ctx=mx.cpu(1)).device == mx.cpu(1)
    assert mx.np.arange(3).dtype == np.float32
    assert mx.np.random.randint(0, 5, size=(10,)).asnumpy().max() < 5


def test_nd_reshape_codes():
    # the examples of MXNet's reshape documentation
    x = nd.zeros((2, 3, 4))
    assert nd.reshape(x, (4, 0, 2)).shape == (4, 3, 2)
    assert nd.reshape(x, (2, 0, 0)).shape == (2, 3, 4)
    assert nd.reshape(nd.zeros((2, 3, 4)), (6, 1, -1)).shape == (6, 1, 4)
    assert nd.reshape(x, (3, -1, 8)).shape == (3, 1, 8)
    assert nd.reshape(x, (-1,)).shape == (24,)
    assert nd.reshape(x, (-2,)).shape == (2, 3, 4)
    assert nd.reshape(x, (2, -2)).shape == (2, 3, 4)
    assert nd.reshape(x, (-2, 1, 1)).shape == (2, 3, 4, 1, 1)
    assert nd.reshape(x, (-3, 4)).shape == (6, 4)
    assert nd.reshape(nd.zeros((2, 3, 4, 5)), (-3, -3)).shape == (6, 20)
    assert nd.reshape(x, (0, -3)).shape == (2, 12)
    assert nd.reshape(x, (-3, -2)).shape == (6, 4)
    assert nd.reshape(x, (-4, 1, 2, -2)).shape == (1, 2, 3, 4)
    assert nd.reshape(x, (2, -4, -1, 3, -2)).shape == (2, 1, 3, 4)
    assert nd.reshape(nd.zeros((10, 5, 4)), (-1, 0), reverse=True).shape == (50, 4)
    with pytest.raises(ValueError, match="reshape"):
        nd.reshape(x, (5, -1))


def test_npx_reshape_codes():
    x = mx.np.zeros((2, 3, 4))
    assert mx.npx.reshape(x, (-2, -2, -2)).shape == (2, 3, 4)
    assert mx.npx.reshape(x, (-4,)).shape == (2, 3, 4)
    assert mx.npx.reshape(x, (-5, -2)).shape == (6, 4)
    assert mx.npx.reshape(x, (-6, 1, 2, -4)).shape == (1, 2, 3, 4)
    assert mx.npx.reshape(mx.np.zeros((1, 3)), (-3, -2)).shape == (3,)


def test_nd_math_conventions():
    x = nd.array([[1, 5, 3], [4, 2, 6]])
    assert nd.concat(x, x).shape == (2, 6)  # dim=1 default
    assert nd.concat(x, x, dim=0).shape == (4, 3)
    assert mx.np.concatenate([x, x], axis=0).shape == (4, 3)
    assert nd.stack(x, x, axis=1).shape == (2, 2, 3)
    assert len(nd.split(x, 3)) == 3 and nd.split(x, 3)[0].shape == (2, 1)  # axis=1 default
    assert nd.split(x, 3, squeeze_axis=True)[0].shape == (2,)
    assert nd.argmax(x, axis=1).dtype == np.float32 and mx.np.argmax(x, axis=1).dtype == np.int64
    np.testing.assert_allclose(nd.argmax(x, axis=1).asnumpy(), [1, 2])
    np.testing.assert_allclose(nd.sum(x, axis=1, exclude=True).asnumpy(), [5, 7, 9])
    np.testing.assert_allclose(nd.broadcast_to(nd.array([[1], [2]]), (0, 3)).asnumpy(), [[1, 1, 1], [2, 2, 2]])
    np.testing.assert_allclose(nd.slice_axis(x, axis=1, begin=1, end=3).asnumpy(), [[5, 3], [2, 6]])
    np.testing.assert_allclose(nd.take(x, nd.array([1, 0])).asnumpy(), [[4, 2, 6], [1, 5, 3]])
    np.testing.assert_allclose(nd.pick(x, nd.array([0, 2]), axis=1).asnumpy(), [1, 6])
    np.testing.assert_allclose(nd.topk(x, k=1).asnumpy(), [[1], [2]])
    np.testing.assert_allclose(nd.topk(x, k=2, ret_typ="value", is_ascend=True).asnumpy(), [[1, 3], [2, 4]])
    np.testing.assert_allclose(nd.topk(x, k=1, ret_typ="mask").asnumpy(), [[0, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(nd.one_hot(nd.array([1, 0]), 3).asnumpy(), [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(nd.norm(nd.array([3, 4])).asscalar(), 5)
    np.testing.assert_allclose(nd.clip(x, 2, 4).asnumpy(), np.clip(x.asnumpy(), 2, 4))
    np.testing.assert_allclose(nd.where(x > 3, x, nd.zeros_like(x)).asnumpy(), [[0, 5, 0], [4, 0, 6]])
    np.testing.assert_allclose(mx.npx.softmax(x).asnumpy().sum(axis=-1), [1, 1], rtol=1e-6)
    np.testing.assert_allclose(mx.npx.log_softmax(x).exp().asnumpy().sum(axis=-1), [1, 1], rtol=1e-6)
    assert mx.npx.topk(x, k=1).dtype == np.int64
    np.testing.assert_allclose(mx.np.tile(nd.array([1, 2]), 2).asnumpy(), [1, 2, 1, 2])
    np.testing.assert_allclose(mx.np.repeat(nd.array([1, 2]), 2).asnumpy(), [1, 1, 2, 2])


def test_tensor_methods():
    x = nd.array([[1, 2], [3, 4]])
    assert x.asnumpy().dtype == np.float32
    assert nd.array([5]).asscalar() == 5 and isinstance(nd.array([5]).item(), float)
    y = x.copy()
    y[0, 0] = 9
    assert x.asnumpy()[0, 0] == 1
    z = nd.zeros((2, 2))
    x.copyto(z)
    assert z.asnumpy().tolist() == [[1, 2], [3, 4]]
    assert x.as_in_context(mx.cpu(1)).context == mx.cpu(1)
    assert x.as_in_ctx(mx.cpu(1)).ctx == mx.cpu(1) and x.to_device(mx.cpu(2)).device == mx.cpu(2)
    assert x.astype("int32").dtype == np.int32
    assert np.asarray(x).tolist() == [[1, 2], [3, 4]]
    np.testing.assert_allclose(x[nd.array([1, 0])].asnumpy(), [[3, 4], [1, 2]])  # float index array
    assert (x > 2).asnumpy().tolist() == [[False, False], [True, True]]
    x.attach_grad()
    with autograd.record():
        loss = (x * x).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * x.asnumpy())
    assert x.detach()._node is None


def test_numpy_inputs_are_converted():
    net = mx.nn.Dense(2, in_units=3)
    net.initialize()
    out = net(np.ones((4, 3), dtype=np.float32))
    assert out.shape == (4, 2)
    loss = mx.gluon.loss.L2Loss()(out, np.zeros((4, 2), dtype=np.float32))
    assert loss.shape == (4,)
    assert nd.relu(np.array([-1.0, 2.0])).asnumpy().tolist() == [0, 2]
    assert (nd.array([1.0]) + np.array([2.0])).asnumpy().tolist() == [3]


@pytest.mark.parametrize("container", ["list", "dict"])
def test_save_load(tmp_path, container):
    a, b = nd.array([1, 2]), nd.ones((2, 2))
    path = tmp_path / "arrays"
    data = [a, b] if container == "list" else {"a": a, "b": b}
    nd.save(path, data)
    back = nd.load(path)
    if container == "list":
        assert isinstance(back, list) and back[0].asnumpy().tolist() == [1, 2] and back[1].shape == (2, 2)
    else:
        assert set(back) == {"a", "b"} and back["b"].shape == (2, 2)
    mx.npx.save(path, data)
    assert type(mx.npx.load(path)) is type(back)
    with open(path, "rb") as f:
        assert f.read(2) == b"PK"  # an npz (zip) archive: no pickle


def test_waitall():
    mx.nd.waitall()
    mx.npx.waitall()


@pytest.mark.gpu
def test_ops_on_emulated_gpu():
    if mx.num_gpus() < 1:
        pytest.skip("no GPU")
    x = nd.array([[1, 2], [3, 4]], ctx=mx.gpu(0))
    assert nd.reshape(x, (-1,)).context == mx.gpu(0)
    np.testing.assert_allclose(nd.topk(x, k=1, ret_typ="value").asnumpy(), [[2], [4]])
    np.testing.assert_allclose(ops.erf(x.astype("float64")).asnumpy(), ops.erf(mx.array(x.asnumpy(), dtype="float64"))
                               .asnumpy(), rtol=1e-12)
    check_grad(lambda t: ops.prod(ops.tile(t, (1, 2)), axis=1), [rand(2, 3)], device=mx.gpu(0))


def test_reset_arrays_take_method_np_shape():
    a, b = nd.ones((2, 3)), mx.np.ones((4,), dtype="float16")
    assert nd.reset_arrays(a, b, num_arrays=2) is None
    assert a.asnumpy().tolist() == [[0.0] * 3] * 2 and b.asnumpy().tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="num_arrays"):
        nd.reset_arrays(a, num_arrays=2)
    with pytest.raises(TypeError, match="argument 0"):
        nd.reset_arrays(np.ones(2))
    x = mx.np.array([[1.0, 2.0], [3.0, 4.0]])
    assert x.take(mx.np.array([3, 0])).asnumpy().tolist() == [4.0, 1.0]  # axis None: the flattened array
    assert x.take([1], axis=1).asnumpy().tolist() == [[2.0], [4.0]]
    with pytest.raises(IndexError):
        x.take([4])  # mode 'raise' by default, as MXNet 2.x's ndarray.take
    assert x.take([4], mode="clip").asnumpy().tolist() == [4.0]
    x.attach_grad()
    with autograd.record():
        y = x.take(mx.np.array([1, 1]), axis=0).sum()
    y.backward()
    assert x.grad.asnumpy().tolist() == [[0.0, 0.0], [2.0, 2.0]]
    with mx.np_shape(True):
        assert mx.np.zeros((0, 3)).shape == (0, 3)

    @mx.np_shape()
    def scalar() -> tuple:
        return mx.np.array(1.0).shape

    assert scalar() == ()


def test_logsumexp_of_infinite_slices_is_numpys():
    """An all -inf slice gives -inf and a +inf gives +inf (shifting by an infinite maximum would give NaN)."""
    x = np.array([[-np.inf, -np.inf], [0.0, np.inf], [1.0, 2.0]], np.float64)
    with np.errstate(divide="ignore"):  # log(0) of the -inf slice, as in NumPy
        got = mx.ops.logsumexp(mx.array(x), axis=1).asnumpy()
        want = np.log(np.sum(np.exp(x), axis=1))
    np.testing.assert_allclose(got, want, rtol=1e-15)  # the shift by the maximum rounds differently

"""gluon.contrib.nn and gluon.contrib.rnn: MXNet 1.9's contributed layers under their 1.x import paths.

The layer tests mirror MXNet 1.9.1's tests/python/unittest/test_gluon_contrib.py (``test_concurrent``,
``test_identity``, ``test_sparse_embedding``, ``test_pixelshuffle1d/2d/3d``) with its expected values; the
symbol half of ``test_concurrent`` is left out (mxlite has no ``mx.sym`` graphs to compose).
"""

import numpy as np
import pytest

import mxlite as mx
from mxlite import gluon
from mxlite.gluon import contrib, nn
from mxlite.gluon.contrib.nn import (
    Concurrent,
    HybridConcurrent,
    Identity,
    PixelShuffle1D,
    PixelShuffle2D,
    PixelShuffle3D,
    SparseEmbedding,
    SyncBatchNorm,
)

# MXNet 1.9's gluon/contrib/nn/basic_layers.py __all__.
MXNET_CONTRIB_NN = ["Concurrent", "HybridConcurrent", "Identity", "SparseEmbedding", "SyncBatchNorm",
                    "PixelShuffle1D", "PixelShuffle2D", "PixelShuffle3D"]
# MXNet 1.9's gluon/contrib/rnn __all__ (conv_rnn_cell.py, rnn_cell.py).
MXNET_CONTRIB_RNN = ["Conv1DRNNCell", "Conv2DRNNCell", "Conv3DRNNCell", "Conv1DLSTMCell", "Conv2DLSTMCell",
                     "Conv3DLSTMCell", "Conv1DGRUCell", "Conv2DGRUCell", "Conv3DGRUCell", "VariationalDropoutCell",
                     "LSTMPCell"]


def test_every_mxnet_contrib_name_imports():
    assert sorted(contrib.nn.__all__) == sorted(MXNET_CONTRIB_NN)
    assert sorted(contrib.rnn.__all__) == sorted(MXNET_CONTRIB_RNN)
    assert mx.gluon.contrib is contrib
    for name in ("Identity", "SyncBatchNorm", "PixelShuffle1D", "PixelShuffle2D", "PixelShuffle3D"):
        assert getattr(contrib.nn, name) is getattr(nn, name)
    for name in MXNET_CONTRIB_RNN:
        assert getattr(contrib.rnn, name) is getattr(gluon.rnn, name)


def test_concurrent():
    """Mirrors MXNet's ``test_concurrent`` (its NDArray half): three Dense layers side by side give 224 features."""
    model = HybridConcurrent(axis=1)
    model.add(nn.Dense(128, activation="tanh", in_units=10))
    model.add(nn.Dense(64, activation="tanh", in_units=10))
    model.add(nn.Dense(32, in_units=10))
    model2 = Concurrent(axis=1)
    model2.add(nn.Dense(128, activation="tanh", in_units=10))
    model2.add(nn.Dense(64, activation="tanh", in_units=10))
    model2.add(nn.Dense(32, in_units=10))
    model.initialize(mx.init.Xavier(magnitude=2.24))
    model2.initialize(mx.init.Xavier(magnitude=2.24))
    x = model(mx.nd.zeros((32, 10)))
    x2 = model2(mx.nd.zeros((32, 10)))
    assert x.shape == (32, 224)
    assert x2.shape == (32, 224)
    x.wait_to_read()
    x2.wait_to_read()


def test_concurrent_joins_the_childrens_outputs_in_order():
    """Each child sees the input; the outputs are concatenated in the order added, on the last axis by default;
    a slice is a Concurrent on the same axis."""
    net = Concurrent()
    net.add(nn.Dense(2, in_units=3, weight_initializer=mx.init.One(), bias_initializer=mx.init.Zero()))
    net.add(Identity())
    net.initialize()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = net(mx.nd.array(x)).asnumpy()
    np.testing.assert_array_equal(out, np.concatenate([np.repeat(x.sum(1, keepdims=True), 2, axis=1), x], axis=1))
    part = net[1:]
    assert isinstance(part, Concurrent) and part.axis == -1
    np.testing.assert_array_equal(part(mx.nd.array(x)).asnumpy(), x)
    assert Concurrent(axis=1, prefix="branches_").prefix == "branches_"


def test_identity():
    """Mirrors MXNet's ``test_identity``."""
    model = Identity()
    x = mx.nd.random.uniform(shape=(128, 33, 64))
    np.testing.assert_array_equal(model(x).asnumpy(), x.asnumpy())


def test_sparse_embedding():
    """Mirrors MXNet's ``test_sparse_embedding``: the weight gradient is 1 on the rows looked up, 0 elsewhere."""
    layer = SparseEmbedding(10, 100)
    layer.initialize()
    mx.gluon.Trainer(layer.collect_params(), "sgd")
    x = mx.nd.array([3, 4, 2, 0, 1])
    with mx.autograd.record():
        y = layer(x)
        y.backward()
    assert (layer.weight.grad().asnumpy()[:5] == 1).all()
    assert (layer.weight.grad().asnumpy()[5:] == 0).all()


def test_sparse_embedding_looks_up_rows_with_a_row_sparse_gradient():
    layer = SparseEmbedding(4, 3, dtype="float64", weight_initializer=mx.init.Constant(np.arange(12.0).reshape(4, 3)))
    layer.initialize()
    out = layer(mx.nd.array([[2, 0]]))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.asnumpy(), [[[6, 7, 8], [0, 1, 2]]])
    assert layer.weight.grad_stype == "row_sparse"
    assert repr(layer) == "SparseEmbedding(4 -> 3, float64)"
    with pytest.raises(ValueError, match="input_dim and output_dim must be > 0"):
        SparseEmbedding(0, 3)


def test_pixelshuffle1d():
    """Mirrors MXNet's ``test_pixelshuffle1d``."""
    nchan, up_x, nx = 2, 2, 3
    shape_before = (1, nchan * up_x, nx)
    shape_after = (1, nchan, nx * up_x)
    layer = PixelShuffle1D(up_x)
    x = mx.nd.arange(np.prod(shape_before)).reshape(shape_before)
    y = layer(x)
    assert y.shape == shape_after
    np.testing.assert_allclose(y.asnumpy(), [[[0, 3, 1, 4, 2, 5], [6, 9, 7, 10, 8, 11]]])


def test_pixelshuffle2d():
    """Mirrors MXNet's ``test_pixelshuffle2d``."""
    nchan, up_x, up_y, nx, ny = 2, 2, 3, 2, 3
    shape_before = (1, nchan * up_x * up_y, nx, ny)
    shape_after = (1, nchan, nx * up_x, ny * up_y)
    layer = PixelShuffle2D((up_x, up_y))
    x = mx.nd.arange(np.prod(shape_before)).reshape(shape_before)
    y = layer(x)
    assert y.shape == shape_after
    np.testing.assert_allclose(y.asnumpy(), [[[[0, 6, 12, 1, 7, 13, 2, 8, 14],
                                               [18, 24, 30, 19, 25, 31, 20, 26, 32],
                                               [3, 9, 15, 4, 10, 16, 5, 11, 17],
                                               [21, 27, 33, 22, 28, 34, 23, 29, 35]],
                                              [[36, 42, 48, 37, 43, 49, 38, 44, 50],
                                               [54, 60, 66, 55, 61, 67, 56, 62, 68],
                                               [39, 45, 51, 40, 46, 52, 41, 47, 53],
                                               [57, 63, 69, 58, 64, 70, 59, 65, 71]]]])


def test_pixelshuffle3d():
    """Mirrors MXNet's ``test_pixelshuffle3d``."""
    nchan, up_x, up_y, up_z, nx, ny, nz = 1, 2, 1, 2, 2, 3, 4
    shape_before = (1, nchan * up_x * up_y * up_z, nx, ny, nz)
    shape_after = (1, nchan, nx * up_x, ny * up_y, nz * up_z)
    layer = PixelShuffle3D((up_x, up_y, up_z))
    x = mx.nd.arange(np.prod(shape_before)).reshape(shape_before)
    y = layer(x)
    assert y.shape == shape_after
    np.testing.assert_allclose(y.asnumpy(), [[[[[0, 24, 1, 25, 2, 26, 3, 27],
                                                [4, 28, 5, 29, 6, 30, 7, 31],
                                                [8, 32, 9, 33, 10, 34, 11, 35]],
                                               [[48, 72, 49, 73, 50, 74, 51, 75],
                                                [52, 76, 53, 77, 54, 78, 55, 79],
                                                [56, 80, 57, 81, 58, 82, 59, 83]],
                                               [[12, 36, 13, 37, 14, 38, 15, 39],
                                                [16, 40, 17, 41, 18, 42, 19, 43],
                                                [20, 44, 21, 45, 22, 46, 23, 47]],
                                               [[60, 84, 61, 85, 62, 86, 63, 87],
                                                [64, 88, 65, 89, 66, 90, 67, 91],
                                                [68, 92, 69, 93, 70, 94, 71, 95]]]]])


def test_sync_batch_norm_on_one_device_is_batch_norm():
    layer = SyncBatchNorm(in_channels=2)
    layer.initialize()
    x = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
    with mx.autograd.record():
        out = layer(mx.nd.array(x)).asnumpy()
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="num_devices=2"):
        SyncBatchNorm(num_devices=2)

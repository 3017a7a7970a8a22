"""What published Gluon 1.x scripts do with only their import changed, each pinned to MXNet 1.9.1's behaviour:
the mx.nd face (reshape codes in the method), ``params=``/``prefix=`` weight tying, Initializer kwargs,
Loss subclasses with ``hybrid_forward``, nd.array's float32 default and the dtype check of Dense/Conv,
and MXNet's checkpoint layouts of recurrent layers (1.x ``_unfused`` names, 2.x fused ``rnn_param``).
"""

import json

import numpy as np
import pytest

import mxlite as mx
from mxlite.autograd.tensor import NDTensor, Tensor
from mxlite.formats.archive import load_mxnet_arrays, save_mxnet_arrays
from mxlite.gluon import loss as gloss
from mxlite.gluon import nn, rnn


# -- 1. the mx.nd face ---------------------------------------------------------------------------
def test_nd_arrays_take_mxnet_reshape_codes_in_the_method():
    x = mx.nd.array(np.arange(24.0).reshape(2, 3, 4))
    assert x.reshape((-3, 0)).shape == (6, 4)
    assert x.reshape(0, -1).shape == (2, 12)
    assert x.reshape((-2,)).shape == (2, 3, 4)
    assert x.reshape((0, -4, 1, 3, 0)).shape == (2, 1, 3, 4)
    assert x.reshape(shape=(-1, 0), reverse=True).shape == (6, 4)
    np.testing.assert_array_equal(x.reshape((-3, 0)).asnumpy(), np.arange(24.0).reshape(6, 4))
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape((5, -1, 7))
    with pytest.raises(TypeError, match="keyword"):
        x.reshape((2, 12), order="F")


def test_np_arrays_keep_numpys_reshape():
    z = mx.np.array(np.arange(6.0))
    assert type(z) is Tensor
    assert z.reshape(2, 3).shape == (2, 3)
    with pytest.raises(ValueError):
        z.reshape((0, -1))  # NumPy: a zero-length axis, which 6 elements cannot fill


def test_the_nd_face_propagates_through_ops_layers_and_autograd():
    x = mx.nd.array(np.ones((2, 3, 4)))
    x.attach_grad()
    net = nn.Dense(5, flatten=False)
    net.initialize()
    with mx.autograd.record():
        y = net(x) * 2 + 1
        loss = (y.reshape((-3, 0)) ** 2).sum()
    loss.backward()
    for t in (y, loss, x.grad, (x > 0), x.argmax(axis=1), x.copy(), x.detach(), x.copyto(mx.cpu(0))):
        assert type(t) is NDTensor, t
    assert x.grad.reshape((0, -1)).shape == (2, 12)
    emb = nn.Embedding(10, 3)  # its index input is no graph parent: the block gives the output the face
    emb.initialize()
    assert type(emb(mx.nd.array([[1, 2]]))) is NDTensor
    assert type(emb(mx.np.array([[1, 2]]))) is Tensor
    assert type(net(mx.np.ones((2, 3, 4)))) is Tensor  # an mx.np input stays mx.np


def test_nd_functions_give_the_nd_face_and_np_functions_do_not():
    p = mx.np.ones((2, 3))
    assert type(mx.nd.softmax(p)) is NDTensor  # mx.nd's functions return NDArrays, as MXNet 1.x's
    assert type(mx.np.exp(p)) is Tensor and type(mx.npx.softmax(p)) is Tensor
    assert type(mx.nd.random.uniform(shape=(2,))) is NDTensor and type(mx.nd.linalg.gemm2(p, p.T)) is NDTensor
    out = mx.nd.identity(p)
    assert type(out) is NDTensor and type(p) is Tensor  # an input is never changed in place


def test_as_nd_ndarray_and_as_np_ndarray_share_data_and_gradient():
    x = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
    assert x.as_nd_ndarray() is x
    p = x.as_np_ndarray()
    assert type(p) is Tensor and p.as_np_ndarray() is p
    p[0, 0] = 9
    assert x.asnumpy()[0, 0] == 9  # no copy
    x.attach_grad()
    p = x.as_np_ndarray()  # outside record: MXNet's shallow copy shares the gradient entry
    with mx.autograd.record():
        (p * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.full((2, 2), 3.0))
    with mx.autograd.record():
        (x.as_np_ndarray() * x).sum().backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), 2 * x.asnumpy())


def test_fluent_methods_of_nd_arrays():
    x = mx.nd.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    np.testing.assert_allclose(x.softmax(axis=1).asnumpy(), mx.nd.softmax(x, axis=1).asnumpy())
    assert [p.shape for p in x.split(num_outputs=3, axis=1)] == [(2, 1)] * 3
    assert x.slice_axis(axis=1, begin=0, end=2).shape == (2, 2)
    assert x.expand_dims(0).broadcast_axes(axis=0, size=2).shape == (2, 2, 3)
    with pytest.raises(AttributeError, match="no attribute 'no_such_method'"):
        x.no_such_method()
    with pytest.raises(AttributeError):
        mx.np.ones(2).softmax()  # mx.np arrays have NumPy's methods only


def test_numpy_argmax_of_an_nd_array_stays_an_array():
    pred = mx.nd.array([[0.3, 0.7], [0.9, 0.1]])
    out = np.argmax(pred, axis=1)  # NumPy calls the method with out=None (MXNet 1.x test_metric does this)
    np.testing.assert_array_equal(out.asnumpy(), [1, 0])


# -- 2. params= and prefix= --------------------------------------------------------------------
class _LM(nn.Block):
    def __init__(self, tie=True, **kwargs):
        super().__init__(**kwargs)
        self.encoder = nn.Embedding(50, 16)
        self.decoder = (nn.Dense(50, in_units=16, flatten=False, params=self.encoder.params) if tie
                        else nn.Dense(50, in_units=16, flatten=False))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def test_weight_tying_with_params():
    net = _LM()
    net.initialize()
    assert net.decoder.weight is net.encoder.weight
    assert list(net.collect_params()) == ["encoder.weight", "decoder.bias"]  # each Parameter once, as MXNet 1.x
    x = mx.nd.array([[1, 2], [3, 4]])
    with mx.autograd.record():
        out = net(x)
    out.backward()
    assert out.shape == (2, 2, 50)
    grad = net.encoder.weight.grad().asnumpy()
    assert np.abs(grad).sum() > 0 and np.abs(grad[5:]).sum() > 0  # the decoder's use reaches every row
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    trainer.step(1)


def test_sharing_a_whole_model_by_collect_params_and_prefix():
    a = _LM(tie=False, prefix="a_")
    b = _LM(tie=False, prefix="b_", params=a.collect_params())
    assert b.encoder.weight is a.encoder.weight and b.decoder.bias is a.decoder.bias
    assert (a.prefix, b.name) == ("a_", "b")
    for layer in (nn.Conv2D(4, 3, prefix="c_"), nn.BatchNorm(prefix="bn_"), rnn.LSTM(4, prefix="l_"),
                  nn.Dropout(0.5, prefix="d_"), gloss.L2Loss(prefix="l2_"), nn.Sequential(prefix="s_")):
        assert layer.prefix.endswith("_")


def test_sharing_refuses_contradicting_shapes_and_bad_params():
    emb = nn.Embedding(50, 16)
    with pytest.raises(ValueError, match=r"shared parameter .* has shape \(50, 16\)"):
        nn.Dense(50, in_units=17, params=emb.params)
    with pytest.raises(TypeError, match="params must be a ParameterDict"):
        nn.Dense(5, params=[1, 2])
    with pytest.raises(TypeError, match="unexpected keyword"):
        nn.Dense(5, prefixx="x")


# -- 3. Initializer(**kwargs) ------------------------------------------------------------------
def test_custom_initializer_with_kwargs():
    class ScaledNormal(mx.init.Initializer):
        def __init__(self, scale=0.1):
            super().__init__(scale=scale)
            self.scale = scale

        def _init_weight(self, name, arr):
            arr[:] = self.scale

        def _init_bias(self, name, arr):
            arr[:] = -1.0

    init = ScaledNormal(scale=0.5)
    assert init.dumps() == '["scalednormal", {"scale": 0.5}]' and repr(init) == "ScaledNormal(scale=0.5)"
    assert init == ScaledNormal(0.5) and init != ScaledNormal(0.4)
    net = nn.Dense(3, in_units=2)  # Dense's bias has its own initializer ('zeros'), as in MXNet
    net.initialize(init)
    np.testing.assert_array_equal(net.weight.data().asnumpy(), np.full((3, 2), 0.5))
    np.testing.assert_array_equal(net.bias.data().asnumpy(), np.zeros(3))

    class Affine(nn.Block):
        def __init__(self):
            super().__init__()
            self.bias = self.params.get("bias", shape=(3,))  # no initializer of its own: the name picks the rule

    block = Affine()
    block.initialize(init)
    np.testing.assert_array_equal(block.bias.data().asnumpy(), np.full(3, -1.0))


def test_initializer_dumps_as_mxnet_and_create_reads_it_back():
    # MXNet's documented examples of dumps()
    assert mx.init.Normal(0.5).dumps() == '["normal", {"sigma": 0.5}]'
    assert json.loads(mx.init.Xavier(factor_type="in", magnitude=2.34).dumps()) == [
        "xavier", {"rnd_type": "uniform", "factor_type": "in", "magnitude": 2.34}]
    assert mx.init.create(mx.init.Normal(0.5).dumps()) == mx.init.Normal(0.5)
    assert mx.init.MSRAPrelu().dumps() == '["msraprelu", {"factor_type": "avg", "slope": 0.25}]'


def test_more_of_mxnets_initializers():
    w = np.zeros((1, 1, 4, 4))
    mx.init.Bilinear()._init_weight("up_weight", w)
    np.testing.assert_allclose(w[0, 0, 0], [0.0625, 0.1875, 0.1875, 0.0625])
    q = np.zeros((3, 5))
    mx.init.Orthogonal(scale=1.0)._init_weight("w", q)
    np.testing.assert_allclose(q @ q.T, np.eye(3), atol=1e-12)
    b = np.zeros(8)
    mx.init.LSTMBias(forget_bias=1.0)._init_weight("b", b)
    np.testing.assert_array_equal(b, [0, 0, 1, 1, 0, 0, 0, 0])
    mixed = mx.init.Mixed(["conv.*", ".*"], [mx.init.Constant(2.0), mx.init.One()])
    c, w, b = np.zeros(2), np.zeros((2, 2)), np.ones(2)
    mixed("conv0_weight", c)
    mixed("dense0_weight", w)
    mixed("dense0_bias", b)  # the chosen initializer's name rule still applies: a bias gets zeros, as MXNet
    assert c.tolist() == [2.0, 2.0] and w.sum() == 4 and b.sum() == 0
    with pytest.raises(ValueError, match="matches none"):
        mx.init.Mixed(["conv.*"], [mx.init.One()])("dense0_weight", w)


# -- 5. Loss subclasses with hybrid_forward ----------------------------------------------------
def test_loss_subclass_with_hybrid_forward():
    class WeightedL1(gloss.Loss):
        def __init__(self, weight=2.0, batch_axis=0, **kwargs):
            super().__init__(weight, batch_axis, **kwargs)

        def hybrid_forward(self, F, pred, label, sample_weight=None):
            label = F.reshape_like(label, pred)
            loss = F.abs(label - pred) * self._weight
            return F.mean(loss, axis=self._batch_axis, exclude=True)

    pred = mx.nd.array([[1.0, 2.0], [3.0, 5.0]])
    pred.attach_grad()
    with mx.autograd.record():
        out = WeightedL1()(pred, mx.nd.array([1.0, 1.0, 1.0, 1.0]))
    out.backward()
    np.testing.assert_allclose(out.asnumpy(), [1.0, 6.0])
    np.testing.assert_allclose(pred.grad.asnumpy(), [[0.0, 1.0], [1.0, 1.0]])
    with pytest.raises(NotImplementedError, match="hybrid_forward"):
        gloss.Loss()(pred, pred)


# -- 6. dtypes ---------------------------------------------------------------------------------
def test_nd_array_of_float64_numpy_is_float32_as_mxnet():
    assert mx.nd.array(np.ones(3)).dtype == np.float32
    assert mx.nd.array(np.arange(3)).dtype == np.float32  # MXNet 1.x: every non-NDArray source
    assert mx.nd.array(np.ones(3), dtype="float64").dtype == np.float64
    assert mx.nd.array(mx.nd.array(np.ones(3), dtype="float64")).dtype == np.float64  # an NDArray keeps its own
    # MXNet 2.x's np.array (without npx.set_np(dtype=True)): float32 for NumPy arrays too
    assert mx.np.array(np.ones(3)).dtype == np.float32
    assert mx.np.array(np.arange(3)).dtype == np.float32
    assert mx.np.array(np.float64(2.0)).dtype == np.float64  # a NumPy scalar keeps its dtype
    assert mx.np.array(mx.np.array([1, 2], dtype="int32")).dtype == np.int32


@pytest.mark.parametrize("layer,shape", [(nn.Dense(3), (2, 4)), (nn.Conv2D(2, 3), (1, 1, 5, 5)),
                                         (nn.Conv1D(2, 3), (1, 1, 5)), (nn.Conv2DTranspose(2, 3), (1, 1, 4, 4))])
def test_float32_layers_refuse_float64_input_as_mxnet(layer, shape):
    layer.initialize()
    with pytest.raises(TypeError, match=r"input has dtype float64 but Parameter .* float32.*astype"):
        layer(mx.nd.array(np.ones(shape), dtype="float64"))
    assert layer(mx.nd.array(np.ones(shape))).dtype == np.float32
    layer.cast("float64")
    assert layer(mx.nd.array(np.ones(shape), dtype="float64")).dtype == np.float64


# -- 7. recurrent layers in MXNet's checkpoint layouts -----------------------------------------
class _Tagger(nn.Block):
    def __init__(self, cell, layers, bidirectional, input_size=3):
        super().__init__()
        kind = {"lstm": rnn.LSTM, "gru": rnn.GRU, "rnn": rnn.RNN}[cell]
        self.rnn = kind(4, num_layers=layers, bidirectional=bidirectional, input_size=input_size)
        self.out = nn.Dense(2, in_units=4 * (1 + bidirectional), flatten=False)

    def forward(self, x):
        return self.out(self.rnn(x))


def _model(cell, layers, bidirectional, seed=0, input_size=3):
    mx.random.seed(seed)
    net = _Tagger(cell, layers, bidirectional, input_size)
    net.initialize(mx.init.Uniform(0.5))
    return net


def _unfused_name(name, bidirectional):
    """MXNet 1.9.1's save_parameters name of an mxlite rnn weight name (``rnn.l0_i2h_weight``)."""
    prefix, _, attr = name.partition(".")
    direction, layer, kind = attr[0], attr[1:attr.index("_")], attr[attr.index("_") + 1:]
    cell = f"{direction}_cell." if bidirectional else ""
    return f"{prefix}._unfused.{layer}.{cell}{kind}"


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, False), (1, True), (3, True)])
def test_mxnet_1x_unfused_names_load(tmp_path, cell, layers, bidirectional):
    src = _model(cell, layers, bidirectional, seed=1)
    x = mx.nd.array(np.random.default_rng(0).standard_normal((5, 2, 3)))
    want = src(x).asnumpy()
    names, values = [], []
    for name, p in src.collect_params().items():  # the file MXNet 1.9.1's save_parameters writes
        names.append(_unfused_name(name, bidirectional) if name.startswith("rnn.") else name)
        values.append(p.data().asnumpy())
    save_mxnet_arrays(tmp_path / "m.params", values, names)
    dst = _model(cell, layers, bidirectional, seed=2)
    dst.load_parameters(tmp_path / "m.params")
    np.testing.assert_array_equal(dst(x).asnumpy(), want)
    fresh = _Tagger(cell, layers, bidirectional)  # uninitialised: shapes come from the file
    fresh.load_parameters(tmp_path / "m.params")
    np.testing.assert_array_equal(fresh(x).asnumpy(), want)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_save_in_mxnet_format_writes_1x_names_and_loads_back(tmp_path, cell, layers, bidirectional):
    src = _model(cell, layers, bidirectional)
    src.save_parameters(tmp_path / "m.params", format="mxnet")
    names, arrays = load_mxnet_arrays(tmp_path / "m.params")
    expected = [(_unfused_name(n, bidirectional) if n.startswith("rnn.") else n) for n in src.collect_params()]
    assert names == expected
    assert all(a.dtype == np.float32 for a in arrays)
    dst = _model(cell, layers, bidirectional, seed=3)
    dst.load_parameters(tmp_path / "m.params")
    x = mx.nd.array(np.ones((4, 2, 3)))
    np.testing.assert_array_equal(dst(x).asnumpy(), src(x).asnumpy())
    with pytest.raises(ValueError, match="format"):
        src.save_parameters(tmp_path / "m.params", format="pickle")


def _fused(net, layers, bidirectional):
    """MXNet 2.x's rnn_param: every weight, then every bias; layer by layer, l then r, i2h then h2h."""
    p = {k: v.data().asnumpy() for k, v in net.collect_params().items()}
    parts = [p[f"rnn.{d}{layer}_{kind}_{what}"].ravel() for what in ("weight", "bias") for layer in range(layers)
             for d in "lr"[:1 + bidirectional] for kind in ("i2h", "h2h")]
    return np.concatenate(parts)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True), (3, False)])
def test_mxnet_2x_fused_rnn_param_loads(tmp_path, cell, layers, bidirectional):
    src = _model(cell, layers, bidirectional, seed=4)
    flat = _fused(src, layers, bidirectional)
    # the unpacking follows the packing order: a vector of distinct values lands where each belongs
    save_mxnet_arrays(tmp_path / "m2.params", [flat, src.out.weight.data().asnumpy(), src.out.bias.data().asnumpy()],
                      ["rnn.rnn_param", "out.weight", "out.bias"], np_shape=True)
    for dst in (_model(cell, layers, bidirectional, seed=5), _Tagger(cell, layers, bidirectional, input_size=0)):
        dst.load_parameters(tmp_path / "m2.params")
        for name, p in src.collect_params().items():
            np.testing.assert_array_equal(dst.collect_params()[name].data().asnumpy(), p.data().asnumpy())
    wrong = _Tagger(cell, layers + 1, bidirectional)
    with pytest.raises(ValueError, match="rnn_param"):
        wrong.load_parameters(tmp_path / "m2.params")
    assert not wrong.rnn.l0_i2h_weight.is_initialized  # a refused load changes nothing


def test_recurrent_gradients_are_unchanged_by_the_layout(tmp_path):
    src = _model("lstm", 2, True)
    src.save_parameters(tmp_path / "m.params", format="mxnet")
    dst = _model("lstm", 2, True, seed=9)
    dst.load_parameters(tmp_path / "m.params")
    x = mx.nd.array(np.random.default_rng(1).standard_normal((3, 2, 3)))
    grads = []
    for net in (src, dst):
        with mx.autograd.record():
            net(x).sum().backward()
        grads.append({k: v.grad().asnumpy() for k, v in net.collect_params().items()})
    for k in grads[0]:
        np.testing.assert_array_equal(grads[0][k], grads[1][k])

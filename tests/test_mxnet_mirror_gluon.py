"""MXNet's own Gluon Parameter/Block unit tests (tests/python/unittest/test_gluon.py), replayed on mxlite.

Each test names the MXNet test it mirrors. The calls are a Gluon user's, with ``import mxlite as mx``;
the expected values are MXNet's. Where MXNet raises ``AssertionError``/``MXNetError`` for bad input,
mxlite raises a Python error type (docs/mxnet-differences.md, "errors").
"""

import warnings

import numpy as onp
import pytest

import mxlite as mx
from mxlite import gluon
from mxlite.gluon import nn


def _close(a, b, rtol=1e-5, atol=1e-6):
    onp.testing.assert_allclose(onp.asarray(a.asnumpy() if hasattr(a, "asnumpy") else a),
                                onp.asarray(b.asnumpy() if hasattr(b, "asnumpy") else b), rtol=rtol, atol=atol)


def test_parameter():
    """Mirrors MXNet's ``test_parameter``: two mirrors, shapes, devices, stypes, reset_device."""
    p = gluon.Parameter("weight", shape=(10, 10))
    p.initialize(init="xavier", device=[mx.cpu(0), mx.cpu(1)])
    assert len(p.list_data()) == 2
    assert len(p.list_grad()) == 2
    assert p.data(mx.cpu(1)).context == mx.cpu(1)
    assert p.data(mx.cpu(0)).shape == (10, 10)
    assert p.grad(mx.cpu(0)).stype == "default"
    assert p.data(mx.cpu(0)).stype == "default"
    p.reset_device(device=[mx.cpu(1), mx.cpu(2)])
    assert p.list_device() == [mx.cpu(1), mx.cpu(2)]


def test_invalid_parameter_stype():
    """Mirrors MXNet's ``test_invalid_parameter_stype`` (MXNet: AssertionError; mxlite: ValueError)."""
    with pytest.raises(ValueError):
        gluon.Parameter("weight", shape=(10, 10), stype="invalid")


def test_invalid_parameter_grad_stype():
    """Mirrors MXNet's ``test_invalid_parameter_grad_stype`` (MXNet: AssertionError; mxlite: ValueError)."""
    with pytest.raises(ValueError):
        gluon.Parameter("weight", shape=(10, 10), grad_stype="invalid")


def test_constant():
    """Mirrors MXNet's ``test_constant``: a Constant is not trained and passes the gradient through."""
    class Test(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.value = onp.asarray([[1, 2], [3, 4]])
            self.const = gluon.Constant(self.value)

        def forward(self, x):
            return x + self.const.data()

    test = Test()
    test.initialize()
    trainer = gluon.Trainer(test.collect_params(), "sgd", {"learning_rate": 1.0, "momentum": 0.5})
    with mx.autograd.record():
        x = mx.np.ones((2, 2))
        x.attach_grad()
        y = test(x)
        y.backward()
    trainer.step(1)
    assert (test.const.data().asnumpy() == test.value).all()
    assert (x.grad.asnumpy() == 1).all()


class _TwoDense(gluon.Block):
    def __init__(self, in_units=0, **kwargs):
        super().__init__(**kwargs)
        self.dense0 = nn.Dense(5, in_units=in_units)
        self.dense1 = nn.Dense(5, in_units=in_units)

    def forward(self, x):
        return self.dense1(self.dense0(x))


def test_parameter_sharing(tmp_path):
    """Mirrors MXNet's ``test_parameter_sharing``: shared parameters save and load into a fresh net."""
    net1 = _TwoDense(in_units=5)
    net2 = _TwoDense().share_parameters(net1.collect_params())
    net1.initialize()
    net2(mx.np.zeros((3, 5)))
    net1.save_parameters(str(tmp_path / "net1.params"))
    net3 = _TwoDense()
    net3.load_parameters(str(tmp_path / "net1.params"), mx.cpu())

    net4 = _TwoDense()
    net5 = _TwoDense(in_units=5).share_parameters(net4.collect_params())
    net4.initialize()
    net5(mx.np.zeros((3, 5)))
    net4.save_parameters(str(tmp_path / "net4.params"))
    net6 = _TwoDense()
    net6.load_parameters(str(tmp_path / "net4.params"), mx.cpu())


def test_parameter_str():
    """Mirrors MXNet's ``test_parameter_str``: the first line names the weight, its shape and dtype."""
    class Net(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense0 = nn.Dense(10, in_units=5, use_bias=False)

    lines = str(Net().collect_params()).splitlines()
    assert "dense0.weight" in lines[0]
    assert "(10, 5)" in lines[0]
    assert "float32" in lines[0]


def test_collect_parameters():
    """Mirrors MXNet's ``test_collect_parameters``: structural names and regex selection."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(10, 3))
    net.add(nn.Dense(10, activation="relu"))
    assert set(net.collect_params().keys()) == {"0.weight", "0.bias", "1.weight", "1.bias"}
    assert set(net.collect_params(".*weight").keys()) == {"0.weight", "1.weight"}
    assert set(net.collect_params("0.bias|1.bias").keys()) == {"0.bias", "1.bias"}


def test_basic():
    """Mirrors MXNet's ``test_basic``: Sequential forward shape; ``setattr('grad_req', ...)`` drops/restores grads."""
    model = nn.Sequential()
    model.add(nn.Dense(128, activation="tanh", in_units=10, flatten=False))
    model.add(nn.Dropout(0.5))
    model.add(nn.Dense(64, activation="tanh", in_units=256), nn.Dense(32, in_units=64))
    model.add(nn.Activation("relu"))
    model.initialize(mx.init.Xavier(magnitude=2.24))
    x = model(mx.np.zeros((32, 2, 10)))
    assert x.shape == (32, 32)
    x.wait_to_read()
    model.setattr("grad_req", "null")
    assert list(model.collect_params().values())[0]._grad is None
    model.setattr("grad_req", "write")
    assert list(model.collect_params().values())[0]._grad is not None


class _Foo(gluon.HybridBlock):
    def forward(self, a, b):
        if a is None and b is not None:
            return b
        if b is None and a is not None:
            return a
        if a is not None and b is not None:
            return a + b
        raise NotImplementedError


class _FooDefault(gluon.HybridBlock):
    def forward(self, a, b=None):
        return _Foo.forward(self, a, b)


class _FooNested(gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.f1, self.f2, self.f3 = _Foo(), _Foo(), _Foo()

    def forward(self, a, b):
        data = self.f1(a, b)
        data = self.f2(a, data)
        return self.f3(data, b)


def test_hybrid_block_none_args():
    """Mirrors MXNet's ``test_hybrid_block_none_args`` (its hybridized-only checks are separate below)."""
    for args in [(None, mx.np.ones((10,))), (mx.np.ones((10,)), mx.np.ones((10,))), (mx.np.ones((10,)), None)]:
        foo1 = _FooNested()
        foo1.hybridize()
        foo2 = _FooNested()
        for _ in range(2):
            _close(foo1(*args), foo2(*args))
    foo1 = _FooDefault()
    foo1.hybridize()
    foo2 = _FooDefault()
    out1 = foo1(mx.np.ones((10,)))
    _close(out1, foo2(mx.np.ones((10,))))
    _close(out1, foo1(mx.np.ones((10,)), None))
    _close(out1, foo2(mx.np.ones((10,)), None))


@pytest.mark.xfail(strict=True, reason="mxlite builds no symbolic graph (plain hybridize() runs eagerly; static "
                                       "hybridize captures CUDA graphs on GPUs only), so a hybridized block accepts "
                                       "(None, None) inputs and a change of which inputs are None; MXNet's cached "
                                       "graph raises ValueError")
def test_hybrid_block_none_args_hybridized_errors():
    """Mirrors the hybridized error checks of MXNet's ``test_hybrid_block_none_args``."""
    foo = _FooNested()
    foo.hybridize()
    foo(None, mx.np.ones((10,)))
    with pytest.raises(ValueError):
        foo(mx.np.ones((10,)), mx.np.ones((10,)))


def test_hybrid_block_hybrid_no_hybrid():
    """Mirrors MXNet's ``test_hybrid_block_hybrid_no_hybrid``: an un-hybridized HybridBlock acts as a Block."""
    class FooHybrid(gluon.HybridBlock):
        def forward(self, a, b):
            if isinstance(a, (list, tuple)):
                a = sum(a)
            if isinstance(b, (list, tuple)):
                b = sum(b)
            return a + b

    class Foo(gluon.Block):
        forward = FooHybrid.forward

    for a, b in [(mx.np.ones((10,)), 1), (mx.np.ones((20,)), 2),
                 ([mx.np.ones((10,)), mx.np.ones((10,))], [mx.np.ones((10,)), mx.np.ones((10,)), mx.np.ones((10,))]),
                 ([mx.np.ones((10,)), mx.np.ones((10,))], 3)]:
        _close(FooHybrid()(a, b), Foo()(a, b))


def test_deferred_init():
    """Mirrors MXNet's ``test_deferred_init``: Conv2D without in_channels infers it at the first call."""
    x = mx.np.ones((5, 4, 10, 10))
    layer = nn.Conv2D(10, 2)
    layer.initialize()
    layer(x)


def test_block_attr_hidden():
    """Mirrors MXNet's ``test_block_attr_hidden``: plain attributes may change type."""
    b = gluon.Block()
    b.a = None
    b.a = 1


def test_block_attr_block():
    """Mirrors MXNet's ``test_block_attr_block``: a child Block attribute cannot become a tuple."""
    b = gluon.Block()
    with pytest.raises(TypeError):
        b.b = gluon.Block()
        b.b = (2,)


def test_block_attr_param():
    """Mirrors MXNet's ``test_block_attr_param``: a Parameter attribute cannot become a tuple."""
    b = gluon.Block()
    with pytest.raises(TypeError):
        b.b = gluon.Parameter()
        b.b = (2,)


def test_block_attr_regular():
    """Mirrors MXNet's ``test_block_attr_regular``: reassigning a child replaces it in ``_children``."""
    b = gluon.Block()
    b.c = gluon.Block()
    c2 = gluon.Block()
    b.c = c2
    child = list(b._children.values())[0]
    assert b.c is c2 and (child() if callable(child) and not isinstance(child, gluon.Block) else child) is c2


def test_block_attr_list_of_block():
    """Mirrors MXNet's ``test_block_attr_list_of_block``: Blocks hidden in a list or dict trigger a warning."""
    class Model1(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.layers = [nn.Dense(i * 10) for i in range(6)]

    class Model2(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.layers = {}
            self.layers["a"] = [nn.Dense(10), nn.Dense(10)]

    class Model3(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.layers = nn.Sequential()
            self.layers.add(*[nn.Dense(i * 10) for i in range(6)])

    class Model4(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.data = {"a": "4", "b": 123}

    for cls, warns in ((Model1, True), (Model2, True), (Model3, False), (Model4, False)):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            cls().collect_params()
            assert (len(w) > 0) == warns, cls.__name__


def _check_sequential(net):
    dense1, dense2, dense3 = gluon.nn.Dense(10), gluon.nn.Dense(10), gluon.nn.Dense(10)
    net.add(dense1)
    net.add(dense2)
    net.add(dense3)
    net.initialize()
    net(mx.np.zeros((10, 10)))
    net.hybridize()
    assert net[1] is dense2
    assert net[-1] is dense3
    slc = net[1:3]
    assert len(slc) == 2 and slc[0] is dense2 and slc[1] is dense3
    assert isinstance(slc, type(net))


def test_sequential():
    """Mirrors MXNet's ``test_sequential``: indexing and slicing Sequential/HybridSequential."""
    _check_sequential(gluon.nn.Sequential())
    _check_sequential(gluon.nn.HybridSequential())

    class MyBlock(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.dense = mx.gluon.nn.Dense(units=10, in_units=10)
            self.weight = mx.gluon.Parameter("weight", shape=(10,))

        def forward(self, x):
            return self.dense(x) + self.weight.data()

    net = gluon.nn.HybridSequential()
    blocks = [MyBlock(), MyBlock(), MyBlock()]
    for b in blocks:
        net.add(b)
    net.initialize()
    net.hybridize()
    net(mx.np.zeros((10, 10)))
    assert net[1] is blocks[1] and net[-1] is blocks[2]
    slc = net[1:3]
    assert len(slc) == 2 and slc[0] is blocks[1] and slc[1] is blocks[2]
    assert isinstance(slc, type(net))


@pytest.mark.xfail(strict=True, reason="Sequential/HybridSequential and Block/HybridBlock are one class each in "
                                       "mxlite, so hybridizing a Sequential cannot tell whether all children are "
                                       "HybridBlocks and gives no warning (MXNet warns then that HybridSequential "
                                       "would be faster)")
def test_sequential_warning():
    """Mirrors MXNet's ``test_sequential_warning``: hybridize() on a Sequential of HybridBlocks warns once."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        b = gluon.nn.Sequential()
        b.add(gluon.nn.Dense(20))
        b.hybridize()
        assert len(w) == 1


def test_hybrid_stale_cache():
    """Mirrors MXNet's ``test_hybrid_stale_cache``: adding or replacing children after a call takes effect."""
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(10, weight_initializer="zeros", bias_initializer="ones", flatten=False))
    net.hybridize()
    net.initialize()
    net(mx.np.ones((2, 3, 5)))
    net.add(mx.gluon.nn.Flatten())
    assert net(mx.np.ones((2, 3, 5))).shape == (2, 30)

    net = mx.gluon.nn.HybridSequential()
    net.fc1 = mx.gluon.nn.Dense(10, weight_initializer="zeros", bias_initializer="ones", flatten=False)
    net.fc2 = mx.gluon.nn.Dense(10, weight_initializer="zeros", bias_initializer="ones", flatten=False)
    net.hybridize()
    net.initialize()
    net(mx.np.ones((2, 3, 5)))
    net.fc2 = mx.gluon.nn.Dense(10, weight_initializer="zeros", bias_initializer="ones", flatten=True)
    net.initialize()
    assert net(mx.np.ones((2, 3, 5))).shape == (2, 10)


def test_lambda():
    """Mirrors MXNet's ``test_lambda``: Lambda/HybridLambda by name or function match the layers."""
    net1 = mx.gluon.nn.HybridSequential()
    net1.add(nn.Activation("tanh"), nn.LeakyReLU(0.1))
    net2 = mx.gluon.nn.HybridSequential()
    net2.add(nn.HybridLambda("tanh"), nn.HybridLambda(lambda x, *args: mx.npx.leaky_relu(x, *args, slope=0.1)))
    net3 = mx.gluon.nn.Sequential()
    net3.add(nn.Lambda("tanh"), nn.Lambda(lambda x: mx.npx.leaky_relu(x, slope=0.1)))
    data = mx.np.random.uniform(size=(2, 3, 5, 7))
    out1, out2, out3 = net1(data), net2(data), net3(data)
    _close(out1, out2, rtol=1e-3, atol=1e-3)
    _close(out1, out3, rtol=1e-3, atol=1e-3)


def _conv_bn_dense():
    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, kernel_size=2, padding=1), nn.BatchNorm(), nn.Dense(10))
    return net


def test_fill_shape_deferred():
    """Mirrors MXNet's ``test_fill_shape_deferred``: deferred shapes are filled by the first forward."""
    net = _conv_bn_dense()
    net.hybridize()
    net.initialize()
    net(mx.np.ones((2, 3, 5, 7)))
    assert net[0].weight.shape[1] == 3
    assert net[1].gamma.shape[0] == 64
    assert net[2].weight.shape[1] == 3072


def test_fill_shape_load(tmp_path):
    """Mirrors MXNet's ``test_fill_shape_load``: load_parameters fills deferred shapes."""
    device = mx.device.current_device()
    net1 = _conv_bn_dense()
    net1.hybridize()
    net1.initialize(device=device)
    net1(mx.np.ones((2, 3, 5, 7), device=device))
    fname = str(tmp_path / "net_fill.params")
    net1.save_parameters(fname)
    net2 = _conv_bn_dense()
    net2.hybridize()
    net2.initialize()
    net2.load_parameters(fname, device)
    assert net2[0].weight.shape[1] == 3
    assert net2[1].gamma.shape[0] == 64
    assert net2[2].weight.shape[1] == 3072


def test_req():
    """Mirrors MXNet's ``test_req``: grad_req='add' doubles the gradient over two backward passes."""
    data = mx.np.random.uniform(size=(1, 3, 224, 224))
    label = mx.np.random.uniform(size=(1,))
    label[:] = 1
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    net = nn.HybridSequential()
    net1 = nn.HybridSequential()
    net1.add(nn.Dense(4))
    net2 = nn.HybridSequential()
    net2.add(nn.Dense(3))
    net2.add(nn.Dense(2))
    net.add(net1)
    net.add(net2)
    net.initialize()
    net.hybridize()
    for v in net.collect_params().values():
        v.grad_req = "add"
    net.zero_grad()
    with mx.autograd.record():
        pred = net(data)
        ls = loss(pred, label)
        ls.backward()
        grad = net[0][0].weight.grad().mean().asnumpy()
        pred = net(data)
        ls = loss(pred, label)
        ls.backward()
    grad_double = net[0][0].weight.grad().mean().asnumpy()
    _close(grad * 2, grad_double)


def test_save_load_deduplicate_with_shared_params(tmp_path):
    """Mirrors MXNet's ``test_save_load_deduplicate_with_shared_params``: deduplicate saves a shared weight once."""
    class B(mx.gluon.Block):
        def __init__(self):
            super().__init__()
            self.weight = gluon.Parameter("weight", shape=(10, 10))

    class C(mx.gluon.Block):
        def __init__(self, b1, b2):
            super().__init__()
            self.b1 = b1
            self.b2 = b2

    def make():
        b1 = B()
        return C(b1, B().share_parameters(b1.collect_params()))

    c = make()
    c.initialize()
    path = str(tmp_path / "dedup.params")
    c.save_parameters(path, deduplicate=True)
    assert len(mx.npx.load(path)) == 1
    make().load_parameters(path)
    c.save_parameters(path, deduplicate=False)
    assert len(mx.npx.load(path)) == 2
    make().load_parameters(path)


def test_zero_grad():
    """Mirrors MXNet's ``test_zero_grad``: reset_arrays and Block.zero_grad leave zeros (dense gradients)."""
    device = mx.device.current_device()
    for dtype in [["float16", "float32", "float64"], "float16", "float32", "float64"]:
        arrs = []
        for _ in range(onp.random.randint(1, 50)):
            t = onp.random.choice(dtype) if isinstance(dtype, list) else dtype
            shape = tuple(onp.random.randint(1, 10) for _ in range(onp.random.randint(1, 5)))
            arrs.append(mx.nd.random.uniform(shape=shape, dtype=t, ctx=device))
        mx.nd.reset_arrays(*arrs, num_arrays=len(arrs))
        for a in arrs:
            assert (a.asnumpy() == 0).all()
    for dtype in ["float16", "float32", "float64"]:
        for emb_dtype in ["float32", "float64"]:
            data = mx.np.random.uniform(size=(3, 3), dtype=dtype, device=device)
            net = nn.Embedding(3, 4, sparse_grad=False, dtype=emb_dtype)
            net.initialize(device=device)
            with mx.autograd.record():
                out = net(data)
                out.backward()
            net.zero_grad()
            grad = net.collect_params()["weight"].grad()
            assert (grad.asnumpy() == 0).all()


def test_hook():
    """Mirrors MXNet's ``test_hook``: forward and pre-forward hooks fire until detached."""
    calls = {"hook": 0, "pre": 0}
    block = nn.Dense(10)
    block.initialize()
    handle = block.register_forward_hook(lambda b, x, y: calls.__setitem__("hook", calls["hook"] + 1))
    pre_handle = block.register_forward_pre_hook(lambda b, x: calls.__setitem__("pre", calls["pre"] + 1))
    block(mx.np.ones((3, 5)))
    assert (calls["hook"], calls["pre"]) == (1, 1)
    handle.detach()
    block(mx.np.ones((3, 5)))
    assert (calls["hook"], calls["pre"]) == (1, 2)
    pre_handle.detach()
    block(mx.np.ones((3, 5)))
    assert (calls["hook"], calls["pre"]) == (1, 2)


def test_apply():
    """Mirrors MXNet's ``test_apply``: children first, then the block itself."""
    called = []
    block = nn.HybridSequential()
    block.add(nn.Dense(10))
    block.add(nn.Dropout(0.5))
    block.apply(lambda b: called.append(type(b)))
    assert called == [type(block[0]), type(block[1]), type(block)]


def test_share_inputs_outputs():
    """Mirrors MXNet's ``test_share_inputs_outputs``: identity and sum blocks under every hybridize option."""
    class TestIOBackward(gluon.HybridBlock):
        def forward(self, in1, in2):
            return in1 + in2

    class TestIOForward(gluon.HybridBlock):
        def forward(self, in1):
            return in1

    d1 = mx.np.arange(10)
    d2 = mx.np.arange(10)
    params = [{"inline_limit": 0}, {"inline_limit": 0, "static_alloc": True},
              {"inline_limit": 0, "static_alloc": True, "static_shape": True}]
    for param in params:
        t = TestIOForward()
        t.hybridize(**param)
        for _ in range(5):
            d1.attach_grad()
            _close(t(d1), d1)
    for param in params:
        t = TestIOBackward()
        t.hybridize(**param)
        for _ in range(5):
            d1.attach_grad()
            d2.attach_grad()
            out_grad = mx.np.random.uniform(size=(10,))
            with mx.autograd.record():
                res = t(d1, d2)
            res.backward(out_grad=out_grad)
            _close(out_grad, d1.grad)
            _close(out_grad, d2.grad)


def test_grad_graph_change():
    """Mirrors MXNet's ``test_grad_graph_change``: a block returning an input index alongside a taken row."""
    class Model(mx.gluon.HybridBlock):
        def forward(self, array, index):
            return array.take(index), index

    array = mx.np.arange(3)
    index = mx.np.array([2])
    array.attach_grad()
    model = Model()
    model.hybridize(inline_limit=0)
    with mx.autograd.record(train_mode=True):
        row, _ = model(array, index)
    row.backward()


def test_np_shape_parameters():
    """Mirrors MXNet's ``test_np_shape_parameters``: a deferred Dense under np_shape."""
    class Foo(gluon.Block):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = gluon.nn.Dense(16)

        def forward(self, x):
            return self.dense(x)

    with mx.np_shape(True):
        z = mx.np.zeros((2, 2016))
        foo = Foo()
        foo.initialize()
        assert foo(z).shape == (2, 16)


def test_gluon_param_load(tmp_path):
    """Mirrors MXNet's ``test_gluon_param_load``: float32 values load into a float16 net with cast_dtype."""
    net = mx.gluon.nn.Dense(10, in_units=10)
    net.initialize()
    fname = str(tmp_path / "p.params")
    net.save_parameters(fname)
    net.cast("float16")
    net.load_parameters(fname, cast_dtype=True)
    mx.npx.waitall()


def test_gluon_param_load_dtype_source(tmp_path):
    """Mirrors MXNet's ``test_gluon_param_load_dtype_source``: dtype_source='saved' adopts the file's dtype."""
    net = mx.gluon.nn.Dense(10, in_units=10)
    net.initialize()
    net.cast("float16")
    fname = str(tmp_path / "p.params")
    net.save_parameters(fname)
    net.cast("float32")
    net.load_parameters(fname, cast_dtype=True, dtype_source="saved")
    assert net.weight.dtype == onp.float16
    mx.npx.waitall()


def test_squeeze_consistency():
    """Mirrors MXNet's ``test_squeeze_consistency``: squeeze inside a hybridized block."""
    class Foo(gluon.HybridBlock):
        def forward(self, x):
            return x.squeeze()

    block = Foo()
    block.hybridize()
    block(mx.np.ones((onp.random.randint(1, 10), onp.random.randint(1, 10), 1)))


def test_shared_parameters_with_non_default_initializer():
    """Mirrors MXNet's ``test_shared_parameters_with_non_default_initializer``."""
    class MyBlock(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.param = gluon.Parameter(shape=(1,), init=mx.init.Constant(-10.0))

    bl = MyBlock()
    bl2 = MyBlock().share_parameters(bl.collect_params())
    assert bl.param is bl2.param
    bl3 = MyBlock()
    assert bl.param is not bl3.param
    assert bl.param.init == bl3.param.init


def test_reqs_switching_training_inference():
    """Mirrors MXNet's ``test_reqs_switching_training_inference``: the same gradient before and after inference."""
    class Foo(gluon.HybridBlock):
        def forward(self, x):
            y = 2 * x
            return mx.np.sqrt(x) + mx.np.sqrt(y)

    f = Foo()
    f.hybridize(static_alloc=True)
    x = mx.np.ones(shape=(10, 10))
    x.attach_grad()
    x2 = mx.np.ones(shape=x.shape) * 2
    x2.attach_grad()
    with mx.autograd.record():
        y = f(x)
    y.backward()
    grad1 = x.grad.asnumpy()
    with mx.autograd.record():
        y = f(x2)
    y.backward()
    f(x)
    with mx.autograd.record():
        y = f(x)
    y.backward()
    _close(grad1, x.grad.asnumpy())


@pytest.mark.parametrize("dc", [True, False])
@pytest.mark.parametrize("hybridize", [True, False])
def test_concatenate(dc, hybridize):
    """Mirrors MXNet's ``test_concatenate``: HybridConcatenate/Concatenate join their children's outputs."""
    if dc:
        class MyBlock(mx.gluon.HybridBlock):
            def __init__(self, units, activation=None, in_units=0):
                super().__init__()
                self.dense = mx.gluon.nn.Dense(units, activation=activation, in_units=in_units)

            def forward(self, x):
                return self.dense(x)
    else:
        MyBlock = nn.Dense
    model = nn.HybridConcatenate(axis=1)
    model2 = nn.Concatenate(axis=1)
    for m in (model, model2):
        m.add(MyBlock(128, activation="tanh", in_units=10))
        m.add(MyBlock(64, activation="tanh", in_units=10))
        m.add(MyBlock(32, in_units=10))
        m.initialize(mx.init.Xavier(magnitude=2.24))
        if hybridize:
            m.hybridize()
    assert model(mx.np.zeros((32, 10))).shape == (32, 224)
    assert model2(mx.np.zeros((32, 10))).shape == (32, 224)


def test_identity():
    """Mirrors MXNet's ``test_identity``."""
    x = mx.np.random.uniform(size=(128, 33, 64))
    _close(nn.Identity()(x), x)


def test_parameter_sharing_1x(tmp_path):
    """Mirrors MXNet 1.9.1's ``test_parameter_sharing``: ``params=other.collect_params()`` shares every
    parameter, with or without the shapes known, and the saved file loads into a fresh net."""
    class Net(gluon.Block):
        def __init__(self, in_units=0, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.dense0 = nn.Dense(5, in_units=in_units)
                self.dense1 = nn.Dense(5, in_units=in_units)

        def forward(self, x):
            return self.dense1(self.dense0(x))

    net1 = Net(prefix="net1_", in_units=5)
    net2 = Net(prefix="net2_", params=net1.collect_params())
    net1.collect_params().initialize()
    net2(mx.nd.zeros((3, 5)))
    assert net2.dense0.weight is net1.dense0.weight
    net1.save_parameters(tmp_path / "net1.params")
    net3 = Net(prefix="net3_")
    net3.load_parameters(tmp_path / "net1.params", mx.cpu())
    net4 = Net(prefix="net4_")
    net5 = Net(prefix="net5_", in_units=5, params=net4.collect_params())
    net4.collect_params().initialize()
    net5(mx.nd.zeros((3, 5)))
    net4.save_parameters(tmp_path / "net4.params")
    net6 = Net(prefix="net6_")
    net6.load_parameters(tmp_path / "net4.params", mx.cpu())
    _close(net6(mx.nd.ones((2, 5))), net4(mx.nd.ones((2, 5))))


def test_shared_parameters_with_non_default_initializer_1x():
    """Mirrors MXNet 1.9.1's ``test_shared_parameters_with_non_default_initializer`` (1.x: ``params=``)."""
    class MyBlock(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            with self.name_scope():
                self.param = self.params.get("param", shape=(1,), init=mx.init.Constant(-10.0))

    bl = MyBlock()
    bl2 = MyBlock(params=bl.collect_params())
    assert bl.param is bl2.param
    bl3 = MyBlock()
    assert bl.param is not bl3.param
    assert bl.param.init == bl3.param.init


def test_summary_with_tied_dense(capsys):
    """Mirrors the second net of MXNet 1.9.1's ``test_summary``: a Dense tied to an Embedding by ``params=``."""
    net2 = nn.Sequential()
    with net2.name_scope():
        net2.add(nn.Embedding(40, 30))
        net2.add(gluon.rnn.LSTM(30))
        net2.add(nn.Dense(40, flatten=False, params=net2[0].params))
    net2.initialize()
    net2.summary(mx.nd.ones((80, 32)))
    assert net2[2].weight is net2[0].weight
    assert "Shared params in forward computation graph: 1200" in capsys.readouterr().out


def test_pixelshuffle1d():
    """Mirrors MXNet's ``test_pixelshuffle1d``."""
    layer = nn.PixelShuffle1D(2)
    x = mx.np.arange(onp.prod((1, 4, 3))).reshape((1, 4, 3))
    y = layer(x)
    assert y.shape == (1, 2, 6)
    _close(y, [[[0, 3, 1, 4, 2, 5], [6, 9, 7, 10, 8, 11]]])


def test_pixelshuffle2d():
    """Mirrors MXNet's ``test_pixelshuffle2d``."""
    layer = nn.PixelShuffle2D((2, 3))
    x = mx.np.arange(onp.prod((1, 12, 2, 3))).reshape((1, 12, 2, 3))
    y = layer(x)
    assert y.shape == (1, 2, 4, 9)
    _close(y, [[[[0, 6, 12, 1, 7, 13, 2, 8, 14],
                 [18, 24, 30, 19, 25, 31, 20, 26, 32],
                 [3, 9, 15, 4, 10, 16, 5, 11, 17],
                 [21, 27, 33, 22, 28, 34, 23, 29, 35]],
                [[36, 42, 48, 37, 43, 49, 38, 44, 50],
                 [54, 60, 66, 55, 61, 67, 56, 62, 68],
                 [39, 45, 51, 40, 46, 52, 41, 47, 53],
                 [57, 63, 69, 58, 64, 70, 59, 65, 71]]]])


def test_pixelshuffle3d():
    """Mirrors MXNet's ``test_pixelshuffle3d``."""
    layer = nn.PixelShuffle3D((2, 1, 2))
    x = mx.np.arange(onp.prod((1, 4, 2, 3, 4))).reshape((1, 4, 2, 3, 4))
    y = layer(x)
    assert y.shape == (1, 1, 4, 3, 8)
    _close(y, [[[[[0, 24, 1, 25, 2, 26, 3, 27], [4, 28, 5, 29, 6, 30, 7, 31], [8, 32, 9, 33, 10, 34, 11, 35]],
                 [[48, 72, 49, 73, 50, 74, 51, 75], [52, 76, 53, 77, 54, 78, 55, 79], [56, 80, 57, 81, 58, 82, 59, 83]],
                 [[12, 36, 13, 37, 14, 38, 15, 39], [16, 40, 17, 41, 18, 42, 19, 43], [20, 44, 21, 45, 22, 46, 23, 47]],
                 [[60, 84, 61, 85, 62, 86, 63, 87], [64, 88, 65, 89, 66, 90, 67, 91],
                  [68, 92, 69, 93, 70, 94, 71, 95]]]]])


def test_load_dict():
    """Mirrors MXNet 2.x's ``Block.load_dict`` as ``test_amp_init.py`` uses it (``{name: p.data().copy()}``), and
    its checks: missing and extra names, NumPy values (taken through nd.array, so float32)."""
    m = nn.Dense(3, in_units=2)
    m.initialize()
    param_init = {k: v.data().copy() for k, v in m.collect_params().items()}
    m2 = nn.Dense(3, in_units=2)
    m2.initialize()
    m2.load_dict(param_init, device=mx.cpu())
    x = mx.np.ones((1, 2))
    _close(m2(x), m(x))
    m2.load_dict({"weight": onp.ones((3, 2)), "bias": onp.zeros(3)})
    _close(m2.weight.data(), onp.ones((3, 2)))
    with pytest.raises(ValueError, match="missing"):
        m2.load_dict({"weight": onp.ones((3, 2))})
    with pytest.raises(ValueError, match="not in the model"):
        m2.load_dict({"weight": onp.ones((3, 2)), "bias": onp.zeros(3), "extra": onp.zeros(1)})
    m2.load_dict({"arg:weight": onp.zeros((3, 2))}, allow_missing=True)
    _close(m2.weight.data(), onp.zeros((3, 2)))


def _forward_backward_twice(net, x):
    """MXNet's ``check_layer_forward_withinput``: the same output and input gradient before and after hybridize."""
    x_hybrid = x.copy()
    x.attach_grad()
    x_hybrid.attach_grad()
    net.initialize()
    with mx.autograd.record():
        out1 = net(x_hybrid)
    out1.backward()
    net.hybridize()
    with mx.autograd.record():
        out2 = net(x)
    out2.backward()
    _close(x.grad, x_hybrid.grad)
    _close(out1, out2)
    return out1


def test_slice_dense():
    """Mirrors MXNet's ``test_slice_dense`` (and the other ``test_slice_*`` tests): ``npx.slice`` in a block."""
    class Net(gluon.HybridBlock):
        def __init__(self, begin, end):
            super().__init__()
            self.dense0 = nn.Dense(5)
            self.begin, self.end = begin, end

        def forward(self, x):
            return self.dense0(mx.npx.slice(x, begin=self.begin, end=self.end))

    x = mx.np.random.uniform(size=(16, 32, 8, 8))
    out = _forward_backward_twice(Net((0, 16, 0, 0), (4, 32, 4, 4)), x)
    assert out.shape == (4, 5)
    grad = x.grad.asnumpy()
    assert (grad[4:] == 0).all() and (grad[:4, :16] == 0).all() and (grad[:4, 16:, 4:] == 0).all()
    assert (grad[:4, 16:, :4, :4] != 0).any()


def test_layernorm():
    """Mirrors MXNet's ``test_layernorm``; for input of the wrong width MXNet raises AssertionError, mxlite
    ValueError naming both shapes."""
    layer = nn.LayerNorm(in_channels=10)
    layer.initialize()
    x = mx.np.random.uniform(size=(2, 10, 10, 10))
    assert layer(x).shape == (2, 10, 10, 10)
    for hybridize in (False, True):
        layer = nn.LayerNorm(in_channels=10)
        layer.initialize()
        if hybridize:
            layer.hybridize()
        with pytest.raises(ValueError, match=r"\(11,\).*\(10,\)"):
            layer(mx.np.ones((2, 11)))


def test_reflectionpad():
    """Mirrors MXNet's ``test_reflectionpad`` (``nn.ReflectionPad2D(3)`` on ``(2, 3, 24, 24)``), with NumPy's
    reflect padding as the expected value and the gradient of a sum (border pixels count more than once)."""
    layer = nn.ReflectionPad2D(3)
    layer.initialize()
    a = onp.random.default_rng(0).standard_normal((2, 3, 24, 24)).astype(onp.float32)
    x = mx.np.array(a)
    x.attach_grad()
    with mx.autograd.record():
        y = layer(x)
    y.backward()
    _close(y, onp.pad(a, ((0, 0), (0, 0), (3, 3), (3, 3)), mode="reflect"))
    row = onp.ones(24)  # how often each input row (column) appears in the padded output: rows 1-3 and 20-22 twice
    row[1:4] += 1
    row[-4:-1] += 1
    _close(x.grad[0, 0], onp.outer(row, row))
    with pytest.raises(ValueError, match="smaller than"):
        layer(mx.np.ones((1, 1, 3, 3)))


def test_sync_batchnorm():
    """Mirrors MXNet's ``test_sync_batchnorm`` on one device (its CPU case): ``SyncBatchNorm`` gives BatchNorm's
    output, running statistics and input gradient. On several devices mxlite refuses (see the class)."""
    rng = onp.random.default_rng(1)
    for shape in [(24, 2), (24, 3, 4), (24, 4, 4, 4)]:
        data = mx.np.array(rng.uniform(size=shape))
        bn1 = nn.BatchNorm(in_channels=shape[1])
        bn2 = nn.SyncBatchNorm(in_channels=shape[1], num_devices=1)
        bn1.initialize()
        bn2.initialize()
        x1, x2 = data.copy(), data.copy()
        x1.attach_grad()
        x2.attach_grad()
        with mx.autograd.record():
            out1, out2 = bn1(x1), bn2(x2)
            mx.autograd.backward([(out1 ** 2).sum(), (out2 ** 2).sum()])
        axes = (0,) + tuple(range(2, len(shape)))
        mean, var = data.asnumpy().mean(axis=axes), data.asnumpy().var(axis=axes)
        _close(out1, out2)
        _close(x1.grad, x2.grad)
        _close(bn2.running_mean.data(), 0.1 * mean)
        _close(bn2.running_var.data(), 0.9 + 0.1 * var)
    with pytest.raises(NotImplementedError, match="num_devices=2"):
        nn.SyncBatchNorm(num_devices=2)
    bn = nn.SyncBatchNorm(in_channels=2)
    bn.initialize(device=[mx.cpu(0), mx.cpu(1)])
    with pytest.raises(NotImplementedError, match="2 devices"):
        bn(mx.np.ones((4, 2)))


def _channels_last(shape):
    """An NC* shape with its channel axis moved last."""
    return (shape[0],) + tuple(shape[2:]) + (shape[1],)


def _forward_grad(layer, x):
    x = mx.np.array(x)
    x.attach_grad()
    with mx.autograd.record():
        out = layer(x)
    out.backward()
    return out.asnumpy(), x.grad.asnumpy()


@pytest.mark.parametrize("make,dshape", [
    (lambda layout: nn.Conv1D(6, 3, layout=layout, in_channels=4), (1, 4, 9)),
    (lambda layout: nn.Conv2D(6, (3, 2), groups=2, layout=layout, in_channels=4), (1, 4, 7, 6)),
    (lambda layout: nn.Conv3D(6, 2, strides=2, layout=layout), (1, 4, 5, 4, 4)),
    (lambda layout: nn.Conv2DTranspose(6, 3, strides=2, layout=layout), (2, 4, 4, 5)),
])
def test_conv_nhwc(make, dshape):
    """Mirrors MXNet's ``test_conv_nhwc`` (which runs only with cuDNN there): a channels-last convolution equals
    the channels-first one on the transposed input, forward and backward, with its weight's input axis last."""
    layouts = {3: ("NCW", "NWC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}[len(dshape)]
    first, last = make(layouts[0]), make(layouts[1])
    first.initialize()
    last.initialize()
    x = onp.random.default_rng(3).standard_normal(dshape).astype("float32")
    y, dx = _forward_grad(first, x)
    xl = x.transpose((0,) + tuple(range(2, x.ndim)) + (1,))
    last(mx.np.array(xl))
    w = first.weight.data().asnumpy()
    assert last.weight.shape == _channels_last(w.shape)
    last.weight.set_data(mx.np.array(w.transpose((0,) + tuple(range(2, w.ndim)) + (1,))))
    last.bias.set_data(first.bias.data())
    yl, dxl = _forward_grad(last, xl)
    assert yl.shape == _channels_last(y.shape)
    _close(yl, y.transpose((0,) + tuple(range(2, y.ndim)) + (1,)), rtol=1e-4, atol=1e-5)
    _close(dxl, dx.transpose((0,) + tuple(range(2, dx.ndim)) + (1,)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nd,layout", [(1, "NWC"), (2, "NHWC"), (3, "NDHWC")])
def test_pool(nd, layout):
    """Mirrors the channels-last half of MXNet's ``test_pool``: max, average (with and without the padding in
    the divisor) and global pooling over NWC/NHWC/NDHWC input, against the channels-first layer."""
    suffix = f"{nd}D"
    makers = [lambda **k: getattr(nn, "MaxPool" + suffix)(**k),
              lambda **k: getattr(nn, "MaxPool" + suffix)(3, 2, **k),
              lambda **k: getattr(nn, "AvgPool" + suffix)(**k),
              lambda **k: getattr(nn, "AvgPool" + suffix)(3, 2, 1, count_include_pad=False, **k),
              lambda **k: getattr(nn, "GlobalAvgPool" + suffix)(**k),
              lambda **k: getattr(nn, "GlobalMaxPool" + suffix)(**k)]
    shape = (2, 3) + (7,) * nd
    x = onp.random.default_rng(nd).standard_normal(shape).astype("float32")
    perm = (0,) + tuple(range(2, nd + 2)) + (1,)
    for make in makers:
        y, dx = _forward_grad(make(), x)
        yl, dxl = _forward_grad(make(layout=layout), x.transpose(perm))
        _close(yl, y.transpose(perm))
        _close(dxl, dx.transpose(perm))


def test_pool_ceil_mode_nhwc():
    """Mirrors the ceil_mode part of MXNet's ``test_pool`` in NHWC: (2, 10, 10, 2) pooled by 3 gives 3x3, or 4x4
    when rounding up."""
    x = mx.np.zeros((2, 10, 10, 2))
    assert nn.MaxPool2D(3, ceil_mode=False, layout="NHWC")(x).shape == (2, 3, 3, 2)
    assert nn.MaxPool2D(3, ceil_mode=True, layout="NHWC")(x).shape == (2, 4, 4, 2)


def test_slice_pooling2d_nhwc():
    """Mirrors MXNet's ``test_slice_pooling2d`` in NHWC, on a smaller input: pooling a slice of an NHWC array
    equals pooling the same slice taken in NCHW."""
    x = onp.random.default_rng(5).uniform(size=(4, 12, 16, 6)).astype("float32")
    for make in (lambda **k: nn.MaxPool2D(strides=(2, 3), padding=(1, 1), **k),
                 lambda **k: nn.AvgPool2D(strides=(2, 2), padding=(1, 1), **k),
                 lambda **k: nn.GlobalMaxPool2D(**k), lambda **k: nn.GlobalAvgPool2D(**k)):
        sliced = mx.npx.slice(mx.np.array(x), begin=(0, 0, 0, 0), end=(2, 8, 10, 4))
        y = make(layout="NHWC")(sliced).asnumpy()
        ref = make()(mx.np.array(sliced.asnumpy().transpose(0, 3, 1, 2))).asnumpy()
        _close(y, ref.transpose(0, 2, 3, 1))


def test_layout_neither_first_nor_last():
    """A layout that is neither channels-first nor channels-last names the two accepted ones."""
    with pytest.raises(ValueError, match="'NCHW' or 'NHWC'"):
        nn.MaxPool2D(layout="NCWH")
    with pytest.raises(ValueError, match="'NCW' or 'NWC'"):
        nn.Conv1D(4, 3, layout="NHWC")


@pytest.mark.xfail(strict=True, raises=AttributeError,
                   reason="mxlite has no deformable convolution layers (DeformableConvolution, "
                          "ModulatedDeformableConvolution): they need MXNet's contrib operators")
def test_ModulatedDeformableConvolution():
    """Mirrors MXNet's ``test_ModulatedDeformableConvolution`` (and ``test_DeformableConvolution``)."""
    nn.DeformableConvolution(10, kernel_size=(3, 3), strides=1, padding=0)


@pytest.mark.xfail(strict=True, raises=AttributeError,
                   reason="mxlite runs blocks eagerly and has no operator graph, so there are no operator hooks "
                          "(register_op_hook); forward hooks (register_forward_hook) see every block's output")
def test_op_hook_output_names():
    """Mirrors MXNet's ``test_op_hook_output_names``."""
    net = nn.HybridSequential()
    net.add(nn.Dense(2))
    net.register_op_hook(lambda name, op_name, array: None)


@pytest.mark.xfail(strict=True, raises=ValueError,
                   reason="mxlite's Parameters are dense: stype='row_sparse' raises (row_sparse gradients are "
                          "supported with grad_stype='row_sparse')")
def test_sparse_parameter():
    """Mirrors MXNet's ``test_sparse_parameter`` (and ``test_parameter_invalid_access``,
    ``test_parameter_row_sparse_data``, ``test_multi_trainer`` of test_gluon_trainer.py)."""
    gluon.Parameter("weight", shape=(10, 10), stype="row_sparse", grad_stype="row_sparse")


# -- test_numpy_gluon.py ---------------------------------------------------------------------------
def test_optimizer_with_np_ndarrays():
    """Mirrors MXNet 2.x's ``test_optimizer_with_np_ndarrays``: a block using its deferred parameters directly
    defines ``infer_shape(x)`` to set their shapes, and the first call runs it."""
    class LinearRegression(gluon.HybridBlock):
        def __init__(self, num_input_dim=0, num_hidden_dim=100, num_output_dim=10):
            super().__init__()
            self.w1 = gluon.Parameter("w1", shape=(num_input_dim, num_hidden_dim), allow_deferred_init=True)
            self.w2 = gluon.Parameter("w2", shape=(num_hidden_dim, num_output_dim), allow_deferred_init=True)

        def forward(self, x):
            device = x.device
            h = x.dot(self.w1.data(device))
            h_relu = mx.npx.relu(h)
            return h_relu.dot(self.w2.data(device))

        def infer_shape(self, x, *args):
            self.w1.shape = (x.shape[x.ndim - 1], self.w1.shape[1])

    class TotalLoss(gluon.HybridBlock):
        def forward(self, pred, label):
            return ((pred - label) ** 2).sum()

    regressor = LinearRegression()
    regressor.initialize(mx.init.Uniform())
    regressor.hybridize()
    x = mx.np.random.uniform(size=(64, 1000))
    regressor(x)
    assert regressor.w1.shape == (1000, 100)
    y = mx.np.random.uniform(size=(64, 10))
    total_loss = TotalLoss()
    trainer = gluon.Trainer(regressor.collect_params(), "sgd", {"learning_rate": 1e-3, "momentum": 0.9})
    before = regressor.w1.data().asnumpy()
    for _ in range(2):
        with mx.autograd.record():
            loss = total_loss(regressor(x), y)
        loss.backward()
        trainer.step(1)
    assert onp.isfinite(float(loss)) and not onp.array_equal(regressor.w1.data().asnumpy(), before)


def test_deferred_parameter_without_infer_shape_still_raises():
    """Without ``infer_shape`` the first call raises DeferredInitializationError, as in MXNet."""
    class Net(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.w = gluon.Parameter("w", shape=(0, 3), allow_deferred_init=True)

        def forward(self, x):
            return x.dot(self.w.data())

    net = Net()
    net.initialize()
    with pytest.raises(gluon.parameter.DeferredInitializationError):
        net(mx.np.ones((2, 4)))


def test_symbolic_basic_slicing_split():
    """Mirrors the split half of MXNet 2.x's ``test_symbolic_basic_slicing``: ``np.split``, ``np.hsplit`` and
    ``np.vsplit`` inside blocks, against NumPy, with gradients."""
    shape = (4, 6, 8, 5)
    a = onp.random.default_rng(2).standard_normal(shape).astype(onp.float32)
    for split, axis in ((lambda x: mx.np.split(x, shape[2], axis=2), 2), (lambda x: mx.np.hsplit(x, shape[1]), 1),
                        (lambda x: mx.np.vsplit(x, shape[0]), 0)):
        x = mx.np.array(a)
        x.attach_grad()
        with mx.autograd.record():
            out = mx.np.concatenate(split(x)[1:-1], axis=axis)
        out.backward()
        want = onp.concatenate(onp.split(a, shape[axis], axis=axis)[1:-1], axis=axis)
        _close(out, want)
        grad = onp.ones(shape)
        index = [slice(None)] * 4
        for i in (0, shape[axis] - 1):
            index[axis] = i
            grad[tuple(index)] = 0
        _close(x.grad, grad)


# -- test_loss.py ----------------------------------------------------------------------------------
def _cosine_inputs():
    mx.random.seed(3)
    input1, input2 = mx.np.random.randn(3, 2), mx.np.random.randn(3, 2)
    label = mx.np.sign(mx.np.random.randn(input1.shape[0]))
    numerator = mx.np.sum(input1 * input2, keepdims=True, axis=1).as_nd_ndarray()
    denominator = (mx.np.sqrt(mx.np.sum(input1 ** 2, axis=1, keepdims=True))
                   * mx.np.sqrt(mx.np.sum(input2 ** 2, axis=1, keepdims=True))).as_nd_ndarray()
    return input1, input2, label, numerator, denominator


def test_cosine_loss():
    """Mirrors MXNet's ``test_cosine_loss`` (its reference without the ``axis=1`` that ``broadcast_maximum`` does
    not take: see the xfail below)."""
    input1, input2, label, numerator, denominator = _cosine_inputs()
    loss = gluon.loss.CosineEmbeddingLoss()(input1, input2, label)
    want = mx.nd.where(label.as_nd_ndarray() == 1, 1 - numerator / denominator,
                       mx.nd.broadcast_maximum(mx.nd.array([0]), numerator / denominator)).reshape((-1,))
    _close(loss, want, rtol=1e-3, atol=1e-5)


@pytest.mark.xfail(strict=True, raises=TypeError,
                   reason="an mx.nd operator given an argument it does not take raises TypeError; MXNet ignores it "
                          "(broadcast_maximum has no axis)")
def test_cosine_loss_reference_with_axis():
    """The reference line of MXNet's ``test_cosine_loss`` as written."""
    _, _, _, numerator, denominator = _cosine_inputs()
    mx.nd.broadcast_maximum(mx.nd.array([0]), numerator / denominator, axis=1)

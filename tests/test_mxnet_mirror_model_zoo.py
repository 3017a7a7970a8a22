"""MXNet's own unit tests that need the model zoo, replayed on mxlite.

Two sources (Apache MXNet master):

* tests/python/unittest/test_gluon_model_zoo.py: all of it, ``test_models`` (one case per model)
  and ``test_parallel_download``;
* tests/python/unittest/test_gluon.py: the Block tests that build a zoo model (``test_export``,
  ``test_import``, ``test_dtype``, ``test_save_load``, ``test_hybrid_multi_context``,
  ``test_hybrid_static_memory``, ``test_hybrid_static_memory_switching``, ``test_summary``,
  ``test_hybrid_static_memory_recording``). tests/test_mxnet_mirror_gluon.py has the rest of that file.

Each test names the MXNet test it mirrors. The calls are a Gluon user's, with ``import mxlite as mx``;
the expected values are MXNet's. MXNet downloads pretrained weights where a test asks for them; the tests have
no network (``$MXNET_GLUON_REPO`` is an empty local folder), so those calls raise
:class:`PretrainedUnavailableError` naming the file to put in ``root``, and the test checks that error and then
runs the rest of the check on random weights (tests/test_model_store.py loads and downloads weight files).

Cost: MXNet runs the forward pass of every model at 224x224 (Inception v3: 299x299). Here the
cheap subset does so at MXNet's exact input, batch 2 (``FULL_FORWARD``: ResNet-18 v1 and v2,
DenseNet-121, SqueezeNet 1.0 and 1.1, every MobileNet and MobileNetV2, Inception v3 at 299x299);
AlexNet and VGG-11 with BatchNorm run the same layers on a smaller image (``SMALL_FORWARD``: their
first Dense layer, sized by the image, is what makes 224x224 slow); the other models (ResNet 34-152
v1 and v2, the other VGGs, DenseNet-161/169/201) are built, printed and initialised as MXNet does,
without the forward pass. tests/test_model_zoo.py checks every model's parameters and several models'
logits against MXNet. Where MXNet's Block tests use a larger batch or image than their check needs,
the docstring says what is used instead.
"""

import io
import multiprocessing
import os
import sys
from contextlib import redirect_stdout

import numpy as onp
import pytest

import mxlite as mx
from mxlite import gluon
from mxlite.gluon import nn
from mxlite.gluon.model_zoo.vision import PretrainedUnavailableError, get_model  # = mx.gluon.model_zoo.vision


def _close(a, b, rtol=1e-5, atol=1e-6):
    onp.testing.assert_allclose(onp.asarray(a.asnumpy() if hasattr(a, "asnumpy") else a),
                                onp.asarray(b.asnumpy() if hasattr(b, "asnumpy") else b), rtol=rtol, atol=atol)


# MXNet's list, in its order.
ALL_MODELS = ["resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1", "resnet152_v1",
              "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2", "resnet152_v2",
              "vgg11", "vgg13", "vgg16", "vgg19",
              "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
              "alexnet", "inceptionv3",
              "densenet121", "densenet161", "densenet169", "densenet201",
              "squeezenet1.0", "squeezenet1.1",
              "mobilenet1.0", "mobilenet0.75", "mobilenet0.5", "mobilenet0.25",
              "mobilenetv2_1.0", "mobilenetv2_0.75", "mobilenetv2_0.5", "mobilenetv2_0.25"]
PRETRAINED_TO_TEST = {"mobilenetv2_0.25"}  # MXNet downloads this one's weights
FULL_FORWARD = {"resnet18_v1", "resnet18_v2", "densenet121", "squeezenet1.0", "squeezenet1.1", "inceptionv3",
                "mobilenet1.0", "mobilenet0.75", "mobilenet0.5", "mobilenet0.25",
                "mobilenetv2_1.0", "mobilenetv2_0.75", "mobilenetv2_0.5", "mobilenetv2_0.25"}
SMALL_FORWARD = {"alexnet": 64, "vgg11_bn": 32}  # image side: the same layers, a smaller first Dense layer


@pytest.mark.parametrize("model_name", ALL_MODELS)
def test_models(model_name, tmp_path):
    """Mirrors MXNet's ``test_models``: get_model, print, initialize, forward on a random batch of 2.

    MXNet's pretrained case (mobilenetv2_0.25) finds no weight file and no network: the error names the file,
    then the case runs on random weights. Nothing is written in ``root`` (created for the download, as MXNet does).
    """
    root = str(tmp_path / "model")
    test_pretrain = model_name in PRETRAINED_TO_TEST
    if test_pretrain:
        with pytest.raises(PretrainedUnavailableError, match=rf"^{model_name}: pretrained weights unavailable: "
                           rf".*{model_name}-ae8f9392\.params does not exist"):
            get_model(model_name, pretrained=True, root=root)
    model = get_model(model_name, pretrained=False, root=root)
    assert str(model).splitlines()[0] == f"{type(model).__name__}("
    model.initialize()
    if model_name in FULL_FORWARD:
        side = 299 if "inception" in model_name else 224
    elif model_name in SMALL_FORWARD:
        side = SMALL_FORWARD[model_name]
    else:
        side = None
    if side is not None:
        out = model(mx.np.random.uniform(size=(2, 3, side, side)))
        out.wait_to_read()
        assert out.shape == (2, 1000)
        assert onp.isfinite(out.asnumpy()).all()
    assert not os.path.exists(root) or os.listdir(root) == []


def _parallel_download(model_name, root):
    try:
        get_model(model_name, pretrained=True, root=root)
    except PretrainedUnavailableError:
        return
    sys.exit(2)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_parallel_download(tmp_path):
    """Mirrors MXNet's ``test_parallel_download`` (skipped in MXNet: not fork-safe there, issue 17782).

    Ten processes ask for mobilenetv2_0.25's pretrained weights at once, without a network: every one gets the
    error naming the file, and none leaves a file behind. (tests/test_model_store.py downloads from a mirror.)
    """
    root = str(tmp_path / "parallel_download")
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_parallel_download, args=("mobilenetv2_0.25", root), daemon=True)
                 for _ in range(10)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=60)
    for p in processes:  # a process still running after a minute is a hang: end it, the assert reports it
        if p.is_alive():
            p.terminate()
    assert [p.exitcode for p in processes] == [0] * 10
    assert os.listdir(root) == []


# -- tests/python/unittest/test_gluon.py ---------------------------------------------------------------


def test_export(tmp_path):
    """Mirrors MXNet's ``test_export``: a hybridized resnet18_v1 exports its graph and weights."""
    tmpfile = os.path.join(str(tmp_path), "gluon")
    device = mx.device.current_device()
    model = gluon.model_zoo.vision.resnet18_v1(device=device, pretrained=False)
    model.initialize()
    model.hybridize()
    model(mx.np.random.normal(size=(1, 3, 32, 32)))
    symbol_filename, params_filename = model.export(tmpfile)
    assert symbol_filename == tmpfile + "-symbol.json"
    assert params_filename == tmpfile + "-0000.params"


def test_import(tmp_path):
    """Mirrors MXNet's ``test_import``: export, then ``SymbolBlock.imports`` gives the same outputs."""
    device = mx.device.current_device()
    net1 = gluon.model_zoo.vision.resnet18_v1(device=device, pretrained=False)
    net1.initialize()
    net1.hybridize()
    data = mx.np.random.normal(size=(1, 3, 32, 32))
    out1 = net1(data)
    prefix = os.path.join(str(tmp_path), "net1")
    net1.export(prefix, epoch=1)
    net2 = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0001.params", device)
    out2 = net2(data)
    lines = str(net2).splitlines()
    _close(out1, out2)
    assert lines[0] == "SymbolBlock("
    assert lines[1]
    assert lines[2] == ")"


def test_dtype():
    """Mirrors MXNet's ``test_dtype``: resnet18_v1 cast to float64 trains and infers in float64;
    float64 Embedding and Dense layers give float64. (MXNet: batch 16; here 4, the same check.)"""
    net = mx.gluon.model_zoo.vision.resnet18_v1()
    net.initialize()
    net.cast("float64")
    with mx.autograd.record():
        y = net(mx.np.ones((4, 3, 32, 32), dtype="float64"))
        y.backward()
    assert y.dtype == onp.float64
    assert net.features[0].weight.grad().dtype == onp.float64

    net = mx.gluon.model_zoo.vision.resnet18_v1()
    net.initialize()
    net.hybridize()
    net(mx.np.ones((4, 3, 32, 32), dtype="float32"))
    net.cast("float64")
    assert net(mx.np.ones((4, 3, 32, 32), dtype="float64")).dtype == onp.float64
    mx.npx.waitall()

    class Net(gluon.Block):
        def __init__(self, in_dim, output_dim):
            super().__init__()
            self.embed = gluon.nn.Embedding(input_dim=in_dim, output_dim=output_dim, dtype=onp.float64)
            self.dense = gluon.nn.Dense(2, dtype=onp.float64)

        def forward(self, x):
            e = self.embed(x)
            assert e.dtype == onp.float64
            y = self.dense(e)
            assert y.dtype == onp.float64
            return y

    net = Net(5, 10)
    net.initialize()
    assert net(mx.np.ones((3,), dtype=onp.float64)).shape == (3, 2)
    mx.npx.waitall()


def test_save_load(tmp_path):
    """Mirrors MXNet's ``test_save_load``: a ResNet's weights load into a ResNet whose output layer was
    replaced (its input size deferred), and two stacked bidirectional LSTMs load into a new model."""
    tmpdir = str(tmp_path)
    net = mx.gluon.model_zoo.vision.get_resnet(1, 18, pretrained=False, root=tmpdir)
    net.initialize()
    x = mx.np.ones((1, 3, 224, 224))
    want = net(x)
    net.save_parameters(os.path.join(tmpdir, "test_save_load.params"))

    net = mx.gluon.model_zoo.vision.get_resnet(1, 18)
    net.output = mx.gluon.nn.Dense(1000)
    net.load_parameters(os.path.join(tmpdir, "test_save_load.params"))
    assert net.output.weight.shape == (1000, 512)
    _close(net(x), want, rtol=1e-5, atol=1e-5)

    class Network(gluon.HybridBlock):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.encoders = gluon.nn.HybridSequential()
            for _ in range(2):
                self.encoders.add(mx.gluon.rnn.LSTM(200, 1, bidirectional=True))

        def forward(self, x):
            for i in range(2):
                x = self.encoders[i](x)
            return x

    net = Network()
    net.initialize(mx.init.Uniform(), device=mx.cpu())
    net.hybridize()
    x = mx.np.array(onp.random.rand(32, 10, 10)).as_in_context(mx.cpu())
    want = net(x)
    param_path = os.path.join(tmpdir, "test_save_load_network.params")
    net.save_parameters(param_path)
    net2 = Network()
    net2.load_parameters(param_path)
    _close(net2(x), want)


def test_hybrid_multi_context():
    """Mirrors MXNet's ``test_hybrid_multi_context``: a ResNet with mirrors on two devices runs on the first."""
    net = mx.gluon.model_zoo.vision.get_resnet(1, 18)
    net.initialize(device=[mx.cpu(0), mx.cpu(1)])
    net.hybridize()
    assert net(mx.np.zeros((1, 3, 32, 32), device=mx.cpu(0))).asnumpy().shape == (1, 1000)


# MXNet parametrizes static_alloc x static_shape and skips static_shape without static_alloc.
STATIC_MEMORY = [(False, False), (True, False), (True, True)]


@pytest.mark.parametrize(("static_alloc", "static_shape"), STATIC_MEMORY)
def test_hybrid_static_memory(static_alloc, static_shape):
    """Mirrors MXNet's ``test_hybrid_static_memory``: the same outputs and gradients after hybridize()."""
    x = mx.np.random.uniform(size=(2, 3, 32, 32))
    x.attach_grad()
    net = gluon.model_zoo.vision.get_resnet(1, 18, pretrained=False, device=mx.device.current_device())
    net.initialize()
    net(x)

    def test(net, x):
        with mx.autograd.record():
            y = net(x) + net(x)
            y.backward()
        grads = {k: v.grad() for k, v in net.collect_params().items() if v.grad_req != "null"}
        return y, grads

    y1, grads1 = test(net, x)
    net.hybridize(static_alloc=static_alloc, static_shape=static_shape)
    y2, grads2 = test(net, x)
    _close(y1, y2, rtol=1e-3, atol=1e-5)
    for key in grads1:
        _close(grads1[key], grads2[key], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("static_alloc", "static_shape"), STATIC_MEMORY)
def test_hybrid_static_memory_switching(static_alloc, static_shape):
    """Mirrors MXNet's ``test_hybrid_static_memory_switching``: the batch size changes between calls."""
    net = gluon.model_zoo.vision.get_resnet(1, 18, pretrained=False, device=mx.device.current_device())
    net.initialize()
    net.hybridize(static_alloc=static_alloc, static_shape=static_shape)
    for batch in (4, 2):
        x = mx.np.random.uniform(size=(batch, 3, 32, 32))
        net(x)
        with mx.autograd.record():
            y = net(x)
            y.backward()
        assert y.shape == (batch, 1000)
    mx.npx.waitall()


def test_summary():
    """Mirrors MXNet's ``test_summary`` (but the hybridized call, below): summaries of resnet50_v1 (with
    MXNet's totals), of a model sharing a weight between Embedding and Dense, and of an LSTM with its
    begin state. (MXNet: resnet50_v1 on a batch of 32; here 1, the same totals.)"""
    net = gluon.model_zoo.vision.resnet50_v1()
    net.initialize()
    printed = io.StringIO()
    with redirect_stdout(printed):
        net.summary(mx.np.ones((1, 3, 224, 224)))
    for line in ("Total params: 25629032", "Trainable params: 25575912", "Non-trainable params: 53120"):
        assert line in printed.getvalue()

    net2 = nn.Sequential()
    net2.add(nn.Embedding(40, 30))
    net2.add(gluon.rnn.LSTM(30))
    net2.add(nn.Dense(40, flatten=False).share_parameters(net2[0].params))
    net2.initialize()
    with mx.np_shape(True):  # MXNet: mx.util.np_shape(True), mx.util.np_array(True); see the test below
        net2.summary(mx.np.ones((80, 32)))

    net3 = gluon.rnn.LSTM(30)
    net3.initialize()
    begin_state = net3.begin_state(32)
    net3.summary(mx.np.ones((80, 32, 5)), begin_state)


def test_summary_under_util_scopes():
    """Mirrors the ``mx.util`` scopes of MXNet's ``test_summary``: a summary inside np_shape/np_array, with
    MXNet's totals for a parameter shared by two layers (counted in both rows, then once as shared)."""
    net2 = nn.Sequential()
    net2.add(nn.Embedding(40, 30))
    net2.add(gluon.rnn.LSTM(30))
    net2.add(nn.Dense(40, flatten=False).share_parameters(net2[0].params))
    net2.initialize()
    out = io.StringIO()
    with mx.util.np_shape(True), mx.util.np_array(True), redirect_stdout(out):
        net2.summary(mx.np.ones((80, 32)))
    text = out.getvalue()
    for line in ("Embedding-1", "LSTM-2", "Dense-3", "Total params: 9880", "Trainable params: 9880",
                 "Shared params in forward computation graph: 1200", "Unique parameters in model: 8680"):
        assert line in text
    assert "Sequential" not in text  # containers get no row


def test_summary_of_a_parameter_still_deferred_raises_as_mxnet():
    """A parameter of a called block that the pass did not use keeps its unknown shape: MXNet's summary
    reads ``p.data()`` and raises DeferredInitializationError; no row with a negative count."""

    class Net(nn.Block):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(3)
            self.extra = gluon.Parameter("extra", shape=(4, 0), allow_deferred_init=True)  # never used

        def forward(self, x):
            return self.dense(x)

    net = Net()
    net.initialize()
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(mx.nn.DeferredInitializationError, match="'extra'"):
        net.summary(mx.np.ones((2, 4)))
    assert "-4" not in out.getvalue()
    assert not net._forward_hooks and not net.dense._forward_hooks  # the summary's hooks are gone
    assert net(mx.np.ones((2, 4))).shape == (2, 3)


@pytest.mark.xfail(strict=True, reason="mxlite builds no symbolic graph (plain hybridize() runs eagerly; static "
                                       "hybridize captures CUDA graphs on GPUs only), so summary() of a hybridized "
                                       "block runs and prints; MXNet raises AssertionError (a summary needs the "
                                       "imperative graph)")
def test_summary_hybridized():
    """Mirrors the last check of MXNet's ``test_summary``: summary() of a hybridized resnet50_v1 raises.
    (MXNet: a batch of 32 at 224x224; here 1 at 32x32, as the check raises before computing.)"""
    net = gluon.model_zoo.vision.resnet50_v1()
    net.initialize()
    net.hybridize()
    with redirect_stdout(io.StringIO()), pytest.raises(AssertionError):
        net.summary(mx.np.ones((1, 3, 32, 32)))


def test_hybrid_static_memory_recording():
    """Mirrors MXNet's ``test_hybrid_static_memory_recording``: a recorded call, then an unrecorded one."""
    net = gluon.model_zoo.vision.get_resnet(1, 18, pretrained=False, device=mx.device.current_device())
    net.initialize()
    net.hybridize(static_alloc=True)
    x = mx.np.random.uniform(size=(1, 3, 32, 32))
    with mx.autograd.record(True):
        net(x)
    assert net(x).shape == (1, 1000)

"""mxlite.gluon.model_zoo.vision: MXNet Gluon's predefined vision models.

The reference numbers were taken from Apache MXNet 1.9.1's ``gluon.model_zoo.vision`` (the same
architectures as MXNet master's), on CPU:

* ``REFERENCE``: for every model with its defaults (1000 classes), after a forward pass on a
  224x224 RGB batch (299x299 for Inception v3), the totals of ``collect_params()``: *all*
  parameters, BatchNorm running means and variances included, and the trainable ones
  (``grad_req != 'null'``: what torchvision counts, e.g. 11,689,512 for ResNet-18); the number of
  parameters; and a fingerprint of every structural name (MXNet 2.x naming, ``features.1.gamma``),
  its shape and whether it is trainable, in ``collect_params()`` order.
* ``GOLDEN``: logits of small models whose parameters are filled with a fixed pseudo-random
  pattern (:func:`_fill`), in inference mode, so the forward computation itself is compared.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd
from mxlite.gluon.model_zoo import vision
from mxlite.gluon.model_zoo.vision import PretrainedUnavailableError, densenet, resnet

# name -> (total parameters incl. running stats, trainable parameters, number of parameters, fingerprint)
REFERENCE: dict[str, tuple[int, int, int, str]] = {
    "resnet18_v1": (11_699_112, 11_689_512, 102, "02820f5f67a8edbd"),
    "resnet34_v1": (21_814_696, 21_797_672, 182, "5b90f2de62011e36"),
    "resnet50_v1": (25_629_032, 25_575_912, 299, "335f581fdeac67a9"),
    "resnet101_v1": (44_695_144, 44_589_800, 588, "600b799feafdace2"),
    "resnet152_v1": (60_404_072, 60_252_648, 877, "b990a1f712b1a7a0"),
    "resnet18_v2": (11_695_796, 11_687_848, 98, "1dd4e90e41553644"),
    "resnet34_v2": (21_811_380, 21_796_008, 178, "9eb186830efa6ee7"),
    "resnet50_v2": (25_595_060, 25_549_480, 259, "b08c122ea2903361"),
    "resnet101_v2": (44_639_412, 44_541_608, 514, "1c5001253ebc1410"),
    "resnet152_v2": (60_329_140, 60_185_256, 769, "036d80beacc545a9"),
    "vgg11": (132_863_336, 132_863_336, 22, "8c6cfad707d936e3"),
    "vgg13": (133_047_848, 133_047_848, 26, "60a5c789d00bc767"),
    "vgg16": (138_357_544, 138_357_544, 32, "cd5e635aa6d53788"),
    "vgg19": (143_667_240, 143_667_240, 38, "52c8bb06488a8f1d"),
    "vgg11_bn": (132_874_344, 132_868_840, 54, "8293b01484395f8b"),
    "vgg13_bn": (133_059_624, 133_053_736, 66, "12b5213e7698859e"),
    "vgg16_bn": (138_374_440, 138_365_992, 84, "206a8bd6bc43c87f"),
    "vgg19_bn": (143_689_256, 143_678_248, 102, "3e863cf25e7a4aff"),
    "alexnet": (61_100_840, 61_100_840, 16, "b364f72206d71b3a"),
    "densenet121": (8_062_504, 7_978_856, 606, "5738e8cb1c5ab675"),
    "densenet161": (28_900_936, 28_681_000, 806, "8532ffaec1bbd680"),
    "densenet169": (14_307_880, 14_149_480, 846, "6c098c29507d776e"),
    "densenet201": (20_242_984, 20_013_928, 1006, "e10c52b28a7897c8"),
    "squeezenet1.0": (1_248_424, 1_248_424, 52, "dd2c42d5a0795754"),
    "squeezenet1.1": (1_235_496, 1_235_496, 52, "87a7c76918d3b52d"),
    "inceptionv3": (23_869_000, 23_834_568, 472, "552c8f5a4bb75e56"),
    "mobilenet1.0": (4_253_864, 4_231_976, 137, "99763a2cb7e02da2"),
    "mobilenet0.75": (2_601_976, 2_585_560, 137, "4a2e5af814ed4254"),
    "mobilenet0.5": (1_342_536, 1_331_592, 137, "a4ceb5e4c0a56de3"),
    "mobilenet0.25": (475_544, 470_072, 137, "586258d4eb345774"),
    "mobilenetv2_1.0": (3_539_136, 3_504_960, 266, "ef22947052268339"),
    "mobilenetv2_0.75": (2_653_864, 2_627_592, 266, "8083ac8218dac876"),
    "mobilenetv2_0.5": (1_983_104, 1_964_736, 266, "6f126479d2652071"),
    "mobilenetv2_0.25": (1_526_856, 1_516_392, 266, "02517ea14c491fd3"),
}

# The input size of the layer whose input size depends on the image (the first Dense after the
# convolutions) at the reference resolution: 512x7x7 for VGG, 256x6x6 for AlexNet, the last
# block's channels for DenseNet (7x7 pooled to 1x1) and Inception v3 (8x8 pooled to 1x1).
# test_forward_at_reference_size checks these by real forward passes for AlexNet and DenseNet-121.
HEAD_IN = {"alexnet": 256 * 6 * 6, "densenet121": 1024, "densenet161": 2208, "densenet169": 1664,
           "densenet201": 1920, "inceptionv3": 2048, **{f"vgg{d}{bn}": 512 * 7 * 7 for d in (11, 13, 16, 19)
                                                       for bn in ("", "_bn")}}


def _counts(net: mx.nn.Block) -> tuple[int, int, int]:
    """(all parameters, trainable parameters, number of Parameters) of ``collect_params()``."""
    params = list(net.collect_params().values())
    assert all(-1 not in p.shape for p in params), [p.label for p in params if -1 in p.shape]
    total = sum(int(np.prod(p.shape)) for p in params)
    trainable = sum(int(np.prod(p.shape)) for p in params if p.grad_req != "null")
    return total, trainable, len(params)


def _fingerprint(net: mx.nn.Block) -> str:
    text = "\n".join(f"{name}:{','.join(map(str, p.shape))}:{'null' if p.grad_req == 'null' else 'grad'}"
                     for name, p in net.collect_params().items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _settle_shapes(name: str, net: mx.nn.Block) -> None:
    """Complete the shapes a first forward pass on an RGB image at the reference size would.

    The leading layers of ``features`` that infer their input channels run for real on a tiny
    3-channel batch (only they are initialised); the one Dense layer whose input size follows
    from the image size gets the size it has at the reference resolution (``HEAD_IN``).
    """
    x = mx.nd.zeros((1, 3, 8, 8))
    for child in net.features:
        if not any(-1 in p.shape for p in child.collect_params().values()):
            break
        child.initialize()
        x = child(x)
    for label, p in net.collect_params().items():
        if -1 in p.shape:
            assert label.endswith("weight") and len(p.shape) == 2 and p.shape[1] == -1, (label, p.shape)
            p.shape = (p.shape[0], HEAD_IN[name])


def test_model_names_are_mxnets() -> None:
    assert vision.model_names() == sorted(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_parameters_match_mxnet(name: str) -> None:
    """Every model: MXNet's parameter totals, names, order, shapes and trainability."""
    total, trainable, count, fingerprint = REFERENCE[name]
    net = vision.get_model(name)
    _settle_shapes(name, net)
    assert _counts(net) == (total, trainable, count)
    assert _fingerprint(net) == fingerprint


def test_parameter_names_follow_mxnet_structure() -> None:
    net = vision.resnet18_v1()
    names = list(net.collect_params())
    assert names[:6] == ["features.0.weight", "features.1.gamma", "features.1.beta", "features.1.running_mean",
                         "features.1.running_var", "features.4.0.body.0.weight"]
    assert "features.5.0.downsample.0.weight" in names and "features.4.0.downsample.0.weight" not in names
    assert names[-2:] == ["output.weight", "output.bias"]
    v2 = list(vision.resnet50_v2().collect_params())
    assert v2[:2] == ["features.0.gamma", "features.0.beta"] and "features.5.0.bn1.gamma" in v2
    assert "features.5.0.downsample.weight" in v2 and "features.5.0.conv3.weight" in v2
    assert list(vision.mobilenet_v2_0_25().collect_params())[-1] == "output.0.weight"
    dense = list(vision.densenet121().collect_params())
    assert "features.4.0.1.0.gamma" in dense  # block 1, layer 0, new-features branch (after the Identity)
    assert list(vision.inception_v3().collect_params())[-2:] == ["output.weight", "output.bias"]


# (name, options, image size, total, trainable): MXNet 1.9.1's collect_params() totals after the same forward.
FORWARD_CASES = [
    ("resnet18_v1", {"thumbnail": True, "classes": 10}, 32, 11_183_306, 11_173_834),
    ("resnet18_v2", {"thumbnail": True, "classes": 10}, 32, 11_179_990, 11_172_170),
    ("resnet50_v1", {"classes": 10}, 32, 23_600_522, 23_547_402),
    ("vgg11_bn", {"classes": 10}, 32, 28_155_018, 28_149_514),
    ("mobilenet0.5", {"classes": 10}, 32, 834_666, 823_722),
    ("mobilenetv2_0.5", {"classes": 10}, 32, 715_904, 697_536),
    ("squeezenet1.1", {"classes": 10}, 224, 727_626, 727_626),
]


@pytest.mark.parametrize(("name", "options", "size", "total", "trainable"), FORWARD_CASES,
                         ids=[c[0] for c in FORWARD_CASES])
def test_forward_small_inputs(name: str, options: dict, size: int, total: int, trainable: int) -> None:
    net = vision.get_model(name, **options)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))  # keeps the scale
    x = mx.nd.array(np.random.RandomState(0).random_sample((2, 3, size, size)).astype(np.float32))
    y = net(x).asnumpy()
    assert y.shape == (2, options["classes"])
    assert np.isfinite(y).all() and np.abs(y).max() > 1e-3 and not np.allclose(y[0], y[1])
    assert _counts(net)[:2] == (total, trainable)  # shapes inferred from this input, as MXNet's
    np.testing.assert_array_equal(net(x).asnumpy(), y)  # inference mode: no dropout, running statistics


def test_forward_at_reference_size() -> None:
    """AlexNet and DenseNet-121 on 224x224 images: their deferred Dense layers get HEAD_IN inputs."""
    x = mx.nd.array(np.random.RandomState(0).random_sample((1, 3, 224, 224)).astype(np.float32))
    for name, dense in (("alexnet", lambda net: net.features[9]), ("densenet121", lambda net: net.output)):
        net = vision.get_model(name, classes=10)
        net.initialize()
        assert net(x).shape == (1, 10)
        assert dense(net).weight.shape[1] == HEAD_IN[name]
    assert _counts(net)[:2] == (7_047_754, 6_964_106)  # MXNet's densenet121(classes=10)


def test_grayscale_input_is_inferred() -> None:
    """The first layer infers its input channels, as in MXNet (e.g. MNIST into a ResNet)."""
    net = vision.resnet18_v1(classes=10, thumbnail=True)
    net.initialize()
    assert net(mx.nd.ones((2, 1, 28, 28))).shape == (2, 10)
    assert net.features[0].weight.shape == (64, 1, 3, 3)


def _fill(net: mx.nn.Block) -> None:
    """Set every parameter from ``RandomState(0)`` in ``collect_params()`` order (fixed-by-design
    BatchNorm gamma/beta, i.e. ``scale=False``/``center=False``, keep 1 and 0), as the reference did."""
    rs = np.random.RandomState(0)
    for name, p in net.collect_params().items():
        if p.grad_req == "null" and (name.endswith("gamma") or name.endswith("beta")):
            continue
        shape = p.shape
        if len(shape) >= 2:
            value = rs.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        elif name.endswith("running_var"):
            value = 0.5 + rs.random_sample(shape)
        elif name.endswith("gamma"):
            value = 1.0 + 0.1 * rs.standard_normal(shape)
        else:
            value = 0.1 * rs.standard_normal(shape)
        p.set_data(value.astype(np.float32))


# name -> (builder, image size, MXNet 1.9.1's logits for RandomState(1).random_sample((2, 3, size, size)))
GOLDEN = {
    "resnet_v1_bottleneck": (
        lambda: resnet.ResNetV1(resnet.BottleneckV1, [1, 1], [8, 16, 32], classes=5, thumbnail=True), 8,
        [[-1.035705, 0.572417, 0.456544, -1.371068, -0.400807], [-1.049163, 0.615895, 0.660086, -1.324074, -0.418166]]),
    "resnet_v2_basic": (
        lambda: resnet.ResNetV2(resnet.BasicBlockV2, [1, 1], [8, 8, 16], classes=5), 16,
        [[0.596189, -0.171932, -0.142615, 0.211009, 0.139865], [0.528447, -0.461388, -0.106229, 0.130516, 0.122463]]),
    "densenet_small": (
        lambda: densenet.DenseNet(8, 4, [2, 2], classes=5), 56,
        [[-1.22621, 0.52498, -1.324541, 0.98672, -0.766882], [-1.244216, 0.523197, -1.335665, 0.974907, -0.78785]]),
    "mobilenet0.25": (
        lambda: vision.get_model("mobilenet0.25", classes=5), 32,
        [[0.115125, 0.214979, -0.49077, -0.227128, 0.003567], [0.117694, 0.219371, -0.490015, -0.222231, -0.003055]]),
    "mobilenetv2_0.25": (
        lambda: vision.get_model("mobilenetv2_0.25", classes=5), 32,
        [[-2.443684, 1.117181, 0.839667, 4.029496, 2.01094], [-1.125514, -0.521088, 2.74223, 3.423198, 2.078982]]),
    "squeezenet1.0": (
        lambda: vision.get_model("squeezenet1.0", classes=5), 224,
        [[0.071087, 1.670568, 0.273927, 0.031901, 0.019373], [0.082415, 1.609222, 0.254032, 0.028372, 0.016681]]),
    "inceptionv3": (
        lambda: vision.get_model("inceptionv3", classes=5), 299,
        [[-0.831278, 0.362359, 0.223233, 5.20597, -1.161191], [-0.824171, 0.331495, 0.229415, 5.172918, -1.169721]]),
}


@pytest.mark.parametrize("case", list(GOLDEN))
def test_logits_match_mxnet(case: str) -> None:
    """Same parameters, same input: the logits MXNet computes (inference mode)."""
    build, size, expected = GOLDEN[case]
    net = build()
    net.initialize()
    x = mx.nd.array(np.random.RandomState(1).random_sample((2, 3, size, size)).astype(np.float32))
    net(x)  # completes the deferred shapes
    _fill(net)
    np.testing.assert_allclose(net(x).asnumpy(), np.array(expected), rtol=2e-4, atol=2e-5)


def test_blocks_standalone() -> None:
    x = mx.nd.array(np.random.RandomState(0).random_sample((2, 8, 8, 8)).astype(np.float32))
    for block, shape in ((vision.BasicBlockV1(16, 2, downsample=True), (2, 16, 4, 4)),
                         (vision.BasicBlockV2(8, 1), (2, 8, 8, 8)),
                         (vision.BottleneckV1(32, 2, downsample=True, in_channels=8), (2, 32, 4, 4)),
                         (vision.BottleneckV2(32, 1, downsample=True), (2, 32, 8, 8))):
        block.initialize()
        assert block(x).shape == shape
    identity = vision.BasicBlockV2(8, 1)
    identity.initialize()
    identity(x)  # completes the deferred shapes
    for p in identity.collect_params().values():  # zero convolutions: the block is the identity
        if p.label.endswith("weight"):
            p.set_data(np.zeros(p.shape, np.float32))
    np.testing.assert_array_equal(identity(x).asnumpy(), x.asnumpy())


TRAINING_CASES = {
    # a zoo model as scripts build it, and a tiny ResNet V1 from the zoo's classes
    "resnet18_v1": (lambda: vision.get_model("resnet18_v1", classes=4, thumbnail=True), "adam",
                    {"learning_rate": 1e-3}),
    "tiny_resnet_v1": (lambda: vision.ResNetV1(vision.BasicBlockV1, [1, 1, 1, 1], [8, 8, 16, 32, 64], classes=4,
                                               thumbnail=True), "sgd", {"learning_rate": 0.1}),
}


@pytest.mark.parametrize("case", list(TRAINING_CASES))
def test_training_steps_reduce_the_loss(case: str) -> None:
    """A few steps on one batch, data-parallel over two CPU devices, lower the loss."""
    build, optimizer, options = TRAINING_CASES[case]
    mx.random.seed(0)
    devices = [mx.cpu(0), mx.cpu(1)]
    net = build()
    net.initialize(mx.init.Xavier(), device=devices)
    rs = np.random.RandomState(0)
    x = rs.random_sample((8, 3, 16, 16)).astype(np.float32)
    y = rs.randint(0, 4, size=8).astype(np.float32)
    trainer = mx.gluon.Trainer(net.collect_params(), optimizer, options)
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for _ in range(4):
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with autograd.record():
            out = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        autograd.backward(out)
        trainer.step(batch_size=8)
        losses.append(float(sum(o.asnumpy().sum() for o in out)) / 8)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    for p in net.collect_params().values():  # every mirror stays identical (BatchNorm statistics are per device)
        if p.grad_req != "null":
            first, second = p.list_data()
            np.testing.assert_array_equal(first.asnumpy(), second.asnumpy())


def test_get_model_errors() -> None:
    with pytest.raises(ValueError, match=r"model 'resnet19_v1' is not supported.*alexnet, densenet121.*vgg19_bn"):
        vision.get_model("resnet19_v1")
    with pytest.raises(ValueError, match="mobilenetv2_0.25"):
        vision.get_model("mobilenet_v2_1_0")  # the constructor's name, not get_model's
    with pytest.raises(TypeError, match="name must be a string.*int: 18"):
        vision.get_model(18)
    assert isinstance(vision.get_model("ResNet18_V1"), vision.ResNetV1)  # case-insensitive, as MXNet's
    with pytest.raises(TypeError, match="unexpected keyword argument 'clases'"):
        vision.get_model("alexnet", clases=10)


@pytest.mark.parametrize(("call", "model"), [
    (lambda: vision.get_model("resnet50_v1", pretrained=True), "resnet50_v1"),
    (lambda: vision.vgg16_bn(pretrained=True), "vgg16_bn"),
    (lambda: vision.get_model("squeezenet1.1", pretrained=True, ctx=mx.cpu()), "squeezenet1.1"),
    (lambda: vision.mobilenet0_5(pretrained=True), "mobilenet0.5"),
    (lambda: vision.get_model("mobilenetv2_0.75", pretrained=True), "mobilenetv2_0.75"),
    (lambda: vision.inception_v3(pretrained=True, device=mx.cpu()), "inceptionv3"),
])
def test_pretrained_without_the_file_names_the_model_and_file(call, model: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MXNET_HOME", str(tmp_path))  # the default root: $MXNET_HOME/models, empty, no network
    file_name = re.escape(f"{model}-{mx.gluon.model_zoo.model_store.short_hash(model)}.params")
    with pytest.raises(PretrainedUnavailableError, match=rf"^{re.escape(model)}: pretrained weights unavailable: "
                       rf".*models/{file_name} does not exist"):
        call()
    assert issubclass(PretrainedUnavailableError, FileNotFoundError)


def test_family_argument_errors() -> None:
    with pytest.raises(ValueError, match="invalid number of layers 20; options are 18, 34, 50, 101, 152"):
        vision.get_resnet(1, 20)
    with pytest.raises(ValueError, match="invalid resnet version 3"):
        vision.get_resnet(3, 18)
    with pytest.raises(ValueError, match="invalid number of layers 12"):
        vision.get_vgg(12)
    with pytest.raises(ValueError, match="invalid number of layers 100"):
        vision.get_densenet(100)
    with pytest.raises(ValueError, match="unsupported version '1.2'"):
        vision.SqueezeNet("1.2")
    with pytest.raises(ValueError, match="ResNetV1: channels must have one entry more than layers"):
        vision.ResNetV1(vision.BasicBlockV1, [2, 2], [64, 64])
    with pytest.raises(ValueError, match="VGG: layers and filters must have the same length"):
        vision.VGG([1, 1], [64])


def test_reachable_under_gluon_and_options() -> None:
    from mxlite.gluon import model_zoo  # noqa: PLC0415 - the import path MXNet scripts use

    assert model_zoo.vision is vision and mx.gluon.model_zoo.vision.get_model is vision.get_model
    assert vision.get_model("resnet34_v2", classes=7).output.weight.shape == (7, 512)
    assert len(vision.vgg11_bn().features) == len(vision.vgg11(batch_norm=True).features) == 29 + 4
    drop = vision.densenet121(dropout=0.2)
    assert type(drop.features[4][0][1][-1]).__name__ == "Dropout"
    assert vision.get_model("mobilenet0.25", prefix="net_").prefix == "net_"  # Gluon 1.x keyword


def test_weights_in_mxnet_files_load_into_a_zoo_model(tmp_path) -> None:
    """A .params file in MXNet's binary format, keyed by the model's structural names, loads unchanged."""
    mx.random.seed(3)
    net = vision.resnet18_v1(classes=10, thumbnail=True)
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.default_rng(0).normal(size=(2, 3, 32, 32)))
    want = net(x).asnumpy()
    params = {name: p.data() for name, p in net.collect_params().items()}
    path = str(tmp_path / "resnet18_v1.params")
    mx.nd.save(path, params, format="mxnet")
    fresh = vision.get_model("resnet18_v1", classes=10, thumbnail=True)
    fresh.load_parameters(path)
    np.testing.assert_array_equal(fresh(x).asnumpy(), want)

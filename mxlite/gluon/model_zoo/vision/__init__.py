"""Predefined vision models (``mx.gluon.model_zoo.vision``), as in Apache MXNet Gluon.

Families: AlexNet, DenseNet (121/161/169/201), Inception v3, MobileNet (1.0/0.75/0.5/0.25),
MobileNetV2 (the same multipliers), ResNet V1 and V2 (18/34/50/101/152), SqueezeNet (1.0/1.1)
and VGG (11/13/16/19, with or without BatchNorm). Build one by name or with its constructor::

    from mxlite.gluon.model_zoo import vision
    net = vision.get_model("resnet18_v1", classes=10)
    net = vision.resnet50_v2(thumbnail=True)

The architectures, constructor arguments, defaults and parameter names
(``net.collect_params()`` keys such as ``features.4.0.body.0.weight``) are MXNet 2.x's. Weights
start random; ``pretrained=True`` loads MXNet's pretrained ImageNet weights, its own
``{name}-{short hash}.params`` file from ``root`` (default ``$MXNET_HOME/models``, ``~/.mxnet/models``),
SHA-1 checked and downloaded from MXNet's repository (``$MXNET_GLUON_REPO``) when missing; without a
network, :class:`PretrainedUnavailableError` says which file to put where
(:mod:`mxlite.gluon.model_zoo.model_store`). Layers whose input size follows from the
architecture are given it at construction; only the first layer's input channels (and, where it
depends on the image size, the first Dense layer's input size) are inferred from the first batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...nn import Block
from ._common import PretrainedUnavailableError
from .alexnet import AlexNet, alexnet
from .densenet import DenseNet, densenet121, densenet161, densenet169, densenet201, get_densenet
from .inception import Inception3, inception_v3
from .mobilenet import (
    RELU6,
    LinearBottleneck,
    MobileNet,
    MobileNetV2,
    get_mobilenet,
    get_mobilenet_v2,
    mobilenet0_5,
    mobilenet0_25,
    mobilenet0_75,
    mobilenet1_0,
    mobilenet_v2_0_5,
    mobilenet_v2_0_25,
    mobilenet_v2_0_75,
    mobilenet_v2_1_0,
)
from .resnet import (
    BasicBlockV1,
    BasicBlockV2,
    BottleneckV1,
    BottleneckV2,
    ResNetV1,
    ResNetV2,
    get_resnet,
    resnet18_v1,
    resnet18_v2,
    resnet34_v1,
    resnet34_v2,
    resnet50_v1,
    resnet50_v2,
    resnet101_v1,
    resnet101_v2,
    resnet152_v1,
    resnet152_v2,
)
from .squeezenet import SqueezeNet, get_squeezenet, squeezenet1_0, squeezenet1_1
from .vgg import VGG, get_vgg, vgg11, vgg11_bn, vgg13, vgg13_bn, vgg16, vgg16_bn, vgg19, vgg19_bn

# get_model's names, as MXNet's (note the dots: 'squeezenet1.0', 'mobilenet0.75', 'mobilenetv2_0.5').
_MODELS: dict[str, Callable[..., Block]] = {
    "resnet18_v1": resnet18_v1, "resnet34_v1": resnet34_v1, "resnet50_v1": resnet50_v1,
    "resnet101_v1": resnet101_v1, "resnet152_v1": resnet152_v1,
    "resnet18_v2": resnet18_v2, "resnet34_v2": resnet34_v2, "resnet50_v2": resnet50_v2,
    "resnet101_v2": resnet101_v2, "resnet152_v2": resnet152_v2,
    "vgg11": vgg11, "vgg13": vgg13, "vgg16": vgg16, "vgg19": vgg19,
    "vgg11_bn": vgg11_bn, "vgg13_bn": vgg13_bn, "vgg16_bn": vgg16_bn, "vgg19_bn": vgg19_bn,
    "alexnet": alexnet,
    "densenet121": densenet121, "densenet161": densenet161, "densenet169": densenet169, "densenet201": densenet201,
    "squeezenet1.0": squeezenet1_0, "squeezenet1.1": squeezenet1_1,
    "inceptionv3": inception_v3,
    "mobilenet1.0": mobilenet1_0, "mobilenet0.75": mobilenet0_75, "mobilenet0.5": mobilenet0_5,
    "mobilenet0.25": mobilenet0_25,
    "mobilenetv2_1.0": mobilenet_v2_1_0, "mobilenetv2_0.75": mobilenet_v2_0_75, "mobilenetv2_0.5": mobilenet_v2_0_5,
    "mobilenetv2_0.25": mobilenet_v2_0_25,
}


def get_model(name: str, **kwargs: Any) -> Block:
    """The predefined model called ``name`` (case-insensitive), as MXNet's ``vision.get_model``.

    Args:
        name: a model name, e.g. 'resnet18_v1', 'vgg16_bn', 'densenet121', 'squeezenet1.1',
            'inceptionv3', 'mobilenet0.5', 'mobilenetv2_1.0' (``model_names()`` lists them all).
        **kwargs: passed to the model's constructor: ``classes``, ``pretrained`` (load MXNet's
            pretrained weights), ``root`` (their folder), ``device``/``ctx`` (where they go), and family
            options such as ``thumbnail`` (ResNet), ``batch_norm`` (VGG), ``dropout``/``bn_size`` (DenseNet).

    Returns:
        The model, its parameters not yet initialised (call ``net.initialize()``).

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: unknown name; the message lists every known model.
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is neither in ``root`` nor
            downloadable (the message says which file to put where).
    """
    if not isinstance(name, str):
        raise TypeError(f"get_model: name must be a string such as 'resnet18_v1', got {type(name).__name__}: "
                        f"{name!r}")
    key = name.lower()
    if key not in _MODELS:
        raise ValueError(f"get_model: model {name!r} is not supported. Available models: "
                         f"{', '.join(sorted(_MODELS))}")
    return _MODELS[key](**kwargs)


def model_names() -> list[str]:
    """Every name :func:`get_model` accepts, sorted."""
    return sorted(_MODELS)


__all__ = [
    "get_model", "model_names", "PretrainedUnavailableError",
    "AlexNet", "alexnet",
    "DenseNet", "densenet121", "densenet161", "densenet169", "densenet201", "get_densenet",
    "Inception3", "inception_v3",
    "MobileNet", "MobileNetV2", "RELU6", "LinearBottleneck", "get_mobilenet", "get_mobilenet_v2",
    "mobilenet1_0", "mobilenet0_75", "mobilenet0_5", "mobilenet0_25",
    "mobilenet_v2_1_0", "mobilenet_v2_0_75", "mobilenet_v2_0_5", "mobilenet_v2_0_25",
    "ResNetV1", "ResNetV2", "BasicBlockV1", "BasicBlockV2", "BottleneckV1", "BottleneckV2", "get_resnet",
    "resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1", "resnet152_v1",
    "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2", "resnet152_v2",
    "SqueezeNet", "get_squeezenet", "squeezenet1_0", "squeezenet1_1",
    "VGG", "get_vgg", "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
]

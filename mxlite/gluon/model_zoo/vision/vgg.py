"""VGG 11/13/16/19, with or without batch normalisation (MXNet Gluon's ``model_zoo.vision.vgg``).

"Very Deep Convolutional Networks for Large-Scale Image Recognition" (Simonyan and Zisserman,
2014, arXiv:1409.1556). As MXNet's: ``features`` holds the convolution blocks and the two
4096-unit Dense layers with dropout, ``output`` the classifier; convolutions start from
``Xavier(gaussian, out, 2)``, Dense layers from ``Normal(0.01)``, biases from zero.
"""

from __future__ import annotations

from typing import Any

from ....autograd.tensor import Tensor
from ....initializer import Xavier
from ... import nn
from ._common import with_pretrained

__all__ = ["VGG", "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "get_vgg"]


class VGG(nn.HybridBlock):
    """VGG as MXNet Gluon's ``VGG``.

    Each block ``i`` is ``layers[i]`` 3x3 convolutions of ``filters[i]`` channels (each followed by
    BN when ``batch_norm``, then ReLU) and a 2x2/2 max-pool; then Dense(4096)-ReLU-Dropout twice
    and ``output`` = Dense(classes). The first Dense infers its input size from the first batch
    (512 * 7 * 7 for 224x224 images).

    Args:
        layers: convolutions per block.
        filters: channels per block (as many entries as ``layers``).
        classes: number of classes of the output layer.
        batch_norm: add BatchNorm after every convolution.

    Raises:
        ValueError: ``layers`` and ``filters`` differ in length.
    """

    def __init__(self, layers: list[int], filters: list[int], classes: int = 1000, batch_norm: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if len(layers) != len(filters):
            raise ValueError(f"VGG: layers and filters must have the same length, got {len(layers)} layers "
                             f"{list(layers)} and {len(filters)} filters {list(filters)}")
        self.features = self._make_features(layers, filters, batch_norm)
        self.features.add(nn.Dense(4096, activation="relu", weight_initializer="normal", bias_initializer="zeros"),
                          nn.Dropout(rate=0.5),
                          nn.Dense(4096, activation="relu", weight_initializer="normal", bias_initializer="zeros",
                                   in_units=4096),
                          nn.Dropout(rate=0.5))
        self.output = nn.Dense(classes, weight_initializer="normal", bias_initializer="zeros", in_units=4096)

    @staticmethod
    def _make_features(layers: list[int], filters: list[int], batch_norm: bool) -> nn.HybridSequential:
        featurizer = nn.HybridSequential()
        in_channels = 0  # the image's channels: inferred from the first batch
        for num, channels in zip(layers, filters):
            for _ in range(num):
                featurizer.add(nn.Conv2D(channels, kernel_size=3, padding=1, in_channels=in_channels,
                                         weight_initializer=Xavier(rnd_type="gaussian", factor_type="out",
                                                                   magnitude=2),
                                         bias_initializer="zeros"))
                if batch_norm:
                    featurizer.add(nn.BatchNorm(in_channels=channels))
                featurizer.add(nn.Activation("relu"))
                in_channels = channels
            featurizer.add(nn.MaxPool2D(strides=2))
        return featurizer

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


# depth -> (convolutions per block, channels per block)
vgg_spec: dict[int, tuple[list[int], list[int]]] = {
    11: ([1, 1, 2, 2, 2], [64, 128, 256, 512, 512]),
    13: ([2, 2, 2, 2, 2], [64, 128, 256, 512, 512]),
    16: ([2, 2, 3, 3, 3], [64, 128, 256, 512, 512]),
    19: ([2, 2, 4, 4, 4], [64, 128, 256, 512, 512]),
}


def get_vgg(num_layers: int, pretrained: bool = False, device: Any = None, root: Any = None, ctx: Any = None,
            **kwargs: Any) -> VGG:
    """VGG of the given depth, as MXNet's ``get_vgg``.

    Args:
        num_layers: 11, 13, 16 or 19.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`VGG` (``classes``, ``batch_norm``).

    Raises:
        ValueError: unknown depth.
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    if num_layers not in vgg_spec:
        raise ValueError(f"get_vgg: invalid number of layers {num_layers!r}; options are "
                         f"{', '.join(map(str, vgg_spec))}")
    layers, filters = vgg_spec[num_layers]
    name = f"vgg{num_layers}{'_bn' if kwargs.get('batch_norm') else ''}"
    return with_pretrained(VGG(layers, filters, **kwargs), name, pretrained, root, device, ctx)


def vgg11(**kwargs: Any) -> VGG:
    """VGG-11; keyword arguments as :func:`get_vgg`."""
    return get_vgg(11, **kwargs)


def vgg13(**kwargs: Any) -> VGG:
    """VGG-13; keyword arguments as :func:`get_vgg`."""
    return get_vgg(13, **kwargs)


def vgg16(**kwargs: Any) -> VGG:
    """VGG-16; keyword arguments as :func:`get_vgg`."""
    return get_vgg(16, **kwargs)


def vgg19(**kwargs: Any) -> VGG:
    """VGG-19; keyword arguments as :func:`get_vgg`."""
    return get_vgg(19, **kwargs)


def vgg11_bn(**kwargs: Any) -> VGG:
    """VGG-11 with batch normalisation; keyword arguments as :func:`get_vgg`."""
    kwargs["batch_norm"] = True
    return get_vgg(11, **kwargs)


def vgg13_bn(**kwargs: Any) -> VGG:
    """VGG-13 with batch normalisation; keyword arguments as :func:`get_vgg`."""
    kwargs["batch_norm"] = True
    return get_vgg(13, **kwargs)


def vgg16_bn(**kwargs: Any) -> VGG:
    """VGG-16 with batch normalisation; keyword arguments as :func:`get_vgg`."""
    kwargs["batch_norm"] = True
    return get_vgg(16, **kwargs)


def vgg19_bn(**kwargs: Any) -> VGG:
    """VGG-19 with batch normalisation; keyword arguments as :func:`get_vgg`."""
    kwargs["batch_norm"] = True
    return get_vgg(19, **kwargs)

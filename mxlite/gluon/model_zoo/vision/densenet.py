"""DenseNet-BC 121/161/169/201 (MXNet Gluon's ``model_zoo.vision.densenet``).

"Densely Connected Convolutional Networks" (Huang et al., 2016, arXiv:1608.06993). Each dense
layer's output is concatenated to its input on the channel axis (an ``Identity`` and the new
features under a ``HybridConcatenate``, as MXNet builds it).
"""

from __future__ import annotations

from typing import Any

from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["DenseNet", "densenet121", "densenet161", "densenet169", "densenet201", "get_densenet"]


def _make_dense_layer(growth_rate: int, bn_size: int, dropout: float, in_channels: int) -> nn.HybridConcatenate:
    """BN-ReLU-conv1x1(bn_size * growth_rate)-BN-ReLU-conv3x3(growth_rate), concatenated to its input."""
    new_features = nn.HybridSequential()
    new_features.add(nn.BatchNorm(in_channels=in_channels), nn.Activation("relu"),
                     nn.Conv2D(bn_size * growth_rate, kernel_size=1, use_bias=False, in_channels=in_channels),
                     nn.BatchNorm(in_channels=bn_size * growth_rate), nn.Activation("relu"),
                     nn.Conv2D(growth_rate, kernel_size=3, padding=1, use_bias=False,
                               in_channels=bn_size * growth_rate))
    if dropout:
        new_features.add(nn.Dropout(dropout))
    out = nn.HybridConcatenate(axis=1)
    out.add(nn.Identity(), new_features)
    return out


def _make_dense_block(num_layers: int, bn_size: int, growth_rate: int, dropout: float,
                      in_channels: int) -> nn.HybridSequential:
    out = nn.HybridSequential()
    for i in range(num_layers):
        out.add(_make_dense_layer(growth_rate, bn_size, dropout, in_channels + i * growth_rate))
    return out


def _make_transition(num_output_features: int, in_channels: int) -> nn.HybridSequential:
    """BN-ReLU-conv1x1 to ``num_output_features`` channels, then 2x2/2 average pooling."""
    out = nn.HybridSequential()
    out.add(nn.BatchNorm(in_channels=in_channels), nn.Activation("relu"),
            nn.Conv2D(num_output_features, kernel_size=1, use_bias=False, in_channels=in_channels),
            nn.AvgPool2D(pool_size=2, strides=2))
    return out


class DenseNet(nn.HybridBlock):
    """DenseNet-BC as MXNet Gluon's ``DenseNet``.

    ``features``: 7x7/2 convolution, BN, ReLU, 3x3/2 max-pool; dense blocks separated by
    transitions that halve the channels; BN, ReLU, 7x7 average pooling and Flatten (so the input
    must be about 224x224); ``output``: Dense(classes).

    Args:
        num_init_features: channels of the first convolution.
        growth_rate: channels each dense layer adds (``k`` in the paper).
        block_config: number of layers in each dense block.
        bn_size: the bottleneck's width is ``bn_size * growth_rate``.
        dropout: dropout rate after each dense layer (0: none).
        classes: number of classes of the output layer.
    """

    def __init__(self, num_init_features: int, growth_rate: int, block_config: list[int], bn_size: int = 4,
                 dropout: float = 0, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = nn.HybridSequential()
        self.features.add(nn.Conv2D(num_init_features, kernel_size=7, strides=2, padding=3, use_bias=False),
                          nn.BatchNorm(in_channels=num_init_features), nn.Activation("relu"),
                          nn.MaxPool2D(pool_size=3, strides=2, padding=1))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            self.features.add(_make_dense_block(num_layers, bn_size, growth_rate, dropout, num_features))
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add(_make_transition(num_features // 2, num_features))
                num_features = num_features // 2
        self.features.add(nn.BatchNorm(in_channels=num_features), nn.Activation("relu"), nn.AvgPool2D(pool_size=7),
                          nn.Flatten())
        self.output = nn.Dense(classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


# depth -> (num_init_features, growth_rate, block_config)
densenet_spec: dict[int, tuple[int, int, list[int]]] = {
    121: (64, 32, [6, 12, 24, 16]),
    161: (96, 48, [6, 12, 36, 24]),
    169: (64, 32, [6, 12, 32, 32]),
    201: (64, 32, [6, 12, 48, 32]),
}


def get_densenet(num_layers: int, pretrained: bool = False, device: Any = None, root: Any = None, ctx: Any = None,
                 **kwargs: Any) -> DenseNet:
    """DenseNet-BC of the given depth, as MXNet's ``get_densenet``.

    Args:
        num_layers: 121, 161, 169 or 201.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`DenseNet` (``classes``, ``bn_size``, ``dropout``).

    Raises:
        ValueError: unknown depth.
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    if num_layers not in densenet_spec:
        raise ValueError(f"get_densenet: invalid number of layers {num_layers!r}; options are "
                         f"{', '.join(map(str, densenet_spec))}")
    num_init_features, growth_rate, block_config = densenet_spec[num_layers]
    net = DenseNet(num_init_features, growth_rate, block_config, **kwargs)
    return with_pretrained(net, f"densenet{num_layers}", pretrained, root, device, ctx)


def densenet121(**kwargs: Any) -> DenseNet:
    """DenseNet-121 (64 initial features, growth 32, blocks [6, 12, 24, 16]); arguments as :func:`get_densenet`."""
    return get_densenet(121, **kwargs)


def densenet161(**kwargs: Any) -> DenseNet:
    """DenseNet-161 (96 initial features, growth 48, blocks [6, 12, 36, 24]); arguments as :func:`get_densenet`."""
    return get_densenet(161, **kwargs)


def densenet169(**kwargs: Any) -> DenseNet:
    """DenseNet-169 (64 initial features, growth 32, blocks [6, 12, 32, 32]); arguments as :func:`get_densenet`."""
    return get_densenet(169, **kwargs)


def densenet201(**kwargs: Any) -> DenseNet:
    """DenseNet-201 (64 initial features, growth 32, blocks [6, 12, 48, 32]); arguments as :func:`get_densenet`."""
    return get_densenet(201, **kwargs)

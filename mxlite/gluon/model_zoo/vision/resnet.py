"""ResNet V1 and V2 (MXNet Gluon's ``model_zoo.vision.resnet``).

V1 is "Deep Residual Learning for Image Recognition" (He et al., 2015, arXiv:1512.03385);
V2 is "Identity Mappings in Deep Residual Networks" (He et al., 2016, arXiv:1603.05027), with
batch normalisation and ReLU before each convolution. Architectures, arguments, defaults and
parameter names are MXNet's: ``features`` (stem, four stages, pooling) then ``output`` (Dense).
"""

from __future__ import annotations

from typing import Any

from .... import ops
from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["ResNetV1", "ResNetV2", "BasicBlockV1", "BasicBlockV2", "BottleneckV1", "BottleneckV2",
           "resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1", "resnet152_v1",
           "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2", "resnet152_v2", "get_resnet"]


def _conv3x3(channels: int, stride: int, in_channels: int) -> nn.Conv2D:
    """3x3 convolution, padding 1, no bias (``in_channels`` 0: inferred from the first input)."""
    return nn.Conv2D(channels, kernel_size=3, strides=stride, padding=1, use_bias=False, in_channels=in_channels)


class BasicBlockV1(nn.HybridBlock):
    """ResNet V1 basic block (two 3x3 convolutions), used by ResNet-18 and -34.

    ``relu(body(x) + shortcut(x))`` with ``body`` = conv3x3(stride), BN, ReLU, conv3x3, BN and the
    shortcut the identity, or a strided 1x1 convolution and BN when ``downsample``.

    Args:
        channels: output channels.
        stride: stride of the first convolution (and of the shortcut).
        downsample: project the shortcut (needed when the shape changes).
        in_channels: input channels; 0 infers them from the first input.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False, in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.body = nn.HybridSequential()
        self.body.add(_conv3x3(channels, stride, in_channels), nn.BatchNorm(in_channels=channels),
                      nn.Activation("relu"), _conv3x3(channels, 1, channels), nn.BatchNorm(in_channels=channels))
        if downsample:
            self.downsample = nn.HybridSequential()
            self.downsample.add(nn.Conv2D(channels, kernel_size=1, strides=stride, use_bias=False,
                                          in_channels=in_channels), nn.BatchNorm(in_channels=channels))
        else:
            self.downsample = None

    def forward(self, x: Tensor) -> Tensor:
        out = self.body(x)
        residual = self.downsample(x) if self.downsample is not None else x
        return ops.relu(residual + out)


class BottleneckV1(nn.HybridBlock):
    """ResNet V1 bottleneck block (1x1, 3x3, 1x1 convolutions), used by ResNet-50, -101 and -152.

    As MXNet's: the stride sits on the first 1x1 convolution, and the two 1x1 convolutions of
    the body have a bias (the 3x3 and the shortcut projection have none).

    Args:
        channels: output channels (the body's inner width is ``channels // 4``).
        stride: stride of the first convolution (and of the shortcut).
        downsample: project the shortcut (needed when the shape changes).
        in_channels: input channels; 0 infers them from the first input.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False, in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mid = channels // 4
        self.body = nn.HybridSequential()
        self.body.add(nn.Conv2D(mid, kernel_size=1, strides=stride, in_channels=in_channels),
                      nn.BatchNorm(in_channels=mid), nn.Activation("relu"),
                      _conv3x3(mid, 1, mid), nn.BatchNorm(in_channels=mid), nn.Activation("relu"),
                      nn.Conv2D(channels, kernel_size=1, strides=1, in_channels=mid),
                      nn.BatchNorm(in_channels=channels))
        if downsample:
            self.downsample = nn.HybridSequential()
            self.downsample.add(nn.Conv2D(channels, kernel_size=1, strides=stride, use_bias=False,
                                          in_channels=in_channels), nn.BatchNorm(in_channels=channels))
        else:
            self.downsample = None

    def forward(self, x: Tensor) -> Tensor:
        out = self.body(x)
        residual = self.downsample(x) if self.downsample is not None else x
        return ops.relu(out + residual)


class BasicBlockV2(nn.HybridBlock):
    """ResNet V2 (pre-activation) basic block, used by ResNet-18 and -34 V2.

    ``conv2(relu(bn2(conv1(relu(bn1(x)))))) + shortcut`` where the shortcut is ``x``, or a strided
    1x1 convolution of ``relu(bn1(x))`` when ``downsample``.

    Args:
        channels: output channels.
        stride: stride of the first convolution (and of the shortcut).
        downsample: project the shortcut.
        in_channels: input channels; 0 infers them from the first input.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False, in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bn1 = nn.BatchNorm(in_channels=in_channels)
        self.conv1 = _conv3x3(channels, stride, in_channels)
        self.bn2 = nn.BatchNorm(in_channels=channels)
        self.conv2 = _conv3x3(channels, 1, channels)
        self.downsample = (nn.Conv2D(channels, 1, stride, use_bias=False, in_channels=in_channels)
                           if downsample else None)

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        x = ops.relu(self.bn1(x))
        if self.downsample is not None:
            residual = self.downsample(x)
        x = self.conv1(x)
        x = self.conv2(ops.relu(self.bn2(x)))
        return x + residual


class BottleneckV2(nn.HybridBlock):
    """ResNet V2 (pre-activation) bottleneck block, used by ResNet-50, -101 and -152 V2.

    BN-ReLU-conv1x1, BN-ReLU-conv3x3 (strided), BN-ReLU-conv1x1, no biases; the shortcut is ``x``
    or a strided 1x1 convolution of ``relu(bn1(x))`` when ``downsample``.

    Args:
        channels: output channels (the inner width is ``channels // 4``).
        stride: stride of the 3x3 convolution (and of the shortcut).
        downsample: project the shortcut.
        in_channels: input channels; 0 infers them from the first input.
    """

    def __init__(self, channels: int, stride: int, downsample: bool = False, in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mid = channels // 4
        self.bn1 = nn.BatchNorm(in_channels=in_channels)
        self.conv1 = nn.Conv2D(mid, kernel_size=1, strides=1, use_bias=False, in_channels=in_channels)
        self.bn2 = nn.BatchNorm(in_channels=mid)
        self.conv2 = _conv3x3(mid, stride, mid)
        self.bn3 = nn.BatchNorm(in_channels=mid)
        self.conv3 = nn.Conv2D(channels, kernel_size=1, strides=1, use_bias=False, in_channels=mid)
        self.downsample = (nn.Conv2D(channels, 1, stride, use_bias=False, in_channels=in_channels)
                           if downsample else None)

    def forward(self, x: Tensor) -> Tensor:
        residual = x
        x = ops.relu(self.bn1(x))
        if self.downsample is not None:
            residual = self.downsample(x)
        x = self.conv1(x)
        x = self.conv2(ops.relu(self.bn2(x)))
        x = self.conv3(ops.relu(self.bn3(x)))
        return x + residual


def _check_spec(model: str, layers: Any, channels: Any) -> None:
    if len(layers) != len(channels) - 1:
        raise ValueError(f"{model}: channels must have one entry more than layers (the stem's width first), got "
                         f"{len(layers)} layers {list(layers)} and {len(channels)} channels {list(channels)}")


def _make_layer(block: type, layers: int, channels: int, stride: int, in_channels: int = 0) -> nn.HybridSequential:
    """One stage: ``layers`` blocks, the first strided (projecting its shortcut when the width changes)."""
    layer = nn.HybridSequential()
    layer.add(block(channels, stride, channels != in_channels, in_channels=in_channels))
    for _ in range(layers - 1):
        layer.add(block(channels, 1, False, in_channels=channels))
    return layer


class ResNetV1(nn.HybridBlock):
    """ResNet V1 (He et al., 2015) as MXNet Gluon's ``ResNetV1``.

    ``features``: the stem (7x7/2 convolution, BN, ReLU, 3x3/2 max-pool; with ``thumbnail`` a
    single 3x3/1 convolution, for 32x32 images), one stage per entry of ``layers`` (stride 1, then
    2) and global average pooling; ``output``: ``Dense(classes)``.

    Args:
        block: the residual block class, :class:`BasicBlockV1` or :class:`BottleneckV1`.
        layers: number of blocks in each stage.
        channels: the stem's width, then each stage's output channels (one more entry than ``layers``).
        classes: number of classes of the output layer.
        thumbnail: use the small-image stem.

    Raises:
        ValueError: ``channels`` is not one entry longer than ``layers``.
    """

    def __init__(self, block: type, layers: list[int], channels: list[int], classes: int = 1000,
                 thumbnail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_spec("ResNetV1", layers, channels)
        self.features = nn.HybridSequential()
        if thumbnail:
            self.features.add(_conv3x3(channels[0], 1, 0))
        else:
            self.features.add(nn.Conv2D(channels[0], 7, 2, 3, use_bias=False), nn.BatchNorm(in_channels=channels[0]),
                              nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
        for i, num_layer in enumerate(layers):
            stride = 1 if i == 0 else 2
            self.features.add(_make_layer(block, num_layer, channels[i + 1], stride, in_channels=channels[i]))
        self.features.add(nn.GlobalAvgPool2D())
        self.output = nn.Dense(classes, in_units=channels[-1])

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


class ResNetV2(nn.HybridBlock):
    """ResNet V2 (He et al., 2016, pre-activation) as MXNet Gluon's ``ResNetV2``.

    ``features``: a BatchNorm without scale or shift on the input, the stem (as
    :class:`ResNetV1`'s), the stages, then BN, ReLU, global average pooling and Flatten;
    ``output``: ``Dense(classes)``.

    Args:
        block: the residual block class, :class:`BasicBlockV2` or :class:`BottleneckV2`.
        layers: number of blocks in each stage.
        channels: the stem's width, then each stage's output channels (one more entry than ``layers``).
        classes: number of classes of the output layer.
        thumbnail: use the small-image stem (a single 3x3/1 convolution).

    Raises:
        ValueError: ``channels`` is not one entry longer than ``layers``.
    """

    def __init__(self, block: type, layers: list[int], channels: list[int], classes: int = 1000,
                 thumbnail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_spec("ResNetV2", layers, channels)
        self.features = nn.HybridSequential()
        self.features.add(nn.BatchNorm(scale=False, center=False))
        if thumbnail:
            self.features.add(_conv3x3(channels[0], 1, 0))
        else:
            self.features.add(nn.Conv2D(channels[0], 7, 2, 3, use_bias=False), nn.BatchNorm(in_channels=channels[0]),
                              nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
        in_channels = channels[0]
        for i, num_layer in enumerate(layers):
            stride = 1 if i == 0 else 2
            self.features.add(_make_layer(block, num_layer, channels[i + 1], stride, in_channels=in_channels))
            in_channels = channels[i + 1]
        self.features.add(nn.BatchNorm(in_channels=in_channels), nn.Activation("relu"), nn.GlobalAvgPool2D(),
                          nn.Flatten())
        self.output = nn.Dense(classes, in_units=in_channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


# depth -> (block type, blocks per stage, [stem width, stage widths...])
resnet_spec: dict[int, tuple[str, list[int], list[int]]] = {
    18: ("basic_block", [2, 2, 2, 2], [64, 64, 128, 256, 512]),
    34: ("basic_block", [3, 4, 6, 3], [64, 64, 128, 256, 512]),
    50: ("bottle_neck", [3, 4, 6, 3], [64, 256, 512, 1024, 2048]),
    101: ("bottle_neck", [3, 4, 23, 3], [64, 256, 512, 1024, 2048]),
    152: ("bottle_neck", [3, 8, 36, 3], [64, 256, 512, 1024, 2048]),
}
resnet_net_versions = [ResNetV1, ResNetV2]
resnet_block_versions = [{"basic_block": BasicBlockV1, "bottle_neck": BottleneckV1},
                         {"basic_block": BasicBlockV2, "bottle_neck": BottleneckV2}]


def get_resnet(version: int, num_layers: int, pretrained: bool = False, device: Any = None, root: Any = None,
               ctx: Any = None, **kwargs: Any) -> ResNetV1 | ResNetV2:
    """ResNet V1 or V2 of the given depth, as MXNet's ``get_resnet``.

    Args:
        version: 1 or 2.
        num_layers: 18, 34, 50, 101 or 152.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`ResNetV1`/:class:`ResNetV2` (``classes``, ``thumbnail``).

    Raises:
        ValueError: unknown version or depth.
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    if num_layers not in resnet_spec:
        raise ValueError(f"get_resnet: invalid number of layers {num_layers!r}; options are "
                         f"{', '.join(map(str, resnet_spec))}")
    if version not in (1, 2):
        raise ValueError(f"get_resnet: invalid resnet version {version!r}; options are 1 and 2")
    block_type, layers, channels = resnet_spec[num_layers]
    block_class = resnet_block_versions[version - 1][block_type]
    net = resnet_net_versions[version - 1](block_class, layers, channels, **kwargs)
    return with_pretrained(net, f"resnet{num_layers}_v{version}", pretrained, root, device, ctx)


def resnet18_v1(**kwargs: Any) -> ResNetV1:
    """ResNet-18 V1 (basic blocks [2, 2, 2, 2]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(1, 18, **kwargs)


def resnet34_v1(**kwargs: Any) -> ResNetV1:
    """ResNet-34 V1 (basic blocks [3, 4, 6, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(1, 34, **kwargs)


def resnet50_v1(**kwargs: Any) -> ResNetV1:
    """ResNet-50 V1 (bottlenecks [3, 4, 6, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(1, 50, **kwargs)


def resnet101_v1(**kwargs: Any) -> ResNetV1:
    """ResNet-101 V1 (bottlenecks [3, 4, 23, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(1, 101, **kwargs)


def resnet152_v1(**kwargs: Any) -> ResNetV1:
    """ResNet-152 V1 (bottlenecks [3, 8, 36, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(1, 152, **kwargs)


def resnet18_v2(**kwargs: Any) -> ResNetV2:
    """ResNet-18 V2 (pre-activation basic blocks [2, 2, 2, 2]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(2, 18, **kwargs)


def resnet34_v2(**kwargs: Any) -> ResNetV2:
    """ResNet-34 V2 (pre-activation basic blocks [3, 4, 6, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(2, 34, **kwargs)


def resnet50_v2(**kwargs: Any) -> ResNetV2:
    """ResNet-50 V2 (pre-activation bottlenecks [3, 4, 6, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(2, 50, **kwargs)


def resnet101_v2(**kwargs: Any) -> ResNetV2:
    """ResNet-101 V2 (pre-activation bottlenecks [3, 4, 23, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(2, 101, **kwargs)


def resnet152_v2(**kwargs: Any) -> ResNetV2:
    """ResNet-152 V2 (pre-activation bottlenecks [3, 8, 36, 3]); keyword arguments as :func:`get_resnet`."""
    return get_resnet(2, 152, **kwargs)

"""MobileNet (v1) and MobileNetV2 (MXNet Gluon's ``model_zoo.vision.mobilenet``).

"MobileNets: Efficient Convolutional Neural Networks for Mobile Vision Applications" (Howard
et al., 2017, arXiv:1704.04861) and "Inverted Residuals and Linear Bottlenecks" (Sandler et al.,
2018, arXiv:1801.04381), with MXNet's layer layout: every convolution without bias and followed
by BatchNorm; depthwise convolutions are grouped convolutions with one group per channel.
"""

from __future__ import annotations

from typing import Any

from .... import ops
from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["MobileNet", "MobileNetV2", "RELU6", "LinearBottleneck", "mobilenet1_0", "mobilenet_v2_1_0",
           "mobilenet0_75", "mobilenet_v2_0_75", "mobilenet0_5", "mobilenet_v2_0_5", "mobilenet0_25",
           "mobilenet_v2_0_25", "get_mobilenet", "get_mobilenet_v2"]


class RELU6(nn.HybridBlock):
    """``min(max(x, 0), 6)``, the activation of MobileNetV2."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.clip(x, 0, 6)


def _add_conv(out: nn.HybridSequential, channels: int = 1, kernel: int = 1, stride: int = 1, pad: int = 0,
              num_group: int = 1, active: bool = True, relu6: bool = False, in_channels: int = 0) -> None:
    """Append Conv2D (no bias), BatchNorm and, when ``active``, ReLU (or ReLU6) to ``out``."""
    out.add(nn.Conv2D(channels, kernel, stride, pad, groups=num_group, use_bias=False, in_channels=in_channels),
            nn.BatchNorm(scale=True, in_channels=channels))
    if active:
        out.add(RELU6() if relu6 else nn.Activation("relu"))


def _add_conv_dw(out: nn.HybridSequential, dw_channels: int, channels: int, stride: int, relu6: bool = False) -> None:
    """Append a depthwise 3x3 convolution block and a pointwise 1x1 one to ``out``."""
    _add_conv(out, channels=dw_channels, kernel=3, stride=stride, pad=1, num_group=dw_channels, relu6=relu6,
              in_channels=dw_channels)
    _add_conv(out, channels=channels, relu6=relu6, in_channels=dw_channels)


class LinearBottleneck(nn.HybridBlock):
    """MobileNetV2's inverted residual block.

    1x1 expansion to ``in_channels * t`` (BN, ReLU6), 3x3 depthwise convolution with ``stride``
    (BN, ReLU6), 1x1 linear projection to ``channels`` (BN); the input is added when the stride is
    1 and the widths agree. As MXNet's, the expansion convolution is present even when ``t == 1``.

    Args:
        in_channels: input channels.
        channels: output channels.
        t: expansion ratio.
        stride: stride of the depthwise convolution.
    """

    def __init__(self, in_channels: int, channels: int, t: int, stride: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.use_shortcut = stride == 1 and in_channels == channels
        wide = in_channels * t
        self.out = nn.HybridSequential()
        _add_conv(self.out, wide, relu6=True, in_channels=in_channels)
        _add_conv(self.out, wide, kernel=3, stride=stride, pad=1, num_group=wide, relu6=True, in_channels=wide)
        _add_conv(self.out, channels, active=False, relu6=True, in_channels=wide)

    def forward(self, x: Tensor) -> Tensor:
        out = self.out(x)
        return out + x if self.use_shortcut else out


class MobileNet(nn.HybridBlock):
    """MobileNet (v1) as MXNet Gluon's ``MobileNet``.

    ``features``: a 3x3/2 convolution, 13 depthwise-separable blocks, global average pooling and
    Flatten; ``output``: Dense(classes). Every width is ``int(width * multiplier)``.

    Args:
        multiplier: the width multiplier (MXNet ships 1.0, 0.75, 0.5 and 0.25).
        classes: number of classes of the output layer.
    """

    def __init__(self, multiplier: float = 1.0, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = nn.HybridSequential()
        _add_conv(self.features, channels=int(32 * multiplier), kernel=3, pad=1, stride=2)
        dw_channels = [int(x * multiplier) for x in [32, 64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024]]
        channels = [int(x * multiplier) for x in [64] + [128] * 2 + [256] * 2 + [512] * 6 + [1024] * 2]
        strides = [1, 2] * 3 + [1] * 5 + [2, 1]
        for dwc, c, s in zip(dw_channels, channels, strides):
            _add_conv_dw(self.features, dw_channels=dwc, channels=c, stride=s)
        self.features.add(nn.GlobalAvgPool2D(), nn.Flatten())
        self.output = nn.Dense(classes, in_units=channels[-1])

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


class MobileNetV2(nn.HybridBlock):
    """MobileNetV2 as MXNet Gluon's ``MobileNetV2``.

    ``features``: a 3x3/2 convolution (BN, ReLU6), 17 :class:`LinearBottleneck` blocks, a 1x1
    convolution to 1280 channels (``int(1280 * multiplier)`` when the multiplier exceeds 1) and
    global average pooling; ``output``: a 1x1 convolution without bias to ``classes`` channels and
    Flatten.

    Args:
        multiplier: the width multiplier (MXNet ships 1.0, 0.75, 0.5 and 0.25).
        classes: number of classes of the output layer.
    """

    def __init__(self, multiplier: float = 1.0, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = nn.HybridSequential()
        _add_conv(self.features, int(32 * multiplier), kernel=3, stride=2, pad=1, relu6=True)
        in_channels_group = [int(x * multiplier) for x in [32] + [16] + [24] * 2 + [32] * 3 + [64] * 4 + [96] * 3
                             + [160] * 3]
        channels_group = [int(x * multiplier) for x in [16] + [24] * 2 + [32] * 3 + [64] * 4 + [96] * 3 + [160] * 3
                          + [320]]
        ts = [1] + [6] * 16
        strides = [1, 2] * 2 + [1, 1, 2] + [1] * 6 + [2] + [1] * 3
        for in_c, c, t, s in zip(in_channels_group, channels_group, ts, strides):
            self.features.add(LinearBottleneck(in_channels=in_c, channels=c, t=t, stride=s))
        last_channels = int(1280 * multiplier) if multiplier > 1.0 else 1280
        _add_conv(self.features, last_channels, relu6=True, in_channels=channels_group[-1])
        self.features.add(nn.GlobalAvgPool2D())
        self.output = nn.HybridSequential()
        self.output.add(nn.Conv2D(classes, 1, use_bias=False, in_channels=last_channels), nn.Flatten())

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


def _suffix(multiplier: float) -> str:
    """MXNet's spelling of a multiplier in model names: 1.0, 0.75, 0.5, 0.25."""
    text = f"{multiplier:.2f}"
    return text[:-1] if text in ("1.00", "0.50") else text


def get_mobilenet(multiplier: float, pretrained: bool = False, device: Any = None, root: Any = None,
                  ctx: Any = None, **kwargs: Any) -> MobileNet:
    """MobileNet (v1) with the given width multiplier, as MXNet's ``get_mobilenet``.

    Args:
        multiplier: the width multiplier.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`MobileNet` (``classes``).

    Raises:
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    net = MobileNet(multiplier, **kwargs)
    return with_pretrained(net, f"mobilenet{_suffix(multiplier)}", pretrained, root, device, ctx)


def get_mobilenet_v2(multiplier: float, pretrained: bool = False, device: Any = None, root: Any = None,
                     ctx: Any = None, **kwargs: Any) -> MobileNetV2:
    """MobileNetV2 with the given width multiplier, as MXNet's ``get_mobilenet_v2``.

    Args:
        multiplier: the width multiplier.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`MobileNetV2` (``classes``).

    Raises:
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    net = MobileNetV2(multiplier, **kwargs)
    return with_pretrained(net, f"mobilenetv2_{_suffix(multiplier)}", pretrained, root, device, ctx)


def mobilenet1_0(**kwargs: Any) -> MobileNet:
    """MobileNet, width multiplier 1.0; keyword arguments as :func:`get_mobilenet`."""
    return get_mobilenet(1.0, **kwargs)


def mobilenet0_75(**kwargs: Any) -> MobileNet:
    """MobileNet, width multiplier 0.75; keyword arguments as :func:`get_mobilenet`."""
    return get_mobilenet(0.75, **kwargs)


def mobilenet0_5(**kwargs: Any) -> MobileNet:
    """MobileNet, width multiplier 0.5; keyword arguments as :func:`get_mobilenet`."""
    return get_mobilenet(0.5, **kwargs)


def mobilenet0_25(**kwargs: Any) -> MobileNet:
    """MobileNet, width multiplier 0.25; keyword arguments as :func:`get_mobilenet`."""
    return get_mobilenet(0.25, **kwargs)


def mobilenet_v2_1_0(**kwargs: Any) -> MobileNetV2:
    """MobileNetV2, width multiplier 1.0; keyword arguments as :func:`get_mobilenet_v2`."""
    return get_mobilenet_v2(1.0, **kwargs)


def mobilenet_v2_0_75(**kwargs: Any) -> MobileNetV2:
    """MobileNetV2, width multiplier 0.75; keyword arguments as :func:`get_mobilenet_v2`."""
    return get_mobilenet_v2(0.75, **kwargs)


def mobilenet_v2_0_5(**kwargs: Any) -> MobileNetV2:
    """MobileNetV2, width multiplier 0.5; keyword arguments as :func:`get_mobilenet_v2`."""
    return get_mobilenet_v2(0.5, **kwargs)


def mobilenet_v2_0_25(**kwargs: Any) -> MobileNetV2:
    """MobileNetV2, width multiplier 0.25; keyword arguments as :func:`get_mobilenet_v2`."""
    return get_mobilenet_v2(0.25, **kwargs)

"""Inception v3 (MXNet Gluon's ``model_zoo.vision.inception``).

"Rethinking the Inception Architecture for Computer Vision" (Szegedy et al., 2015,
arXiv:1512.00567), as MXNet builds it: no auxiliary classifier, every convolution followed by
BatchNorm (epsilon 0.001) and ReLU, branches joined by ``HybridConcatenate`` on the channel axis.
The input is expected at 299x299 (the final 8x8 average pooling needs an 8x8 feature map).
"""

from __future__ import annotations

from typing import Any

from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["Inception3", "inception_v3"]

# A convolution setting: (channels, kernel_size, strides, padding); None keeps Conv2D's default.
_Setting = tuple[int, Any, Any, Any]
_SETTING_NAMES = ("channels", "kernel_size", "strides", "padding")


def _make_basic_conv(in_channels: int = 0, **kwargs: Any) -> nn.HybridSequential:
    """Conv2D without bias, BatchNorm(epsilon=0.001), ReLU."""
    out = nn.HybridSequential()
    out.add(nn.Conv2D(use_bias=False, in_channels=in_channels, **kwargs),
            nn.BatchNorm(epsilon=0.001, in_channels=kwargs["channels"]), nn.Activation("relu"))
    return out


def _make_branch(use_pool: str | None, in_channels: int, *conv_settings: _Setting) -> nn.HybridSequential:
    """An optional pooling ('avg': 3x3/1 pad 1, 'max': 3x3/2) followed by basic convolutions."""
    out = nn.HybridSequential()
    if use_pool == "avg":
        out.add(nn.AvgPool2D(pool_size=3, strides=1, padding=1))
    elif use_pool == "max":
        out.add(nn.MaxPool2D(pool_size=3, strides=2))
    for setting in conv_settings:
        kwargs = {name: value for name, value in zip(_SETTING_NAMES, setting) if value is not None}
        out.add(_make_basic_conv(in_channels=in_channels, **kwargs))
        in_channels = kwargs["channels"]
    return out


def _make_A(pool_features: int, in_channels: int) -> nn.HybridConcatenate:
    out = nn.HybridConcatenate(axis=1)
    out.add(_make_branch(None, in_channels, (64, 1, None, None)),
            _make_branch(None, in_channels, (48, 1, None, None), (64, 5, None, 2)),
            _make_branch(None, in_channels, (64, 1, None, None), (96, 3, None, 1), (96, 3, None, 1)),
            _make_branch("avg", in_channels, (pool_features, 1, None, None)))
    return out


def _make_B(in_channels: int) -> nn.HybridConcatenate:
    out = nn.HybridConcatenate(axis=1)
    out.add(_make_branch(None, in_channels, (384, 3, 2, None)),
            _make_branch(None, in_channels, (64, 1, None, None), (96, 3, None, 1), (96, 3, 2, None)),
            _make_branch("max", in_channels))
    return out


def _make_C(channels_7x7: int, in_channels: int) -> nn.HybridConcatenate:
    c7 = channels_7x7
    out = nn.HybridConcatenate(axis=1)
    out.add(_make_branch(None, in_channels, (192, 1, None, None)),
            _make_branch(None, in_channels, (c7, 1, None, None), (c7, (1, 7), None, (0, 3)),
                         (192, (7, 1), None, (3, 0))),
            _make_branch(None, in_channels, (c7, 1, None, None), (c7, (7, 1), None, (3, 0)),
                         (c7, (1, 7), None, (0, 3)), (c7, (7, 1), None, (3, 0)), (192, (1, 7), None, (0, 3))),
            _make_branch("avg", in_channels, (192, 1, None, None)))
    return out


def _make_D(in_channels: int) -> nn.HybridConcatenate:
    out = nn.HybridConcatenate(axis=1)
    out.add(_make_branch(None, in_channels, (192, 1, None, None), (320, 3, 2, None)),
            _make_branch(None, in_channels, (192, 1, None, None), (192, (1, 7), None, (0, 3)),
                         (192, (7, 1), None, (3, 0)), (192, 3, 2, None)),
            _make_branch("max", in_channels))
    return out


def _make_E(in_channels: int) -> nn.HybridConcatenate:
    out = nn.HybridConcatenate(axis=1)
    out.add(_make_branch(None, in_channels, (320, 1, None, None)))

    branch_3x3 = nn.HybridSequential()
    out.add(branch_3x3)
    branch_3x3.add(_make_branch(None, in_channels, (384, 1, None, None)))
    branch_3x3_split = nn.HybridConcatenate(axis=1)
    branch_3x3_split.add(_make_branch(None, 384, (384, (1, 3), None, (0, 1))),
                         _make_branch(None, 384, (384, (3, 1), None, (1, 0))))
    branch_3x3.add(branch_3x3_split)

    branch_3x3dbl = nn.HybridSequential()
    out.add(branch_3x3dbl)
    branch_3x3dbl.add(_make_branch(None, in_channels, (448, 1, None, None), (384, 3, None, 1)))
    branch_3x3dbl_split = nn.HybridConcatenate(axis=1)
    branch_3x3dbl.add(branch_3x3dbl_split)
    branch_3x3dbl_split.add(_make_branch(None, 384, (384, (1, 3), None, (0, 1))),
                            _make_branch(None, 384, (384, (3, 1), None, (1, 0))))

    out.add(_make_branch("avg", in_channels, (192, 1, None, None)))
    return out


class Inception3(nn.HybridBlock):
    """Inception v3 as MXNet Gluon's ``Inception3``.

    ``features``: the stem (five basic convolutions, two 3x3/2 max-pools), three A modules
    (35x35), B (reduction), four C modules (17x17), D (reduction), two E modules (8x8), 8x8 average
    pooling and dropout 0.5; ``output``: Dense(classes). Channels: 192 after the stem, then 256,
    288, 288, 768 (B and each C), 1280 (D), 2048 (each E).

    Args:
        classes: number of classes of the output layer.
    """

    def __init__(self, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = nn.HybridSequential()
        self.features.add(_make_basic_conv(channels=32, kernel_size=3, strides=2),
                          _make_basic_conv(in_channels=32, channels=32, kernel_size=3),
                          _make_basic_conv(in_channels=32, channels=64, kernel_size=3, padding=1),
                          nn.MaxPool2D(pool_size=3, strides=2),
                          _make_basic_conv(in_channels=64, channels=80, kernel_size=1),
                          _make_basic_conv(in_channels=80, channels=192, kernel_size=3),
                          nn.MaxPool2D(pool_size=3, strides=2),
                          _make_A(32, 192), _make_A(64, 256), _make_A(64, 288),
                          _make_B(288),
                          _make_C(128, 768), _make_C(160, 768), _make_C(160, 768), _make_C(192, 768),
                          _make_D(768),
                          _make_E(1280), _make_E(2048),
                          nn.AvgPool2D(pool_size=8),
                          nn.Dropout(0.5))
        self.output = nn.Dense(classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


def inception_v3(pretrained: bool = False, device: Any = None, root: Any = None, ctx: Any = None,
                 **kwargs: Any) -> Inception3:
    """Inception v3, as MXNet's ``inception_v3``.

    Args:
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`Inception3` (``classes``).

    Raises:
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    return with_pretrained(Inception3(**kwargs), "inceptionv3", pretrained, root, device, ctx)

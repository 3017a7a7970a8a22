"""SqueezeNet 1.0 and 1.1 (MXNet Gluon's ``model_zoo.vision.squeezenet``).

"SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and <0.5MB model size" (Iandola
et al., 2016, arXiv:1602.07360); 1.1 is the cheaper variant of the authors' repository (smaller
stem, earlier pooling, slightly fewer parameters).
"""

from __future__ import annotations

from typing import Any

from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["SqueezeNet", "squeezenet1_0", "squeezenet1_1", "get_squeezenet"]


def _pool() -> nn.MaxPool2D:
    """SqueezeNet's 3x3/2 max-pool, in ceil mode (a partial window at the edge still pools)."""
    return nn.MaxPool2D(pool_size=3, strides=2, ceil_mode=True)


def _make_fire_conv(channels: int, kernel_size: int, padding: int = 0, in_channels: int = 0) -> nn.HybridSequential:
    out = nn.HybridSequential()
    out.add(nn.Conv2D(channels, kernel_size, padding=padding, in_channels=in_channels), nn.Activation("relu"))
    return out


def _make_fire(squeeze_channels: int, expand1x1_channels: int, expand3x3_channels: int,
               in_channels: int) -> nn.HybridSequential:
    """A Fire module: 1x1 squeeze, then 1x1 and 3x3 expansions concatenated on the channel axis."""
    out = nn.HybridSequential()
    out.add(_make_fire_conv(squeeze_channels, 1, in_channels=in_channels))
    paths = nn.HybridConcatenate(axis=1)
    paths.add(_make_fire_conv(expand1x1_channels, 1, in_channels=squeeze_channels),
              _make_fire_conv(expand3x3_channels, 3, 1, in_channels=squeeze_channels))
    out.add(paths)
    return out


class SqueezeNet(nn.HybridBlock):
    """SqueezeNet as MXNet Gluon's ``SqueezeNet``.

    ``features``: the stem convolution (96@7x7/2 for 1.0, 64@3x3/2 for 1.1), ReLU, Fire modules
    and 3x3/2 max-pools (ceil mode), dropout 0.5; ``output``: a 1x1 convolution to ``classes``
    channels, ReLU, 13x13 average pooling and Flatten (so the input must be about 224x224).

    Args:
        version: '1.0' or '1.1'.
        classes: number of classes of the output layer.

    Raises:
        ValueError: unknown version.
    """

    def __init__(self, version: str, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if version not in ("1.0", "1.1"):
            raise ValueError(f"SqueezeNet: unsupported version {version!r}; '1.0' or '1.1' expected")
        self.features = nn.HybridSequential()
        if version == "1.0":
            self.features.add(nn.Conv2D(96, kernel_size=7, strides=2), nn.Activation("relu"), _pool(),
                              _make_fire(16, 64, 64, 96), _make_fire(16, 64, 64, 128),
                              _make_fire(32, 128, 128, 128), _pool(),
                              _make_fire(32, 128, 128, 256), _make_fire(48, 192, 192, 256),
                              _make_fire(48, 192, 192, 384), _make_fire(64, 256, 256, 384), _pool(),
                              _make_fire(64, 256, 256, 512))
        else:
            self.features.add(nn.Conv2D(64, kernel_size=3, strides=2), nn.Activation("relu"), _pool(),
                              _make_fire(16, 64, 64, 64), _make_fire(16, 64, 64, 128), _pool(),
                              _make_fire(32, 128, 128, 128), _make_fire(32, 128, 128, 256), _pool(),
                              _make_fire(48, 192, 192, 256), _make_fire(48, 192, 192, 384),
                              _make_fire(64, 256, 256, 384), _make_fire(64, 256, 256, 512))
        self.features.add(nn.Dropout(0.5))
        self.output = nn.HybridSequential()
        self.output.add(nn.Conv2D(classes, kernel_size=1, in_channels=512), nn.Activation("relu"), nn.AvgPool2D(13),
                        nn.Flatten())

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


def get_squeezenet(version: str, pretrained: bool = False, device: Any = None, root: Any = None, ctx: Any = None,
                   **kwargs: Any) -> SqueezeNet:
    """SqueezeNet of the given version, as MXNet's ``get_squeezenet``.

    Args:
        version: '1.0' or '1.1'.
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`SqueezeNet` (``classes``).

    Raises:
        ValueError: unknown version.
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    if version not in ("1.0", "1.1"):
        raise ValueError(f"get_squeezenet: unsupported version {version!r}; '1.0' or '1.1' expected")
    return with_pretrained(SqueezeNet(version, **kwargs), f"squeezenet{version}", pretrained, root, device, ctx)


def squeezenet1_0(**kwargs: Any) -> SqueezeNet:
    """SqueezeNet 1.0; keyword arguments as :func:`get_squeezenet`."""
    return get_squeezenet("1.0", **kwargs)


def squeezenet1_1(**kwargs: Any) -> SqueezeNet:
    """SqueezeNet 1.1; keyword arguments as :func:`get_squeezenet`."""
    return get_squeezenet("1.1", **kwargs)

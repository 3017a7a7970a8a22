"""AlexNet (MXNet Gluon's ``model_zoo.vision.alexnet``).

The single-tower variant of "One weird trick for parallelizing convolutional neural networks"
(Krizhevsky, 2014, arXiv:1404.5997), as MXNet (and torchvision) define it.
"""

from __future__ import annotations

from typing import Any

from ....autograd.tensor import Tensor
from ... import nn
from ._common import with_pretrained

__all__ = ["AlexNet", "alexnet"]


class AlexNet(nn.HybridBlock):
    """AlexNet as MXNet Gluon's ``AlexNet``.

    ``features``: convolutions 64@11x11/4, 192@5x5, 384@3x3, 256@3x3, 256@3x3 (ReLU each) with
    3x3/2 max-pools after the first, second and fifth, Flatten, then Dense(4096)-ReLU-Dropout(0.5)
    twice; ``output``: Dense(classes). The first Dense infers its input size from the first batch
    (256 * 6 * 6 for 224x224 images).

    Args:
        classes: number of classes of the output layer.
    """

    def __init__(self, classes: int = 1000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.features = nn.HybridSequential()
        self.features.add(
            nn.Conv2D(64, kernel_size=11, strides=4, padding=2, activation="relu"),
            nn.MaxPool2D(pool_size=3, strides=2),
            nn.Conv2D(192, kernel_size=5, padding=2, activation="relu", in_channels=64),
            nn.MaxPool2D(pool_size=3, strides=2),
            nn.Conv2D(384, kernel_size=3, padding=1, activation="relu", in_channels=192),
            nn.Conv2D(256, kernel_size=3, padding=1, activation="relu", in_channels=384),
            nn.Conv2D(256, kernel_size=3, padding=1, activation="relu", in_channels=256),
            nn.MaxPool2D(pool_size=3, strides=2),
            nn.Flatten(),
            nn.Dense(4096, activation="relu"),
            nn.Dropout(0.5),
            nn.Dense(4096, activation="relu", in_units=4096),
            nn.Dropout(0.5),
        )
        self.output = nn.Dense(classes, in_units=4096)

    def forward(self, x: Tensor) -> Tensor:
        return self.output(self.features(x))


def alexnet(pretrained: bool = False, device: Any = None, root: Any = None, ctx: Any = None,
            **kwargs: Any) -> AlexNet:
    """AlexNet, as MXNet's ``alexnet``.

    Args:
        pretrained: load MXNet's pretrained weights (``model_store.get_model_file``).
        root: the folder of weight files (default ``$MXNET_HOME/models``, ``~/.mxnet/models``).
        device, ctx: where the pretrained weights go (default: the current device).
        **kwargs: passed to :class:`AlexNet` (``classes``).

    Raises:
        PretrainedUnavailableError: ``pretrained=True`` and the weight file is not in ``root`` and cannot be
            downloaded.
    """
    return with_pretrained(AlexNet(**kwargs), "alexnet", pretrained, root, device, ctx)

"""Vision data (Gluon's ``gluon.data.vision``): image datasets and image transforms.

::

    from mxlite.gluon.data.vision import MNIST, transforms
    train = MNIST(train=True).transform_first(transforms.Compose([
        transforms.ToTensor(), transforms.Normalize(0.13, 0.31)]))
"""

from . import datasets, transforms
from .datasets import CIFAR10, CIFAR100, MNIST, FashionMNIST, ImageFolderDataset, ImageListDataset, ImageRecordDataset

__all__ = ["CIFAR10", "CIFAR100", "FashionMNIST", "ImageFolderDataset", "ImageListDataset", "ImageRecordDataset",
           "MNIST", "datasets", "transforms"]

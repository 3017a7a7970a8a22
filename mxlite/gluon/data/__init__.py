"""Data loading (Gluon's ``gluon.data``): datasets, samplers, batchify functions and the DataLoader.

::

    from mxlite.gluon.data import ArrayDataset, DataLoader
    loader = DataLoader(ArrayDataset(X, y), batch_size=32, shuffle=True, seed=0, last_batch="discard")

``mxlite.gluon.data.vision`` holds the image datasets (MNIST, CIFAR, image folders) and transforms.
"""

from . import batchify, vision
from .dataloader import DataLoader, default_batchify_fn
from .dataset import ArrayDataset, Dataset, SimpleDataset
from .download import check_sha1, download
from .sampler import BatchSampler, FilterSampler, IntervalSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "ArrayDataset",
    "BatchSampler",
    "DataLoader",
    "Dataset",
    "FilterSampler",
    "IntervalSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SimpleDataset",
    "batchify",
    "check_sha1",
    "default_batchify_fn",
    "download",
    "vision",
]

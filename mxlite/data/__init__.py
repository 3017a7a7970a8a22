"""Data loading (Gluon's ``gluon.data``): datasets, samplers and the DataLoader.

::

    from mxlite.data import ArrayDataset, DataLoader
    loader = DataLoader(ArrayDataset(X, y), batch_size=32, shuffle=True, seed=0, last_batch="discard")
"""

from .dataloader import DataLoader, default_batchify_fn
from .dataset import ArrayDataset, Dataset, SimpleDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = [
    "ArrayDataset",
    "BatchSampler",
    "DataLoader",
    "Dataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SimpleDataset",
    "default_batchify_fn",
]

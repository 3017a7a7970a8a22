"""Tests of mxlite.gluon.data: datasets, samplers, DataLoader batching, shuffling and last_batch modes."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon.data import (
    ArrayDataset,
    BatchSampler,
    DataLoader,
    RandomSampler,
    SequentialSampler,
    SimpleDataset,
)


def _ids(loader: DataLoader) -> list[list[int]]:
    """The batches of one epoch of a loader over ArrayDataset(arange(n)), as lists of ints."""
    return [batch.asnumpy().tolist() for batch in loader]


def _flat(loader: DataLoader) -> list[int]:
    """The sample order of one epoch of a loader over ArrayDataset(arange(n))."""
    return [i for batch in _ids(loader) for i in batch]


# -- datasets ---------------------------------------------------------------------------------
def test_array_dataset_items() -> None:
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = [0, 1, 0, 1]
    ds = ArrayDataset(X, y, mx.array([5, 6, 7, 8]))
    assert len(ds) == 4
    x2, y2, z2 = ds[2]
    np.testing.assert_array_equal(x2, X[2])
    assert y2 == 0 and z2 == 7.0
    single = ArrayDataset(X)
    np.testing.assert_array_equal(single[1], X[1])  # the element itself, not a 1-tuple


def test_array_dataset_length_mismatch() -> None:
    with pytest.raises(ValueError, match=r"lengths \[3, 2\]"):
        ArrayDataset(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="at least one"):
        ArrayDataset()


def test_transform_and_transform_first() -> None:
    ds = ArrayDataset(np.array([1.0, 2.0]), np.array([10, 20]))
    doubled = ds.transform_first(lambda x: x * 2)
    assert doubled[1] == (4.0, 20)
    summed = ds.transform(lambda x, y: x + y, lazy=False)
    assert isinstance(summed, SimpleDataset)
    assert [summed[i] for i in range(len(summed))] == [11.0, 22.0]
    assert SimpleDataset([3, 4]).transform(lambda v: -v)[0] == -3


# -- samplers ---------------------------------------------------------------------------------
def test_samplers() -> None:
    assert list(SequentialSampler(3, start=2)) == [2, 3, 4]
    rs = RandomSampler(10, np.random.Generator(np.random.PCG64(1)))
    assert len(rs) == 10 and sorted(rs) == list(range(10))
    assert list(BatchSampler(SequentialSampler(5), 2, "keep")) == [[0, 1], [2, 3], [4]]
    assert list(BatchSampler(SequentialSampler(5), 2, "discard")) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("bad", [0, -1, 1.5, None])
def test_bad_batch_size(bad: object) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(SequentialSampler(4), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=bad)  # type: ignore[arg-type]


def test_sampler_errors() -> None:
    with pytest.raises(ValueError, match="last_batch.*'drop'"):
        BatchSampler(SequentialSampler(4), 2, "drop")
    with pytest.raises(ValueError, match="last_batch.*'drop'"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=2, last_batch="drop")
    with pytest.raises(ValueError, match="length.*-1"):
        SequentialSampler(-1)
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=2, shuffle=True, sampler=SequentialSampler(4))
    with pytest.raises(ValueError, match="batch_sampler"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=2, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="num_workers.*-2"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=2, num_workers=-2)
    with pytest.raises(ValueError, match="seed"):
        DataLoader(ArrayDataset(np.arange(4)), batch_size=2, shuffle=True, seed=-1)


# -- DataLoader -------------------------------------------------------------------------------
def test_keep_and_discard() -> None:
    ds = ArrayDataset(np.arange(10))
    keep = DataLoader(ds, batch_size=4)
    assert len(keep) == 3
    assert _ids(keep) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    discard = DataLoader(ds, batch_size=4, last_batch="discard")
    assert len(discard) == 2
    assert _ids(discard) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_rollover_carries_samples_across_epochs() -> None:
    loader = DataLoader(ArrayDataset(np.arange(10)), batch_size=4, last_batch="rollover")
    assert len(loader) == 2
    assert _ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # 8, 9 carried over
    assert len(loader) == 3  # (2 carried + 10) // 4
    assert _ids(loader) == [[8, 9, 0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert len(loader) == 2  # nothing carried this time
    assert _ids(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batch_contents_and_dtypes() -> None:
    X = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.int32)
    data, label = next(iter(DataLoader(ArrayDataset(X, y), batch_size=3)))
    assert isinstance(data, mx.Tensor) and isinstance(label, mx.Tensor)
    assert data.device == mx.cpu(0)
    assert data.shape == (3, 2) and data.dtype == np.float32
    assert label.shape == (3,) and label.dtype == np.int32
    np.testing.assert_array_equal(data.asnumpy(), X[:3])
    ints = next(iter(DataLoader(SimpleDataset([1, 2, 3]), batch_size=3)))
    assert ints.dtype == np.int64  # numpy.asarray of Python ints


def test_batches_go_to_device() -> None:
    loader = DataLoader(ArrayDataset(np.zeros((4, 2), np.float32), np.zeros(4)), batch_size=2, device=mx.cpu(3))
    data, label = next(iter(loader))
    assert data.device == mx.cpu(3) and label.device == mx.cpu(3)


def test_shuffle_seed_reproducible_and_differs_between_epochs() -> None:
    ds = ArrayDataset(np.arange(50))

    def epochs(loader: DataLoader, n: int) -> list[list[int]]:
        return [_flat(loader) for _ in range(n)]

    a = epochs(DataLoader(ds, batch_size=8, shuffle=True, seed=7), 3)
    b = epochs(DataLoader(ds, batch_size=8, shuffle=True, seed=7), 3)
    c = epochs(DataLoader(ds, batch_size=8, shuffle=True, seed=8), 3)
    assert a == b
    assert a != c
    assert a[0] != a[1] and a[1] != a[2]
    for order in a:
        assert sorted(order) == list(range(50))  # every sample exactly once per epoch
        assert order != list(range(50))


def test_shuffle_without_seed_follows_mxlite_random_seed() -> None:
    ds = ArrayDataset(np.arange(30))
    mx.random.seed(3)
    first = _flat(DataLoader(ds, batch_size=7, shuffle=True))
    mx.random.seed(3)
    second = _flat(DataLoader(ds, batch_size=7, shuffle=True))
    assert first == second and sorted(first) == list(range(30))


def test_rollover_with_shuffle_sees_every_sample() -> None:
    loader = DataLoader(ArrayDataset(np.arange(10)), batch_size=3, shuffle=True, seed=0, last_batch="rollover")
    seen = [i for _ in range(3) for batch in _ids(loader) for i in batch]
    assert len(seen) == 30  # 3 epochs of 10 fit exactly into 10 full batches
    assert np.bincount(seen).tolist() == [3] * 10


def test_batch_sampler_and_batchify_fn() -> None:
    ds = ArrayDataset(np.arange(6))
    loader = DataLoader(ds, batch_sampler=[[5, 0], [1]], batchify_fn=lambda xs: [int(x) for x in xs], num_workers=2)
    assert list(loader) == [[5, 0], [1]]
    assert len(loader) == 2

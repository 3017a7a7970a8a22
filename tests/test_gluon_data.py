"""gluon.data: MXNet's ``tests/python/unittest/test_gluon_data.py`` mirrored (same calls, same values),
then the worker DataLoader (processes and threads really in parallel, dead and stuck workers)."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

import mxlite as mx
from mxlite import gluon
from tests import deadlines

DataLoader = gluon.data.DataLoader
batchify_mod = gluon.data.batchify


# -- mirrored from MXNet's test_gluon_data.py ---------------------------------------------------------
def test_array_dataset():
    X = np.random.uniform(size=(10, 20))
    Y = np.random.uniform(size=(10,))
    dataset = gluon.data.ArrayDataset(X, Y)
    loader = gluon.data.DataLoader(dataset, 2)
    for i, (x, y) in enumerate(loader):
        np.testing.assert_allclose(x.asnumpy(), X[i * 2:(i + 1) * 2])
        np.testing.assert_allclose(y.asnumpy(), Y[i * 2:(i + 1) * 2])
    dataset = gluon.data.ArrayDataset(X)
    loader = gluon.data.DataLoader(dataset, 2)
    for i, x in enumerate(loader):
        np.testing.assert_allclose(x.asnumpy(), X[i * 2:(i + 1) * 2])


def test_sampler():
    seq_sampler = gluon.data.SequentialSampler(10)
    assert list(seq_sampler) == list(range(10))
    rand_sampler = gluon.data.RandomSampler(10)
    assert sorted(list(rand_sampler)) == list(range(10))
    seq_batch_keep = gluon.data.BatchSampler(seq_sampler, 3, 'keep')
    assert sum(list(seq_batch_keep), []) == list(range(10))
    seq_batch_discard = gluon.data.BatchSampler(seq_sampler, 3, 'discard')
    assert sum(list(seq_batch_discard), []) == list(range(9))
    rand_batch_keep = gluon.data.BatchSampler(rand_sampler, 3, 'keep')
    assert sorted(sum(list(rand_batch_keep), [])) == list(range(10))


def test_interval_sampler():
    interval_sampler = gluon.data.IntervalSampler(10, 3)
    assert sorted(list(interval_sampler)) == list(range(10))
    interval_sampler = gluon.data.IntervalSampler(10, 3, rollover=False)
    assert list(interval_sampler) == [0, 3, 6, 9]
    assert list(gluon.data.IntervalSampler(10, 3)) == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]
    with pytest.raises(ValueError, match="interval.*10"):
        gluon.data.IntervalSampler(10, 10)


def test_batch_sampler_rollover():
    sampler = gluon.data.BatchSampler(gluon.data.SequentialSampler(10), 3, 'rollover')
    assert list(sampler) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(sampler) == 3  # (1 carried + 10) // 3
    assert list(sampler)[0] == [9, 0, 1]
    with pytest.raises(ValueError, match="last_batch.*'bad'"):
        gluon.data.BatchSampler(gluon.data.SequentialSampler(10), 3, 'bad')


def test_list_dataset():
    for num_worker in range(0, 3):
        data = gluon.data.DataLoader([([1, 2], 0), ([3, 4], 1)], batch_size=1, num_workers=num_worker)
        seen = [(d.asnumpy().tolist(), int(lab.asnumpy()[0])) for d, lab in data]
        assert seen == [([[1, 2]], 0), ([[3, 4]], 1)]


class _Dataset(gluon.data.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, key):
        return mx.full((10,), key)


def test_multi_worker():
    data = _Dataset()
    for thread_pool in [True, False]:
        loader = gluon.data.DataLoader(data, batch_size=1, num_workers=5, thread_pool=thread_pool)
        for i, batch in enumerate(loader):
            assert (batch.asnumpy() == i).all()


def test_multi_worker_shape():
    for thread_pool in [True, False]:
        batch_size = 1024
        shape = (batch_size + 1, 11, 12)
        data = gluon.data.ArrayDataset(np.ones(shape))
        loader = gluon.data.DataLoader(data, batch_size=batch_size, num_workers=5, last_batch='keep',
                                       thread_pool=thread_pool)
        for batch in loader:
            if shape[0] > batch_size:
                assert batch.shape == (batch_size, shape[1], shape[2])
                shape = (shape[0] - batch_size, shape[1], shape[2])
            else:
                assert batch.shape == shape


def test_multi_worker_forked_data_loader():
    """MXNet's _Dummy: random-length samples padded by a custom batchify_fn, 2 worker processes."""
    rng = np.random.default_rng(0)

    class Dummy(gluon.data.Dataset):
        def __getitem__(self, idx):
            out = rng.uniform(size=(int(rng.integers(1000, 1100)), 40))
            labels = rng.uniform(size=(int(rng.integers(10, 15)),))
            return idx, out, labels

        def __len__(self):
            return 50

        def batchify(self, data):
            inputs, labels = [d[1] for d in data], [d[2] for d in data]
            max_data_len = max(seq.shape[0] for seq in inputs)
            max_labels_len = max(seq.shape[0] for seq in labels)
            x_lens = [item.shape[0] for item in inputs]
            inputs = [np.pad(s, ((0, max_data_len - s.shape[0]), (0, 0))) for s in inputs]
            labels = [np.pad(s, (0, max_labels_len - s.shape[0]), constant_values=-1) for s in labels]
            return (mx.array(np.asarray(inputs, np.float32).transpose(1, 0, 2)), mx.array(x_lens),
                    mx.array(np.asarray(labels, np.float32).T))

    data = Dummy()
    loader = DataLoader(data, batch_size=40, batchify_fn=data.batchify, num_workers=2)
    batches = list(loader)
    assert [b[0].shape[1] for b in batches] == [40, 10]
    assert all(b[0].shape[2] == 40 and b[2].shape[1] == b[0].shape[1] for b in batches)


def test_multi_worker_dataloader_release_pool():
    # too many open files or processes if the pools were not released (MXNet runs 100 rounds)
    for _ in range(10):
        A = np.random.rand(999, 20)
        D = gluon.data.DataLoader(A, batch_size=8, num_workers=8)
        the_iter = iter(D)
        next(the_iter)
        del the_iter
        del D


def test_dataloader_context():
    X = np.random.uniform(size=(10, 20))
    dataset = gluon.data.ArrayDataset(X)
    loader1 = gluon.data.DataLoader(dataset, 8)
    for x in loader1:
        assert x.device == mx.cpu(0)
    # pinned host memory is not a separate context in mxlite: the batches stay on cpu(0)
    for x in gluon.data.DataLoader(dataset, 8, pin_memory=True, pin_device_id=1):
        assert x.device == mx.cpu(0)
        np.testing.assert_array_equal(x.asnumpy(), X[:len(x)])
        break
    with pytest.raises(ValueError, match="pin_device_id.*-1"):
        gluon.data.DataLoader(dataset, 8, pin_memory=True, pin_device_id=-1)


def test_dataset_filter():
    length = 100
    a = gluon.data.SimpleDataset([i for i in range(length)])
    a_filtered = a.filter(lambda x: x % 10 == 0)
    assert len(a_filtered) == 10
    for sample in a_filtered:
        assert sample % 10 == 0
    a_xform_filtered = a.transform(lambda x: x + 1).filter(lambda x: x % 10 == 0)
    assert len(a_xform_filtered) == 10
    # the filtered data is already transformed
    for sample in a_xform_filtered:
        assert sample % 10 == 0


def test_dataset_shard():
    length = 9
    a = gluon.data.SimpleDataset([i for i in range(length)])
    shard_0 = a.shard(4, 0)
    shard_1 = a.shard(4, 1)
    shard_2 = a.shard(4, 2)
    shard_3 = a.shard(4, 3)
    assert len(shard_0) + len(shard_1) + len(shard_2) + len(shard_3) == length
    assert len(shard_0) == 3
    assert len(shard_1) == 2
    assert len(shard_2) == 2
    assert len(shard_3) == 2
    total = 0
    for shard in [shard_0, shard_1, shard_2, shard_3]:
        for sample in shard:
            total += sample
    assert total == sum(a)
    assert list(shard_0) == [0, 1, 2] and list(shard_3) == [7, 8]
    with pytest.raises(ValueError, match="index.*4"):
        a.shard(4, 4)


def test_dataset_take():
    length = 100
    a = gluon.data.SimpleDataset([i for i in range(length)])
    a_take_full = a.take(1000)
    assert len(a_take_full) == length
    a_take_full = a.take(None)
    assert len(a_take_full) == length
    count = 10
    a_take_10 = a.take(count)
    assert len(a_take_10) == count
    expected_total = sum([i for i in range(count)])
    total = 0
    for sample in a_take_10:
        assert sample < count
        total += sample
    assert total == expected_total

    a_xform_take_10 = a.transform(lambda x: x * 10).take(count)
    assert len(a_xform_take_10) == count
    expected_total = sum([i * 10 for i in range(count)])
    total = 0
    for sample in a_xform_take_10:
        assert sample < count * 10
        total += sample
    assert total == expected_total


def test_dataset_sample():
    a = gluon.data.SimpleDataset(list(range(10)))
    assert list(a.sample(gluon.data.IntervalSampler(10, 3))) == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]
    assert list(a.sample([9, 0])) == [9, 0]


def test_dataset_transform_first():
    a = gluon.data.ArrayDataset(np.arange(4), np.arange(4) * 10)
    t = a.transform_first(lambda x: x + 100)
    assert [tuple(int(v) for v in t[i]) for i in range(4)] == [(100, 0), (101, 10), (102, 20), (103, 30)]
    eager = a.transform(lambda x, y: x + y, lazy=False)
    assert [int(eager[i]) for i in range(4)] == [0, 11, 22, 33]


def _batchify(a):
    return a


def test_dataloader_scope():
    """The DataLoader (and its pool) lives as long as an iterator over it."""
    args = {'num_workers': 1, 'batch_size': 2}
    dataset = mx.ones(5)
    iterator = iter(DataLoader(dataset, batchify_fn=_batchify, **args))
    item = next(iterator)
    assert item is not None


def test_gluon_import_paths():
    from mxlite.gluon.data import DataLoader as imported
    from mxlite.gluon.data.vision import transforms
    from mxlite.gluon.utils import split_and_load  # noqa: F401
    assert imported is mx.data.DataLoader and transforms is mx.data.vision.transforms


def test_batchify_stack():
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    b = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    bf = batchify_mod.Stack()
    c = bf([a, b])
    np.testing.assert_array_equal(c.asnumpy(), np.stack((a, b)))


_PAD_EXPECTED = np.array([[[1., 2., 3., 4.], [11., 12., 13., 14.]],
                          [[4., 5., 6., -1.], [-1., -1., -1., -1.]],
                          [[9., 10., -1., -1.], [-1., -1., -1., -1.]]])


def test_batchify_pad():
    a = np.array([[1, 2, 3, 4], [11, 12, 13, 14]])
    b = np.array([[4, 5, 6]])
    c = np.array([[9, 10]])
    bf = batchify_mod.Pad(val=-1)
    d = bf([a, b, c])
    np.testing.assert_array_equal(d.asnumpy(), _PAD_EXPECTED)
    assert batchify_mod.Pad(round_to=3)([b, c]).shape == (2, 3, 3)


def test_batchify_group():
    a = [np.array([[1, 2, 3, 4], [11, 12, 13, 14]]), np.array([[1, 2, 3, 4], [11, 12, 13, 14]])]
    b = [np.array([[4, 5, 6]]), np.array([[4, 5, 6]])]
    c = [np.array([[9, 10]]), np.array([[9, 10]])]
    bf = batchify_mod.Group(batchify_mod.Pad(val=-1), batchify_mod.Pad(val=-1))
    d = bf([a, b, c])
    for part in d:
        np.testing.assert_array_equal(part.asnumpy(), _PAD_EXPECTED)
    assert batchify_mod.Tuple is batchify_mod.Group


def test_batchify_append_and_loader():
    a, b = np.array([1, 2, 3]), np.array([4, 5])
    out = batchify_mod.Append()([a, b])
    assert [x.shape for x in out] == [(1, 3), (1, 2)]
    assert [x.shape for x in batchify_mod.Append(expand=False)([a, b])] == [(3,), (2,)]
    ds = gluon.data.SimpleDataset([(np.arange(n), n) for n in (3, 1, 2)])
    loader = DataLoader(ds, batch_size=3, batchify_fn=batchify_mod.Group(batchify_mod.Pad(val=-1),
                                                                         batchify_mod.Stack()))
    seqs, lens = next(iter(loader))
    np.testing.assert_array_equal(seqs.asnumpy(), [[0, 1, 2], [0, -1, -1], [0, 1, -1]])
    np.testing.assert_array_equal(lens.asnumpy(), [3, 1, 2])


# -- workers: parallel, deaths, stalls ----------------------------------------------------------------
class _Slow(gluon.data.Dataset):
    """Each read sleeps; records which process/thread read it."""

    def __init__(self, n=8, delay=0.25):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = time.time_ns()  # the wall clock: comparable across the worker processes
        time.sleep(self.delay)
        return np.array([i, os.getpid(), threading.get_ident() % 2**31, start, time.time_ns()], dtype=np.int64)


@pytest.mark.parametrize("thread_pool", [False, True], ids=["processes", "threads"])
def test_workers_load_in_parallel(thread_pool):
    # 8 batches of one 0.25 s sample on 4 workers: reads overlap in time, whatever else keeps the machine busy
    # (a bound on the elapsed time would measure the machine's load as much as the loader).
    loader = DataLoader(_Slow(), batch_size=1, num_workers=4, thread_pool=thread_pool)
    rows = np.concatenate([b.asnumpy() for b in loader])
    assert rows[:, 0].tolist() == list(range(8))  # in order
    starts, ends = rows[:, 3], rows[:, 4]
    most_at_once = max(int(np.sum((starts <= t) & (t < ends))) for t in starts)
    assert most_at_once >= 2, f"no two of the 8 reads overlapped: {[(s, e) for s, e in zip(starts, ends)]}"
    if thread_pool:
        assert len(set(rows[:, 2])) > 1 and set(rows[:, 1]) == {os.getpid()}
    else:
        assert len(set(rows[:, 1])) > 1 and os.getpid() not in set(rows[:, 1])
    loader.close()


class _Dies(gluon.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            os._exit(3)  # a hard crash: no exception, the process is gone
        return np.array([i])


def test_dead_worker_raises_instead_of_hanging():
    loader = DataLoader(_Dies(), batch_size=1, num_workers=2, timeout=30)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="worker process died"):
        list(loader)
    assert time.perf_counter() - start < deadlines.scaled(20)


def test_stuck_worker_hits_the_timeout():
    loader = DataLoader(_Slow(n=2, delay=5.0), batch_size=1, num_workers=1, timeout=0.5)
    with pytest.raises(RuntimeError, match=r"timeout=0.5"):
        list(loader)


_STUCK_SCRIPT = """
import time
from mxlite.gluon.data import DataLoader

class Stuck:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        time.sleep(3600)

try:
    next(iter(DataLoader(Stuck(), batch_size=1, num_workers=1, timeout=0.5)))
except RuntimeError as exc:
    print("timeout" if "timeout=0.5" in str(exc) else exc)
"""


def test_stuck_worker_does_not_outlive_the_loader():
    # After the timeout the stuck worker process must be ended: left alive, it would keep the
    # interpreter from exiting (concurrent.futures joins its workers at exit).
    done = deadlines.run([sys.executable, "-c", _STUCK_SCRIPT], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timeout"


class _Raises(gluon.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            raise KeyError(f"sample {i} is broken")
        return np.array([i])


@pytest.mark.parametrize("thread_pool", [False, True], ids=["processes", "threads"])
def test_worker_exception_is_reraised(thread_pool):
    with pytest.raises(KeyError, match="sample 2 is broken"):
        list(DataLoader(_Raises(), batch_size=1, num_workers=2, thread_pool=thread_pool))


def test_workers_get_different_random_streams():
    class Rand(gluon.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            time.sleep(0.05)
            return np.array([np.random.randint(2**30), os.getpid()])

    rows = np.concatenate([b.asnumpy() for b in DataLoader(Rand(), batch_size=1, num_workers=2)])
    by_pid = {pid: sorted(rows[rows[:, 1] == pid, 0].tolist()) for pid in set(rows[:, 1].tolist())}
    assert len(by_pid) == 2
    first, second = by_pid.values()
    assert first != second


@pytest.mark.parametrize("kwargs,arg", [({"prefetch": 0}, "prefetch"), ({"timeout": 0}, "timeout"),
                                        ({"num_workers": -1}, "num_workers")])
def test_bad_loader_arguments(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        DataLoader(np.zeros(4), batch_size=2, **kwargs)


def test_download_and_check_sha1(tmp_path):
    import hashlib
    src = tmp_path / "src" / "blob.bin"
    src.parent.mkdir()
    src.write_bytes(b"mxlite" * 1000)
    sha1 = hashlib.sha1(src.read_bytes()).hexdigest()
    dest = tmp_path / "dest"
    dest.mkdir()
    path = gluon.utils.download(src.as_uri(), path=str(dest), sha1_hash=sha1, progress=False)
    assert path == str(dest / "blob.bin") and gluon.utils.check_sha1(path, sha1)
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # as a plain open() would make it, not mkstemp's 0600
    with pytest.raises(OSError, match="SHA-1 0{40}"):
        gluon.utils.download(src.as_uri(), path=str(tmp_path / "other.bin"), sha1_hash="0" * 40, progress=False)
    assert not (tmp_path / "other.bin").exists()  # no partial or wrong file left under the name
    with pytest.raises(OSError, match="missing.bin"):
        gluon.utils.download((tmp_path / "missing.bin").as_uri(), path=str(dest), retries=0, progress=False)

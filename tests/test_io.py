"""``mx.io`` (``mxlite.io``): MXNet 1.x's data iterators.

The NDArrayIter cases mirror MXNet's ``tests/python/unittest/test_io.py`` (last batch handling 'pad', 'discard',
'roll_over' with its carry into the next epoch; list and dict inputs; shuffling; the padding corner case).
"""

from __future__ import annotations

import gc
import re
import sys
import threading
import time

import numpy as np
import pytest

import mxlite as mx
from mxlite import io as mxio
from tests import deadlines


# -- NDArrayIter: MXNet's cases --------------------------------------------------------------------------------
def _init_data(data_type, is_image=False):
    if is_image:  # MXNet uses 28x28 images; the batching does not look inside an example
        return mx.nd.random.uniform(0, 255, shape=(5000, 1, 4, 4)), mx.nd.ones((5000, 1))
    if data_type == "NDArray":
        data, labels = mx.nd.ones((1000, 2, 2)), mx.nd.ones((1000, 1))
    else:
        data, labels = np.ones((1000, 2, 2)), np.ones((1000, 1))
    for i in range(1000):
        data[i] = i / 100
        labels[i] = i / 100
    return data, labels


def _check_last_batch_handle(data, labels=None, is_image=False):
    handles = ["pad", "discard", "roll_over"]
    label_counts = [(124, 100), (100, 96), (100, 96)]
    batch_counts = [40, 39, 39] if is_image else [8, 7, 7]
    has_labels = labels is not None and len(labels) != 0
    for handle, want_labels, want_batches in zip(handles, label_counts, batch_counts):
        it = mxio.NDArrayIter(data, labels, 128, False, last_batch_handle=handle)
        count, label_count = 0, [0] * 10
        for batch in it:
            if len(data) == 2:
                assert len(batch.data) == 2
            if has_labels:
                if not is_image:
                    label = batch.label[0].asnumpy().flatten()
                    assert (batch.data[0].asnumpy()[:, 0, 0] == label).all()
                    for value in label:
                        label_count[int(value)] += 1
            else:
                assert not batch.label, "label is not an empty list"
            assert batch.data[0].device == mx.cpu(0)
            count += 1
            if handle == "pad" and count == batch_counts[0]:
                cache = batch.data[0].asnumpy()
        if has_labels and not is_image:
            assert (label_count[0], label_count[8]) == want_labels, handle
        assert count == want_batches, handle
    it.reset()  # roll_over: the first batch of the next epoch is the carried examples plus new ones
    assert np.array_equal(it.next().data[0].asnumpy(), cache)


def _check_shuffle(data, labels=None):
    plain = [batch.data[0].asnumpy() for batch in mxio.NDArrayIter(data, labels, 1, False)]
    it = mxio.NDArrayIter(data, labels, 1, True)
    for i, batch in enumerate(it):
        assert np.array_equal(batch.data[0].asnumpy(), plain[it.idx[i]])


@pytest.mark.parametrize("data_type", ["NDArray", "ndarray"])
@pytest.mark.parametrize("is_image", [False, True])
def test_ndarrayiter_mxnets_cases(data_type, is_image):
    data, labels = _init_data(data_type, is_image)
    _check_last_batch_handle(data, labels, is_image)
    _check_last_batch_handle([data, data], labels, is_image)
    _check_last_batch_handle(data=[data, data], is_image=is_image)
    _check_last_batch_handle({"data1": data, "data2": data}, labels, is_image)
    _check_last_batch_handle(data={"data1": data, "data2": data}, is_image=is_image)
    _check_last_batch_handle(data, [], is_image)
    _check_last_batch_handle(data=data, is_image=is_image)
    if not is_image:  # MXNet shuffles the images too; one example per batch makes that 5000 batches per call
        _check_shuffle(data, labels)
        _check_shuffle([data, data], labels)
        _check_shuffle([data, data])
        _check_shuffle({"data1": data, "data2": data}, labels)
        _check_shuffle({"data1": data, "data2": data})
        _check_shuffle(data, [])
        _check_shuffle(data)


def test_ndarrayiter_pad_wraps_around_more_than_once():
    data = np.arange(10)
    it = mxio.NDArrayIter(data=data, batch_size=205, shuffle=False, last_batch_handle="pad")
    batch = it.next()
    assert np.array_equal(batch.data[0].asnumpy(), np.concatenate((np.tile(data, 20), np.arange(5))))
    assert batch.pad == 195


def test_ndarrayiter_mxnet_doc_example():
    data, labels = np.arange(40).reshape((10, 2, 2)), np.ones([10, 1])
    for handle, batches in [("pad", 4), ("discard", 3), ("roll_over", 3)]:
        assert len(list(mxio.NDArrayIter(data, labels, 3, True, last_batch_handle=handle))) == batches
    it = mxio.NDArrayIter(data, labels, 3, False, last_batch_handle="roll_over")
    assert [b.pad for b in it] == [0, 0, 0]
    it.reset()
    first = it.next()
    assert first.data[0].asnumpy()[:, 0, 0].tolist() == [36, 0, 4] and first.pad == 1
    assert [b.data[0].asnumpy()[0, 0, 0] for b in it] == [8, 20]  # then on from example 2 of the new epoch
    assert [str(d) for d in it.provide_data] == ["DataDesc[data,(3, 2, 2),float32,NCHW]"]
    assert it.provide_label == [("softmax_label", (3, 1))]


def test_ndarrayiter_pad_batches_and_roll_over_across_epochs():
    x = np.arange(7, dtype=np.float32)
    it = mxio.NDArrayIter(x, batch_size=3, last_batch_handle="pad")
    got = [(b.data[0].asnumpy().tolist(), b.pad) for b in it]
    assert got == [([0, 1, 2], 0), ([3, 4, 5], 0), ([6, 0, 1], 2)]
    roll = mxio.NDArrayIter(x, batch_size=3, last_batch_handle="roll_over")
    epochs = []
    for _ in range(3):
        epochs.append([b.data[0].asnumpy().tolist() for b in roll])
        roll.reset()
    # 7 examples: epoch 1 carries [6]; epoch 2 = [6,0,1],[2,3,4], carries [5,6]; epoch 3 = [5,6,0],[1,2,3],[4,5,6]
    assert epochs == [[[0, 1, 2], [3, 4, 5]], [[6, 0, 1], [2, 3, 4]], [[5, 6, 0], [1, 2, 3], [4, 5, 6]]]
    roll.hard_reset()
    assert roll.next().data[0].asnumpy().tolist() == [0, 1, 2]


def test_ndarrayiter_names_and_order():
    a, b = np.zeros((4, 2)), np.ones((4, 3))
    it = mxio.NDArrayIter([a, b], [np.zeros(4)], batch_size=2)
    assert [d.name for d in it.provide_data] == ["_0_data", "_1_data"]
    assert [d.name for d in it.provide_label] == ["softmax_label"]
    it = mxio.NDArrayIter({"zeta": a, "alpha": b}, batch_size=2, data_name="x", label_name="y")
    assert [d.name for d in it.provide_data] == ["alpha", "zeta"]  # sorted by name, as MXNet
    batch = it.next()
    assert [d.shape for d in batch.data] == [(2, 3), (2, 2)] and batch.label == []
    it = mxio.NDArrayIter(a, np.zeros(4), batch_size=2, data_name="x", label_name="y")
    assert (it.provide_data[0].name, it.provide_label[0].name) == ("x", "y")


def test_ndarrayiter_dtypes_as_mxnet():
    ints = np.arange(6).reshape(3, 2)
    assert mxio.NDArrayIter(ints, batch_size=3).next().data[0].dtype == np.float32  # mx.nd.array's float32
    assert mxio.NDArrayIter([[1, 2], [3, 4]], batch_size=2).next().data[0].dtype == np.float32
    t = mx.nd.array(ints, dtype=np.int32)
    it = mxio.NDArrayIter(t, t, batch_size=3, shuffle=True)  # Tensors keep their dtype, shuffled or not
    batch = it.next()
    assert batch.data[0].dtype == np.int32 and it.provide_data[0].dtype == np.int32
    assert np.array_equal(batch.data[0].asnumpy(), batch.label[0].asnumpy())


def test_ndarrayiter_shuffle_follows_numpys_global_generator():
    x = np.arange(20, dtype=np.float32)
    np.random.seed(3)
    first = [b.data[0].asnumpy().tolist() for b in mxio.NDArrayIter(x, batch_size=5, shuffle=True)]
    np.random.seed(3)
    again = [b.data[0].asnumpy().tolist() for b in mxio.NDArrayIter(x, batch_size=5, shuffle=True)]
    np.random.seed(3)
    perm = np.arange(20)
    np.random.shuffle(perm)  # MXNet's first permutation
    assert first == again == perm.reshape(4, 5).tolist()


def test_ndarrayiter_iter_next_protocol_and_exhaustion():
    it = mxio.NDArrayIter(np.arange(4), np.arange(4), batch_size=2)
    seen = []
    while it.iter_next():
        seen.append((it.getdata()[0].asnumpy().tolist(), it.getlabel()[0].asnumpy().tolist(), it.getpad()))
    assert seen == [([0, 1], [0, 1], 0), ([2, 3], [2, 3], 0)] and it.getindex() is None
    with pytest.raises(StopIteration):
        it.next()
    with pytest.raises(RuntimeError, match="call reset"):
        it.getdata()


@pytest.mark.parametrize("kwargs,error,match", [
    ({"batch_size": 0}, ValueError, "batch_size must be an integer >= 1, got 0"),
    ({"last_batch_handle": "keep"}, ValueError, "last_batch_handle must be one of"),
    ({"label": np.zeros(3)}, ValueError, r"same number of examples .*'data': 4, 'softmax_label': 3"),
    ({"data": []}, ValueError, "at least one array"),
    ({"data": "text"}, TypeError, "data must be an array, a list of arrays or a dict"),
    ({"data": {"x": object()}}, TypeError, "invalid type object for 'x'"),
    ({"data": np.array(3.0)}, ValueError, "'data' is a scalar"),
])
def test_ndarrayiter_errors(kwargs, error, match):
    args = {"data": np.zeros(4), "batch_size": 2, **kwargs}
    with pytest.raises(error, match=match):
        mxio.NDArrayIter(**args)


@pytest.mark.gpu
@pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")
def test_ndarrayiter_takes_gpu_tensors_and_hands_out_cpu_batches():
    x = mx.array(np.arange(6, dtype=np.float64).reshape(3, 2), device=mx.gpu(0))
    batch = mxio.NDArrayIter(x, batch_size=2, last_batch_handle="discard").next()
    assert batch.data[0].device == mx.cpu(0) and batch.data[0].dtype == np.float64
    assert batch.data[0].asnumpy().tolist() == [[0, 1], [2, 3]]


# -- DataDesc, DataBatch, DataIter --------------------------------------------------------------------------------
def test_databatch_str_as_mxnet():
    batch = mxio.DataBatch(data=[mx.nd.ones((2, 3))])
    assert re.match(r"DataBatch: data shapes: \[\(2L?, 3L?\)\] label shapes: None", str(batch))
    batch = mxio.DataBatch(data=[mx.nd.ones((2, 3)), mx.nd.ones((7, 8))], label=[mx.nd.ones((4, 5))])
    assert re.match(r"DataBatch: data shapes: \[\(2L?, 3L?\), \(7L?, 8L?\)\] label shapes: \[\(4L?, 5L?\)\]",
                    str(batch))
    with pytest.raises(TypeError, match="data must be a list of arrays"):
        mxio.DataBatch(mx.nd.ones((2,)))


def test_datadesc():
    d = mxio.DataDesc("data", [32, 3, 8, 8])
    name, shape = d
    assert (name, shape, d.dtype, d.layout) == ("data", (32, 3, 8, 8), np.float32, "NCHW")
    assert repr(mxio.DataDesc("x", (4, 2), np.float64, "TNC")).startswith("DataDesc[x,(4, 2),")
    assert (mxio.DataDesc.get_batch_axis("TNC"), mxio.DataDesc.get_batch_axis(None),
            mxio.DataDesc.get_batch_axis("CHW")) == (1, 0, -1)
    descs = mxio.DataDesc.get_list([("a", (1, 2)), ("b", (3,))], [("b", np.int32), ("a", np.float16)])
    assert [(x.name, x.shape, x.dtype) for x in descs] == [("a", (1, 2), np.float16), ("b", (3,), np.int32)]
    assert [x.dtype for x in mxio.DataDesc.get_list([("a", (1,))], None)] == [np.float32]


class _Counter(mxio.DataIter):
    """A user-written iterator in MXNet's style: iter_next and the getters, provide_data as an attribute."""

    def __init__(self, n, batch_size=2, fail_at=None, block=None):
        super().__init__(batch_size)
        self.n, self.i, self.fail_at, self.block = n, 0, fail_at, block
        self.provide_data = [mxio.DataDesc("data", (batch_size, 1))]
        self.provide_label = [mxio.DataDesc("label", (batch_size,))]

    def reset(self):
        self.i = 0

    def iter_next(self):
        if self.block is not None:
            self.block.wait()
        if self.i == self.fail_at:
            raise KeyError(f"broken record {self.i}")
        self.i += 1
        return self.i <= self.n

    def getdata(self):
        return [mx.nd.full((self.batch_size, 1), self.i)]

    def getlabel(self):
        return [mx.nd.full((self.batch_size,), -self.i)]

    def getpad(self):
        return 0


def test_dataiter_subclass_loops_like_mxnet():
    it = _Counter(3)
    assert [b.data[0].asnumpy()[0, 0] for b in it] == [1, 2, 3]
    it.reset()
    assert next(it).label[0].asnumpy().tolist() == [-1, -1] and iter(it) is it
    assert mxio.DataIter().next is not None and mxio.DataIter(5).batch_size == 5
    with pytest.raises(StopIteration):
        mxio.DataIter().next()


# -- ResizeIter ----------------------------------------------------------------------------------------------------
def test_resizeiter():
    it = mxio.ResizeIter(mxio.NDArrayIter(mx.nd.ones((100, 10)), batch_size=25), 2)  # MXNet's doc example
    assert [b.data[0].shape for b in it] == [(25, 10), (25, 10)]
    assert it.batch_size == 25 and it.provide_data[0].shape == (25, 10)
    longer = mxio.ResizeIter(mxio.NDArrayIter(np.arange(4), batch_size=2), 5)  # wraps around the inner one
    assert [b.data[0].asnumpy()[0] for b in longer] == [0, 2, 0, 2, 0]
    go_on = mxio.ResizeIter(mxio.NDArrayIter(np.arange(6), batch_size=2), 2, reset_internal=False)
    first = [b.data[0].asnumpy()[0] for b in go_on]
    go_on.reset()
    assert first + [b.data[0].asnumpy()[0] for b in go_on] == [0, 2, 4, 0]


# -- PrefetchingIter -----------------------------------------------------------------------------------------------
def test_prefetchingiter_joins_iterators_and_renames():
    it1 = mxio.NDArrayIter({"data": mx.nd.ones((100, 10))}, batch_size=25)
    it2 = mxio.NDArrayIter({"data": mx.nd.zeros((100, 10))}, batch_size=25)
    piter = mxio.PrefetchingIter([it1, it2], rename_data=[{"data": "data_1"}, {"data": "data_2"}])
    assert [d.name for d in piter.provide_data] == ["data_1", "data_2"] and piter.batch_size == 25
    for _ in range(2):
        batches = list(piter)
        assert len(batches) == 4
        assert all(len(b.data) == 2 and b.data[0].asnumpy().all() and not b.data[1].asnumpy().any()
                   for b in batches)
        assert batches[0].provide_data[1].name == "data_2"
        piter.reset()
    piter.close()
    with pytest.raises(RuntimeError, match="closed"):
        piter.next()


def test_prefetchingiter_matches_the_plain_iterator_across_resets():
    x = np.arange(11, dtype=np.float32)
    plain = mxio.NDArrayIter(x, x, batch_size=3, last_batch_handle="roll_over")
    pref = mxio.PrefetchingIter(mxio.NDArrayIter(x, x, batch_size=3, last_batch_handle="roll_over"))
    for _ in range(3):
        want = [(b.data[0].asnumpy().tolist(), b.label[0].asnumpy().tolist(), b.pad) for b in plain]
        got = [(b.data[0].asnumpy().tolist(), b.label[0].asnumpy().tolist(), b.pad) for b in pref]
        assert got == want
        assert not pref.iter_next()  # stays at the end until reset
        plain.reset()
        pref.reset()
    pref.next()
    pref.reset()  # mid-epoch: the batch read ahead is dropped
    assert pref.next().data[0].asnumpy().tolist() == plain.next().data[0].asnumpy().tolist()


def test_prefetchingiter_reraises_a_worker_error_and_recovers_on_reset():
    piter = mxio.PrefetchingIter(_Counter(5, fail_at=2))
    assert [piter.next().data[0].asnumpy()[0, 0] for _ in range(2)] == [1, 2]
    with pytest.raises(KeyError, match="broken record 2"):
        piter.next()
    piter.iters[0].fail_at = None
    piter.reset()
    assert [b.data[0].asnumpy()[0, 0] for b in piter] == [1, 2, 3, 4, 5]


def test_prefetchingiter_refuses_iterators_that_disagree():
    piter = mxio.PrefetchingIter([_Counter(2), _Counter(3)])
    assert len([piter.next(), piter.next()]) == 2
    with pytest.raises(ValueError, match="ended at different batches"):
        piter.next()
    pads = mxio.PrefetchingIter([mxio.NDArrayIter(np.arange(5), batch_size=2),
                                 mxio.NDArrayIter(np.arange(3), batch_size=2)])
    pads.next()
    with pytest.raises(ValueError, match=r"padded differently \(\[0, 1\]\)"):
        pads.next()
    with pytest.raises(ValueError, match="at least one DataIter"):
        mxio.PrefetchingIter([])


def test_prefetchingiter_threads_end_when_it_is_dropped():
    before = set(threading.enumerate())  # Thread objects: an ident can be reused once a thread ends
    piter = mxio.PrefetchingIter([_Counter(3), _Counter(3)])
    threads = [t for t in threading.enumerate() if t not in before]
    assert len(threads) == 2 and all(t.daemon for t in threads)
    del piter
    gc.collect()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)


_EXIT_SCRIPT = """
import threading
from mxlite import io as mxio
from tests.test_io import _Counter
block = threading.Event()                      # never set: the prefetching thread waits inside iter_next
keep = mxio.PrefetchingIter(_Counter(3, block=block))
print("started", flush=True)
"""


def test_prefetchingiter_never_holds_the_program_at_exit():
    start = time.monotonic()
    proc = deadlines.run([sys.executable, "-c", _EXIT_SCRIPT], timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "started" and time.monotonic() - start < deadlines.scaled(60)

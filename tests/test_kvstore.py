"""KVStore (``mx.kv``): MXNet's documented results for every call, errors naming the key, states files.

CPU devices stand in for GPUs (``mx.cpu(i)`` are distinct devices). Gradient compression is
tested twice with the same hand-computed 2-bit numbers: through a reference codec injected in
place of ``mxlite.comm.compression`` (the plumbing: residual per key and push position, kept
across pushes, saved with the states), and through the real module when it is present.
The multi-process part runs ``tests/kvstore_worker.py`` under ``mpiexec -n 2``.
"""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops.sparse import RowSparseTensor, row_sparse_array
from mxlite.optimizer.lr_scheduler import FactorScheduler
from tests.mpi_helpers import ROOT, mpirun_ok, needs_mpi

SHAPE = (2, 3)
GPUS4 = [mx.cpu(i) for i in range(4)]  # MXNet's examples use 4 GPUs
f32 = np.float32

try:
    import mpi4py  # noqa: F401

    HAVE_MPI4PY = True
except ImportError:  # pragma: no cover - CI installs the mpi extra
    HAVE_MPI4PY = False


def _value(kv, key, shape=SHAPE, dtype="float32"):
    out = mx.zeros(shape, dtype=dtype)
    kv.pull(key, out=out)
    return out.asnumpy()


# -- create ---------------------------------------------------------------------------------------------
def test_create_types_and_attributes():
    assert mx.kv is mx.kvstore
    for name in ("local", "device", "nccl"):
        kv = mx.kv.create(name)
        assert (kv.type, kv.rank, kv.num_workers) == (name, 0, 1)
        kv.barrier()
        kv._barrier()
    assert mx.kv.create().type == "local"
    assert mx.kv.create("Device").type == "device"  # case-insensitive, as MXNet
    assert isinstance(mx.kv.create("local"), mx.kv.KVStore)


def test_create_rejects_bad_names():
    with pytest.raises(TypeError, match="must be a str"):
        mx.kv.create(3)
    with pytest.raises(ValueError, match=r"unknown kvstore type 'ring'; known: local, device, nccl, dist_sync"):
        mx.kv.create("ring")
    with pytest.raises(ValueError, match="no parameter server"):
        mx.kv.create("dist_async")


@pytest.mark.skipif(not HAVE_MPI4PY, reason="needs mpi4py")
@pytest.mark.parametrize("name", ["dist_sync", "dist_sync_device", "dist_device_sync"])
def test_dist_types_in_one_process_are_a_world_of_one(name):
    kv = mx.kv.create(name)
    assert (kv.type, kv.rank, kv.num_workers) == (name, 0, 1)
    kv.init(0, mx.ones(SHAPE))
    kv.push(0, [mx.ones(SHAPE, device=d) for d in GPUS4[:2]])
    np.testing.assert_array_equal(_value(kv, 0), np.full(SHAPE, 2.0))
    kv.init(1, mx.zeros((5, 2)))
    kv.push(1, row_sparse_array((np.ones((2, 2)), [3, 1]), shape=(5, 2), dtype="float32"))
    np.testing.assert_array_equal(_value(kv, 1, (5, 2)), [[0, 0], [1, 1], [0, 0], [1, 1], [0, 0]])
    kv.barrier()


def test_dist_types_without_mpi4py_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `import mpi4py` fail
    with pytest.raises(RuntimeError, match=r"mpi4py.*pip install 'mxlite\[mpi\]'"):
        mx.kv.create("dist_sync")


def test_is_capable():
    assert mx.kv.create("local").is_capable(mx.kv.KVStore.OPTIMIZER)
    assert mx.kv.create("device").is_capable("Optimizer")
    assert not mx.kv.create("nccl").is_capable("optimizer")  # reduce-only in mxlite
    with pytest.raises(ValueError, match="unknown capability 'sparse'"):
        mx.kv.create("local").is_capable("sparse")


# -- init / push / pull: MXNet's docstring examples -----------------------------------------------------
def test_init_push_pull_docstring_examples():
    kv = mx.kv.create("local")
    kv.init("3", mx.ones(SHAPE) * 2)
    np.testing.assert_array_equal(_value(kv, "3"), np.full(SHAPE, 2.0))
    kv.push("3", mx.ones(SHAPE) * 8)
    np.testing.assert_array_equal(_value(kv, "3"), np.full(SHAPE, 8.0))
    kv.push("3", [mx.ones(SHAPE, device=d) for d in GPUS4])  # aggregated over the devices
    np.testing.assert_array_equal(_value(kv, "3"), np.full(SHAPE, 4.0))
    keys = ["5", "7", "9"]
    kv.init(keys, [mx.ones(SHAPE)] * len(keys))
    kv.push(keys, [mx.ones(SHAPE)] * len(keys))
    b = [mx.zeros(SHAPE) for _ in keys]
    kv.pull(keys, out=b)
    np.testing.assert_array_equal(b[1].asnumpy(), np.ones(SHAPE))
    keys = ["6", "8", "10"]
    kv.init(keys, [mx.zeros(SHAPE)] * len(keys))
    kv.push(keys, [[mx.ones(SHAPE, device=d) for d in GPUS4]] * len(keys))
    b = [[mx.zeros(SHAPE, device=d) for d in GPUS4] for _ in keys]
    kv.pull(keys, out=b)
    for row in b:
        for out, d in zip(row, GPUS4):
            assert out.device == d
            np.testing.assert_array_equal(out.asnumpy(), np.full(SHAPE, 4.0))


def test_int_keys_and_pull_into_several_devices():
    kv = mx.kv.create("device")
    kv.init(3, mx.full(SHAPE, 2.0, device=mx.cpu(1)))
    outs = [mx.ones(SHAPE, device=d) for d in GPUS4]
    kv.pull(3, out=outs)
    for out, d in zip(outs, GPUS4):
        assert out.device == d
        np.testing.assert_array_equal(out.asnumpy(), np.full(SHAPE, 2.0))


def test_sum_order_is_list_order_on_the_home_device():
    vals = [f32(1e8), f32(-1e8), f32(1.0)]
    want = (vals[0] + vals[1]) + vals[2]
    assert want == 1.0 and vals[0] + (vals[1] + vals[2]) == 0.0  # the order matters for these values
    for name in ("local", "device"):
        kv = mx.kv.create(name)
        kv.init(0, mx.zeros(4))
        for _ in range(3):  # repeated runs give the same bits
            kv.push(0, [mx.full(4, v, device=d) for v, d in zip(vals, [mx.cpu(2), mx.cpu(0), mx.cpu(2)])])
            np.testing.assert_array_equal(_value(kv, 0, 4), np.full(4, want, np.float32))


def test_values_on_one_device_and_float64():
    kv = mx.kv.create("device")
    kv.init("w", mx.zeros(3, dtype="float64"))
    kv.push("w", [mx.full(3, 1.5, dtype="float64"), mx.full(3, 2.25, dtype="float64")])
    np.testing.assert_array_equal(_value(kv, "w", 3, "float64"), [3.75] * 3)


def test_the_store_keeps_copies():
    kv = mx.kv.create("local")
    value = mx.ones(SHAPE)
    kv.init(0, value)
    value[:] = 7.0
    np.testing.assert_array_equal(_value(kv, 0), np.ones(SHAPE))
    grad = mx.full(SHAPE, 3.0)
    kv.push(0, grad)
    grad[:] = 9.0
    out = mx.zeros(SHAPE)
    kv.pull(0, out=out)
    out[:] = 5.0
    np.testing.assert_array_equal(_value(kv, 0), np.full(SHAPE, 3.0))


def test_duplicate_keys_in_one_push_are_grouped():
    kv = mx.kv.create("local")
    kv.init(1, mx.zeros(2))
    kv.push([1, 1], [mx.ones(2), mx.full(2, 2.0)])  # MXNet groups values by key: one push of [1, 2]
    np.testing.assert_array_equal(_value(kv, 1, 2), [3.0, 3.0])


# -- updaters and optimizers ----------------------------------------------------------------------------
def test_set_updater_docstring_example_and_keys_as_given():
    seen = []

    def update(key, grad, stored):
        seen.append((key, grad.device, stored.device))
        stored += grad * 2

    kv = mx.kv.create("local")
    kv.init("3", mx.full(SHAPE, 4.0, device=mx.cpu(2)))
    kv._set_updater(update)
    kv.push("3", mx.ones(SHAPE))
    np.testing.assert_array_equal(_value(kv, "3"), np.full(SHAPE, 6.0))
    kv.push("3", [mx.ones(SHAPE, device=d) for d in GPUS4])
    np.testing.assert_array_equal(_value(kv, "3"), np.full(SHAPE, 14.0))
    assert seen == [("3", mx.cpu(0), mx.cpu(0))] * 2  # 'local' stores and sums on the CPU

    ints = mx.kv.create("device")
    ints.init(7, mx.zeros(2, device=mx.cpu(3)))
    ints._set_updater(update)
    ints.push(7, [mx.ones(2, device=mx.cpu(1)), mx.ones(2, device=mx.cpu(3))])
    assert seen[-1] == (7, mx.cpu(3), mx.cpu(3))  # 'device': on the device of the init value
    assert isinstance(seen[-1][0], int)
    np.testing.assert_array_equal(_value(ints, 7, 2), [4.0, 4.0])


def test_set_optimizer_docstring_example():
    kv = mx.kv.create()
    weight = mx.zeros((2, 2))
    kv.init(3, weight)
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.01))
    kv.push(3, mx.ones((2, 2)))
    kv.pull(3, out=weight)
    np.testing.assert_array_equal(weight.asnumpy(), np.full((2, 2), -0.01, np.float32))


def test_optimizer_index_is_the_key_and_momentum_carries_over():
    opt = mx.optimizer.SGD(learning_rate=0.5, momentum=0.5)
    opt.set_lr_mult({"b": 0.0})  # the key is the optimizer's index
    kv = mx.kv.create("device")
    kv.init(["a", "b"], [mx.zeros(2), mx.zeros(2)])
    kv.set_optimizer(opt)
    for _ in range(2):
        kv.push(["a", "b"], [[mx.ones(2), mx.ones(2, device=mx.cpu(1))], mx.ones(2)])
    # mom = -0.5 * 2 = -1 -> w = -1; mom = 0.5 * -1 - 0.5 * 2 = -1.5 -> w = -2.5
    np.testing.assert_array_equal(_value(kv, "a", 2), [-2.5, -2.5])
    np.testing.assert_array_equal(_value(kv, "b", 2), [0.0, 0.0])
    assert set(kv._updater.states) == {"a", "b"}


def test_set_optimizer_rejections():
    with pytest.raises(ValueError, match="'nccl' only reduces"):
        mx.kv.create("nccl").set_optimizer(mx.optimizer.SGD())
    with pytest.raises(ValueError, match="'nccl' only reduces"):
        mx.kv.create("nccl")._set_updater(lambda k, g, s: None)
    with pytest.raises(TypeError, match="expects an mx.optimizer.Optimizer, got str"):
        mx.kv.create("local").set_optimizer("sgd")
    with pytest.raises(TypeError, match="must be callable"):
        mx.kv.create("local")._set_updater(3)


# -- pushpull / broadcast ---------------------------------------------------------------------------------
def test_pushpull_docstring_examples_and_in_place():
    kv = mx.kv.create("local")
    kv.init("3", mx.zeros(SHAPE))
    a = mx.zeros(SHAPE)
    kv.pushpull("3", mx.ones(SHAPE) * 8, out=a)
    np.testing.assert_array_equal(a.asnumpy(), np.full(SHAPE, 8.0))
    kv.pushpull("3", [mx.ones(SHAPE, device=d) for d in GPUS4], out=a)
    np.testing.assert_array_equal(a.asnumpy(), np.full(SHAPE, 4.0))
    keys = ["7", "8", "9"]
    kv.init(keys, [mx.zeros(SHAPE)] * 3)
    b = [[mx.ones(SHAPE, device=d) for d in GPUS4] for _ in keys]
    kv.pushpull(keys, b)  # out=None: the sums are written back into the values
    for row in b:
        for v in row:
            np.testing.assert_array_equal(v.asnumpy(), np.full(SHAPE, 4.0))


def test_broadcast_docstring_example_and_once_per_key():
    kv = mx.kv.create("local")
    a = mx.zeros(SHAPE)
    kv.broadcast("3", mx.ones(SHAPE) * 2, out=a)
    np.testing.assert_array_equal(a.asnumpy(), np.full(SHAPE, 2.0))
    outs = [mx.zeros(SHAPE, device=d) for d in GPUS4[:2]]
    kv.broadcast(["4", "5"], [mx.ones(SHAPE), mx.ones(SHAPE) * 3], out=[outs[0], outs[1]])
    np.testing.assert_array_equal(outs[1].asnumpy(), np.full(SHAPE, 3.0))
    with pytest.raises(ValueError, match="duplicate init of key '3'"):
        kv.broadcast("3", mx.ones(SHAPE), out=a)
    with pytest.raises(ValueError, match=r"key '6': out is float32\(3, 2\)"):
        kv.broadcast("6", mx.ones(SHAPE), out=mx.zeros((3, 2)))
    with pytest.raises(ValueError, match="key '6' has not been initialised"):  # nothing was stored
        kv.pull("6", out=a)


# -- row-sparse ----------------------------------------------------------------------------------------
def test_row_sparse_pull_docstring_examples():
    shape = (3, 3)
    kv = mx.kv.create("local")
    kv.init("3", mx.ones(shape).tostype("row_sparse"))
    a = mx.sparse.zeros(shape)
    kv.row_sparse_pull("3", out=a, row_ids=mx.array([0, 2], dtype="int64"))
    np.testing.assert_array_equal(a.asnumpy(), [[1, 1, 1], [0, 0, 0], [1, 1, 1]])
    assert a.indices.asnumpy().tolist() == [0, 2]
    kv.row_sparse_pull("3", out=a, row_ids=mx.array([2, 2], dtype="int64"))  # duplicates
    np.testing.assert_array_equal(a.asnumpy(), [[0, 0, 0], [0, 0, 0], [1, 1, 1]])
    assert a.indices.asnumpy().tolist() == [2] and a.data.shape == (1, 3)
    kv.row_sparse_pull("3", out=a, row_ids=mx.array([1, 0]))  # unsorted, float ids (MXNet's examples)
    np.testing.assert_array_equal(a.asnumpy(), [[1, 1, 1], [1, 1, 1], [0, 0, 0]])
    assert a.indices.asnumpy().tolist() == [0, 1] and a.indices.dtype == np.int64


def test_row_sparse_pull_lists_and_devices():
    kv = mx.kv.create("device")
    kv.init([0, 1], [mx.array(np.arange(12.0).reshape(4, 3), dtype="float32"),
                         mx.array(np.arange(8.0).reshape(4, 2), dtype="float32")])
    outs = [mx.sparse.zeros((4, 3), device=d) for d in GPUS4[:3]]
    kv.row_sparse_pull(0, out=outs, row_ids=np.array([3, 1, 3]))  # one row_ids for every out
    for o, d in zip(outs, GPUS4):
        assert o.device == d and o.indices.asnumpy().tolist() == [1, 3]
        np.testing.assert_array_equal(o.data.asnumpy(), [[3, 4, 5], [9, 10, 11]])
    kv.row_sparse_pull(0, out=outs[:2], row_ids=[mx.array([0]), mx.array([2, 0])])  # one per out
    assert [o.indices.asnumpy().tolist() for o in outs[:2]] == [[0], [0, 2]]
    other = mx.sparse.zeros((4, 2))
    kv.row_sparse_pull([0, 1], out=[outs[0], other], row_ids=[mx.array([1]), mx.array([], dtype="int64")])
    assert other.indices.size == 0 and other.data.shape == (0, 2)
    np.testing.assert_array_equal(outs[0].asnumpy()[1], [3, 4, 5])


def test_row_sparse_pull_errors_name_the_key():
    kv = mx.kv.create("local")
    kv.init("e", mx.ones((3, 2)))
    out = mx.sparse.zeros((3, 2))
    with pytest.raises(ValueError, match=r"key 'e': row_ids must lie in \[0, 3\), got 0\.\.3"):
        kv.row_sparse_pull("e", out=out, row_ids=mx.array([0, 3]))
    with pytest.raises(ValueError, match="key 'e': row_ids must be whole numbers"):
        kv.row_sparse_pull("e", out=out, row_ids=mx.array([0.5]))
    with pytest.raises(TypeError, match="key 'e': row_ids must be a Tensor or an array"):
        kv.row_sparse_pull("e", out=out, row_ids=[0, 1])
    with pytest.raises(ValueError, match="key 'e' has 1 outs but 2 row_ids"):
        kv.row_sparse_pull("e", out=out, row_ids=[mx.array([0]), mx.array([1])])
    with pytest.raises(TypeError, match="key 'e': out 0 is a Tensor, expected a RowSparseTensor"):
        kv.row_sparse_pull("e", out=mx.zeros((3, 2)), row_ids=mx.array([0]))
    with pytest.raises(ValueError, match=r"key 'e': out is row-sparse float32\(4, 2\)"):
        kv.row_sparse_pull("e", out=mx.sparse.zeros((4, 2)), row_ids=mx.array([0]))
    with pytest.raises(ValueError, match="key 'f' has not been initialised"):
        kv.row_sparse_pull("f", out=out, row_ids=mx.array([0]))
    with pytest.raises(ValueError, match="out and row_ids are both required"):
        kv.row_sparse_pull("e", out=out)
    np.testing.assert_array_equal(out.asnumpy(), np.zeros((3, 2)))  # untouched by the failed calls


def test_row_sparse_push_sums_rows_and_lazy_updates_touch_only_them():
    kv = mx.kv.create("device")
    kv.init("10", mx.sparse.zeros((5, 2)))
    a = row_sparse_array((np.array([[1.0, 2.0], [3.0, 4.0]]), [4, 1]), shape=(5, 2), device=mx.cpu(0),
                         dtype="float32")
    b = row_sparse_array((np.array([[10.0, 20.0]]), [1]), shape=(5, 2), device=mx.cpu(1), dtype="float32")
    kv.push("10", [a, b])
    np.testing.assert_array_equal(_value(kv, "10", (5, 2)), [[0, 0], [13, 24], [0, 0], [0, 0], [1, 2]])
    out = mx.sparse.zeros((5, 2))
    kv.row_sparse_pull("10", out=out, row_ids=mx.array([1, 4]))
    np.testing.assert_array_equal(out.data.asnumpy(), [[13, 24], [1, 2]])

    seen = []
    kv2 = mx.kv.create("local")
    kv2.init(0, mx.ones((5, 2)))
    kv2._set_updater(lambda key, grad, stored: seen.append(type(grad)))
    kv2.push(0, [a, b])
    assert seen == [RowSparseTensor]  # the updater gets the row-sparse sum

    kv3 = mx.kv.create("local")
    kv3.init(0, mx.ones((5, 2)))
    kv3.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, wd=0.1, lazy_update=True))
    kv3.push(0, [a, b])  # w = w - 0.5 * (g + 0.1 * w) on rows 1 and 4 only
    want = np.ones((5, 2), np.float32)
    want[1] = f32(1) - f32(0.5) * (np.array([13, 24], np.float32) + f32(0.1))
    want[4] = f32(1) - f32(0.5) * (np.array([1, 2], np.float32) + f32(0.1))
    np.testing.assert_allclose(_value(kv3, 0, (5, 2)), want, rtol=1e-6)
    assert np.all(_value(kv3, 0, (5, 2))[[0, 2, 3]] == 1.0)


def test_pull_into_a_row_sparse_out():
    kv = mx.kv.create("local")
    kv.init(0, mx.array(np.arange(6.0).reshape(3, 2), dtype="float32"))
    out = mx.sparse.zeros((3, 2))
    with pytest.warns(UserWarning, match="key 0: a row-sparse out is skipped"):
        kv.pull(0, out=out)  # ignore_sparse=True: MXNet skips it
    assert out.indices.size == 0
    kv.pull(0, out=out, ignore_sparse=False)
    assert out.indices.asnumpy().tolist() == [0, 1, 2]
    np.testing.assert_array_equal(out.asnumpy(), np.arange(6.0).reshape(3, 2))


# -- errors naming the key; nothing changes on a rejected call -------------------------------------------
def test_key_errors():
    kv = mx.kv.create("local")
    with pytest.raises(TypeError, match="key 1.5 must be an int or a str, got float"):
        kv.init(1.5, mx.ones(2))
    with pytest.raises(TypeError, match="key True must be an int or a str"):
        kv.init(True, mx.ones(2))
    with pytest.raises(ValueError, match="key 'b' is a str but the other keys given are ints"):
        kv.init([1, "b"], [mx.ones(2), mx.ones(2)])
    assert kv._store == {}  # nothing was stored by the rejected lists
    kv.init(np.int64(1), mx.ones(2))  # NumPy integers are ints
    with pytest.raises(ValueError, match="key 'a' is a str but this store's keys are ints"):
        kv.init("a", mx.ones(2))
    with pytest.raises(ValueError, match="duplicate init of key 1"):
        kv.init(1, mx.ones(2))
    with pytest.raises(ValueError, match="duplicate init of key 2"):
        kv.init([2, 2], [mx.ones(2), mx.ones(2)])
    with pytest.raises(ValueError, match="init: key 3 takes one value, got a list of 2"):
        kv.init(3, [mx.ones(2), mx.ones(2)])
    with pytest.raises(ValueError, match="push: key 5 has not been initialised; call init"):
        kv.push(5, mx.ones(2))
    with pytest.raises(ValueError, match="pull: key 5 has not been initialised"):
        kv.pull(5, out=mx.ones(2))
    with pytest.raises(ValueError, match="pull: key 1: out is required"):
        kv.pull(1)
    with pytest.raises(TypeError, match="push: key 1: value 0 is a ndarray, expected a Tensor"):
        kv.push(1, np.ones(2))


def test_value_and_list_errors_name_the_key_and_change_nothing():
    kv = mx.kv.create("local")
    kv.init(["w", "v"], [mx.zeros(3), mx.zeros((2, 2))])
    with pytest.raises(ValueError, match=r"push: key 'w': value 1 is float32\(4,\) on cpu\(1\), the stored value "
                                         r"is float32\(3,\)"):
        kv.push("w", [mx.ones(3), mx.ones(4, device=mx.cpu(1))])
    with pytest.raises(ValueError, match=r"push: key 'w': value is float64\(3,\)"):
        kv.push("w", mx.ones(3, dtype="float64"))
    with pytest.raises(ValueError, match=r"pull: key 'v': out is float32\(4,\)"):
        kv.pull("v", out=mx.zeros(4))
    with pytest.raises(ValueError, match=r"pull: key 'v': out is float16\(2, 2\)"):
        kv.pull("v", out=mx.zeros((2, 2), dtype="float16"))
    with pytest.raises(ValueError, match=r"push: 2 keys \['w', 'v'\] but 1 values"):
        kv.push(["w", "v"], [mx.ones(3)])
    with pytest.raises(TypeError, match="push: 2 keys .* need a list of values, got Tensor"):
        kv.push(["w", "v"], mx.ones(3))
    with pytest.raises(ValueError, match="push: key 'w' got an empty list"):
        kv.push("w", [])
    with pytest.raises(ValueError, match="push: key 'w' got dense and row-sparse values"):
        kv.push("w", [mx.ones(3), mx.sparse.zeros((3,))])
    # a bad second pair leaves the first key untouched
    with pytest.raises(ValueError, match=r"key 'v': value is float32\(3,\)"):
        kv.push(["w", "v"], [mx.ones(3), mx.ones(3)])
    with pytest.raises(ValueError, match=r"pushpull: key 'v': out is float32\(5,\)"):
        kv.pushpull(["w", "v"], [mx.ones(3), mx.ones((2, 2))], out=[mx.zeros(3), mx.zeros(5)])
    np.testing.assert_array_equal(_value(kv, "w", 3), np.zeros(3))
    np.testing.assert_array_equal(_value(kv, "v", (2, 2)), np.zeros((2, 2)))


def test_nccl_holds_gpu_values_only():
    kv = mx.kv.create("nccl")
    with pytest.raises(ValueError, match=r"'nccl' holds GPU values only; key 0 got a value on cpu\(0\)"):
        kv.init(0, mx.ones(2))


# -- optimizer states -----------------------------------------------------------------------------------
def _adam_store(name="device"):
    kv = mx.kv.create(name)
    kv.init(["w", "b"], [mx.array(np.linspace(-1, 1, 6).reshape(2, 3), dtype="float32"), mx.zeros(3)])
    opt = mx.optimizer.Adam(learning_rate=0.01, wd=1e-3, lr_scheduler=FactorScheduler(2, 0.5))
    kv.set_optimizer(opt)
    return kv


def _grads(step):
    rng = np.random.default_rng(step)
    return {"w": [mx.array(rng.normal(size=(2, 3)), device=d, dtype="float32") for d in GPUS4[:2]],
            "b": [mx.array(rng.normal(size=3), device=d, dtype="float32") for d in GPUS4[:2]]}


def _run(kv, steps):
    for s in steps:
        g = _grads(s)
        kv.push(["w", "b"], [g["w"], g["b"]])
    return {k: _value(kv, k, s) for k, s in (("w", (2, 3)), ("b", 3))}


@pytest.mark.parametrize("dump_optimizer", [True, False])
def test_optimizer_states_round_trip_bit_for_bit(tmp_path, dump_optimizer):
    kv = _adam_store()
    saved_values = _run(kv, range(3))
    fname = tmp_path / "kv.states"
    kv.save_optimizer_states(fname, dump_optimizer=dump_optimizer)
    optimizer_at_save = kv._updater.optimizer.state_dict()
    want = _run(kv, range(3, 7))

    kv2 = mx.kv.create("device")
    kv2.init(["w", "b"], [mx.array(saved_values["w"]), mx.array(saved_values["b"])])
    kv2.set_optimizer(mx.optimizer.Adam(learning_rate=0.01, wd=1e-3,
                                        lr_scheduler=FactorScheduler(2, 0.5)))
    if not dump_optimizer:  # the file holds the states only: counts and schedule come from elsewhere
        kv2._updater.optimizer.load_state_dict(optimizer_at_save)
    kv2.load_optimizer_states(fname)
    assert kv2._updater.optimizer.state_dict() == optimizer_at_save
    got = _run(kv2, range(3, 7))
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_plain_updater_archive_loads_too(tmp_path):
    kv = _adam_store()
    _run(kv, range(2))
    path = tmp_path / "plain.npz"
    path.write_bytes(kv._updater.get_states(dump_optimizer=True))
    kv2 = _adam_store()
    kv2.load_optimizer_states(path)
    assert set(kv2._updater.states) == {"w", "b"}
    np.testing.assert_array_equal(kv2._updater.states["w"][0], kv._updater.states["w"][0])


def _snapshot(kv):
    states = {k: [np.array(a) for a in _leaves(s)] for k, s in kv._updater.states.items()}
    return states, kv._updater.optimizer.state_dict(), {k: r.asnumpy() for k, r in kv._residuals.items()}


def _leaves(state):
    if isinstance(state, (tuple, list)):
        return [leaf for part in state for leaf in _leaves(part)]
    return [state] if hasattr(state, "shape") else []


def _same_snapshot(a, b):
    assert a[1] == b[1]
    assert a[0].keys() == b[0].keys() and a[2].keys() == b[2].keys()
    for k in a[0]:
        for x, y in zip(a[0][k], b[0][k]):
            np.testing.assert_array_equal(x, y)
    for k in a[2]:
        np.testing.assert_array_equal(a[2][k], b[2][k])


def test_bad_state_files_change_nothing_and_name_the_file(tmp_path):
    kv = _adam_store()
    _run(kv, range(2))
    good = tmp_path / "good.states"
    kv.save_optimizer_states(good, dump_optimizer=True)
    _run(kv, range(2, 3))
    before = _snapshot(kv)

    truncated = tmp_path / "truncated.states"
    truncated.write_bytes(good.read_bytes()[:200])
    garbage = tmp_path / "garbage.states"
    garbage.write_bytes(b"not an archive at all")
    wrong_shape = tmp_path / "shape.states"
    other = mx.kv.create("device")
    other.init(["w", "b"], [mx.zeros((3, 2)), mx.zeros(3)])
    other.set_optimizer(mx.optimizer.Adam())
    other.push("w", mx.ones((3, 2)))
    other.save_optimizer_states(wrong_shape, dump_optimizer=True)
    int_keys = tmp_path / "int.states"
    ints = mx.kv.create("local")
    ints.init(0, mx.zeros(3))
    ints.set_optimizer(mx.optimizer.Adam())
    ints.push(0, mx.ones(3))
    ints.save_optimizer_states(int_keys)
    sgd_file = tmp_path / "sgd.states"
    sgd = mx.kv.create("device")
    sgd.init("w", mx.zeros((2, 3)))
    sgd.set_optimizer(mx.optimizer.SGD(momentum=0.9))
    sgd.push("w", mx.ones((2, 3)))
    sgd.save_optimizer_states(sgd_file, dump_optimizer=True)
    trainer_file = tmp_path / "trainer.states"
    net = mx.nn.Dense(2, in_units=3)
    net.initialize()
    mx.Trainer(net.collect_params(), "adam").save_states(trainer_file)

    cases = [(truncated, "not an mxlite updater archive"), (garbage, "not an mxlite updater archive"),
             (wrong_shape, r"state of key 'w' has shape \(3, 2\), the stored value has shape \(2, 3\)"),
             (int_keys, "key 0 is an int but this store's keys are strs"),
             (sgd_file, "optimizer state is for 'SGD', cannot load it into Adam"),
             (trainer_file, "Trainer.save_states file")]
    for path, why in cases:
        with pytest.raises(ValueError, match=f"from '{path}'.*{why}"):
            kv.load_optimizer_states(path)
        _same_snapshot(_snapshot(kv), before)
    with pytest.raises(FileNotFoundError):
        kv.load_optimizer_states(tmp_path / "missing.states")
    kv.load_optimizer_states(good)  # and the good one still loads
    assert kv._updater.optimizer.state_dict() != before[1]


def test_states_need_an_optimizer(tmp_path):
    kv = mx.kv.create("local")
    with pytest.raises(RuntimeError, match="save_optimizer_states: this KVStore has no optimizer"):
        kv.save_optimizer_states(tmp_path / "x")
    with pytest.raises(RuntimeError, match="load_optimizer_states: this KVStore has no optimizer"):
        kv.load_optimizer_states(tmp_path / "x")
    kv._set_updater(lambda k, g, s: None)
    with pytest.raises(RuntimeError, match="keeps no optimizer states"):
        kv.save_optimizer_states(tmp_path / "x")
    assert not (tmp_path / "x").exists()


# -- gradient compression -------------------------------------------------------------------------------
class _Reference2Bit:
    """MXNet's 2-bit rule in NumPy (the test's reference codec; one process only)."""

    needs_residual = True

    def __init__(self, threshold):
        self.threshold = f32(threshold)
        self.params = {"type": "2bit", "threshold": float(threshold)}
        self.calls = []

    def reduce(self, grads, residuals, out, comm=None):
        assert comm is None or comm.size == 1
        self.calls.append((len(grads), [g.shape for g in grads]))
        total = np.zeros(out.shape, np.float32)
        for g, r in zip(grads, residuals):
            assert r.dtype == np.float32 and r.shape == g.shape
            r += g
            sent = np.where(r >= self.threshold, self.threshold,
                            np.where(r <= -self.threshold, -self.threshold, f32(0))).astype(np.float32)
            r -= sent
            total += sent
        out[...] = total


def _reference_module():
    module = types.ModuleType("mxlite.comm.compression")

    def create(params):
        if params is None:
            return None
        if not isinstance(params, dict):
            raise TypeError("compression_params must be a dict")
        if params.get("type") != "2bit":
            raise ValueError(f"compression_params['type'] must be '2bit', got {params.get('type')!r}")
        return _Reference2Bit(params.get("threshold", 0.5))

    module.create = create
    return module


@pytest.fixture(params=["reference", "mxlite"])
def codec_module(request, monkeypatch):
    """The reference codec injected as mxlite.comm.compression, or the real module when present."""
    if request.param == "reference":
        monkeypatch.setitem(sys.modules, "mxlite.comm.compression", _reference_module())
        return "reference"
    pytest.importorskip("mxlite.comm.compression")
    return "mxlite"


G0 = np.array([0.3, 0.6, -0.7, 0.0], np.float32)  # pushed from cpu(0)
G1 = np.array([0.5, -0.2, 0.1, -0.5], np.float32)  # pushed from cpu(1)


def test_2bit_compression_on_two_devices_keeps_a_residual_per_key_and_position(codec_module):
    kv = mx.kv.create("device")
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    kv.init(["w", "u"], [mx.zeros(4), mx.zeros(4)])
    push = lambda: kv.push("w", [mx.array(G0, mx.cpu(0)), mx.array(G1, mx.cpu(1))])
    push()
    # position 0: r = g0 -> sends [0, +.5, -.5, 0]; position 1: r = g1 -> sends [+.5, 0, 0, -.5]
    np.testing.assert_array_equal(_value(kv, "w", 4), [0.5, 0.5, -0.5, -0.5])
    r0 = np.array([f32(0.3), f32(0.6) - f32(0.5), f32(-0.7) + f32(0.5), 0], np.float32)
    r1 = np.array([0, f32(-0.2), f32(0.1), 0], np.float32)
    np.testing.assert_array_equal(kv._residuals[("w", 0)].asnumpy(), r0)
    np.testing.assert_array_equal(kv._residuals[("w", 1)].asnumpy(), r1)
    assert kv._residuals[("w", 0)].device == mx.cpu(0) and kv._residuals[("w", 1)].device == mx.cpu(1)
    push()
    # position 0: r = [.6, .7, -.9, 0] -> sends [+.5, +.5, -.5, 0]; position 1: r = [.5, -.4, .2, -.5]
    np.testing.assert_array_equal(_value(kv, "w", 4), [1.0, 0.5, -0.5, -0.5])
    np.testing.assert_array_equal(kv._residuals[("w", 0)].asnumpy(), [
        (r0[0] + G0[0]) - f32(0.5), (r0[1] + G0[1]) - f32(0.5), (r0[2] + G0[2]) + f32(0.5), 0])
    np.testing.assert_array_equal(kv._residuals[("w", 1)].asnumpy(), [
        (r1[0] + G1[0]) - f32(0.5), r1[1] + G1[1], r1[2] + G1[2], (r1[3] + G1[3]) + f32(0.5)])
    kv.push("u", mx.array(G1, mx.cpu(1)))  # another key: its own residual, position 0 on cpu(1)
    assert kv._residuals[("u", 0)].device == mx.cpu(1)
    np.testing.assert_array_equal(_value(kv, "u", 4), [0.5, 0, 0, -0.5])
    assert sorted(kv._residuals) == [("u", 0), ("w", 0), ("w", 1)]
    kv.init("rs", mx.zeros((4, 1)))
    # row-sparse pushes are not compressed
    kv.push("rs", row_sparse_array((np.array([[0.1]]), [2]), shape=(4, 1), dtype="float32"))
    np.testing.assert_array_equal(_value(kv, "rs", (4, 1)).ravel(), np.array([0, 0, 0.1, 0], np.float32))


def test_compression_is_refused_by_local_and_nccl(codec_module):
    for name in ("local", "nccl"):
        with pytest.raises(ValueError, match=f"not supported by kvstore '{name}'"):
            mx.kv.create(name).set_gradient_compression({"type": "2bit", "threshold": 0.5})
    with pytest.raises(ValueError, match="compression_params"):
        mx.kv.create("device").set_gradient_compression({"type": "4bit"})


def test_residuals_are_saved_with_the_optimizer_states(tmp_path, codec_module):
    def store(values=None):
        kv = mx.kv.create("device")
        kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
        kv.init(["w"], [mx.array(values if values is not None else np.zeros(4, np.float32))])
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9))
        return kv

    def steps(kv, n):
        for s in range(n):
            kv.push("w", [mx.array(G0 * (s + 1), mx.cpu(0)), mx.array(G1, mx.cpu(1))])
        return _value(kv, "w", 4)

    kv = store()
    at_save = steps(kv, 2)
    fname = tmp_path / "kv.states"
    kv.save_optimizer_states(fname, dump_optimizer=True)
    want = steps(kv, 3)
    kv2 = store(at_save)
    kv2.load_optimizer_states(fname)
    assert kv2._residuals[("w", 1)].device == mx.cpu(0)  # host arrays until the next push moves them
    got = steps(kv2, 3)
    np.testing.assert_array_equal(got, want)
    assert kv2._residuals[("w", 1)].device == mx.cpu(1)
    for pos in (0, 1):
        np.testing.assert_array_equal(kv2._residuals[("w", pos)].asnumpy(), kv._residuals[("w", pos)].asnumpy())
    assert np.any(kv._residuals[("w", 0)].asnumpy() != 0)  # the test does exercise non-zero residuals


def test_stored_value_has_in_place_arithmetic():
    kv = mx.kv.create("local")
    kv.init(0, mx.full(2, 8.0))

    def update(key, grad, stored):
        stored -= grad  # 8 - 2 = 6
        stored *= 3.0  # 18
        stored /= grad  # 9
        stored += np.ones(2, np.float32)  # 10

    kv._set_updater(update)
    kv.push(0, mx.full(2, 2.0))
    np.testing.assert_array_equal(_value(kv, 0, 2), [10.0, 10.0])


# -- GPUs (skipped without CuPy and a GPU) ------------------------------------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


def _scenario(kind, dev, other, reduce_only=False):
    """One run of every call; ``dev`` holds the keys, ``other`` is a second device.

    ``reduce_only`` (for 'nccl', and the CPU run it is compared with): GPU values only are
    pushed, and no optimizer is set.
    """
    rng = np.random.default_rng(3)
    g = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(3)]
    kv = mx.kv.create(kind)
    kv.init(["w", "e"], [mx.array(g[0], dev), mx.zeros((5, 2), device=dev)])
    extra = [] if reduce_only else [mx.array(g[2], other)]
    kv.push("w", [mx.array(g[0], dev), mx.array(g[1], dev)] + extra)
    seen = {}
    outs = [mx.zeros((4, 3), device=dev), mx.zeros((4, 3), device=other)]
    kv.pull("w", out=outs)
    seen["sum"], seen["sum_other"] = outs[0].asnumpy(), outs[1].asnumpy()
    rows = [row_sparse_array((g[1][:2, :2], [4, 1]), shape=(5, 2), device=dev, dtype="float32"),
            row_sparse_array((g[2][:1, :2], [1]), shape=(5, 2), device=dev, dtype="float32")]
    kv.push("e", rows)
    picked = mx.sparse.zeros((5, 2), device=dev)
    kv.row_sparse_pull("e", out=picked, row_ids=mx.array([4, 1, 4], device=dev, dtype="int64"))
    seen["rows"], seen["rows_idx"] = picked.asnumpy(), picked.indices.asnumpy()
    if not reduce_only:
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
        for _ in range(2):
            kv.push("w", [mx.array(g[1], dev), mx.array(g[2], other)])
        seen["sgd"] = _value(kv, "w", (4, 3))
    return seen


@gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["local", "device", "nccl"])
def test_gpu_store_gives_the_cpu_store_results(kind):
    reduce_only = kind == "nccl"
    on_gpu = _scenario(kind, mx.gpu(0), mx.cpu(0), reduce_only)
    on_cpu = _scenario("device" if reduce_only else kind, mx.cpu(2), mx.cpu(3), reduce_only)
    assert on_gpu.keys() == on_cpu.keys()
    for k, v in on_gpu.items():
        if k == "sgd":  # a GPU kernel may contract a * b + c into one FMA
            np.testing.assert_allclose(v, on_cpu[k], rtol=1e-6, atol=1e-7, err_msg=k)
        else:
            np.testing.assert_array_equal(v, on_cpu[k], err_msg=k)


@gpu
@needs_gpu
def test_gpu_2bit_compression_gives_the_cpu_numbers():
    pytest.importorskip("mxlite.comm.compression")
    kv = mx.kv.create("device")
    kv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
    kv.init("w", mx.zeros(4, device=mx.gpu(0)))
    for _ in range(2):
        kv.push("w", [mx.array(G0, mx.gpu(0)), mx.array(G1, mx.cpu(0))])
    np.testing.assert_array_equal(_value(kv, "w", 4), [1.0, 0.5, -0.5, -0.5])
    assert kv._residuals[("w", 0)].device == mx.gpu(0) and kv._residuals[("w", 1)].device == mx.cpu(0)
    r1 = np.array([0, f32(-0.2), f32(0.1), 0], np.float32)
    np.testing.assert_array_equal(kv._residuals[("w", 1)].asnumpy(), [
        (r1[0] + G1[0]) - f32(0.5), r1[1] + G1[1], r1[2] + G1[2], (r1[3] + G1[3]) + f32(0.5)])


@gpu
@needs_gpu
@pytest.mark.skipif(not HAVE_MPI4PY, reason="needs mpi4py")
def test_gpu_dist_sync_device_in_one_process():
    kv = mx.kv.create("dist_sync_device")
    kv.init(0, mx.ones(3, device=mx.gpu(0)))
    kv.push(0, [mx.ones(3, device=mx.gpu(0)), mx.full(3, 2.0, device=mx.cpu(0))])
    np.testing.assert_array_equal(_value(kv, 0, 3), [3.0, 3.0, 3.0])
    kv.init(1, mx.zeros((4, 2), device=mx.gpu(0)))
    kv.push(1, row_sparse_array((np.ones((1, 2)), [2]), shape=(4, 2), device=mx.gpu(0), dtype="float32"))
    np.testing.assert_array_equal(_value(kv, 1, (4, 2))[2], [1.0, 1.0])


# -- several processes ----------------------------------------------------------------------------------
@pytest.mark.mpi
@needs_mpi
def test_dist_sync_over_two_ranks(tmp_path):
    from tests.kvstore_worker import dense_grads, expected_sgd

    mpirun_ok(2, os.path.join(ROOT, "tests", "kvstore_worker.py"), str(tmp_path))
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    for r, seen in enumerate(ranks):
        assert (int(seen["rank"]), int(seen["num_workers"])) == (r, 2)
        np.testing.assert_array_equal(seen["init"], np.full(SHAPE, 1.0))  # rank 0's value
        np.testing.assert_array_equal(seen["sum"], np.full(SHAPE, 33.0))  # (1 + 10) + (2 + 20)
        np.testing.assert_array_equal(seen["rows"], [[1, 1], [0, 0], [0, 0], [12, 12], [20, 20]])
        assert seen["rsp_indices"].tolist() == [0, 3]
        np.testing.assert_array_equal(seen["rsp_data"], [[1, 1], [12, 12]])
        assert float(seen["after_barrier"]) >= float(ranks[1]["before_barrier"])
    g = dense_grads()
    want = (g[0][0] + g[0][1]) + (g[1][0] + g[1][1])  # list order within a rank, then the two ranks
    for seen in ranks:
        np.testing.assert_array_equal(seen["random_sum"], want)
        np.testing.assert_array_equal(seen["sgd"], expected_sgd())
    for k in set(ranks[0]) - {"rank", "before_barrier", "after_barrier"}:
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k], err_msg=f"ranks differ in {k}")
    if "compressed" in ranks[0]:  # mxlite.comm.compression present: 2-bit over the ranks
        for seen in ranks:
            np.testing.assert_array_equal(seen["compressed"], [0.5, 0.5, -0.5, -0.5, 1.0])


def test_row_sparse_arithmetic_follows_mxnet_storage_rules():
    rsp = mx.nd.array([[0, 0], [1, 2], [0, 0], [3, 4]]).tostype("row_sparse")
    other = row_sparse_array(([[1.0, 1.0]], [0]), shape=(4, 2))
    for out, stype, value in (
            (rsp * 4, "row_sparse", [[0, 0], [4, 8], [0, 0], [12, 16]]),
            (2.0 * rsp, "row_sparse", [[0, 0], [2, 4], [0, 0], [6, 8]]),
            (rsp / 2, "row_sparse", [[0, 0], [0.5, 1], [0, 0], [1.5, 2]]),
            (-rsp, "row_sparse", [[0, 0], [-1, -2], [0, 0], [-3, -4]]),
            (rsp + other, "row_sparse", [[1, 1], [1, 2], [0, 0], [3, 4]]),
            (rsp - other, "row_sparse", [[-1, -1], [1, 2], [0, 0], [3, 4]]),
            (rsp * rsp, "row_sparse", [[0, 0], [1, 4], [0, 0], [9, 16]]),
            (rsp + 1, "default", [[1, 1], [2, 3], [1, 1], [4, 5]]),
            (1 - rsp, "default", [[1, 1], [0, -1], [1, 1], [-2, -3]]),
            (rsp * mx.nd.ones((4, 2)), "default", [[0, 0], [1, 2], [0, 0], [3, 4]])):
        assert out.stype == stype
        np.testing.assert_allclose(out.asnumpy(), value)
    assert (rsp * 4).dtype == np.float32 and (rsp * 4).indices.asnumpy().tolist() == [1, 3]
    with pytest.raises(ValueError, match="equal shapes"):
        rsp + row_sparse_array(([[1.0, 1.0]], [0]), shape=(5, 2))

"""Devices, the current-device scope, Tensor creation and copies, DLPack, seeding, row-sparse tensors."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import mxlite as mx
from tests import deadlines


# -- Device identity ------------------------------------------------------------------------------
def test_cpu_equality_hash_repr():
    assert mx.cpu(1) == mx.cpu(1)
    assert mx.cpu(1) == mx.Device("cpu", 1)
    assert mx.cpu(0) != mx.cpu(1)
    assert mx.cpu() == mx.cpu(0)
    assert hash(mx.cpu(1)) == hash(mx.Device("cpu", 1))
    assert len({mx.cpu(0), mx.cpu(1), mx.cpu(1), mx.Device("cpu", 0)}) == 2
    assert repr(mx.cpu(1)) == "cpu(1)"
    assert str(mx.cpu(3)) == "cpu(3)"
    assert mx.cpu(2).device_type == "cpu" and mx.cpu(2).device_id == 2
    assert not mx.cpu(0).is_gpu
    assert mx.cpu(7).xp is np
    assert mx.cpu(0) != "cpu(0)"


def test_device_from_string():
    from mxlite.device import as_device

    assert as_device("cpu(2)") == mx.cpu(2)
    assert as_device("cpu:3") == mx.cpu(3)
    assert as_device("cpu") == mx.cpu(0)
    assert as_device(None) == mx.current_device()
    assert mx.zeros((1,), device="cpu(1)").device == mx.cpu(1)
    with pytest.raises(TypeError):
        as_device(3)


def test_bad_device_arguments():
    with pytest.raises(ValueError, match="device_type"):
        mx.Device("tpu", 0)
    with pytest.raises(ValueError, match="device_id"):
        mx.cpu(-1)


def test_with_device_sets_current_and_creation():
    assert mx.current_device() == mx.cpu(0)
    with mx.cpu(1) as dev:
        assert dev == mx.cpu(1)
        assert mx.current_device() == mx.cpu(1)
        z = mx.zeros((2,))
        assert z.device == mx.cpu(1)
        np.testing.assert_array_equal(z.asnumpy(), [0.0, 0.0])
        assert mx.array([1.0, 2.0]).device == mx.cpu(1)
        with mx.cpu(2):
            assert mx.current_device() == mx.cpu(2)
            assert mx.ones((1,)).device == mx.cpu(2)
        assert mx.current_device() == mx.cpu(1)
    assert mx.current_device() == mx.cpu(0)
    assert mx.zeros((1,)).device == mx.cpu(0)


def test_with_device_restores_after_exception():
    with pytest.raises(KeyError):
        with mx.cpu(3):
            raise KeyError("boom")
    assert mx.current_device() == mx.cpu(0)


_NO_GPU_CHECKS = """
import mxlite as mx
assert mx.num_gpus() == 0 and mx.gpu_devices() == []
try:
    mx.gpu(0)
except mx.DeviceUnavailableError as exc:
    msg = str(exc)
    assert "gpu(0)" in msg and "CuPy" in msg, msg
else:
    raise AssertionError("gpu(0) without a GPU did not raise")
assert issubclass(mx.DeviceUnavailableError, RuntimeError)
"""


def test_without_gpus_there_are_none_and_gpu0_says_why():
    """With the emulation off, on a machine without a GPU (skipped where a real one is visible)."""
    env = dict(os.environ, MXLITE_EMULATE_GPUS="0")
    probe = deadlines.run([sys.executable, "-c", "import mxlite; print(mxlite.num_gpus())"], env=env, timeout=120)
    if probe.stdout.strip() != "0":
        pytest.skip(f"a real GPU is visible ({probe.stdout.strip()} GPUs)")
    result = deadlines.run([sys.executable, "-c", _NO_GPU_CHECKS], env=env, timeout=120)
    assert result.returncode == 0, result.stderr


def test_emulated_gpus_are_announced_and_bad_counts_refused():
    code = "import mxlite as mx; print(mx.num_gpus(), mx.gpu_devices())"
    env = dict(os.environ, MXLITE_EMULATE_GPUS="3")
    result = deadlines.run([sys.executable, "-c", code], env=env, timeout=120)
    assert result.stdout.strip() == "3 [gpu(0), gpu(1), gpu(2)]", result.stderr
    assert "gpu(0)..gpu(2) are emulated on the CPU" in result.stderr
    env["MXLITE_EMULATE_GPUS"] = "many"
    result = deadlines.run([sys.executable, "-c", code], env=env, timeout=120)
    assert result.returncode != 0 and "MXLITE_EMULATE_GPUS must be an integer from 0" in result.stderr


# -- creation and dtype rules ---------------------------------------------------------------------
def test_array_dtype_rules():
    assert mx.array([1, 2, 3]).dtype == np.float32  # Python lists -> float32 (MXNet's rule)
    assert mx.array([1.5, 2.5]).dtype == np.float32
    assert mx.array(3.0).dtype == np.float32
    assert mx.array(np.arange(3)).dtype == np.arange(3).dtype  # NumPy arrays keep their dtype
    assert mx.array(np.zeros(2, dtype=np.float64)).dtype == np.float64
    assert mx.array(np.zeros(2, dtype=np.float16)).dtype == np.float16
    assert mx.array([1, 2], dtype="float64").dtype == np.float64
    assert mx.array(np.arange(3), dtype=np.float32).dtype == np.float32
    assert mx.array([1, 2], dtype=np.int32).dtype == np.int32
    t = mx.array(np.array([[1, 2], [3, 4]], dtype=np.int64))
    assert t.shape == (2, 2) and t.ndim == 2 and t.size == 4
    np.testing.assert_array_equal(t.asnumpy(), [[1, 2], [3, 4]])
    with pytest.raises(TypeError):
        mx.array(["a", "b"])


def test_array_copies_its_input():
    src = np.array([1.0, 2.0], dtype=np.float32)
    t = mx.array(src)
    src[0] = 100.0
    np.testing.assert_array_equal(t.asnumpy(), [1.0, 2.0])
    out = t.asnumpy()
    out[1] = -1.0
    np.testing.assert_array_equal(t.asnumpy(), [1.0, 2.0])


def test_fill_functions():
    z = mx.zeros((2, 3))
    assert z.shape == (2, 3) and z.dtype == np.float32 and z.device == mx.cpu(0)
    np.testing.assert_array_equal(z.asnumpy(), np.zeros((2, 3)))
    o = mx.ones(4, device=mx.cpu(1), dtype="float64")
    assert o.shape == (4,) and o.dtype == np.float64 and o.device == mx.cpu(1)
    np.testing.assert_array_equal(o.asnumpy(), np.ones(4))
    f = mx.full((2, 2), 7.5)
    np.testing.assert_array_equal(f.asnumpy(), np.full((2, 2), 7.5))
    assert f.dtype == np.float32
    e = mx.empty((3, 1), dtype=np.int32)
    assert e.shape == (3, 1) and e.dtype == np.int32
    a = mx.arange(5)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a.asnumpy(), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(mx.arange(1, 7, 2).asnumpy(), [1, 3, 5])
    np.testing.assert_array_equal(mx.arange(0, 1, 0.25, dtype="float64").asnumpy(), [0, 0.25, 0.5, 0.75])
    with pytest.raises(ValueError):
        mx.zeros((2, -1))
    with pytest.raises(ValueError):
        mx.arange(0, 3, 0)


# -- copies between devices -----------------------------------------------------------------------
def test_to_copies_to_another_device():
    t = mx.array([1.0, 2.0, 3.0])
    u = t.to(mx.cpu(1))
    assert u.device == mx.cpu(1) and t.device == mx.cpu(0)
    assert u.dtype == t.dtype and u.shape == t.shape
    u[0] = 50.0
    np.testing.assert_array_equal(t.asnumpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(u.asnumpy(), [50.0, 2.0, 3.0])
    assert t.to(mx.cpu(0)) is t  # same device: no copy
    assert t.as_in_context(mx.cpu(2)).device == mx.cpu(2)


def test_copyto_tensor_and_device():
    src = mx.array([[1.0, 2.0], [3.0, 4.0]])
    dst = mx.zeros((2, 2), device=mx.cpu(1))
    ret = src.copyto(dst)
    assert ret is dst and dst.device == mx.cpu(1)
    np.testing.assert_array_equal(dst.asnumpy(), [[1, 2], [3, 4]])
    src[0, 0] = -1.0
    assert dst.asnumpy()[0, 0] == 1.0
    other = src.copyto(mx.cpu(2))
    assert other.device == mx.cpu(2)
    np.testing.assert_array_equal(other.asnumpy(), [[-1, 2], [3, 4]])
    other[1, 1] = 0.0
    assert src.asnumpy()[1, 1] == 4.0
    with pytest.raises(ValueError, match="shape"):
        src.copyto(mx.zeros((3,)))


def test_astype():
    t = mx.array([1.7, -2.2])
    d = t.astype("float64")
    assert d.dtype == np.float64
    np.testing.assert_allclose(d.asnumpy(), [1.7, -2.2], rtol=1e-6)
    i = t.astype(np.int32)
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.asnumpy(), [1, -2])
    d[0] = 0.0
    assert t.asnumpy()[0] == np.float32(1.7)


# -- DLPack ---------------------------------------------------------------------------------------
def test_dlpack_to_numpy_shares_memory():
    t = mx.array([1.0, 2.0, 3.0])
    view = np.from_dlpack(t)
    assert view.dtype == np.float32
    np.testing.assert_array_equal(view, [1, 2, 3])
    view[1] = 20.0
    np.testing.assert_array_equal(t.asnumpy(), [1, 20, 3])
    assert t.__dlpack_device__()[0] == 1  # kDLCPU


def test_dlpack_from_numpy():
    src = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = mx.from_dlpack(src)
    assert t.device == mx.cpu(0) and t.dtype == np.float64 and t.shape == (2, 3)
    np.testing.assert_array_equal(t.asnumpy(), src)
    src[0, 0] = 42.0  # from_dlpack is zero-copy
    assert t.asnumpy()[0, 0] == 42.0
    # round trip through both directions
    back = np.from_dlpack(mx.from_dlpack(src))
    assert np.shares_memory(back, src)


# -- random streams -------------------------------------------------------------------------------
def test_random_seed_reproducible_per_device():
    mx.random.seed(123)
    a0 = mx.random.uniform(shape=(5,), device=mx.cpu(0)).asnumpy()
    a1 = mx.random.uniform(shape=(5,), device=mx.cpu(1)).asnumpy()
    n0 = mx.random.normal(shape=(4,), device=mx.cpu(0)).asnumpy()
    mx.random.seed(123)
    b0 = mx.random.uniform(shape=(5,), device=mx.cpu(0)).asnumpy()
    b1 = mx.random.uniform(shape=(5,), device=mx.cpu(1)).asnumpy()
    m0 = mx.random.normal(shape=(4,), device=mx.cpu(0)).asnumpy()
    np.testing.assert_array_equal(a0, b0)
    np.testing.assert_array_equal(a1, b1)
    np.testing.assert_array_equal(n0, m0)
    assert not np.allclose(a0, a1)  # each device has its own stream
    assert a0.dtype == np.float32 and np.all((a0 >= 0) & (a0 < 1))
    mx.random.seed(124)
    c0 = mx.random.uniform(shape=(5,), device=mx.cpu(0)).asnumpy()
    assert not np.allclose(a0, c0)


def test_random_seed_one_device_and_randint():
    mx.random.seed(5)
    r = mx.random.randint(0, 10, shape=(50,), device=mx.cpu(0))
    assert r.dtype == np.int32
    vals = r.asnumpy()
    assert vals.min() >= 0 and vals.max() < 10
    mx.random.seed(9, device=mx.cpu(1))
    x = mx.random.uniform(shape=(3,), device=mx.cpu(1)).asnumpy()
    mx.random.seed(9, device=mx.cpu(1))
    y = mx.random.uniform(shape=(3,), device=mx.cpu(1)).asnumpy()
    np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError):
        mx.random.seed(-1)


# -- row-sparse tensors ---------------------------------------------------------------------------
def test_row_sparse_array_sums_duplicates():
    values = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [5.0, 5.0]], dtype=np.float32)
    rs = mx.sparse.row_sparse_array((values, [4, 1, 4, 0]), shape=(6, 2))
    assert isinstance(rs, mx.sparse.RowSparseTensor)
    assert rs.stype == "row_sparse" and rs.shape == (6, 2) and rs.dtype == np.float32
    np.testing.assert_array_equal(rs.indices.asnumpy(), [0, 1, 4])
    np.testing.assert_array_equal(rs.data.asnumpy(), [[5, 5], [10, 20], [101, 202]])
    dense = rs.tostype("default")
    assert isinstance(dense, mx.Tensor)
    expected = np.zeros((6, 2), dtype=np.float32)
    expected[0] = [5, 5]
    expected[1] = [10, 20]
    expected[4] = [101, 202]
    np.testing.assert_array_equal(dense.asnumpy(), expected)
    np.testing.assert_array_equal(rs.asnumpy(), expected)
    assert rs.tostype("row_sparse") is rs


def test_row_sparse_array_errors():
    with pytest.raises(ValueError):
        mx.sparse.row_sparse_array((np.ones((2, 2)), [0, 1, 2]), shape=(3, 2))
    with pytest.raises(ValueError):
        mx.sparse.row_sparse_array((np.ones((2, 2)), [0, 5]), shape=(3, 2))
    with pytest.raises(ValueError):
        mx.sparse.row_sparse_array((np.ones((2, 3)), [0, 1]), shape=(3, 2))


def test_tensor_tostype_row_sparse_keeps_nonzero_rows():
    dense = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, -2, 3]], dtype=np.float32)
    t = mx.array(dense)
    assert t.tostype("default") is t
    rs = t.tostype("row_sparse")
    assert isinstance(rs, mx.sparse.RowSparseTensor)
    assert rs.shape == (4, 3)
    np.testing.assert_array_equal(rs.indices.asnumpy(), [1, 3])
    np.testing.assert_array_equal(rs.data.asnumpy(), [[1, 0, 0], [0, -2, 3]])
    np.testing.assert_array_equal(rs.tostype("default").asnumpy(), dense)
    with pytest.raises(ValueError):
        t.tostype("csr")


def test_row_sparse_zeros():
    z = mx.sparse.zeros((5, 2), device=mx.cpu(1))
    assert z.device == mx.cpu(1) and z.indices.size == 0
    np.testing.assert_array_equal(z.asnumpy(), np.zeros((5, 2)))

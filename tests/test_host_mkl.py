"""Large CPU products through MKL (mxlite.device.mkl): which products go there, with which threads, and what
happens when MKL is absent, switched off or broken.

MKL is an optional extra, so the routing is tested against a stand-in with MKL's calling convention: NumPy's
own OpenBLAS ``cblas_?gemm`` (ILP64), called exactly as mxlite calls MKL's ``cblas_?gemm_64``. Where the real
MKL is installed, the last test runs every layout through it as well (it runs in any case, through whichever
BLAS is active)."""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from mxlite.device import blas, mkl, parallel, threads

LAYOUTS = ("NN", "NT", "TN", "TT")


def _operands(m, n, k, layout, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m)).T if layout[0] == "T" else rng.standard_normal((m, k))
    b = rng.standard_normal((n, k)).T if layout[1] == "T" else rng.standard_normal((k, n))
    return a.astype(dtype), b.astype(dtype)


def _openblas_gemm(dtype):
    """NumPy's OpenBLAS cblas_?gemm with the argument types mxlite gives MKL's ILP64 cblas_?gemm_64."""
    address, ilp64 = blas.host_gemm(dtype)
    index = ctypes.c_int64 if ilp64 else ctypes.c_int
    scalar = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
    return ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index, scalar,
                            ctypes.c_void_p, index, ctypes.c_void_p, index, scalar, ctypes.c_void_p, index)(address)


@pytest.fixture
def stand_in(monkeypatch):
    """MKL replaced by NumPy's OpenBLAS behind MKL's interface; records each call's thread count."""
    calls = []
    fake = types.SimpleNamespace(threaded=True, set_threads=calls.append, pid=mkl.os.getpid(),
                                 gemms={np.dtype(t): _openblas_gemm(t) for t in (np.float32, np.float64)})
    monkeypatch.setattr(mkl, "_loaded", fake)
    monkeypatch.setattr(mkl, "_why_not", None)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_large_2d_product_in_any_layout_goes_to_mkl(stand_in, layout, dtype):
    a, b = _operands(70, 130, 150, layout, dtype)  # 1.4 M multiply-adds: above the threshold, one thread's work
    got = blas.matmul(a, b)
    assert stand_in == [1]
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert got.dtype == dtype and got.shape == (70, 130)
    assert np.all(np.abs(got - exact) <= 150 * np.finfo(dtype).eps * bound)


def test_the_output_given_is_written_and_returned(stand_in):
    a, b = _operands(64, 128, 160, "NT", np.float32)
    out = np.full((64, 128), np.nan, dtype=np.float32)
    assert blas.matmul(a, b, out=out) is out and stand_in
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-4)
    wide = np.full((64, 200), 7.0, dtype=np.float32)  # an output whose rows are apart: columns 0..127 only
    blas.matmul(a, b, out=wide[:, :128])
    np.testing.assert_allclose(wide[:, :128], a @ b, rtol=1e-5, atol=1e-4)
    assert np.all(wide[:, 128:] == 7.0)


def test_a_sliced_operand_with_rows_apart_goes_to_mkl_with_its_leading_dimension(stand_in):
    big = np.random.default_rng(1).standard_normal((90, 300)).astype(np.float32)
    a = big[:, 20:220]  # rows 300 apart, 200 columns
    b = np.random.default_rng(2).standard_normal((200, 100)).astype(np.float32)
    got = blas.matmul(a, b)
    assert stand_in
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", ["small", "batched", "mixed dtypes", "float16", "integers", "strided",
                                  "overlapping out", "strided out"])
def test_other_products_stay_with_numpy(stand_in, case):
    a, b = _operands(70, 130, 150, "NN", np.float32)
    out = None
    if case == "small":
        a, b = a[:10, :10], b[:10, :10]
    elif case == "batched":
        a, b = np.stack([a, a]), np.stack([b, b])
    elif case == "mixed dtypes":
        b = b.astype(np.float64)
    elif case == "float16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    elif case == "integers":
        a, b = (a * 10).astype(np.int64), (b * 10).astype(np.int64)
    elif case == "strided":
        a = np.repeat(a, 2, axis=1)[:, ::2]  # no unit stride along either axis
    elif case == "overlapping out":
        square = np.random.default_rng(3).standard_normal((150, 150)).astype(np.float32)
        a, b, out = square, square, square
    else:
        out = np.empty((70, 260), dtype=np.float32)[:, ::2]
    expected = np.matmul(a, b)
    got = blas.matmul(a, b, out=out)
    assert stand_in == []
    np.testing.assert_allclose(got, expected, rtol=1e-3)


def test_inside_mxlites_parallel_pieces_mkl_runs_on_the_calling_thread_only(stand_in):
    a, b = _operands(70, 130, 150, "NT", np.float32)
    results = [None, None]

    def piece(i):
        results[i] = blas.matmul(a, b)

    parallel.parallel_for(2, piece)
    assert stand_in == [1, 1]
    np.testing.assert_array_equal(results[0], results[1])


def test_mkl_takes_the_blas_thread_count_of_the_moment_for_a_product_that_fills_them(stand_in, monkeypatch):
    a, b = _operands(512, 512, 1024, "NN", np.float32)  # 2^28 multiply-adds: work for 4 threads at 2^26 each
    monkeypatch.setattr(threads, "_blas_count", 3)
    blas.matmul(a, b)
    with threads.blas_threads_limited(1):
        blas.matmul(a, b)
    monkeypatch.setattr(threads, "_blas_count", 8)
    blas.matmul(a, b)
    assert stand_in == [3, 1, 4]


def test_a_forked_process_runs_mkl_on_its_calling_thread_only(stand_in, monkeypatch):
    a, b = _operands(512, 512, 1024, "NN", np.float32)
    monkeypatch.setattr(threads, "_blas_count", 2)
    parent = mkl.os.getpid()
    monkeypatch.setattr(mkl.os, "getpid", lambda: parent + 1)  # as in a child forked after MKL was loaded
    blas.matmul(a, b)
    assert stand_in == [1]


def _fresh(monkeypatch, **env):
    monkeypatch.setattr(mkl, "_loaded", None)
    monkeypatch.setattr(mkl, "_why_not", None)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_switched_off_the_products_go_to_numpy_and_misspelt_is_an_error(monkeypatch):
    a, b = _operands(70, 130, 150, "NN", np.float32)
    _fresh(monkeypatch, MXLITE_HOST_BLAS="numpy")
    assert mkl.matmul(a, b, None, 2) is None and mkl.status() == "NumPy's BLAS (MXLITE_HOST_BLAS=numpy)"
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    _fresh(monkeypatch, MXLITE_HOST_BLAS="openblass")
    with pytest.raises(ValueError, match="MXLITE_HOST_BLAS must be one of auto, numpy, got 'openblass'"):
        mkl.matmul(a, b, None, 2)
    with pytest.raises(ValueError, match="MXLITE_HOST_BLAS must be one of auto, numpy, got 'openblass'"):
        mkl.status()


def test_a_broken_mkl_library_is_reported_and_not_used(monkeypatch, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.3").write_bytes(b"not a shared library")
    monkeypatch.setattr(mkl.sys, "prefix", str(tmp_path))
    _fresh(monkeypatch, MXLITE_HOST_BLAS="auto")
    a, b = _operands(70, 130, 150, "NN", np.float32)
    assert mkl.matmul(a, b, None, 2) is None
    assert "could not be used (OSError" in mkl.status() and str(tmp_path) in mkl.status()
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)


def test_without_the_wheel_the_status_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(mkl.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(mkl.site, "getuserbase", lambda: str(tmp_path))
    _fresh(monkeypatch, MXLITE_HOST_BLAS="auto")
    assert mkl.status() == "NumPy's BLAS (the mkl wheel is not installed (pip install 'mxlite[mkl]'))"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_layout_through_the_active_blas_on_one_and_two_threads(dtype):
    """Through MKL where it is installed (the same bits on 1 and 2 threads: its strict reproducible mode), else
    through NumPy's BLAS (one call at this size); within the rounding of the sums either way."""
    for layout in LAYOUTS:
        a, b = _operands(96, 160, 200, layout, dtype, seed=4)
        results = []
        for count in (1, 2):
            results.append(mkl.matmul(a, b, None, count) if mkl.status().startswith("MKL") else blas.matmul(a, b))
            results[-1] = results[-1].copy()
        np.testing.assert_array_equal(results[0], results[1])
        exact = a.astype(np.float64) @ b.astype(np.float64)
        bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        assert np.all(np.abs(results[0] - exact) <= 200 * np.finfo(dtype).eps * bound)


def test_mxlite_info_says_where_large_products_run(capsys, monkeypatch):
    from mxlite.cli import info

    _fresh(monkeypatch, MXLITE_HOST_BLAS="numpy")
    info()
    lines = capsys.readouterr().out.splitlines()
    assert "CPU large products: NumPy's BLAS (MXLITE_HOST_BLAS=numpy)" in lines

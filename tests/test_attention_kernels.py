"""kernels/attention.cu against its NumPy twin (mxlite.ops._attention_kernels), bit for bit, and the twin
against a float64 reference.

On CPU devices the serial host build (one thread per block) must give the twin's bits; the GPU-marked tests run
the kernels with real block sizes on the emulated GPUs (or real ones), where the twin's bits must come out too:
no value depends on the threads per block. Shapes have tails everywhere: head dimensions that are no multiple of
the eight lanes, query counts that are no multiple of the 16 rows of a tile, key counts past one block of 64.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import _attention_kernels as ak
from mxlite.ops import _philox
from tests.test_cpu_threads import _assert_same_bits, _per_thread_count, spread_always  # noqa: F401 - a fixture

DTYPES = ["float32", "float16", "bfloat16"]


def _host_available():
    return ak.KERNELS.cpu_enabled()


def _storage(x, dtype):
    """float64 values stored as ``dtype`` (bfloat16 as uint16 bit patterns)."""
    if dtype == "bfloat16":
        return ak.float32_to_bf16(x.astype(np.float32))
    return x.astype(dtype)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _same_bits(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


class Case:
    """One attention problem: inputs in a storage dtype, its masking and dropout, as host arrays."""

    def __init__(self, dtype, batch=2, heads=2, tq=37, tk=70, dk=20, dv=12, causal=False, use_mask=False,
                 lengths=None, rate=0.0, seed=0):
        rng = np.random.default_rng(seed)
        self.g = ak.Geometry(batch, heads, tq, tk, dk, dv)
        bh = batch * heads
        self.q = _storage(rng.standard_normal((bh, tq, dk)), dtype)
        self.k = _storage(rng.standard_normal((bh, tk, dk)), dtype)
        self.v = _storage(rng.standard_normal((bh, tk, dv)), dtype)
        self.dout = _storage(rng.standard_normal((bh, tq, dv)), dtype)
        mask = np.broadcast_to(rng.random((batch, 1, tq, tk)) > 0.3, (batch, heads, tq, tk)) if use_mask else None
        lengths = None if lengths is None else np.asarray(lengths, np.int64)
        self.masking = ak.Masking(mask, lengths, causal)
        self.rate, self.key, self.offset = rate, 0x1234567890ABCDEF, 5
        self.scale = np.float32(1 / np.sqrt(dk))

    def dropout(self, xp=np, device=None):
        if not self.rate:
            return ak.Dropout()
        state = np.array([self.key, self.offset], np.uint64)
        if xp is not np:
            with device.use():
                state = xp.asarray(state)
        return ak.Dropout(state, self.rate)

    def twin(self):
        keep = ak.keep_matrix(self.masking, self.g)
        survive = ak.survivors(self.key, self.offset, self.g, self.rate) if self.rate else None
        drop_scale = ak.Dropout(None, self.rate).scale
        out, lse = ak.forward_twin(self.q, self.k, self.v, keep, self.scale, survive, drop_scale)
        grads = ak.backward_twin(self.q, self.k, self.v, out, self.dout, lse, keep, self.scale, survive, drop_scale)
        return (out, lse, *grads)

    def kernels(self, device, threads):
        xp = device.xp
        with device.use():
            q, k, v, dout = (xp.asarray(a) for a in (self.q, self.k, self.v, self.dout))
            m = self.masking
            masking = ak.Masking(None if m.mask is None else xp.broadcast_to(xp.asarray(np.ascontiguousarray(
                m.mask[:, :1])), m.mask.shape), None if m.valid_length is None else xp.asarray(m.valid_length),
                m.causal)
        drop = self.dropout(xp, device)
        out, lse = ak.forward(xp, q, k, v, self.g, masking, drop, self.scale, threads=threads)
        grads = ak.backward(xp, q, k, v, out, dout, lse, self.g, masking, drop, self.scale, threads=threads)
        results = (out, lse, *grads)
        if xp is np:
            return results
        with device.use():
            return tuple(a.get() for a in results)


def _compare(got, want, what):
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want):
        _same_bits(a, b, f"{what}: {name}")


CASES = {
    "plain": {},
    "causal": {"causal": True},
    "mask": {"use_mask": True},
    "lengths": {"lengths": [50, 3]},
    "all": {"causal": True, "use_mask": True, "lengths": [70, 41], "rate": 0.25},
    "dropout": {"rate": 0.4},
    "head8": {"dk": 8, "dv": 8, "tq": 16, "tk": 64},
    "head256": {"dk": 256, "dv": 5, "tq": 3, "tk": 9, "heads": 1},
}


# -- the serial host build (CPU devices) against the twin -----------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES), ids=str)
def test_host_build_gives_the_twins_bits(case, dtype):
    if not _host_available():
        pytest.skip("the host build of kernels/attention.cu is not available (MXLITE_CPU_KERNELS or no g++/headers)")
    c = Case(dtype, **CASES[case])
    _compare(c.kernels(mx.cpu(0), None), c.twin(), f"cpu {case} {dtype}")


def test_host_build_rows_without_keys_are_zero_and_pass_no_gradient():
    if not _host_available():
        pytest.skip("the host build of kernels/attention.cu is not available")
    c = Case("float32", lengths=[0, 70], tq=5, tk=70)
    got = c.kernels(mx.cpu(0), None)
    _compare(got, c.twin(), "empty rows")
    out, lse, dq, dk, dv = got
    batch0 = slice(0, 2)  # (b=0, h=0) and (b=0, h=1): no key is valid
    assert (out[batch0] == 0).all() and (lse[batch0] == -np.inf).all()
    assert (dq[batch0] == 0).all() and (dk[batch0] == 0).all() and (dv[batch0] == 0).all()
    assert np.isfinite(out[2:]).all() and np.isfinite(lse[2:]).all()


def test_host_build_runs_without_keys_or_queries():
    if not _host_available():
        pytest.skip("the host build of kernels/attention.cu is not available")
    for tq, tk in ((4, 0), (0, 4)):
        c = Case("float32", tq=tq, tk=tk)
        out, lse, dq, dk, dv = c.kernels(mx.cpu(0), None)
        assert out.shape == (4, tq, 12) and (out == 0).all() and (lse == -np.inf).all()
        assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()


@pytest.mark.usefixtures("spread_always")
def test_host_build_gives_the_same_bits_on_1_2_and_4_threads():
    """Blocks spread over the host threads (each its own tile, its shared memory thread-local): same bits."""
    c = Case("float32", **{**CASES["all"], "batch": 4, "lengths": [70, 41, 9, 66]}, heads=4, tq=40)
    results, pool_blocks = _per_thread_count(lambda: c.kernels(mx.cpu(0), None))
    _assert_same_bits(results)
    _compare(results[4], c.twin(), "4 threads")
    assert pool_blocks > 0


# -- the twin against float64 --------------------------------------------------------------------------------
def _reference(c):
    """float64 attention of a float32 case: (out, dq, dk, dv) with the twin's masks and dropout."""
    q, k, v, dout = (a.astype(np.float64) for a in (c.q, c.k, c.v, c.dout))
    keep = ak.keep_matrix(c.masking, c.g)
    drop = ak.survivors(c.key, c.offset, c.g, c.rate) / (1 - c.rate) if c.rate else 1.0
    s = np.where(keep, q @ k.transpose(0, 2, 1) * float(c.scale), -np.inf)
    top = s.max(axis=2, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0)), 0)
    total = e.sum(axis=2, keepdims=True)
    p = e / np.where(total == 0, 1, total)
    w = p * drop
    out = w @ v
    dw = dout @ v.transpose(0, 2, 1)
    dp = dw * drop
    ds = p * (dp - (dp * p).sum(axis=2, keepdims=True)) * float(c.scale)
    return out, ds @ k, ds.transpose(0, 2, 1) @ q, w.transpose(0, 2, 1) @ dout


@pytest.mark.parametrize("case", ["plain", "all", "head256"])
def test_twin_matches_a_float64_reference(case):
    c = Case("float32", **CASES[case], seed=1)
    out, _, dq, dk, dv = c.twin()
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), _reference(c)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6, err_msg=name)


def test_twin_log_sum_exp_is_each_rows():
    c = Case("float32", tq=9, tk=130, seed=2)
    _, lse, *_ = c.twin()
    s = c.q.astype(np.float64) @ c.k.astype(np.float64).transpose(0, 2, 1) * float(c.scale)
    np.testing.assert_allclose(lse, np.log(np.exp(s).sum(axis=2)), rtol=1e-6, atol=1e-6)


def test_twin_dropout_draws_are_kernels_random_cu_masks():
    """A weight survives where random.cu's dropout_mask over (BH, Tq, Tk) at the same key and offset keeps."""
    g = ak.Geometry(2, 3, 5, 7, 4, 4)
    survive = ak.survivors(99, 11, g, 0.3)
    mask = _philox.dropout_mask_twin(99, 11, (6, 5, 7), 0.3, np.float32)
    np.testing.assert_array_equal(survive, mask != 0)
    assert 0.55 < survive.mean() < 0.85


def test_bf16_rounding_is_cudas():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -9, -2.5e-39, np.inf, -np.inf, np.nan, 3.4e38],
                 np.float32)
    bits = ak.float32_to_bf16(x)
    assert bits.tolist()[:4] == [0x3F80, 0x3F80, 0x3F82, 0x3F80]  # ties to even: 1 + 2^-8 -> 1, 1 + 3*2^-8 -> up
    assert bits[5] == 0x7F80 and bits[6] == 0xFF80 and bits[7] == 0x7FFF and bits[8] == 0x7F80
    np.testing.assert_array_equal(ak.bf16_to_float32(bits)[:4], [1.0, 1.0, 1 + 2 ** -6, 1.0])


def test_the_driver_refuses_what_the_kernels_cannot_take():
    assert ak.supported("float32", 64, 64) and ak.supported("bfloat16", 256, 1)
    assert not ak.supported("float64", 64, 64)
    assert not ak.supported("float32", 257, 64) and not ak.supported("float16", 64, 0)


# -- the kernels on GPUs (emulated ones where there is none): real block sizes ---------------------------------
gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("threads", [1, 32, 128])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu_kernels_give_the_twins_bits_at_any_block_size(dtype, threads):
    c = Case(dtype, **CASES["all"], seed=3)
    _compare(c.kernels(mx.gpu(0), threads), c.twin(), f"gpu {dtype} threads={threads}")


@gpu
def test_gpu_bf16_kernels_give_the_twins_bits():
    c = Case("bfloat16", **CASES["mask"], seed=4)
    _compare(c.kernels(mx.gpu(0), None), c.twin(), "gpu bfloat16")

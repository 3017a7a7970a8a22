"""Gradient compression (mxlite/comm/compression/, kernels/compression.cu).

CPU: the NumPy twins against hand-computed bytes, residuals and bit patterns; ``reduce`` over
local devices against hand-computed sums; ``create``'s validation. MPI: ``reduce`` over two real
ranks equals the single-process reduce of both ranks' gradients, bit for bit, on both ranks.
GPU: every kernel against its twin, bit for bit, and ``reduce`` on GPUs against the CPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import mxlite as mx
from mxlite.comm import compression as C
from tests.compression_worker import CODECS, LOCAL, SIZE, STEPS, grads_for
from tests.mpi_helpers import ROOT, mpirun_ok, needs_mpi

f32 = np.float32


def _bits(a):
    return np.asarray(a).view(np.uint8)


# -- 2-bit: MXNet's layout, by hand --------------------------------------------------------------------
# 20 values (two words, the second one only a quarter used), threshold 0.5, three pushes. Codes:
# 11 = +0.5, 10 = -0.5, 00 = 0, the first value of each byte in its two highest bits.
TWO_BIT_GRADS = [
    [0.5, -0.5, 0.25, -0.25, 0.75, -0.75, 1.5, -1.5, 0, 0.125, 0.375, -0.375, 2.0, -2.0, 0.5, 0, -0.5, 0.25,
     0.625, -0.125],
    [0.25, -0.25, 0.25, -0.25, 0.25, -0.25, 0, 0, 0.5, 0.375, 0.125, -0.125, 0, 0, -0.25, -0.75, 0.5, -0.75,
     0.375, -0.375],
    [0.125, -0.125, -0.5, 0.5, 0.4375, -0.4375, 0, 0, -0.25, 0.25, 0, 0, -1.0, 1.0, -0.25, 0.25,
     float(np.nextafter(f32(0.5), f32(0))), 0, 0, 0],
]
TWO_BIT_BYTES = [
    # 0-3: 11 10 00 00; 4-7: 11 10 11 10; 8-11: 00 00 00 00; 12-15: 11 10 11 00; 16-19: 10 00 11 00
    [0xE0, 0xEE, 0x00, 0xEC, 0x8C, 0x00, 0x00, 0x00],
    # r lands exactly on +-0.5 (e.g. 0.25 + 0.25, 0.125 + 0.375): sent, residual 0
    [0x0E, 0xEE, 0xFE, 0xE2, 0xEE, 0x00, 0x00, 0x00],
    # value 16 is 0.49999997: just under the threshold, not sent
    [0x0B, 0x0E, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00],
]
TWO_BIT_RESIDUALS = [
    [0, 0, 0.25, -0.25, 0.25, -0.25, 1.0, -1.0, 0, 0.125, 0.375, -0.375, 1.5, -1.5, 0, 0, 0, 0.25, 0.125, -0.125],
    [0.25, -0.25, 0, 0, 0, 0, 0.5, -0.5, 0, 0, 0, 0, 1.0, -1.0, -0.25, -0.25, 0, 0, 0, 0],
    [0.375, -0.375, 0, 0, 0.4375, -0.4375, 0, 0, -0.25, 0.25, 0, 0, 0, 0, 0, 0,
     float(np.nextafter(f32(0.5), f32(0))), 0, 0, 0],
]
TWO_BIT_SENT = [
    [0.5, -0.5, 0, 0, 0.5, -0.5, 0.5, -0.5, 0, 0, 0, 0, 0.5, -0.5, 0.5, 0, -0.5, 0, 0.5, 0],
    [0, 0, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, 0.5, 0.5, -0.5, 0.5, -0.5, 0, -0.5, 0.5, -0.5, 0.5, -0.5],
    [0, 0, -0.5, 0.5, 0, 0, 0.5, -0.5, 0, 0, 0, 0, 0, 0, -0.5, 0, 0, 0, 0, 0],
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_2bit_bytes_and_residuals_by_hand(dtype):
    residual = np.zeros(20, f32)
    pushes = TWO_BIT_GRADS if dtype == "float32" else TWO_BIT_GRADS[:2]  # 0.49999997 is 0.5 in float16
    for step, grad in enumerate(pushes):
        packed = C.quantize_2bit(np.array(grad, dtype), residual, 0.5)
        assert packed.dtype == np.uint32 and packed.shape == (2,)
        assert _bits(packed).tolist() == TWO_BIT_BYTES[step], f"push {step}"
        np.testing.assert_array_equal(residual, np.array(TWO_BIT_RESIDUALS[step], f32), err_msg=f"push {step}")
    # the same bytes read as little-endian words
    first = C.quantize_2bit(np.array(TWO_BIT_GRADS[0], f32), np.zeros(20, f32), 0.5)
    assert first.tolist() == [0xEC00EEE0, 0x0000008C]


def test_2bit_dequantize_of_the_hand_bytes():
    for step, want in enumerate(TWO_BIT_SENT):
        packed = np.array(TWO_BIT_BYTES[step], np.uint8).view(np.uint32)
        np.testing.assert_array_equal(C.dequantize_2bit(packed, 20, 0.5), np.array(want, f32))
        # MXNet stores the words as float32: the same bytes decode the same
        np.testing.assert_array_equal(C.dequantize_2bit(packed.view(f32), 20, 0.5), np.array(want, f32))
    out = np.ones(20, f32)
    C.dequantize_2bit(np.array(TWO_BIT_BYTES[0], np.uint8).view(np.uint32), 20, 0.5, out=out, accumulate=True)
    np.testing.assert_array_equal(out, 1 + np.array(TWO_BIT_SENT[0], f32))
    # code 01 means "not finite" (MXNet never writes it and decodes it to 0): it decodes to the canonical
    # quiet NaN, so a NaN/inf gradient reaches the summed gradient; unused codes past `size` are ignored
    decoded = C.dequantize_2bit(np.array([0x55555555], np.uint32), 3, 0.5)
    assert decoded.view(np.uint32).tolist() == [0x7FC00000] * 3


def test_2bit_sends_a_non_finite_value_as_nan_and_clears_its_residual():
    residual = np.array([0.25, 0, 0, 0.25, 0], f32)
    with np.errstate(invalid="ignore"):
        packed = C.quantize_2bit(np.array([np.nan, np.inf, -np.inf, 0.25, 1], f32), residual, 0.5)
    codes = [(int(packed.view(np.uint8)[j // 4]) >> (6 - 2 * (j % 4))) & 3 for j in range(5)]
    assert codes == [1, 1, 1, 3, 3]
    np.testing.assert_array_equal(residual, [0, 0, 0, 0, 0.5])
    sent = C.dequantize_2bit(packed, 5, 0.5)
    assert np.isnan(sent[:3]).all() and sent[3:].tolist() == [0.5, 0.5]


def test_2bit_sent_plus_residual_is_old_residual_plus_grad():
    rng = np.random.default_rng(0)
    residual = np.zeros(101, f32)
    for _ in range(5):
        g = (rng.integers(-12, 13, size=101) * 0.125).astype(f32)
        want = residual + g
        sent = C.dequantize_2bit(C.quantize_2bit(g, residual, 0.5), 101, 0.5)
        np.testing.assert_array_equal(sent + residual, want)


# -- top-k and threshold: error feedback ----------------------------------------------------------------
def _dense(indices, values, n):
    out = np.zeros(n, f32)
    out[indices] = values
    return out


def test_topk_residual_accounting_and_convergence():
    rng = np.random.default_rng(1)
    n, k = 50, 7
    residual = np.zeros(n, f32)
    sent_total, grad_total = np.zeros(n, np.float64), np.zeros(n, np.float64)
    for _ in range(400):
        g = (rng.normal(size=n) + 0.5).astype(f32)
        before = residual + g
        indices, values = C.topk_select(g, residual, k)
        assert indices.dtype == np.int32 and values.dtype == np.float32 and indices.size == k
        assert np.all(np.diff(indices) > 0)  # ascending
        # exactly what was accumulated: sent where selected, kept elsewhere
        np.testing.assert_array_equal(_dense(indices, values, n) + residual, before)
        # the k largest |r|: nothing left is larger than anything sent
        assert np.abs(residual).max() <= np.abs(values).min()
        sent_total += _dense(indices, values, n)
        grad_total += g
    # everything is sent eventually: what is missing is the (bounded) residual
    np.testing.assert_allclose(sent_total + residual, grad_total, rtol=1e-4, atol=1e-3)
    assert np.abs(sent_total - grad_total).max() < 0.05 * np.abs(grad_total).max()


def test_topk_ties_go_to_the_lowest_index_and_nan_counts_as_largest():
    residual = np.zeros(6, f32)
    indices, values = C.topk_select(np.array([1, -1, 0.5, 1, -1, 0.25], f32), residual, 3)
    assert indices.tolist() == [0, 1, 3] and values.tolist() == [1, -1, 1]
    np.testing.assert_array_equal(residual, [0, 0, 0.5, 0, -1, 0.25])
    residual = np.zeros(4, f32)
    indices, values = C.topk_select(np.array([5, np.nan, -np.inf, 1], f32), residual, 2)
    assert indices.tolist() == [1, 2] and np.isnan(values[0]) and values[1] == -np.inf
    # NaNs tie whatever their payload or sign: the lowest index wins
    nans = np.array([0x7FC00001, 0x7FC00000, 0xFFC00000, 0x40A00000], np.uint32).view(f32)  # 3 NaNs, 5.0
    indices, _ = C.topk_select(nans, np.zeros(4, f32), 2)
    assert indices.tolist() == [0, 1]
    assert C.topk_select(np.ones(3, f32), np.zeros(3, f32), 0)[0].size == 0
    with pytest.raises(ValueError, match=r"k must be in \[0, 3\]"):
        C.topk_select(np.ones(3, f32), np.zeros(3, f32), 4)


def test_topk_count_reads_the_ratio_as_written():
    assert [C.topk_count(r, n) for r, n in [(0.3, 10), (0.4, 5), (0.1, 10), (0.001, 10), (1.0, 7), (0.5, 0),
                                           (0.25, 9)]] == [3, 2, 1, 1, 7, 0, 3]


def test_threshold_residual_accounting_and_convergence():
    rng = np.random.default_rng(2)
    n, t = 64, 1.5
    residual = np.zeros(n, f32)
    sent_total, grad_total = np.zeros(n, np.float64), np.zeros(n, np.float64)
    for _ in range(300):
        g = (rng.normal(size=n) * 0.5 + 0.2).astype(f32)
        g[:4] = [0.75, -0.75, 1.5, -1.5]  # |r| reaches exactly t
        before = residual + g
        indices, values = C.threshold_select(g, residual, t)
        assert np.all(np.diff(indices) > 0) and indices.dtype == np.int32
        np.testing.assert_array_equal(_dense(indices, values, n) + residual, before)
        assert np.all(np.abs(values) >= f32(t)) and np.all(np.abs(residual) < f32(t))
        sent_total += _dense(indices, values, n)
        grad_total += g
    np.testing.assert_allclose(sent_total + residual, grad_total, rtol=1e-4, atol=1e-3)
    assert np.abs(sent_total - grad_total).max() < f32(t)


def test_threshold_by_hand():
    residual = np.array([0.5, 0, 0, -1, 0], f32)
    indices, values = C.threshold_select(np.array([0.5, 0.999, -1, 0, np.nan], f32), residual, 1.0)
    # NaN (and inf) are always sent, so the summed gradient shows them and the residual stays clean
    assert indices.tolist() == [0, 2, 3, 4] and values[:3].tolist() == [1, -1, -1] and np.isnan(values[3])
    np.testing.assert_array_equal(residual, np.array([0, 0.999, 0, 0, 0], f32))


# -- half-precision wires ------------------------------------------------------------------------------
def _from_bits(bits):
    return np.array(bits, np.uint32).view(f32)


def test_bfloat16_rounding_by_hand():
    cases = [  # float32 bits -> bfloat16 bits
        (0x3F800000, 0x3F80),  # 1.0
        (0x3F808000, 0x3F80),  # halfway, even below: down
        (0x3F818000, 0x3F82),  # halfway, odd below: up to even
        (0x3F808001, 0x3F81),  # just over halfway: up
        (0x3F807FFF, 0x3F80),  # just under halfway: down
        (0xBF818000, 0xBF82),  # negative tie
        (0x7F7FFFFF, 0x7F80),  # largest float rounds to inf
        (0xFF7FFFFF, 0xFF80),  # ... and -inf
        (0x7F7F7FFF, 0x7F7F),  # largest finite bfloat16 stays finite
        (0x7F800000, 0x7F80),  # inf
        (0x80000000, 0x8000),  # -0.0
        (0x00000001, 0x0000),  # smallest subnormal rounds to 0
        (0x7FC00000, 0x7FC0),  # NaN
        (0x7F800001, 0x7FC0),  # NaN whose payload lies in the low half: still NaN, not inf
        (0xFFC00001, 0x7FC0),  # every NaN becomes the canonical one
    ]
    x = _from_bits([c[0] for c in cases])
    wire = C.to_wire(x, "bfloat16", 1.0)
    assert wire.dtype == np.uint16
    assert [hex(b) for b in wire.tolist()] == [hex(c[1]) for c in cases]
    back = C.from_wire(wire, "bfloat16", 1.0, np.zeros(len(cases), f32), accumulate=False)
    np.testing.assert_array_equal(back.view(np.uint32), np.array([c[1] for c in cases], np.uint32) << 16)


def test_float16_wire_by_hand():
    x = np.array([1.0, 65504.0, 65520.0, 1 + 2**-11, 1 + 3 * 2**-11, 2**-24, np.nan, -np.nan, -0.0], f32)
    wire = C.to_wire(x, "float16", 1.0)
    assert wire.dtype == np.float16
    assert [hex(b) for b in wire.view(np.uint16).tolist()] == [
        "0x3c00", "0x7bff", "0x7c00",  # 65520 is halfway to 2**16: rounds to inf
        "0x3c00", "0x3c02",  # ties to even
        "0x1", "0x7e00", "0x7e00", "0x8000"]  # one canonical NaN


def test_prescale_keeps_a_half_overflowing_sum():
    for kind, value in (("fp16", 40000.0), ("bf16", 40960.0)):  # 40000 is not a bfloat16 (40960 is)
        codec = C.create({"type": kind})
        out = np.zeros(3, f32)
        codec.reduce([np.full(3, value, f32), np.full(3, value, f32)], [None, None], out)
        assert out.tolist() == [2 * value] * 3, kind
    # without the pre-scale a float16 wire would carry inf
    assert np.isinf(C.to_wire(np.array([80000.0], f32), "float16", 1.0)[0])


def test_clip_and_scale():
    x = np.array([-3.0, 0.5, 2.0, np.nan, -0.0, 1.0], f32)
    wire = C.to_wire(x, "float16", 0.5, clip=1.0)
    np.testing.assert_array_equal(wire.astype(f32), [-0.5, 0.25, 0.5, np.nan, -0.0, 0.5])
    out = np.ones(6, f32)
    C.from_wire(wire, "float16", 2.0, out)
    np.testing.assert_array_equal(out, [0.0, 1.5, 2.0, np.nan, 1.0, 2.0])
    codec = C.create({"type": "bf16", "clip": 1.5})
    out = np.empty(2, f32)
    codec.reduce([np.array([4.0, -0.5], f32), np.array([-4.0, 1.0], np.float16)], [None, None], out)
    np.testing.assert_array_equal(out, [0.0, 0.5])
    with pytest.raises(ValueError, match="clip must be"):
        C.to_wire(x, "float16", 1.0, clip=0)
    with pytest.raises(ValueError, match="wire_dtype"):
        C.to_wire(x, "float32", 1.0)


# -- reduce over local devices -------------------------------------------------------------------------
GRADS = [[1.0, -0.25, 0.5, 2.0, 0.0], [0.25, 0.75, -1.0, 0.0, 3.0], [-0.5, 0.5, 0.5, -4.0, 0.125]]
CPU_DEVICES = [mx.cpu(0), mx.cpu(1), mx.cpu(1)]


def _on(device, values, dtype=f32):
    with device.use():
        return device.xp.asarray(np.asarray(values, dtype))


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


BY_HAND = [  # (params, sum, residuals after)
    ({"type": "2bit", "threshold": 0.5}, [0, 1.0, 0.5, 0, 0.5],
     [[0.5, -0.25, 0, 1.5, 0], [0.25, 0.25, -0.5, 0, 2.5], [0, 0, 0, -3.5, 0.125]]),
    # k = ceil(0.4 * 5) = 2 each; the third picks index 0 among three tied 0.5s
    ({"type": "topk", "ratio": 0.4}, [0.5, 0, -1, -2, 3],
     [[0, -0.25, 0.5, 0, 0], [0.25, 0.75, 0, 0, 0], [0, 0.5, 0.5, 0, 0.125]]),
    ({"type": "threshold", "threshold": 0.75}, [1, 0.75, -1, -2, 3],
     [[0, -0.25, 0.5, 0, 0], [0.25, 0, 0, 0, 0], [-0.5, 0.5, 0.5, 0, 0.125]]),
    # 1/3 is pre-scaled into each half: float16(g * float32(1/3)) * 3, summed in order. E.g. element 0:
    # 1/3 -> 1365/4096, 1/12 -> 1365/16384, -1/6 -> -1365/8192 in float16; times 3 and summed: 0.74981689453125
    ({"type": "fp16"}, [0.74981689453125, 0.99993896484375, 0.0, -1.99951171875, 3.124969482421875], None),
]


@pytest.mark.parametrize("params,want,residuals_after", BY_HAND, ids=[p["type"] for p, _, _ in BY_HAND])
def test_reduce_three_grads_on_cpu_devices_by_hand(params, want, residuals_after):
    codec = C.create(params)
    grads = [_on(d, g) for d, g in zip(CPU_DEVICES, GRADS)]
    residuals = [_on(d, np.zeros(5)) for d in CPU_DEVICES] if codec.needs_residual else [None] * 3
    out = _on(mx.cpu(0), np.full(5, np.nan))
    codec.reduce(grads, residuals, out)
    np.testing.assert_array_equal(out, np.array(want, f32))
    if residuals_after is not None:
        for r, w in zip(residuals, residuals_after):
            np.testing.assert_array_equal(r, np.array(w, f32))
    np.testing.assert_array_equal(grads[0], np.array(GRADS[0], f32))  # gradients are read only


def test_fp16_by_hand_values_follow_the_definition():
    third = f32(1) / f32(3)
    want = np.zeros(5, f32)
    for g in GRADS:
        want += (np.array(g, f32) * third).astype(np.float16).astype(f32) * f32(3)
    np.testing.assert_array_equal(want, np.array(BY_HAND[3][1], f32))
    np.testing.assert_allclose(want, np.sum(GRADS, axis=0), rtol=2e-3, atol=2e-4)


def test_reduce_into_a_gradient_and_into_float16():
    codec = C.create({"type": "2bit", "threshold": 0.5})
    fresh = lambda: [np.zeros(5, f32) for _ in GRADS]  # noqa: E731
    grads = [np.array(g, f32) for g in GRADS]
    separate = np.empty(5, f32)
    codec.reduce([g.copy() for g in grads], fresh(), separate)
    codec.reduce(grads, fresh(), grads[0])  # out aliases a gradient: compression reads it first
    np.testing.assert_array_equal(grads[0], separate)
    half = np.empty(5, np.float16)
    codec.reduce([np.array(g, np.float16) for g in GRADS], fresh(), half)
    np.testing.assert_array_equal(half, separate.astype(np.float16))


def test_reduce_validates_its_inputs():
    codec = C.create({"type": "topk", "ratio": 0.5})
    grads = [np.zeros(4, f32), np.zeros(4, f32)]
    residuals = [np.zeros(4, f32), np.zeros(4, f32)]
    out = np.zeros(4, f32)
    with pytest.raises(ValueError, match=r"grads\[1\] has 3 elements"):
        codec.reduce([grads[0], np.zeros(3, f32)], residuals, out)
    with pytest.raises(ValueError, match=r"residuals\[1\] must be float32, got float64"):
        codec.reduce(grads, [residuals[0], np.zeros(4)], out)
    with pytest.raises(ValueError, match=r"residuals\[0\] has 5 elements"):
        codec.reduce(grads, [np.zeros(5, f32), residuals[1]], out)
    with pytest.raises(ValueError, match=r"residuals\[1\] is None"):
        codec.reduce(grads, [residuals[0], None], out)
    with pytest.raises(ValueError, match="1 residuals for 2 gradients"):
        codec.reduce(grads, residuals[:1], out)
    with pytest.raises(ValueError, match=r"grads\[0\] must be float32 or float16, got int32"):
        codec.reduce([np.zeros(4, np.int32), grads[1]], residuals, out)
    with pytest.raises(ValueError, match="out has 5 elements"):
        codec.reduce(grads, residuals, np.zeros(5, f32))
    with pytest.raises(ValueError, match=r"grads\[0\] must be a 1-D"):
        codec.reduce([np.zeros((2, 2), f32), grads[1]], residuals, out)
    with pytest.raises(ValueError, match="threshold must be a finite number > 0, got -1"):
        C.quantize_2bit(grads[0], residuals[0], -1)


# -- create ----------------------------------------------------------------------------------------------
def test_create_normalises_params():
    assert C.create(None) is None and C.create({"type": "none"}) is None
    assert C.create({"type": "2bit"}).params == {"type": "2bit", "threshold": 0.5}
    assert C.create({"type": "2bit", "threshold": "0.25"}).params == {"type": "2bit", "threshold": 0.25}
    assert C.create({"type": "topk", "ratio": 1}).params == {"type": "topk", "ratio": 1.0}
    assert C.create({"type": "threshold", "threshold": 2}).params == {"type": "threshold", "threshold": 2.0}
    assert C.create({"type": "fp16"}).params == {"type": "fp16"}
    assert C.create({"type": "BF16", "clip": 3}).params == {"type": "bf16", "clip": 3.0}
    assert [C.create({"type": t, **p}).needs_residual for t, p in
            [("2bit", {}), ("topk", {"ratio": 0.1}), ("threshold", {"threshold": 1}), ("fp16", {}), ("bf16", {})]
            ] == [True, True, True, False, False]


@pytest.mark.parametrize("params,match", [
    ({"type": "2bit", "threshold": -1}, r"compression_params\['threshold'\] must be > 0, got -1"),
    ({"type": "2bit", "threshold": 0}, r"compression_params\['threshold'\] must be > 0, got 0"),
    ({"type": "2bit", "threshold": "abc"}, r"compression_params\['threshold'\] must be a number, got 'abc'"),
    ({"type": "2bit", "threshold": True}, r"compression_params\['threshold'\] must be a number, got True"),
    ({"type": "2bit", "threshold": float("nan")}, r"compression_params\['threshold'\] must be finite, got nan"),
    ({"type": "2bit", "ratio": 0.5}, r"compression_params\['ratio'\] is not a parameter of type '2bit'.*got 0.5"),
    ({"type": "topk"}, r"compression_params\['ratio'\] is required for type 'topk'"),
    ({"type": "topk", "ratio": 1.5}, r"compression_params\['ratio'\] must be in \(0, 1\], got 1.5"),
    ({"type": "topk", "ratio": 0}, r"compression_params\['ratio'\] must be in \(0, 1\], got 0"),
    ({"type": "threshold"}, r"compression_params\['threshold'\] is required for type 'threshold'"),
    ({"type": "threshold", "threshold": -0.5}, r"compression_params\['threshold'\] must be > 0, got -0.5"),
    ({"type": "fp16", "clip": 0}, r"compression_params\['clip'\] must be > 0, got 0"),
    ({"type": "fp16", "threshold": 1}, r"compression_params\['threshold'\] is not a parameter of type 'fp16'"),
    ({"type": "none", "threshold": 1}, r"compression_params\['threshold'\] is not a parameter of type 'none'"),
    ({"type": "1bit"}, r"compression_params\['type'\] must be one of .*, got '1bit'"),
    ({"type": 2}, r"compression_params\['type'\] must be one of .*, got 2"),
    ({"threshold": 0.5}, r"compression_params\['type'\] is required"),
])
def test_create_rejects_bad_params_naming_the_key(params, match):
    with pytest.raises(ValueError, match=match):
        C.create(params)


def test_create_rejects_non_dicts():
    with pytest.raises(TypeError, match="compression_params must be a dict.*got str: '2bit'"):
        C.create("2bit")


# -- MPI: two real ranks -----------------------------------------------------------------------------------
WORKER = os.path.join(ROOT, "tests", "compression_worker.py")


@pytest.mark.mpi
@needs_mpi
def test_two_ranks_reduce_like_one_process_with_every_gradient(tmp_path):
    mpirun_ok(2, WORKER, str(tmp_path))
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    for name, params, dtype in CODECS:
        codec = C.create(params)
        # one process holding both ranks' gradients, rank 0's first: the same contributions in the same order
        residuals = [np.zeros(SIZE, f32) for _ in range(2 * LOCAL)] if codec.needs_residual else [None] * 4
        for step in range(STEPS):
            out = np.empty(SIZE, dtype)
            codec.reduce(grads_for(0, step, dtype) + grads_for(1, step, dtype), residuals, out)
            for r in range(2):
                got = ranks[r][f"{name}:out{step}"]
                assert got.dtype == out.dtype
                np.testing.assert_array_equal(_bits(got), _bits(out), err_msg=f"{name} step {step} rank {r}")
        assert np.abs(out.astype(np.float64)).sum() > 0, name  # something was sent
        if codec.needs_residual:
            for r in range(2):
                for i in range(LOCAL):
                    np.testing.assert_array_equal(_bits(ranks[r][f"{name}:res{i}"]), _bits(residuals[LOCAL * r + i]),
                                                  err_msg=f"{name} residual {i} of rank {r}")


def test_exchange_parses_what_it_serialises_with_a_fake_communicator():
    """The byte format without MPI: two 'ranks' whose payloads are gathered by a stand-in."""

    class TwoRanks:
        size, rank = 2, 0

        def __init__(self):
            self.calls = []

        def allgather(self, array):
            self.calls.append(np.array(array))
            if array.dtype == np.int64:  # the size exchange of variable-size codecs
                return [array, np.array([array[0] + 8], np.int64)]
            return [array, np.concatenate([array, np.zeros(8, np.uint8)])]  # rank 1: same bytes, padded

    for params in ({"type": "2bit"}, {"type": "topk", "ratio": 0.3}, {"type": "threshold", "threshold": 0.5},
                   {"type": "fp16"}, {"type": "bf16", "clip": 1.0}):
        codec = C.create(params)
        grads = [np.array(g, f32) for g in GRADS]
        fresh = [np.zeros(5, f32) for _ in GRADS] if codec.needs_residual else [None] * 3
        single = np.empty(5, f32)
        # one process with the three gradients twice = two ranks sending the same three
        codec.reduce(grads + grads, fresh + [np.zeros(5, f32) for _ in GRADS] if codec.needs_residual
                     else [None] * 6, single)
        comm = TwoRanks()
        out = np.empty(5, f32)
        codec.reduce(grads, [np.zeros(5, f32) for _ in GRADS] if codec.needs_residual else [None] * 3, out, comm)
        np.testing.assert_array_equal(out, single, err_msg=str(params))
        assert all(c.size % 4 == 0 for c in comm.calls if c.dtype == np.uint8)


def test_a_short_payload_names_the_rank():
    class Truncating:
        size, rank = 2, 0

        def allgather(self, array):
            return [array, array[:-4]]

    codec = C.create({"type": "2bit"})
    with pytest.raises(ValueError, match="payload of rank 1, contribution 0"):
        codec.reduce([np.ones(5, f32)], [np.zeros(5, f32)], np.empty(5, f32), Truncating())


# -- GPU: every kernel against its twin, bit for bit -------------------------------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")
N = 4099  # several blocks, not a multiple of 16, odd


def _grid_values(rng, n, dtype, scale=0.125, spread=12):
    """Values on a 1/8 grid: sums land exactly on +-threshold, |r| ties abound."""
    return (rng.integers(-spread, spread + 1, size=n) * scale).astype(dtype)


def _pair(cpu_array):
    return cpu_array.copy(), _on(mx.gpu(0), cpu_array, cpu_array.dtype)


def _same_bits(gpu_array, cpu_array, what):
    np.testing.assert_array_equal(_bits(_host(gpu_array)), _bits(cpu_array), err_msg=what)


def _same_bits_or_nan(gpu_array, cpu_array, what):
    """Bit for bit, except that NaNs need only be NaN (GPU arithmetic makes canonical NaNs)."""
    got = _host(gpu_array)
    nan = np.isnan(cpu_array)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=what)
    _same_bits(got[~nan], cpu_array[~nan], what)


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_quantize_dequantize_2bit_kernels_match_the_twin(dtype):
    rng = np.random.default_rng(10)
    r_cpu, r_gpu = _pair(_grid_values(rng, N, f32))
    for step in range(5):
        g = _grid_values(rng, N, dtype)
        if step == 3:
            g[:64] = rng.normal(size=64)  # off the grid too
        if step == 4:  # non-finite gradients: code 01 (NaN), residual cleared
            g[100:106] = [np.nan, np.inf, -np.inf, np.nan, 65504, -65504]
        g_cpu, g_gpu = _pair(g)
        with np.errstate(invalid="ignore", over="ignore"):
            p_cpu, p_gpu = C.quantize_2bit(g_cpu, r_cpu, 0.5), C.quantize_2bit(g_gpu, r_gpu, 0.5)
        _same_bits(p_gpu, p_cpu, f"packed, step {step}")
        _same_bits(r_gpu, r_cpu, f"residual, step {step}")
        assert (_host(p_gpu) != 0).any()
        for accumulate in (False, True):
            o_cpu, o_gpu = _pair(_grid_values(rng, N, f32))
            C.dequantize_2bit(p_cpu, N, 0.5, out=o_cpu, accumulate=accumulate)
            C.dequantize_2bit(p_gpu, N, 0.5, out=o_gpu, accumulate=accumulate)
            _same_bits_or_nan(o_gpu, o_cpu, f"dequantized, accumulate={accumulate}")
    words = rng.integers(0, 2**32, size=(N + 15) // 16, dtype=np.uint64).astype(np.uint32)  # code 01 too
    w_cpu, w_gpu = _pair(words)
    _same_bits(C.dequantize_2bit(w_gpu, N, 0.75), C.dequantize_2bit(w_cpu, N, 0.75), "random words")


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k", [1, 37, N // 3, N])
def test_topk_kernels_match_the_twin(dtype, k):
    rng = np.random.default_rng(11)
    r0 = _grid_values(rng, N, f32, spread=3)  # few distinct |r|: many ties at the k-th value
    r0[5], r0[900] = np.nan, -np.inf
    r_cpu, r_gpu = _pair(r0)
    for step in range(3):
        g_cpu, g_gpu = _pair(_grid_values(rng, N, dtype, spread=3))
        i_cpu, v_cpu = C.topk_select(g_cpu, r_cpu, k)
        i_gpu, v_gpu = C.topk_select(g_gpu, r_gpu, k)
        _same_bits(i_gpu, i_cpu, f"indices, step {step}")
        _same_bits_or_nan(v_gpu, v_cpu, f"values, step {step}")  # the NaN goes out at step 0
        _same_bits_or_nan(r_gpu, r_cpu, f"residual, step {step}")


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_threshold_kernels_match_the_twin(dtype):
    rng = np.random.default_rng(12)
    r_cpu, r_gpu = _pair(_grid_values(rng, N, f32))
    for step in range(4):
        g = _grid_values(rng, N, dtype)  # |r| == 0.75 exactly for many elements
        if step == 3:  # non-finite gradients are always sent
            g[100:103] = [np.nan, np.inf, -np.inf]
        g_cpu, g_gpu = _pair(g)
        i_cpu, v_cpu = C.threshold_select(g_cpu, r_cpu, 0.75)
        i_gpu, v_gpu = C.threshold_select(g_gpu, r_gpu, 0.75)
        assert 0 < i_cpu.size < N
        if step == 3:
            assert {100, 101, 102} <= set(i_cpu.tolist())
        _same_bits(i_gpu, i_cpu, f"indices, step {step}")
        _same_bits_or_nan(v_gpu, v_cpu, f"values, step {step}")
        _same_bits(r_gpu, r_cpu, f"residual, step {step}")
    empty = C.threshold_select(_on(mx.gpu(0), np.zeros(10)), _on(mx.gpu(0), np.zeros(10)), 1.0)
    assert empty[0].size == 0 and empty[1].size == 0


def _cast_inputs(rng):
    """float32 values with every rounding case: ties, overflow, subnormals, inf, NaN of both signs."""
    random = rng.normal(size=N).astype(f32) * f32(1000)
    bits = rng.integers(0, 2**32, size=N, dtype=np.uint64).astype(np.uint32)  # every exponent, NaNs included
    special = np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x7FC00000,
                        0x7F800001, 0xFFC00001, 0x80000000, 0x00000001, 0x477FF000, 0x477FE000, 0x3F801000,
                        0x3F803000, 0x33800000, 0x33000000], np.uint32).view(f32)
    return np.concatenate([random, bits.view(f32), special])


@gpu
@needs_gpu
@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("scale,clip", [(1.0, None), (0.25, None), (1 / 3, 3.0e4)])
def test_wire_cast_kernels_match_the_twin(wire, dtype, scale, clip):
    rng = np.random.default_rng(13)
    with np.errstate(over="ignore", invalid="ignore"):
        x = _cast_inputs(rng).astype(dtype)
    x_cpu, x_gpu = _pair(x)
    w_cpu = C.to_wire(x_cpu, wire, scale, clip)
    w_gpu = C.to_wire(x_gpu, wire, scale, clip)
    assert w_gpu.dtype == w_cpu.dtype
    _same_bits(w_gpu, w_cpu, "wire")
    for accumulate in (False, True):
        o_cpu, o_gpu = _pair(rng.normal(size=x.size).astype(f32))
        C.from_wire(w_cpu, wire, 3.0, o_cpu, accumulate)
        C.from_wire(w_gpu, wire, 3.0, o_gpu, accumulate)
        _same_bits_or_nan(o_gpu, o_cpu, f"from_wire accumulate={accumulate}")


@gpu
@needs_gpu
@pytest.mark.parametrize("params", [p for _, p, _ in CODECS] + [{"type": "topk", "ratio": 1.0}],
                         ids=[n for n, _, _ in CODECS] + ["topk-all"])
def test_reduce_on_gpus_equals_reduce_on_cpu(params):
    """Several gradients per GPU (and across GPUs when there are two), out on a GPU or the host."""
    rng = np.random.default_rng(14)
    codec = C.create(params)
    gpus = [mx.gpu(i % mx.num_gpus()) for i in range(3)]
    for dtype in ("float32", "float16"):
        residuals_cpu = [np.zeros(N, f32) for _ in gpus]
        residuals_gpu = [_on(d, np.zeros(N, f32)) for d in gpus]
        for step in range(3):
            grads = [_grid_values(rng, N, dtype) + rng.normal(size=N).astype(dtype) * (step == 2) for _ in gpus]
            want = np.empty(N, dtype)
            codec.reduce(grads, residuals_cpu if codec.needs_residual else [None] * 3, want)
            out_device = gpus[step % len(gpus)] if step < 2 else mx.cpu(0)
            got = _on(out_device, np.full(N, np.nan), dtype)
            codec.reduce([_on(d, g, dtype) for d, g in zip(gpus, grads)],
                         residuals_gpu if codec.needs_residual else [None] * 3, got)
            _same_bits(got, want, f"{dtype} step {step}")
            if codec.needs_residual:
                for r_gpu, r_cpu in zip(residuals_gpu, residuals_cpu):
                    _same_bits(r_gpu, r_cpu, f"{dtype} residual, step {step}")

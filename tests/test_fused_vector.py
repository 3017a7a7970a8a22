"""The fused update kernels' access paths: 16-byte groups where the buffers are aligned, one element at a time
before (the head) and after (the tail), and for a chunk whose buffers are not co-aligned.

``kernels/optimizers.cu`` moves kGroup = 8 elements per thread and step with 16-byte loads and stores from
the first element at which every buffer of a chunk is 16-byte aligned. Arenas align every parameter, so
these tests lay out segments by hand: aligned ones (no head), ones that start 3 elements past an aligned
address with a gradient aligned alike (a head of 5 or 1 elements, then groups, then a tail: what a shard's
slice of the arena gives), and ones whose gradient is misaligned against the weight (no common alignment:
element by element). Lengths 1, 7, 8, 9 and 37 give chunks shorter than a head, exactly one group, a group
and a tail; a parameter of two and a bit GPU chunks gives several blocks.

Every rule, on CPU devices (the serial host build, one thread per block) bit for bit against the NumPy twin,
and on the emulated GPUs (256 threads per block, the GPU chunk size) against the twin at the tolerances of
``tests/test_fused_update.py``; elements outside the segments must stay untouched.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.optimizer import _fused
from mxlite.optimizer._fused import GPU_CHUNK, ArenaPlan, Launcher, Segment, fused_rule
from tests.test_fused_update import FUSED

SIZES = (1, 7, 8, 9, 37, 2 * GPU_CHUNK + 13, 300)
STEPS = 3


def _segments(layout: str) -> list[Segment]:
    """Segments of :data:`SIZES` laid out one after another (gaps between) in the weights and the gradients."""
    out, offset, grad = [], 0, 64
    for n in SIZES:
        if layout == "aligned":
            w_at, g_at = offset, grad
        elif layout == "heads":  # 3 past a 64-byte boundary, the gradient alike: a head of 5 (float32 groups)
            w_at, g_at = offset + 3, grad + 3
        else:  # "misaligned": the gradient one element off the weight's alignment: no common 16-byte boundary
            w_at, g_at = offset + 3, grad + 4
        out.append(Segment(w_at, g_at, n))
        offset += -(-(n + 24) // 16) * 16
        grad += -(-(n + 24) // 16) * 16
    return out


def _optimizer(name: str, kwargs: dict, multi_precision: bool):
    opt = getattr(mx.optimizer, name)(rescale_grad=0.5, multi_precision=multi_precision,
                                      **{"wd": 1e-3, "clip_gradient": 0.8, **kwargs})
    opt.set_lr_mult({0: 0.5, 2: 2.0})
    opt.set_wd_mult({1: 0.0, 3: 3.0})
    if name == "LARS":
        opt.idx2name = {1: "dense0_bias"}
    return opt


def _run(device, name, kwargs, dtype, multi_precision, layout, compiled):
    """STEPS updates of one plan: kernels (``compiled``) or the NumPy twin; (weights, {state: array}) on the host.

    Everything outside the segments is NaN and must stay NaN.
    """
    rng = np.random.default_rng(11)
    segments = _segments(layout)
    plan = ArenaPlan(segments, chunk=_fused.chunk_for(device))
    total = max(s.offset + s.size for s in segments) + 32
    gtotal = max(s.grad_offset + s.size for s in segments) + 32
    live = np.zeros(total, bool)
    for s in segments:
        live[s.offset:s.offset + s.size] = True
    data = np.full(total, np.nan, np.float32)
    data[live] = rng.uniform(-1, 1, live.sum())
    opt = _optimizer(name, kwargs, multi_precision)
    rule = fused_rule(opt, dtype)
    names = rule.states(opt)
    xp = device.xp
    with device.use():
        w = xp.asarray(data.astype(dtype))
        states = {n: xp.zeros(total, np.float32) for n in names}
        master = xp.asarray(data) if multi_precision else None
        for _ in range(STEPS):
            grad = np.full(gtotal, np.nan, np.float32)
            for s in segments:
                grad[s.grad_offset:s.grad_offset + s.size] = rng.normal(size=s.size) + 0.2
            g = xp.asarray(grad.astype(dtype))
            hp, counts = _fused.table(rule, opt, range(len(segments)))
            if compiled:
                rule.launch(Launcher(device, plan, dtype, hp), opt, w, g, states, master)
            elif rule.twin is not None:
                rule.twin(opt, plan, w, g, states, master, hp)
            else:
                _fused.step_segments(opt, plan, list(range(len(segments))), counts, w, g, names, states, master)
    host = {n: np.asarray(a.get() if hasattr(a, "get") else a) for n, a in states.items()}
    if master is not None:
        host["master"] = np.asarray(master.get() if hasattr(master, "get") else master)
    return np.asarray(w.get() if hasattr(w, "get") else w), host, live


DTYPES = [("float32", False), ("float16", True), ("float16", False)]
LAYOUTS = ["aligned", "heads", "misaligned"]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), np.array(np.nan, a.dtype), a).view(f"u{a.dtype.itemsize}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,multi_precision", DTYPES, ids=["f32", "f16-master", "f16"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_host_build_is_bit_identical_to_the_twin_on_every_path(name, kwargs, dtype, multi_precision, layout,
                                                               monkeypatch):
    """The serial host build takes the group path, the head and the tail, or the element path: the twin's bits."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "compiled")
    got_w, got_s, live = _run(mx.cpu(0), name, kwargs, dtype, multi_precision, layout, compiled=True)
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")
    want_w, want_s, _ = _run(mx.cpu(0), name, kwargs, dtype, multi_precision, layout, compiled=False)
    np.testing.assert_array_equal(_bits(got_w), _bits(want_w))
    assert np.isnan(got_w[~live]).all(), "the kernel wrote outside the segments"
    assert got_s.keys() == want_s.keys()
    for n in got_s:
        np.testing.assert_array_equal(_bits(got_s[n][live]), _bits(want_s[n][live]), err_msg=n)
        if n != "master":
            assert not got_s[n][~live].any(), f"{n}: written outside the segments"


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU (or the emulation)")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype,multi_precision", DTYPES, ids=["f32", "f16-master", "f16"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_gpu_kernels_match_the_twin_on_every_path(name, kwargs, dtype, multi_precision, layout, monkeypatch):
    """256 threads per block and the GPU chunk: groups spread over threads, heads and tails by the first threads."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got_w, got_s, live = _run(mx.gpu(0), name, kwargs, dtype, multi_precision, layout, compiled=True)
        want_w, want_s, _ = _run(mx.cpu(0), name, kwargs, dtype, multi_precision, layout, compiled=False)
    assert np.isnan(got_w[~live]).all(), "the kernel wrote outside the segments"
    got, want = got_w[live].astype(np.float64), want_w[live].astype(np.float64)
    if name not in ("LAMB", "LARS"):  # elementwise: the same float32 operations per element, the twin's bits
        np.testing.assert_array_equal(_bits(got_w), _bits(want_w))
    elif dtype == "float32":  # a GPU sums the norms in thread order (R2): the trust ratio's last bit may differ
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    else:  # ... and a float32 weight one rounding apart may round to the neighbouring float16 value: one ulp
        # with float32 masters; without, the float16 weights carry each step's rounding into the next (2 ulp)
        ulp = np.abs(np.spacing(want_w[live])).astype(np.float64) * (1 if multi_precision else 2)
        assert (np.abs(got - want) <= ulp).all(), "float16 weights further from the twin than their roundings allow"
    for n in got_s:
        rtol = 1e-6 if multi_precision or dtype == "float32" else 1e-5
        np.testing.assert_allclose(got_s[n][live], want_s[n][live], rtol=rtol, atol=1e-7, err_msg=n)


def test_gpu_plans_use_the_gpu_chunk():
    """Plans for a GPU are cut into GPU_CHUNK elements, for a CPU device into CHUNK (the serial build's norms)."""
    assert _fused.chunk_for(mx.cpu(0)) == _fused.CHUNK
    plan = ArenaPlan([Segment(0, 0, 2 * GPU_CHUNK + 1)], chunk=GPU_CHUNK)
    assert (plan.chunk_end - plan.chunk_start).tolist() == [GPU_CHUNK, GPU_CHUNK, 1]
    with pytest.raises(ValueError, match="chunk must be between"):
        ArenaPlan([Segment(0, 0, 3)], chunk=0)

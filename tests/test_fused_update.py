"""Fused arena updates (kernels/optimizers.cu): chunk tables, NumPy twins, and (GPU) kernel vs twin."""

import numpy as np
import pytest

import mxlite as mx
from mxlite import _kernels
from mxlite.optimizer import _fused
from mxlite.optimizer._fused import CHUNK, ArenaPlan, Segment


def _model_arena(dtype="float32", device=None):
    """A 3-layer MLP initialised on ``device``; returns (net, arena, plan of its segments)."""
    mx.random.seed(0)
    device = device or mx.cpu(0)
    net = mx.nn.Sequential(mx.nn.Dense(7, in_units=5, dtype=dtype), mx.nn.Dense(4, in_units=7, dtype=dtype),
                           mx.nn.Dense(3, in_units=4, dtype=dtype))
    net.initialize(mx.init.Xavier(), device=device)
    params = list(net.collect_params().values())
    arena, _ = params[0]._arena_slots()[0]
    segments = [Segment(s.offset, s.grad_offset, s.size) for _, s in (p._arena_slots()[0] for p in params)]
    return net, arena, ArenaPlan(segments)


def _fill_grads(net, rng):
    for p in net.collect_params().values():
        g = p.grad()
        g._data[...] = rng.normal(size=g.shape).astype(g.dtype)


def test_chunks_never_straddle_segments_and_cover_everything():
    plan = ArenaPlan([Segment(0, 500_000, 3), Segment(16, 0, CHUNK * 2 + 5), Segment(CHUNK * 2 + 32, 7, 1)])
    covered = []
    for seg, start, end in zip(plan.chunk_seg, plan.chunk_start, plan.chunk_end):
        s = plan.segments[seg]
        assert s.offset <= start < end <= s.offset + s.size and end - start <= CHUNK
        covered.extend(range(start, end))
    expected = [i for s in plan.segments for i in range(s.offset, s.offset + s.size)]
    assert covered == expected
    assert list(plan.grad_shift()) == [500_000, -16, 7 - CHUNK * 2 - 32]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_twin_matches_per_parameter_rule(momentum):
    rng = np.random.default_rng(1)
    net, arena, plan = _model_arena()
    params = list(net.collect_params().values())
    lr = np.array([0.1, 0.05, 0.2, 0.1, 0.3, 0.01], dtype=np.float32)
    wd = np.array([0.0, 1e-3, 0.0, 1e-2, 0.0, 0.1], dtype=np.float32)
    opts = [mx.optimizer.SGD(learning_rate=float(lr[i]), momentum=momentum, wd=float(wd[i]), rescale_grad=0.5,
                             clip_gradient=0.7) for i in range(len(params))]
    ref_w = [p.data().asnumpy() for p in params]
    states = [o.create_state(0, w) for o, w in zip(opts, ref_w)]
    mom = np.zeros_like(arena.data) if momentum else None
    for _ in range(5):
        _fill_grads(net, rng)
        for o, w, p, st in zip(opts, ref_w, params, states):
            o.update(0, w, p.grad().asnumpy(), st)
        _fused.sgd_arena(plan, mx.cpu(0), arena._data_buf, arena._grad_buf, mom, None, lr, wd, momentum, 0.5, 0.7)
    for w, p in zip(ref_w, params):
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-6, atol=1e-7)


def test_adam_twin_matches_per_parameter_rule_and_keeps_padding_zero():
    rng = np.random.default_rng(2)
    net, arena, plan = _model_arena()
    params = list(net.collect_params().values())
    n = len(params)
    opts = [mx.optimizer.Adam(learning_rate=0.01, wd=1e-3, rescale_grad=1.0) for _ in range(n)]
    ref_w = [p.data().asnumpy() for p in params]
    states = [o.create_state(0, w) for o, w in zip(opts, ref_w)]
    mean, var = np.zeros_like(arena._data_buf), np.zeros_like(arena._data_buf)
    for t in range(1, 6):
        _fill_grads(net, rng)
        for o, w, p, st in zip(opts, ref_w, params, states):
            o.update(0, w, p.grad().asnumpy(), st)
        lr_t = np.full(n, 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t), dtype=np.float32)
        _fused.adam_arena(plan, mx.cpu(0), arena._data_buf, arena._grad_buf, mean, var, None, lr_t,
                          np.full(n, 1e-3, np.float32), 0.9, 0.999, 1e-8, 1.0, None)
    for w, p in zip(ref_w, params):
        # float32 in a different evaluation order: a few ulp per step
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-5, atol=1e-6)
    live = np.zeros(arena.used, dtype=bool)
    for s in plan.segments:
        live[s.offset: s.offset + s.size] = True
    assert not arena.data[~live].any()  # alignment padding stays zero


def test_half_weights_with_master_follow_the_float32_run():
    rng = np.random.default_rng(3)
    net32, arena32, plan32 = _model_arena("float32")
    net16, arena16, plan16 = _model_arena("float16")
    master = arena16._data_buf.astype(np.float32)
    n = len(plan32.segments)
    lr, wd = np.full(n, 0.1, np.float32), np.zeros(n, np.float32)
    mom32, mom16 = np.zeros_like(arena32._data_buf), np.zeros_like(master)
    for _ in range(3):
        g = rng.normal(size=arena32._grad_buf.shape).astype(np.float32)
        arena32._grad_buf[...] = g
        arena16._grad_buf[...] = g.astype(np.float16)
        _fused.sgd_arena(plan32, mx.cpu(0), arena32._data_buf, arena32._grad_buf, mom32, None, lr, wd, 0.9, 1.0, None)
        _fused.sgd_arena(plan16, mx.cpu(0), arena16._data_buf, arena16._grad_buf, mom16, master, lr, wd, 0.9, 1.0,
                         None)
    np.testing.assert_allclose(master, arena32._data_buf.astype(np.float32), rtol=0, atol=5e-3)
    np.testing.assert_array_equal(arena16._data_buf, master.astype(np.float16))


def test_kernel_source_is_found_and_missing_names_raise():
    assert "adam_update" in _kernels.kernel_source("optimizers.cu")
    with pytest.raises(FileNotFoundError, match="nosuch.cu"):
        _kernels.kernel_source("nosuch.cu")


# -- GPU: the kernels against their twins --------------------------------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-6), ("float16", 1e-3)])
@pytest.mark.parametrize("rule", ["sgd", "adam"])
def test_kernel_matches_twin(rule, dtype, rtol):
    results = []
    for device in (mx.cpu(0), mx.gpu(0)):
        net, arena, plan = _model_arena(dtype, device)
        xp = device.xp
        n = len(plan.segments)
        master = arena._data_buf.astype(np.float32) if dtype == "float16" else None
        s1, s2 = xp.zeros(arena._data_buf.shape, np.float32), xp.zeros(arena._data_buf.shape, np.float32)
        rng = np.random.default_rng(4)
        for _ in range(3):
            arena._grad_buf[...] = xp.asarray(rng.normal(size=arena._grad_buf.shape).astype(dtype))
            lr = np.linspace(0.01, 0.1, n).astype(np.float32)
            wd = np.linspace(0, 1e-2, n).astype(np.float32)
            if rule == "sgd":
                _fused.sgd_arena(plan, device, arena._data_buf, arena._grad_buf, s1, master, lr, wd, 0.9, 0.5, 0.8)
            else:
                _fused.adam_arena(plan, device, arena._data_buf, arena._grad_buf, s1, s2, master, lr, wd,
                                  0.9, 0.999, 1e-8, 0.5, 0.8)
        data = arena._data_buf.get() if device.is_gpu else arena._data_buf
        results.append(np.asarray(data, dtype=np.float64))
    np.testing.assert_allclose(results[1], results[0], rtol=rtol, atol=rtol * 1e-2)
